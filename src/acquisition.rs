//! An acquire carried through once its command has parsed it and begun the
//! transition of each lock it names: the rules decide (one lock's
//! `acquire`; a multi-lock caller's all-or-none `take_all`), the hand-off
//! commits, and then what the outcome brings besides the transition:
//!
//! - a grant: the hold bound to the caller's connection with KEEPALIVE, to
//!   the session's with SESSION (or
//!   a binding's lease replaced by a re-entry, or a stale one dropped), and
//!   the events its hold needs listened to;
//! - a wait: unless it would close a cycle of waits (`DEADLOCK`), the
//!   caller blocked at the tail of the lock's queue (a multi-lock caller,
//!   one entry in each key's), with a timer at the lease end it waits for;
//! - busy without BLOCK: nil.
//!
//! And LOCK.RENEW's binding: a re-attach with KEEPALIVE, or the lease a hold
//! kept alive is renewed with from now on.
//!
//! Offers: [`acquire`], [`acquire_all`], [`renewed`].

use redis_module::{Context, RedisString, RedisValue};

use crate::keepalive;
use crate::store::{self, LockKey};
use crate::waiters::{registry, with_queue, Registry, Waiter};
use crate::{blocking, deadlocks, engine, lease, subscriptions};
use lock_rules::args::Wait;
use lock_rules::deadlock::{lock_holders, Holders};
use lock_rules::error::LockError;
use lock_rules::lock_id::LockId;
use lock_rules::multilock::{take_all, AllOrNone};
use lock_rules::request::{KeepAlive, Request};
use lock_rules::transition::{Acquisition, Transition};

/// LOCK.ACQUIRE, RACQUIRE or WACQUIRE on `lock`, opened as `key` with its
/// transition `tx` begun: the integer reply of a grant, nil, or no reply
/// yet (the caller waits).
pub fn acquire(
    ctx: &Context,
    lock: &LockId<'_>,
    key: LockKey<'_>,
    mut tx: Transition<Waiter>,
    request: &Request,
    wait: Option<Wait>,
) -> Result<RedisValue, LockError> {
    let held = tx.state().held_by(&request.owner);
    if held && request.keepalive.is_none() {
        keepalive::may_set_lease(lock, &request.owner, request.lease_ms)?;
    }
    let acquired = with_queue(lock, |queue| tx.acquire(queue, request, wait.is_some()))?;
    let next_end = tx.next_end();
    // Redisson's fair waiters queued now go before this caller if it waits.
    let fair_ahead = tx.fair_owners();
    // Nothing written or answered: the commit leaves the key as `key` sees it.
    let untouched = tx.changes.is_empty() && tx.wakes.is_empty();
    // Whom the caller would wait for, as the rules left the lock.
    let holders = match (&acquired, wait) {
        (Ok(Acquisition::Wait), Some(_)) if deadlocks::checks_at_wait() => {
            deadlocks::holders_to_check(lock, &request.owner, tx.state(), tx.now_ms())
        }
        _ => Holders::default(),
    };
    let waits = matches!((&acquired, wait), (Ok(Acquisition::Wait), Some(_)));
    if untouched && waits {
        // The lock and its queue are as they were: the caller's enqueue
        // below sees to its lease timer, with the same deadline.
        engine::lock::commit_unchanged(ctx, lock, &key, tx);
    } else {
        engine::lock::commit(ctx, lock, &key, tx);
    }
    match (acquired?, wait) {
        (Acquisition::Now(reply), _) => {
            granted(ctx, lock, request, held);
            Ok(RedisValue::Integer(reply))
        }
        (Acquisition::Wait, Some(wait)) => {
            deadlocks::check(ctx, &request.owner, &[(lock.clone(), holders)])?;
            let lease_end = lease::earliest(next_end, lease_end(ctx, lock, key, untouched));
            if !fair_ahead.is_empty() {
                subscriptions::watch_fair_queues(ctx);
            }
            enqueue(
                ctx,
                &[lock.to_owned()],
                request,
                wait,
                &[lease_end],
                |reg, locks, mut w| {
                    w.fair_ahead = fair_ahead.into();
                    let id = reg.next_serial();
                    reg.enqueue(&locks[0], id, w);
                },
            )?;
            Ok(RedisValue::NoReply)
        }
        (Acquisition::Busy | Acquisition::Wait, _) => Ok(RedisValue::Null),
    }
}

