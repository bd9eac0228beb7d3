//! Deadlocks: the waits-for graph over owners, and the search for the cycle
//! a new wait would close.
//!
//! An owner that waits for a lock waits for that lock's holders (the
//! exclusive owner; a read-write lock's readers and writer; a semaphore's
//! permit holders; each key of a multi-lock caller's). A caller about to
//! wait closes a cycle when, following "waits for" from the holders of what
//! it wants, one reaches the caller itself: each of them waits, directly or
//! not, for the next, and none can go on. The search starts at the holders
//! of the lock the caller wants and follows only holders, never the other
//! waiters of a queue: a hot lock with 10,000 waiters whose holder waits for
//! nothing costs one lookup per new waiter, however long its queue.
//!
//! The graph is read through [`WaitsFor`], which the server layer answers
//! from its registry (who waits for what) and its keys (who holds what); the
//! search is bounded ([`MAX_VISITS`]), so a huge graph costs a bounded time
//! and, past the bound, finds nothing rather than stall the server.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

use crate::error::{printable, LockError};
use crate::lock_id::LockId;
use crate::semaphore::{owner_of, SemaphoreState};
use crate::state::LockState;

/// Owners visited before the search gives up (finds no cycle).
pub const MAX_VISITS: usize = 10_000;

/// What the search reads of the server: for an owner, the locks it waits
/// for now; for a lock, who holds it now.
pub trait WaitsFor {
    fn waits_of(&self, owner: &[u8]) -> Vec<LockId<'static>>;
    fn holders_of(&self, lock: &LockId<'_>) -> Vec<Vec<u8>>;
    /// The owner of the multi-lock caller first in line for `lock`, if one
    /// is: nobody queued behind it is served before it, so each of them
    /// waits for it too, even while the lock is free (reserved for it until
    /// its other keys are). Any other first in line is served as soon as
    /// the holders let go, so waiting for the holders says it all.
    fn first_in_line(&self, _lock: &LockId<'_>) -> Option<Vec<u8>> {
        None
    }
}

/// One edge of a cycle: `owner` waits for `lock`, held by the next step's
/// owner (the last step's lock by the first step's owner), or, `behind`,
/// queued first for it.
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

/// Who a caller waiting for a lock in `state` waits for at `now_ms`: its
/// exclusive owner, or a read-write lock's writer and readers whose leases
/// have not run out (a reader whose every lease key is gone holds nothing,
/// whatever its field says, and is reclaimed at the next transition).
pub fn lock_holders(state: &LockState, now_ms: i64) -> Vec<Vec<u8>> {
    match state {
        LockState::Free => Vec::new(),
        LockState::Held { owner, .. } => vec![owner.to_vec()],
        LockState::Shared(rw) => {
            let mut holders = Vec::new();
            if let Some((writer, _)) = &rw.writer {
                if rw.write_until.is_none_or(|until| until >= now_ms) {
                    holders.push(writer.to_vec());
                }
            }
            for reader in &rw.readers {
                let live = !reader.expired() && reader.lease_end().is_none_or(|end| end >= now_ms);
                if live && !holders.iter().any(|h| h[..] == reader.owner[..]) {
                    holders.push(reader.owner.to_vec());
                }
            }
            holders
        }
    }
}

/// Who a caller waiting for permits of a semaphore in `state` waits for:
/// the one owner holding every live permit, if there is one. With several
/// holders any one of them could free what the caller needs, so a cycle
/// through one of them is no deadlock; a Redisson permit's id names no
/// owner. Either way the semaphore leads nowhere (no false `DEADLOCK`).
pub fn semaphore_holders(state: &SemaphoreState, now_ms: i64) -> Vec<Vec<u8>> {
    let mut sole: Option<&[u8]> = None;
    for permit in state.permits.iter().filter(|p| p.until >= now_ms) {
        match (owner_of(&permit.id), sole) {
            (Some((owner, _)), None) => sole = Some(owner),
            (Some((owner, _)), Some(first)) if owner == first => {}
            _ => return Vec::new(),
        }
    }
    sole.map(|owner| vec![owner.to_vec()]).unwrap_or_default()
}

/// Every owner holding a live permit of a semaphore in `state`, each once
/// (what LOCK.WAITERS shows its waiters wait for; Redisson's permits name
/// no owner and are not listed).
pub fn permit_owners(state: &SemaphoreState, now_ms: i64) -> Vec<Vec<u8>> {
    let mut owners: Vec<Vec<u8>> = Vec::new();
    for permit in state.permits.iter().filter(|p| p.until >= now_ms) {
        if let Some((owner, _)) = owner_of(&permit.id) {
            if !owners.iter().any(|o| o[..] == *owner) {
                owners.push(owner.to_vec());
            }
        }
    }
    owners
}

/// The cycle `caller` would close by waiting for `wanted` (each of the
/// locks of a multi-lock caller), if any: a shortest one, found breadth
/// first, so the reply names as few steps as possible.
pub fn cycle_closed_by(
    graph: &impl WaitsFor,
    caller: &[u8],
    wanted: &[LockId<'_>],
) -> Option<Cycle> {
    // Breadth first over owners; `came_from[o]` = the step by which the
    // previous owner waits for `o`.
    let mut came_from: HashMap<Vec<u8>, Step> = HashMap::new();
    let mut seen: HashSet<Vec<u8>> = HashSet::new();
    let mut frontier: Vec<Vec<u8>> = Vec::new();
    for lock in wanted {
        for (next, behind) in successors(graph, lock) {
            if next == caller {
                // The caller holds what it wants: a re-entry, not a wait;
                // what the rules do with it is not the graph's business.
                continue;
            }
            if seen.insert(next.clone()) {
                let step = Step {
                    owner: caller.to_vec(),
                    lock: lock.to_owned(),
                    behind,
                };
                came_from.insert(next.clone(), step);
                frontier.push(next);
            }
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
                for (next, behind) in successors(graph, &lock) {
                    if next == caller {
                        let last = Step {
                            owner,
                            lock,
                            behind,
                        };
                        return Some(unwind(&came_from, caller, last));
                    }
                    if next != owner && seen.insert(next.clone()) {
                        let step = Step {
                            owner: owner.clone(),
                            lock: lock.clone(),
                            behind,
                        };
                        came_from.insert(next.clone(), step);
                        further.push(next);
                    }
                }
            }
        }
        frontier = further;
    }
    None
}

/// Whom a caller waiting for `lock` waits for: its holders, then the
/// multi-lock caller first in line if that is someone else (`true`: the
/// caller is behind it, not waiting for its hold).
fn successors(graph: &impl WaitsFor, lock: &LockId<'_>) -> Vec<(Vec<u8>, bool)> {
    let mut next: Vec<(Vec<u8>, bool)> = graph
        .holders_of(lock)
        .into_iter()
        .map(|holder| (holder, false))
        .collect();
    if let Some(first) = graph.first_in_line(lock) {
        if !next.iter().any(|(holder, _)| *holder == first) {
            next.push((first, true));
        }
    }
    next
}

/// The cycle ending with `last`, whose lock the caller holds (or is first
/// in line for), walked back to the caller's own step.
fn unwind(came_from: &HashMap<Vec<u8>, Step>, caller: &[u8], last: Step) -> Cycle {
    let mut steps = vec![last];
    while let Some(step) = came_from.get(&steps[steps.len() - 1].owner) {
        let at_caller = step.owner == caller;
        steps.push(step.clone());
        if at_caller {
            break;
        }
    }
    steps.reverse();
    Cycle { steps }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;

    /// A graph written out: who waits for which locks, who holds which.
    #[derive(Default)]
    struct Graph {
        waits: HashMap<Vec<u8>, Vec<LockId<'static>>>,
        holds: HashMap<LockId<'static>, Vec<Vec<u8>>>,
        firsts: HashMap<LockId<'static>, Vec<u8>>,
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

        /// A multi-lock caller `owner` first in line for `name`.
        fn first(mut self, owner: &str, name: &str) -> Self {
            self.firsts.insert(lock(name), owner.as_bytes().to_vec());
            self.waits(owner, name)
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

        fn holders_of(&self, lock: &LockId<'_>) -> Vec<Vec<u8>> {
            self.lookups.set(self.lookups.get() + 1);
            self.holds.get(lock).cloned().unwrap_or_default()
        }

        fn first_in_line(&self, lock: &LockId<'_>) -> Option<Vec<u8>> {
            self.lookups.set(self.lookups.get() + 1);
            self.firsts.get(lock).cloned()
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
        // m waits for k (held by x) and for l (free, but m is first in
        // line there): x waiting for l waits behind m.
        let g = Graph::default()
            .holds("x", "k")
            .first("m", "l")
            .waits("m", "k");
        let cycle = cycle_closed_by(&g, b"x", &[lock("l")]).expect("behind m");
        assert_eq!(steps(&cycle), [pair("x", "l"), pair("m", "k")]);
        assert!(cycle.steps[0].behind && !cycle.steps[1].behind);
        assert!(cycle
            .error()
            .to_string()
            .contains("'x' waits for 'l' behind 'm', 'm' waits for 'k' held by 'x'"));
        // A holder that is also first in line is one edge, by its hold.
        let g = Graph::default()
            .holds("x", "k")
            .holds("m", "l")
            .first("m", "l")
            .waits("m", "k");
        let cycle = cycle_closed_by(&g, b"x", &[lock("l")]).expect("held by m");
        assert!(!cycle.steps[0].behind);
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
        assert!(lock_holders(&LockState::Free, 0).is_empty());
        let held = LockState::Held {
            owner: owner("a"),
            holds: 2,
        };
        assert_eq!(lock_holders(&held, 0), vec![b"a".to_vec()]);
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
            lock_holders(&LockState::Shared(rw.clone()), 100),
            vec![b"w".to_vec(), b"r1".to_vec()]
        );
        let ended_writer = ReadWriteHolds {
            write_until: Some(50),
            ..rw
        };
        assert_eq!(
            lock_holders(&LockState::Shared(ended_writer), 100),
            vec![b"w".to_vec(), b"r1".to_vec()]
        );
    }

    #[test]
    fn a_semaphore_leads_to_its_holder_only_when_it_has_one() {
        use crate::semaphore::{permit_id, Permit};
        let permit = |owner: &[u8], i, until| Permit {
            id: permit_id(owner, i),
            until,
        };
        let state = |permits| SemaphoreState {
            available: Some(0),
            permits,
        };
        let one = state(vec![permit(b"a", 1, 500), permit(b"a", 2, 500)]);
        assert_eq!(semaphore_holders(&one, 100), vec![b"a".to_vec()]);
        // Two holders: either could free a permit. A permit whose lease
        // ended is nobody's.
        let two = state(vec![permit(b"a", 1, 500), permit(b"b", 1, 500)]);
        assert!(semaphore_holders(&two, 100).is_empty());
        let one_live = state(vec![permit(b"a", 1, 500), permit(b"b", 1, 50)]);
        assert_eq!(semaphore_holders(&one_live, 100), vec![b"a".to_vec()]);
        // A Redisson permit's id names no owner.
        let redisson = state(vec![
            permit(b"a", 1, 500),
            Permit {
                id: b"3f2a9c".to_vec(),
                until: 500,
            },
        ]);
        assert!(semaphore_holders(&redisson, 100).is_empty());
        assert_eq!(permit_owners(&redisson, 100), vec![b"a".to_vec()]);
        assert_eq!(permit_owners(&two, 100), vec![b"a".to_vec(), b"b".to_vec()]);
        assert!(semaphore_holders(&state(Vec::new()), 100).is_empty());
    }
}
