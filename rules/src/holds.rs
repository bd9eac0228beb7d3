//! Hold times: since when each holder of each lock has held it, so that how
//! long it held the lock is known when its hold ends. Bookkeeping only: the
//! server layer tells it who held a lock before and after each change, and
//! when a lock ended outside the rules (its key expired or was deleted), and
//! gets back the holds that ended, for its histogram.
//!
//! What one hold is:
//! - exclusive lock: from the grant that gives an owner the lock (at once or
//!   by hand-off) to the moment it has no hold left: the last release, a
//!   force release, the lease running out, or its key removed. Re-entries
//!   and renewals continue the same hold.
//! - read-write lock: each owner's hold of each side is one hold: a reader's
//!   from its first read hold to its last one ending (released, or every
//!   lease of it run out), the writer's likewise; readers' holds overlap.
//! - multi-lock: each of its keys is one hold of that key's lock.
//!
//! A hold ends when the server sees it end: a lease that runs out while
//! nobody touches the lock ends when the server expires its key (the
//! `expired` event, or the next command that opens the key); a reader whose
//! leases ran out, when the lock is next read.
//!
//! Memory: every hold is tracked while fewer than [`TRACK_EVERY_HOLD_UP_TO`]
//! locks have a tracked holder; beyond that, one new hold in
//! [`SAMPLE_ONE_IN`], which then counts for that many when it ends, so the
//! histogram stays unbiased and a million held locks cost a few bytes each.
//! At [`MAX_TRACKED_LOCKS`] no new hold is tracked: a bound on what holds
//! whose end is never seen (a lock deleted by a client while the server
//! listens to no `del` event) can leave behind.
//!
//! Locks are known by a hash of their key that the caller computes with a
//! secret seed (keys are chosen by clients; the table keeps no key bytes).
//! Two keys with the same hash would share their records: at 2^-64 per
//! pair, that only ever misplaces a statistic. Holders are known by a hash
//! of owner and side, which needs no allocation and no reference count to
//! keep.

use std::collections::hash_map::Entry;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};

use crate::ids::{IdHasher, IdMap};
use crate::request::Side;
use crate::state::LockState;

/// A lock's key, hashed by the caller with a secret seed.
pub type LockHash = u64;

/// Locks with a tracked holder below which every new hold is tracked.
pub const TRACK_EVERY_HOLD_UP_TO: usize = 10_000;

/// Beyond [`TRACK_EVERY_HOLD_UP_TO`], one new hold in this many is tracked.
pub const SAMPLE_ONE_IN: u32 = 32;

/// Locks with a tracked holder at which no new hold is tracked (a few MB).
pub const MAX_TRACKED_LOCKS: usize = 200_000;

/// Who holds a lock at one moment, as holder ids: nobody, an exclusive
/// lock's owner, or a read-write lock's holders (the writer first, then the
/// readers in the order they were read).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Holders {
    #[default]
    None,
    One(u64),
    Many(Vec<u64>),
}

impl Holders {
    /// The holders of `state` (readers whose leases ran out included: they
    /// held it until now).
    pub fn of(state: &LockState) -> Self {
        match state {
            LockState::Free => Self::None,
            LockState::Held { owner, .. } => Self::One(holder_id(owner, None)),
            LockState::Shared(rw) => Self::Many(
                rw.writer
                    .iter()
                    .map(|(w, _)| holder_id(w, Some(Side::Write)))
                    .chain(
                        rw.readers
                            .iter()
                            .map(|r| holder_id(&r.owner, Some(Side::Read))),
                    )
                    .collect(),
            ),
        }
    }

    /// Whether `state` has exactly these holders, in the same order,
    /// without allocating: the check every transition makes.
    pub fn same_as(&self, state: &LockState) -> bool {
        match (self, state) {
            (Self::None, LockState::Free) => true,
            (Self::One(id), LockState::Held { owner, .. }) => *id == holder_id(owner, None),
            (Self::Many(ids), LockState::Shared(rw)) => {
                let writer = rw
                    .writer
                    .iter()
                    .map(|(w, _)| holder_id(w, Some(Side::Write)));
                let readers = rw
                    .readers
                    .iter()
                    .map(|r| holder_id(&r.owner, Some(Side::Read)));
                ids.len() == rw.readers.len() + usize::from(rw.writer.is_some())
                    && ids.iter().copied().eq(writer.chain(readers))
            }
            _ => false,
        }
    }

