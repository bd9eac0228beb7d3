//! Work done after the command, timer or event that found it, in a 0 ms
//! timer (the drain; after a keyspace event on a server with
//! post-notification jobs, right after the command that fired it): locks to look at again (an outside change may have
//! ended them, or the head of their queue changed), grants whose answer
//! never reached their waiter, elections whose leader may have lost,
//! semaphores whose waiters may wait for a new holder (deadlocks), locks
//! whose Redisson fair queue may have a waiter to serve or drop, and fencing
//! counters Redisson's RFencedLock incremented (kept without an expiry).
//!
//! Why not at once: a write inside a keyspace-event callback reaches
//! replicas and the AOF before the change that caused it (see the module
//! notes), and a lock looked at inside another lock's transition would be
//! opened while that one is still being written. And no timer writes unless
//! the server is a master that is neither loading nor paused and has the
//! replicas `min-replicas-to-write` asks for (`writable.rs`).
//!
//! What the drain does with the work (settle each lock, release each lost
//! grant) is the events layer's (`events::drain`), handed in at load with
//! [`on_drain`], so that the layers below it, which only note work, do not
//! depend on it.
//!
//! Offers: [`defer_key`], [`defer_lost_grants`], [`defer_election`],
//! [`defer_semaphore_check`], [`defer_fair_check`], [`defer_token_key`], [`settle_now_or_later`],
//! [`after_queue_change`].

use std::sync::{LazyLock, Mutex, MutexGuard, OnceLock};

use redis_module::Context;

use crate::ffi::{self, TimerHandler, TimerId};
use crate::sync;
use crate::waiters::{Grant, Released};
use crate::writable::{writable, Writable};
use lock_rules::lock_id::LockId;
use lock_rules::names::NameSet;

/// Delay before retrying deferred writes while the server refuses them
/// (clients paused, loading, too few replicas).
const RETRY_MS: i64 = 20;

/// What the drain has to do.
#[derive(Debug, Default)]
pub struct Work {
    pub keys: NameSet<LockId<'static>>,
    pub lost_grants: Vec<Grant>,
    /// Elections to look at again, each with the candidate that led it
    /// when that may have changed (its binding is checked).
    pub elections: Vec<(LockId<'static>, Option<Vec<u8>>)>,
    /// Semaphores left with at most two holders while callers wait: a
    /// waiter may now wait for one of them (a deadlock-check edge no wait
    /// made).
    pub semaphores: NameSet<LockId<'static>>,
    /// Locks nobody here may wait for whose Redisson fair queue may have a
    /// waiter to serve or drop (`fair_queue.rs`).
    pub fair_locks: NameSet<LockId<'static>>,
    /// Fencing counters Redisson's RFencedLock incremented: kept without
    /// an expiry from now on, as Redisson keeps them (`tokens::keep_token_key`).
    pub token_keys: NameSet<LockId<'static>>,
}

impl Work {
    fn is_empty(&self) -> bool {
        self.keys.is_empty()
            && self.lost_grants.is_empty()
            && self.elections.is_empty()
            && self.semaphores.is_empty()
            && self.fair_locks.is_empty()
            && self.token_keys.is_empty()
    }
}

#[derive(Default)]
struct Deferred {
    work: Work,
    armed: Option<Armed>,
    /// A drain is queued to run right after the current command.
    after_command: bool,
}

/// The drain's 0 ms timer.
#[derive(Clone, Copy)]
struct Armed {
    id: TimerId,
    /// Armed inside a timer of the module: Redis runs module timers from
    /// one event-loop timer, which one armed while it runs does not bring
    /// forward, so this one fires a millisecond or more later.
    late: bool,
}

static DEFERRED: LazyLock<Mutex<Deferred>> = LazyLock::new(Mutex::default);
static DRAIN: OnceLock<fn(&Context, Work)> = OnceLock::new();

fn deferred() -> MutexGuard<'static, Deferred> {
    sync::lock(&DEFERRED)
}

/// Sets what the drain does with the work (once, at load).
pub fn on_drain(drain: fn(&Context, Work)) {
    let _ = DRAIN.set(drain);
}

fn defer(ctx: &Context, add: impl FnOnce(&mut Work)) {
    let mut d = deferred();
    add(&mut d.work);
    let in_timer = ffi::in_timer();
    // A late timer is replaced (stopped first: a timer armed behind it
    // would wait for it) when a command or event outside the module's
    // timers notes work: the drain must run before other clients' commands
    // of the next event-loop turn.
    if d.armed.is_some_and(|a| !a.late || in_timer) {
        return;
    }
    if let Some(old) = d.armed.take() {
        ffi::stop_timer(ctx, old.id);
    }
    d.armed = ffi::create_timer::<Drain>(ctx, 0, 0).map(|id| Armed { id, late: in_timer });
    ffi::wake_event_loop();
}

/// Looks at `lock` again in the drain.
pub fn defer_key(ctx: &Context, lock: LockId<'static>) {
    defer(ctx, |work| {
        work.keys.insert(lock);
    });
}

