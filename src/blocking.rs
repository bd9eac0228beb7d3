//! Callers blocked in an acquire, as the server sees them (cf. Redis's
//! blocked.c): blocking a caller into the registry, the callbacks the server
//! runs for it (its reply; CLIENT UNBLOCK; its connection closing), the one
//! timer that ends BLOCK waits, and grants whose answer never reached the
//! waiter (handed to `deferred.rs` to be released again).
//!
//! Offers: [`block_caller`], [`arm_wait_timer`], [`client_gone`],
//! [`forget_answered`].

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use redis_module::Context;

use crate::ffi::{self, BlockHandler, TimerHandler};
use crate::keepalive;
use crate::stats::{Stats, STATS};
use crate::waiters::{registry, BlockedReply, Grant, Handle, Registry, WaitTimer, Waiter};
use crate::{deferred, sync};
use lock_rules::args::{Wait, MAX_DURATION_MS};
use lock_rules::error::LockError;
use lock_rules::ids::IdMap;
use lock_rules::lock_id::LockId;
use lock_rules::request::Request;
use lock_rules::server_text::has_unsent_output;

/// Blocks the caller and lets `place` queue it; the wait timer then
/// covers its BLOCK deadline. If the queues cannot be had, the caller is
/// answered the error at once.
pub fn block_caller(
    ctx: &Context,
    request: Request,
    wait: Wait,
    place: impl FnOnce(&mut Registry, Waiter),
) -> Result<(), LockError> {
    let bc = ffi::block_client::<Blocked>(ctx)
        .ok_or_else(|| LockError::internal("the server refused to block the client"))?;
    let mut reg = match registry() {
        Ok(reg) => reg,
        Err(e) => {
            ffi::unblock(bc, Some(BlockedReply::Failed(e.to_string())));
            return Ok(());
        }
    };
    let now = Instant::now();
    let deadline = match wait {
        Wait::Millis(ms) => now.checked_add(Duration::from_millis(ms.max(0) as u64)),
        Wait::Forever => None,
    };
    place(
        &mut reg,
        Waiter {
            request,
            bc,
            deadline,
            group: None,
            queued_at: now,
            fair_ahead: Box::default(),
        },
    );
    arm_wait_timer(ctx, &mut reg);
    Ok(())
}

/// The server's side of a blocked caller.
pub struct Blocked;

impl BlockHandler for Blocked {
    type Answer = BlockedReply;

    fn reply(ctx: &Context, answer: Option<&BlockedReply>) {
        match answer {
            Some(BlockedReply::Granted(grant, reply)) => {
                remember_answered(ctx, std::slice::from_ref(grant));
                keep_alive(ctx, std::slice::from_ref(grant));
                ffi::reply_integer(ctx, *reply);
            }
            Some(BlockedReply::GrantedAll(grants, replies)) => {
                remember_answered(ctx, grants);
                keep_alive(ctx, grants);
                ffi::reply_integers(ctx, replies);
            }
            Some(BlockedReply::Failed(e)) => ffi::reply_error(ctx, e),
            Some(BlockedReply::TimedOut) | None => ffi::reply_null(ctx),
        }
    }

    fn timeout(ctx: &Context, bc: Handle) {
        // CLIENT UNBLOCK <id> [TIMEOUT]. Already answered if not queued.
        if leave_queue(ctx, bc) {
            Stats::bump(&STATS.wait_timeouts);
            ffi::reply_null(ctx);
            ffi::unblock(bc, None);
        }
    }

    fn disconnect(ctx: &Context, bc: Handle) {
        // Also CLIENT UNBLOCK <id> ERROR. Only a queued waiter is unblocked
        // here: one already granted was unblocked once and must not be again.
        if leave_queue(ctx, bc) {
            Stats::bump(&STATS.waiters_disconnected);
            ffi::unblock(bc, None);
        }
    }

    fn free(ctx: &Context, outcome: Box<BlockedReply>, client_gone: bool) {
        match (client_gone, *outcome) {
            (true, BlockedReply::Granted(grant, _)) => deferred::defer_lost_grants(ctx, [grant]),
            (true, BlockedReply::GrantedAll(grants, _)) => deferred::defer_lost_grants(ctx, grants),
            _ => {}
        }
    }
}

/// Grants answered in the server's before-sleep step, by client id, until
/// the event loop next wakes up. In between the server writes pending
/// replies and frees the clients it marked to close. A waiter freed there
/// with output still unsent (its connection failed, or it was already
/// closing) never got its answer, so its grant is released. A waiter freed
/// with everything sent (a pipelined QUIT) got it, and keeps the lock.
static ANSWERED: LazyLock<Mutex<IdMap<u64, Vec<Grant>>>> = LazyLock::new(Mutex::default);
static ANY_ANSWERED: AtomicBool = AtomicBool::new(false);

fn remember_answered(ctx: &Context, grants: &[Grant]) {
    let grants = grants.to_vec();
    sync::lock(&ANSWERED).insert(ffi::client_id(ctx), grants);
    ANY_ANSWERED.store(true, Relaxed);
}

