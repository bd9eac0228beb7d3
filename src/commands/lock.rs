//! LOCK.ACQUIRE, LOCK.RELEASE, LOCK.RENEW, LOCK.FORCERELEASE, LOCK.INFO.
//! Each is a straight line: parse, open and read the key, run the rules on
//! the key's wait queue, commit the transition, reply.

use std::borrow::Cow;
use std::time::{Duration, Instant};

use redis_module::{Context, ContextFlags, RedisResult, RedisString, RedisValue};

use super::run;
use crate::config;
use crate::ffi::{self, Field};
use crate::handoff::{self, begin, Blocked, Origin, Outcome};
use crate::rules::args::{parse_acquire_options, parse_owner, parse_renew_options, Wait};
use crate::rules::error::{printable, LockError};
use crate::rules::keys::token_key_in_slot;
use crate::rules::lock::{Acquired, LockState, Request};
use crate::rules::queue::Fifo;
use crate::store;
use crate::waiters::{anyone_waits, registry, LockId, Waiter};

fn lock_id<'k>(ctx: &Context, name: &'k RedisString) -> LockId<'k> {
    LockId {
        db: ffi::selected_db(ctx),
        key: Cow::Borrowed(name.as_slice()),
    }
}

/// Runs `rules` on the lock's wait queue; without waiters anywhere, on an
/// empty queue without touching the registry.
fn with_queue<R>(
    lock: &LockId<'_>,
    rules: impl FnOnce(&mut Fifo<Waiter>) -> R,
) -> Result<R, LockError> {
    if anyone_waits() {
        Ok(registry()?.with_queue(lock, rules))
    } else {
        Ok(rules(&mut Fifo::default()))
    }
}

/// A command's transition, by `owner` when the command names one.
fn by(owner: Option<&RedisString>) -> Origin<'_> {
    Origin::Command {
        owner,
        fences: false,
    }
}

/// `COMMAND key owner [options...]`, split.
struct OwnerCall<'a> {
    name: &'a RedisString,
    owner: &'a RedisString,
    options: &'a [RedisString],
}

/// Splits the arguments of a command taking a key, an owner and options,
/// checking arity and the owner.
fn owner_call<'a>(command: &str, args: &'a [RedisString]) -> Result<OwnerCall<'a>, LockError> {
    let [_, name, owner, options @ ..] = args else {
        return Err(LockError::arity(command));
    };
    parse_owner(owner.as_slice())?;
    Ok(OwnerCall {
        name,
        owner,
        options,
    })
}