    fn as_slice(&self) -> &[u64] {
        match self {
            Self::None => &[],
            Self::One(id) => std::slice::from_ref(id),
            Self::Many(ids) => ids,
        }
    }

    fn contains(&self, id: u64) -> bool {
        self.as_slice().contains(&id)
    }
}

/// A holder (owner and side) as the table tells them apart.
fn holder_id(owner: &[u8], side: Option<Side>) -> u64 {
    let mut h = BuildHasherDefault::<IdHasher>::default().build_hasher();
    h.write_u64(owner.len() as u64);
    h.write(owner);
    h.write_u64(match side {
        None => 0,
        Some(Side::Read) => 1,
        Some(Side::Write) => 2,
    });
    h.finish()
}

/// A hold that ended: how long it lasted, and how many holds it stands for
/// (1, or [`SAMPLE_ONE_IN`] for a sampled one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ended {
    pub ms: u64,
    pub weight: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Record {
    holder: u64,
    since_ms: i64,
    weight: u32,
}

impl Record {
    fn ended(&self, now_ms: i64) -> Ended {
        Ended {
            ms: u64::try_from(now_ms.saturating_sub(self.since_ms)).unwrap_or(0),
            weight: u64::from(self.weight),
        }
    }
}

/// The tracked holders of one lock: nearly always one.
#[derive(Debug)]
enum Tracked {
    One(Record),
    Many(Vec<Record>),
}

impl Tracked {
    fn records(&self) -> &[Record] {
        match self {
            Self::One(r) => std::slice::from_ref(r),
            Self::Many(rs) => rs,
        }
    }

    fn push(slot: &mut Option<Tracked>, record: Record) {
        *slot = Some(match slot.take() {
            None => Self::One(record),
            Some(Self::One(first)) => Self::Many(vec![first, record]),
            Some(Self::Many(mut rs)) => {
                rs.push(record);
                Self::Many(rs)
            }
        });
    }
}

/// Tracked holds by lock: (db, key hash).
#[derive(Debug, Default)]
pub struct HoldTable {
    locks: IdMap<(i32, LockHash), Tracked>,
    /// New holds seen while sampling.
    sampled_grants: u64,
}

impl HoldTable {
    /// Locks with a tracked holder.
    pub fn len(&self) -> usize {
        self.locks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.locks.is_empty()
    }

    /// After a change of lock `lock` of `db` from `before` to `after`, at
    /// `now_ms`: the holds of holders no longer there end (`ended` is told
    /// of each tracked one), new holders start theirs.
    pub fn changed(
        &mut self,
        db: i32,
        lock: LockHash,
        before: &Holders,
        after: &LockState,
        now_ms: i64,
        ended: &mut impl FnMut(Ended),
    ) {
        if before.same_as(after) {
            return;
        }
        let after = Holders::of(after);
        let tracked_locks = self.locks.len();
        let mut kept = None;
        let entry = self.locks.entry((db, lock));
        if let Entry::Occupied(old) = &entry {
            for r in old.get().records() {
                match (before.contains(r.holder), after.contains(r.holder)) {
                    (true, true) => Tracked::push(&mut kept, *r),
                    (true, false) => ended(r.ended(now_ms)),
                    // Not a holder when the change began: its hold ended
                    // unseen, when is not known. Dropped.
                    (false, _) => {}
                }
            }
        }
        for &holder in after.as_slice() {
            if before.contains(holder) {
                continue;
            }
            if let Some(weight) = sample(tracked_locks, &mut self.sampled_grants) {
                Tracked::push(
                    &mut kept,
                    Record {
                        holder,
                        since_ms: now_ms,
                        weight,
                    },
                );
            }
        }
        match (entry, kept) {
            (Entry::Occupied(mut slot), Some(tracked)) => *slot.get_mut() = tracked,
            (Entry::Occupied(slot), None) => {
                slot.remove();
            }
            (Entry::Vacant(slot), Some(tracked)) => {
                slot.insert(tracked);
            }
            (Entry::Vacant(_), None) => {}
        }
    }

