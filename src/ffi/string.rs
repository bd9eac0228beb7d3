//! Module strings: reading the bytes of one Redis handed over, making one.

use std::ptr::{self};
use std::sync::atomic::{AtomicPtr, Ordering::Relaxed};

use redis_module::{raw, Context, RedisString};

/// A copy of the bytes of a string Redis handed to a callback.
pub(super) fn string_bytes(s: *const raw::RedisModuleString) -> Vec<u8> {
    with_string_bytes(s, <[u8]>::to_vec)
}

/// Runs `f` on the bytes of a live RedisModuleString (empty for NULL).
pub(super) fn with_string_bytes<R>(
    s: *const raw::RedisModuleString,
    f: impl FnOnce(&[u8]) -> R,
) -> R {
    if s.is_null() {
        return f(&[]);
    }
    let mut len = 0usize;
    // SAFETY: `s` is a live RedisModuleString handed to us by Redis in the
    // current callback.
    let p = api!(RedisModule_StringPtrLen).map_or(ptr::null(), |g| unsafe { g(s, &mut len) });
    if p.is_null() {
        return f(&[]);
    }
    // SAFETY: Redis guarantees `len` readable bytes at `p`, unchanged while
    // the string lives; the slice does not outlive this call.
    f(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) })
}

pub fn string(ctx: &Context, bytes: &[u8]) -> RedisString {
    RedisString::create_from_slice(ctx.ctx, bytes)
}

/// A string made once, owned by no context and never freed, for a value
/// written over and over. Redis copies what it keeps of it.
pub(super) fn kept_string(
    slot: &'static AtomicPtr<raw::RedisModuleString>,
    value: &[u8],
) -> *mut raw::RedisModuleString {
    let kept = slot.load(Relaxed);
    if !kept.is_null() {
        return kept;
    }
    let Some(create) = api!(RedisModule_CreateString) else {
        return ptr::null_mut();
    };
    // SAFETY: a NULL context makes a string no context owns; Redis copies
    // `value`.
    let made = unsafe { create(ptr::null_mut(), value.as_ptr().cast(), value.len()) };
    slot.store(made, Relaxed);
    made
}
