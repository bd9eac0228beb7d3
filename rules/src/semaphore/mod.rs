//! The semaphore rules: who gets permits, what is written, who is woken,
//! what is replied. A semaphore is Redisson's layout (so its
//! `RSemaphore` and `RPermitExpirableSemaphore` clients share it): a
//! counter of the permits available, and a sorted set of the permits held,
//! one member per permit, scored by the unix ms at which its lease ends.
//! A permit held by an owner of the SEM.* commands is the member
//! `<owner>:<i>`; a Redisson permit is its own random id.
//!
//! The Redis layer reads both keys into a [`SemaphoreState`], runs one
//! [`SemaphoreTransition`] on the key's wait queue, then writes what
//! [`SemaphoreTransition::finish`] lists and answers the wakes. Every
//! transition first takes back permits whose lease ended (as Redisson's
//! scripts do), and every one that gives permits back serves the queue from
//! its head, so the order is one FIFO whatever freed the permits: the first
//! in line is served as soon as enough are available, and nobody behind it
//! before it (a caller asking for 3 is not overtaken by callers asking for
//! 1, as in a fair `java.util.concurrent.Semaphore`).

use crate::error::LockError;
use crate::queue::Fifo;
use crate::request::{Queued, Request};
use crate::transition::{next_token, Acquisition, TokenValue, Verdict, Wake};

mod member;
mod state;
mod writes;

pub use member::{owner_of, permit_id};
pub use state::{HolderView, Permit, SemaphoreState, SemaphoreView, MAX_PERMITS, NEVER};
pub use writes::{SemaphoreTally, SemaphoreWrites};

use state::expired;

/// One atomic change of one semaphore.
#[derive(Debug)]
pub struct SemaphoreTransition<T> {
    /// The permits as read, by id (to tell what changed).
    before: Vec<Permit>,
    available_before: Option<i64>,
    state: SemaphoreState,
    now_ms: i64,
    token: TokenValue,
    token_write: Option<(i64, i64)>,
    /// Permits came back (released, expired, added): Redisson's waiters
    /// hear the count.
    returned: bool,
    pub wakes: Vec<Wake<T>>,
    pub tally: SemaphoreTally,
}

impl<T: Queued> SemaphoreTransition<T> {
    pub fn new(state: SemaphoreState, now_ms: i64, token: TokenValue) -> Self {
        Self {
            before: {
                let mut before = state.permits.clone();
                before.sort_unstable_by(|a, b| a.id.cmp(&b.id));
                before
            },
            available_before: state.available,
            state,
            now_ms,
            token,
            token_write: None,
            returned: false,
            wakes: Vec::new(),
            tally: SemaphoreTally::default(),
        }
    }

    pub fn state(&self) -> &SemaphoreState {
        &self.state
    }

    pub fn now_ms(&self) -> i64 {
        self.now_ms
    }

    fn available(&self) -> i64 {
        self.state.available.unwrap_or(0)
    }

    fn add_available(&mut self, n: i64) {
        self.state.available = Some(self.available().saturating_add(n));
    }

    /// The earliest lease end among the permits held: when a semaphore
    /// with waiters must be looked at again.
    pub fn next_end(&self) -> Option<i64> {
        self.state
            .permits
            .iter()
            .map(|p| p.until)
            .filter(|&until| until < NEVER)
            .min()
    }

    /// Takes back every permit whose lease ended, as Redisson's scripts do
    /// before anything else.
    pub fn reclaim_expired(&mut self) {
        let now = self.now_ms;
        let before = self.state.permits.len();
        self.state.permits.retain(|p| !expired(p.until, now));
        let n = (before - self.state.permits.len()) as i64;
        if n > 0 {
            self.add_available(n);
            self.tally.expired += n as u64;
            self.returned = true;
        }
    }

    /// `owner`'s live permits' indexes (in the set), and whether it had
    /// permits whose lease ended.
    fn permits_of(&self, owner: &[u8]) -> (Vec<usize>, bool) {
        let mut live = Vec::new();
        let mut ended = false;
        for (i, p) in self.state.permits.iter().enumerate() {
            if owner_of(&p.id).is_some_and(|(o, _)| o == owner) {
                if expired(p.until, self.now_ms) {
                    ended = true;
                } else {
                    live.push(i);
                }
            }
        }
        (live, ended)
    }

