//! KEEPALIVE holds: which holds the server renews, for which connection,
//! and when each renewal is due. Bookkeeping only: the server layer renews
//! the holds [`Keepalive::take_due`] hands it, then reschedules them
//! ([`Keepalive::renewed`]) or lets them go ([`Keepalive::unbind`]).
//!
//! A hold here is an owner's holds of one lock (all of them: a re-entry or a
//! read-write lock's several holds are renewed together, as LOCK.RENEW
//! does). It is bound to one connection: the latest one that acquired it or
//! renewed it with KEEPALIVE. When that connection ends, the binding goes
//! and the hold lives out its current lease.

use std::collections::{BTreeSet, HashMap, HashSet};

use crate::ids::IdMap;
use crate::registry::LockId;
use crate::request::FieldName;

/// A server client id.
pub type ClientId = u64;

/// A lease is renewed once this fraction of it has passed (Redisson's
/// watchdog renews every third of its lease too), so a renewal can be late
/// by up to two thirds of the lease before the hold lapses.
pub const RENEW_DIVISOR: i64 = 3;

/// When a hold bound with `lease_ms` is next renewed, from `now_ms`.
pub fn next_renewal(now_ms: i64, lease_ms: i64) -> i64 {
    now_ms.saturating_add((lease_ms / RENEW_DIVISOR).max(1))
}

/// One kept-alive hold: an owner's holds of one lock.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Hold {
    pub lock: LockId<'static>,
    pub owner: FieldName,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Binding {
    pub client: ClientId,
    /// The lease each renewal sets, from the time of the renewal.
    pub lease_ms: i64,
    /// When the next renewal is due (unix ms).
    pub due_ms: i64,
    /// When the hold was first bound (unix ms), for the maximum hold time.
    pub since_ms: i64,
}

#[derive(Debug, Default)]
pub struct Keepalive {
    bindings: HashMap<Hold, Binding>,
    by_client: IdMap<ClientId, HashSet<Hold>>,
    /// The owners with a binding, per lock (for LOCK.INFO).
    by_lock: HashMap<LockId<'static>, HashSet<FieldName>>,
    /// Renewals by due time.
    schedule: BTreeSet<(i64, Hold)>,
}

impl Keepalive {
    pub fn len(&self) -> usize {
        self.bindings.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bindings.is_empty()
    }

    /// Binds `hold` to `client`, renewed with `lease_ms` from `now_ms` on.
    /// A hold already bound (to this client or another) is bound afresh,
    /// keeping the time it was first bound. Returns whether it is new.
    pub fn bind(&mut self, hold: Hold, client: ClientId, lease_ms: i64, now_ms: i64) -> bool {
        let since_ms = match self.remove(&hold) {
            Some(old) => old.since_ms,
            None => now_ms,
        };
        let binding = Binding {
            client,
            lease_ms,
            due_ms: next_renewal(now_ms, lease_ms),
            since_ms,
        };
        self.insert(hold, binding);
        since_ms == now_ms
    }

    /// Stops renewing `hold`.
    pub fn unbind(&mut self, hold: &Hold) -> Option<Binding> {
        self.remove(hold)
    }

    /// Stops renewing every hold of `lock`.
    pub fn unbind_lock(&mut self, lock: &LockId<'_>) -> usize {
        let owners: Vec<FieldName> = self
            .by_lock
            .get(&lock.to_owned())
            .map(|o| o.iter().cloned().collect())
            .unwrap_or_default();
        let lock = lock.to_owned();
        owners
            .into_iter()
            .filter_map(|owner| {
                self.remove(&Hold {
                    lock: lock.clone(),
                    owner,
                })
            })
            .count()
    }

    /// `hold` was given a new lease by its owner (a re-entry, or LOCK.RENEW
    /// without KEEPALIVE): from now on it is renewed with that lease, the
    /// next time a third of it from now. Otherwise a lease shorter than the
    /// time to the next renewal would lapse while the connection lives.
    /// Returns whether the hold is kept alive.
    pub fn lease_replaced(&mut self, hold: &Hold, lease_ms: i64, now_ms: i64) -> bool {
        let Some(b) = self.bindings.get_mut(hold) else {
            return false;
        };
        self.schedule.remove(&(b.due_ms, hold.clone()));
        b.lease_ms = lease_ms;
        b.due_ms = next_renewal(now_ms, lease_ms);
        self.schedule.insert((b.due_ms, hold.clone()));
        true
    }

