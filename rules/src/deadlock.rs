//! Deadlocks: the waits-for graph over owners, and the search for the cycle
//! a new wait would close.
//!
//! An owner that waits for a lock waits for that lock's holders (the
//! exclusive owner; a read-write lock's readers and writer; each key of a
//! multi-lock caller's), unless it holds the lock itself (a re-entry never
//! waits), and for the multi-lock caller queued nearest ahead of it, which
//! is served first. A semaphore is different: any one holder's release may
//! serve its waiter, so the waiter waits for them only when exactly one
//! owner other than itself holds permits ([`Holders::any_one`]).
//!
//! A caller about to wait closes a cycle when, following "waits for" from
//! what it wants, one reaches the caller itself: each of them waits,
//! directly or not, for the next, and none can go on. The search starts at
//! the lock the caller wants and follows holders and multi-lock callers
//! ahead, never a queue's other waiters: a hot lock with 10,000 waiters
//! whose holder waits for nothing costs one lookup per new waiter, however
//! long its queue. Within one search each lock's holders are read once.
//!
//! The graph is read through [`WaitsFor`], which the server layer answers
//! from its registry (who waits for what) and its keys (who holds what); the
//! search is bounded ([`MAX_VISITS`]), so a huge graph costs a bounded time
//! and, past the bound, finds nothing rather than stall the server.

use crate::names::{NameMap, NameSet};
use std::fmt::Write as _;

use crate::error::{printable, LockError};
use crate::lock_id::LockId;
use crate::semaphore::{owner_of, SemaphoreState};
use crate::state::LockState;

/// Owners visited before the search gives up (finds no cycle).
pub const MAX_VISITS: usize = 10_000;

/// What the search reads of the server: for an owner, the locks it waits
/// for now; for a lock, who holds it now and who is queued ahead.
pub trait WaitsFor {
    fn waits_of(&self, owner: &[u8]) -> Vec<LockId<'static>>;
    fn holders_of(&self, lock: &LockId<'_>) -> Holders;
    /// The owner of the multi-lock caller queued nearest ahead of `owner`'s
    /// entry for `lock` (nearest the tail when `owner` is not queued
    /// there), if any. Nobody behind a multi-lock caller is served before
    /// it, so each of them waits for it, even while the lock is free (kept
    /// for it until its other keys are); it waits in turn for the one
    /// ahead of it. Any other caller ahead is served as soon as the holders
    /// let go, so waiting for the holders says it all.
    fn multi_ahead(&self, _lock: &LockId<'_>, _owner: &[u8]) -> Option<Vec<u8>> {
        None
    }
}

/// Who holds a lock or a semaphore, as the graph sees them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Holders {
    pub owners: Vec<Vec<u8>>,
    /// A semaphore: any one holder's release may serve a waiter, so it
    /// waits for them only when exactly one owner other than itself holds
    /// permits, and no permit's holder is unknown.
    pub any_one: bool,
    /// Permits whose holder has no owner id (Redisson's).
    pub unnamed: bool,
}

impl Holders {
    pub fn all_of(owners: Vec<Vec<u8>>) -> Self {
        Self {
            owners,
            any_one: false,
            unnamed: false,
        }
    }

    /// Whom `waiter` waits for by waiting here: nobody if it holds a lock
    /// (a re-entry does not wait).
    pub fn waited_for_by(&self, waiter: &[u8]) -> Vec<&[u8]> {
        let mine = self.owners.iter().any(|o| o[..] == *waiter);
        if !self.any_one {
            return if mine {
                Vec::new()
            } else {
                self.owners.iter().map(Vec::as_slice).collect()
            };
        }
        let others: Vec<&[u8]> = self
            .owners
            .iter()
            .map(Vec::as_slice)
            .filter(|o| *o != waiter)
            .collect();
        if others.len() == 1 && !self.unnamed {
            others
        } else {
            Vec::new()
        }
    }
}

