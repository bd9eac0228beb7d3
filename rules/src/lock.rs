//! The lock rules: who gets the lock, what is written, who is woken, what is
//! replied. Plain values in, a [`Transition`] out; the Redis layer reads the
//! key, runs one of these, then applies `writes` in order and answers `wakes`.
//!
//! Every way a lock can end (release, force release, lease expiry, the key
//! vanishing) goes through [`Transition::settle`], so hand-off order is the
//! same FIFO whatever freed the lock.

use std::sync::Arc;

use super::args::parse_i64;
use super::error::{printable, LockError};
use super::queue::{Fifo, WaiterId};
use super::rwlock::{Admission, Kind, RwHolds};

/// An owner id, shared by the request, the state and the writes that name
/// it (one allocation per caller instead of one per copy).
pub type Owner = Arc<[u8]>;

/// What the lock key holds, as far as the rules care.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockState {
    Free,
    /// An exclusive lock (Redisson's RLock).
    Held {
        owner: Owner,
        holds: i64,
    },
    /// A read-write lock (Redisson's RReadWriteLock) with at least one hold.
    Shared(RwHolds),
}

impl LockState {
    /// Reads Redisson's RLock layout: a hash with exactly one field, the
    /// owner, whose value is its hold count (a positive integer).
    pub fn from_hash(fields: &[(Vec<u8>, Vec<u8>)]) -> Result<Self, LockError> {
        match fields {
            [] => Ok(Self::Free),
            [(owner, count)] => match parse_i64(count) {
                Some(holds) if holds > 0 => Ok(Self::Held {
                    owner: owner.as_slice().into(),
                    holds,
                }),
                _ => Err(LockError::not_a_lock(format_args!(
                    "field '{}' holds '{}', not a positive hold count",
                    printable(owner),
                    printable(count)
                ))),
            },
            many => Err(Self::too_many_fields(many.len())),
        }
    }

    pub fn too_many_fields(n: usize) -> LockError {
        LockError::not_a_lock(format_args!("it has {n} fields, a lock has one"))
    }

    pub fn holds_of(&self, who: &[u8]) -> Option<i64> {
        match self {
            Self::Held { owner, holds } if owner[..] == *who => Some(*holds),
            _ => None,
        }
    }
}

/// Which lock a caller asks for: LOCK.ACQUIRE's exclusive lock, or a
/// read-write lock's read or write side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockKind {
    Exclusive,
    Read,
    Write,
}

impl LockKind {
    pub fn read_write(self) -> Option<Kind> {
        match self {
            Self::Exclusive => None,
            Self::Read => Some(Kind::Read),
            Self::Write => Some(Kind::Write),
        }
    }
}

/// What one caller asks for, whether it is served at once or queued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub owner: Owner,
    pub lease_ms: i64,
    pub fence: bool,
    pub kind: LockKind,
}

/// Queue entries carry their request; the Redis layer adds its handles.
pub trait Queued {
    fn request(&self) -> &Request;

    /// Whether this entry is one key of a multi-lock waiter: it is served
    /// with all its keys at once (see [`crate::multilock`]), never by one
    /// key's settle, and nobody behind it is served before it.
    fn in_group(&self) -> bool {
        false
    }
}

impl Queued for Request {
    fn request(&self) -> &Request {
        self
    }
}

