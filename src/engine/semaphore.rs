//! The semaphore kind: a transition is begun from what the two keys hold,
//! run through the rules (`lock_rules::semaphore`) by the caller, then
//! committed: its writes are applied and replicated (`semaphore_key.rs`),
//! the waiters it served are answered, and a lease timer is kept at the
//! earliest permit's lease end while others wait. The engine's work outside
//! commands (settle, lost grants, KEEPALIVE renewals) reaches it through
//! [`Resource`].
//!
//! Offers: [`begin`], [`commit`], [`request`], and to the engine
//! [`is_semaphore`].

use redis_module::{Context, RedisString};

use super::{lock, Origin, Resource};
use crate::ffi::{self, Key, KeyKind};
use crate::semaphore_key::SemaphoreKeys;
use crate::stats::STATS;
use crate::waiters::{anyone_waits, registry, Grant, Waiter};
use crate::{config, deferred, lease};
use lock_rules::deadlock::few_semaphore_holders_wait;
use lock_rules::error::LockError;
use lock_rules::keys::permits_key;
use lock_rules::lock_id::LockId;
use lock_rules::queue::Fifo;
use lock_rules::request::{LockKind, Request};
use lock_rules::semaphore::SemaphoreTransition;

pub type Transition = SemaphoreTransition<Waiter>;

/// Opens the semaphore in the context's db and starts a transition from
/// what it holds, with the fencing counter loaded if a grant may need it.
pub fn begin<'c>(
    ctx: &'c Context,
    name: &'c RedisString,
    lock: &LockId<'_>,
    origin: Origin<'c>,
) -> Result<(SemaphoreKeys<'c>, Transition), LockError> {
    let (_, fences, replication) = origin.parts(ctx)?;
    let keys = SemaphoreKeys::open(ctx, name, replication)?;
    let state = keys.read()?;
    let token = lock::load_token(ctx, lock, fences);
    Ok((keys, Transition::new(state, ffi::now_ms(), token)))
}

/// Applies `tx`: writes and their replication first, then the answers to the
/// waiters it served (sent after this execution unit, so what they were
/// given is already written and replicated), then the lease timer if others
/// still wait.
pub fn commit(ctx: &Context, lock: &LockId<'_>, keys: &SemaphoreKeys, mut tx: Transition) {
    let writes = tx.finish();
    if !writes.is_empty() || writes.notify.is_some() {
        keys.apply(ctx, &writes);
    }
    let tally = tx.tally;
    STATS.add_semaphore(&tally);
    let next_end = tx.next_end();
    super::deliver(ctx, lock, std::mem::take(&mut tx.wakes));
    lease::ensure_lease_timer(ctx, lock, || next_end);
    // Left with one or two holders while callers wait (and deadlocks are
    // checked at each wait): a waiter may now wait for one of them, an
    // edge no wait made; the drain has those waits checked. Only if one of
    // them still waits once the served waiters left their queues can that
    // edge close a cycle now (one that waits later is checked at its own
    // wait): a hot semaphore's holders are busy, not waiting, and skip the
    // drain and its timer.
    let check_waits = config::deadlock_check_ms() == 0
        && anyone_waits()
        && registry().is_ok_and(|r| {
            r.queue_len(lock) > 0
                && few_semaphore_holders_wait(tx.state(), tx.now_ms(), |h| r.owner_waits(h))
        });
    if check_waits {
        deferred::defer_semaphore_check(ctx, lock.to_owned());
    }
}

/// Whether `name` (in the selected db) is a semaphore: its counter is a
/// string, or only its permit set is left.
pub(super) fn is_semaphore(ctx: &Context, name: &RedisString) -> bool {
    match Key::open(ctx, name, false).map(|k| k.kind()) {
        Some(KeyKind::String) => true,
        Some(KeyKind::Empty) | None => {
            let permits = ffi::string(ctx, &permits_key(name.as_slice()));
            Key::open(ctx, &permits, false).is_some_and(|k| k.kind() == KeyKind::SortedSet)
        }
        Some(_) => false,
    }
}

/// A SEM.ACQUIRE or SEM.TAKE caller's request.
pub fn request(owner: &[u8], lease_ms: i64, fence: bool, permits: u32) -> Request {
    Request {
        owner: owner.into(),
        lease_ms,
        fence,
        kind: LockKind::Permits(permits),
        keepalive: None,
        campaign: None,
    }
}

impl<'c> Resource<'c> for SemaphoreKeys<'c> {
    type Tx = Transition;

    fn begin(
        ctx: &'c Context,
        name: &'c RedisString,
        lock: &LockId<'_>,
        origin: Origin<'c>,
    ) -> Result<(Self, Self::Tx), LockError> {
        begin(ctx, name, lock, origin)
    }

    fn settle(tx: &mut Self::Tx, queue: &mut Fifo<Waiter>) {
        tx.settle(queue);
    }

    fn give_back(
        tx: &mut Self::Tx,
        queue: &mut Fifo<Waiter>,
        grant: &Grant,
    ) -> Result<(), LockError> {
        let Some(n) = grant.permits else {
            return Err(LockError::no_permits());
        };
        if grant.owner.is_empty() {
            tx.give(queue, n).map(|_| ())
        } else {
            tx.release(queue, &grant.owner, Some(n)).map(|_| ())
        }
    }

    fn renew(
        tx: &mut Self::Tx,
        lock: &LockId<'_>,
        owner: &[u8],
        lease_ms: i64,
    ) -> Result<(), LockError> {
        registry()?
            .with_queue(lock, |queue| tx.renew(queue, owner, lease_ms))
            .map(|_| ())
    }

    const COMMITS_REFUSED_GIVE_BACK: bool = true;

    fn commit(&self, ctx: &Context, lock: &LockId<'_>, tx: Self::Tx) {
        commit(ctx, lock, self, tx);
    }
}
