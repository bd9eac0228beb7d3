//! Deadlock detection: the waits-for graph as this server has it, and the
//! check every wait passes before it is queued.
//!
//! The graph is never stored: the waiter registry says what an owner waits
//! for (its owner index), the keys say who holds a lock, and the rules'
//! [`cycle_closed_by`] walks it from the holders of what the caller wants.
//! A wait that would close a cycle is refused with `DEADLOCK` naming the
//! cycle (the caller that closes it is the victim, as in PostgreSQL and
//! InnoDB: the others keep waiting), and counted in `INFO lock`.
//!
//! Cost: nothing while nobody waits; otherwise one look in the registry's
//! owner index for the holders of what the caller wants, which the command
//! read already. Only when one of them waits too does the search read more
//! keys (each lock on its path once). A hot lock's queue is never walked.
//!
//! With `lock.deadlock-check-ms` N > 0, a wait is queued at once and
//! checked once it has lasted N ms (PostgreSQL's `deadlock_timeout`): the
//! waits to check are kept in order of their due time, with one timer at
//! the first; a wait found to close a cycle then is taken out of its
//! queue and answered `DEADLOCK`.
//!
//! Offers: [`check`], [`check_later`], [`holders`].

use std::collections::VecDeque;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use redis_module::Context;

use crate::ffi::{self, TimerHandler};
use crate::stats::{Stats, STATS};
use crate::waiters::{anyone_waits, registry};
use crate::writable::{writable, Writable};
use crate::{blocking, config, semaphore_key, store, sync};
use lock_rules::deadlock::{
    cycle_closed_by, lock_holders, permit_owners, semaphore_holders, WaitsFor,
};
use lock_rules::error::LockError;
use lock_rules::lock_id::LockId;
use lock_rules::registry::TimerId;
use lock_rules::request::FieldName;
use lock_rules::semaphore::SemaphoreState;

