//! Command handlers, one file per command family.

pub mod lock;
pub mod multilock;
pub mod rwlock;

use redis_module::{Context, RedisResult, RedisValue};

use crate::ffi;
use crate::rules::error::LockError;

/// Runs a command body on the FFI boundary: a [`LockError`] becomes its error
/// reply, and a panic becomes an error reply instead of a crashed server.
fn run(ctx: &Context, body: impl FnOnce() -> Result<RedisValue, LockError>) -> RedisResult {
    match ffi::guard(ctx, body) {
        Some(Ok(value)) => Ok(value),
        Some(Err(e)) => {
            ffi::reply_error(ctx, &e.to_string());
            Ok(RedisValue::NoReply)
        }
        None => {
            ffi::reply_error(ctx, "ERR internal error, see the server log");
            Ok(RedisValue::NoReply)
        }
    }
}
