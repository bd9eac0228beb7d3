//! LOCK.ACQUIRE (the exclusive lock), LOCK.RACQUIRE and LOCK.WACQUIRE (a
//! read-write lock's read and write holds): one acquire, taken at once or
//! waited for in the lock's queue; and LOCK.CANCEL, which ends an owner's
//! waits.

use redis_module::{Context, RedisResult, RedisString, RedisValue};

use super::{
    acquire_request, command, lock_id, owner_call, run, Command, OwnerCall, BLOCK, FENCE,
    KEEPALIVE, KEY, LEASE, OWNER, SESSION_TOKEN,
};
use crate::engine::lock::begin;
use crate::engine::Origin;
use crate::ffi::{ArgDoc, CommandSpec, KeyArgs, KEY_RW_UPDATE};
use crate::{acquisition, blocking};
use lock_rules::args::parse_acquire_options;
use lock_rules::error::LockError;
use lock_rules::request::LockKind;

const ACQUIRE_ARGS: &[ArgDoc] = &[KEY, OWNER, LEASE, BLOCK, FENCE, KEEPALIVE, SESSION_TOKEN];

/// `LOCK.ACQUIRE key owner [PX ms | EX s] [BLOCK ms] [FENCE] [KEEPALIVE] [SESSION token]`
pub const ACQUIRE: Command = command!(
    CommandSpec {
        name: c"lock.acquire",
        flags: c"write deny-oom blocking",
        acl_categories: "write hash blocking",
        summary: c"Acquires a reentrant lock, optionally waiting in a FIFO queue for it.",
        complexity: c"O(1)",
        since: c"1.0.0",
        arity: -3,
        key_flags: KEY_RW_UPDATE,
        keys: KeyArgs::One,
        args: ACQUIRE_ARGS,
    },
    acquire
);

/// `LOCK.RACQUIRE key owner [PX ms | EX s] [BLOCK ms] [FENCE] [KEEPALIVE] [SESSION token]`
pub const RACQUIRE: Command = command!(
    CommandSpec {
        name: c"lock.racquire",
        flags: c"write deny-oom blocking",
        acl_categories: "write hash blocking",
        summary:
            c"Acquires a read hold on a read-write lock, optionally waiting in its FIFO queue.",
        complexity: c"O(1) for a first hold; O(N) for a re-entry, N the owner's read holds",
        since: c"1.1.0",
        arity: -3,
        key_flags: KEY_RW_UPDATE,
        keys: KeyArgs::One,
        args: ACQUIRE_ARGS,
    },
    read_acquire
);

/// `LOCK.WACQUIRE key owner [PX ms | EX s] [BLOCK ms] [FENCE] [KEEPALIVE] [SESSION token]`
pub const WACQUIRE: Command = command!(
    CommandSpec {
        name: c"lock.wacquire",
        flags: c"write deny-oom blocking",
        acl_categories: "write hash blocking",
        summary:
            c"Acquires the write hold of a read-write lock, optionally waiting in its FIFO queue.",
        complexity: c"O(N), N the read holds of the lock",
        since: c"1.1.0",
        arity: -3,
        key_flags: KEY_RW_UPDATE,
        keys: KeyArgs::One,
        args: ACQUIRE_ARGS,
    },
    write_acquire
);

fn acquire(ctx: &Context, args: &[RedisString]) -> RedisResult {
    acquire_as(ctx, args, &ACQUIRE.spec, LockKind::Exclusive)
}

fn read_acquire(ctx: &Context, args: &[RedisString]) -> RedisResult {
    acquire_as(ctx, args, &RACQUIRE.spec, LockKind::Read)
}

fn write_acquire(ctx: &Context, args: &[RedisString]) -> RedisResult {
    acquire_as(ctx, args, &WACQUIRE.spec, LockKind::Write)
}

/// The acquire of every kind of lock:
/// `COMMAND key owner [PX ms | EX s] [BLOCK ms] [FENCE] [KEEPALIVE] [SESSION token]`.
fn acquire_as(
    ctx: &Context,
    args: &[RedisString],
    spec: &CommandSpec,
    kind: LockKind,
) -> RedisResult {
    run(ctx, || {
        let OwnerCall {
            name,
            owner,
            options,
        } = owner_call(spec, args)?;
        let options = parse_acquire_options(options)?;
        let (request, wait) =
            acquire_request(ctx, std::slice::from_ref(name), owner, &options, kind)?;
        let lock = lock_id(ctx, name);
        let (key, tx) = begin(ctx, name, &lock, Origin::caller(owner, request.fence))?;
        acquisition::acquire(ctx, &lock, key, tx, &request, wait)
    })
}

/// `LOCK.CANCEL key owner`
pub const CANCEL: Command = command!(
    CommandSpec {
        name: c"lock.cancel",
        flags: c"write fast",
        acl_categories: "write hash fast",
        summary: c"Ends the owner's waits for a lock: each is answered nil, as at its BLOCK time.",
        complexity: c"O(N), N the callers waiting for the lock",
        since: c"1.2.0",
        arity: 3,
        key_flags: KEY_RW_UPDATE,
        keys: KeyArgs::One,
        args: &[KEY, OWNER],
    },
    cancel
);

fn cancel(ctx: &Context, args: &[RedisString]) -> RedisResult {
    run(ctx, || {
        let OwnerCall { name, owner, .. } = owner_call(&CANCEL.spec, args)?;
        if args.len() != 3 {
            return Err(LockError::arity(CANCEL.spec.name()));
        }
        let lock = lock_id(ctx, name);
        let cancelled = blocking::cancel(ctx, &lock, owner.as_slice());
        Ok(RedisValue::Integer(cancelled as i64))
    })
}
