//! The lock kind (exclusive and read-write locks, an election's lock): a
//! transition of one lock (or of several, for a multi-lock command) is
//! begun from what the key holds, run through the rules by the caller, then
//! committed: its changes are written and replicated, the hooks of the
//! features built on commits run (`hooks.rs`), the waiters it woke are
//! answered, and a lease timer is kept while others wait. A multi-lock
//! caller first in line on a committed lock is then served (`group.rs`).
//!
//! One hand-off, a release that gives the lock to the first waiter:
//!
//! ```text
//! LOCK.RELEASE (caller)      handoff                  Redis                waiter
//!   begin ----------------> open key, read state
//!   tx.release(queue)        (rules: free, settle:
//!                             head waiter granted)
//!   commit ---------------> apply changes --------> HSET/HDEL/PEXPIREAT
//!                                                   replicated as one
//!                                                   MULTI/EXEC
//!                           deliver: registry
//!                           forgets the waiter,
//!                           ffi::unblock(reply) --> reply callback
//!                           lease timer if others   (blocking::Blocked)
//!                           still wait               after this command -> (integer) 1
//!   reply 0 <-------------
//! ```
//!
//! If the waiter is gone by the time its reply is written, `blocking.rs`
//! hands the grant to `deferred.rs`, whose drain releases it again (another
//! transition, begun and committed the same way, through the engine's
//! [`super::release_lost_grant`]). Every way a lock ends outside a command
//! (lease timer, keyspace event, flush) goes through the drain too
//! ([`super::settle`]).
//!
//! Offers: [`begin`], [`load_token`], [`commit`], [`commit_unchanged`],
//! [`commit_all`].

use redis_module::{Context, RedisString};

use super::hooks;
use super::{group, Origin, Resource};
use crate::ffi;
use crate::lease;
use crate::stats::STATS;
use crate::store::LockKey;
use crate::tokens;
use crate::waiters::{anyone_waits, registry, Grant, Waiter};
use lock_rules::error::LockError;
use lock_rules::lock_id::LockId;
use lock_rules::queue::Fifo;
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
            let (fair, remembered) = hooks::fair_queue(ctx, &lock.key);
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

/// Applies `tx` to `key`: writes and their replication first, then the
/// answers to woken waiters (Redis sends them after this execution unit, so
/// the new owner is already written and replicated when it hears), then the
/// lease timer if waiters remain.
pub fn commit(ctx: &Context, lock: &LockId<'_>, key: &LockKey, tx: Transition<Waiter>) {
    commit_only(ctx, lock, key, tx);
    group::serve_group_at(ctx, lock);
}

/// [`commit`] of a transition that wrote and answered nothing, for a caller
/// about to wait: the lock's lease timer is left to its enqueue, which
/// arms it for the same deadline once the caller is queued (an untouched
/// lock kept the timer its last change or event left it).
pub fn commit_unchanged(ctx: &Context, lock: &LockId<'_>, key: &LockKey, tx: Transition<Waiter>) {
    commit_with(ctx, lock, key, tx, false);
    group::serve_group_at(ctx, lock);
}

/// Several locks' transitions of one command, committed together (so
/// replicated in one MULTI/EXEC): every one first, and only then a
/// multi-lock caller now first in line on one of them may have its keys,
/// since serving it opens and writes keys of its own, which must not be
/// among the transitions still uncommitted.
pub fn commit_all<'c>(
    ctx: &Context,
    opened: impl IntoIterator<Item = (LockId<'c>, LockKey<'c>, Transition<Waiter>)>,
) {
    let mut locks = Vec::new();
    for (lock, key, tx) in opened {
        commit_only(ctx, &lock, &key, tx);
        locks.push(lock);
    }
    for lock in &locks {
        group::serve_group_at(ctx, lock);
    }
}

/// [`commit`] without serving a multi-lock caller now first in line (see
/// [`commit_all`]).
pub(super) fn commit_only(ctx: &Context, lock: &LockId<'_>, key: &LockKey, tx: Transition<Waiter>) {
    commit_with(ctx, lock, key, tx, true);
}

fn commit_with(
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

impl<'c> Resource<'c> for LockKey<'c> {
    type Tx = Transition<Waiter>;

    fn begin(
        ctx: &'c Context,
        name: &'c RedisString,
        lock: &LockId<'_>,
        origin: Origin<'c>,
    ) -> Result<(Self, Self::Tx), LockError> {
        begin(ctx, name, lock, origin)
    }

    fn settle(tx: &mut Self::Tx, queue: &mut Fifo<Waiter>) {
        // Each lock settled changed outside a command (or a timer fired): a
        // fair waiter it is now kept for may not have been told.
        tx.settle_after_event(queue);
    }

    fn give_back(
        tx: &mut Self::Tx,
        queue: &mut Fifo<Waiter>,
        grant: &Grant,
    ) -> Result<(), LockError> {
        tx.release(queue, &grant.owner, grant.side).map(|_| ())
    }

    fn renew(
        tx: &mut Self::Tx,
        _: &LockId<'_>,
        owner: &[u8],
        lease_ms: i64,
    ) -> Result<(), LockError> {
        tx.renew(owner, lease_ms).map(|_| ())
    }

    const COMMITS_REFUSED_GIVE_BACK: bool = false;

    fn commit(&self, ctx: &Context, lock: &LockId<'_>, tx: Self::Tx) {
        commit(ctx, lock, self, tx);
    }
}