/// One edge of a cycle: `owner` waits for `lock`, held by the next step's
/// owner (the last step's lock by the first step's owner), or, `behind`,
/// queued ahead of it for that lock as a multi-lock caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub owner: Vec<u8>,
    pub lock: LockId<'static>,
    pub behind: bool,
}

/// The cycle a wait would close, starting with the caller's own step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cycle {
    pub steps: Vec<Step>,
}

/// Steps named in full in a DEADLOCK reply; a longer cycle is cut short
/// there (its length is still given).
pub const STEPS_NAMED: usize = 16;

impl Cycle {
    /// The `DEADLOCK` error answered to the caller that would close it:
    /// each step as "owner waits for key held by next owner", so the lock
    /// order to fix can be read off the reply.
    pub fn error(&self) -> LockError {
        let n = self.steps.len();
        let db = self.steps.first().map_or(0, |s| s.lock.db);
        let mut text = format!("this wait would close a cycle of {n}:");
        for (i, step) in self.steps.iter().enumerate().take(STEPS_NAMED) {
            let next = &self.steps[(i + 1) % n].owner;
            let _ = write!(
                text,
                "{} '{}' waits for '{}'",
                if i == 0 { "" } else { "," },
                printable(&step.owner),
                printable(&step.lock.key)
            );
            if step.lock.db != db {
                let _ = write!(text, " (db {})", step.lock.db);
            }
            let how = if step.behind { "behind" } else { "held by" };
            let _ = write!(text, " {how} '{}'", printable(next));
        }
        if n > STEPS_NAMED {
            let _ = write!(text, ", and {} more", n - STEPS_NAMED);
        }
        LockError::deadlock(text)
    }
}

/// Who holds a lock in `state` at `now_ms`: its exclusive owner, or a
/// read-write lock's writer and readers whose leases have not run out (a
/// reader whose every lease key is gone holds nothing, whatever its field
/// says, and is reclaimed at the next transition).
pub fn lock_holders(state: &LockState, now_ms: i64) -> Holders {
    let mut holders: Vec<Vec<u8>> = Vec::new();
    any_holder(state, now_ms, |owner| {
        if !holders.iter().any(|h| h[..] == *owner) {
            holders.push(owner.to_vec());
        }
        false
    });
    Holders::all_of(holders)
}

/// Whether `f` is true of a live holder of `state` at `now_ms` (those
/// [`lock_holders`] lists; an owner on both sides is asked twice): lets a
/// wait learn that no holder waits for anything without copying them.
pub fn any_holder(state: &LockState, now_ms: i64, mut f: impl FnMut(&[u8]) -> bool) -> bool {
    match state {
        LockState::Free => false,
        LockState::Held { owner, .. } => f(owner),
        LockState::Shared(rw) => {
            let writer = rw
                .writer
                .as_ref()
                .filter(|_| rw.write_until.is_none_or(|until| until >= now_ms));
            if writer.is_some_and(|(owner, _)| f(owner)) {
                return true;
            }
            rw.readers.iter().any(|reader| {
                let live = !reader.expired() && reader.lease_end().is_none_or(|end| end >= now_ms);
                live && f(&reader.owner)
            })
        }
    }
}

/// Who holds permits of a semaphore in `state` at `now_ms`: every owner of
/// a live permit, each once; a Redisson permit's id names no owner
/// (`unnamed`). A waiter waits for them only as [`Holders::waited_for_by`]
/// says.
pub fn semaphore_holders(state: &SemaphoreState, now_ms: i64) -> Holders {
    let mut holders = Holders {
        any_one: true,
        ..Holders::default()
    };
    for permit in state.permits.iter().filter(|p| p.until >= now_ms) {
        match owner_of(&permit.id) {
            Some((owner, _)) => {
                if !holders.owners.iter().any(|o| o[..] == *owner) {
                    holders.owners.push(owner.to_vec());
                }
            }
            None => holders.unnamed = true,
        }
    }
    holders
}