    /// `client`'s connection ended: its holds are no longer renewed.
    /// Returns how many there were.
    pub fn client_gone(&mut self, client: ClientId) -> usize {
        let holds = self.by_client.remove(&client).unwrap_or_default();
        for hold in &holds {
            if let Some(b) = self.bindings.remove(hold) {
                self.schedule.remove(&(b.due_ms, hold.clone()));
                self.forget_owner(hold);
            }
        }
        holds.len()
    }

    /// Every binding goes (the server stopped being a master).
    pub fn clear(&mut self) {
        *self = Self::default();
    }

    /// The earliest renewal due.
    pub fn next_due(&self) -> Option<i64> {
        self.schedule.first().map(|(at, _)| *at)
    }

    /// The holds whose renewal is due at `now_ms`, earliest first. They stay
    /// bound; each must then be [`Self::renewed`] or [`Self::unbind`]ed.
    pub fn take_due(&mut self, now_ms: i64) -> Vec<(Hold, Binding)> {
        let mut due = Vec::new();
        while let Some((at, _)) = self.schedule.first() {
            if *at > now_ms {
                break;
            }
            if let Some((_, hold)) = self.schedule.pop_first() {
                if let Some(b) = self.bindings.get(&hold) {
                    due.push((hold, *b));
                }
            }
        }
        due
    }

    /// `hold` was renewed at `now_ms`: the next renewal is scheduled.
    pub fn renewed(&mut self, hold: &Hold, now_ms: i64) {
        let Some(b) = self.bindings.get_mut(hold) else {
            return;
        };
        self.schedule.remove(&(b.due_ms, hold.clone()));
        b.due_ms = next_renewal(now_ms, b.lease_ms);
        self.schedule.insert((b.due_ms, hold.clone()));
    }

    /// The binding of `hold`, if any.
    pub fn binding(&self, hold: &Hold) -> Option<&Binding> {
        self.bindings.get(hold)
    }

    /// The owners of `lock` whose holds are kept alive, with their clients.
    pub fn bound_owners(&self, lock: &LockId<'_>) -> Vec<(FieldName, ClientId)> {
        let Some(owners) = self.by_lock.get(&lock.to_owned()) else {
            return Vec::new();
        };
        let mut out: Vec<(FieldName, ClientId)> = owners
            .iter()
            .filter_map(|owner| {
                let hold = Hold {
                    lock: lock.to_owned(),
                    owner: owner.clone(),
                };
                self.bindings.get(&hold).map(|b| (owner.clone(), b.client))
            })
            .collect();
        out.sort();
        out
    }

    fn insert(&mut self, hold: Hold, binding: Binding) {
        self.schedule.insert((binding.due_ms, hold.clone()));
        self.by_client
            .entry(binding.client)
            .or_default()
            .insert(hold.clone());
        self.by_lock
            .entry(hold.lock.clone())
            .or_default()
            .insert(hold.owner.clone());
        self.bindings.insert(hold, binding);
    }

    fn remove(&mut self, hold: &Hold) -> Option<Binding> {
        let b = self.bindings.remove(hold)?;
        self.schedule.remove(&(b.due_ms, hold.clone()));
        if let Some(holds) = self.by_client.get_mut(&b.client) {
            holds.remove(hold);
            if holds.is_empty() {
                self.by_client.remove(&b.client);
            }
        }
        self.forget_owner(hold);
        Some(b)
    }