/// Releases grants whose answer never reached their waiter, in the drain.
pub fn defer_lost_grants(ctx: &Context, grants: impl IntoIterator<Item = Grant>) {
    defer(ctx, |work| work.lost_grants.extend(grants));
}

/// Looks at an election again in the drain, and at whether `leader` (who
/// led it) still holds it.
pub fn defer_election(ctx: &Context, election: LockId<'static>, leader: Option<Vec<u8>>) {
    defer(ctx, |work| work.elections.push((election, leader)));
}

/// Has the waits for semaphore `lock` checked for deadlocks in the drain.
pub fn defer_semaphore_check(ctx: &Context, lock: LockId<'static>) {
    defer(ctx, |work| {
        work.semaphores.insert(lock);
    });
}

/// Looks at `lock`'s Redisson fair queue in the drain, whether or not
/// anyone here waits for the lock.
pub fn defer_fair_check(ctx: &Context, lock: LockId<'static>) {
    defer(ctx, |work| {
        work.fair_locks.insert(lock);
    });
}

/// Keeps the fencing counter `key` (Redisson's RFencedLock incremented it)
/// without an expiry, in the drain.
pub fn defer_token_key(ctx: &Context, key: LockId<'static>) {
    defer(ctx, |work| {
        work.token_keys.insert(key);
    });
}

/// From a keyspace-event callback that deferred work: where the server
/// can run a job right after the command that fired the event (7.2+), the
/// drain runs then too, before any other client's command: a Redisson
/// client whose script runs next finds the lock handed on already. The
/// 0 ms timer stays armed: it does the work if the job cannot (or finds
/// nothing left).
pub fn drain_after_event(ctx: &Context) {
    let mut d = deferred();
    if d.after_command || d.armed.is_none() {
        return;
    }
    d.after_command = ffi::run_after_event::<DrainNow>(ctx);
}

/// After each of the module's timers: the work it noted (a keyspace event
/// fired by its own writes, or by a key it opened: a lease that ran out)
/// is done now, still inside it. Left to the 0 ms timer it would wait a
/// millisecond or more: Redis runs module timers from one event-loop
/// timer, which a timer armed while it runs does not bring forward, and
/// clients' commands (a Redisson client taking a lock the drain would have
/// handed to a waiter before it) run meanwhile.
pub fn drain_after_timer(ctx: &Context) {
    drain_now(ctx);
}

/// The drain, now, if there is work and the server may be written; the
/// armed timer, with nothing left to do, is stopped. Otherwise the timer
/// does it (or retries).
fn drain_now(ctx: &Context) {
    let work = {
        let mut d = deferred();
        if d.work.is_empty() || writable(ctx) != Writable::Now {
            return;
        }
        if let Some(armed) = d.armed.take() {
            ffi::stop_timer(ctx, armed.id);
        }
        std::mem::take(&mut d.work)
    };
    run(ctx, work);
}

/// Looks at `lock` again now if the server may be written, else in the
/// drain, else (a replica) not at all.
pub fn settle_now_or_later(ctx: &Context, lock: LockId<'static>) {
    match writable(ctx) {
        Writable::Never => {}
        Writable::Later | Writable::TooFewReplicas => defer_key(ctx, lock),
        Writable::Now => run(
            ctx,
            Work {
                keys: NameSet::from_iter([lock]),
                ..Work::default()
            },
        ),
    }
}

/// Undoes in the server what a change of the queues let go: stops the
/// timers nobody needs any more, and looks again at the locks whose queue
/// lost a multi-lock caller's entry (whoever is first there now may be
/// served).
pub fn after_queue_change(ctx: &Context, released: Released) {
    for id in released.lease_timers {
        ffi::stop_timer(ctx, id);
    }
    if let Some(id) = released.wait_timer {
        ffi::stop_timer(ctx, id);
    }
    for lock in released.resettle {
        defer_key(ctx, lock);
    }
}

fn run(ctx: &Context, work: Work) {
    if let Some(drain) = DRAIN.get() {
        drain(ctx, work);
    }
}

struct Drain;

impl TimerHandler for Drain {
    fn fire(ctx: &Context, _: u64) {
        let work = {
            let mut d = deferred();
            d.armed = None;
            match writable(ctx) {
                Writable::Never => {
                    d.work = Work::default();
                    return;
                }
                Writable::Later | Writable::TooFewReplicas => {
                    d.armed = ffi::create_timer::<Drain>(ctx, RETRY_MS, 0)
                        .map(|id| Armed { id, late: true });
                    return;
                }
                Writable::Now => std::mem::take(&mut d.work),
            }
        };
        run(ctx, work);
    }
}

/// The drain run right after a command (see [`drain_after_event`]); if the
/// server may not be written now, the armed timer retries.
struct DrainNow;

impl TimerHandler for DrainNow {
    fn fire(ctx: &Context, _: u64) {
        deferred().after_command = false;
        drain_now(ctx);
    }
}