    /// How many live permits `owner` holds.
    pub fn held_by(&self, owner: &[u8]) -> usize {
        self.permits_of(owner).0.len()
    }

    /// Permits held by owners (not expired).
    fn held(&self) -> i64 {
        let now = self.now_ms;
        self.state
            .permits
            .iter()
            .filter(|p| !expired(p.until, now))
            .count() as i64
    }

    /// SEM.ACQUIRE / SEM.TAKE: waiters first (a caller never overtakes the
    /// queue), then the caller if enough permits are available.
    pub fn acquire(
        &mut self,
        queue: &mut Fifo<T>,
        req: &Request,
        may_wait: bool,
    ) -> Result<Acquisition, LockError> {
        self.settle(queue);
        let n = i64::from(req.kind.permits().unwrap_or(1));
        if queue.is_empty() && self.available() >= n {
            let reply = self.grant(req)?;
            self.tally.acquired += 1;
            return Ok(Acquisition::Now(reply));
        }
        Ok(if may_wait {
            Acquisition::Wait
        } else {
            Acquisition::Busy
        })
    }

    /// A lease's end; a lease reaching past Redisson's "never" is one.
    fn until(&self, lease_ms: i64) -> i64 {
        self.now_ms.saturating_add(lease_ms).min(NEVER)
    }

    /// Gives `req` its permits: an owner's are added to the ones it holds,
    /// and all of them get the new lease; SEM.TAKE's only leave the counter.
    fn grant(&mut self, req: &Request) -> Result<i64, LockError> {
        let n = req.kind.permits().unwrap_or(1);
        if req.owner.is_empty() {
            self.add_available(-i64::from(n));
            return Ok(i64::from(n));
        }
        let until = self.until(req.lease_ms);
        let token = if req.fence {
            Some(next_token(&self.token, self.now_ms)?)
        } else {
            None
        };
        let (live, _) = self.permits_of(&req.owner);
        let mut used: Vec<u32> = Vec::with_capacity(live.len());
        for &i in &live {
            let permit = &mut self.state.permits[i];
            permit.until = until;
            if let Some((_, index)) = owner_of(&permit.id) {
                used.push(index);
            }
        }
        used.sort_unstable();
        let mut next = 1u32;
        let mut used = used.into_iter().peekable();
        for _ in 0..n {
            while used.peek() == Some(&next) {
                used.next();
                next += 1;
            }
            self.state.permits.push(Permit {
                id: permit_id(&req.owner, next),
                until,
            });
            next += 1;
        }
        self.add_available(-i64::from(n));
        let held = live.len() as i64 + i64::from(n);
        Ok(match token {
            Some(token) => {
                self.token = Some(Ok(token));
                self.token_write = Some((token, until));
                token
            }
            None => held,
        })
    }

    /// Serves the queue from its head while the head's permits are
    /// available; a lock caller queued there (the key was missing when it
    /// queued) is answered WRONGTYPE.
    pub fn settle(&mut self, queue: &mut Fifo<T>) {
        self.reclaim_expired();
        loop {
            let Some((_, head)) = queue.front() else {
                return;
            };
            let req = head.request();
            let fits = match req.kind.permits() {
                Some(n) if !head.in_group() => self.available() >= i64::from(n),
                // Not a semaphore caller: answered below.
                _ => true,
            };
            if !fits {
                return;
            }
            let Some((id, waiter)) = queue.pop_front() else {
                return;
            };
            let req = waiter.request();
            let held = !req.owner.is_empty() && self.held_by(&req.owner) > 0;
            let verdict = match req.kind.permits() {
                Some(_) if !waiter.in_group() => match self.grant(req) {
                    Ok(reply) => {
                        self.tally.acquired += 1;
                        self.tally.handed_off += 1;
                        Verdict::Granted(reply)
                    }
                    Err(e) => Verdict::Failed(e),
                },
                _ => Verdict::Failed(LockError::wrong_type()),
            };
            self.wakes.push(Wake {
                id,
                waiter,
                verdict,
                held,
            });
        }
    }

