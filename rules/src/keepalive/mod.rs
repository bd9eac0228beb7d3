//! KEEPALIVE holds: which holds the server renews, for which connection,
//! and when each renewal is due. Bookkeeping only: the server layer renews
//! the holds [`Keepalive::take_due`] hands it, then reschedules them
//! ([`Keepalive::renewed`]) or lets them go ([`Keepalive::unbind_due`]).
//!
//! The lease floor and the renewal timing are `floor.rs`'s.
//!
//! A hold here is an owner's holds of one lock (all of them: a re-entry or a
//! read-write lock's several holds are renewed together, as LOCK.RENEW
//! does). It is bound to one connection: the latest one that acquired it or
//! renewed it with KEEPALIVE. When that connection ends, the binding goes
//! and the hold lives out its current lease.
//!
//! Both paths are hot: every KEEPALIVE acquire binds and every release
//! unbinds (and, once anything is bound, every plain acquire looks for a
//! stale binding), and 100,000 holds with a 30 s lease are thousands of
//! renewals a second. So bindings live in a slab (`slab`); a hold is found
//! by a keyed hash of its lock and owner, computed from borrowed bytes,
//! without building a key (`hashbrown`'s `HashTable` of slots, compared by
//! their bytes); and the schedule
//! maps a due time to the slots due then, each slot knowing its place, so
//! that an unbinding takes it out at once and nothing stale piles up. A
//! renewal handed out and answered later is matched to its slot by the
//! slot's generation, which changes when the slot is reused.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hash, Hasher};

use hashbrown::HashTable;
use slab::Slab;

use crate::ids::{IdMap, IdSet};
use crate::lock_id::LockId;
use crate::names::NameHasher;

mod floor;

pub use floor::{
    check_lease, min_lease_ms, next_renewal, renewal_lateness_ms, HELD_UP_MS, RENEW_DIVISOR,
    TIMER_SLACK_MS,
};

/// A server client id.
pub type ClientId = u64;

/// One kept-alive hold: an owner's holds of one lock. The lock's name and
/// the owner share one allocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    pub db: i32,
    /// The lock's name, then the owner.
    bytes: Box<[u8]>,
    key_len: usize,
}

impl Hold {
    pub fn new(lock: &LockId<'_>, owner: &[u8]) -> Hold {
        let mut bytes = Vec::with_capacity(lock.key.len() + owner.len());
        bytes.extend_from_slice(&lock.key);
        bytes.extend_from_slice(owner);
        Hold {
            db: lock.db,
            bytes: bytes.into_boxed_slice(),
            key_len: lock.key.len(),
        }
    }

    /// The lock's name.
    pub fn key(&self) -> &[u8] {
        &self.bytes[..self.key_len]
    }

    pub fn owner(&self) -> &[u8] {
        &self.bytes[self.key_len..]
    }

    pub fn lock(&self) -> LockId<'_> {
        LockId {
            db: self.db,
            key: Cow::Borrowed(self.key()),
        }
    }

    fn is(&self, lock: &LockId<'_>, owner: &[u8]) -> bool {
        self.db == lock.db && self.key() == &lock.key[..] && self.owner() == owner
    }
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

/// A renewal handed out by [`Keepalive::take_due`], to be answered with
/// [`Keepalive::renewed`] or [`Keepalive::unbind_due`].
#[derive(Debug, Clone)]
pub struct Due {
    pub hold: Hold,
    pub binding: Binding,
    slot: Slot,
}

/// A slab index and the generation of what it held when handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Slot {
    index: usize,
    generation: u64,
}

#[derive(Debug)]
struct Entry {
    hold: Hold,
    binding: Binding,
    /// Changes whenever the slot is reused.
    generation: u64,
    /// Its place in the schedule's list at `binding.due_ms`; `None` while
    /// its renewal is handed out.
    place: Option<usize>,
    /// The keyed hash of the hold.
    hash: u64,
}

