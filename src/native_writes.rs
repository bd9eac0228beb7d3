//! Writes made with the key API as the native command a replica (with or
//! without this module) and the AOF will replay: replicated as that command
//! (or counted, for a caller whose command is replicated verbatim), its
//! keyspace events fired as that command fires them, and marked as this
//! module's own so that its own listener can tell them from outside
//! changes.
//!
//! Offers: [`is_own_notification`], [`as_own`], [`notify_own`],
//! [`replicate_or_count`], [`set_until`], [`set_counter`].

use std::ffi::{c_int, CStr};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use redis_module::{Context, RedisString};

use crate::ffi::{self, Key, Native};

/// Set while this module fires keyspace notifications for its own writes, so
/// its own listener can tell them from outside changes.
static NOTIFYING: AtomicBool = AtomicBool::new(false);

pub fn is_own_notification() -> bool {
    NOTIFYING.load(Relaxed)
}

/// Runs `write` (a key API call that can fire the server's own events, the
/// `new` of a key it creates) with those events known as this module's.
pub fn as_own<R>(write: impl FnOnce() -> R) -> R {
    NOTIFYING.store(true, Relaxed);
    let result = write();
    NOTIFYING.store(false, Relaxed);
    result
}

/// The keyspace event the native command would fire.
pub fn notify_own(ctx: &Context, class: c_int, event: &CStr, name: &RedisString) {
    NOTIFYING.store(true, Relaxed);
    ffi::notify(ctx, class, event, name);
    NOTIFYING.store(false, Relaxed);
}

/// The native command's replication, or a change counted as unpropagated
/// (the caller's command is replicated as it was called).
pub fn replicate_or_count(ctx: &Context, name: &RedisString, command: Native, native: bool) {
    if native {
        ffi::replicate(ctx, name, command);
    } else {
        ffi::count_unpropagated_change(ctx);
    }
}

/// `SET name value PXAT at` on `key` (opened for writing) with the key API,
/// replicated, notified and signalled as that command is.
pub fn set_until(ctx: &Context, name: &RedisString, key: &Key, value: i64, at: i64, native: bool) {
    key.string_set(ctx, value.to_string().as_bytes());
    key.expire_at(at);
    if native {
        ffi::replicate(ctx, name, Native::SetPxAt { value, at_ms: at });
    }
    notify_own(ctx, ffi::NOTIFY_STRING, c"set", name);
    notify_own(ctx, ffi::NOTIFY_GENERIC, c"expire", name);
    ffi::signal_modified(ctx, name);
}

/// `SET name value` on a counter (a semaphore's available permits, a
/// latch's count) opened for writing, with the absolute deadline `at` (pass
/// the key's own to keep its TTL, as INCRBY would), replicated as `SET` or
/// `SET ... PXAT`, notified and signalled as that command is.
pub fn set_counter(
    ctx: &Context,
    name: &RedisString,
    key: &Key,
    value: i64,
    at: Option<i64>,
    native: bool,
) {
    as_own(|| key.string_set(ctx, value.to_string().as_bytes()));
    if let Some(at) = at {
        key.expire_at(at);
    }
    let command = match at {
        Some(at_ms) => Native::SetPxAt { value, at_ms },
        None => Native::Set { value },
    };
    replicate_or_count(ctx, name, command, native);
    notify_own(ctx, ffi::NOTIFY_STRING, c"set", name);
    if at.is_some() {
        notify_own(ctx, ffi::NOTIFY_GENERIC, c"expire", name);
    }
    ffi::signal_modified(ctx, name);
}