/// LOCK.MACQUIRE on the locks `opened` (each with its key and begun
/// transition, in the order named): an array of replies if every one is
/// granted, nil, or no reply yet (the caller waits for all of them as one).
pub fn acquire_all(
    ctx: &Context,
    opened: Vec<(LockId<'_>, LockKey<'_>, Transition<Waiter>)>,
    request: &Request,
    wait: Option<Wait>,
) -> Result<RedisValue, LockError> {
    let mut opened = opened;
    // Waiters already queued on a key are served first, as for one key;
    // then the caller is first in line where nobody is left queued.
    let mut first_in_line = Vec::with_capacity(opened.len());
    let mut held = Vec::with_capacity(opened.len());
    let mut refused = None;
    for (lock, _, tx) in &mut opened {
        match with_queue(lock, |queue| {
            tx.settle(queue);
            queue.is_empty()
        }) {
            Ok(first) => first_in_line.push(first),
            Err(e) => {
                refused.get_or_insert(e);
                first_in_line.push(false);
            }
        }
        let holds = tx.state().held_by(&request.owner);
        if holds && request.keepalive.is_none() {
            if let Err(e) = keepalive::may_set_lease(lock, &request.owner, request.lease_ms) {
                refused.get_or_insert(e);
            }
        }
        held.push(holds);
    }
    let decision = match refused {
        Some(e) => AllOrNone::Refused(e),
        None => take_all(
            opened.iter_mut().map(|(_, _, tx)| tx).zip(first_in_line),
            request,
        ),
    };
    let locks: Vec<LockId<'static>> = opened.iter().map(|(lock, _, _)| lock.to_owned()).collect();
    // Whom the caller would wait for on each key, as the rules left it.
    let wanted: Vec<(LockId<'static>, Holders)> = match (&decision, wait) {
        (AllOrNone::Busy, Some(_)) if deadlocks::checks_at_wait() => opened
            .iter()
            .map(|(lock, _, tx)| (lock.to_owned(), lock_holders(tx.state(), tx.now_ms())))
            .collect(),
        _ => Vec::new(),
    };
    let names: Vec<&RedisString> = opened.iter().map(|(_, key, _)| key.name()).collect();
    // Whatever the decision, every transition is committed: a settle may
    // have handed a key on, and its waiter must hear.
    engine::lock::commit_all(ctx, opened);
    match (decision, wait) {
        (AllOrNone::Taken(replies), _) => {
            for (lock, held) in locks.iter().zip(held) {
                granted(ctx, lock, request, held);
            }
            Ok(RedisValue::Array(
                replies.into_iter().map(RedisValue::Integer).collect(),
            ))
        }
        (AllOrNone::Refused(e), _) => Err(e),
        (AllOrNone::Busy, Some(wait)) => {
            deadlocks::check(ctx, &request.owner, &wanted)?;
            // Read after the commits: a hand-off among them moved a deadline.
            let lease_ends: Vec<Option<i64>> = names
                .iter()
                .map(|name| store::expires_at(ctx, name))
                .collect();
            enqueue(ctx, &locks, request, wait, &lease_ends, |reg, locks, w| {
                let ids: Vec<u64> = locks.iter().map(|_| reg.next_serial()).collect();
                reg.enqueue_group(locks, &ids, w);
            })?;
            Ok(RedisValue::NoReply)
        }
        (AllOrNone::Busy, None) => Ok(RedisValue::Null),
    }
}

/// LOCK.RENEW renewed `owner`'s holds of `lock` with `lease_ms`: with
/// KEEPALIVE this connection (with SESSION the session's) keeps them alive
/// from now on (a re-attach); without, a binding they have is renewed with
/// this lease from now on.
pub fn renewed(
    ctx: &Context,
    lock: &LockId<'_>,
    owner: &[u8],
    lease_ms: i64,
    keep_alive: Option<&KeepAlive>,
) {
    if keep_alive.is_some() {
        subscriptions::watch_clients(ctx);
    }
    let how = keepalive::how_taken(ctx, keep_alive, true);
    keepalive::taken(ctx, lock, owner, how, lease_ms);
}

/// A hold of `lock` granted to the caller (`held`: it held the lock
/// before, a re-entry): its binding settled, and its end listened for.
pub fn granted(ctx: &Context, lock: &LockId<'_>, request: &Request, held: bool) {
    // The hold's time ends with its key.
    subscriptions::watch_expiry(ctx);
    watch_token_counters(ctx, request);
    if request.keepalive.is_some() {
        subscriptions::watch_clients(ctx);
    }
    let how = keepalive::how_taken(ctx, request.keepalive.as_ref(), held);
    keepalive::taken(ctx, lock, &request.owner, how, request.lease_ms);
}

/// From the first `FENCE`, string events are heard: a Redisson RFencedLock
/// `INCR` of a fencing counter the module gave an expiry makes the counter
/// Redisson's, without one (`tokens::keep_token_key`).
fn watch_token_counters(ctx: &Context, request: &Request) {
    if request.fence {
        subscriptions::watch_strings(ctx);
    }
}

/// The lock's deadline as it is after the commit, for the caller's enqueue
/// to arm the lease timer by: from the handle opened before when the
/// commit wrote nothing (`untouched`) and no multi-lock caller waits
/// (serving one writes its keys through handles of its own); otherwise
/// read afresh, since that handle may no longer see the key. `None` (no
/// timer to see to) for an untouched lock whose queue has its timer: the
/// last change of the lock, or the event that ended its lease, armed it
/// for this deadline (a hot lock's every waiter).
fn lease_end(ctx: &Context, lock: &LockId<'_>, key: LockKey<'_>, untouched: bool) -> Option<i64> {
    if untouched {
        // (groups wait, timer armed), from one look at the registry.
        let (groups_wait, armed) = registry().map_or((false, false), |r| {
            (
                r.groups_wait(),
                matches!(r.queued_lease_timer(lock), Some(Some(_))),
            )
        });
        if !groups_wait {
            return if armed { None } else { key.expires_at() };
        }
    }
    let name = key.name();
    drop(key);
    store::expires_at(ctx, name)
}

/// Blocks the caller, `place` queueing it on `locks`; each lock then has a
/// timer at its lease end (`lease_ends`, in the same order).
pub fn enqueue(
    ctx: &Context,
    locks: &[LockId<'static>],
    request: &Request,
    wait: Wait,
    lease_ends: &[Option<i64>],
    place: impl FnOnce(&mut Registry, &[LockId<'static>], Waiter),
) -> Result<(), LockError> {
    subscriptions::watch_for_waiters(ctx);
    watch_token_counters(ctx, request);
    blocking::block_caller(ctx, request.clone(), wait, |reg, waiter| {
        place(reg, locks, waiter)
    })?;
    deadlocks::check_later(ctx, &request.owner, locks);
    for (lock, lease_end) in locks.iter().zip(lease_ends) {
        lease::ensure_lease_timer(ctx, lock, || *lease_end);
    }
    Ok(())
}
