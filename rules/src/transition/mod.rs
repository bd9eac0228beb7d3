//! The lock rules: who gets the lock, what is changed, who is woken, what is
//! replied. Plain values in, a [`Transition`] out; the Redis layer reads the
//! key, runs one of these, then applies `changes` in order and answers
//! `wakes`.
//!
//! Every way a lock can end (release, force release, lease expiry, the key
//! vanishing) goes through [`Transition::settle`], so hand-off order is the
//! same FIFO whatever freed the lock. The commands' transitions are in
//! `exclusive.rs` (and the dispatch to the other kind), the read-write
//! lock's in `shared.rs`.

mod exclusive;
mod shared;

use crate::error::LockError;
use crate::fair::{head_goes_first, FairEntry, FairQueue};
use crate::holds::Holders;
use crate::queue::{Fifo, WaiterId};
use crate::read_write::{HoldAdmission, WRITE_RELEASED};
use crate::request::{FieldName, Queued, Side};
use crate::state::LockState;

/// One change to the lock key or a key derived from it (its token key, a
/// read hold's lease key, its notify channel), in the order to apply it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// `HSET key field holds`: an owner's holds (a writer's write holds
    /// are in its `<owner>:write` field).
    SetHolds { field: FieldName, holds: i64 },
    /// `PEXPIREAT key at`
    ExpireAt(i64),
    /// `DEL key`
    Delete,
    /// `HDEL key field`: a previous holder's field (or `mode`), removed
    /// after the next holder's was added, so that a hand-off rewrites the
    /// hash in place and the key never disappears.
    RemoveField { field: FieldName },
    /// `SET token-key to PXAT ...`: the fencing token just granted, kept at
    /// least until `fenced_until` (the lease end of the hold it fenced).
    SetToken { to: i64, fenced_until: i64 },
    /// `PUBLISH redisson_lock__channel:{key} 0`, for Redisson's waiters.
    Notify,
    /// `HSET key mode read|write`
    SetMode(Side),
    /// `SET {key}:<owner>:rwlock_timeout:<hold> 1 PXAT at`
    SetReadLease {
        owner: FieldName,
        hold: i64,
        at: i64,
    },
    /// `DEL {key}:<owner>:rwlock_timeout:<hold>`
    DropReadLease { owner: FieldName, hold: i64 },
    /// `PUBLISH redisson_rwlock:{key} <message>`, for Redisson's waiters.
    NotifyReadWrite(&'static [u8]),
    /// `LPOP redisson_lock_queue:{key}` and `ZREM redisson_lock_timeout:{key}
    /// owner`: Redisson's prune of a fair queue's head whose deadline passed.
    DropFairHead { owner: FieldName },
    /// `PUBLISH redisson_lock__channel:{key}:<owner> 0`: the fair queue's
    /// head is told the lock is free for it, as Redisson's unlock tells it.
    NotifyFairHead { owner: FieldName },
}

/// What a waiter taken off the queue is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
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
    pub verdict: Verdict,
    /// Its owner held the lock already when it was granted (the other side
    /// of a read-write lock): its binding, if any, stays.
    pub held: bool,
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

/// How an acquire went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acquisition {
    /// The reply: hold count after this acquire, or the fencing token.
    Now(i64),
    /// Busy; the caller should be queued.
    Wait,
    /// Busy and the caller does not (or may not) wait.
    Busy,
}

/// A fencing token is at least the granting master's clock in microseconds
/// (here its unix milliseconds times this; the shell passes the last token
/// as at least the microsecond before now, which is finer), and one more
/// than the last token of the lock. The counter alone goes back whenever
/// its key loses writes: an unclean failover (the promoted replica never
/// got the last grants), a restart from an older RDB or AOF, FLUSHALL, or
/// the key's own TTL. The clock does not, as long as the servers' clocks
/// agree to within the time between the lost grant and the next one (a
/// failover takes seconds), so a token granted after any of those is still
/// above every earlier one. Faster than one grant per microsecond per lock
/// the counter runs ahead and the clock catches up later. Microseconds since
/// 1970 stay below 2^53 until the year 2255, so a token is exact as a Lua
/// number, a JavaScript number or a double, and far from i64's end.
pub const TOKENS_PER_MS: i64 = 1000;

