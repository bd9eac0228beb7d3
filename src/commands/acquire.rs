//! LOCK.ACQUIRE (the exclusive lock), LOCK.RACQUIRE and LOCK.WACQUIRE (a
//! read-write lock's read and write holds): one acquire, taken at once or
//! waited for in the lock's queue.

use redis_module::{Context, RedisResult, RedisString, RedisValue};

use super::{
    acquire_request, command, lock_id, owner_call, run, with_queue, Command, OwnerCall, BLOCK,
    FENCE, KEEPALIVE, KEY, LEASE, OWNER,
};
use crate::ffi::{ArgDoc, CommandSpec, KeyArgs, KEY_RW_UPDATE};
use crate::handoff::{self, begin, Origin};
use crate::keepalive::{self, Taken};
use crate::{blocking, events, lease, store};
use lock_rules::args::{parse_acquire_options, Wait};
use lock_rules::error::LockError;
use lock_rules::lock_id::LockId;
use lock_rules::request::{LockKind, Request};
use lock_rules::transition::Acquisition;

const ACQUIRE_ARGS: &[ArgDoc] = &[KEY, OWNER, LEASE, BLOCK, FENCE, KEEPALIVE];

/// `LOCK.ACQUIRE key owner [PX ms | EX s] [BLOCK ms] [FENCE]`
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

/// `LOCK.RACQUIRE key owner [PX ms | EX s] [BLOCK ms] [FENCE]`
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

/// `LOCK.WACQUIRE key owner [PX ms | EX s] [BLOCK ms] [FENCE]`
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
/// `COMMAND key owner [PX ms | EX s] [BLOCK ms] [FENCE]`.
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
        let origin = Origin::Command {
            owner: Some(owner),
            fences: request.fence,
        };
        let (key, mut tx) = begin(ctx, name, &lock, origin)?;
        let re_entry = tx.state().held_by(owner.as_slice());
        if re_entry && !request.keepalive {
            keepalive::may_set_lease(&lock, owner.as_slice(), request.lease_ms)?;
        }
        let acquired = with_queue(&lock, |queue| tx.acquire(queue, &request, wait.is_some()))?;
        let next_end = tx.next_end();
        handoff::commit(ctx, &lock, &key, tx);
        match (acquired?, wait) {
            (Acquisition::Now(reply), _) => {
                // The hold's time ends with its key.
                events::watch_expiry(ctx);
                let how = if request.keepalive {
                    events::watch_clients(ctx);
                    Taken::KeepAlive
                } else if re_entry {
                    Taken::Reentry
                } else {
                    Taken::Fresh
                };
                keepalive::taken(ctx, &lock, owner.as_slice(), how, request.lease_ms);
                Ok(RedisValue::Integer(reply))
            }
            (Acquisition::Wait, Some(wait)) => {
                drop(key);
                let lease_end = lease::earliest(next_end, store::expires_at(ctx, name));
                enqueue(ctx, lock, request, wait, lease_end)?;
                Ok(RedisValue::NoReply)
            }
            (Acquisition::Busy | Acquisition::Wait, _) => Ok(RedisValue::Null),
        }
    })
}

/// Blocks the caller at the tail of the lock's queue.
fn enqueue(
    ctx: &Context,
    lock: LockId<'_>,
    request: Request,
    wait: Wait,
    lease_end: Option<i64>,
) -> Result<(), LockError> {
    events::watch_for_waiters(ctx);
    blocking::block_caller(ctx, request, wait, |reg, waiter| {
        let id = reg.next_serial();
        reg.enqueue(&lock, id, waiter);
    })?;
    lease::ensure_lease_timer(ctx, &lock, || lease_end);
    Ok(())
}
