//! Precise wake-ups at lease ends. A lease is over once the clock is past
//! its deadline millisecond; a Redis timer aimed there fires up to 2 ms late
//! (timers are armed in whole milliseconds from an arbitrary point inside
//! one, and the event loop sleeps in whole milliseconds, rounded up). One
//! sleeping thread wakes within tens of microseconds instead and asks the
//! main thread, through the event-loop pipe, to run the lease timer's job.
//!
//! The thread only keeps times and job numbers: it never touches Redis or the
//! registry. The Redis timer armed with every alarm stays as the fallback;
//! whichever runs first takes the job, the other finds nothing to do.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Condvar, LazyLock, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::ffi;
use crate::handoff::LeaseExpiry;

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
    STATE
        .0
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn unix_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// Runs lease job `job` on the main thread as soon as the clock is past
/// `deadline_ms` (unix ms, as PEXPIRETIME), i.e. at `deadline_ms + 1`.
pub fn set(deadline_ms: i64, job: u64) {
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
        let now = unix_micros();
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

/// Stops the thread (module unload): no code of this module may run after.
pub fn shutdown() {
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
