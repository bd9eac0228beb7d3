//! Hand-off: committing a transition (writes, replication, then answers to
//! the waiters it woke), and every way a lock can end outside a LOCK.*
//! command: lease timers, keyspace events (DEL, expiry, eviction, RENAME,
//! a Redisson release...), FLUSHDB/FLUSHALL/SWAPDB, and grants that reached
//! a waiter whose connection was already gone.
//!
//! Outside a command nothing is written on the spot. Events only note the key
//! and arm a 0 ms timer (writing inside a keyspace callback would reach
//! replicas before the DEL that caused it); timers write only on a master
//! that is not loading and not paused.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{LazyLock, Mutex};

use redis_module::{Context, ContextFlags, NotifyEvent, RedisValue};

use crate::ffi::{self, BlockHandler, BlockedClient, ServerEventHandler, TimerHandler};
use crate::info::{Stats, STATS};
use crate::rules::error::LockError;
use crate::rules::keys::{key_slot, myself_serves_slot};
use crate::rules::lock::{Answer, LockState, Transition};
use crate::store::{self, LockKey};
use crate::waiters::{registry, LeaseTimer, LockId, Waiter};

/// What a blocked caller is finally told.
#[derive(Debug)]
pub enum Outcome {
    Granted {
        reply: i64,
        lock: LockId,
        owner: Vec<u8>,
    },
    Failed(String),
    TimedOut,
}

/// Delay before retrying deferred writes while the server refuses them
/// (clients paused, loading).
const RETRY_MS: i64 = 20;

// ---------------------------------------------------------------------------
// Committing a transition

/// Applies `tx` to `key`: writes and their replication first, then the
/// answers to woken waiters (Redis sends them after this execution unit, so
/// the new owner is already written and replicated when it hears), then the
/// lease timer if waiters remain.
pub fn commit(ctx: &Context, lock: &LockId, key: &LockKey, tx: Transition<Waiter>) {
    key.apply(ctx, &tx.writes);
    STATS.add(&tx.tally);
    let held_after = *tx.state() != LockState::Free;
    deliver(ctx, lock, tx.wakes);
    if held_after {
        ensure_lease_timer(ctx, lock, key.ttl_ms());
    }
}

fn deliver(ctx: &Context, lock: &LockId, wakes: Vec<crate::rules::lock::Wake<Waiter>>) {
    if wakes.is_empty() {
        return;
    }
    match registry() {
        Ok(mut reg) => {
            let released = reg.forget_woken(lock, &wakes);
            stop(ctx, released.lease_timer);
        }
        Err(e) => ctx.log_warning(&format!("lock: waiter bookkeeping skipped: {e}")),
    }
    for wake in wakes {
        stop(ctx, wake.waiter.wait_timer);
        let outcome = match wake.answer {
            Answer::Granted(reply) => Outcome::Granted {
                reply,
                lock: lock.clone(),
                owner: wake.waiter.request.owner,
            },
            Answer::Failed(e) => Outcome::Failed(e.to_string()),
        };
        ffi::unblock::<Blocked>(wake.waiter.bc, Some(outcome));
    }
}

fn stop(ctx: &Context, timer: Option<ffi::TimerId>) {
    if let Some(id) = timer {
        ffi::stop_timer(ctx, id);
    }
}

/// Makes sure a lock with waiters has a timer at (or before) its lease
/// deadline. A timer that fires early finds the lock still held and is
/// re-armed; so a renewal that extends the lease costs nothing here.
pub fn ensure_lease_timer(ctx: &Context, lock: &LockId, ttl_ms: Option<i64>) {
    let Some(ttl) = ttl_ms else {
        return;
    };
    // Redis expires a key once now > deadline, so aim 1 ms past it.
    let delay = ttl + 1;
    let fires_at = ffi::now_ms() + delay;
    let Ok(mut reg) = registry() else {
        return;
    };
    if reg.queue_len(lock) == 0 {
        return;
    }
    if reg
        .lease_timer(lock)
        .is_some_and(|t| t.fires_at <= fires_at)
    {
        return;
    }
    let job = reg.next_serial();
    let Some(id) = ffi::create_timer::<LeaseExpiry>(ctx, delay, job) else {
        return;
    };
    if let Some(old) = reg.set_lease_timer(lock, LeaseTimer { id, job, fires_at }) {
        ffi::stop_timer(ctx, old.id);
    }
}

