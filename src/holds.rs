//! The module's one hold table (`lock_rules::holds`: since when each holder
//! of each lock holds it), fed by every committed transition and by the
//! events that end a lock outside one (its key expired, deleted, flushed),
//! and the hold times it saw end, which `INFO lock` reports.
//!
//! The cost on a lock's fast path: a transition whose holders did not change
//! (re-entry, renewal, a busy acquire) compares their ids and stops; a grant
//! or the end of a hold hashes the key and touches the table once, under
//! one mutex nothing else holds for long. Locks are found by a keyed hash of
//! their key, so the table keeps no key bytes and clients cannot choose
//! keys that collide.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{LazyLock, Mutex, MutexGuard};

use redis_module::Context;

use crate::stats::Times;
use crate::store::LockKey;
use crate::waiters::Waiter;
use crate::{ffi, sync};
use lock_rules::holds::{lock_hash, Ended, HoldTable, Holders};
use lock_rules::lock_id::LockId;
use lock_rules::names::NameHasher;
use lock_rules::state::LockState;
use lock_rules::transition::Transition;

/// The table and the times of the holds it saw end, behind one mutex: a
/// release takes it once.
#[derive(Default)]
struct Holds {
    table: HoldTable,
    times: Times,
}

impl Holds {
    /// What to tell the table of each hold that ends.
    fn split(&mut self) -> (&mut HoldTable, impl FnMut(Ended) + '_) {
        let times = &mut self.times;
        (&mut self.table, move |e: Ended| {
            times.record(e.ms, e.weight)
        })
    }
}

static HOLDS: LazyLock<Mutex<Holds>> = LazyLock::new(Mutex::default);
/// Whether the table may hold anything: lets keyspace events on keys of a
/// server that tracks no hold skip the hash and the mutex.
static TRACKING: AtomicBool = AtomicBool::new(false);
/// The secret seed of the keys' hashes, drawn once per load.
static SEED: LazyLock<NameHasher> = LazyLock::new(NameHasher::default);

fn holds() -> MutexGuard<'static, Holds> {
    sync::lock(&HOLDS)
}

/// The engine's commit hook (installed at load): holders that left end
/// their hold now, new ones start theirs.
pub fn committed(_ctx: &Context, lock: &LockId<'_>, _key: &LockKey, tx: &Transition<Waiter>) {
    changed(lock, &tx.held_before, tx.state(), tx.now_ms());
}

/// A transition of `lock` was committed: holders that left end their hold
/// at `now_ms`, new ones start theirs.
fn changed(lock: &LockId<'_>, before: &Holders, after: &LockState, now_ms: i64) {
    if before.same_as(after) {
        return;
    }
    let hash = lock_hash(&*SEED, &lock.key);
    let mut holds = holds();
    let (table, mut ended) = holds.split();
    table.changed(lock.db, hash, before, after, now_ms, &mut ended);
    if !TRACKING.load(Relaxed) && !table.is_empty() {
        TRACKING.store(true, Relaxed);
    }
}

/// A keyspace event on `key` of `db` from outside the module: anything but
/// a new TTL (`expire`, `persist`) means the lock that was there is gone
/// (`del`, `expired`, `evicted`, `rename_from`, `move_from`, and a key
/// overwritten by `rename_to`, `move_to`, `copy_to`, `restore`...).
/// Returns whether a lock held through the module was there.
pub fn key_event(db: i32, event: &[u8], key: &[u8]) -> bool {
    if !TRACKING.load(Relaxed) || event == b"expire" || event == b"persist" {
        return false;
    }
    let hash = lock_hash(&*SEED, key);
    let mut holds = holds();
    let (table, mut ended) = holds.split();
    table.lock_gone(db, hash, ffi::now_ms(), &mut ended)
}

/// FLUSHDB / FLUSHALL (`db` -1): every hold in it ended now.
pub fn flushed(db: i32) {
    let mut holds = holds();
    let (table, mut ended) = holds.split();
    table.flushed(db, ffi::now_ms(), &mut ended);
}

pub fn swapped(a: i32, b: i32) {
    holds().table.swapped(a, b);
}

/// The server became a replica: the new master's holds are its own.
pub fn clear() {
    holds().table.clear();
}

/// `hold_ms_p50`, `hold_ms_p99`, `hold_ms_max`. Never blocks (INFO also
/// runs in crash reports): nothing if the table is held at that moment.
pub fn time_fields() -> Vec<(String, u64)> {
    sync::try_lock(&HOLDS).map_or_else(Vec::new, |holds| holds.times.fields("hold_ms"))
}
