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
//! Offers: [`check`], [`holders`].

use redis_module::Context;

use crate::ffi;
use crate::stats::{Stats, STATS};
use crate::waiters::{anyone_waits, registry};
use crate::{config, semaphore_key, store};
use lock_rules::deadlock::{
    cycle_closed_by, lock_holders, permit_owners, semaphore_holders, WaitsFor,
};
use lock_rules::error::LockError;
use lock_rules::lock_id::LockId;
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
    if caller.is_empty() || !anyone_waits() || !config::deadlock_detection() {
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
