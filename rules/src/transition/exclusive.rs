//! The commands' transitions: LOCK.ACQUIRE, LOCK.RELEASE, LOCK.RENEW and
//! LOCK.FORCERELEASE on the exclusive lock (Redisson's RLock), each handing a
//! read-write lock to `shared.rs`, and the exclusive grant that settling a
//! queue uses too.

use super::{Acquisition, Change, Transition};
use crate::error::LockError;
use crate::queue::Fifo;
use crate::request::{FieldName, Queued, Request, Side};
use crate::state::LockState;

impl<T: Queued> Transition<T> {
    /// LOCK.ACQUIRE: free or already ours (re-entry) is granted; otherwise
    /// the caller waits if it may. Waiters queued earlier are served first.
    pub fn acquire(
        &mut self,
        queue: &mut Fifo<T>,
        req: &Request,
        may_wait: bool,
    ) -> Result<Acquisition, LockError> {
        // A caller whose fencing token cannot be issued is told so at once,
        // busy lock or not, before anything (even a hand-off) is written.
        if req.fence {
            self.next_token()?;
        }
        self.settle(queue);
        // Kept for a Redisson fair waiter: busy, as Redisson's own tryLock
        // finds it.
        if self.kept_for.is_some() && self.state == LockState::Free {
            return Ok(if may_wait {
                Acquisition::Wait
            } else {
                Acquisition::Busy
            });
        }
        if let Some(kind) = req.kind.side() {
            return self.acquire_shared(queue, req, kind, may_wait);
        }
        match &self.state {
            LockState::Shared(_) => Err(LockError::holds_read_write_lock()),
            // Free with callers queued: a multi-lock waiter at the head
            // waits for its other keys, and keeps its place on this one.
            LockState::Free if queue.is_empty() => {
                let reply = self.grant(req)?;
                self.tally.acquired += 1;
                Ok(Acquisition::Now(reply))
            }
            LockState::Held { owner, .. } if *owner == req.owner => {
                let reply = self.grant(req)?;
                self.tally.reentered += 1;
                Ok(Acquisition::Now(reply))
            }
            LockState::Free | LockState::Held { .. } if may_wait => Ok(Acquisition::Wait),
            LockState::Free | LockState::Held { .. } => Ok(Acquisition::Busy),
        }
    }

    /// LOCK.RELEASE: drops one hold (of `kind`, on a read-write lock); the
    /// last one frees the lock and hands it to the head waiter within the
    /// same transition. Returns holds left.
    pub fn release(
        &mut self,
        queue: &mut Fifo<T>,
        who: &[u8],
        kind: Option<Side>,
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

    /// ELECT.RESIGN: `who` gives up the lock whatever its hold count (a
    /// leadership is one hold, but the same owner may have re-entered with
    /// LOCK.ACQUIRE), handing it to the head waiter in the same transition.
    /// Returns whether it held it; a read-write lock is never a leadership.
    pub fn resign(&mut self, queue: &mut Fifo<T>, who: &[u8]) -> bool {
        match &self.state {
            LockState::Held { owner, .. } if owner[..] == *who => {}
            _ => return false,
        }
        self.free();
        self.tally.released += 1;
        self.settle(queue);
        self.leave_free();
        true
    }

    /// LOCK.RENEW: a fresh lease for a holder. Returns the lease in ms.
    pub fn renew(&mut self, who: &[u8], lease_ms: i64) -> Result<i64, LockError> {
        if let LockState::Shared(_) = self.state {
            return self.renew_shared(who, lease_ms);
        }
        self.state.holds_of(who).ok_or_else(LockError::not_owner)?;
        let at = self.deadline(lease_ms)?;
        self.changes.push(Change::ExpireAt(at));
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

    /// Gives `req.owner` one more hold on a lock that is free or already
    /// its own. Everything that can fail is checked before anything is
    /// written.
    pub(crate) fn grant(&mut self, req: &Request) -> Result<i64, LockError> {
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
                self.changes.push(Change::RemoveField { field: previous });
            }
        }
        self.vacated_notice = None;
        self.changes.push(Change::ExpireAt(at));
        if let Some(t) = token {
            self.changes.push(Change::SetToken {
                to: t,
                fenced_until: at,
            });
            self.token = Some(Ok(t));
        }
        Ok(token.unwrap_or(holds))
    }

    pub(super) fn set_holds(&mut self, owner: FieldName, holds: i64) {
        self.changes.push(Change::SetHolds {
            field: owner.clone(),
            holds,
        });
        self.state = LockState::Held { owner, holds };
    }