/// The fencing counter as read from its key; `None` until loaded.
pub type TokenValue = Option<Result<i64, LockError>>;

/// One atomic change of one lock: the state it started from, the changes
/// that bring the key to its new state, and the waiters to answer.
#[derive(Debug)]
pub struct Transition<T> {
    pub(crate) state: LockState,
    /// Who held the lock when the transition began (readers whose leases
    /// had run out included), for hold times.
    pub held_before: Holders,
    now_ms: i64,
    pub(crate) token: TokenValue,
    /// The hash fields of the holds this transition dropped, until the lock
    /// is either handed on (the next holder's fields are written, then these
    /// removed, so the key never disappears) or left free (deleted).
    pub(crate) vacated: Vec<FieldName>,
    /// What Redisson's waiters are told if the lock is left free.
    pub(crate) vacated_notice: Option<Change>,
    pub changes: Vec<Change>,
    pub wakes: Vec<Wake<T>>,
    pub tally: Tally,
    /// Redisson's fair queue of the lock, when it has one (`fair.rs`).
    fair: Option<FairQueue>,
    /// Whether a module waiter may remember fair waiters (`fair_ahead`):
    /// the fair queue was read (`None` above then means it has none), and
    /// some waiter on this server was ever queued behind one. Until then no
    /// transition walks its queue for them.
    waiters_remember_fair: bool,
    /// The fair queue's head the free lock is kept for.
    kept_for: Option<FairEntry>,
    /// Tell the fair queue's head when the lock is kept for it, even if
    /// this transition did not free it (it came free outside a command).
    announce_to_fair: bool,
}

impl<T: Queued> Transition<T> {
    pub fn new(state: LockState, now_ms: i64, token: TokenValue) -> Self {
        let mut tx = Self {
            held_before: Holders::of(&state),
            state,
            now_ms,
            token,
            vacated: Vec::new(),
            vacated_notice: None,
            changes: Vec::new(),
            wakes: Vec::new(),
            tally: Tally::default(),
            fair: None,
            waiters_remember_fair: false,
            kept_for: None,
            announce_to_fair: false,
        };
        tx.drop_expired_readers();
        tx
    }

    /// The lock's Redisson fair queue, as read from its keys (`None`: it
    /// has none), and whether a module waiter may remember fair waiters
    /// (one was ever queued behind one).
    pub fn with_fair(mut self, fair: Option<FairQueue>, waiters_remember_fair: bool) -> Self {
        self.fair = fair;
        self.waiters_remember_fair = waiters_remember_fair;
        self
    }

    /// The fair waiter the free lock is kept for (until its script takes it
    /// or its deadline passes), if any.
    pub fn kept_for(&self) -> Option<&FairEntry> {
        self.kept_for.as_ref()
    }

    /// The fair waiters queued now, first first: those a caller queued now
    /// lets go first.
    pub fn fair_owners(&self) -> Vec<FieldName> {
        self.fair
            .as_ref()
            .map(|f| f.owners().cloned().collect())
            .unwrap_or_default()
    }

    /// [`Self::settle`] of a lock looked at after it changed outside a
    /// command (its lease ran out, a script deleted it, a timer): a fair
    /// waiter it is then kept for is told, since nobody else may have.
    pub fn settle_after_event(&mut self, queue: &mut Fifo<T>) {
        self.announce_to_fair = true;
        self.settle(queue);
    }

    /// Redisson's prune, on a free lock: the fair queue's heads whose
    /// deadline passed are dropped; the next head must then be told.
    fn drop_stale_fair_heads(&mut self) {
        let Some(fair) = self.fair.as_mut() else {
            return;
        };
        let pruned = fair.prune(self.now_ms);
        if pruned.is_empty() {
            return;
        }
        self.announce_to_fair = true;
        for owner in pruned {
            self.changes.push(Change::DropFairHead { owner });
        }
    }

