//! Redisson's fair queue of a lock in Redis (its rules are
//! `lock_rules::fair`): read from its LIST and ZSET for each transition of
//! the lock, and watched between transitions:
//!
//! - a timer at the deadline of the fair waiter a free lock is kept for:
//!   if it never comes (killed while it waited), the drain drops it and
//!   serves the next, even when nobody else calls (Redisson alone leaves a
//!   dead waiter's entries until another client's script runs);
//! - list events on the queue (`lrem` of a waiter that gave up, `lpop` of a
//!   waiter another script dropped), heard once a module caller waits on a
//!   lock with a fair queue: its first waiter may be next now;
//! - the end of a hold granted here (expiry, eviction, DEL), whose lock may
//!   have a fair queue the module never saw (Redisson's waiters queued
//!   behind a module holder): looked at in the drain.
//!
//! The writes (a stale head dropped, the head told) are applied with the
//! lock's other changes (`store.rs`).
//!
//! Offers: [`read`], [`key_event`], [`keys_replaced`], [`exists`], [`kept`],
//! [`hold_ended`], [`QueueEvents`]
//! (the list events, subscribed by `subscriptions.rs`).

use std::borrow::Cow;
use std::sync::{LazyLock, Mutex};

use redis_module::Context;

use crate::ffi::{self, Key, KeyKind, KeyspaceHandler, TimerHandler, TimerId};
use crate::native_writes;
use crate::waiters::{anyone_waits, registry};
use crate::{config, deferred, lease, scratch, subscriptions, sync};
use lock_rules::args::MAX_DURATION_MS;
use lock_rules::fair::{FairEntry, FairQueue};
use lock_rules::keys::{
    fair_keys_in_slot, fair_timeout_key, locks_of_fair_queue_key, write_fair_queue_key,
};
use lock_rules::lock_id::LockId;
use lock_rules::names::NameMap;

/// The fair queue of `lock` (in the context's db), first entry first;
/// `None` when it has none, when its keys would be in another slot, or
/// when the module does not speak to Redisson's clients
/// (`lock.redisson-notify no`). A lock found without one is not looked up
/// again until a key may have become a fair queue ([`absent`]).
pub fn read(ctx: &Context, lock: &LockId<'_>) -> Option<FairQueue> {
    if !config::redisson_notify() {
        return None;
    }
    let mark = subscriptions::fair_queue_changes_heard().then(|| absent::Mark::of(lock));
    if mark.as_ref().is_some_and(absent::Mark::holds) {
        return None;
    }
    let found = read_queue(ctx, &lock.key);
    if let (None, Some(mark)) = (&found, mark) {
        mark.set();
    }
    found
}

fn read_queue(ctx: &Context, lock: &[u8]) -> Option<FairQueue> {
    let owners = {
        let list = open_queue(ctx, lock)?;
        if list.kind() != KeyKind::List {
            return None;
        }
        list.list_items()
    };
    if owners.is_empty() || !fair_keys_in_slot(lock) {
        return None;
    }
    let name = ffi::string(ctx, &fair_timeout_key(lock));
    let deadlines = Key::open(ctx, &name, true).filter(|k| k.kind() == KeyKind::SortedSet);
    // Redisson drops an entry once `score <= now` (whole ms): the score
    // rounded up keeps that for a fractional score too.
    let due = |owner: &[u8]| {
        let score = deadlines.as_ref()?.zset_score(ctx, owner)?;
        Some(score.ceil() as i64)
    };
    Some(FairQueue::new(owners.into_iter().map(|owner| FairEntry {
        due: due(&owner),
        owner: owner.into(),
    })))
}

/// A keyspace event (list or generic) on `key`: if it may be a fair queue,
/// every lock found without one is looked up again.
pub fn key_event(key: &[u8]) {
    if key.starts_with(FAIR_QUEUE_PREFIX) {
        absent::forget_all();
    }
}

/// SWAPDB or a load replaced keys without a keyspace event for each: every
/// lock found without a fair queue is looked up again.
pub fn keys_replaced() {
    absent::forget_all();
}