/// `S` hashes holds; tests give one under which every hold collides.
#[derive(Debug, Default)]
pub struct Keepalive<S = NameHasher> {
    slab: Slab<Entry>,
    generations: u64,
    /// Lock names and owners are chosen by clients: their hash is keyed.
    hasher: S,
    /// The slot of each hold, by its hash.
    index: HashTable<usize>,
    by_client: IdMap<ClientId, IdSet<usize>>,
    /// Slot indexes by due time.
    schedule: BTreeMap<i64, Vec<usize>>,
}

impl<S: BuildHasher + Default> Keepalive<S> {
    pub fn len(&self) -> usize {
        self.slab.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slab.is_empty()
    }

    /// Binds `hold` to `client`, renewed with `lease_ms` from `now_ms` on.
    /// A hold already bound (to this client or another) is bound afresh,
    /// keeping the time it was first bound. Returns whether it is new.
    pub fn bind(
        &mut self,
        lock: &LockId<'_>,
        owner: &[u8],
        client: ClientId,
        lease_ms: i64,
        now_ms: i64,
    ) -> bool {
        let hash = self.hash_of(lock, owner);
        let since_ms = match self.find_hashed(hash, lock, owner) {
            Some(index) => self.remove(index).map_or(now_ms, |old| old.since_ms),
            None => now_ms,
        };
        let binding = Binding {
            client,
            lease_ms,
            due_ms: next_renewal(now_ms, lease_ms),
            since_ms,
        };
        self.insert(Hold::new(lock, owner), hash, binding);
        since_ms == now_ms
    }

    /// `owner`'s holds of `lock` were given a new lease by the owner (a
    /// re-entry, or LOCK.RENEW without KEEPALIVE): from now on they are
    /// renewed with that lease, the next time half of it from now.
    /// Otherwise a lease shorter than the time to the next renewal would
    /// lapse while the connection lives. Returns whether they are kept
    /// alive.
    pub fn lease_replaced(
        &mut self,
        lock: &LockId<'_>,
        owner: &[u8],
        lease_ms: i64,
        now_ms: i64,
    ) -> bool {
        let Some(index) = self.find(lock, owner) else {
            return false;
        };
        self.unschedule(index);
        if let Some(e) = self.slab.get_mut(index) {
            e.binding.lease_ms = lease_ms;
            e.binding.due_ms = next_renewal(now_ms, lease_ms);
        }
        self.schedule_slot(index);
        true
    }

    /// Stops renewing `owner`'s holds of `lock`.
    pub fn unbind(&mut self, lock: &LockId<'_>, owner: &[u8]) -> Option<Binding> {
        let index = self.find(lock, owner)?;
        self.remove(index)
    }

