//! The lock kind (exclusive and read-write locks, an election's lock): a
//! transition of one lock (or of several, for a multi-lock command) is
//! begun from what the key holds, run through the rules by the caller, then
//! committed: its changes are written and replicated, the hooks of the
//! features built on commits run (`hooks.rs`), the waiters it woke are
//! answered, and a lease timer is kept while others wait (the bare begin
//! and commit are `lock_transition.rs`'s). A multi-lock caller first in line
//! on a committed lock is then served (`group.rs`).
//!
//! One hand-off, a release that gives the lock to the first waiter:
//!
//! ```text
//! LOCK.RELEASE (caller)      engine                   Redis                waiter
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

use super::{group, lock_transition, Origin, Resource};
use crate::store::LockKey;
use crate::waiters::{Grant, Waiter};
use lock_rules::error::LockError;
use lock_rules::lock_id::LockId;
use lock_rules::queue::Fifo;
use lock_rules::transition::Transition;

pub use lock_transition::{begin, load_token};

/// Applies `tx` to `key`: writes and their replication first, then the
/// answers to woken waiters (Redis sends them after this execution unit, so
/// the new owner is already written and replicated when it hears), then the
/// lease timer if waiters remain.
pub fn commit(ctx: &Context, lock: &LockId<'_>, key: &LockKey, tx: Transition<Waiter>) {
    lock_transition::commit_only(ctx, lock, key, tx);
    group::serve_group_at(ctx, lock);
}

/// [`commit`] of a transition that wrote and answered nothing, for a caller
/// about to wait: the lock's lease timer is left to its enqueue, which
/// arms it for the same deadline once the caller is queued (an untouched
/// lock kept the timer its last change or event left it).
pub fn commit_unchanged(ctx: &Context, lock: &LockId<'_>, key: &LockKey, tx: Transition<Waiter>) {
    lock_transition::commit_with(ctx, lock, key, tx, false);
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
        lock_transition::commit_only(ctx, &lock, &key, tx);
        locks.push(lock);
    }
    for lock in &locks {
        group::serve_group_at(ctx, lock);
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