    /// The key of `lock` is gone (expired, deleted, evicted, renamed,
    /// overwritten): every tracked hold of it ends at `now_ms`. Returns
    /// whether it was held.
    pub fn lock_gone(
        &mut self,
        db: i32,
        lock: LockHash,
        now_ms: i64,
        ended: &mut impl FnMut(Ended),
    ) -> bool {
        let Some(old) = self.locks.remove(&(db, lock)) else {
            return false;
        };
        for r in old.records() {
            ended(r.ended(now_ms));
        }
        true
    }

    /// `db` (every db for -1) was flushed: every tracked hold in it ends.
    pub fn flushed(&mut self, db: i32, now_ms: i64, ended: &mut impl FnMut(Ended)) {
        self.locks.retain(|&(d, _), tracked| {
            if db != -1 && d != db {
                return true;
            }
            for r in tracked.records() {
                ended(r.ended(now_ms));
            }
            false
        });
    }

    /// SWAPDB a b: the locks of each now live in the other.
    pub fn swapped(&mut self, a: i32, b: i32) {
        let moved: Vec<((i32, LockHash), Tracked)> = self
            .locks
            .extract_if(|&(d, _), _| d == a || d == b)
            .collect();
        for ((d, lock), tracked) in moved {
            self.locks
                .insert((if d == a { b } else { a }, lock), tracked);
        }
    }

    /// Forgets every tracked hold (the server became a replica).
    pub fn clear(&mut self) {
        self.locks.clear();
    }
}

/// Whether to track a new hold, with `tracked_locks` locks tracked, and
/// what it counts for; `sampled_grants` counts the new holds seen while
/// sampling.
fn sample(tracked_locks: usize, sampled_grants: &mut u64) -> Option<u32> {
    if tracked_locks < TRACK_EVERY_HOLD_UP_TO {
        return Some(1);
    }
    if tracked_locks >= MAX_TRACKED_LOCKS {
        return None;
    }
    *sampled_grants += 1;
    sampled_grants
        .is_multiple_of(u64::from(SAMPLE_ONE_IN))
        .then_some(SAMPLE_ONE_IN)
}

