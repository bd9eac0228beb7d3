//! Who is waiting for which lock: one FIFO per (db, key) of callers blocked
//! in an acquire, how to find a waiter again from its handle (the server's
//! blocked-client handle, `H`) or its id, and the timers attached to them.
//! Multi-lock callers' entries in several queues are `groups.rs`'s; the
//! views of the queues that LOCK.WAITERS and LOCK.QUEUES answer with,
//! `views.rs`'s.
//!
//! This is bookkeeping only: it never opens keys or answers clients; every
//! change hands back what the caller must undo in the server ([`Released`]).

use std::borrow::Cow;
use std::collections::hash_map::Entry;
use std::collections::BTreeSet;
use std::hash::Hash;
use std::time::Instant;

use crate::ids::IdMap;
use crate::lock_id::LockId;
use crate::names::{NameMap, NameSet};
use crate::queue::{Fifo, WaiterId};
use crate::request::{FieldName, Queued, Request};
use crate::transition::Wake;

mod groups;
mod views;

use groups::Group;
pub use groups::GroupId;
pub use views::{longest_waiting_first, QueueView, WaiterView};

/// A server timer's id, as the server hands it out.
pub type TimerId = u64;

/// A caller blocked in LOCK.ACQUIRE ... BLOCK (or one key of a caller
/// blocked in LOCK.MACQUIRE).
#[derive(Debug)]
pub struct Waiter<H> {
    pub request: Request,
    /// The server's handle of the blocked caller.
    pub bc: H,
    /// The end of BLOCK ms; `None` for BLOCK 0 (and for every entry of a
    /// multi-lock caller but its first, which carries the deadline).
    pub deadline: Option<Instant>,
    /// The multi-lock caller this entry belongs to.
    pub group: Option<GroupId>,
    /// When the caller was queued (every entry of a multi-lock caller has
    /// the same).
    pub queued_at: Instant,
    /// The Redisson fair waiters queued on the lock when this caller was
    /// (see `crate::fair`).
    pub fair_ahead: Box<[FieldName]>,
}

impl<H> Queued for Waiter<H> {
    fn request(&self) -> &Request {
        &self.request
    }

    fn in_group(&self) -> bool {
        self.group.is_some()
    }

    fn fair_ahead(&self) -> &[FieldName] {
        &self.fair_ahead
    }

    fn retain_fair_ahead(&mut self, still_queued: &dyn Fn(&[u8]) -> bool) {
        if self.fair_ahead.iter().all(|owner| still_queued(owner)) {
            return;
        }
        let kept: Vec<FieldName> = self
            .fair_ahead
            .iter()
            .filter(|owner| still_queued(owner))
            .cloned()
            .collect();
        self.fair_ahead = kept.into();
    }
}

/// One owner's queue entries, in id order: nearly always one, kept inline
/// (a set only for an owner waiting in several places at once).
#[derive(Debug)]
enum OwnerEntries {
    One(WaiterId),
    Many(BTreeSet<WaiterId>),
}

impl OwnerEntries {
    fn insert(&mut self, id: WaiterId) {
        match self {
            Self::One(first) if *first == id => {}
            Self::One(first) => *self = Self::Many(BTreeSet::from([*first, id])),
            Self::Many(ids) => {
                ids.insert(id);
            }
        }
    }

    /// Removes `id`; whether no entry is left.
    fn remove(&mut self, id: WaiterId) -> bool {
        match self {
            Self::One(only) => *only == id,
            Self::Many(ids) => {
                ids.remove(&id);
                ids.is_empty()
            }
        }
    }

    fn iter(&self) -> impl Iterator<Item = &WaiterId> {
        let (one, many) = match self {
            Self::One(id) => (Some(id), None),
            Self::Many(ids) => (None, Some(ids)),
        };
        one.into_iter().chain(many.into_iter().flatten())
    }
}

/// The timer at a held lock's lease deadline, armed while anyone waits.
#[derive(Debug, Clone, Copy)]
pub struct LeaseTimer {
    pub id: TimerId,
    pub job: u64,
    pub fires_at: i64,
}

struct LockQueue<H> {
    fifo: Fifo<Waiter<H>>,
    /// The entries of multi-lock callers, in queue order (ids grow with
    /// arrival): whoever is queued behind one waits for it.
    multi_entries: BTreeSet<WaiterId>,
    /// Queued waiters that asked for FENCE: serving them needs the token.
    fenced: usize,
    lease_timer: Option<LeaseTimer>,
}

