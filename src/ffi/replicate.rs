//! Replicating a command's effects as native commands (`HSET`, `HDEL`,
//! `PEXPIREAT`, `SET ... PXAT`, `DEL`), or only counting the change
//! when nothing can receive them.

use redis_module::{raw, Context, RedisString};

/// A native command that replays one change of a lock key (or a key derived
/// from it) on replicas and in the AOF.
#[derive(Debug, Clone, Copy)]
pub enum Native<'a> {
    /// `HSET key field value`.
    HSet { field: &'a [u8], value: i64 },
    /// `HSET key field value` with a value that is not a number.
    HSetBytes { field: &'a [u8], value: &'a [u8] },
    /// `HDEL key field`.
    HDel { field: &'a [u8] },
    /// `PEXPIREAT key at`.
    PExpireAt { at_ms: i64 },
    /// `SET key value PXAT at`: a read hold's lease key (value 1) or a
    /// fencing token key, with its absolute end.
    SetPxAt { value: i64, at_ms: i64 },
    /// `DEL key`.
    Del,
    /// `SET key value`: a semaphore's counter.
    Set { value: i64 },
    /// `ZADD key score member`: a semaphore permit and its lease end.
    ZAdd { score: i64, member: &'a [u8] },
    /// `ZREM key member`.
    ZRem { member: &'a [u8] },
    /// `LPOP key`: a Redisson fair queue's head dropped.
    LPop,
    /// `PERSIST key`: a fencing counter Redisson's RFencedLock uses.
    Persist,
}

/// Replicates `command` on `key` (RM_Replicate: in the current execution
/// unit's MULTI/EXEC, with every other change of the same command).
pub fn replicate(ctx: &Context, key: &RedisString, command: Native) {
    let Some(f) = api!(RedisModule_Replicate) else {
        return;
    };
    let (ctx, key) = (ctx.ctx, key.inner);
    match command {
        // SAFETY (every arm): the format names the arguments that follow, in
        // order: s = a live RedisModuleString, b = a (pointer, length) pair,
        // l = a long long, c = a C string; Redis copies them before
        // returning.
        Native::HSet { field, value } => {
            // SAFETY: "sbl", see above.
            unsafe {
                f(
                    ctx,
                    c"HSET".as_ptr(),
                    c"sbl".as_ptr(),
                    key,
                    field.as_ptr(),
                    field.len(),
                    value as std::ffi::c_longlong,
                )
            }
        }
        Native::HSetBytes { field, value } => {
            // SAFETY: "sbb", see above.
            unsafe {
                f(
                    ctx,
                    c"HSET".as_ptr(),
                    c"sbb".as_ptr(),
                    key,
                    field.as_ptr(),
                    field.len(),
                    value.as_ptr(),
                    value.len(),
                )
            }
        }
        Native::HDel { field } => {
            // SAFETY: "sb", see above.
            unsafe {
                f(
                    ctx,
                    c"HDEL".as_ptr(),
                    c"sb".as_ptr(),
                    key,
                    field.as_ptr(),
                    field.len(),
                )
            }
        }
        Native::PExpireAt { at_ms } => {
            // SAFETY: "sl", see above.
            unsafe {
                f(
                    ctx,
                    c"PEXPIREAT".as_ptr(),
                    c"sl".as_ptr(),
                    key,
                    at_ms as std::ffi::c_longlong,
                )
            }
        }
        Native::SetPxAt { value, at_ms } => {
            // SAFETY: "slcl", see above.
            unsafe {
                f(
                    ctx,
                    c"SET".as_ptr(),
                    c"slcl".as_ptr(),
                    key,
                    value as std::ffi::c_longlong,
                    c"PXAT".as_ptr(),
                    at_ms as std::ffi::c_longlong,
                )
            }
        }
        // SAFETY: "s", see above.
        Native::Del => unsafe { f(ctx, c"DEL".as_ptr(), c"s".as_ptr(), key) },
        Native::Set { value } => {
            // SAFETY: "sl", see above.
            unsafe {
                f(
                    ctx,
                    c"SET".as_ptr(),
                    c"sl".as_ptr(),
                    key,
                    value as std::ffi::c_longlong,
                )
            }
        }
        Native::ZAdd { score, member } => {
            // SAFETY: "slb", see above.
            unsafe {
                f(
                    ctx,
                    c"ZADD".as_ptr(),
                    c"slb".as_ptr(),
                    key,
                    score as std::ffi::c_longlong,
                    member.as_ptr(),
                    member.len(),
                )
            }
        }
        Native::ZRem { member } => {
            // SAFETY: "sb", see above.
            unsafe {
                f(
                    ctx,
                    c"ZREM".as_ptr(),
                    c"sb".as_ptr(),
                    key,
                    member.as_ptr(),
                    member.len(),
                )
            }
        }
        Native::LPop => {
            // SAFETY: "s", see above.
            unsafe { f(ctx, c"LPOP".as_ptr(), c"s".as_ptr(), key) }
        }
        Native::Persist => {
            // SAFETY: "s", see above.
            unsafe { f(ctx, c"PERSIST".as_ptr(), c"s".as_ptr(), key) }
        }
    };
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
