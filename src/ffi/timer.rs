//! Timers: one-shot server timers, running a timer job on the main thread
//! at the request of another thread (the lease alarm), and jobs run right
//! after the command whose keyspace event asked for them (7.2+).

use std::ffi::c_void;
use std::ptr::{self};
use std::sync::atomic::{
    AtomicBool, AtomicPtr, AtomicUsize,
    Ordering::{Relaxed, SeqCst},
};
use std::sync::OnceLock;

use super::{guard, OK};
use redis_module::{raw, Context};

pub type TimerId = raw::RedisModuleTimerID;

/// A kind of timer; `data` is a plain number chosen by the creator.
pub trait TimerHandler: 'static {
    fn fire(ctx: &Context, data: u64);
}

unsafe extern "C" fn on_timer<H: TimerHandler>(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    let context = Context::new(ctx);
    IN_TIMER.store(true, Relaxed);
    guard(&context, || {
        H::fire(&context, data as u64);
        if let Some(after) = AFTER_TIMER.get() {
            after(&context);
        }
    });
    IN_TIMER.store(false, Relaxed);
}

/// Set while one of the module's timers runs (on the main thread).
static IN_TIMER: AtomicBool = AtomicBool::new(false);

/// Whether this runs inside one of the module's timers: a timer armed now
/// fires a millisecond or more later, whatever its delay (Redis runs module
/// timers from one event-loop timer, rescheduled at least 1 ms on after it
/// ran them).
pub fn in_timer() -> bool {
    IN_TIMER.load(Relaxed)
}

/// What runs after every timer of the module, still inside it.
static AFTER_TIMER: OnceLock<fn(&Context)> = OnceLock::new();

/// Sets what runs after every timer of the module (once, at load).
pub fn after_every_timer(hook: fn(&Context)) {
    let _ = AFTER_TIMER.set(hook);
}

/// Arms a one-shot timer `ms` from now (~1 ms resolution, independent of hz).
pub fn create_timer<H: TimerHandler>(ctx: &Context, ms: i64, data: u64) -> Option<TimerId> {
    let f = api!(RedisModule_CreateTimer)?;
    // SAFETY: the data is a number smuggled in the pointer, never
    // dereferenced; the callback is monomorphised for H.
    Some(unsafe { f(ctx.ctx, ms.max(0), Some(on_timer::<H>), data as *mut c_void) })
}

/// A context of this module for use outside any callback (the main
/// thread's one-shot events have none), made once at load.
static DETACHED: AtomicPtr<raw::RedisModuleCtx> = AtomicPtr::new(ptr::null_mut());
/// One-shot events queued and not run yet: their callback is in this
/// library, so it must not be unloaded meanwhile.
static ONE_SHOTS_PENDING: AtomicUsize = AtomicUsize::new(0);

pub fn keep_detached_context(ctx: &Context) {
    if let Some(f) = api!(RedisModule_GetDetachedThreadSafeContext) {
        // SAFETY: ctx is the live load context; the detached context lives
        // until the module is unloaded.
        DETACHED.store(unsafe { f(ctx.ctx) }, Relaxed);
    }
}

/// Whether a one-shot event of this module is still queued.
pub fn one_shots_pending() -> bool {
    ONE_SHOTS_PENDING.load(SeqCst) > 0
}

/// From any thread: runs timer handler `H` with `data` on the main thread
/// as soon as it is free (a 0 ms timer armed from a one-shot event, which
/// wakes the event loop through its pipe).
pub fn run_timer_on_main_thread<H: TimerHandler>(data: u64) {
    unsafe extern "C" fn arm<H: TimerHandler>(data: *mut c_void) {
        ONE_SHOTS_PENDING.fetch_sub(1, SeqCst);
        let ctx = DETACHED.load(Relaxed);
        if ctx.is_null() {
            return;
        }
        if let Some(create) = api!(RedisModule_CreateTimer) {
            // SAFETY: on the main thread (one-shot events run there); the
            // detached context is this module's and still alive; data is a
            // number smuggled in the pointer.
            unsafe { create(ctx, 0, Some(on_timer::<H>), data) };
        }
    }
    let Some(add) = api!(RedisModule_EventLoopAddOneShot) else {
        return;
    };
    ONE_SHOTS_PENDING.fetch_add(1, SeqCst);
    // SAFETY: RM_EventLoopAddOneShot is the API's thread-safe entry point;
    // the callback is monomorphised for H and data is a plain number.
    if unsafe { add(Some(arm::<H>), data as *mut c_void) } != OK {
        ONE_SHOTS_PENDING.fetch_sub(1, SeqCst);
    }
}

/// Wakes the event loop if it is about to sleep. A timer armed in the
/// server's before-sleep step (blocked-client callbacks, client frees) does
/// not shorten a sleep whose timeout was computed before that step.
pub fn wake_event_loop() {
    unsafe extern "C" fn nothing(_: *mut c_void) {}
    if let Some(f) = api!(RedisModule_EventLoopAddOneShot) {
        // SAFETY: the callback ignores its argument and Redis frees its own
        // bookkeeping; only the pipe write that wakes the loop matters.
        unsafe { f(Some(nothing), ptr::null_mut()) };
    }
}

/// Cancels a timer; false if it already fired or never existed.
pub fn stop_timer(ctx: &Context, id: TimerId) -> bool {
    // SAFETY: Redis looks the id up and ignores unknown ones; the data
    // out-pointer may be NULL.
    api!(RedisModule_StopTimer).is_some_and(|f| unsafe { f(ctx.ctx, id, ptr::null_mut()) } == OK)
}

/// From a keyspace-event callback: runs timer handler `H` (with data 0)
/// once the command that fired the event is done, inside its execution
/// unit (so its writes replicate after the command's own), where writing
/// is safe: RM_AddPostNotificationJob. False where the server has no such
/// call (7.0) or refuses it (loading, a read-only replica).
pub fn run_after_event<H: TimerHandler>(ctx: &Context) -> bool {
    unsafe extern "C" fn job<H: TimerHandler>(ctx: *mut raw::RedisModuleCtx, _: *mut c_void) {
        let context = Context::new(ctx);
        guard(&context, || H::fire(&context, 0));
    }
    let Some(add) = api!(RedisModule_AddPostNotificationJob) else {
        return false;
    };
    // SAFETY: ctx is the live callback context; the job is monomorphised for
    // H and takes no private data (NULL, nothing to free).
    unsafe { add(ctx.ctx, Some(job::<H>), ptr::null_mut(), None) == OK }
}
