//! Redisson's fair lock (`RFairLock`) on a name the module's callers use
//! too: one FIFO order over Redisson's queue and the module's.
//!
//! Redisson keeps its fair waiters in a LIST (`redisson_lock_queue:{name}`,
//! first to be served at the head) and a ZSET of their deadlines
//! (`redisson_lock_timeout:{name}`: unix ms after which an entry, once
//! first, counts as gone). Its scripts take a free lock only for the list's
//! head, and drop heads whose deadline has passed. The module's waiters stay
//! in the module's own queue and never enter those keys (Redisson's scripts
//! find the keys exactly as their own clients leave them, and a failover,
//! which takes the module's waiters with their connections, leaves no entry
//! of theirs behind). Instead each module waiter remembers which fair
//! waiters were queued when it came ([`crate::request::Queued::fair_ahead`]):
//! when the lock comes free, the list's head goes first if it was queued
//! before the module's first waiter, and the module's waiter otherwise.
//!
//! Going first, for a fair waiter, means what Redisson's own unlock gives
//! it: the key is left absent, `0` is published on its own channel, and
//! nobody else takes the lock until its script has taken it (the lock is
//! kept for it: LOCK.ACQUIRE answers busy) or its deadline has passed.

use std::collections::VecDeque;

use crate::request::FieldName;

/// One fair waiter: its owner (`<client uuid>:<thread id>`) and deadline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FairEntry {
    pub owner: FieldName,
    /// Its score in the deadlines ZSET; `None` without one (Redisson never
    /// drops such an entry).
    pub due: Option<i64>,
}

/// Redisson's queue of one lock as read from its keys, first entry first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FairQueue {
    entries: VecDeque<FairEntry>,
}

impl FairQueue {
    pub fn new(entries: impl IntoIterator<Item = FairEntry>) -> Self {
        Self {
            entries: entries.into_iter().collect(),
        }
    }