/// One change to the lock key (or its token key), in the order to apply it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    /// `HSET key owner holds`
    SetHolds { owner: Owner, holds: i64 },
    /// `PEXPIREAT key at`
    ExpireAt(i64),
    /// `DEL key`
    Delete,
    /// `HDEL key owner`: the previous holder's field, removed after the
    /// next holder's was added, so that a hand-off rewrites the hash in
    /// place and the key never disappears.
    RemoveHolder { owner: Owner },
    /// `INCR token-key`, which brings it `to` this value.
    IncrToken { to: i64 },
    /// `PUBLISH redisson_lock__channel:{key} 0`, for Redisson's waiters.
    Notify,
    /// `HSET key mode read|write`
    SetMode(Kind),
    /// `SET {key}:<owner>:rwlock_timeout:<hold> 1 PXAT at`
    SetReadLease { owner: Owner, hold: i64, at: i64 },
    /// `DEL {key}:<owner>:rwlock_timeout:<hold>`
    DropReadLease { owner: Owner, hold: i64 },
    /// `PUBLISH redisson_rwlock:{key} <message>`, for Redisson's waiters.
    NotifyReadWrite(&'static [u8]),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The waiter now owns the lock: its reply (hold count 1, or the fencing
    /// token if it asked for one).
    Granted(i64),
    /// The lock was free for this waiter but could not be given to it.
    Failed(LockError),
}

/// A waiter taken off the queue, and what to tell it.
#[derive(Debug)]
pub struct Wake<T> {
    pub id: WaiterId,
    pub waiter: T,
    pub answer: Answer,
}

/// Counts for `INFO lock`, as this transition changed them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    pub acquired: u64,
    pub reentered: u64,
    pub released: u64,
    pub handed_off: u64,
    pub force_released: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acquired {
    /// The reply: hold count after this acquire, or the fencing token.
    Now(i64),
    /// Busy; the caller should be queued.
    Wait,
    /// Busy and the caller does not (or may not) wait.
    Busy,
}

/// The fencing counter as read from its key; `None` until loaded.
pub type TokenValue = Option<Result<i64, LockError>>;

/// One atomic change of one lock: the state it started from, the writes that
/// bring the key to its new state, and the waiters to answer.
#[derive(Debug)]
pub struct Transition<T> {
    pub(crate) state: LockState,
    now_ms: i64,
    pub(crate) token: TokenValue,
    /// The hash fields of the holds this transition dropped, until the lock
    /// is either handed on (the next holder's fields are written, then these
    /// removed, so the key never disappears) or left free (deleted).
    pub(crate) vacated: Vec<Owner>,
    /// What Redisson's waiters are told if the lock is left free.
    pub(crate) vacated_notice: Option<Write>,
    pub writes: Vec<Write>,
    pub wakes: Vec<Wake<T>>,
    pub tally: Tally,
}

impl<T: Queued> Transition<T> {
    pub fn new(state: LockState, now_ms: i64, token: TokenValue) -> Self {
        let mut tx = Self {
            state,
            now_ms,
            token,
            vacated: Vec::new(),
            vacated_notice: None,
            writes: Vec::with_capacity(4),
            wakes: Vec::new(),
            tally: Tally::default(),
        };
        tx.drop_expired_readers();
        tx
    }

    pub fn state(&self) -> &LockState {
        &self.state
    }

    /// When a lock with waiters must be looked at again: a read-write
    /// lock's earliest reader lease end; `None` for the key's own TTL.
    pub fn next_end(&self) -> Option<i64> {
        match &self.state {
            LockState::Shared(rw) => rw.next_end(),
            _ => None,
        }
    }

    /// LOCK.ACQUIRE: free or already ours (re-entry) is granted; otherwise
    /// the caller waits if it may. Waiters queued earlier are served first.
    pub fn acquire(
        &mut self,
        queue: &mut Fifo<T>,
        req: &Request,
        may_wait: bool,
    ) -> Result<Acquired, LockError> {
        // A caller whose fencing token cannot be issued is told so at once,
        // busy lock or not, before anything (even a hand-off) is written.
        if req.fence {
            self.next_token()?;
        }
        self.settle(queue);
        if let Some(kind) = req.kind.read_write() {
            return self.acquire_shared(queue, req, kind, may_wait);
        }
        match &self.state {
            LockState::Shared(_) => Err(LockError::holds_read_write_lock()),
            // Free with callers queued: a multi-lock waiter at the head
            // waits for its other keys, and keeps its place on this one.
            LockState::Free if queue.is_empty() => {
                let reply = self.grant(req)?;
                self.tally.acquired += 1;
                Ok(Acquired::Now(reply))
            }
            LockState::Held { owner, .. } if *owner == req.owner => {
                let reply = self.grant(req)?;
                self.tally.reentered += 1;
                Ok(Acquired::Now(reply))
            }
            LockState::Free | LockState::Held { .. } if may_wait => Ok(Acquired::Wait),
            LockState::Free | LockState::Held { .. } => Ok(Acquired::Busy),
        }
    }

