//! The module's one hold table (`lock_rules::holds`: since when each holder
//! of each lock holds it), fed by every committed transition and by the
//! events that end a lock outside one (its key expired, deleted, flushed),
//! and feeding the hold-time percentiles of `INFO lock` (`info.rs`).
//!
//! The cost on a lock's fast path: a transition whose holders did not change
//! (re-entry, renewal, a busy acquire) compares them and stops; a grant or
//! the end of a hold hashes the key and touches the table once, under a
//! mutex nothing else holds for long. Locks are found by a keyed hash of
//! their key, so the table keeps no key bytes and clients cannot choose
//! keys that collide.

use std::collections::hash_map::RandomState;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{LazyLock, Mutex, MutexGuard};

use crate::ffi;
use crate::info;
use crate::rules::holds::{lock_hash, HoldTable, Holders};
use crate::rules::state::LockState;
use crate::waiters::LockId;

static TABLE: LazyLock<Mutex<HoldTable>> = LazyLock::new(Mutex::default);
/// Whether the table may hold anything: lets keyspace events on keys of a
/// server that tracks no hold skip the hash and the mutex.
static TRACKING: AtomicBool = AtomicBool::new(false);
/// The secret seed of the keys' hashes, drawn once per load.
static SEED: LazyLock<RandomState> = LazyLock::new(RandomState::new);

/// A poisoned table only means a panic was caught while it was held; every
/// change completes before anything can panic.
fn table() -> MutexGuard<'static, HoldTable> {
    TABLE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A transition of `lock` was committed: holders that left end their hold
/// at `now_ms`, new ones start theirs.
pub fn changed(lock: &LockId<'_>, before: &Holders, after: &LockState, now_ms: i64) {
    if before.same_as(after) {
        return;
    }
    let hash = lock_hash(&*SEED, &lock.key);
    let mut table = table();
    table.changed(lock.db, hash, before, after, now_ms, &mut info::record_hold);
    if !table.is_empty() {
        TRACKING.store(true, Relaxed);
    }
}

/// A keyspace event on `key` of `db` from outside the module: anything but
/// a new TTL (`expire`, `persist`) means the lock that was there is gone
/// (`del`, `expired`, `evicted`, `rename_from`, `move_from`, and a key
/// overwritten by `rename_to`, `move_to`, `copy_to`, `restore`...).
pub fn key_event(db: i32, event: &[u8], key: &[u8]) {
    if !TRACKING.load(Relaxed) || event == b"expire" || event == b"persist" {
        return;
    }
    let hash = lock_hash(&*SEED, key);
    table().lock_gone(db, hash, ffi::now_ms(), &mut info::record_hold);
}

/// FLUSHDB / FLUSHALL (`db` -1): every hold in it ended now.
pub fn flushed(db: i32) {
    table().flushed(db, ffi::now_ms(), &mut info::record_hold);
}

pub fn swapped(a: i32, b: i32) {
    table().swapped(a, b);
}

/// The server became a replica: the new master's holds are its own.
pub fn clear() {
    table().clear();
}
