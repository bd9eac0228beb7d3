//! Command handlers, one file per command family.

pub mod lock;

use redis_module::{Context, RedisError, RedisResult, RedisValue};

use crate::ffi;
use crate::rules::error::LockError;

/// Runs a command body on the FFI boundary: a [`LockError`] becomes its error
/// reply, and a panic becomes an error reply instead of a crashed server.
fn run(ctx: &Context, body: impl FnOnce() -> Result<RedisValue, LockError>) -> RedisResult {
    match ffi::guard(ctx, body) {
        Some(Ok(value)) => Ok(value),
        Some(Err(e)) => Err(RedisError::String(e.to_string())),
        None => Err(RedisError::Str("ERR internal error, see the server log")),
    }
}