    /// LOCK.RELEASE: drops one hold (of `kind`, on a read-write lock); the
    /// last one frees the lock and hands it to the head waiter within the
    /// same transition. Returns holds left.
    pub fn release(
        &mut self,
        queue: &mut Fifo<T>,
        who: &[u8],
        kind: Option<Kind>,
    ) -> Result<i64, LockError> {
        let (owner, holds) = match &self.state {
            LockState::Shared(_) => return self.release_shared(queue, who, kind),
            LockState::Held { .. } if kind.is_some() => {
                return Err(LockError::holds_exclusive_lock())
            }
            LockState::Held { owner, holds } => (owner, holds),
            LockState::Free => return Err(LockError::not_owner()),
        };
        if owner[..] != *who {
            return Err(LockError::not_owner());
        }
        let (owner, holds) = (owner.clone(), *holds);
        if holds > 1 {
            self.set_holds(owner, holds - 1);
            return Ok(holds - 1);
        }
        self.free();
        self.tally.released += 1;
        self.settle(queue);
        self.leave_free();
        Ok(0)
    }

    /// LOCK.RENEW: a fresh lease for a holder. Returns the lease in ms.
    pub fn renew(&mut self, who: &[u8], lease_ms: i64) -> Result<i64, LockError> {
        if let LockState::Shared(_) = self.state {
            return self.renew_shared(who, lease_ms);
        }
        self.state.holds_of(who).ok_or_else(LockError::not_owner)?;
        let at = self.deadline(lease_ms)?;
        self.writes.push(Write::ExpireAt(at));
        Ok(lease_ms)
    }

    /// LOCK.FORCERELEASE: removes the lock whoever holds it. Returns 1 if
    /// there was one.
    pub fn force_release(&mut self, queue: &mut Fifo<T>) -> i64 {
        let removed = match self.state {
            LockState::Free => 0,
            LockState::Held { .. } => {
                self.free();
                self.tally.force_released += 1;
                1
            }
            LockState::Shared(_) => {
                self.vacate_shared();
                self.tally.force_released += 1;
                1
            }
        };
        self.settle(queue);
        self.leave_free();
        removed
    }

    /// Serves the queue from its head for as long as the head can be
    /// served: a free lock goes to the head waiter; a read-write lock then
    /// takes every reader behind it (a run of readers is granted together)
    /// until a waiter that must wait. Nobody is overtaken. A waiter the lock
    /// cannot be given to (its fencing token is broken, a refused upgrade)
    /// is answered with the error and the next one is tried.
    pub fn settle(&mut self, queue: &mut Fifo<T>) {
        loop {
            let Some((_, head)) = queue.front() else {
                return;
            };
            if head.in_group() {
                return;
            }
            let req = head.request();
            let admission = match (&self.state, req.kind.read_write()) {
                (LockState::Free, _) => Admission::Fresh,
                (LockState::Held { .. }, _) | (LockState::Shared(_), None) => Admission::Busy,
                (LockState::Shared(rw), Some(kind)) => rw.admission(kind, &req.owner),
            };
            if admission == Admission::Busy {
                return;
            }
            let Some((id, waiter)) = queue.pop_front() else {
                return;
            };
            let req = waiter.request();
            let granted = match (admission, req.kind.read_write()) {
                (Admission::Refused(e), _) => Err(e),
                (_, None) => self.grant(req),
                (_, Some(kind)) => self.grant_shared(req, kind),
            };
            let answer = match granted {
                Ok(reply) => {
                    self.tally.acquired += 1;
                    self.tally.handed_off += 1;
                    Answer::Granted(reply)
                }
                Err(e) => Answer::Failed(e),
            };
            self.wakes.push(Wake { id, waiter, answer });
        }
    }