    /// SEM.RELEASE: gives back `n` of `owner`'s permits (all without `n`),
    /// highest index first, then serves the queue. Returns the permits it
    /// still holds.
    pub fn release(
        &mut self,
        queue: &mut Fifo<T>,
        owner: &[u8],
        n: Option<u32>,
    ) -> Result<i64, LockError> {
        let (mut live, ended) = self.permits_of(owner);
        if live.is_empty() {
            return Err(self.none_held(ended, queue));
        }
        let n = n.map_or(live.len(), |n| n as usize);
        if n > live.len() {
            return Err(LockError::fewer_permits(live.len(), n as u32));
        }
        live.sort_by_key(|&i| {
            std::cmp::Reverse(owner_of(&self.state.permits[i].id).map_or(0, |(_, index)| index))
        });
        let mut drop: Vec<usize> = live[..n].to_vec();
        drop.sort_unstable_by(|a, b| b.cmp(a));
        for i in drop {
            self.state.permits.swap_remove(i);
        }
        self.add_available(n as i64);
        self.tally.released += n as u64;
        self.returned = true;
        self.settle(queue);
        Ok((live.len() - n) as i64)
    }

    /// The error for an owner with no live permit: EXPIRED if its permits
    /// were still recorded with their lease over (they go back now, and the
    /// queue is served), NOTOWNER otherwise.
    fn none_held(&mut self, ended: bool, queue: &mut Fifo<T>) -> LockError {
        if ended {
            self.settle(queue);
            LockError::permits_expired()
        } else {
            LockError::no_permits()
        }
    }

    /// SEM.RENEW: a new lease on all of `owner`'s permits. Returns how many
    /// it holds.
    pub fn renew(
        &mut self,
        queue: &mut Fifo<T>,
        owner: &[u8],
        lease_ms: i64,
    ) -> Result<i64, LockError> {
        let (live, ended) = self.permits_of(owner);
        if live.is_empty() {
            return Err(self.none_held(ended, queue));
        }
        let until = self.until(lease_ms);
        for &i in &live {
            self.state.permits[i].until = until;
        }
        Ok(live.len() as i64)
    }

    /// SEM.INIT: sets the permits once, when the counter does not exist;
    /// permits still held count against `permits`. Returns whether it set
    /// them.
    pub fn init(&mut self, queue: &mut Fifo<T>, permits: i64) -> bool {
        if self.state.available.is_some() {
            return false;
        }
        self.reclaim_expired();
        self.state.available = Some(permits - self.held());
        self.returned = true;
        self.settle(queue);
        true
    }

    /// SEM.ADD: `delta` more permits (fewer if negative), the total
    /// (available plus held) kept within 0 to [`MAX_PERMITS`]. Returns the
    /// permits available.
    pub fn add(&mut self, queue: &mut Fifo<T>, delta: i64) -> Result<i64, LockError> {
        // Permits whose lease ended count as available: the total is the
        // same before and after they are taken back, and a refusal changes
        // nothing.
        let total =
            i128::from(self.available()) + self.state.permits.len() as i128 + i128::from(delta);
        if !(0..=i128::from(MAX_PERMITS)).contains(&total) {
            return Err(LockError::permits_out_of_range("SEM.ADD", total));
        }
        self.reclaim_expired();
        self.add_available(delta);
        if delta > 0 {
            self.returned = true;
        }
        self.settle(queue);
        Ok(self.available())
    }

    /// SEM.GIVE: `n` owner-less permits back to the counter (created if
    /// missing), as RSemaphore's release. Returns the permits available.
    pub fn give(&mut self, queue: &mut Fifo<T>, n: u32) -> Result<i64, LockError> {
        let ended = self
            .state
            .permits
            .iter()
            .filter(|p| expired(p.until, self.now_ms))
            .count();
        let after = i128::from(self.available()) + ended as i128 + i128::from(n);
        if after > i128::from(MAX_PERMITS) {
            return Err(LockError::permits_out_of_range("SEM.GIVE", after));
        }
        self.reclaim_expired();
        self.add_available(i64::from(n));
        self.returned = true;
        self.settle(queue);
        Ok(self.available())
    }