/// Refuses `caller`'s wait for `wanted` (each lock with its holders as the
/// command just read them) with `DEADLOCK` if it would close a cycle.
/// Called on a master only, after the rules decided the caller waits and
/// before it is queued.
pub fn check(
    ctx: &Context,
    caller: &[u8],
    wanted: &[(LockId<'_>, Vec<Vec<u8>>)],
) -> Result<(), LockError> {
    if caller.is_empty() || !anyone_waits() || config::deadlock_check_ms() != 0 {
        return Ok(());
    }
    {
        // The common case ends here: no holder of what the caller wants
        // waits for anything (a hot lock's holder is busy, not waiting),
        // and no multi-lock caller is first in line for it.
        let registry = registry()?;
        let holders_wait = wanted.iter().any(|(lock, holders)| {
            registry.group_at_head(lock).is_some()
                || holders
                    .iter()
                    .any(|h| h[..] != *caller && registry.owner_waits(h))
        });
        if !holders_wait {
            return Ok(());
        }
    }
    let graph = ServerGraph {
        ctx,
        db: ffi::selected_db(ctx),
        known: wanted,
    };
    let locks: Vec<LockId<'_>> = wanted.iter().map(|(lock, _)| lock.clone()).collect();
    let cycle = cycle_closed_by(&graph, caller, &locks);
    match cycle {
        Some(cycle) => {
            Stats::bump(&STATS.deadlocks);
            Err(cycle.error())
        }
        None => Ok(()),
    }
}

/// A wait to check once it has lasted the delay.
struct Pending {
    due: Instant,
    owner: FieldName,
    locks: Vec<LockId<'static>>,
}

#[derive(Default)]
struct Delayed {
    /// In the order queued: the delay is one setting, so due times only
    /// grow (a wait queued just before the setting was lowered is checked
    /// with those behind it, a little late).
    queue: VecDeque<Pending>,
    timer: Option<TimerId>,
}

static DELAYED: LazyLock<Mutex<Delayed>> = LazyLock::new(Mutex::default);

/// How soon due checks are tried again while the server loads or is paused.
const RETRY_MS: i64 = 100;

/// `owner` was just queued for `locks` (one key, or each of a multi-lock
/// caller's): with a delay set, its wait is checked once it has lasted it.
pub fn check_later(ctx: &Context, owner: &FieldName, locks: &[LockId<'static>]) {
    let Ok(delay) = u64::try_from(config::deadlock_check_ms()) else {
        return;
    };
    if delay == 0 || owner.is_empty() {
        return;
    }
    let mut delayed = sync::lock(&DELAYED);
    delayed.queue.push_back(Pending {
        due: Instant::now() + Duration::from_millis(delay),
        owner: owner.clone(),
        locks: locks.to_vec(),
    });
    if delayed.timer.is_none() {
        arm(ctx, &mut delayed);
    }
}

/// The timer at the first due wait, if any wait is left to check.
fn arm(ctx: &Context, delayed: &mut Delayed) {
    let Some(first) = delayed.queue.front() else {
        return;
    };
    // Whole ms, rounded up: never before the wait has lasted the delay.
    let ms = first
        .due
        .saturating_duration_since(Instant::now())
        .as_micros()
        .div_ceil(1000);
    delayed.timer = ffi::create_timer::<DelayedCheck>(ctx, i64::try_from(ms).unwrap_or(0), 0);
}

/// Fires when the first wait queued has lasted the delay: checks every due
/// wait that is still waiting, then re-arms for the next.
struct DelayedCheck;

impl TimerHandler for DelayedCheck {
    fn fire(ctx: &Context, _: u64) {
        let now = Instant::now();
        let due: Vec<Pending> = {
            let mut delayed = sync::lock(&DELAYED);
            delayed.timer = None;
            match writable(ctx) {
                // Loading or paused: keys are not to be touched (a read
                // may expire one); the cycle, if any, is still there later.
                Writable::Later => {
                    delayed.timer = ffi::create_timer::<DelayedCheck>(ctx, RETRY_MS, 0);
                    return;
                }
                // A replica has no waiters: they were answered when it
                // was demoted.
                Writable::Never => {
                    delayed.queue.clear();
                    return;
                }
                Writable::Now | Writable::TooFewReplicas => {}
            }
            let n = delayed.queue.iter().take_while(|p| p.due <= now).count();
            delayed.queue.drain(..n).collect()
        };
        for wait in due {
            check_waiting(ctx, wait);
        }
        let mut delayed = sync::lock(&DELAYED);
        if delayed.timer.is_none() {
            arm(ctx, &mut delayed);
        }
    }
}

/// A wait that has lasted the delay: if it is still waiting (for what it
/// was queued for) and closes a cycle now, it leaves its queue with
/// `DEADLOCK`.
fn check_waiting(ctx: &Context, wait: Pending) {
    if config::deadlock_check_ms() < 0 {
        return;
    }
    let waits = registry().map_or_else(|_| Vec::new(), |r| r.waits_of(&wait.owner));
    let wanted: Vec<LockId<'static>> = wait
        .locks
        .into_iter()
        .filter(|lock| waits.contains(lock))
        .collect();
    if wanted.is_empty() {
        return;
    }
    let graph = ServerGraph {
        ctx,
        db: ffi::selected_db(ctx),
        known: &[],
    };
    let Some(cycle) = cycle_closed_by(&graph, &wait.owner, &wanted) else {
        return;
    };
    let error = cycle.error().to_string();
    let lock = &cycle.steps[0].lock;
    if blocking::fail(ctx, lock, &wait.owner, &error) > 0 {
        Stats::bump(&STATS.deadlocks);
    }
}

/// Whom the callers queued for `lock` (of the selected database) wait for
/// now (LOCK.WAITERS): its holders (a semaphore's every permit owner, not
/// only the sole one the search follows), and a multi-lock caller first in
/// line.
pub fn holders(ctx: &Context, lock: &LockId<'_>) -> Vec<Vec<u8>> {
    let mut holders = read_holders(ctx, &lock.key, permit_owners);
    let first = registry().ok().and_then(|r| r.group_owner_at_head(lock));
    if let Some(first) = first {
        if !holders.iter().any(|h| h[..] == first[..]) {
            holders.push(first.to_vec());
        }
    }
    holders
}

/// The graph read from this server: the registry for waits, the keys for
/// holders (those of the caller's own locks as the command read them).
struct ServerGraph<'a, 'k> {
    ctx: &'a Context,
    /// The caller's database, selected again after a lock of another.
    db: i32,
    known: &'a [(LockId<'k>, Vec<Vec<u8>>)],
}

impl WaitsFor for ServerGraph<'_, '_> {
    fn waits_of(&self, owner: &[u8]) -> Vec<LockId<'static>> {
        // Taken for the one lookup: opening keys (below) may run a
        // keyspace-event callback that takes it too.
        registry().map_or_else(|_| Vec::new(), |r| r.waits_of(owner))
    }

    fn first_in_line(&self, lock: &LockId<'_>) -> Option<Vec<u8>> {
        let registry = registry().ok()?;
        registry
            .group_owner_at_head(lock)
            .map(|owner| owner.to_vec())
    }

    fn holders_of(&self, lock: &LockId<'_>) -> Vec<Vec<u8>> {
        if let Some((_, holders)) = self.known.iter().find(|(known, _)| known == lock) {
            return holders.clone();
        }
        if lock.db != self.db && !ffi::select_db(self.ctx, lock.db) {
            return Vec::new();
        }
        let holders = read_holders(self.ctx, &lock.key, semaphore_holders);
        if lock.db != self.db {
            ffi::select_db(self.ctx, self.db);
        }
        holders
    }
}

/// The holders of the lock or semaphore named `key` in the selected
/// database; nobody if it is neither (nothing to wait for there).
fn read_holders(
    ctx: &Context,
    key: &[u8],
    of_semaphore: fn(&SemaphoreState, i64) -> Vec<Vec<u8>>,
) -> Vec<Vec<u8>> {
    let name = ffi::string(ctx, key);
    let now_ms = ffi::now_ms();
    match store::read_only(ctx, &name) {
        Ok(Some((state, _))) => lock_holders(&state, now_ms),
        // A semaphore's counter is a string (a lock read refuses it), or
        // missing while permits are held.
        Ok(None) | Err(_) => semaphore_key::read_only(ctx, &name)
            .ok()
            .flatten()
            .map(|state| of_semaphore(&state, now_ms))
            .unwrap_or_default(),
    }
}