    /// Whether [`Self::take`] would succeed: the lease deadline, the hold
    /// count and the fencing token can all be had.
    pub fn check_take(&self, req: &Request) -> Result<(), LockError> {
        self.deadline(req.lease_ms)?;
        if let Some(holds) = self.state.holds_of(&req.owner) {
            holds.checked_add(1).ok_or_else(LockError::holds_overflow)?;
        }
        if req.fence {
            self.next_token()?;
        }
        Ok(())
    }

    /// One more hold for a multi-lock caller on a key it may take now (see
    /// [`crate::multilock::access`]).
    pub fn take(&mut self, req: &Request) -> Result<i64, LockError> {
        let reentry = self.state.holds_of(&req.owner).is_some();
        let reply = self.grant(req)?;
        if reentry {
            self.tally.reentered += 1;
        } else {
            self.tally.acquired += 1;
        }
        Ok(reply)
    }

    /// Answers every waiter with `error` instead of the lock: the key was
    /// overwritten with another type, or this node no longer serves it.
    pub fn reject_all(&mut self, queue: &mut Fifo<T>, error: &LockError) {
        while let Some((id, waiter)) = queue.pop_front() {
            self.wakes.push(Wake {
                id,
                waiter,
                answer: Answer::Failed(error.clone()),
            });
        }
    }

    /// Gives `req.owner` one more hold on a lock that is free or already
    /// its own. Everything that can fail is checked before anything is
    /// written.
    fn grant(&mut self, req: &Request) -> Result<i64, LockError> {
        let holds = match &self.state {
            LockState::Free => 1,
            LockState::Held { owner, holds } if *owner == req.owner => {
                holds.checked_add(1).ok_or_else(LockError::holds_overflow)?
            }
            LockState::Held { .. } | LockState::Shared(_) => {
                return Err(LockError::internal("grant on a held lock"))
            }
        };
        let at = self.deadline(req.lease_ms)?;
        let token = if req.fence {
            Some(self.next_token()?)
        } else {
            None
        };
        self.set_holds(req.owner.clone(), holds);
        for previous in std::mem::take(&mut self.vacated) {
            if previous != req.owner {
                self.writes.push(Write::RemoveHolder { owner: previous });
            }
        }
        self.vacated_notice = None;
        self.writes.push(Write::ExpireAt(at));
        if let Some(t) = token {
            self.writes.push(Write::IncrToken { to: t });
            self.token = Some(Ok(t));
        }
        Ok(token.unwrap_or(holds))
    }

    fn set_holds(&mut self, owner: Owner, holds: i64) {
        self.writes.push(Write::SetHolds {
            owner: owner.clone(),
            holds,
        });
        self.state = LockState::Held { owner, holds };
    }

    /// Drops the holder. What that writes depends on whether a waiter
    /// takes the lock in the same transition (see [`Self::leave_free`]).
    fn free(&mut self) {
        if let LockState::Held { owner, .. } = std::mem::replace(&mut self.state, LockState::Free) {
            self.vacated = vec![owner];
            self.vacated_notice = Some(Write::Notify);
        }
    }

    /// A lock freed and handed to nobody is deleted, and Redisson's waiters
    /// are told. A hand-off tells them nothing: the lock never came free.
    pub(crate) fn leave_free(&mut self) {
        if self.state != LockState::Free || self.vacated.is_empty() {
            return;
        }
        self.vacated.clear();
        self.writes.push(Write::Delete);
        if let Some(notice) = self.vacated_notice.take() {
            self.writes.push(notice);
        }
    }