// ---------------------------------------------------------------------------
// Settling a lock outside a command

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Writable {
    Now,
    Later,
    Never,
}

fn writable(ctx: &Context) -> Writable {
    let flags = ctx.get_flags();
    if !flags.contains(ContextFlags::MASTER) {
        Writable::Never
    } else if flags.contains(ContextFlags::LOADING) || ffi::avoid_replica_traffic() {
        Writable::Later
    } else {
        Writable::Now
    }
}

/// In a cluster, a timer may only write keys of slots this node serves and
/// is not migrating away; commands are routed by the server, timers are not.
fn serves(ctx: &Context, key: &[u8]) -> bool {
    if !ctx.get_flags().contains(ContextFlags::CLUSTER) {
        return true;
    }
    ctx.call("CLUSTER", &["NODES"])
        .and_then(String::try_from)
        .is_ok_and(|nodes| myself_serves_slot(&nodes, key_slot(key)))
}

/// Re-reads a lock that has waiters and hands it on if it is free.
fn settle(ctx: &Context, lock: &LockId) {
    if !registry().is_ok_and(|r| r.queue_len(lock) > 0) {
        return;
    }
    if !ffi::select_db(ctx, lock.db) {
        return;
    }
    if !serves(ctx, &lock.key) {
        return reject_all(ctx, lock, &LockError::slot_not_served());
    }
    let name = ffi::string(ctx, &lock.key);
    let key = match LockKey::open(ctx, &name) {
        Ok(key) => key,
        Err(e) => return ctx.log_warning(&format!("lock: {e}")),
    };
    let state = match key.read() {
        Ok(state) => state,
        Err(e) => return reject_all(ctx, lock, &e),
    };
    let token = load_token(ctx, lock, false);
    let mut tx = Transition::new(state, ffi::now_ms(), token);
    match registry() {
        Ok(mut reg) => reg.with_queue(lock, |queue| tx.settle(queue)),
        Err(e) => return ctx.log_warning(&format!("lock: {e}")),
    }
    commit(ctx, lock, &key, tx);
}

fn reject_all(ctx: &Context, lock: &LockId, error: &LockError) {
    let mut tx = Transition::new(LockState::Free, ffi::now_ms(), None);
    if let Ok(mut reg) = registry() {
        reg.with_queue(lock, |queue| tx.reject_all(queue, error));
    }
    deliver(ctx, lock, tx.wakes);
}

/// The fencing counter, read only when a grant may need it: the caller
/// asked for FENCE, or a queued waiter did.
pub fn load_token(
    ctx: &Context,
    lock: &LockId,
    caller_fences: bool,
) -> crate::rules::lock::TokenValue {
    let waiters_fence = registry().is_ok_and(|r| r.fenced_waiters(lock) > 0);
    (caller_fences || waiters_fence).then(|| store::read_token(ctx, &lock.key))
}

/// A waiter was granted the lock but its connection closed before the
/// answer reached it: release that hold again, handing the lock on.
fn release_lost_grant(ctx: &Context, lock: &LockId, owner: &[u8]) {
    if !ffi::select_db(ctx, lock.db) || !serves(ctx, &lock.key) {
        return;
    }
    let name = ffi::string(ctx, &lock.key);
    let Ok(key) = LockKey::open(ctx, &name) else {
        return;
    };
    let Ok(state) = key.read() else {
        return;
    };
    let token = load_token(ctx, lock, false);
    let mut tx = Transition::new(state, ffi::now_ms(), token);
    let released = match registry() {
        Ok(mut reg) => reg.with_queue(lock, |queue| tx.release(queue, owner)),
        Err(_) => return,
    };
    // NOTOWNER: the lease ran out or someone removed it already.
    if released.is_ok() {
        Stats::bump(&STATS.lost_grants_released);
        commit(ctx, lock, &key, tx);
    }
}