/// A hash of `key` with the hasher `seed` (the server layer's secret one).
pub fn lock_hash(seed: &impl BuildHasher, key: &[u8]) -> LockHash {
    seed.hash_one(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read_write::{ReadWriteHolds, Reader};

    fn held(owner: &str) -> LockState {
        LockState::Held {
            owner: owner.as_bytes().into(),
            holds: 1,
        }
    }

    fn shared(writer: Option<&str>, readers: &[&str]) -> LockState {
        LockState::Shared(ReadWriteHolds {
            writer: writer.map(|w| (w.as_bytes().into(), 1)),
            readers: readers
                .iter()
                .map(|r| Reader {
                    owner: r.as_bytes().into(),
                    holds: 1,
                    leases: vec![Some(i64::MAX)],
                })
                .collect(),
            ..ReadWriteHolds::default()
        })
    }

    /// Runs a change and returns the durations of the holds it ended.
    fn change(
        t: &mut HoldTable,
        lock: u64,
        from: &LockState,
        to: &LockState,
        now: i64,
    ) -> Vec<u64> {
        let mut out = Vec::new();
        t.changed(0, lock, &Holders::of(from), to, now, &mut |e| {
            assert_eq!(e.weight, 1);
            out.push(e.ms)
        });
        out
    }

    #[test]
    fn an_exclusive_hold_lasts_from_grant_to_its_end_whatever_happens_between() {
        let mut t = HoldTable::default();
        assert!(change(&mut t, 1, &LockState::Free, &held("a"), 100).is_empty());
        assert_eq!(t.len(), 1);
        // Re-entry, renewal: the same holder, nothing ends.
        assert!(change(&mut t, 1, &held("a"), &held("a"), 150).is_empty());
        // Hand-off to b: a's hold ends, b's begins.
        assert_eq!(change(&mut t, 1, &held("a"), &held("b"), 300), vec![200]);
        assert_eq!(
            change(&mut t, 1, &held("b"), &LockState::Free, 1300),
            vec![1000]
        );
        assert!(t.is_empty());
        // A release of a hold that was never tracked records nothing.
        assert!(change(&mut t, 1, &held("c"), &LockState::Free, 1400).is_empty());
    }

    #[test]
    fn a_clock_going_back_counts_zero() {
        let mut t = HoldTable::default();
        change(&mut t, 1, &LockState::Free, &held("a"), 100);
        assert_eq!(change(&mut t, 1, &held("a"), &LockState::Free, 90), vec![0]);
    }

    #[test]
    fn a_lock_that_ended_unseen_drops_its_stale_record() {
        let mut t = HoldTable::default();
        change(&mut t, 1, &LockState::Free, &held("a"), 100);
        // Deleted behind the table's back, then taken by b: a's end time is
        // unknown, so it is not counted; b's hold is tracked.
        assert!(change(&mut t, 1, &LockState::Free, &held("b"), 500).is_empty());
        assert_eq!(t.len(), 1);
        assert_eq!(
            change(&mut t, 1, &held("b"), &LockState::Free, 600),
            vec![100]
        );
        // a's lock passed to c unseen; c's release ends no tracked hold.
        change(&mut t, 1, &LockState::Free, &held("a"), 700);
        assert!(change(&mut t, 1, &held("c"), &LockState::Free, 800).is_empty());
        assert!(t.is_empty());
    }

    #[test]
    fn each_owner_and_side_of_a_read_write_lock_is_a_hold() {
        let mut t = HoldTable::default();
        let free = LockState::Free;
        change(&mut t, 7, &free, &shared(None, &["r1", "r2"]), 0);
        change(
            &mut t,
            7,
            &shared(None, &["r1", "r2"]),
            &shared(None, &["r1", "r2", "r3"]),
            10,
        );
        assert_eq!(
            change(
                &mut t,
                7,
                &shared(None, &["r1", "r2", "r3"]),
                &shared(None, &["r2", "r3"]),
                50
            ),
            vec![50]
        );
        let mut ended = change(
            &mut t,
            7,
            &shared(None, &["r2", "r3"]),
            &shared(Some("w"), &[]),
            80,
        );
        ended.sort();
        assert_eq!(ended, vec![70, 80]);
        // The writer takes a read hold too (then releases its write hold):
        // two holds of one owner.
        change(
            &mut t,
            7,
            &shared(Some("w"), &[]),
            &shared(Some("w"), &["w"]),
            90,
        );
        assert_eq!(
            change(
                &mut t,
                7,
                &shared(Some("w"), &["w"]),
                &shared(None, &["w"]),
                100
            ),
            vec![20]
        );
        assert_eq!(
            change(&mut t, 7, &shared(None, &["w"]), &free, 130),
            vec![40]
        );
        assert!(t.is_empty());
    }

    #[test]
    fn same_as_compares_holders_without_allocating() {
        let rw = shared(Some("w"), &["r"]);
        assert!(Holders::of(&rw).same_as(&rw));
        assert!(!Holders::of(&rw).same_as(&shared(Some("w"), &[])));
        assert!(!Holders::of(&rw).same_as(&shared(None, &["r", "w"])));
        assert!(Holders::of(&held("a")).same_as(&held("a")));
        assert!(!Holders::of(&held("a")).same_as(&held("b")));
        assert!(!Holders::of(&held("a")).same_as(&LockState::Free));
        assert!(Holders::None.same_as(&LockState::Free));
        // An exclusive owner "a" is not the reader "a".
        assert!(!Holders::of(&held("a")).same_as(&shared(None, &["a"])));
        assert!(!Holders::of(&shared(None, &["a"])).same_as(&shared(Some("a"), &[])));
    }

    #[test]
    fn a_key_gone_ends_every_hold_of_it_and_a_flush_every_hold_of_the_db() {
        let mut t = HoldTable::default();
        change(&mut t, 1, &LockState::Free, &held("a"), 0);
        change(&mut t, 2, &LockState::Free, &shared(None, &["x", "y"]), 10);
        t.changed(3, 1, &Holders::None, &held("b"), 20, &mut |_| {});
        let mut out = Vec::new();
        t.lock_gone(0, 2, 110, &mut |e| out.push(e.ms));
        assert_eq!(out, vec![100, 100]);
        t.lock_gone(0, 2, 120, &mut |e| out.push(e.ms));
        assert_eq!(out.len(), 2);
        assert_eq!(t.len(), 2);

        // SWAPDB 0 3: a's lock is now in db 3, b's in db 0.
        t.swapped(0, 3);
        out.clear();
        t.flushed(3, 200, &mut |e| out.push(e.ms));
        assert_eq!(out, vec![200]);
        t.flushed(-1, 220, &mut |e| out.push(e.ms));
        assert_eq!(out, vec![200, 200]);
        assert!(t.is_empty());

        change(&mut t, 1, &LockState::Free, &held("a"), 0);
        t.clear();
        assert!(t.is_empty());
        assert!(change(&mut t, 1, &held("a"), &LockState::Free, 10).is_empty());
    }

    #[test]
    fn beyond_the_limit_one_hold_in_n_is_tracked_and_counts_for_n() {
        let mut t = HoldTable::default();
        for lock in 0..TRACK_EVERY_HOLD_UP_TO as u64 {
            change(&mut t, lock, &LockState::Free, &held("a"), 0);
        }
        assert_eq!(t.len(), TRACK_EVERY_HOLD_UP_TO);
        let more = 10 * u64::from(SAMPLE_ONE_IN);
        let base = TRACK_EVERY_HOLD_UP_TO as u64;
        for lock in base..base + more {
            change(&mut t, lock, &LockState::Free, &held("a"), 0);
        }
        assert_eq!(t.len(), TRACK_EVERY_HOLD_UP_TO + 10);
        // Every hold ends after 5 ms: the histogram is told of every one,
        // the sampled ones with their weight.
        let mut counted = 0;
        for lock in 0..base + more {
            t.changed(
                0,
                lock,
                &Holders::of(&held("a")),
                &LockState::Free,
                5,
                &mut |e| {
                    assert_eq!(e.ms, 5);
                    counted += e.weight;
                },
            );
        }
        assert_eq!(counted, base + more);
        assert!(t.is_empty());
    }

    #[test]
    fn no_new_hold_is_tracked_at_the_bound() {
        let mut t = HoldTable::default();
        for lock in 0..MAX_TRACKED_LOCKS as u64 {
            t.locks.insert(
                (0, lock),
                Tracked::One(Record {
                    holder: 0,
                    since_ms: 0,
                    weight: 1,
                }),
            );
        }
        let base = MAX_TRACKED_LOCKS as u64;
        for lock in base..base + 2 * u64::from(SAMPLE_ONE_IN) {
            change(&mut t, lock, &LockState::Free, &held("a"), 0);
        }
        assert_eq!(t.len(), MAX_TRACKED_LOCKS);
        // One ends: there is room again.
        t.lock_gone(0, 0, 1, &mut |_| {});
        let mut n = 0;
        while t.len() < MAX_TRACKED_LOCKS {
            change(&mut t, base + 1000 + n, &LockState::Free, &held("a"), 0);
            n += 1;
        }
        assert!(n <= u64::from(SAMPLE_ONE_IN), "{n}");
    }

    #[test]
    fn holders_are_told_apart_by_owner_and_side() {
        assert_ne!(holder_id(b"a", None), holder_id(b"a", Some(Side::Read)));
        assert_ne!(
            holder_id(b"a", Some(Side::Read)),
            holder_id(b"a", Some(Side::Write))
        );
        assert_ne!(holder_id(b"ab", None), holder_id(b"ab\0", None));
        assert_eq!(holder_id(b"a", None), holder_id(b"a", None));
        assert_ne!(holder_id(b"12345678a", None), holder_id(b"12345678b", None));
        assert_ne!(holder_id(b"", None), holder_id(b"\0", None));
        // Distinct owners of every length up to 40 bytes differ.
        let ids: std::collections::HashSet<u64> = (1..=40)
            .flat_map(|n| [vec![b'a'; n], vec![b'b'; n]])
            .map(|o| holder_id(&o, None))
            .collect();
        assert_eq!(ids.len(), 80);
        let seed = std::collections::hash_map::RandomState::new();
        assert_eq!(lock_hash(&seed, b"k"), lock_hash(&seed, b"k"));
        assert_ne!(lock_hash(&seed, b"k"), lock_hash(&seed, b"j"));
    }
}