    pub(crate) fn deadline(&self, lease_ms: i64) -> Result<i64, LockError> {
        self.now_ms
            .checked_add(lease_ms)
            .ok_or_else(LockError::lease_overflow)
    }

    pub(crate) fn next_token(&self) -> Result<i64, LockError> {
        match &self.token {
            None => Err(LockError::internal("fencing token not loaded")),
            Some(Err(e)) => Err(e.clone()),
            Some(Ok(t)) => t.checked_add(1).ok_or_else(LockError::token_overflow),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_000_000;

    fn req(owner: &str, lease_ms: i64) -> Request {
        Request {
            owner: owner.as_bytes().into(),
            lease_ms,
            fence: false,
            kind: LockKind::Exclusive,
        }
    }

    fn fenced(owner: &str, lease_ms: i64) -> Request {
        Request {
            fence: true,
            ..req(owner, lease_ms)
        }
    }

    fn held(owner: &str, holds: i64) -> LockState {
        LockState::Held {
            owner: owner.as_bytes().into(),
            holds,
        }
    }

    fn set(owner: &str, holds: i64) -> Write {
        Write::SetHolds {
            owner: owner.as_bytes().into(),
            holds,
        }
    }

    fn tx(state: LockState) -> Transition<Request> {
        Transition::new(state, NOW, Some(Ok(0)))
    }

    fn queue(waiters: &[Request]) -> Fifo<Request> {
        let mut q = Fifo::default();
        for (i, w) in waiters.iter().enumerate() {
            q.push_back(i as u64 + 1, w.clone());
        }
        q
    }

    fn woken(t: &Transition<Request>) -> Vec<(WaiterId, Answer)> {
        t.wakes.iter().map(|w| (w.id, w.answer.clone())).collect()
    }

    #[test]
    fn parses_the_redisson_layout() {
        let f = |k: &str, v: &str| (k.as_bytes().to_vec(), v.as_bytes().to_vec());
        assert_eq!(LockState::from_hash(&[]), Ok(LockState::Free));
        assert_eq!(LockState::from_hash(&[f("u:1", "3")]), Ok(held("u:1", 3)));
        for bad in ["0", "-1", "x", "", "01", "1.0"] {
            let e = LockState::from_hash(&[f("u:1", bad)]).unwrap_err();
            assert!(e.to_string().starts_with("WRONGTYPE"), "{e}");
        }
        let e = LockState::from_hash(&[f("mode", "read"), f("u:1", "1")]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "WRONGTYPE key holds a hash that is not a lock: it has 2 fields, a lock has one"
        );
    }

    struct Grouped(Request);

    impl Queued for Grouped {
        fn request(&self) -> &Request {
            &self.0
        }
        fn in_group(&self) -> bool {
            true
        }
    }

    #[test]
    fn a_multi_lock_caller_first_in_line_keeps_a_free_lock_for_itself() {
        let mut q = Fifo::default();
        q.push_back(1, Grouped(req("m", 10)));
        let mut t: Transition<Grouped> = Transition::new(LockState::Free, NOW, Some(Ok(0)));
        t.settle(&mut q);
        assert!(t.wakes.is_empty());
        assert_eq!(t.acquire(&mut q, &req("a", 10), true), Ok(Acquired::Wait));
        assert_eq!(t.acquire(&mut q, &req("a", 10), false), Ok(Acquired::Busy));
        assert!(t.writes.is_empty());
        assert_eq!(t.check_take(&req("m", 10)), Ok(()));
        assert_eq!(t.take(&req("m", 10)), Ok(1));
        assert_eq!(t.take(&req("m", 10)), Ok(2));
        assert_eq!((t.tally.acquired, t.tally.reentered), (1, 1));
    }

    #[test]
    fn acquires_a_free_lock_with_its_lease() {
        let mut t = tx(LockState::Free);
        let r = t.acquire(&mut Fifo::default(), &req("a", 500), false);
        assert_eq!(r, Ok(Acquired::Now(1)));
        assert_eq!(t.writes, vec![set("a", 1), Write::ExpireAt(NOW + 500)]);
        assert_eq!(t.state(), &held("a", 1));
        assert_eq!(t.tally.acquired, 1);
    }

    #[test]
    fn reentry_counts_up_and_resets_the_lease() {
        let mut t = tx(held("a", 2));
        let r = t.acquire(&mut Fifo::default(), &req("a", 100), false);
        assert_eq!(r, Ok(Acquired::Now(3)));
        assert_eq!(t.writes, vec![set("a", 3), Write::ExpireAt(NOW + 100)]);
        assert_eq!(t.tally.reentered, 1);
        assert_eq!(t.tally.acquired, 0);
    }

    #[test]
    fn reentry_is_not_overtaking_the_queue() {
        let mut q = queue(&[req("b", 1)]);
        let mut t = tx(held("a", 1));
        assert_eq!(
            t.acquire(&mut q, &req("a", 100), true),
            Ok(Acquired::Now(2))
        );
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn busy_lock_waits_or_answers_busy_without_writes() {
        for (may_wait, want) in [(true, Acquired::Wait), (false, Acquired::Busy)] {
            let mut t = tx(held("a", 1));
            assert_eq!(
                t.acquire(&mut Fifo::default(), &req("b", 1), may_wait),
                Ok(want)
            );
            assert!(t.writes.is_empty());
        }
    }

    #[test]
    fn a_newcomer_never_overtakes_queued_waiters() {
        // The key vanished (say DEL) and the deferred hand-off has not run
        // yet: the head waiter gets it first, the newcomer must wait.
        let mut q = queue(&[req("w1", 10), req("w2", 20)]);
        let mut t = tx(LockState::Free);
        assert_eq!(t.acquire(&mut q, &req("c", 5), true), Ok(Acquired::Wait));
        assert_eq!(woken(&t), vec![(1, Answer::Granted(1))]);
        assert_eq!(t.writes, vec![set("w1", 1), Write::ExpireAt(NOW + 10)]);
        assert_eq!(q.ids().collect::<Vec<_>>(), vec![2]);
    }

    #[test]
    fn release_counts_down_then_frees_and_notifies() {
        let mut q = Fifo::default();
        let mut t = tx(held("a", 2));
        assert_eq!(t.release(&mut q, b"a", None), Ok(1));
        assert_eq!(t.writes, vec![set("a", 1)]);
        assert_eq!(t.release(&mut q, b"a", None), Ok(0));
        assert_eq!(t.writes[1..], [Write::Delete, Write::Notify]);
        assert_eq!(t.state(), &LockState::Free);
        assert_eq!(t.tally.released, 1);
    }

    #[test]
    fn release_by_a_stranger_is_notowner_and_changes_nothing() {
        for state in [LockState::Free, held("a", 1)] {
            let mut q = queue(&[req("w", 1)]);
            let mut t = tx(state.clone());
            assert_eq!(t.release(&mut q, b"b", None), Err(LockError::not_owner()));
            assert!(t.writes.is_empty() && t.wakes.is_empty());
            assert_eq!(t.state(), &state);
            assert_eq!(q.len(), 1);
        }
    }

    #[test]
    fn last_release_hands_off_to_the_head_in_the_same_transition() {
        let mut q = queue(&[req("w1", 700), req("w2", 800)]);
        let mut t = tx(held("a", 1));
        assert_eq!(t.release(&mut q, b"a", None), Ok(0));
        // In place, and no unlock message: the lock never came free.
        assert_eq!(
            t.writes,
            vec![
                set("w1", 1),
                Write::RemoveHolder {
                    owner: b"a"[..].into()
                },
                Write::ExpireAt(NOW + 700)
            ]
        );
        assert_eq!(woken(&t), vec![(1, Answer::Granted(1))]);
        assert_eq!(t.state(), &held("w1", 1));
        assert_eq!(t.tally.handed_off, 1);
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn hand_off_to_the_same_owner_keeps_its_field() {
        let mut q = queue(&[req("a", 700)]);
        let mut t = tx(held("a", 1));
        assert_eq!(t.release(&mut q, b"a", None), Ok(0));
        assert_eq!(t.writes, vec![set("a", 1), Write::ExpireAt(NOW + 700)]);
        assert_eq!(t.state(), &held("a", 1));
    }

    #[test]
    fn a_release_no_waiter_can_take_deletes_and_notifies() {
        let mut q = queue(&[fenced("w1", 10)]);
        let mut t = Transition::new(held("a", 1), NOW, Some(Err(LockError::token_wrong_type())));
        assert_eq!(t.release(&mut q, b"a", None), Ok(0));
        assert_eq!(t.writes, vec![Write::Delete, Write::Notify]);
        assert_eq!(
            woken(&t),
            vec![(1, Answer::Failed(LockError::token_wrong_type()))]
        );
    }

    #[test]
    fn fifo_order_holds_across_many_hand_offs() {
        let names: Vec<String> = (0..50).map(|i| format!("w{i}")).collect();
        let waiters: Vec<Request> = names.iter().map(|n| req(n, 10)).collect();
        let mut q = queue(&waiters);
        let mut state = held("first", 1);
        let mut order = Vec::new();
        let mut releaser = "first".to_string();
        while !q.is_empty() {
            let mut t = tx(state);
            assert_eq!(t.release(&mut q, releaser.as_bytes(), None), Ok(0));
            let wake = &t.wakes[0];
            order.push(wake.id);
            releaser = String::from_utf8(wake.waiter.owner.to_vec()).unwrap();
            state = t.state().clone();
        }
        assert_eq!(order, (1..=50).collect::<Vec<_>>());
    }

    #[test]
    fn fenced_acquire_replies_the_next_token() {
        let mut t = Transition::new(LockState::Free, NOW, Some(Ok(41)));
        let r = t.acquire(&mut Fifo::<Request>::default(), &fenced("a", 9), false);
        assert_eq!(r, Ok(Acquired::Now(42)));
        assert_eq!(
            t.writes,
            vec![
                set("a", 1),
                Write::ExpireAt(NOW + 9),
                Write::IncrToken { to: 42 }
            ]
        );
        // A fenced re-entry gets a newer token still.
        let r = t.acquire(&mut Fifo::default(), &fenced("a", 9), false);
        assert_eq!(r, Ok(Acquired::Now(43)));
    }

    #[test]
    fn a_broken_token_fails_the_acquire_without_writes() {
        for (token, want) in [
            (
                Some(Err(LockError::token_not_integer())),
                LockError::token_not_integer(),
            ),
            (Some(Ok(i64::MAX)), LockError::token_overflow()),
            (None, LockError::internal("fencing token not loaded")),
        ] {
            let mut t = Transition::new(LockState::Free, NOW, token);
            let r = t.acquire(&mut Fifo::<Request>::default(), &fenced("a", 9), false);
            assert_eq!(r, Err(want));
            assert!(t.writes.is_empty());
            assert_eq!(t.state(), &LockState::Free);
        }
    }

    #[test]
    fn a_broken_token_is_an_error_even_on_a_busy_lock_and_before_any_hand_off() {
        let mut q = queue(&[req("w1", 10)]);
        let mut t = Transition::new(
            LockState::Free,
            NOW,
            Some(Err(LockError::token_not_integer())),
        );
        let r = t.acquire(&mut q, &fenced("c", 9), true);
        assert_eq!(r, Err(LockError::token_not_integer()));
        assert!(t.writes.is_empty() && t.wakes.is_empty());
        assert_eq!(q.len(), 1);
        let mut t: Transition<Request> = Transition::new(held("a", 1), NOW, Some(Ok(i64::MAX)));
        let r = t.acquire(&mut Fifo::default(), &fenced("c", 9), true);
        assert_eq!(r, Err(LockError::token_overflow()));
    }

    #[test]
    fn a_waiter_whose_grant_fails_is_told_and_the_next_gets_the_lock() {
        let mut q = queue(&[fenced("w1", 10), req("w2", 20)]);
        let mut t = Transition::new(held("a", 1), NOW, Some(Err(LockError::token_wrong_type())));
        assert_eq!(t.release(&mut q, b"a", None), Ok(0));
        assert_eq!(
            woken(&t),
            vec![
                (1, Answer::Failed(LockError::token_wrong_type())),
                (2, Answer::Granted(1))
            ]
        );
        assert_eq!(t.state(), &held("w2", 1));
    }

    #[test]
    fn hold_count_overflow_is_an_error() {
        let mut t = tx(held("a", i64::MAX));
        let r = t.acquire(&mut Fifo::default(), &req("a", 1), false);
        assert_eq!(r, Err(LockError::holds_overflow()));
        assert!(t.writes.is_empty());
    }

    #[test]
    fn renew_sets_a_new_deadline_for_holders_only() {
        let mut t = tx(held("a", 3));
        assert_eq!(t.renew(b"a", 250), Ok(250));
        assert_eq!(t.writes, vec![Write::ExpireAt(NOW + 250)]);
        let mut t = tx(held("a", 3));
        assert_eq!(t.renew(b"b", 250), Err(LockError::not_owner()));
        let mut t = tx(LockState::Free);
        assert_eq!(t.renew(b"a", 250), Err(LockError::not_owner()));
        assert!(t.writes.is_empty());
    }

    #[test]
    fn force_release_frees_any_holder_and_hands_off() {
        let mut q = queue(&[req("w1", 10)]);
        let mut t = tx(held("a", 5));
        assert_eq!(t.force_release(&mut q), 1);
        assert_eq!(
            t.writes[..2],
            [
                set("w1", 1),
                Write::RemoveHolder {
                    owner: b"a"[..].into()
                }
            ]
        );
        assert_eq!(woken(&t), vec![(1, Answer::Granted(1))]);
        assert_eq!(t.tally.force_released, 1);
        let mut t = tx(LockState::Free);
        assert_eq!(t.force_release(&mut Fifo::default()), 0);
        assert!(t.writes.is_empty());
    }

    #[test]
    fn settle_serves_a_vanished_lock_and_leaves_a_held_one_alone() {
        let mut q = queue(&[req("w1", 10), req("w2", 10)]);
        let mut t = tx(held("x", 1));
        t.settle(&mut q);
        assert!(t.writes.is_empty() && t.wakes.is_empty());
        let mut t = tx(LockState::Free);
        t.settle(&mut q);
        assert_eq!(woken(&t), vec![(1, Answer::Granted(1))]);
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn reject_all_tells_every_waiter_in_order_and_writes_nothing() {
        let mut q = queue(&[req("w1", 1), req("w2", 1)]);
        let mut t = tx(LockState::Free);
        t.reject_all(&mut q, &LockError::wrong_type());
        let want = Answer::Failed(LockError::wrong_type());
        assert_eq!(woken(&t), vec![(1, want.clone()), (2, want)]);
        assert!(t.writes.is_empty() && q.is_empty());
    }

    #[test]
    fn lease_overflow_is_an_error_not_a_wrap() {
        let mut t: Transition<Request> =
            Transition::new(LockState::Free, i64::MAX - 5, Some(Ok(0)));
        let r = t.acquire(&mut Fifo::default(), &req("a", 10), false);
        assert_eq!(r, Err(LockError::lease_overflow()));
    }
}