// ---------------------------------------------------------------------------
// Deferred work and its 0 ms timer

/// A hold handed to a waiter, to be released if the waiter never heard.
struct Grant {
    lock: LockId,
    owner: Vec<u8>,
}

#[derive(Default)]
struct Deferred {
    keys: HashSet<LockId>,
    lost_grants: Vec<Grant>,
    armed: bool,
}

static DEFERRED: LazyLock<Mutex<Deferred>> = LazyLock::new(Mutex::default);

fn defer(ctx: &Context, add: impl FnOnce(&mut Deferred)) {
    let mut deferred = match DEFERRED.lock() {
        Ok(d) => d,
        Err(poisoned) => poisoned.into_inner(),
    };
    add(&mut deferred);
    if !deferred.armed {
        deferred.armed = ffi::create_timer::<Drain>(ctx, 0, 0).is_some();
        ffi::wake_event_loop();
    }
}

fn defer_key(ctx: &Context, lock: LockId) {
    defer(ctx, |d| {
        d.keys.insert(lock);
    });
}

struct Drain;

impl TimerHandler for Drain {
    fn fire(ctx: &Context, _: u64) {
        let work = {
            let mut deferred = match DEFERRED.lock() {
                Ok(d) => d,
                Err(poisoned) => poisoned.into_inner(),
            };
            deferred.armed = false;
            match writable(ctx) {
                // A replica has no waiters (they are disconnected on demotion).
                Writable::Never => {
                    *deferred = Deferred::default();
                    return;
                }
                Writable::Later => {
                    deferred.armed = ffi::create_timer::<Drain>(ctx, RETRY_MS, 0).is_some();
                    return;
                }
                Writable::Now => std::mem::take(&mut *deferred),
            }
        };
        for lock in &work.keys {
            settle(ctx, lock);
        }
        for grant in &work.lost_grants {
            release_lost_grant(ctx, &grant.lock, &grant.owner);
        }
    }
}

struct LeaseExpiry;

impl TimerHandler for LeaseExpiry {
    fn fire(ctx: &Context, job: u64) {
        let Some(lock) = registry().ok().and_then(|mut r| r.take_lease_job(job)) else {
            return;
        };
        match writable(ctx) {
            Writable::Never => {}
            Writable::Later => defer_key(ctx, lock),
            Writable::Now => settle(ctx, &lock),
        }
    }
}

// ---------------------------------------------------------------------------
// Blocked callers

pub struct Blocked;

impl BlockHandler for Blocked {
    type Answer = Outcome;

    fn reply(ctx: &Context, answer: Option<&Outcome>) {
        let reply = match answer {
            Some(Outcome::Granted { reply, lock, owner }) => {
                remember_answered(
                    ctx,
                    Grant {
                        lock: lock.clone(),
                        owner: owner.clone(),
                    },
                );
                Ok(RedisValue::Integer(*reply))
            }
            Some(Outcome::Failed(e)) => Err(redis_module::RedisError::String(e.clone())),
            Some(Outcome::TimedOut) | None => Ok(RedisValue::Null),
        };
        ctx.reply(reply);
    }

    fn timeout(ctx: &Context, bc: BlockedClient) {
        // CLIENT UNBLOCK <id> [TIMEOUT]. Already answered if not queued.
        if leave_queue(ctx, bc) {
            Stats::bump(&STATS.wait_timeouts);
            ctx.reply(Ok(RedisValue::Null));
            ffi::unblock::<Blocked>(bc, None);
        }
    }

    fn disconnect(ctx: &Context, bc: BlockedClient) {
        // Also CLIENT UNBLOCK <id> ERROR. Only a queued waiter is unblocked
        // here: one already granted was unblocked once and must not be again.
        if leave_queue(ctx, bc) {
            Stats::bump(&STATS.waiters_disconnected);
            ffi::unblock::<Blocked>(bc, None);
        }
    }

