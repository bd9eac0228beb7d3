//! Publishing Redisson's unlock messages and the module's own messages, and
//! sending a PUBLISH to replicas.

use std::ptr::{self};
use std::sync::atomic::AtomicPtr;

use super::string::{kept_string, string};
use redis_module::{raw, Context};

/// Publishes Redisson's unlock message, `0` or `1`; `sharded` uses SPUBLISH
/// semantics (cluster).
pub fn publish_unlock(ctx: &Context, channel: &[u8], message: &[u8], sharded: bool) {
    static ZERO: AtomicPtr<raw::RedisModuleString> = AtomicPtr::new(ptr::null_mut());
    static ONE: AtomicPtr<raw::RedisModuleString> = AtomicPtr::new(ptr::null_mut());
    let message = match message {
        b"1" => kept_string(&ONE, b"1"),
        _ => kept_string(&ZERO, b"0"),
    };
    if message.is_null() {
        return;
    }
    let channel = string(ctx, channel);
    let f = if sharded {
        api!(RedisModule_PublishMessageShard).or(api!(RedisModule_PublishMessage))
    } else {
        api!(RedisModule_PublishMessage)
    };
    if let Some(f) = f {
        // SAFETY: ctx and both strings are live for the call.
        unsafe { f(ctx.ctx, channel.inner, message) };
    }
}

/// Publishes `message` on `channel`; `sharded` uses SPUBLISH semantics
/// (cluster).
pub fn publish_message(ctx: &Context, channel: &[u8], message: &[u8], sharded: bool) {
    let f = if sharded {
        api!(RedisModule_PublishMessageShard).or(api!(RedisModule_PublishMessage))
    } else {
        api!(RedisModule_PublishMessage)
    };
    let Some(f) = f else {
        return;
    };
    let channel = string(ctx, channel);
    let message = string(ctx, message);
    // SAFETY: ctx and both strings are live for the call; Redis copies them.
    unsafe { f(ctx.ctx, channel.inner, message.inner) };
}

/// Publishes `message` on `channel` to this server's subscribers.
pub fn publish(ctx: &Context, channel: &[u8], message: &[u8]) {
    let Some(f) = api!(RedisModule_PublishMessage) else {
        return;
    };
    let channel = string(ctx, channel);
    let message = string(ctx, message);
    // SAFETY: ctx and both strings are live for the call; Redis copies them.
    unsafe { f(ctx.ctx, channel.inner, message.inner) };
}

/// Sends `PUBLISH channel message` to replicas only (not the AOF), as Redis
/// does for a PUBLISH on a standalone master, so subscribers on replicas
/// hear it too.
pub fn replicate_publish(ctx: &Context, channel: &[u8], message: &[u8]) {
    if let Some(f) = api!(RedisModule_Replicate) {
        // SAFETY: "bbA" takes two (pointer, length) pairs; A = not to the AOF.
        unsafe {
            f(
                ctx.ctx,
                c"PUBLISH".as_ptr(),
                c"bbA".as_ptr(),
                channel.as_ptr(),
                channel.len(),
                message.as_ptr(),
                message.len(),
            )
        };
    }
}
