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
//!
//! Locks are known by a hash of their key that the caller computes with a
//! secret seed (keys are chosen by clients; the table keeps no key bytes).
//! Two keys with the same hash would share their records: at 2^-64 per
//! pair, that only ever misplaces a statistic. Holders are told apart by a
//! hash of owner and side.

use std::hash::{BuildHasher, BuildHasherDefault, Hasher};

use crate::ids::{IdHasher, IdMap};
use crate::request::{FieldName, Side};
use crate::state::LockState;

/// A lock's key, hashed by the caller with a secret seed.
pub type LockHash = u64;

/// Locks with a tracked holder below which every new hold is tracked.
pub const TRACK_EVERY_HOLD_UP_TO: usize = 10_000;

/// Beyond [`TRACK_EVERY_HOLD_UP_TO`], one new hold in this many is tracked.
pub const SAMPLE_ONE_IN: u32 = 32;

/// Who holds a lock at one moment: nobody, an exclusive lock's owner, or a
/// read-write lock's holders with their side.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Holders {
    #[default]
    None,
    One(FieldName),
    Many(Vec<(FieldName, Side)>),
}

impl Holders {
    /// The holders of `state`: for a read-write lock the writer first, then
    /// the readers in the order they were read (whose leases ran out
    /// included: they held it until now).
    pub fn of(state: &LockState) -> Self {
        match state {
            LockState::Free => Self::None,
            LockState::Held { owner, .. } => Self::One(owner.clone()),
            LockState::Shared(rw) => Self::Many(
                rw.writer
                    .iter()
                    .map(|(w, _)| (w.clone(), Side::Write))
                    .chain(rw.readers.iter().map(|r| (r.owner.clone(), Side::Read)))
                    .collect(),
            ),
        }
    }

    /// Whether `state` has exactly these holders, in the same order (no
    /// allocation: the check every transition makes).
    pub fn same_as(&self, state: &LockState) -> bool {
        match (self, state) {
            (Self::None, LockState::Free) => true,
            (Self::One(a), LockState::Held { owner, .. }) => a[..] == owner[..],
            (Self::Many(holders), LockState::Shared(rw)) => {
                let writer = rw.writer.iter().map(|(w, _)| (&w[..], Side::Write));
                let readers = rw.readers.iter().map(|r| (&r.owner[..], Side::Read));
                holders.len() == rw.readers.len() + usize::from(rw.writer.is_some())
                    && holders
                        .iter()
                        .map(|(o, s)| (&o[..], *s))
                        .eq(writer.chain(readers))
            }
            _ => false,
        }
    }

    fn ids(&self) -> Ids {
        match self {
            Self::None => Ids::Zero,
            Self::One(owner) => Ids::One(holder_id(owner, None)),
            Self::Many(holders) => Ids::Many(
                holders
                    .iter()
                    .map(|(o, s)| holder_id(o, Some(*s)))
                    .collect(),
            ),
        }
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

enum Ids {
    Zero,
    One(u64),
    Many(Vec<u64>),
}

impl Ids {
    fn as_slice(&self) -> &[u64] {
        match self {
            Self::Zero => &[],
            Self::One(id) => std::slice::from_ref(id),
            Self::Many(ids) => ids,
        }
    }

    fn contains(&self, id: u64) -> bool {
        self.as_slice().contains(&id)
    }
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

#[derive(Debug, Default)]
pub struct HoldTable {
    dbs: IdMap<i32, IdMap<LockHash, Tracked>>,
    /// Locks with a tracked holder (the entries of `dbs`).
    locks: usize,
    /// New holds seen while sampling.
    sampled_grants: u64,
}

impl HoldTable {
    /// Locks with a tracked holder.
    pub fn len(&self) -> usize {
        self.locks
    }

    pub fn is_empty(&self) -> bool {
        self.locks == 0
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
        let before = before.ids();
        let after = Holders::of(after).ids();
        let mut kept = None;
        if let Some(old) = self.take(db, lock) {
            for r in old.records() {
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
            if let Some(weight) = self.sample() {
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
        if let Some(tracked) = kept {
            self.dbs.entry(db).or_default().insert(lock, tracked);
            self.locks += 1;
        }
    }

    /// The key of `lock` is gone (expired, deleted, evicted, renamed,
    /// overwritten): every tracked hold of it ends at `now_ms`.
    pub fn lock_gone(
        &mut self,
        db: i32,
        lock: LockHash,
        now_ms: i64,
        ended: &mut impl FnMut(Ended),
    ) {
        if let Some(old) = self.take(db, lock) {
            for r in old.records() {
                ended(r.ended(now_ms));
            }
        }
    }

    /// `db` (every db for -1) was flushed: every tracked hold in it ends.
    pub fn flushed(&mut self, db: i32, now_ms: i64, ended: &mut impl FnMut(Ended)) {
        let gone: Vec<IdMap<LockHash, Tracked>> = if db == -1 {
            self.dbs.drain().map(|(_, locks)| locks).collect()
        } else {
            self.dbs.remove(&db).into_iter().collect()
        };
        for locks in gone {
            self.locks -= locks.len();
            for r in locks.values().flat_map(Tracked::records) {
                ended(r.ended(now_ms));
            }
        }
    }

    /// SWAPDB a b: the locks of each now live in the other.
    pub fn swapped(&mut self, a: i32, b: i32) {
        let in_a = self.dbs.remove(&a);
        let in_b = self.dbs.remove(&b);
        if let Some(locks) = in_a {
            self.dbs.insert(b, locks);
        }
        if let Some(locks) = in_b {
            self.dbs.insert(a, locks);
        }
    }

    /// Forgets every tracked hold (the server became a replica).
    pub fn clear(&mut self) {
        self.dbs.clear();
        self.locks = 0;
    }

    fn take(&mut self, db: i32, lock: LockHash) -> Option<Tracked> {
        let locks = self.dbs.get_mut(&db)?;
        let tracked = locks.remove(&lock)?;
        self.locks -= 1;
        if locks.is_empty() {
            self.dbs.remove(&db);
        }
        Some(tracked)
    }

    /// Whether to track a new hold, and what it counts for.
    fn sample(&mut self) -> Option<u32> {
        if self.locks < TRACK_EVERY_HOLD_UP_TO {
            return Some(1);
        }
        self.sampled_grants += 1;
        self.sampled_grants
            .is_multiple_of(u64::from(SAMPLE_ONE_IN))
            .then_some(SAMPLE_ONE_IN)
    }
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
    fn holders_are_told_apart_by_owner_and_side() {
        assert_ne!(holder_id(b"a", None), holder_id(b"a", Some(Side::Read)));
        assert_ne!(
            holder_id(b"a", Some(Side::Read)),
            holder_id(b"a", Some(Side::Write))
        );
        assert_ne!(holder_id(b"ab", None), holder_id(b"ab\0", None));
        assert_eq!(holder_id(b"a", None), holder_id(b"a", None));
        let seed = std::collections::hash_map::RandomState::new();
        assert_eq!(lock_hash(&seed, b"k"), lock_hash(&seed, b"k"));
        assert_ne!(lock_hash(&seed, b"k"), lock_hash(&seed, b"j"));
    }
}