/// The one server timer for every waiter's BLOCK time: armed at the
/// earliest deadline, and moved only when a new waiter's deadline comes
/// earlier. A waiter served before its deadline just leaves the set; the
/// timer, if it then fires for nobody, re-arms itself. So the usual waiter
/// (served in time, BLOCK times alike) costs no timer call at all.
#[derive(Debug, Clone, Copy)]
pub struct WaitTimer {
    pub id: TimerId,
    pub fires_at: Instant,
}

pub struct Registry<H> {
    queues: IdMap<i32, NameMap<Vec<u8>, LockQueue<H>>>,
    /// How many locks have a queue (the entries of `queues`).
    queued_locks: usize,
    /// Queued entries that asked for FENCE, over every queue: while there
    /// are none, nobody looks a queue up for them.
    fenced_entries: usize,
    locations: IdMap<WaiterId, LockId<'static>>,
    handles: IdMap<H, WaiterId>,
    lease_jobs: IdMap<u64, LockId<'static>>,
    /// Each multi-lock caller's request and entries, first entry first.
    groups: IdMap<GroupId, Group>,
    deadlines: BTreeSet<(Instant, WaiterId)>,
    /// Each owner's queue entries (the waits-for graph's edges out of it):
    /// the deadlock check asks what an owner waits for, and a scan of every
    /// queue would cost each new wait the whole registry.
    by_owner: NameMap<FieldName, OwnerEntries>,
    pub wait_timer: Option<WaitTimer>,
    next_serial: u64,
}

/// What a caller must undo in Redis after a queue disappeared.
#[must_use]
#[derive(Debug, Default)]
pub struct Released {
    pub lease_timers: Vec<TimerId>,
    /// The wait timer, once no queued caller has a BLOCK deadline left.
    pub wait_timer: Option<TimerId>,
    /// Keys whose queue lost a multi-lock caller's entry: whoever is now
    /// first there may be served.
    pub resettle: Vec<LockId<'static>>,
}

impl Released {
    fn merge(&mut self, other: Released) {
        self.lease_timers.extend(other.lease_timers);
        self.wait_timer = self.wait_timer.or(other.wait_timer);
        self.resettle.extend(other.resettle);
    }
}

impl<H> Default for LockQueue<H> {
    fn default() -> Self {
        Self {
            fifo: Fifo::default(),
            multi_entries: BTreeSet::new(),
            fenced: 0,
            lease_timer: None,
        }
    }
}

impl<H> Default for Registry<H> {
    fn default() -> Self {
        Self {
            queues: IdMap::default(),
            queued_locks: 0,
            fenced_entries: 0,
            locations: IdMap::default(),
            handles: IdMap::default(),
            lease_jobs: IdMap::default(),
            groups: IdMap::default(),
            deadlines: BTreeSet::new(),
            by_owner: NameMap::default(),
            wait_timer: None,
            next_serial: 0,
        }
    }
}

impl<H: Copy + Eq + Hash> Registry<H> {
    /// A fresh number for waiter ids and timer jobs.
    pub fn next_serial(&mut self) -> u64 {
        self.next_serial += 1;
        self.next_serial
    }

    pub fn waiting(&self) -> usize {
        self.locations.len()
    }

    fn queue(&self, lock: &LockId<'_>) -> Option<&LockQueue<H>> {
        self.queues.get(&lock.db)?.get(&lock.key[..])
    }

    fn queue_mut(&mut self, lock: &LockId<'_>) -> Option<&mut LockQueue<H>> {
        self.queues.get_mut(&lock.db)?.get_mut(&lock.key[..])
    }

    pub fn has_waiters(&self, db: i32, key: &[u8]) -> bool {
        self.queues.get(&db).is_some_and(|q| q.contains_key(key))
    }

    pub fn queue_len(&self, lock: &LockId<'_>) -> usize {
        self.queue(lock).map_or(0, |q| q.fifo.len())
    }

    pub fn fenced_waiters(&self, lock: &LockId<'_>) -> usize {
        if self.fenced_entries == 0 {
            return 0;
        }
        self.queue(lock).map_or(0, |q| q.fenced)
    }

    /// How many locks have a queue.
    pub fn lock_count(&self) -> usize {
        self.queued_locks
    }