const FAIR_QUEUE_PREFIX: &[u8] = b"redisson_lock_queue:";

/// Locks known to have no fair queue: each lock a lookup found without one
/// since the last event that could have made one, by a keyed hash of its
/// db and name, in a small table of slots a lock shares with those that
/// hash alike (bounded memory, no clean-up; a lock whose slot was taken is
/// looked up again). Nearly every lock has no fair queue, and the lookup
/// (a name built, a key opened) cost about 1k instructions on every
/// transition, twice per hand-off of a hot lock.
///
/// Known only while every way a key becomes a fair queue is heard
/// (`subscriptions::fair_queue_changes_heard`, from the first wait on):
/// list events (`RPUSH`, `LMOVE`, `SORT ... STORE`, a script's), the
/// generic `rename_to`, `restore`, `copy_to`, `move_to`, and `SWAPDB` and
/// loading. Any of those on a fair queue's name forgets every lock known
/// here: an epoch counter, which each mark must match. (A key written by
/// another module with no keyspace event is not seen.)
mod absent {
    use std::cell::RefCell;
    use std::hash::BuildHasher;
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    use std::sync::LazyLock;

    use lock_rules::lock_id::LockId;
    use lock_rules::names::NameHasher;

    const SLOTS: usize = 256;

    /// Bumped by every event that may make a fair queue; 0 is never a
    /// mark's epoch.
    static EPOCH: AtomicU64 = AtomicU64::new(1);
    static SEED: LazyLock<NameHasher> = LazyLock::new(NameHasher::default);

    thread_local! {
        /// (lock hash, epoch at which its lookup found no fair queue).
        static MARKS: RefCell<[(u64, u64); SLOTS]> = const { RefCell::new([(0, 0); SLOTS]) };
    }

    pub(super) struct Mark {
        hash: u64,
        /// Read before the lookup: an event during it (none can run inside
        /// a command, but the drain also looks) leaves the mark stale.
        epoch: u64,
    }

    impl Mark {
        pub(super) fn of(lock: &LockId<'_>) -> Mark {
            Mark {
                hash: SEED.hash_one((lock.db, &lock.key[..])),
                epoch: EPOCH.load(Relaxed),
            }
        }

        /// The lock was found without a fair queue at this mark's epoch.
        pub(super) fn holds(&self) -> bool {
            MARKS.with(|marks| {
                marks
                    .try_borrow()
                    .is_ok_and(|m| m[self.hash as usize % SLOTS] == (self.hash, self.epoch))
            })
        }

        /// A lookup found no fair queue: known until the next event. Only
        /// while every such event is heard.
        pub(super) fn set(&self) {
            MARKS.with(|marks| {
                if let Ok(mut m) = marks.try_borrow_mut() {
                    m[self.hash as usize % SLOTS] = (self.hash, self.epoch);
                }
            });
        }
    }

    pub(super) fn forget_all() {
        EPOCH.fetch_add(1, Relaxed);
    }
}

/// Whether `lock` (in the context's db) has a fair queue to look at.
pub fn exists(ctx: &Context, lock: &[u8]) -> bool {
    config::redisson_notify()
        && fair_keys_in_slot(lock)
        && open_queue(ctx, lock).is_some_and(|list| list.kind() == KeyKind::List)
}

/// Opens the fair queue of `lock`: for writing, though only read, since a
/// read that misses counts in INFO's `keyspace_misses` (and fires a
/// `keymiss` event), and nearly every lock has no fair queue (the key is
/// only looked at on a master, in a command or the drain). The name is
/// built in a buffer kept from one call to the next.
fn open_queue<'c>(ctx: &'c Context, lock: &[u8]) -> Option<Key<'c>> {
    let name = scratch::with_name(
        |buf| write_fair_queue_key(lock, buf),
        |bytes| ffi::string(ctx, bytes),
    );
    Key::open(ctx, &name, true)
}