/// `LOCK.ACQUIRE key owner [PX ms | EX s] [BLOCK ms] [FENCE]`
pub fn acquire(ctx: &Context, args: &[RedisString]) -> RedisResult {
    run(ctx, || {
        let OwnerCall {
            name,
            owner,
            options,
        } = owner_call("lock.acquire", args)?;
        let options = parse_acquire_options(options)?;
        if options.fence {
            // Redis checks the caller's ACL key patterns on the declared key
            // (the lock) only; the token key is checked here, when the call
            // is made, also for a caller that then waits: a hand-off later
            // writes its token on its behalf.
            let token = token_key_in_slot(name.as_slice())?;
            if !ffi::may_update_key(ctx, &token) {
                ffi::reply_error(
                    ctx,
                    &format!(
                        "NOPERM this user has no permissions to access the fencing token key '{}'",
                        printable(&token)
                    ),
                );
                return Ok(RedisValue::NoReply);
            }
        }
        let request = Request {
            owner: owner.as_slice().into(),
            lease_ms: options.lease_ms.unwrap_or_else(config::default_lease_ms),
            fence: options.fence,
        };
        // Like BLPOP: inside MULTI, Lua or RM_Call a busy lock answers nil.
        let wait = options
            .wait
            .filter(|_| !ctx.get_flags().contains(ContextFlags::DENY_BLOCKING));

        let lock = lock_id(ctx, name);
        let origin = Origin::Command {
            owner: Some(owner),
            fences: request.fence,
        };
        let (key, mut tx) = begin(ctx, name, &lock, origin)?;
        let acquired = with_queue(&lock, |queue| tx.acquire(queue, &request, wait.is_some()))?;
        handoff::commit(ctx, &lock, &key, tx);
        match (acquired?, wait) {
            (Acquired::Now(reply), _) => Ok(RedisValue::Integer(reply)),
            (Acquired::Wait, Some(wait)) => {
                enqueue(ctx, lock, request, wait, key.expires_at())?;
                Ok(RedisValue::NoReply)
            }
            (Acquired::Busy | Acquired::Wait, _) => Ok(RedisValue::Null),
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
    handoff::watch_for_waiters(ctx);
    let bc = ffi::block_client::<Blocked>(ctx)
        .ok_or_else(|| LockError::internal("the server refused to block the client"))?;
    let mut reg = match registry() {
        Ok(reg) => reg,
        Err(e) => {
            ffi::unblock::<Blocked>(bc, Some(Outcome::Failed(e.to_string())));
            return Ok(());
        }
    };
    let id = reg.next_serial();
    let deadline = match wait {
        Wait::Millis(ms) => Instant::now().checked_add(Duration::from_millis(ms.max(0) as u64)),
        Wait::Forever => None,
    };
    reg.enqueue(
        &lock,
        id,
        Waiter {
            request,
            bc,
            deadline,
        },
    );
    handoff::arm_wait_timer(ctx, &mut reg);
    drop(reg);
    handoff::ensure_lease_timer(ctx, &lock, || lease_end);
    Ok(())
}

/// `LOCK.RELEASE key owner`
pub fn release(ctx: &Context, args: &[RedisString]) -> RedisResult {
    run(ctx, || {
        let [_, name, owner_arg] = args else {
            return Err(LockError::arity("lock.release"));
        };
        let owner = parse_owner(owner_arg.as_slice())?;
        let lock = lock_id(ctx, name);
        let (key, mut tx) = begin(ctx, name, &lock, by(Some(owner_arg)))?;
        let left = with_queue(&lock, |queue| tx.release(queue, owner))?;
        handoff::commit(ctx, &lock, &key, tx);
        Ok(RedisValue::Integer(left?))
    })
}

/// `LOCK.RENEW key owner [PX ms | EX s]`
pub fn renew(ctx: &Context, args: &[RedisString]) -> RedisResult {
    run(ctx, || {
        let OwnerCall {
            name,
            owner,
            options,
        } = owner_call("lock.renew", args)?;
        let lease = parse_renew_options(options)?
            .lease_ms
            .unwrap_or_else(config::default_lease_ms);
        let lock = lock_id(ctx, name);
        let (key, mut tx) = begin(ctx, name, &lock, by(Some(owner)))?;
        let renewed = tx.renew(owner.as_slice(), lease);
        handoff::commit(ctx, &lock, &key, tx);
        Ok(RedisValue::Integer(renewed?))
    })
}

/// `LOCK.FORCERELEASE key`
pub fn force_release(ctx: &Context, args: &[RedisString]) -> RedisResult {
    run(ctx, || {
        let [_, name] = args else {
            return Err(LockError::arity("lock.forcerelease"));
        };
        let lock = lock_id(ctx, name);
        let (key, mut tx) = begin(ctx, name, &lock, by(None))?;
        let removed = with_queue(&lock, |queue| tx.force_release(queue))?;
        handoff::commit(ctx, &lock, &key, tx);
        Ok(RedisValue::Integer(removed))
    })
}

/// `LOCK.INFO key`
pub fn info(ctx: &Context, args: &[RedisString]) -> RedisResult {
    run(ctx, || {
        let [_, name] = args else {
            return Err(LockError::arity("lock.info"));
        };
        let Some((LockState::Held { owner, holds }, ttl)) = store::read_only(ctx, name)? else {
            return Ok(RedisValue::Null);
        };
        let lock = lock_id(ctx, name);
        let waiters = registry().map_or(0, |r| r.queue_len(&lock));
        let mut fields = vec![
            ("owner", Field::Bulk(&owner)),
            ("holds", Field::Int(holds)),
            ("ttl", Field::Int(ttl.unwrap_or(-1))),
            ("waiters", Field::Int(waiters as i64)),
        ];
        let token = store::existing_token(ctx, name.as_slice());
        if let Some(token) = token {
            fields.push(("token", Field::Int(token)));
        }
        ffi::reply_map(ctx, &fields);
        Ok(RedisValue::NoReply)
    })
}
