//! LOCK.RACQUIRE and LOCK.WACQUIRE: the read-write lock's acquires. They
//! share LOCK.ACQUIRE's options, waiting and hand-off; LOCK.RELEASE,
//! LOCK.RENEW, LOCK.FORCERELEASE and LOCK.INFO serve both kinds of lock.

use redis_module::{Context, RedisResult, RedisString};

use super::lock::acquire_as;
use crate::rules::lock::LockKind;

/// `LOCK.RACQUIRE key owner [PX ms | EX s] [BLOCK ms] [FENCE]`
pub fn read_acquire(ctx: &Context, args: &[RedisString]) -> RedisResult {
    acquire_as(ctx, args, "lock.racquire", LockKind::Read)
}

/// `LOCK.WACQUIRE key owner [PX ms | EX s] [BLOCK ms] [FENCE]`
pub fn write_acquire(ctx: &Context, args: &[RedisString]) -> RedisResult {
    acquire_as(ctx, args, "lock.wacquire", LockKind::Write)
}