    /// Stops renewing the holds of `lock` of every one of `owners`.
    pub fn unbind_lock<'o>(
        &mut self,
        lock: &LockId<'_>,
        owners: impl IntoIterator<Item = &'o [u8]>,
    ) -> usize {
        owners
            .into_iter()
            .filter(|owner| self.unbind(lock, owner).is_some())
            .count()
    }

    /// `client`'s connection ended: its holds are no longer renewed.
    /// Returns how many there were.
    pub fn client_gone(&mut self, client: ClientId) -> usize {
        let indexes = self.by_client.remove(&client).unwrap_or_default();
        for &index in &indexes {
            self.vacate(index);
        }
        indexes.len()
    }

    /// Every binding goes (the server stopped being a master).
    pub fn clear(&mut self) {
        *self = Self::default();
    }

    /// The earliest renewal due (perhaps of a binding since gone: then
    /// [`Self::take_due`] at that time hands out nothing).
    pub fn next_due(&self) -> Option<i64> {
        self.schedule.first_key_value().map(|(at, _)| *at)
    }

    /// The holds whose renewal is due at `now_ms`, earliest first. They stay
    /// bound; each must then be [`Self::renewed`] or [`Self::unbind_due`]d.
    pub fn take_due(&mut self, now_ms: i64) -> Vec<Due> {
        let mut due = Vec::new();
        while let Some(entry) = self.schedule.first_entry() {
            if *entry.key() > now_ms {
                break;
            }
            for index in entry.remove() {
                if let Some(e) = self.slab.get_mut(index) {
                    e.place = None;
                    due.push(Due {
                        hold: e.hold.clone(),
                        binding: e.binding,
                        slot: Slot {
                            index,
                            generation: e.generation,
                        },
                    });
                }
            }
        }
        due
    }

    /// `due` was renewed at `now_ms`: its next renewal is scheduled (unless
    /// it was unbound or bound afresh meanwhile).
    pub fn renewed(&mut self, due: &Due, now_ms: i64) {
        let index = due.slot.index;
        match self.slab.get_mut(index) {
            Some(e) if e.generation == due.slot.generation && e.place.is_none() => {
                e.binding.due_ms = next_renewal(now_ms, e.binding.lease_ms);
            }
            _ => return,
        }
        self.schedule_slot(index);
    }

    /// `due` could not be renewed (its owner no longer holds the lock, or
    /// it is held too long): no more renewals. False if it was unbound or
    /// bound afresh meanwhile.
    pub fn unbind_due(&mut self, due: &Due) -> bool {
        let handed_out = matches!(
            self.slab.get(due.slot.index),
            Some(e) if e.generation == due.slot.generation && e.place.is_none()
        );
        handed_out && self.remove(due.slot.index).is_some()
    }

    /// The owners whose holds of `lock` are bound (a walk over every
    /// binding: for rare events, a flushed or deleted election).
    pub fn owners_of(&self, lock: &LockId<'_>) -> Vec<Vec<u8>> {
        self.slab
            .iter()
            .map(|(_, e)| e)
            .filter(|e| e.hold.db == lock.db && e.hold.key() == &lock.key[..])
            .map(|e| e.hold.owner().to_vec())
            .collect()
    }

    /// The binding of `owner`'s holds of `lock`, if any.
    pub fn binding(&self, lock: &LockId<'_>, owner: &[u8]) -> Option<&Binding> {
        let index = self.find(lock, owner)?;
        self.slab.get(index).map(|e| &e.binding)
    }

    fn hash_of(&self, lock: &LockId<'_>, owner: &[u8]) -> u64 {
        let mut h = self.hasher.build_hasher();
        lock.db.hash(&mut h);
        lock.key[..].hash(&mut h);
        owner.hash(&mut h);
        h.finish()
    }

    fn find(&self, lock: &LockId<'_>, owner: &[u8]) -> Option<usize> {
        if self.slab.is_empty() {
            return None;
        }
        self.find_hashed(self.hash_of(lock, owner), lock, owner)
    }

    fn find_hashed(&self, hash: u64, lock: &LockId<'_>, owner: &[u8]) -> Option<usize> {
        let slab = &self.slab;
        self.index
            .find(hash, |&i| {
                slab.get(i).is_some_and(|e| e.hold.is(lock, owner))
            })
            .copied()
    }

    /// Puts slot `index` in the schedule at its binding's due time.
    fn schedule_slot(&mut self, index: usize) {
        let Some(e) = self.slab.get_mut(index) else {
            return;
        };
        let list = self.schedule.entry(e.binding.due_ms).or_default();
        e.place = Some(list.len());
        list.push(index);
    }

    /// Takes slot `index` out of the schedule, if it is in it.
    fn unschedule(&mut self, index: usize) {
        let Some(e) = self.slab.get_mut(index) else {
            return;
        };
        let (Some(place), due_ms) = (e.place.take(), e.binding.due_ms) else {
            return;
        };
        let Some(list) = self.schedule.get_mut(&due_ms) else {
            return;
        };
        if place < list.len() {
            list.swap_remove(place);
        }
        match list.get(place).copied() {
            Some(moved) => {
                if let Some(m) = self.slab.get_mut(moved) {
                    m.place = Some(place);
                }
            }
            None if list.is_empty() => {
                self.schedule.remove(&due_ms);
            }
            None => {}
        }
    }

    fn insert(&mut self, hold: Hold, hash: u64, binding: Binding) {
        self.generations += 1;
        let index = self.slab.insert(Entry {
            hold,
            binding,
            generation: self.generations,
            place: None,
            hash,
        });
        let slab = &self.slab;
        self.index
            .insert_unique(hash, index, |&i| slab.get(i).map_or(0, |e| e.hash));
        self.schedule_slot(index);
        self.by_client
            .entry(binding.client)
            .or_default()
            .insert(index);
    }

    /// Unbinds slot `index`. Its client's set stays, empty or not, until
    /// the client leaves: a client that takes and releases one hold at a
    /// time would otherwise build and free a set on every cycle.
    fn remove(&mut self, index: usize) -> Option<Binding> {
        let b = self.vacate(index)?;
        if let Some(slots) = self.by_client.get_mut(&b.client) {
            slots.remove(&index);
        }
        Some(b)
    }

    /// Empties slot `index`, taking it out of the schedule and of the index;
    /// its client's set is the caller's business.
    fn vacate(&mut self, index: usize) -> Option<Binding> {
        self.unschedule(index);
        let e = self.slab.try_remove(index)?;
        if let Ok(found) = self.index.find_entry(e.hash, |&i| i == index) {
            found.remove();
        }
        Some(e.binding)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;
    use std::hash::BuildHasherDefault;

    fn lock(key: &str) -> LockId<'static> {
        LockId {
            db: 0,
            key: Cow::Owned(key.as_bytes().to_vec()),
        }
    }

    fn hold(key: &str, owner: &str) -> Hold {
        Hold::new(&lock(key), owner.as_bytes())
    }

    fn holds(due: &[Due]) -> Vec<Hold> {
        due.iter().map(|d| d.hold.clone()).collect()
    }

    fn bind(
        k: &mut Keepalive<impl BuildHasher + Default>,
        h: Hold,
        client: u64,
        lease: i64,
        now: i64,
    ) -> bool {
        k.bind(&h.lock(), h.owner(), client, lease, now)
    }

    /// Every hold hashes alike: every lookup walks a chain.
    #[derive(Default)]
    struct Collide;

    impl Hasher for Collide {
        fn finish(&self) -> u64 {
            7
        }
        fn write(&mut self, _: &[u8]) {}
    }

    type Colliding = Keepalive<BuildHasherDefault<Collide>>;

    #[test]
    fn holds_are_renewed_at_half_their_lease() {
        let mut k: Keepalive = Keepalive::default();
        assert!(bind(&mut k, hold("a", "o"), 7, 3000, 1000));
        assert!(bind(&mut k, hold("b", "o"), 7, 300, 1000));
        assert_eq!(k.next_due(), Some(1150));
        assert!(k.take_due(1149).is_empty());
        let due = k.take_due(1150);
        assert_eq!(holds(&due), vec![hold("b", "o")]);
        k.renewed(&due[0], 1155);
        assert_eq!(k.next_due(), Some(1305));
        // Nothing taken is lost: "a" is still due at 2500.
        assert_eq!(
            holds(&k.take_due(2500)),
            vec![hold("b", "o"), hold("a", "o")]
        );
        assert_eq!(k.len(), 2);
        assert_eq!(next_renewal(0, 2), 1, "never less than a millisecond");
    }

    #[test]
    fn a_client_that_leaves_takes_its_bindings_along() {
        let mut k: Keepalive = Keepalive::default();
        bind(&mut k, hold("a", "o1"), 1, 900, 0);
        bind(&mut k, hold("a", "o2"), 2, 900, 0);
        bind(&mut k, hold("b", "o1"), 1, 900, 0);
        assert_eq!(k.binding(&lock("a"), b"o2").map(|b| b.client), Some(2));
        assert_eq!(k.client_gone(1), 2);
        assert_eq!(k.len(), 1);
        assert_eq!(k.binding(&lock("a"), b"o1"), None);
        assert_eq!(k.binding(&lock("b"), b"o1"), None);
        assert_eq!(k.take_due(10_000).len(), 1);
        assert_eq!(k.client_gone(1), 0);
    }

    #[test]
    fn binding_again_moves_a_hold_to_the_new_connection_and_keeps_its_start() {
        let mut k: Keepalive = Keepalive::default();
        bind(&mut k, hold("a", "o"), 1, 900, 100);
        assert!(!bind(&mut k, hold("a", "o"), 2, 600, 500));
        let b = *k.binding(&lock("a"), b"o").unwrap();
        assert_eq!(
            (b.client, b.lease_ms, b.due_ms, b.since_ms),
            (2, 600, 800, 100)
        );
        assert_eq!(k.client_gone(1), 0, "the old connection no longer has it");
        assert_eq!(k.len(), 1);
        assert_eq!(k.take_due(799).len(), 0);
        assert_eq!(k.take_due(800).len(), 1);
    }

    #[test]
    fn unbinding_a_lock_or_a_hold_stops_its_renewals() {
        let mut k: Keepalive = Keepalive::default();
        bind(&mut k, hold("a", "o1"), 1, 900, 0);
        bind(&mut k, hold("a", "o2"), 1, 900, 0);
        bind(&mut k, hold("b", "o1"), 1, 900, 0);
        assert!(k.unbind(&lock("b"), b"o1").is_some());
        assert!(k.unbind(&lock("b"), b"o1").is_none());
        assert_eq!(k.unbind_lock(&lock("a"), [&b"o1"[..], b"o2", b"o3"]), 2);
        assert!(k.is_empty());
        assert_eq!(k.next_due(), None);
        assert_eq!(k.client_gone(1), 0);
    }

    #[test]
    fn a_new_lease_from_the_owner_is_the_one_renewed_from_then_on() {
        let mut k: Keepalive = Keepalive::default();
        bind(&mut k, hold("a", "o"), 1, 30_000, 0);
        // A re-entry with a 3 s lease at 1000: renewed at 2500, not 15000.
        assert!(k.lease_replaced(&lock("a"), b"o", 3000, 1000));
        let b = *k.binding(&lock("a"), b"o").unwrap();
        assert_eq!((b.lease_ms, b.since_ms, b.client), (3000, 0, 1));
        // Once, at 2500: its old renewal at 15000 is gone.
        assert_eq!(k.take_due(2500).len(), 1);
        assert!(k.take_due(20_000).is_empty());
        assert!(!k.lease_replaced(&lock("b"), b"o", 3000, 1000), "not bound");
        assert_eq!(k.len(), 1);
    }

    #[test]
    fn a_renewal_answered_after_its_hold_was_unbound_or_bound_afresh_changes_nothing() {
        let mut k: Keepalive = Keepalive::default();
        bind(&mut k, hold("a", "o"), 1, 300, 0);
        bind(&mut k, hold("b", "o"), 1, 300, 0);
        let due = k.take_due(150);
        assert_eq!(due.len(), 2);
        // "a" unbound while its renewal ran, and its slot taken by "c".
        assert!(k.unbind(&lock("a"), b"o").is_some());
        bind(&mut k, hold("c", "o"), 2, 300, 100);
        k.renewed(&due[0], 100);
        assert!(!k.unbind_due(&due[0]));
        assert_eq!(k.binding(&lock("c"), b"o").map(|b| b.due_ms), Some(250));
        // "b" bound afresh by another connection meanwhile: the old
        // renewal's answer does not touch the new binding.
        bind(&mut k, hold("b", "o"), 3, 600, 100);
        assert!(!k.unbind_due(&due[1]));
        assert_eq!(k.binding(&lock("b"), b"o").map(|b| b.client), Some(3));
        assert_eq!(
            holds(&k.take_due(400)),
            vec![hold("c", "o"), hold("b", "o")]
        );
        assert_eq!(k.len(), 2);
        assert!(k.take_due(i64::MAX).is_empty(), "nothing scheduled twice");
    }

    #[test]
    fn a_due_renewal_that_fails_unbinds_its_hold_from_its_client_too() {
        let mut k: Keepalive = Keepalive::default();
        bind(&mut k, hold("a", "o"), 7, 300, 0);
        let due = k.take_due(150);
        assert!(k.unbind_due(&due[0]));
        assert!(k.is_empty());
        assert_eq!(k.client_gone(7), 0);
        assert_eq!(k.next_due(), None);
    }

    #[test]
    fn holds_whose_hashes_collide_are_told_apart() {
        let mut k = Colliding::default();
        let other_db = Hold::new(&LockId { db: 1, ..lock("a") }, b"o");
        for (i, h) in [
            hold("a", "o"),
            hold("a", "p"),
            hold("b", "o"),
            other_db.clone(),
        ]
        .into_iter()
        .enumerate()
        {
            assert!(bind(&mut k, h, i as u64, 300, 0));
        }
        let client = |k: &Colliding, h: &Hold| k.binding(&h.lock(), h.owner()).map(|b| b.client);
        assert_eq!(client(&k, &hold("a", "p")), Some(1));
        assert_eq!(client(&k, &other_db), Some(3));
        assert_eq!(client(&k, &hold("c", "o")), None);
        // Out of the middle, the head and the tail of the chain.
        assert!(k.unbind(&lock("b"), b"o").is_some());
        assert!(k.unbind(&other_db.lock(), b"o").is_some());
        assert!(k.unbind(&lock("a"), b"o").is_some());
        assert_eq!(client(&k, &hold("a", "p")), Some(1));
        assert_eq!(k.len(), 1);
        // A reused slot joins the chain again.
        bind(&mut k, hold("d", "o"), 9, 300, 0);
        assert_eq!(client(&k, &hold("d", "o")), Some(9));
        assert_eq!(k.client_gone(1), 1);
        assert_eq!(client(&k, &hold("d", "o")), Some(9));
        assert_eq!(client(&k, &hold("a", "p")), None);
        assert_eq!(holds(&k.take_due(150)), vec![hold("d", "o")]);
    }

    /// Random binds, unbinds, disconnections and renewals against a plain
    /// map of what is bound: every hold bound is handed out once when due,
    /// at its due time, and nothing else is.
    #[test]
    fn the_schedule_hands_out_exactly_what_is_bound_when_it_is_due() {
        use std::collections::HashMap;
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for _ in 0..20 {
            let mut k = Colliding::default();
            let mut model: HashMap<(String, String), (u64, i64)> = HashMap::new();
            let mut now = 0;
            for _ in 0..400 {
                let key = format!("k{}", next(6));
                let owner = format!("o{}", next(3));
                match next(10) {
                    0..=3 => {
                        let client = next(4);
                        let lease = 2 + next(40) as i64;
                        bind(&mut k, hold(&key, &owner), client, lease, now);
                        model.insert((key, owner), (client, next_renewal(now, lease)));
                    }
                    4 | 5 => {
                        let was = k.unbind(&lock(&key), owner.as_bytes()).is_some();
                        assert_eq!(was, model.remove(&(key, owner)).is_some());
                    }
                    6 => {
                        let client = next(4);
                        let gone = k.client_gone(client);
                        let before = model.len();
                        model.retain(|_, (c, _)| *c != client);
                        assert_eq!(gone, before - model.len());
                    }
                    _ => {
                        now += next(15) as i64;
                        let mut got: Vec<(String, String)> = Vec::new();
                        for due in k.take_due(now) {
                            let name = String::from_utf8_lossy(due.hold.key()).into_owned();
                            let owner = String::from_utf8_lossy(due.hold.owner()).into_owned();
                            let (_, due_ms) = model[&(name.clone(), owner.clone())];
                            assert!(due_ms <= now, "handed out before it was due");
                            assert_eq!(due.binding.due_ms, due_ms);
                            if next(4) == 0 {
                                assert!(k.unbind_due(&due));
                                model.remove(&(name.clone(), owner.clone()));
                            } else {
                                k.renewed(&due, now);
                                let entry = model.get_mut(&(name.clone(), owner.clone())).unwrap();
                                entry.1 = next_renewal(now, due.binding.lease_ms);
                            }
                            got.push((name, owner));
                        }
                        let mut want: Vec<(String, String)> = model
                            .iter()
                            .filter(|(_, (_, due))| *due <= now)
                            .map(|(h, _)| h.clone())
                            .collect();
                        // Those renewed just now are due later again.
                        want.retain(|h| !got.contains(h));
                        assert!(want.is_empty(), "due but not handed out: {want:?}");
                    }
                }
                assert_eq!(k.len(), model.len());
                for ((key, owner), (client, due)) in &model {
                    let b = k.binding(&lock(key), owner.as_bytes()).copied();
                    assert_eq!(b.map(|b| (b.client, b.due_ms)), Some((*client, *due)));
                }
            }
        }
    }
}