    /// Drops the holder. What that writes depends on whether a waiter
    /// takes the lock in the same transition (see [`Self::leave_free`]).
    pub(super) fn free(&mut self) {
        if let LockState::Held { owner, .. } = std::mem::replace(&mut self.state, LockState::Free) {
            self.vacated = vec![owner];
            self.vacated_notice = Some(Change::Notify);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::multilock::{take_all, AllOrNone};
    use crate::queue::WaiterId;
    use crate::transition::Verdict;
    use crate::transition::TOKENS_PER_MS;

    const NOW: i64 = 1_000_000;

    fn req(owner: &str, lease_ms: i64) -> Request {
        Request::exclusive(owner, lease_ms)
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

    fn set(owner: &str, holds: i64) -> Change {
        Change::SetHolds {
            field: owner.as_bytes().into(),
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

    fn woken(t: &Transition<Request>) -> Vec<(WaiterId, Verdict)> {
        t.wakes.iter().map(|w| (w.id, w.verdict.clone())).collect()
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
    fn resigning_frees_every_hold_and_hands_the_lock_to_the_next_candidate() {
        let mut q = queue(&[fenced("b", 10)]);
        let mut t = tx(held("a", 3));
        assert!(t.resign(&mut q, b"a"));
        assert_eq!(t.state(), &held("b", 1));
        assert!(q.is_empty());
        assert!(matches!(woken(&t)[..], [(1, Verdict::Granted(token))] if token > 0));
        assert!(t.changes.contains(&Change::RemoveField {
            field: b"a"[..].into()
        }));
        // Not the holder, or nobody holds: nothing changes.
        for state in [held("b", 1), LockState::Free] {
            let mut t = tx(state.clone());
            assert!(!t.resign(&mut queue(&[]), b"a"));
            assert_eq!(t.state(), &state);
            assert!(t.changes.is_empty());
        }
        // Left free when nobody waits: the key goes.
        let mut t = tx(held("a", 1));
        assert!(t.resign(&mut queue(&[]), b"a"));
        assert_eq!(t.state(), &LockState::Free);
        assert_eq!(t.changes, vec![Change::Delete, Change::Notify]);
    }

    #[test]
    fn a_multi_lock_caller_first_in_line_keeps_a_free_lock_for_itself() {
        let mut q = Fifo::default();
        q.push_back(1, Grouped(req("m", 10)));
        let mut t: Transition<Grouped> = Transition::new(LockState::Free, NOW, Some(Ok(0)));
        t.settle(&mut q);
        assert!(t.wakes.is_empty());
        assert_eq!(
            t.acquire(&mut q, &req("a", 10), true),
            Ok(Acquisition::Wait)
        );
        assert_eq!(
            t.acquire(&mut q, &req("a", 10), false),
            Ok(Acquisition::Busy)
        );
        assert!(t.changes.is_empty());
        for holds in [1, 2] {
            assert_eq!(
                take_all([(&mut t, true)], &req("m", 10)),
                AllOrNone::Taken(vec![holds])
            );
        }
        assert_eq!((t.tally.acquired, t.tally.reentered), (1, 1));
    }

    #[test]
    fn acquires_a_free_lock_with_its_lease() {
        let mut t = tx(LockState::Free);
        let r = t.acquire(&mut Fifo::default(), &req("a", 500), false);
        assert_eq!(r, Ok(Acquisition::Now(1)));
        assert_eq!(t.changes, vec![set("a", 1), Change::ExpireAt(NOW + 500)]);
        assert_eq!(t.state(), &held("a", 1));
        assert_eq!(t.tally.acquired, 1);
    }

    #[test]
    fn reentry_counts_up_and_resets_the_lease() {
        let mut t = tx(held("a", 2));
        let r = t.acquire(&mut Fifo::default(), &req("a", 100), false);
        assert_eq!(r, Ok(Acquisition::Now(3)));
        assert_eq!(t.changes, vec![set("a", 3), Change::ExpireAt(NOW + 100)]);
        assert_eq!(t.tally.reentered, 1);
        assert_eq!(t.tally.acquired, 0);
    }

    #[test]
    fn reentry_is_not_overtaking_the_queue() {
        let mut q = queue(&[req("b", 1)]);
        let mut t = tx(held("a", 1));
        assert_eq!(
            t.acquire(&mut q, &req("a", 100), true),
            Ok(Acquisition::Now(2))
        );
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn busy_lock_waits_or_answers_busy_without_writes() {
        for (may_wait, want) in [(true, Acquisition::Wait), (false, Acquisition::Busy)] {
            let mut t = tx(held("a", 1));
            assert_eq!(
                t.acquire(&mut Fifo::default(), &req("b", 1), may_wait),
                Ok(want)
            );
            assert!(t.changes.is_empty());
        }
    }

    #[test]
    fn a_newcomer_never_overtakes_queued_waiters() {
        // The key vanished (say DEL) and the deferred hand-off has not run
        // yet: the head waiter gets it first, the newcomer must wait.
        let mut q = queue(&[req("w1", 10), req("w2", 20)]);
        let mut t = tx(LockState::Free);
        assert_eq!(t.acquire(&mut q, &req("c", 5), true), Ok(Acquisition::Wait));
        assert_eq!(woken(&t), vec![(1, Verdict::Granted(1))]);
        assert_eq!(t.changes, vec![set("w1", 1), Change::ExpireAt(NOW + 10)]);
        assert_eq!(q.ids().collect::<Vec<_>>(), vec![2]);
    }

    #[test]
    fn release_counts_down_then_frees_and_notifies() {
        let mut q = Fifo::default();
        let mut t = tx(held("a", 2));
        assert_eq!(t.release(&mut q, b"a", None), Ok(1));
        assert_eq!(t.changes, vec![set("a", 1)]);
        assert_eq!(t.release(&mut q, b"a", None), Ok(0));
        assert_eq!(t.changes[1..], [Change::Delete, Change::Notify]);
        assert_eq!(t.state(), &LockState::Free);
        assert_eq!(t.tally.released, 1);
    }

    #[test]
    fn release_by_a_stranger_is_notowner_and_changes_nothing() {
        for state in [LockState::Free, held("a", 1)] {
            let mut q = queue(&[req("w", 1)]);
            let mut t = tx(state.clone());
            assert_eq!(t.release(&mut q, b"b", None), Err(LockError::not_owner()));
            assert!(t.changes.is_empty() && t.wakes.is_empty());
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
            t.changes,
            vec![
                set("w1", 1),
                Change::RemoveField {
                    field: b"a"[..].into()
                },
                Change::ExpireAt(NOW + 700)
            ]
        );
        assert_eq!(woken(&t), vec![(1, Verdict::Granted(1))]);
        assert_eq!(t.state(), &held("w1", 1));
        assert_eq!(t.tally.handed_off, 1);
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn hand_off_to_the_same_owner_keeps_its_field() {
        let mut q = queue(&[req("a", 700)]);
        let mut t = tx(held("a", 1));
        assert_eq!(t.release(&mut q, b"a", None), Ok(0));
        assert_eq!(t.changes, vec![set("a", 1), Change::ExpireAt(NOW + 700)]);
        assert_eq!(t.state(), &held("a", 1));
    }

    #[test]
    fn a_release_no_waiter_can_take_deletes_and_notifies() {
        let mut q = queue(&[fenced("w1", 10)]);
        let mut t = Transition::new(held("a", 1), NOW, Some(Err(LockError::token_wrong_type())));
        assert_eq!(t.release(&mut q, b"a", None), Ok(0));
        assert_eq!(t.changes, vec![Change::Delete, Change::Notify]);
        assert_eq!(
            woken(&t),
            vec![(1, Verdict::Failed(LockError::token_wrong_type()))]
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
        // The counter ahead of the clock's floor: one more.
        let ahead = NOW * TOKENS_PER_MS + 41;
        let mut t = Transition::new(LockState::Free, NOW, Some(Ok(ahead)));
        let r = t.acquire(&mut Fifo::<Request>::default(), &fenced("a", 9), false);
        assert_eq!(r, Ok(Acquisition::Now(ahead + 1)));
        assert_eq!(
            t.changes,
            vec![
                set("a", 1),
                Change::ExpireAt(NOW + 9),
                Change::SetToken {
                    to: ahead + 1,
                    fenced_until: NOW + 9
                }
            ]
        );
        // A fenced re-entry gets a newer token still.
        let r = t.acquire(&mut Fifo::default(), &fenced("a", 9), false);
        assert_eq!(r, Ok(Acquisition::Now(ahead + 2)));
    }

    /// A counter that lost its last writes (an unclean failover, an older
    /// RDB, FLUSHALL, its TTL) starts again from the clock, above every
    /// token granted before it, not from what is left of it.
    #[test]
    fn a_counter_behind_the_clock_starts_again_from_it() {
        for last in [0, 3, NOW * TOKENS_PER_MS - 1] {
            let mut t = Transition::new(LockState::Free, NOW, Some(Ok(last)));
            let r = t.acquire(&mut Fifo::<Request>::default(), &fenced("a", 9), false);
            assert_eq!(r, Ok(Acquisition::Now(NOW * TOKENS_PER_MS)), "last {last}");
            // Within the same millisecond the counter goes on by one.
            let r = t.acquire(&mut Fifo::default(), &fenced("a", 9), false);
            assert_eq!(r, Ok(Acquisition::Now(NOW * TOKENS_PER_MS + 1)));
        }
        // A millisecond later the floor is a thousand tokens on.
        let mut t = Transition::new(LockState::Free, NOW + 1, Some(Ok(NOW * TOKENS_PER_MS + 1)));
        let r = t.acquire(&mut Fifo::<Request>::default(), &fenced("a", 9), false);
        assert_eq!(r, Ok(Acquisition::Now((NOW + 1) * TOKENS_PER_MS)));
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
            assert!(t.changes.is_empty());
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
        assert!(t.changes.is_empty() && t.wakes.is_empty());
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
                (1, Verdict::Failed(LockError::token_wrong_type())),
                (2, Verdict::Granted(1))
            ]
        );
        assert_eq!(t.state(), &held("w2", 1));
    }

    #[test]
    fn hold_count_overflow_is_an_error() {
        let mut t = tx(held("a", i64::MAX));
        let r = t.acquire(&mut Fifo::default(), &req("a", 1), false);
        assert_eq!(r, Err(LockError::holds_overflow()));
        assert!(t.changes.is_empty());
    }

    #[test]
    fn renew_sets_a_new_deadline_for_holders_only() {
        let mut t = tx(held("a", 3));
        assert_eq!(t.renew(b"a", 250), Ok(250));
        assert_eq!(t.changes, vec![Change::ExpireAt(NOW + 250)]);
        let mut t = tx(held("a", 3));
        assert_eq!(t.renew(b"b", 250), Err(LockError::not_owner()));
        let mut t = tx(LockState::Free);
        assert_eq!(t.renew(b"a", 250), Err(LockError::not_owner()));
        assert!(t.changes.is_empty());
    }

    #[test]
    fn force_release_frees_any_holder_and_hands_off() {
        let mut q = queue(&[req("w1", 10)]);
        let mut t = tx(held("a", 5));
        assert_eq!(t.force_release(&mut q), 1);
        assert_eq!(
            t.changes[..2],
            [
                set("w1", 1),
                Change::RemoveField {
                    field: b"a"[..].into()
                }
            ]
        );
        assert_eq!(woken(&t), vec![(1, Verdict::Granted(1))]);
        assert_eq!(t.tally.force_released, 1);
        let mut t = tx(LockState::Free);
        assert_eq!(t.force_release(&mut Fifo::default()), 0);
        assert!(t.changes.is_empty());
    }

    #[test]
    fn settle_serves_a_vanished_lock_and_leaves_a_held_one_alone() {
        let mut q = queue(&[req("w1", 10), req("w2", 10)]);
        let mut t = tx(held("x", 1));
        t.settle(&mut q);
        assert!(t.changes.is_empty() && t.wakes.is_empty());
        let mut t = tx(LockState::Free);
        t.settle(&mut q);
        assert_eq!(woken(&t), vec![(1, Verdict::Granted(1))]);
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn reject_all_tells_every_waiter_in_order_and_writes_nothing() {
        let mut q = queue(&[req("w1", 1), req("w2", 1)]);
        let mut t = tx(LockState::Free);
        t.reject_all(&mut q, &LockError::wrong_type());
        let want = Verdict::Failed(LockError::wrong_type());
        assert_eq!(woken(&t), vec![(1, want.clone()), (2, want)]);
        assert!(t.changes.is_empty() && q.is_empty());
    }

    #[test]
    fn lease_overflow_is_an_error_not_a_wrap() {
        let mut t: Transition<Request> =
            Transition::new(LockState::Free, i64::MAX - 5, Some(Ok(0)));
        let r = t.acquire(&mut Fifo::default(), &req("a", 10), false);
        assert_eq!(r, Err(LockError::lease_overflow()));
    }
}