/// A transition left `lock` free and kept for the fair waiter `head`: it is
/// looked at again at that waiter's deadline (with the lease timer if the
/// module's callers wait for it, else with a timer of its own here), and
/// the queue's list events are heard if they wait.
pub fn kept(ctx: &Context, lock: &LockId<'_>, head: &FairEntry) {
    let module_waits = anyone_waits() && registry().is_ok_and(|r| r.queue_len(lock) > 0);
    if module_waits {
        subscriptions::watch_fair_queues(ctx);
    }
    let Some(due) = head.due else {
        return;
    };
    if module_waits {
        return lease::ensure_lease_timer(ctx, lock, || Some(due));
    }
    let delay = due
        .saturating_sub(ffi::now_ms())
        .max(0)
        .saturating_add(1)
        .min(MAX_DURATION_MS);
    let fires_at = ffi::now_ms().saturating_add(delay);
    let mut timers = sync::lock(&HEAD_TIMERS);
    if timers
        .by_lock
        .get(lock)
        .is_some_and(|t| t.fires_at <= fires_at)
    {
        return;
    }
    timers.serial += 1;
    let job = timers.serial;
    let Some(id) = ffi::create_timer::<HeadDue>(ctx, delay, job) else {
        return;
    };
    let timer = HeadTimer { id, job, fires_at };
    if let Some(old) = timers.by_lock.insert(lock.to_owned(), timer) {
        ffi::stop_timer(ctx, old.id);
    }
}

/// A hold granted here ended outside a command (its lease ran out, it was
/// evicted or deleted): its lock may have a fair queue to serve, which the
/// drain looks at.
pub fn hold_ended(ctx: &Context, db: i32, key: &[u8]) {
    if config::redisson_notify() {
        let lock = LockId {
            db,
            key: Cow::Owned(key.to_vec()),
        };
        deferred::defer_fair_check(ctx, lock);
    }
}

/// A timer at the deadline of a kept-for fair waiter, for a lock nobody
/// here waits for.
struct HeadTimer {
    id: TimerId,
    job: u64,
    fires_at: i64,
}

#[derive(Default)]
struct HeadTimers {
    by_lock: NameMap<LockId<'static>, HeadTimer>,
    serial: u64,
}

static HEAD_TIMERS: LazyLock<Mutex<HeadTimers>> = LazyLock::new(Mutex::default);

struct HeadDue;

impl TimerHandler for HeadDue {
    fn fire(ctx: &Context, job: u64) {
        let lock = {
            let mut timers = sync::lock(&HEAD_TIMERS);
            let Some(lock) = timers
                .by_lock
                .iter()
                .find(|(_, t)| t.job == job)
                .map(|(lock, _)| lock.clone())
            else {
                return;
            };
            timers.by_lock.remove(&lock);
            lock
        };
        deferred::defer_fair_check(ctx, lock);
    }
}

/// List events: a change of a fair queue whose lock the module's callers
/// wait for has that lock looked at again in the drain (never here: see
/// `deferred.rs`).
pub struct QueueEvents;

impl KeyspaceHandler for QueueEvents {
    fn event(ctx: &Context, event: &[u8], key: &[u8]) {
        if !key.starts_with(FAIR_QUEUE_PREFIX) {
            return;
        }
        key_event(key);
        if native_writes::is_own_notification() || event == b"rpush" {
            return;
        }
        let locks = locks_of_fair_queue_key(key);
        if locks.is_empty() || !anyone_waits() {
            return;
        }
        let db = ffi::selected_db(ctx);
        let waited: Vec<LockId<'static>> = match registry() {
            Ok(reg) => locks
                .into_iter()
                .filter(|name| reg.has_waiters(db, name))
                .map(|name| LockId {
                    db,
                    key: Cow::Owned(name.to_vec()),
                })
                .collect(),
            Err(_) => return,
        };
        for lock in waited {
            deferred::defer_key(ctx, lock);
        }
        deferred::drain_after_event(ctx);
    }
}
