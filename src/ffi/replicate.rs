//! Replicating a command's effects as native commands (`HSET`, `HDEL`,
//! `PEXPIREAT`, `SET ... PXAT`, `DEL`, `INCR`), or only counting the change
//! when nothing can receive them.

use std::ffi::CStr;

use redis_module::{raw, Context, RedisString};

/// `HSET key field value`.
pub fn replicate_hset(ctx: &Context, key: &RedisString, field: &[u8], value: i64) {
    if let Some(f) = api!(RedisModule_Replicate) {
        // SAFETY: "sbl": a live RedisModuleString, a (pointer, length) pair and a
        // long long, in that order; Redis copies them before returning.
        unsafe {
            f(
                ctx.ctx,
                c"HSET".as_ptr(),
                c"sbl".as_ptr(),
                key.inner,
                field.as_ptr(),
                field.len(),
                value as std::ffi::c_longlong,
            )
        };
    }
}

/// `HSET key field value` with a value that is not a number.
pub fn replicate_hset_bytes(ctx: &Context, key: &RedisString, field: &[u8], value: &[u8]) {
    if let Some(f) = api!(RedisModule_Replicate) {
        // SAFETY: "sbb": a live RedisModuleString and two (pointer, length)
        // pairs; Redis copies them before returning.
        unsafe {
            f(
                ctx.ctx,
                c"HSET".as_ptr(),
                c"sbb".as_ptr(),
                key.inner,
                field.as_ptr(),
                field.len(),
                value.as_ptr(),
                value.len(),
            )
        };
    }
}

/// `SET key 1 PXAT at`: a read hold's lease key, with its absolute end.
pub fn replicate_set_one_pxat(ctx: &Context, key: &RedisString, at_ms: i64) {
    if let Some(f) = api!(RedisModule_Replicate) {
        // SAFETY: "sccl": a live RedisModuleString, two C strings and a long
        // long; Redis copies them before returning.
        unsafe {
            f(
                ctx.ctx,
                c"SET".as_ptr(),
                c"sccl".as_ptr(),
                key.inner,
                c"1".as_ptr(),
                c"PXAT".as_ptr(),
                at_ms as std::ffi::c_longlong,
            )
        };
    }
}

/// `HDEL key field`.
pub fn replicate_hdel(ctx: &Context, key: &RedisString, field: &[u8]) {
    if let Some(f) = api!(RedisModule_Replicate) {
        // SAFETY: "sb": a live RedisModuleString and a (pointer, length) pair;
        // Redis copies them before returning.
        unsafe {
            f(
                ctx.ctx,
                c"HDEL".as_ptr(),
                c"sb".as_ptr(),
                key.inner,
                field.as_ptr(),
                field.len(),
            )
        };
    }
}

/// `PEXPIREAT key at`.
pub fn replicate_pexpireat(ctx: &Context, key: &RedisString, at_ms: i64) {
    if let Some(f) = api!(RedisModule_Replicate) {
        // SAFETY: "sl": a live RedisModuleString and a long long.
        unsafe {
            f(
                ctx.ctx,
                c"PEXPIREAT".as_ptr(),
                c"sl".as_ptr(),
                key.inner,
                at_ms as std::ffi::c_longlong,
            )
        };
    }
}

/// A one-key command: `DEL key`, `INCR key`.
pub fn replicate_key_command(ctx: &Context, command: &CStr, key: &RedisString) {
    if let Some(f) = api!(RedisModule_Replicate) {
        // SAFETY: "s": one live RedisModuleString.
        unsafe { f(ctx.ctx, command.as_ptr(), c"s".as_ptr(), key.inner) };
    }
}

/// Counts a change towards the `save` points without building a command,
/// for when nothing receives replicated commands. (It asks Redis to
/// propagate the call verbatim, which Redis drops at once with no AOF and
/// no replica; the dirty counter still moves.)
pub fn count_unpropagated_change(ctx: &Context) {
    if let Some(f) = api!(RedisModule_ReplicateVerbatim) {
        // SAFETY: ctx is the live context of the current command or callback.
        unsafe { f(ctx.ctx) };
    }
}