    pub fn head(&self) -> Option<&FairEntry> {
        self.entries.front()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The owners queued, first first.
    pub fn owners(&self) -> impl Iterator<Item = &FieldName> {
        self.entries.iter().map(|e| &e.owner)
    }

    /// Redisson's prune: while the head's deadline is at or before `now_ms`,
    /// it is dropped. Only the head, as Redisson's scripts do: an entry
    /// further back keeps its place until it is first.
    pub fn prune(&mut self, now_ms: i64) -> Vec<FieldName> {
        let mut pruned = Vec::new();
        while let Some(head) = self.entries.front() {
            if head.due.is_none_or(|due| due > now_ms) {
                break;
            }
            if let Some(gone) = self.entries.pop_front() {
                pruned.push(gone.owner);
            }
        }
        pruned
    }
}

/// Whether a free lock goes to the fair queue's head rather than to the
/// module's first waiter: yes when no module caller waits, or the head was
/// queued before it came (it is in `fair_ahead`, the fair owners queued
/// when it came), or the module's first is a multi-lock caller (those
/// yield to fair waiters: they take keys only when all are free).
pub fn head_goes_first(head: &[u8], module_first: Option<(&[FieldName], bool)>) -> bool {
    match module_first {
        None => true,
        Some((_, true)) => true,
        Some((fair_ahead, false)) => fair_ahead.iter().any(|owner| owner[..] == *head),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::multilock::{take_all, AllOrNone};
    use crate::queue::Fifo;
    use crate::request::{Queued, Request};
    use crate::state::LockState;
    use crate::transition::{Acquisition, Change, Transition, Verdict};

    const NOW: i64 = 1_000_000;

    /// A module waiter that saw `ahead` queued when it came.
    struct Module(Request, Vec<FieldName>);

    impl Queued for Module {
        fn request(&self) -> &Request {
            &self.0
        }
        fn fair_ahead(&self) -> &[FieldName] {
            &self.1
        }
        fn retain_fair_ahead(&mut self, still_queued: &dyn Fn(&[u8]) -> bool) {
            self.1.retain(|owner| still_queued(owner));
        }
    }

    fn req(owner: &str) -> Request {
        Request::exclusive(owner, 100)
    }

    fn waiting(owner: &str, ahead: &[&str]) -> Fifo<Module> {
        let mut q = Fifo::default();
        let ahead = ahead.iter().map(|o| o.as_bytes().into()).collect();
        q.push_back(1, Module(req(owner), ahead));
        q
    }

    fn held_by(owner: &str, fair: &[(&str, i64)]) -> Transition<Module> {
        let state = LockState::Held {
            owner: owner.as_bytes().into(),
            holds: 1,
        };
        let fair = FairQueue::new(fair.iter().map(|(o, due)| entry(o, Some(*due))));
        // As read from the keys: no list, no queue.
        Transition::new(state, NOW, Some(Ok(0))).with_fair((!fair.is_empty()).then_some(fair), true)
    }

    fn notified(owner: &str) -> Change {
        Change::NotifyFairHead {
            owner: owner.as_bytes().into(),
        }
    }

    #[test]
    fn a_release_leaves_the_lock_to_the_fair_head_and_tells_it() {
        let mut t = held_by("x", &[("f1", NOW + 10), ("f2", NOW + 20)]);
        assert_eq!(t.release(&mut Fifo::default(), b"x", None), Ok(0));
        assert_eq!(t.state(), &LockState::Free);
        assert_eq!(
            t.changes,
            vec![notified("f1"), Change::Delete, Change::Notify]
        );
        assert_eq!(t.kept_for(), Some(&entry("f1", Some(NOW + 10))));
        // Kept: a caller without BLOCK is busy, one with BLOCK waits, and
        // nothing is written for either.
        t.changes.clear();
        let mut none = Fifo::default();
        assert_eq!(
            t.acquire(&mut none, &req("y"), false),
            Ok(Acquisition::Busy)
        );
        assert_eq!(t.acquire(&mut none, &req("y"), true), Ok(Acquisition::Wait));
        assert!(t.changes.is_empty());
        // Nor does a multi-lock caller take it.
        assert_eq!(take_all([(&mut t, true)], &req("m")), AllOrNone::Busy);
    }

    #[test]
    fn whoever_was_queued_first_goes_first() {
        // The module's waiter came before f1 (it saw nobody queued).
        let mut t = held_by("x", &[("f1", NOW + 10)]);
        let mut q = waiting("w", &[]);
        t.release(&mut q, b"x", None).unwrap();
        assert!(matches!(t.wakes[..], [ref w] if w.verdict == Verdict::Granted(1)));
        assert!(t.kept_for().is_none());
        assert!(!t.changes.contains(&notified("f1")));
        // It came after f1.
        let mut t = held_by("x", &[("f1", NOW + 10)]);
        let mut q = waiting("w", &["f1"]);
        t.release(&mut q, b"x", None).unwrap();
        assert!(t.wakes.is_empty());
        assert_eq!(q.len(), 1);
        assert!(t.changes.contains(&notified("f1")));
    }

    #[test]
    fn stale_heads_are_dropped_and_the_next_one_told() {
        let mut t = held_by("x", &[("gone", NOW), ("f2", NOW + 1)]);
        t.release(&mut Fifo::default(), b"x", None).unwrap();
        let dropped = Change::DropFairHead {
            owner: b"gone"[..].into(),
        };
        assert_eq!(t.changes[..2], [dropped, notified("f2")]);
        // All stale: the lock is free for anyone, and the queue emptied.
        let mut t = held_by("x", &[("gone", NOW - 5)]);
        t.release(&mut Fifo::default(), b"x", None).unwrap();
        assert!(t.kept_for().is_none());
        let r = t.acquire(&mut Fifo::default(), &req("y"), false);
        assert_eq!(r, Ok(Acquisition::Now(1)));
    }

    #[test]
    fn a_fair_owner_that_left_and_queued_again_comes_after() {
        // W came after f1; f1 took the lock (its script popped it).
        let mut q = waiting("w", &["f1"]);
        let mut t = held_by("f1", &[]);
        t.settle_after_event(&mut q);
        assert!(q.front().is_some_and(|(_, w)| w.fair_ahead().is_empty()));
        // f1 let go and queued again (Redisson keeps its owner): W first.
        let mut t = held_by("x", &[("f1", NOW + 10)]);
        t.release(&mut q, b"x", None).unwrap();
        assert!(matches!(t.wakes[..], [ref w] if w.verdict == Verdict::Granted(1)));
    }

    #[test]
    fn a_lock_found_free_is_announced_only_after_an_event() {
        let free = || {
            let fair = FairQueue::new([entry("f1", Some(NOW + 10))]);
            Transition::<Module>::new(LockState::Free, NOW, Some(Ok(0))).with_fair(Some(fair), true)
        };
        // A command that finds it kept tells nobody again.
        let mut t = free();
        t.settle(&mut Fifo::default());
        assert!(t.changes.is_empty());
        assert!(t.kept_for().is_some());
        // A lease end or a script's DEL: nobody told f1 yet.
        let mut t = free();
        t.settle_after_event(&mut Fifo::default());
        assert_eq!(t.changes, vec![notified("f1")]);
        assert_eq!(t.fair_owners(), vec![FieldName::from(&b"f1"[..])]);
    }

    fn entry(owner: &str, due: Option<i64>) -> FairEntry {
        FairEntry {
            owner: owner.as_bytes().into(),
            due,
        }
    }

    #[test]
    fn prunes_stale_heads_only() {
        let mut q = FairQueue::new([
            entry("a", Some(10)),
            entry("b", Some(20)),
            entry("c", Some(5)),
            entry("d", Some(1)),
        ]);
        assert!(q.prune(9).is_empty());
        let owners = |pruned: Vec<FieldName>| pruned.iter().map(|o| o.to_vec()).collect::<Vec<_>>();
        // c and d are stale too, but behind a live head they stay.
        assert_eq!(owners(q.prune(15)), [b"a".to_vec()]);
        assert_eq!(q.head().map(|h| &h.owner[..]), Some(&b"b"[..]));
        assert_eq!(
            owners(q.prune(20)),
            [b"b".to_vec(), b"c".to_vec(), b"d".to_vec()]
        );
        assert!(q.is_empty());
    }

    #[test]
    fn an_entry_without_a_deadline_is_never_pruned() {
        let mut q = FairQueue::new([entry("a", None), entry("b", Some(1))]);
        assert!(q.prune(i64::MAX).is_empty());
        assert_eq!(q.head().map(|h| &h.owner[..]), Some(&b"a"[..]));
        assert_eq!(q.owners().count(), 2);
    }

    #[test]
    fn the_earlier_arrival_goes_first() {
        let ahead: Vec<FieldName> = vec![b"f1"[..].into()];
        assert!(head_goes_first(b"f1", None));
        assert!(head_goes_first(b"f1", Some((&ahead, false))));
        assert!(!head_goes_first(b"f2", Some((&ahead, false))));
        assert!(!head_goes_first(b"f1", Some((&[], false))));
        assert!(head_goes_first(b"f2", Some((&[], true))));
    }
}