/// Whether `f` is true of the owner of a live permit of `state` at
/// `now_ms` (an owner of several asked for each): lets a wait learn that no
/// holder waits for anything without copying them. Unnamed permits are
/// skipped (nobody can wait through them, see [`Holders::waited_for_by`]).
pub fn any_semaphore_holder(
    state: &SemaphoreState,
    now_ms: i64,
    mut f: impl FnMut(&[u8]) -> bool,
) -> bool {
    state
        .permits
        .iter()
        .filter(|p| p.until >= now_ms)
        .filter_map(|p| owner_of(&p.id))
        .any(|(owner, _)| f(owner))
}

/// Whether `state` at `now_ms` has one or two holders, every permit named
/// (the holders through whom a waiter can wait, see
/// [`Holders::waited_for_by`]), and `waits` is true of one of them: what
/// [`semaphore_holders`] would say, without copying them.
pub fn few_semaphore_holders_wait(
    state: &SemaphoreState,
    now_ms: i64,
    waits: impl Fn(&[u8]) -> bool,
) -> bool {
    let mut seen: [&[u8]; 2] = [&[], &[]];
    let mut n = 0;
    for permit in state.permits.iter().filter(|p| p.until >= now_ms) {
        let Some((owner, _)) = owner_of(&permit.id) else {
            return false;
        };
        if !seen[..n].contains(&owner) {
            if n == seen.len() {
                return false;
            }
            seen[n] = owner;
            n += 1;
        }
    }
    seen[..n].iter().any(|owner| waits(owner))
}

/// The cycle `caller` would close by waiting for `wanted` (each of the
/// locks of a multi-lock caller), if any: a shortest one, found breadth
/// first, so the reply names as few steps as possible.
pub fn cycle_closed_by(
    graph: &impl WaitsFor,
    caller: &[u8],
    wanted: &[LockId<'_>],
) -> Option<Cycle> {
    let mut search = Search {
        graph,
        caller,
        holders: NameMap::default(),
        expanded: NameSet::default(),
        came_from: NameMap::default(),
        seen: NameSet::default(),
    };
    let mut frontier: Vec<Vec<u8>> = Vec::new();
    for lock in wanted {
        if let Some(last) = search.follow(caller, &lock.to_owned(), &mut frontier) {
            return Some(search.unwind(last));
        }
    }
    let mut visits = 0;
    while !frontier.is_empty() {
        let mut further = Vec::new();
        for owner in frontier {
            visits += 1;
            if visits > MAX_VISITS {
                return None;
            }
            for lock in graph.waits_of(&owner) {
                if let Some(last) = search.follow(&owner, &lock, &mut further) {
                    return Some(search.unwind(last));
                }
            }
        }
        frontier = further;
    }
    None
}

/// One search's state: what it has read and where it has been.
struct Search<'g, G> {
    graph: &'g G,
    caller: &'g [u8],
    /// Each lock's holders, read once.
    holders: NameMap<LockId<'static>, Holders>,
    /// Locks whose holders (all of them waited for) are queued already:
    /// another waiter of the same lock adds nobody new.
    expanded: NameSet<LockId<'static>>,
    /// `came_from[o]` = the step by which the previous owner waits for `o`.
    came_from: NameMap<Vec<u8>, Step>,
    seen: NameSet<Vec<u8>>,
}