    /// A fair waiter a module waiter saw queued, no longer in the queue (it
    /// took the lock, gave up or was dropped), is forgotten by that waiter:
    /// the same owner queued again (a Redisson thread keeps its owner from
    /// one `lock()` to the next) came after it. Looked at whenever a waiter
    /// may remember one and the queue may have lost someone: it exists, or
    /// the lock changed outside a command, or a holder (perhaps a fair
    /// waiter that took it) left in this transition.
    fn forget_departed_fair_waiters(&mut self, queue: &mut Fifo<T>) {
        if !self.waiters_remember_fair
            || queue.is_empty()
            || (self.fair.is_none() && !self.announce_to_fair && self.vacated.is_empty())
        {
            return;
        }
        let fair = self.fair.as_ref();
        let still_queued = |owner: &[u8]| fair.is_some_and(|f| f.owners().any(|o| o[..] == *owner));
        for waiter in queue.values_mut() {
            if !waiter.fair_ahead().is_empty() {
                waiter.retain_fair_ahead(&still_queued);
            }
        }
    }

    /// On a free lock with a fair queue: drops the queue's stale heads, then
    /// keeps the lock for its head if it goes before `module_first` (see
    /// [`head_goes_first`]), telling it so when the lock just came free (or
    /// a stale head was dropped).
    /// Returns whether the lock is kept for a fair waiter.
    pub(crate) fn keep_for_fair(&mut self, module_first: Option<&T>) -> bool {
        self.drop_stale_fair_heads();
        let Some(fair) = self.fair.as_ref() else {
            return false;
        };
        // Nobody told the head yet if the lock came free now.
        let announce = self.announce_to_fair || !self.vacated.is_empty();
        let Some(head) = fair.head() else {
            self.kept_for = None;
            return false;
        };
        let first = module_first.map(|w| (w.fair_ahead(), w.in_group()));
        if !head_goes_first(&head.owner, first) {
            self.kept_for = None;
            return false;
        }
        if self.kept_for.as_ref() != Some(head) {
            if announce {
                self.changes.push(Change::NotifyFairHead {
                    owner: head.owner.clone(),
                });
            }
            self.kept_for = Some(head.clone());
        }
        true
    }

    pub fn state(&self) -> &LockState {
        &self.state
    }

    /// The clock (unix ms) the transition runs at.
    pub fn now_ms(&self) -> i64 {
        self.now_ms
    }

    /// When a lock with waiters must be looked at again: a read-write
    /// lock's earliest reader lease end; `None` for the key's own TTL.
    pub fn next_end(&self) -> Option<i64> {
        match &self.state {
            LockState::Shared(rw) => rw.next_end(),
            _ => None,
        }
    }

    /// Serves the queue from its head for as long as the head can be
    /// served: a free lock goes to the head waiter; a read-write lock then
    /// takes every reader behind it (a run of readers is granted together)
    /// until a waiter that must wait. Nobody is overtaken. A waiter the lock
    /// cannot be given to (its fencing token is broken, a refused upgrade)
    /// is answered with the error and the next one is tried. A free lock
    /// with a Redisson fair queue may be kept for that queue's head instead
    /// (`fair.rs`).
    pub fn settle(&mut self, queue: &mut Fifo<T>) {
        let woken_before = self.wakes.len();
        let write_freed = matches!(
            self.vacated_notice,
            Some(Change::NotifyReadWrite(message)) if message == WRITE_RELEASED
        );
        self.serve_queue(queue);
        if write_freed {
            self.tell_redisson_readers(woken_before);
        }
    }

    /// A writer's release (or force release) that hands a read-write lock
    /// to readers leaves it readable, not free: Redisson's waiting readers
    /// could share it now, but Redisson's write unlock, which wakes them
    /// (`1`: every waiting thread of each client), was not sent. Sent here,
    /// after the readers' writes: its readers get in, its writers find the
    /// lock read and wait on.
    fn tell_redisson_readers(&mut self, woken_before: usize) {
        let readable =
            matches!(&self.state, LockState::Shared(rw) if rw.mode() == Some(Side::Read));
        let readers_granted = self.wakes[woken_before..].iter().any(|w| {
            matches!(w.verdict, Verdict::Granted(_))
                && w.waiter.request().kind.side() == Some(Side::Read)
        });
        if readable && readers_granted {
            self.changes.push(Change::NotifyReadWrite(WRITE_RELEASED));
        }
    }

