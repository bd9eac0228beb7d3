//! A lock's transition, begun and committed: `begin` opens the key, reads
//! its state and (through the hooks) its Redisson fair queue, and loads the
//! fencing counter; `commit_only` writes and replicates the changes, runs
//! the commit hooks, answers the woken waiters and keeps a lease timer while
//! others wait. Serving a multi-lock caller afterwards is `lock.rs`'s (with
//! `group.rs`), above this file, which `group.rs` uses too.
//!
//! Offers: [`begin`], [`load_token`], [`commit_only`], [`commit_with`].

use redis_module::{Context, RedisString};

use super::hooks;
use super::Origin;
use crate::ffi;
use crate::lease;
use crate::stats::STATS;
use crate::store::LockKey;
use crate::tokens;
use crate::waiters::{anyone_waits, registry, Waiter};
use lock_rules::error::LockError;
use lock_rules::lock_id::LockId;
use lock_rules::state::LockState;
use lock_rules::transition::{TokenValue, Transition};

/// Opens the lock in the context's db and starts a transition from what it
/// holds, with the fencing counter loaded if a grant may need it.
pub fn begin<'c>(
    ctx: &'c Context,
    name: &'c RedisString,
    lock: &LockId<'_>,
    origin: Origin<'c>,
) -> Result<(LockKey<'c>, Transition<Waiter>), LockError> {
    let (owner, fences, replication) = origin.parts(ctx)?;
    let key = LockKey::open(ctx, name, owner, replication)?;
    let state = key.read(ctx)?;
    let token = load_token(ctx, lock, fences);
    // A renewal never frees the lock nor queues anyone: it skips the read.
    let tx = Transition::new(state, ffi::now_ms(), token);
    let tx = match (tx.state(), origin) {
        (LockState::Shared(_), _) | (_, Origin::Renewal { .. }) => tx,
        _ => {
            let (fair, remembered) = hooks::fair_queue(ctx, lock);
            tx.with_fair(fair, remembered)
        }
    };
    Ok((key, tx))
}

/// The fencing counter, read only when a grant may need it: the caller
/// asked for FENCE, or a queued waiter did.
pub fn load_token(ctx: &Context, lock: &LockId<'_>, caller_fences: bool) -> TokenValue {
    let waiters_fence = anyone_waits() && registry().is_ok_and(|r| r.fenced_waiters(lock) > 0);
    (caller_fences || waiters_fence).then(|| tokens::last_token(ctx, &lock.key))
}

/// Applies `tx` to `key` without serving a multi-lock caller now first in
/// line (`lock.rs` does, after): writes and their replication first, then
/// the commit hooks, then the answers to woken waiters (Redis sends them
/// after this execution unit, so the new owner is already written and
/// replicated when it hears), then the lease timer if waiters remain.
pub(super) fn commit_only(ctx: &Context, lock: &LockId<'_>, key: &LockKey, tx: Transition<Waiter>) {
    commit_with(ctx, lock, key, tx, true);
}

/// [`commit_only`], with the lease timer left out when `lease_timer` is
/// false (see `lock::commit_unchanged`).
pub(super) fn commit_with(
    ctx: &Context,
    lock: &LockId<'_>,
    key: &LockKey,
    tx: Transition<Waiter>,
    lease_timer: bool,
) {
    key.apply(ctx, &tx.changes);
    STATS.add(&tx.tally);
    hooks::committed(ctx, lock, key, &tx);
    let held_after = *tx.state() != LockState::Free;
    let next_end = tx.next_end();
    super::deliver(ctx, lock, tx.wakes);
    if held_after && lease_timer {
        lease::ensure_lease_timer(ctx, lock, || lease::earliest(next_end, key.expires_at()));
    }
}
