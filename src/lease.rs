//! Lease ends of locks that callers wait for: a timer at each such lock's
//! deadline, so the first waiter is handed the lock the moment the lease
//! is over, not when Redis's sampled expiry gets to the key.
//!
//! A lease is over once the clock is past its deadline millisecond; a Redis
//! timer aimed there fires up to 2 ms late (timers are armed in whole
//! milliseconds from an arbitrary point inside one, and the event loop
//! sleeps in whole milliseconds, rounded up). So every lease timer also sets
//! an alarm: one sleeping thread wakes within tens of microseconds and asks
//! the main thread, through the event-loop pipe, to run the lease timer's
//! job. The thread only keeps times and job numbers: it never touches Redis
//! or the registry. Whichever of the two runs first takes the job, the
//! other finds nothing to do.
//!
//! Offers: [`ensure_lease_timer`], [`earliest`], [`shutdown_alarm`].

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Condvar, LazyLock, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use redis_module::Context;

use crate::ffi::{self, TimerHandler};
use crate::waiters::{anyone_waits, registry, LeaseTimer};
use crate::{clock, deferred, sync};
use lock_rules::args::MAX_DURATION_MS;
use lock_rules::lock_id::LockId;

/// When a held lock must be looked at again for its waiters: the key's
/// deadline, or a read-write lock's earliest reader lease end before it.
pub fn earliest(next_end: Option<i64>, expires_at: Option<i64>) -> Option<i64> {
    next_end.into_iter().chain(expires_at).min()
}

/// Makes sure a lock with waiters has a timer at (or before) its lease
/// deadline. A timer that fires early finds the lock still held and is
/// re-armed; so a renewal that extends the lease costs nothing here. The
/// TTL is only read when someone waits, which most commands skip.
pub fn ensure_lease_timer(
    ctx: &Context,
    lock: &LockId<'_>,
    lease_end: impl FnOnce() -> Option<i64>,
) {
    if !anyone_waits() {
        return;
    }
    let Ok(mut reg) = registry() else {
        return;
    };
    let Some(timer) = reg.queued_lease_timer(lock) else {
        return;
    };
    let Some(deadline) = lease_end() else {
        return;
    };
    let now = ffi::now_ms();
    let ttl = deadline.saturating_sub(now).max(0);
    // Redis expires a key once the clock is past its deadline millisecond,
    // and not before: a lease lasts at least what its holder asked for from
    // the moment it sent the request (the deadline is the current
    // millisecond, rounded down, plus the lease). So aim 1 ms past the
    // deadline. A TTL set by hand can be far longer than the server's timer
    // arithmetic allows: such a timer fires early and is re-armed.
    let delay = ttl.saturating_add(1).min(MAX_DURATION_MS);
    let fires_at = now + delay;
    if timer.is_some_and(|t| t.fires_at <= fires_at) {
        return;
    }
    let job = reg.next_serial();
    let Some(id) = ffi::create_timer::<LeaseExpiry>(ctx, delay, job) else {
        return;
    };
    if let Some(old) = reg.set_lease_timer(lock, LeaseTimer { id, job, fires_at }) {
        ffi::stop_timer(ctx, old.id);
    }
    // The timer above is the fallback; the alarm is on time.
    set_alarm(deadline, job);
}

/// A lease timer (or its alarm) fired: the lock is looked at again, and its
/// first waiter served if the lease is over.
struct LeaseExpiry;

impl TimerHandler for LeaseExpiry {
    fn fire(ctx: &Context, job: u64) {
        if let Some(lock) = registry().ok().and_then(|mut r| r.take_lease_job(job)) {
            deferred::settle_now_or_later(ctx, lock);
        }
    }
}

// ---------------------------------------------------------------------------
// The alarm thread

#[derive(Default)]
struct State {
    /// (unix time in µs, job), earliest first.
    due: BinaryHeap<Reverse<(i64, u64)>>,
    thread: Option<JoinHandle<()>>,
    /// The thread could not be started: timers alone serve.
    unavailable: bool,
    stopping: bool,
}

static STATE: LazyLock<(Mutex<State>, Condvar)> = LazyLock::new(Default::default);

fn state() -> MutexGuard<'static, State> {
    sync::lock(&STATE.0)
}

/// Runs lease job `job` on the main thread as soon as the clock is past
/// `deadline_ms` (unix ms, as PEXPIRETIME), i.e. at `deadline_ms + 1`.
fn set_alarm(deadline_ms: i64, job: u64) {
    let at = deadline_ms.saturating_add(1).saturating_mul(1000);
    let mut s = state();
    if s.unavailable || s.stopping {
        return;
    }
    if s.thread.is_none() {
        match thread::Builder::new().name("lock-alarm".into()).spawn(run) {
            Ok(handle) => s.thread = Some(handle),
            Err(_) => {
                s.unavailable = true;
                return;
            }
        }
    }
    s.due.push(Reverse((at, job)));
    STATE.1.notify_one();
}

fn run() {
    let mut s = state();
    loop {
        if s.stopping {
            return;
        }
        let Some(&Reverse((at, job))) = s.due.peek() else {
            s = STATE.1.wait(s).unwrap_or_else(|p| p.into_inner());
            continue;
        };
        let now = clock::unix_micros();
        if now >= at {
            s.due.pop();
            ffi::run_timer_on_main_thread::<LeaseExpiry>(job);
            continue;
        }
        let wait = Duration::from_micros(u64::try_from(at - now).unwrap_or(0));
        s = STATE
            .1
            .wait_timeout(s, wait)
            .map(|(guard, _)| guard)
            .unwrap_or_else(|p| p.into_inner().0);
    }
}

/// Stops the alarm thread (module unload): no code of this module may run
/// after.
pub fn shutdown_alarm() {
    let handle = {
        let mut s = state();
        s.stopping = true;
        s.due.clear();
        s.thread.take()
    };
    STATE.1.notify_all();
    if let Some(handle) = handle {
        let _ = handle.join();
    }
}