    fn serve_queue(&mut self, queue: &mut Fifo<T>) {
        if self.state == LockState::Free {
            self.drop_stale_fair_heads();
        }
        self.forget_departed_fair_waiters(queue);
        loop {
            if self.state == LockState::Free && self.keep_for_fair(queue.front().map(|(_, w)| w)) {
                return;
            }
            let Some((_, head)) = queue.front() else {
                return;
            };
            if head.in_group() {
                return;
            }
            let req = head.request();
            if req.kind.permits().is_some() {
                // A semaphore caller queued while the key was missing, and
                // the key is a lock now.
                let Some((id, waiter)) = queue.pop_front() else {
                    return;
                };
                self.wakes.push(Wake {
                    id,
                    waiter,
                    verdict: Verdict::Failed(LockError::wrong_type()),
                    held: false,
                });
                continue;
            }
            let admission = match (&self.state, req.kind.side()) {
                (LockState::Free, _) => HoldAdmission::Fresh,
                (LockState::Held { .. }, _) | (LockState::Shared(_), None) => HoldAdmission::Busy,
                (LockState::Shared(rw), Some(kind)) => rw.admission(kind, &req.owner),
            };
            if admission == HoldAdmission::Busy {
                return;
            }
            let Some((id, waiter)) = queue.pop_front() else {
                return;
            };
            let req = waiter.request();
            let held = self.state.held_by(&req.owner);
            let granted = match (admission, req.kind.side()) {
                (HoldAdmission::Refused(e), _) => Err(e),
                (_, None) => self.grant(req),
                (_, Some(kind)) => self.grant_shared(req, kind),
            };
            let verdict = match granted {
                Ok(reply) => {
                    self.tally.acquired += 1;
                    self.tally.handed_off += 1;
                    Verdict::Granted(reply)
                }
                Err(e) => Verdict::Failed(e),
            };
            self.wakes.push(Wake {
                id,
                waiter,
                verdict,
                held,
            });
        }
    }

    /// Answers every waiter with `error` instead of the lock: the key was
    /// overwritten with another type, or this node no longer serves it.
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

    /// A lock freed and handed to nobody is deleted, and Redisson's waiters
    /// are told. A hand-off tells them nothing: the lock never came free.
    pub(crate) fn leave_free(&mut self) {
        if self.state != LockState::Free || self.vacated.is_empty() {
            return;
        }
        self.vacated.clear();
        self.changes.push(Change::Delete);
        if let Some(notice) = self.vacated_notice.take() {
            self.changes.push(notice);
        }
    }

    pub(crate) fn deadline(&self, lease_ms: i64) -> Result<i64, LockError> {
        self.now_ms
            .checked_add(lease_ms)
            .ok_or_else(LockError::lease_overflow)
    }

    /// The next fencing token: one more than the last, and at least the
    /// clock's [`TOKENS_PER_MS`] floor (see there).
    pub(crate) fn next_token(&self) -> Result<i64, LockError> {
        next_token(&self.token, self.now_ms)
    }
}

/// The fencing token after `last` at `now_ms`: one more than the last, and
/// at least the clock's [`TOKENS_PER_MS`] floor (see there).
pub fn next_token(last: &TokenValue, now_ms: i64) -> Result<i64, LockError> {
    let last = match last {
        None => return Err(LockError::internal("fencing token not loaded")),
        Some(Err(e)) => return Err(e.clone()),
        Some(Ok(t)) => *t,
    };
    let next = last.checked_add(1).ok_or_else(LockError::token_overflow)?;
    Ok(next.max(now_ms.saturating_mul(TOKENS_PER_MS)))
}