    /// Answers every waiter with `error`: the key now holds another type,
    /// or this node no longer serves it.
    pub fn reject_all(&mut self, queue: &mut Fifo<T>, error: &LockError) {
        while let Some((id, waiter)) = queue.pop_front() {
            self.wakes.push(Wake {
                id,
                waiter,
                verdict: Verdict::Failed(error.clone()),
                held: false,
            });
        }
    }

    /// What to write: the sorted set's removed and added (or re-scored)
    /// members, the counter if it changed, the token, and Redisson's
    /// notice.
    pub fn finish(&self) -> SemaphoreWrites {
        let mut writes = SemaphoreWrites::default();
        // Both sides sorted by id, then merged: a handful of permits, no
        // hashing.
        let mut after: Vec<&Permit> = self.state.permits.iter().collect();
        after.sort_unstable_by(|a, b| a.id.cmp(&b.id));
        let (mut old, mut new) = (self.before.iter().peekable(), after.into_iter().peekable());
        loop {
            match (old.peek(), new.peek()) {
                (Some(o), Some(n)) if o.id == n.id => {
                    if o.until != n.until {
                        writes.added.push((*n).clone());
                    }
                    old.next();
                    new.next();
                }
                (Some(o), Some(n)) if o.id < n.id => {
                    writes.removed.push(o.id.clone());
                    old.next();
                }
                (Some(o), None) => {
                    writes.removed.push(o.id.clone());
                    old.next();
                }
                (_, Some(n)) => {
                    writes.added.push((*n).clone());
                    new.next();
                }
                (None, None) => break,
            }
        }
        if self.state.available != self.available_before {
            writes.available = self.state.available;
        }
        writes.token = self.token_write;
        if self.returned && self.available() > 0 {
            writes.notify = Some(self.available());
        }
        writes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::LockKind;

    fn req(owner: &str, n: u32, lease: i64) -> Request {
        Request {
            owner: owner.as_bytes().into(),
            lease_ms: lease,
            fence: false,
            kind: LockKind::Permits(n),
            keepalive: None,
            campaign: None,
        }
    }

    fn sem(available: i64) -> SemaphoreState {
        SemaphoreState {
            available: Some(available),
            permits: Vec::new(),
        }
    }

    fn tx(state: SemaphoreState, now: i64) -> SemaphoreTransition<Request> {
        SemaphoreTransition::new(state, now, Some(Ok(0)))
    }

    fn granted(wakes: &[Wake<Request>]) -> Vec<(String, Verdict)> {
        wakes
            .iter()
            .map(|w| {
                (
                    String::from_utf8_lossy(&w.waiter.owner).into_owned(),
                    w.verdict.clone(),
                )
            })
            .collect()
    }

    #[test]
    fn permit_ids_round_trip_and_redisson_ids_are_not_owned() {
        assert_eq!(permit_id(b"w1", 3), b"w1:3");
        assert_eq!(owner_of(b"w1:3"), Some((&b"w1"[..], 3)));
        assert_eq!(owner_of(b"a:b:12"), Some((&b"a:b"[..], 12)));
        for id in [
            &b"w1"[..],
            b"w1:",
            b":3",
            b"w1:03",
            b"w1:x",
            b"\x8f\x01\xaa",
            b"w:1a",
        ] {
            assert_eq!(owner_of(id), None, "{id:?}");
        }
    }

    #[test]
    fn takes_while_available_then_waits() {
        let mut q = Fifo::default();
        let mut t = tx(sem(3), 1000);
        assert_eq!(
            t.acquire(&mut q, &req("a", 2, 100), true),
            Ok(Acquisition::Now(2))
        );
        assert_eq!(
            t.acquire(&mut q, &req("b", 2, 100), true),
            Ok(Acquisition::Wait)
        );
        assert_eq!(
            t.acquire(&mut q, &req("b", 2, 100), false),
            Ok(Acquisition::Busy)
        );
        let w = t.finish();
        assert_eq!(w.available, Some(1));
        let mut added: Vec<_> = w.added.iter().map(|p| (p.id.clone(), p.until)).collect();
        added.sort();
        assert_eq!(
            added,
            vec![(b"a:1".to_vec(), 1100), (b"a:2".to_vec(), 1100)]
        );
        assert!(w.removed.is_empty());
        assert_eq!(w.notify, None);
    }

    #[test]
    fn reentry_adds_permits_and_renews_all() {
        let mut q = Fifo::default();
        let state = SemaphoreState {
            available: Some(2),
            permits: vec![Permit {
                id: b"a:1".to_vec(),
                until: 1050,
            }],
        };
        let mut t = tx(state, 1000);
        assert_eq!(
            t.acquire(&mut q, &req("a", 1, 500), false),
            Ok(Acquisition::Now(2))
        );
        let w = t.finish();
        let mut added: Vec<_> = w.added.iter().map(|p| (p.id.clone(), p.until)).collect();
        added.sort();
        assert_eq!(
            added,
            vec![(b"a:1".to_vec(), 1500), (b"a:2".to_vec(), 1500)]
        );
        assert_eq!(w.available, Some(1));
    }

    #[test]
    fn fifo_with_mixed_counts_a_big_request_is_not_overtaken() {
        // 4 permits: a holds 3; b wants 3 and queues; c wants 1: one is
        // free, but c must not overtake b.
        let mut q: Fifo<Request> = Fifo::default();
        let mut t = tx(sem(4), 0);
        assert_eq!(
            t.acquire(&mut q, &req("a", 3, 100), true),
            Ok(Acquisition::Now(3))
        );
        assert_eq!(
            t.acquire(&mut q, &req("b", 3, 100), true),
            Ok(Acquisition::Wait)
        );
        q.push_back(1, req("b", 3, 100));
        assert_eq!(
            t.acquire(&mut q, &req("c", 1, 100), true),
            Ok(Acquisition::Wait)
        );
        q.push_back(2, req("c", 1, 100));
        q.push_back(3, req("d", 1, 100));
        // a gives back one: 2 available, b still cannot go, nor c behind it.
        assert_eq!(t.release(&mut q, b"a", Some(1)), Ok(2));
        assert!(t.wakes.is_empty());
        // a gives back the rest: b gets 3, c gets the last one, d waits.
        assert_eq!(t.release(&mut q, b"a", None), Ok(0));
        assert_eq!(
            granted(&t.wakes),
            vec![
                ("b".into(), Verdict::Granted(3)),
                ("c".into(), Verdict::Granted(1))
            ]
        );
        assert_eq!(q.len(), 1);
        assert_eq!(t.state().available, Some(0));
    }

    #[test]
    fn expired_permits_come_back_and_release_says_expired() {
        let mut q: Fifo<Request> = Fifo::default();
        let state = SemaphoreState {
            available: Some(0),
            permits: vec![
                Permit {
                    id: b"a:1".to_vec(),
                    until: 999,
                },
                Permit {
                    id: b"\x01\x02redisson".to_vec(),
                    until: 1000,
                },
            ],
        };
        q.push_back(1, req("w", 1, 100));
        let mut t = tx(state, 1000);
        assert_eq!(
            t.release(&mut q, b"a", None),
            Err(LockError::permits_expired())
        );
        // a's permit came back and went to the waiter; Redisson's permit
        // (ending this very millisecond) is still held.
        assert_eq!(granted(&t.wakes), vec![("w".into(), Verdict::Granted(1))]);
        let w = t.finish();
        assert_eq!(w.removed, vec![b"a:1".to_vec()]);
        assert_eq!(w.available, None, "0 -> 1 -> 0");
        assert_eq!(w.notify, None, "nothing left available");
        assert_eq!(t.release(&mut q, b"a", None), Err(LockError::no_permits()));
        assert_eq!(t.tally.expired, 1);
    }

    #[test]
    fn release_more_than_held_changes_nothing() {
        let mut q: Fifo<Request> = Fifo::default();
        let mut t = tx(sem(5), 0);
        assert_eq!(
            t.acquire(&mut q, &req("a", 2, 100), false),
            Ok(Acquisition::Now(2))
        );
        assert_eq!(
            t.release(&mut q, b"a", Some(3)),
            Err(LockError::fewer_permits(2, 3))
        );
        assert_eq!(t.release(&mut q, b"a", Some(1)), Ok(1));
        let w = t.finish();
        assert_eq!(w.added.len(), 1);
        assert_eq!(w.added[0].id, b"a:1");
        assert_eq!(w.available, Some(4));
        assert_eq!(w.notify, Some(4));
    }

    #[test]
    fn waiters_are_served_by_an_expiry_and_indexes_fill_gaps() {
        let mut q: Fifo<Request> = Fifo::default();
        let state = SemaphoreState {
            available: Some(0),
            permits: vec![
                Permit {
                    id: b"a:2".to_vec(),
                    until: 5000,
                },
                Permit {
                    id: b"b:1".to_vec(),
                    until: 10,
                },
            ],
        };
        q.push_back(1, req("a", 1, 100));
        let mut t = tx(state, 20);
        t.settle(&mut q);
        assert_eq!(granted(&t.wakes), vec![("a".into(), Verdict::Granted(2))]);
        assert!(t.wakes[0].held);
        let w = t.finish();
        let mut added: Vec<_> = w.added.iter().map(|p| (p.id.clone(), p.until)).collect();
        added.sort();
        assert_eq!(added, vec![(b"a:1".to_vec(), 120), (b"a:2".to_vec(), 120)]);
        assert_eq!(w.removed, vec![b"b:1".to_vec()]);
        assert_eq!(t.next_end(), Some(120));
    }

    #[test]
    fn init_counts_held_permits_and_is_set_once() {
        let mut q: Fifo<Request> = Fifo::default();
        let state = SemaphoreState {
            available: None,
            permits: vec![Permit {
                id: b"a:1".to_vec(),
                until: NEVER,
            }],
        };
        q.push_back(1, req("w", 2, 100));
        let mut t = tx(state, 0);
        assert!(t.init(&mut q, 4));
        assert_eq!(granted(&t.wakes), vec![("w".into(), Verdict::Granted(2))]);
        assert_eq!(t.state().available, Some(1));
        assert!(!t.init(&mut q, 9));
        assert_eq!(t.state().view(0).permits, 4);
    }

    #[test]
    fn add_keeps_the_total_in_range_and_may_leave_available_negative() {
        let mut q: Fifo<Request> = Fifo::default();
        let mut t = tx(sem(2), 0);
        assert_eq!(
            t.acquire(&mut q, &req("a", 2, 100), false),
            Ok(Acquisition::Now(2))
        );
        assert_eq!(t.add(&mut q, -1), Ok(-1));
        assert_eq!(
            t.add(&mut q, -2),
            Err(LockError::permits_out_of_range("SEM.ADD", -1))
        );
        assert_eq!(
            t.add(&mut q, MAX_PERMITS),
            Err(LockError::permits_out_of_range(
                "SEM.ADD",
                MAX_PERMITS as i128 + 1
            ))
        );
        assert_eq!(t.add(&mut q, 3), Ok(2));
        let mut fresh = tx(SemaphoreState::default(), 0);
        assert_eq!(fresh.add(&mut q, 5), Ok(5));
        assert_eq!(fresh.finish().available, Some(5));
    }

    #[test]
    fn take_and_give_leave_only_the_counter() {
        let mut q: Fifo<Request> = Fifo::default();
        let mut t = tx(sem(1), 0);
        let take = |n| Request {
            owner: b"".as_slice().into(),
            lease_ms: 0,
            fence: false,
            kind: LockKind::Permits(n),
            campaign: None,
            keepalive: None,
        };
        assert_eq!(t.acquire(&mut q, &take(1), false), Ok(Acquisition::Now(1)));
        assert_eq!(t.acquire(&mut q, &take(1), true), Ok(Acquisition::Wait));
        q.push_back(1, take(2));
        assert_eq!(t.give(&mut q, 1), Ok(1));
        assert!(t.wakes.is_empty());
        assert_eq!(t.give(&mut q, 1), Ok(0));
        assert_eq!(t.wakes.len(), 1);
        let w = t.finish();
        assert!(w.added.is_empty() && w.removed.is_empty());
        assert_eq!(w.available, Some(0), "1 -> 0 -> 2 -> 0");
        assert_eq!(w.notify, None);
    }

    #[test]
    fn fence_replies_a_token_above_the_last() {
        let mut q: Fifo<Request> = Fifo::default();
        let mut t: SemaphoreTransition<Request> =
            SemaphoreTransition::new(sem(2), 5, Some(Ok(7000)));
        let mut r = req("a", 1, 100);
        r.fence = true;
        assert_eq!(t.acquire(&mut q, &r, false), Ok(Acquisition::Now(7001)));
        assert_eq!(t.acquire(&mut q, &r, false), Ok(Acquisition::Now(7002)));
        assert_eq!(t.finish().token, Some((7002, 105)));
    }

    #[test]
    fn a_lock_caller_queued_on_a_semaphore_is_answered_wrongtype() {
        let mut q: Fifo<Request> = Fifo::default();
        q.push_back(
            1,
            Request {
                kind: LockKind::Exclusive,
                ..req("l", 1, 100)
            },
        );
        q.push_back(2, req("s", 1, 100));
        let mut t = tx(sem(1), 0);
        t.settle(&mut q);
        assert_eq!(
            granted(&t.wakes),
            vec![
                ("l".into(), Verdict::Failed(LockError::wrong_type())),
                ("s".into(), Verdict::Granted(1))
            ]
        );
    }

    #[test]
    fn view_counts_ended_leases_as_available_and_groups_by_owner() {
        let state = SemaphoreState {
            available: Some(1),
            permits: vec![
                Permit {
                    id: b"b:1".to_vec(),
                    until: NEVER,
                },
                Permit {
                    id: b"a:2".to_vec(),
                    until: 300,
                },
                Permit {
                    id: b"a:1".to_vec(),
                    until: 300,
                },
                Permit {
                    id: b"c:1".to_vec(),
                    until: 50,
                },
            ],
        };
        let v = state.view(100);
        assert_eq!(v.available, 2);
        assert_eq!(v.permits, 5);
        let holders: Vec<_> = v
            .holders
            .iter()
            .map(|h| (h.owner.clone(), h.permits, h.ttl_ms(100)))
            .collect();
        assert_eq!(
            holders,
            vec![(b"a".to_vec(), 2, 200), (b"b".to_vec(), 1, -1)]
        );
    }

    #[test]
    fn renew_sets_every_permit_of_the_owner() {
        let mut q: Fifo<Request> = Fifo::default();
        let mut t = tx(sem(3), 0);
        assert_eq!(
            t.acquire(&mut q, &req("a", 2, 100), false),
            Ok(Acquisition::Now(2))
        );
        assert_eq!(t.renew(&mut q, b"a", 1000), Ok(2));
        assert!(t.finish().added.iter().all(|p| p.until == 1000));
        assert_eq!(t.renew(&mut q, b"z", 1000), Err(LockError::no_permits()));
    }

    #[test]
    fn a_refused_add_or_give_changes_nothing_even_with_ended_leases() {
        let mut q: Fifo<Request> = Fifo::default();
        let state = SemaphoreState {
            available: Some(1),
            permits: vec![Permit {
                id: b"a:1".to_vec(),
                until: 10,
            }],
        };
        let mut t = tx(state.clone(), 100);
        assert!(t.add(&mut q, MAX_PERMITS).is_err());
        assert!(t.give(&mut q, u32::MAX).is_err());
        assert_eq!(t.state(), &state);
        assert_eq!(t.finish(), SemaphoreWrites::default());
        assert_eq!(t.add(&mut q, -2), Ok(0));
        assert!(t.state().permits.is_empty());
    }
}