/// Settles the bindings of a waiter's grants, now that it is answered: with
/// KEEPALIVE bound to its connection, with SESSION to the connection naming
/// the token now; a hold its owner already had keeps its binding (renewed
/// with the new lease); a fresh one is not kept alive.
fn keep_alive(ctx: &Context, grants: &[Grant]) {
    for grant in grants {
        let how = keepalive::how_taken(ctx, grant.keepalive.as_ref(), grant.reentry);
        keepalive::taken(ctx, &grant.lock, &grant.owner, how, grant.lease_ms);
    }
}

/// LOCK.CANCEL: takes every wait of `owner` on `lock` out of its queue (a
/// multi-lock caller out of all its keys' queues) and answers each nil, as
/// its BLOCK time running out would. Returns how many were taken out. Once
/// this returns, no grant can reach those waits: a client that gave up on
/// one (its timeout, a Ctrl-C) can then release whatever the owner was
/// handed before, knowing nothing more comes.
pub fn cancel(ctx: &Context, lock: &LockId<'_>, owner: &[u8]) -> usize {
    end_waits(ctx, lock, owner, || {
        Stats::bump(&STATS.wait_cancels);
        BlockedReply::TimedOut
    })
}

/// Takes every wait of `owner` on `lock` out of its queue, as
/// [`cancel`] does, and answers each the error line `error` instead.
pub fn fail(ctx: &Context, lock: &LockId<'_>, owner: &[u8], error: &str) -> usize {
    end_waits(ctx, lock, owner, || BlockedReply::Failed(error.to_string()))
}

fn end_waits(
    ctx: &Context,
    lock: &LockId<'_>,
    owner: &[u8],
    reply: impl Fn() -> BlockedReply,
) -> usize {
    let removed: Vec<_> = match registry() {
        Ok(mut reg) => {
            let ids = reg.waiters_of(lock, owner);
            ids.into_iter().filter_map(|id| reg.remove(id)).collect()
        }
        Err(_) => return 0,
    };
    let n = removed.len();
    for (waiter, released) in removed {
        deferred::after_queue_change(ctx, released);
        ffi::unblock(waiter.bc, Some(reply()));
    }
    n
}

fn leave_queue(ctx: &Context, bc: Handle) -> bool {
    let Ok(mut reg) = registry() else {
        return false;
    };
    let Some((_, released)) = reg.waiter_of(bc).and_then(|id| reg.remove(id)) else {
        return false;
    };
    drop(reg);
    deferred::after_queue_change(ctx, released);
    true
}

/// Makes sure the wait timer fires by the earliest BLOCK deadline.
pub fn arm_wait_timer(ctx: &Context, reg: &mut Registry) {
    let Some(next) = reg.next_deadline() else {
        return;
    };
    if reg.wait_timer.is_some_and(|t| t.fires_at <= next) {
        return;
    }
    let now = Instant::now();
    // Whole milliseconds, rounded up: a timer never fires before the
    // deadline it was armed for.
    let delay_ms = next
        .saturating_duration_since(now)
        .as_micros()
        .div_ceil(1000)
        .min(MAX_DURATION_MS as u128) as i64;
    let Some(id) = ffi::create_timer::<WaitTimeout>(ctx, delay_ms, 0) else {
        return;
    };
    let fires_at = now + Duration::from_millis(delay_ms as u64);
    if let Some(old) = reg.wait_timer.replace(WaitTimer { id, fires_at }) {
        ffi::stop_timer(ctx, old.id);
    }
}

/// Fires at the earliest BLOCK deadline: answers nil to every waiter whose
/// time is over, then re-arms for the next one.
pub struct WaitTimeout;

impl TimerHandler for WaitTimeout {
    fn fire(ctx: &Context, _: u64) {
        let due = match registry() {
            Ok(mut reg) => {
                reg.wait_timer = None;
                reg.remove_due(Instant::now())
            }
            Err(_) => return,
        };
        for (waiter, released) in due {
            deferred::after_queue_change(ctx, released);
            Stats::bump(&STATS.wait_timeouts);
            ffi::unblock(waiter.bc, Some(BlockedReply::TimedOut));
        }
        if let Ok(mut reg) = registry() {
            arm_wait_timer(ctx, &mut reg);
        }
    }
}

/// A client is being freed: if it was answered a grant in the step that
/// just ran and its answer is still unsent, the grant is released again.
pub fn client_gone(ctx: &Context, client_id: u64) {
    if !ANY_ANSWERED.load(Relaxed) {
        return;
    }
    let Some(grants) = sync::lock(&ANSWERED).remove(&client_id) else {
        return;
    };
    // The client is still whole while this event runs.
    let line = ctx
        .call("CLIENT", &["LIST", "ID", &client_id.to_string()])
        .and_then(String::try_from)
        .unwrap_or_default();
    if has_unsent_output(&line) {
        deferred::defer_lost_grants(ctx, grants);
    }
}

/// The event loop woke up: the grants answered before are written out or
/// their clients' Drop ran (`client_gone`).
pub fn forget_answered() {
    if ANY_ANSWERED.swap(false, Relaxed) {
        sync::lock(&ANSWERED).clear();
    }
}