impl<G: WaitsFor> Search<'_, G> {
    /// Queues whom `owner` waits for by waiting for `lock` into `next`; the
    /// last step, if one of them is the caller.
    fn follow(
        &mut self,
        owner: &[u8],
        lock: &LockId<'static>,
        next: &mut Vec<Vec<u8>>,
    ) -> Option<Step> {
        let holders = self
            .holders
            .entry(lock.clone())
            .or_insert_with(|| self.graph.holders_of(lock));
        let held_here = !holders.any_one && holders.owners.iter().any(|o| o[..] == *owner);
        if held_here {
            // A re-entry: the owner does not wait here, not even behind a
            // multi-lock caller.
            return None;
        }
        let mut successors: Vec<(Vec<u8>, bool)> = Vec::new();
        // Every holder, all waited for: once per lock is enough (nobody
        // new the second time). A semaphore's depend on who waits.
        if holders.any_one || !self.expanded.contains(lock) {
            successors.extend(
                holders
                    .waited_for_by(owner)
                    .into_iter()
                    .map(|o| (o.to_vec(), false)),
            );
            if !holders.any_one {
                self.expanded.insert(lock.clone());
            }
        }
        if let Some(ahead) = self.graph.multi_ahead(lock, owner) {
            successors.push((ahead, true));
        }
        for (successor, behind) in successors {
            let step = Step {
                owner: owner.to_vec(),
                lock: lock.clone(),
                behind,
            };
            if successor == self.caller {
                if owner == self.caller {
                    // The caller's own entry (an owner id shared by two
                    // connections): not a wait for itself.
                    continue;
                }
                return Some(step);
            }
            if successor != owner && self.seen.insert(successor.clone()) {
                self.came_from.insert(successor.clone(), step);
                next.push(successor);
            }
        }
        None
    }

    /// The cycle ending with `last`, whose lock the caller holds (or is
    /// queued ahead for), walked back to the caller's own step.
    fn unwind(&self, last: Step) -> Cycle {
        let mut steps = vec![last];
        while let Some(step) = self.came_from.get(&steps[steps.len() - 1].owner) {
            let at_caller = step.owner == self.caller;
            steps.push(step.clone());
            if at_caller || steps.len() > self.came_from.len() + 1 {
                break;
            }
        }
        steps.reverse();
        Cycle { steps }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;

    /// A graph written out: who waits for which locks, who holds which.
    #[derive(Default)]
    struct Graph {
        waits: NameMap<Vec<u8>, Vec<LockId<'static>>>,
        holds: NameMap<LockId<'static>, Vec<Vec<u8>>>,
        /// Locks that are semaphores.
        semaphores: NameSet<LockId<'static>>,
        /// Multi-lock callers queued for a lock, first in line first.
        multis: NameMap<LockId<'static>, Vec<Vec<u8>>>,
        lookups: std::cell::Cell<usize>,
    }

    fn lock(name: &str) -> LockId<'static> {
        LockId {
            db: 0,
            key: Cow::Owned(name.as_bytes().to_vec()),
        }
    }

    impl Graph {
        fn holds(mut self, owner: &str, name: &str) -> Self {
            self.holds
                .entry(lock(name))
                .or_default()
                .push(owner.as_bytes().to_vec());
            self
        }

        /// A multi-lock caller `owner` queued for `name`, behind those
        /// queued before.
        fn multi(mut self, owner: &str, name: &str) -> Self {
            self.multis
                .entry(lock(name))
                .or_default()
                .push(owner.as_bytes().to_vec());
            self.waits(owner, name)
        }

        /// `name` is a semaphore of which `owner` holds permits.
        fn permits(mut self, owner: &str, name: &str) -> Self {
            self.semaphores.insert(lock(name));
            self.holds(owner, name)
        }

        fn waits(mut self, owner: &str, name: &str) -> Self {
            self.waits
                .entry(owner.as_bytes().to_vec())
                .or_default()
                .push(lock(name));
            self
        }
    }

    impl WaitsFor for Graph {
        fn waits_of(&self, owner: &[u8]) -> Vec<LockId<'static>> {
            self.lookups.set(self.lookups.get() + 1);
            self.waits.get(owner).cloned().unwrap_or_default()
        }

        fn holders_of(&self, lock: &LockId<'_>) -> Holders {
            self.lookups.set(self.lookups.get() + 1);
            Holders {
                owners: self.holds.get(lock).cloned().unwrap_or_default(),
                any_one: self.semaphores.contains(lock),
                unnamed: false,
            }
        }

        fn multi_ahead(&self, lock: &LockId<'_>, owner: &[u8]) -> Option<Vec<u8>> {
            self.lookups.set(self.lookups.get() + 1);
            let queue = self.multis.get(lock)?;
            match queue.iter().position(|o| o[..] == *owner) {
                Some(at) => at.checked_sub(1).map(|i| queue[i].clone()),
                None => queue.last().cloned(),
            }
        }
    }

    fn steps(cycle: &Cycle) -> Vec<(String, String)> {
        cycle
            .steps
            .iter()
            .map(|s| {
                (
                    String::from_utf8_lossy(&s.owner).into_owned(),
                    String::from_utf8_lossy(&s.lock.key).into_owned(),
                )
            })
            .collect()
    }

    fn pair(owner: &str, lock: &str) -> (String, String) {
        (owner.into(), lock.into())
    }

    #[test]
    fn two_owners_each_waiting_for_the_others_lock() {
        // a holds x and waits for y; b holds y and now would wait for x.
        let g = Graph::default()
            .holds("a", "x")
            .holds("b", "y")
            .waits("a", "y");
        let cycle = cycle_closed_by(&g, b"b", &[lock("x")]).expect("a cycle");
        assert_eq!(steps(&cycle), [pair("b", "x"), pair("a", "y")]);
        // Without a's wait there is none.
        let g = Graph::default().holds("a", "x").holds("b", "y");
        assert_eq!(cycle_closed_by(&g, b"b", &[lock("x")]), None);
    }

    #[test]
    fn three_and_a_hundred_owners_in_a_ring() {
        for n in [3usize, 100] {
            // o0 holds l0, ..., o(n-1) holds l(n-1); oi waits for l(i+1)
            // for i < n-1; o(n-1) would wait for l0.
            let mut g = Graph::default();
            for i in 0..n {
                g = g.holds(&format!("o{i}"), &format!("l{i}"));
            }
            for i in 0..n - 1 {
                g = g.waits(&format!("o{i}"), &format!("l{}", i + 1));
            }
            let last = format!("o{}", n - 1);
            let cycle = cycle_closed_by(&g, last.as_bytes(), &[lock("l0")]).expect("a ring");
            assert_eq!(cycle.steps.len(), n, "ring of {n}");
            assert_eq!(steps(&cycle)[0], pair(&last, "l0"));
            assert_eq!(
                steps(&cycle)[n - 1],
                pair(&format!("o{}", n - 2), &last.replace('o', "l"))
            );
        }
    }

    #[test]
    fn read_write_and_multi_lock_edges() {
        // A read-write lock held by two readers: a writer that waits for
        // it waits for both; the cycle goes through the reader that waits.
        let g = Graph::default()
            .holds("r1", "rw")
            .holds("r2", "rw")
            .holds("w", "m")
            .waits("r2", "m");
        let cycle = cycle_closed_by(&g, b"w", &[lock("rw")]).expect("through r2");
        assert_eq!(steps(&cycle), [pair("w", "rw"), pair("r2", "m")]);
        // A multi-lock caller waits for every key it wants.
        let g = Graph::default()
            .holds("a", "k1")
            .holds("b", "k2")
            .waits("b", "k3")
            .holds("c", "k3");
        assert_eq!(
            cycle_closed_by(&g, b"c", &[lock("k1"), lock("k2")]).map(|c| c.steps.len()),
            Some(2)
        );
        assert_eq!(cycle_closed_by(&g, b"c", &[lock("k1")]), None);
    }

    #[test]
    fn a_caller_behind_a_multi_lock_caller_waits_for_it_even_on_a_free_lock() {
        // m waits for k (held by x) and for l (free, but kept for m): x
        // waiting for l waits behind m.
        let g = Graph::default()
            .holds("x", "k")
            .multi("m", "l")
            .waits("m", "k");
        let cycle = cycle_closed_by(&g, b"x", &[lock("l")]).expect("behind m");
        assert_eq!(steps(&cycle), [pair("x", "l"), pair("m", "k")]);
        assert!(cycle.steps[0].behind && !cycle.steps[1].behind);
        assert!(cycle
            .error()
            .to_string()
            .contains("'x' waits for 'l' behind 'm', 'm' waits for 'k' held by 'x'"));
        // Not first in line: a waits for l ahead of m, and x behind m
        // still waits for m, which waits for k.
        let g = Graph::default()
            .holds("h", "l")
            .holds("x", "k")
            .waits("a", "l")
            .multi("m", "l")
            .waits("m", "k");
        let cycle = cycle_closed_by(&g, b"x", &[lock("l")]).expect("behind m, second");
        assert_eq!(steps(&cycle), [pair("x", "l"), pair("m", "k")]);
        // Two multi-lock callers queued: the later waits for the earlier.
        let g = Graph::default()
            .holds("x", "k")
            .multi("m1", "l")
            .multi("m2", "l")
            .waits("m1", "k");
        let cycle = cycle_closed_by(&g, b"x", &[lock("l")]).expect("behind m2, m1");
        assert_eq!(
            steps(&cycle),
            [pair("x", "l"), pair("m2", "l"), pair("m1", "k")]
        );
    }

    #[test]
    fn an_owner_does_not_wait_for_a_lock_it_holds() {
        // c holds k1 and queues for k1 and k3 as a multi-lock caller
        // behind g2: on k1 that is a re-entry, no wait behind g2.
        let g = Graph::default()
            .holds("c", "k1")
            .holds("z", "k3")
            .multi("g2", "k1")
            .waits("g2", "k2");
        assert_eq!(cycle_closed_by(&g, b"c", &[lock("k1"), lock("k3")]), None);
        // Nor does another owner queued so: q waits for w, held by c,
        // which holds k1 and waits there behind g2, which waits for k2,
        // held by q. c's entry on k1 is no wait; its wait for k3 (z) is.
        let g = Graph::default()
            .holds("c", "k1")
            .holds("c", "w")
            .holds("q", "k2")
            .holds("z", "k3")
            .multi("g2", "k1")
            .waits("g2", "k2")
            .multi("c", "k1")
            .waits("c", "k3");
        assert_eq!(cycle_closed_by(&g, b"q", &[lock("w")]), None);
    }

    #[test]
    fn a_semaphore_waiter_waits_for_its_one_other_holder_only() {
        // s has two holders, p and the caller c; p waits for l, held by c:
        // only p can free a permit for c.
        let g = Graph::default()
            .permits("p", "s")
            .permits("c", "s")
            .holds("c", "l")
            .waits("p", "l");
        let cycle = cycle_closed_by(&g, b"c", &[lock("s")]).expect("through p");
        assert_eq!(steps(&cycle), [pair("c", "s"), pair("p", "l")]);
        // With a third holder, r, either p or r could: no cycle.
        let g = Graph::default()
            .permits("p", "s")
            .permits("r", "s")
            .holds("c", "l")
            .waits("p", "l");
        assert_eq!(cycle_closed_by(&g, b"c", &[lock("s")]), None);
    }

    #[test]
    fn each_locks_holders_are_read_once_per_search() {
        // 100 readers of l each wait for m, which 2,000 readers hold; the
        // caller, holding nothing they want, waits for l: m is read once.
        let mut g = Graph::default();
        for i in 0..100 {
            g = g.holds(&format!("r{i}"), "l").waits(&format!("r{i}"), "m");
        }
        for i in 0..2000 {
            g = g.holds(&format!("m{i}"), "m");
        }
        assert_eq!(cycle_closed_by(&g, b"c", &[lock("l")]), None);
        // l and m read once each; each of the 2,100 owners asked what it
        // waits for; each (lock, owner) asked who is ahead.
        assert!(g.lookups.get() < 2 + 2100 + 200, "{}", g.lookups.get());
    }

    #[test]
    fn a_wait_that_ended_is_no_edge() {
        // b waited for x and left (timed out): the graph no longer says so.
        let g = Graph::default().holds("a", "x").holds("b", "y");
        assert_eq!(cycle_closed_by(&g, b"a", &[lock("y")]), None);
    }

    #[test]
    fn a_re_entry_is_not_a_wait_for_oneself() {
        let g = Graph::default().holds("a", "x");
        assert_eq!(cycle_closed_by(&g, b"a", &[lock("x")]), None);
    }

    #[test]
    fn a_hot_lock_costs_its_holder_not_its_queue() {
        // 10,000 waiters queue for x, whose holder waits for nothing: a new
        // waiter's search reads x's holders and what they wait for, once.
        let mut g = Graph::default().holds("h", "x");
        for i in 0..10_000 {
            g = g.waits(&format!("w{i}"), "x");
        }
        assert_eq!(cycle_closed_by(&g, b"new", &[lock("x")]), None);
        // x's holders and first in line, and what h waits for (nothing).
        assert_eq!(g.lookups.get(), 3);
    }

    #[test]
    fn a_cycle_not_through_the_caller_is_not_its_to_break() {
        // a and b are deadlocked already (found when the second of them
        // waited); c waiting for x does not close that cycle.
        let g = Graph::default()
            .holds("a", "x")
            .holds("b", "y")
            .waits("a", "y")
            .waits("b", "x");
        assert_eq!(cycle_closed_by(&g, b"c", &[lock("x")]), None);
    }

    #[test]
    fn the_reply_names_each_step_and_cuts_a_long_ring_short() {
        let g = Graph::default()
            .holds("a", "x")
            .holds("b", "y")
            .waits("a", "y");
        let e = cycle_closed_by(&g, b"b", &[lock("x")]).unwrap().error();
        assert_eq!(e.code(), "DEADLOCK");
        assert_eq!(
            e.to_string(),
            "DEADLOCK this wait would close a cycle of 2: 'b' waits for 'x' held by 'a', 'a' waits for 'y' held by 'b'"
        );
        let ring = Cycle {
            steps: (0..40)
                .map(|i| Step {
                    behind: false,
                    owner: format!("o{i}").into_bytes(),
                    lock: LockId {
                        db: i32::from(i == 1),
                        key: Cow::Owned(format!("l{i}").into_bytes()),
                    },
                })
                .collect(),
        };
        let text = ring.error().to_string();
        assert!(text.contains("cycle of 40:"));
        assert!(text.contains("'o1' waits for 'l1' (db 1) held by 'o2'"));
        assert!(text.ends_with("'o15' waits for 'l15' held by 'o16', and 24 more"));
        assert!(!text.contains('\n'));
    }

    #[test]
    fn holders_are_who_holds_now() {
        use crate::read_write::{ReadWriteHolds, Reader};
        let owner = |s: &str| -> crate::request::FieldName { s.as_bytes().into() };
        let owners = |h: Holders| {
            assert!(!h.any_one && !h.unnamed);
            h.owners
        };
        assert!(owners(lock_holders(&LockState::Free, 0)).is_empty());
        let held = LockState::Held {
            owner: owner("a"),
            holds: 2,
        };
        assert_eq!(owners(lock_holders(&held, 0)), vec![b"a".to_vec()]);
        // A writer that also reads is one holder; a reader whose every
        // lease key is gone, or whose lease ended, holds nothing.
        let reader = |o: &str, leases: Vec<Option<i64>>| Reader {
            owner: owner(o),
            holds: i64::try_from(leases.len()).unwrap(),
            leases,
        };
        let rw = ReadWriteHolds {
            writer: Some((owner("w"), 1)),
            readers: vec![
                reader("w", vec![Some(500)]),
                reader("r1", vec![Some(500)]),
                reader("gone", vec![None]),
                reader("ended", vec![Some(50)]),
            ],
            expires_at: Some(500),
            write_until: Some(500),
        };
        assert_eq!(
            owners(lock_holders(&LockState::Shared(rw.clone()), 100)),
            vec![b"w".to_vec(), b"r1".to_vec()]
        );
        let ended_writer = ReadWriteHolds {
            write_until: Some(50),
            ..rw
        };
        assert_eq!(
            owners(lock_holders(&LockState::Shared(ended_writer), 100)),
            vec![b"w".to_vec(), b"r1".to_vec()]
        );
    }

    #[test]
    fn a_semaphore_waiter_waits_for_the_one_other_owner_with_permits() {
        use crate::semaphore::{permit_id, Permit};
        let permit = |owner: &[u8], i, until| Permit {
            id: permit_id(owner, i),
            until,
        };
        let state = |permits| SemaphoreState {
            available: Some(0),
            permits,
        };
        let waits = |h: &Holders, who: &[u8]| -> Vec<Vec<u8>> {
            h.waited_for_by(who)
                .into_iter()
                .map(<[u8]>::to_vec)
                .collect()
        };
        let one = semaphore_holders(
            &state(vec![permit(b"a", 1, 500), permit(b"a", 2, 500)]),
            100,
        );
        assert!(one.any_one && !one.unnamed);
        assert_eq!(waits(&one, b"c"), vec![b"a".to_vec()]);
        // Two holders: either could free a permit, but not the waiter's
        // own. A permit whose lease ended is nobody's.
        let two = semaphore_holders(
            &state(vec![permit(b"a", 1, 500), permit(b"b", 1, 500)]),
            100,
        );
        assert_eq!(two.owners, vec![b"a".to_vec(), b"b".to_vec()]);
        assert!(waits(&two, b"c").is_empty());
        assert_eq!(waits(&two, b"b"), vec![b"a".to_vec()]);
        let one_live =
            semaphore_holders(&state(vec![permit(b"a", 1, 500), permit(b"b", 1, 50)]), 100);
        assert_eq!(waits(&one_live, b"c"), vec![b"a".to_vec()]);
        // A Redisson permit's id names no owner: it could be freed by
        // anyone.
        let redisson = semaphore_holders(
            &state(vec![
                permit(b"a", 1, 500),
                Permit {
                    id: b"3f2a9c".to_vec(),
                    until: 500,
                },
            ]),
            100,
        );
        assert!(redisson.unnamed);
        assert_eq!(redisson.owners, vec![b"a".to_vec()]);
        assert!(waits(&redisson, b"c").is_empty());
        assert!(semaphore_holders(&state(Vec::new()), 100).owners.is_empty());
        // The same, without copying: one or two named holders, one waiting.
        let few = |permits, waiting: &[u8]| {
            let st = state(permits);
            let w = waiting.to_vec();
            let by_copy = {
                let h = semaphore_holders(&st, 100);
                !h.unnamed && (1..=2).contains(&h.owners.len()) && h.owners.contains(&w)
            };
            let direct = few_semaphore_holders_wait(&st, 100, |o| o == &w[..]);
            assert_eq!(direct, by_copy);
            direct
        };
        assert!(few(vec![permit(b"a", 1, 500), permit(b"a", 2, 500)], b"a"));
        assert!(few(vec![permit(b"a", 1, 500), permit(b"b", 1, 500)], b"b"));
        assert!(!few(vec![permit(b"a", 1, 500), permit(b"b", 1, 500)], b"c"));
        let three = vec![
            permit(b"a", 1, 500),
            permit(b"b", 1, 500),
            permit(b"c", 1, 500),
        ];
        assert!(!few(three, b"a"));
        assert!(few(vec![permit(b"a", 1, 500), permit(b"b", 1, 50)], b"a"));
        assert!(!few(vec![permit(b"a", 1, 50)], b"a"));
        let unnamed = Permit {
            id: b"3f2a9c".to_vec(),
            until: 500,
        };
        assert!(!few(vec![permit(b"a", 1, 500), unnamed], b"a"));
        let st = state(vec![permit(b"a", 1, 500), permit(b"b", 1, 50)]);
        assert!(any_semaphore_holder(&st, 100, |o| o == b"a"));
        assert!(!any_semaphore_holder(&st, 100, |o| o == b"b"));
        // A lock holder does not wait for its own lock (a re-entry).
        let lock = Holders::all_of(vec![b"a".to_vec(), b"b".to_vec()]);
        assert!(waits(&lock, b"a").is_empty());
        assert_eq!(waits(&lock, b"c").len(), 2);
    }
}