    /// Every lock someone waits for in `db` (all databases for -1).
    pub fn locks_in(&self, db: i32) -> Vec<LockId<'static>> {
        self.queues
            .iter()
            .filter(|(d, _)| db == -1 || **d == db)
            .flat_map(|(d, keys)| {
                keys.keys().map(|k| LockId {
                    db: *d,
                    key: Cow::Owned(k.clone()),
                })
            })
            .collect()
    }

    /// Queues `waiter` under a fresh `id` (from [`Registry::next_serial`]).
    pub fn enqueue(&mut self, lock: &LockId<'_>, id: WaiterId, waiter: Waiter<H>) {
        let keys = self.queues.entry(lock.db).or_default();
        if !keys.contains_key(&lock.key[..]) {
            self.queued_locks += 1;
            keys.insert(lock.key.to_vec(), LockQueue::default());
        }
        let Some(queue) = keys.get_mut(&lock.key[..]) else {
            return;
        };
        let (bc, fence, deadline) = (waiter.bc, waiter.request.fence, waiter.deadline);
        let first_entry = waiter.group.is_none_or(|g| g == id);
        // A SEM.TAKE caller has no owner: nobody can wait for it.
        let owner = (!waiter.request.owner.is_empty()).then(|| waiter.request.owner.clone());
        let multi = waiter.group.is_some();
        if queue.fifo.push_back(id, waiter) {
            if multi {
                queue.multi_entries.insert(id);
            }
            if let Some(owner) = owner {
                match self.by_owner.entry(owner) {
                    Entry::Occupied(mut ids) => ids.get_mut().insert(id),
                    Entry::Vacant(ids) => {
                        ids.insert(OwnerEntries::One(id));
                    }
                }
            }
            queue.fenced += usize::from(fence);
            self.fenced_entries += usize::from(fence);
            if first_entry {
                self.handles.insert(bc, id);
            }
            self.locations.insert(id, lock.to_owned());
            if let Some(at) = deadline {
                self.deadlines.insert((at, id));
            }
        }
    }

    /// The queue entries of `owner` waiting for `lock` (LOCK.CANCEL), first
    /// in line first. A scan of the lock's queue: a cancel is rare, and an
    /// index by owner would cost every wait.
    pub fn waiters_of(&self, lock: &LockId<'_>, owner: &[u8]) -> Vec<WaiterId> {
        self.queue(lock).map_or_else(Vec::new, |queue| {
            queue
                .fifo
                .iter()
                .filter(|(_, w)| &w.request.owner[..] == owner)
                .map(|(id, _)| id)
                .collect()
        })
    }

    /// Whether `owner` waits for anything (has a queue entry anywhere).
    pub fn owner_waits(&self, owner: &[u8]) -> bool {
        self.by_owner.contains_key(owner)
    }

    /// The locks `owner` waits for now: one per queue entry it has (each
    /// key of a multi-lock caller's; more than one caller when an owner id
    /// is shared), each once, in the order first queued.
    pub fn waits_of(&self, owner: &[u8]) -> Vec<LockId<'static>> {
        let mut locks: Vec<LockId<'static>> = Vec::new();
        for id in self
            .by_owner
            .get(owner)
            .into_iter()
            .flat_map(OwnerEntries::iter)
        {
            if let Some(lock) = self.locations.get(id) {
                if !locks.contains(lock) {
                    locks.push(lock.clone());
                }
            }
        }
        locks
    }

    /// The owners queued for `lock`, first in line first, each once.
    pub fn queued_owners(&self, lock: &LockId<'_>) -> Vec<FieldName> {
        let mut seen: NameSet<&[u8]> = NameSet::default();
        self.queue(lock)
            .into_iter()
            .flat_map(|q| q.fifo.iter())
            .map(|(_, w)| &w.request.owner)
            .filter(|owner| !owner.is_empty() && seen.insert(&owner[..]))
            .cloned()
            .collect()
    }

    /// Runs `rules` on the queue of `lock` (an empty one if nobody waits).
    /// Waiters it pops must then be passed to [`Registry::forget_woken`].
    pub fn with_queue<R>(
        &mut self,
        lock: &LockId<'_>,
        rules: impl FnOnce(&mut Fifo<Waiter<H>>) -> R,
    ) -> R {
        match self.queue_mut(lock) {
            Some(queue) => rules(&mut queue.fifo),
            None => rules(&mut Fifo::default()),
        }
    }

    /// Drops the bookkeeping of waiters the rules took off the queue.
    pub fn forget_woken(&mut self, lock: &LockId<'_>, wakes: &[Wake<Waiter<H>>]) -> Released {
        let mut others = Released::default();
        for wake in wakes {
            // A multi-lock caller answered on one key (rejected there)
            // leaves every other queue too.
            if let Some(group) = wake.waiter.group {
                others.merge(self.remove_group_except(group, wake.id, true));
            }
            self.forget_entry(lock, wake.id, &wake.waiter, true);
        }
        let mut released = self.drop_if_empty(lock);
        released.merge(others);
        released.wait_timer = self.idle_wait_timer();
        released
    }

    /// Drops the bookkeeping of entry `id`, already taken out of the queue
    /// of `lock`: where it was, its deadline, the queue's count of waiters
    /// that asked for FENCE, and (`forget_handle`) its handle.
    fn forget_entry(
        &mut self,
        lock: &LockId<'_>,
        id: WaiterId,
        waiter: &Waiter<H>,
        forget_handle: bool,
    ) {
        self.locations.remove(&id);
        if forget_handle {
            self.handles.remove(&waiter.bc);
        }
        // One hash of the owner, whether its set empties or not.
        if let Entry::Occupied(mut ids) = self.by_owner.entry(waiter.request.owner.clone()) {
            if ids.get_mut().remove(id) {
                ids.remove();
            }
        }
        if let Some(at) = waiter.deadline {
            self.deadlines.remove(&(at, id));
        }
        if !waiter.request.fence && waiter.group.is_none() {
            return;
        }
        let queue = self
            .queues
            .get_mut(&lock.db)
            .and_then(|keys| keys.get_mut(&lock.key[..]));
        if let Some(q) = queue {
            if waiter.request.fence && q.fenced > 0 {
                q.fenced -= 1;
                self.fenced_entries = self.fenced_entries.saturating_sub(1);
            }
            if waiter.group.is_some() {
                q.multi_entries.remove(&id);
            }
        }
    }

    fn idle_wait_timer(&mut self) -> Option<TimerId> {
        if self.deadlines.is_empty() {
            self.wait_timer.take().map(|t| t.id)
        } else {
            None
        }
    }

    /// Takes a waiter out of its queue (timeout, disconnect). A waiter
    /// that was first in line held the others back (a writer the readers
    /// behind it, a multi-lock caller a free key): its lock is listed to be
    /// looked at again, so that whoever is first now is served, or answered
    /// its error, in its turn.
    pub fn remove(&mut self, id: WaiterId) -> Option<(Waiter<H>, Released)> {
        let lock = self.locations.remove(&id)?;
        let queue = self.queue_mut(&lock)?;
        let was_first = queue.fifo.front().is_some_and(|(head, _)| head == id);
        let waiter = queue.fifo.remove(id)?;
        self.forget_entry(&lock, id, &waiter, true);
        let mut released = self.drop_if_empty(&lock);
        if let Some(group) = waiter.group {
            released.merge(self.remove_group_except(group, id, true));
            released.resettle.push(lock);
        } else if was_first && self.queue_len(&lock) > 0 {
            released.resettle.push(lock);
        }
        released.wait_timer = self.idle_wait_timer();
        Some((waiter, released))
    }

    /// The earliest BLOCK deadline of anyone queued.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.deadlines.first().map(|(at, _)| *at)
    }

    /// Takes out every waiter whose BLOCK time is over at `now`.
    pub fn remove_due(&mut self, now: Instant) -> Vec<(Waiter<H>, Released)> {
        let mut due = Vec::new();
        while let Some(&(at, id)) = self.deadlines.first() {
            if at > now {
                break;
            }
            self.deadlines.pop_first();
            due.extend(self.remove(id));
        }
        due
    }

    pub fn waiter_of(&self, bc: H) -> Option<WaiterId> {
        self.handles.get(&bc).copied()
    }

    fn drop_if_empty(&mut self, lock: &LockId<'_>) -> Released {
        let Some(keys) = self.queues.get_mut(&lock.db) else {
            return Released::default();
        };
        if !keys.get(&lock.key[..]).is_some_and(|q| q.fifo.is_empty()) {
            return Released::default();
        }
        let queue = keys.remove(&lock.key[..]);
        self.queued_locks -= 1;
        if keys.is_empty() {
            self.queues.remove(&lock.db);
        }
        let lease_timers = queue
            .and_then(|q| q.lease_timer)
            .map(|t| {
                self.lease_jobs.remove(&t.job);
                t.id
            })
            .into_iter()
            .collect();
        Released {
            lease_timers,
            ..Released::default()
        }
    }

    pub fn lease_timer(&self, lock: &LockId<'_>) -> Option<LeaseTimer> {
        self.queue(lock).and_then(|q| q.lease_timer)
    }

    /// For a lock someone waits for, its lease timer if it has one (one
    /// look-up for [`Registry::queue_len`] and [`Registry::lease_timer`]);
    /// `None` when nobody waits for it.
    pub fn queued_lease_timer(&self, lock: &LockId<'_>) -> Option<Option<LeaseTimer>> {
        self.queue(lock)
            .filter(|q| !q.fifo.is_empty())
            .map(|q| q.lease_timer)
    }

    /// Records the lease timer of a lock that has waiters; returns the one it
    /// replaces, for the caller to stop. Without waiters nothing is recorded
    /// (the timer will find no job and do nothing).
    pub fn set_lease_timer(&mut self, lock: &LockId<'_>, timer: LeaseTimer) -> Option<LeaseTimer> {
        let queue = self.queue_mut(lock)?;
        let old = queue.lease_timer.replace(timer);
        if let Some(old) = old {
            self.lease_jobs.remove(&old.job);
        }
        self.lease_jobs.insert(timer.job, lock.to_owned());
        old
    }

    /// The lock whose lease timer `job` just fired, clearing its record.
    pub fn take_lease_job(&mut self, job: u64) -> Option<LockId<'static>> {
        let lock = self.lease_jobs.remove(&job)?;
        if let Some(q) = self.queue_mut(&lock) {
            if q.lease_timer.is_some_and(|t| t.job == job) {
                q.lease_timer = None;
            }
        }
        Some(lock)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::Limit;
    use crate::request::LockKind;

    #[test]
    fn an_owners_entries_are_kept_in_id_order_and_emptied_one_by_one() {
        let mut e = OwnerEntries::One(5);
        e.insert(5);
        assert_eq!(e.iter().copied().collect::<Vec<_>>(), vec![5]);
        e.insert(9);
        e.insert(2);
        assert_eq!(e.iter().copied().collect::<Vec<_>>(), vec![2, 5, 9]);
        assert!(!e.remove(5));
        assert!(!e.remove(7));
        assert!(!e.remove(2));
        assert!(e.remove(9));
        let mut one = OwnerEntries::One(3);
        assert!(!one.remove(4));
        assert!(one.remove(3));
    }

    /// Handles are plain numbers here; the module's are blocked clients.
    fn bc(n: usize) -> usize {
        n
    }

    fn waiter(n: usize, fence: bool) -> Waiter<usize> {
        Waiter {
            request: Request {
                owner: format!("o{n}").as_bytes().into(),
                lease_ms: 10,
                fence,
                kind: crate::request::LockKind::Exclusive,
                keepalive: None,
                campaign: None,
            },
            bc: bc(n),
            deadline: None,
            group: None,
            queued_at: Instant::now(),
            fair_ahead: Box::default(),
        }
    }

    fn lock(key: &str) -> LockId<'static> {
        LockId {
            db: 0,
            key: Cow::Owned(key.as_bytes().to_vec()),
        }
    }

    #[test]
    fn tracks_waiters_until_they_leave() {
        let mut r = Registry::<usize>::default();
        r.enqueue(&lock("k"), 1, waiter(1, true));
        r.enqueue(&lock("k"), 2, waiter(2, false));
        assert!(r.has_waiters(0, b"k"));
        assert!(!r.has_waiters(1, b"k"));
        assert_eq!(r.queue_len(&lock("k")), 2);
        assert_eq!(r.fenced_waiters(&lock("k")), 1);
        assert_eq!(r.waiter_of(bc(2)), Some(2));

        let (w, released) = r.remove(1).unwrap();
        assert_eq!(w.bc, bc(1));
        assert!(released.lease_timers.is_empty());
        assert_eq!(r.fenced_waiters(&lock("k")), 0);
        // It was first in line, and another waits behind it: the lock is
        // looked at again for that one.
        assert_eq!(released.resettle, vec![lock("k")]);

        r.set_lease_timer(
            &lock("k"),
            LeaseTimer {
                id: 77,
                job: 5,
                fires_at: 0,
            },
        );
        let (_, released) = r.remove(2).unwrap();
        assert_eq!(released.lease_timers, vec![77]);
        // The last one: nobody left to serve.
        assert!(released.resettle.is_empty());
        assert!(!r.has_waiters(0, b"k"));
        assert_eq!(r.waiting(), 0);
        assert!(r.take_lease_job(5).is_none());
        assert!(r.remove(2).is_none());
    }

    #[test]
    fn an_owners_waiters_are_found_by_owner_on_their_lock_only() {
        let mut r = Registry::<usize>::default();
        r.enqueue(&lock("k"), 1, waiter(1, false));
        r.enqueue(&lock("k"), 2, waiter(2, false));
        r.enqueue(&lock("k"), 3, waiter(1, false));
        r.enqueue(&lock("j"), 4, waiter(1, false));
        r.enqueue_group(&[lock("a"), lock("b")], &[5, 6], waiter(7, false));
        assert_eq!(r.waiters_of(&lock("k"), b"o1"), vec![1, 3]);
        assert_eq!(r.waiters_of(&lock("k"), b"o2"), vec![2]);
        assert_eq!(r.waiters_of(&lock("k"), b"o9"), Vec::<WaiterId>::new());
        assert_eq!(r.waiters_of(&lock("x"), b"o1"), Vec::<WaiterId>::new());
        // A multi-lock caller is found on any of its keys, and leaves all.
        assert_eq!(r.waiters_of(&lock("b"), b"o7"), vec![6]);
        let _ = r.remove(6).unwrap();
        assert!(!r.has_waiters(0, b"a") && !r.has_waiters(0, b"b"));
    }

    #[test]
    fn rules_pop_and_woken_waiters_are_forgotten() {
        let mut r = Registry::<usize>::default();
        r.enqueue(&lock("k"), 1, waiter(1, false));
        let popped = r.with_queue(&lock("k"), |q| q.pop_front());
        let (id, w) = popped.unwrap();
        let wakes = vec![Wake {
            id,
            waiter: w,
            verdict: crate::transition::Verdict::Granted(1),
            held: false,
        }];
        let _ = r.forget_woken(&lock("k"), &wakes);
        assert_eq!(r.waiting(), 0);
        assert!(!r.has_waiters(0, b"k"));
        assert_eq!(r.waiter_of(bc(1)), None);
        // No queue: rules see an empty one.
        assert_eq!(r.with_queue(&lock("x"), |q| q.len()), 0);
    }

    #[test]
    fn what_an_owner_waits_for_follows_its_entries_in_and_out() {
        let mut r = Registry::<usize>::default();
        assert!(!r.owner_waits(b"o1"));
        r.enqueue(&lock("k"), 1, waiter(1, false));
        // An owner id shared by two callers: both waits, each lock once.
        r.enqueue(
            &lock("j"),
            2,
            Waiter {
                bc: bc(2),
                ..waiter(1, false)
            },
        );
        r.enqueue(
            &lock("k"),
            3,
            Waiter {
                bc: bc(3),
                ..waiter(1, false)
            },
        );
        r.enqueue_group(&[lock("a"), lock("b")], &[4, 5], waiter(7, false));
        assert!(r.owner_waits(b"o1"));
        assert_eq!(r.waits_of(b"o1"), vec![lock("k"), lock("j")]);
        assert_eq!(r.waits_of(b"o7"), vec![lock("a"), lock("b")]);
        assert_eq!(r.group_locks(4), vec![lock("a"), lock("b")]);
        // o7's multi-lock entry is ahead of whoever queues for b next, not
        // of itself; nothing on k is a multi-lock entry.
        assert_eq!(
            r.multi_ahead(&lock("b"), b"o1").as_deref(),
            Some(&b"o7"[..])
        );
        assert_eq!(r.multi_ahead(&lock("b"), b"o7"), None);
        assert_eq!(r.multi_ahead(&lock("k"), b"o9"), None);
        assert_eq!(r.waits_of(b"o9"), Vec::<LockId<'static>>::new());
        // o1 twice on k (a shared id), listed once.
        let owners = r.queued_owners(&lock("k"));
        assert_eq!(owners.len(), 1);
        assert_eq!(&owners[0][..], b"o1");
        // Removed (a timeout), popped and woken, taken as a group: gone.
        let _ = r.remove(1).unwrap();
        assert_eq!(r.waits_of(b"o1"), vec![lock("j"), lock("k")]);
        let (id, w) = r.with_queue(&lock("j"), |q| q.pop_front()).unwrap();
        let wake = Wake {
            id,
            waiter: w,
            verdict: crate::transition::Verdict::Granted(1),
            held: false,
        };
        let _ = r.forget_woken(&lock("j"), &[wake]);
        assert_eq!(r.waits_of(b"o1"), vec![lock("k")]);
        let _ = r.take_group(4).unwrap();
        assert!(!r.owner_waits(b"o7"));
        assert!(r.group_locks(4).is_empty());
        let _ = r.remove(3).unwrap();
        assert!(!r.owner_waits(b"o1"));
        assert!(r.by_owner.is_empty());
        // A SEM.TAKE caller has no owner and is no one's edge.
        let mut anonymous = waiter(8, false);
        anonymous.request.owner = b"".as_slice().into();
        r.enqueue(&lock("s"), 9, anonymous);
        assert!(r.by_owner.is_empty());
    }

    #[test]
    fn due_waiters_leave_in_deadline_order_and_the_timer_goes_when_none_is_left() {
        let mut r = Registry::<usize>::default();
        let t0 = Instant::now();
        let at = |ms| t0 + std::time::Duration::from_millis(ms);
        let with_deadline = |n, ms| Waiter {
            deadline: Some(at(ms)),
            ..waiter(n, false)
        };
        r.enqueue(&lock("k"), 1, with_deadline(1, 300));
        r.enqueue(&lock("k"), 2, with_deadline(2, 100));
        r.enqueue(&lock("k"), 3, waiter(3, false));
        r.enqueue(&lock("j"), 4, with_deadline(4, 200));
        assert_eq!(r.next_deadline(), Some(at(100)));
        let due: Vec<_> = r
            .remove_due(at(200))
            .into_iter()
            .map(|(w, _)| w.bc)
            .collect();
        assert_eq!(due, vec![bc(2), bc(4)]);
        assert_eq!(r.next_deadline(), Some(at(300)));
        assert_eq!(r.queue_len(&lock("k")), 2);

        r.wait_timer = Some(WaitTimer {
            id: 9,
            fires_at: at(300),
        });
        let (_, released) = r.remove(1).unwrap();
        assert_eq!(released.wait_timer, Some(9));
        assert!(r.wait_timer.is_none() && r.next_deadline().is_none());
    }

    #[test]
    fn only_a_waiter_first_in_line_leaving_has_its_lock_looked_at_again() {
        let mut r = Registry::<usize>::default();
        for id in 1..=3 {
            r.enqueue(&lock("k"), id, waiter(id as usize, false));
        }
        let (_, released) = r.remove(2).unwrap();
        assert!(
            released.resettle.is_empty(),
            "not first: nobody behind it waited for it"
        );
        let (_, released) = r.remove(1).unwrap();
        assert_eq!(released.resettle, vec![lock("k")]);
        assert_eq!(r.queue_len(&lock("k")), 1);
    }

    #[test]
    fn a_multi_lock_caller_leaves_every_queue_at_once() {
        let mut r = Registry::<usize>::default();
        r.enqueue(&lock("b"), 1, waiter(1, false));
        let group = Waiter {
            deadline: Some(Instant::now()),
            ..waiter(2, true)
        };
        r.enqueue_group(&[lock("a"), lock("b")], &[2, 3], group);
        assert_eq!(r.group_at_head(&lock("a")), Some(2));
        assert_eq!(r.group_at_head(&lock("b")), None);
        let (request, entries) = r.group(2).unwrap();
        assert_eq!(&request.owner[..], b"o2");
        assert_eq!(entries, vec![(lock("a"), true), (lock("b"), false)]);
        assert_eq!(r.waiter_of(bc(2)), Some(2));
        assert_eq!(r.fenced_waiters(&lock("b")), 1);

        // Its BLOCK time runs out: both entries go, both keys are looked at
        // again.
        let due = r.remove_due(Instant::now());
        assert_eq!(due.len(), 1);
        let (w, released) = &due[0];
        assert_eq!(w.bc, bc(2));
        let mut keys = released.resettle.clone();
        keys.sort_by(|x, y| x.key.cmp(&y.key));
        assert_eq!(keys, vec![lock("a"), lock("b")]);
        assert!(!r.has_waiters(0, b"a"));
        assert_eq!(r.queue_len(&lock("b")), 1);
        assert_eq!(r.fenced_waiters(&lock("b")), 0);
        assert_eq!(r.waiter_of(bc(2)), None);
        assert_eq!(r.waiting(), 1);

        // Granted: taken out everywhere, nothing to look at again.
        r.enqueue_group(&[lock("c"), lock("d")], &[4, 5], waiter(4, false));
        let (w, released) = r.take_group(4).unwrap();
        assert_eq!(w.bc, bc(4));
        assert!(released.resettle.is_empty());
        assert!(!r.has_waiters(0, b"c") && !r.has_waiters(0, b"d"));
        assert_eq!(r.waiting(), 1);
    }

    #[test]
    fn shows_waiters_in_queue_order_with_their_kind_and_deadline() {
        let mut r = Registry::<usize>::default();
        let t0 = Instant::now();
        let at = |ms| t0 + std::time::Duration::from_millis(ms);
        let read = Waiter {
            request: Request {
                kind: LockKind::Read,
                campaign: None,
                keepalive: Some(crate::request::KeepAlive::Caller),
                ..waiter(1, false).request
            },
            deadline: Some(at(500)),
            queued_at: at(1),
            fair_ahead: Box::default(),
            ..waiter(1, false)
        };
        r.enqueue(&lock("k"), 1, read);
        // A multi-lock caller's deadline is on its first entry, here on
        // another key: its entry on "k" shows it too.
        let multi = Waiter {
            deadline: Some(at(900)),
            queued_at: at(2),
            fair_ahead: Box::default(),
            ..waiter(2, true)
        };
        r.enqueue_group(&[lock("j"), lock("k")], &[2, 3], multi);
        let write = Waiter {
            request: Request {
                kind: LockKind::Write,
                ..waiter(4, false).request
            },
            queued_at: at(3),
            fair_ahead: Box::default(),
            ..waiter(4, false)
        };
        r.enqueue(&lock("k"), 4, write);

        let all = r.waiters(&lock("k"), Limit::All);
        let shown: Vec<_> = all
            .iter()
            .map(|w| (&w.request.owner[..], w.kind(), w.deadline, w.queued_at))
            .collect();
        assert_eq!(
            shown,
            vec![
                (&b"o1"[..], "read", Some(at(500)), at(1)),
                (b"o2", "multi", Some(at(900)), at(2)),
                (b"o4", "write", None, at(3)),
            ]
        );
        assert!(all[0].request.keepalive.is_some() && all[1].request.fence);
        let now = at(101);
        assert_eq!(
            all.iter().map(|w| w.waited_ms(now)).collect::<Vec<_>>(),
            [100, 99, 98]
        );
        assert_eq!(
            all.iter().map(|w| w.timeout_ms(now)).collect::<Vec<_>>(),
            [399, 799, -1]
        );
        // Rounded up; 0 once the deadline passed (the timer is late).
        let just_after = now + std::time::Duration::from_micros(300);
        assert_eq!(all[0].timeout_ms(just_after), 399);
        assert_eq!(all[0].waited_ms(just_after), 100);
        assert_eq!(all[0].timeout_ms(at(600)), 0);
        assert_eq!(r.waiters(&lock("k"), Limit::AtMost(2)).len(), 2);
        assert_eq!(r.waiters(&lock("k"), Limit::of(0)).len(), 3);
        assert!(r.waiters(&lock("none"), Limit::All).is_empty());
        let exclusive = r.waiters(&lock("j"), Limit::All);
        assert_eq!(exclusive[0].kind(), "multi");

        let mut queues = r.queues(0);
        queues.sort_by(|a, b| a.key.cmp(&b.key));
        assert_eq!(
            queues,
            vec![
                QueueView {
                    key: b"j".to_vec(),
                    waiters: 1,
                    first_queued_at: at(2),
                },
                QueueView {
                    key: b"k".to_vec(),
                    waiters: 3,
                    first_queued_at: at(1),
                },
            ]
        );
        assert!(r.queues(1).is_empty());
        assert_eq!(queues[1].longest_wait_ms(at(11)), 10);
    }

    #[test]
    fn orders_queues_by_longest_wait_and_keeps_at_most_the_limit() {
        let t0 = Instant::now();
        let view = |key: &str, ms| QueueView {
            key: key.as_bytes().to_vec(),
            waiters: 1,
            first_queued_at: t0 + std::time::Duration::from_millis(ms),
        };
        let all = vec![
            view("c", 30),
            view("a", 10),
            view("e", 50),
            view("b", 10),
            view("d", 40),
        ];
        let keys = |v: Vec<QueueView>| -> Vec<String> {
            v.into_iter()
                .map(|q| String::from_utf8(q.key).unwrap())
                .collect()
        };
        assert_eq!(
            keys(longest_waiting_first(all.clone(), Limit::All)),
            ["a", "b", "c", "d", "e"]
        );
        assert_eq!(
            keys(longest_waiting_first(all.clone(), Limit::AtMost(2))),
            ["a", "b"]
        );
        assert_eq!(
            keys(longest_waiting_first(all.clone(), Limit::AtMost(3))),
            ["a", "b", "c"]
        );
        assert_eq!(
            keys(longest_waiting_first(all.clone(), Limit::AtMost(9))),
            ["a", "b", "c", "d", "e"]
        );
        assert!(longest_waiting_first(Vec::new(), Limit::AtMost(1)).is_empty());
        assert_eq!(Limit::of(0), Limit::All);
        assert_eq!(Limit::of(4), Limit::AtMost(4));
    }

    #[test]
    fn lists_locks_by_db() {
        let mut r = Registry::<usize>::default();
        r.enqueue(&lock("a"), 1, waiter(1, false));
        r.enqueue(
            &LockId {
                db: 3,
                key: Cow::Borrowed(b"b"),
            },
            2,
            waiter(2, false),
        );
        assert_eq!(r.locks_in(0), vec![lock("a")]);
        assert_eq!(r.locks_in(-1).len(), 2);
    }
}