    fn forget_owner(&mut self, hold: &Hold) {
        if let Some(owners) = self.by_lock.get_mut(&hold.lock) {
            owners.remove(&hold.owner);
            if owners.is_empty() {
                self.by_lock.remove(&hold.lock);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;

    fn hold(key: &str, owner: &str) -> Hold {
        Hold {
            lock: LockId {
                db: 0,
                key: Cow::Owned(key.as_bytes().to_vec()),
            },
            owner: owner.as_bytes().into(),
        }
    }

    #[test]
    fn holds_are_renewed_every_third_of_their_lease() {
        let mut k = Keepalive::default();
        assert!(k.bind(hold("a", "o"), 7, 3000, 1000));
        assert!(k.bind(hold("b", "o"), 7, 300, 1000));
        assert_eq!(k.next_due(), Some(1100));
        assert!(k.take_due(1099).is_empty());
        let due = k.take_due(1100);
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].0, hold("b", "o"));
        k.renewed(&hold("b", "o"), 1105);
        assert_eq!(k.next_due(), Some(1205));
        // Nothing taken is lost: "a" is still due at 2000.
        let due: Vec<Hold> = k.take_due(2000).into_iter().map(|(h, _)| h).collect();
        assert_eq!(due, vec![hold("b", "o"), hold("a", "o")]);
        assert_eq!(k.len(), 2);
        assert_eq!(next_renewal(0, 2), 1, "never less than a millisecond");
    }

    #[test]
    fn a_client_that_leaves_takes_its_bindings_along() {
        let mut k = Keepalive::default();
        k.bind(hold("a", "o1"), 1, 900, 0);
        k.bind(hold("a", "o2"), 2, 900, 0);
        k.bind(hold("b", "o1"), 1, 900, 0);
        assert_eq!(
            k.bound_owners(&hold("a", "x").lock),
            vec![(b"o1"[..].into(), 1), (b"o2"[..].into(), 2)]
        );
        assert_eq!(k.client_gone(1), 2);
        assert_eq!(k.len(), 1);
        assert_eq!(k.bound_owners(&hold("b", "x").lock), vec![]);
        assert_eq!(k.take_due(10_000).len(), 1);
        assert_eq!(k.client_gone(1), 0);
    }

    #[test]
    fn binding_again_moves_a_hold_to_the_new_connection_and_keeps_its_start() {
        let mut k = Keepalive::default();
        k.bind(hold("a", "o"), 1, 900, 100);
        assert!(!k.bind(hold("a", "o"), 2, 600, 500));
        let b = *k.binding(&hold("a", "o")).unwrap();
        assert_eq!(
            (b.client, b.lease_ms, b.due_ms, b.since_ms),
            (2, 600, 700, 100)
        );
        assert_eq!(k.client_gone(1), 0, "the old connection no longer has it");
        assert_eq!(k.len(), 1);
        assert_eq!(k.take_due(699).len(), 0);
        assert_eq!(k.take_due(700).len(), 1);
    }

    #[test]
    fn unbinding_a_lock_or_a_hold_stops_its_renewals() {
        let mut k = Keepalive::default();
        k.bind(hold("a", "o1"), 1, 900, 0);
        k.bind(hold("a", "o2"), 1, 900, 0);
        k.bind(hold("b", "o1"), 1, 900, 0);
        assert!(k.unbind(&hold("b", "o1")).is_some());
        assert!(k.unbind(&hold("b", "o1")).is_none());
        assert_eq!(k.unbind_lock(&hold("a", "x").lock), 2);
        assert!(k.is_empty());
        assert_eq!(k.next_due(), None);
        assert_eq!(k.client_gone(1), 0);
    }

    #[test]
    fn a_new_lease_from_the_owner_is_the_one_renewed_from_then_on() {
        let mut k = Keepalive::default();
        k.bind(hold("a", "o"), 1, 30_000, 0);
        // A re-entry with a 3 s lease at 1000: renewed by 2000, not 10000.
        assert!(k.lease_replaced(&hold("a", "o"), 3000, 1000));
        assert_eq!(k.next_due(), Some(2000));
        let b = *k.binding(&hold("a", "o")).unwrap();
        assert_eq!((b.lease_ms, b.since_ms, b.client), (3000, 0, 1));
        assert_eq!(k.take_due(2000).len(), 1);
        assert!(!k.lease_replaced(&hold("b", "o"), 3000, 1000), "not bound");
        assert_eq!(k.len(), 1);
    }
}