    fn free(ctx: &Context, outcome: Box<Outcome>, client_gone: bool) {
        if let (true, Outcome::Granted { lock, owner, .. }) = (client_gone, *outcome) {
            defer(ctx, |d| d.lost_grants.push(Grant { lock, owner }));
        }
    }
}

/// Grants answered but possibly not yet sent, by client id: from the reply
/// callback (in the server's before-sleep step) to the next wake-up of the
/// event loop. In between the server writes pending replies and then frees
/// the clients it marked to close; a waiter freed there never got its
/// answer (its connection failed or was closing), so the grant is released.
/// Once the loop wakes up, the answer was written to the socket and the lock
/// is the owner's, even if the client disconnects right after.
static ANSWERED: LazyLock<Mutex<HashMap<u64, Grant>>> = LazyLock::new(Mutex::default);
static ANY_ANSWERED: AtomicBool = AtomicBool::new(false);

fn answered() -> std::sync::MutexGuard<'static, HashMap<u64, Grant>> {
    ANSWERED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn remember_answered(ctx: &Context, grant: Grant) {
    answered().insert(ffi::client_id(ctx), grant);
    ANY_ANSWERED.store(true, Relaxed);
}

fn leave_queue(ctx: &Context, bc: BlockedClient) -> bool {
    let Ok(mut reg) = registry() else {
        return false;
    };
    let Some((waiter, released)) = reg.waiter_of(bc).and_then(|id| reg.remove(id)) else {
        return false;
    };
    drop(reg);
    stop(ctx, waiter.wait_timer);
    stop(ctx, released.lease_timer);
    true
}

/// Fires at the end of a waiter's BLOCK time; `data` is its waiter id.
pub struct WaitTimeout;

impl TimerHandler for WaitTimeout {
    fn fire(ctx: &Context, id: u64) {
        let Some((waiter, released)) = registry().ok().and_then(|mut r| r.remove(id)) else {
            return;
        };
        stop(ctx, released.lease_timer);
        Stats::bump(&STATS.wait_timeouts);
        ffi::unblock::<Blocked>(waiter.bc, Some(Outcome::TimedOut));
    }
}

// ---------------------------------------------------------------------------
// Events that may end a lock someone waits for

/// Keyspace notification callback. Must not write (see the module notes):
/// it only notes the key for the 0 ms drain.
pub fn on_keyspace_event(ctx: &Context, _class: NotifyEvent, event: &str, key: &[u8]) {
    if store::is_own_notification() {
        return;
    }
    let db = ffi::selected_db(ctx);
    // When the registry is busy (never expected), note the key anyway: the
    // drain re-checks everything.
    if registry().is_ok_and(|r| !r.has_waiters(db, key)) {
        return;
    }
    // Whoever noticed first (the lease timer, Redis's active or lazy expiry,
    // a command opening the key), the lease ran out while callers waited.
    if event == "expired" {
        Stats::bump(&STATS.expired_with_waiters);
    }
    defer_key(
        ctx,
        LockId {
            db,
            key: key.to_vec(),
        },
    );
}

pub struct ServerEvents;

impl ServerEventHandler for ServerEvents {
    fn flushed(ctx: &Context, db: i32) {
        defer_locks_in(ctx, &[db]);
    }

    fn swapped(ctx: &Context, a: i32, b: i32) {
        defer_locks_in(ctx, &[a, b]);
    }

    fn client_gone(ctx: &Context, client_id: u64) {
        if !ANY_ANSWERED.load(Relaxed) {
            return;
        }
        let lost = answered().remove(&client_id);
        if let Some(grant) = lost {
            defer(ctx, |d| d.lost_grants.push(grant));
        }
    }

    fn after_sleep(_ctx: &Context) {
        if ANY_ANSWERED.swap(false, Relaxed) {
            answered().clear();
        }
    }
}

fn defer_locks_in(ctx: &Context, dbs: &[i32]) {
    let locks: Vec<LockId> = match registry() {
        Ok(reg) => dbs.iter().flat_map(|db| reg.locks_in(*db)).collect(),
        Err(_) => return,
    };
    for lock in locks {
        defer_key(ctx, lock);
    }
}
