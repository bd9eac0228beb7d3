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

use crate::lock_id::LockId;

/// Owners visited before the search gives up (finds no cycle).
pub const MAX_VISITS: usize = 10_000;

/// What the search reads of the server: for an owner, the locks it waits
/// for now; for a lock, who holds it now.
pub trait WaitsFor {
    fn waits_of(&self, owner: &[u8]) -> Vec<LockId<'static>>;
    fn holders_of(&self, lock: &LockId<'_>) -> Vec<Vec<u8>>;
}

/// One edge of a cycle: `owner` waits for `lock`, held by the next step's
/// owner (the last step's lock is held by the first step's owner).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub owner: Vec<u8>,
    pub lock: LockId<'static>,
}

/// The cycle a wait would close, starting with the caller's own step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cycle {
    pub steps: Vec<Step>,
}

/// The cycle `caller` would close by waiting for `wanted` (each of the
/// locks of a multi-lock caller), if any: a shortest one, found breadth
/// first, so the reply names as few steps as possible.
pub fn cycle_closed_by(
    graph: &impl WaitsFor,
    caller: &[u8],
    wanted: &[LockId<'_>],
) -> Option<Cycle> {
    // Breadth first over owners; `came_from[o]` = (previous owner, the lock
    // by which the previous owner waits for `o`).
    let mut came_from: HashMap<Vec<u8>, (Vec<u8>, LockId<'static>)> = HashMap::new();
    let mut seen: HashSet<Vec<u8>> = HashSet::new();
    let mut frontier: Vec<Vec<u8>> = Vec::new();
    for lock in wanted {
        for holder in graph.holders_of(lock) {
            if holder == caller {
                // The caller holds what it wants: a re-entry, not a wait;
                // what the rules do with it is not the graph's business.
                continue;
            }
            if seen.insert(holder.clone()) {
                came_from.insert(holder.clone(), (caller.to_vec(), lock.to_owned()));
                frontier.push(holder);
            }
        }
    }
    let mut visits = 0;
    while !frontier.is_empty() {
        let mut next = Vec::new();
        for owner in frontier {
            visits += 1;
            if visits > MAX_VISITS {
                return None;
            }
            for lock in graph.waits_of(&owner) {
                for holder in graph.holders_of(&lock) {
                    if holder == caller {
                        return Some(unwind(&came_from, caller, owner, lock));
                    }
                    if holder != owner && seen.insert(holder.clone()) {
                        came_from.insert(holder.clone(), (owner.clone(), lock.clone()));
                        next.push(holder);
                    }
                }
            }
        }
        frontier = next;
    }
    None
}

/// The cycle ending with `last` waiting for `lock`, held by the caller,
/// walked back to the caller's own step.
fn unwind(
    came_from: &HashMap<Vec<u8>, (Vec<u8>, LockId<'static>)>,
    caller: &[u8],
    last: Vec<u8>,
    lock: LockId<'static>,
) -> Cycle {
    let mut steps = vec![Step { owner: last, lock }];
    while let Some((previous, lock)) = came_from.get(&steps[steps.len() - 1].owner) {
        steps.push(Step {
            owner: previous.clone(),
            lock: lock.clone(),
        });
        if previous == caller {
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
        assert_eq!(g.lookups.get(), 2);
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
}
