//! LOCK.ACQUIRE, LOCK.RELEASE, LOCK.RENEW, LOCK.FORCERELEASE, LOCK.INFO,
//! and the acquire shared with the read-write lock's commands. Each is a
//! straight line: parse, open and read the key, run the rules on the key's
//! wait queue, commit the transition, reply. RELEASE, RENEW, FORCERELEASE
//! and INFO serve both kinds of lock.

use std::borrow::Cow;
use std::time::{Duration, Instant};

use redis_module::{Context, ContextFlags, RedisResult, RedisString, RedisValue};

use super::run;
use crate::config;
use crate::ffi::{self, Field};
use crate::handoff::{self, begin, Blocked, Origin, Outcome};
use crate::rules::args::{
    parse_acquire_options, parse_owner, parse_renew_options, AcquireOptions, Wait,
};
use crate::rules::error::{printable, LockError};
use crate::rules::keys::{read_lease_key_in_slot, token_key_in_slot};
use crate::rules::lock::{Acquired, LockKind, LockState, Request};
use crate::rules::queue::Fifo;
use crate::rules::rwlock::Kind;
use crate::store;
use crate::waiters::{anyone_waits, registry, LockId, Registry, Waiter};

pub(super) fn lock_id<'k>(ctx: &Context, name: &'k RedisString) -> LockId<'k> {
    LockId {
        db: ffi::selected_db(ctx),
        key: Cow::Borrowed(name.as_slice()),
    }
}

/// Runs `rules` on the lock's wait queue; without waiters anywhere, on an
/// empty queue without touching the registry.
pub(super) fn with_queue<R>(
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
    acquire_as(ctx, args, "lock.acquire", LockKind::Exclusive)
}

/// Redis checks the caller's ACL key patterns on the declared key (the
/// lock) only; the other keys a grant writes are checked here, when the
/// call is made, also for a caller that then waits: a hand-off later writes
/// them on its behalf.
fn may_write(ctx: &Context, key: &[u8], what: &str) -> Result<(), LockError> {
    if ffi::may_update_key(ctx, key) {
        Ok(())
    } else {
        Err(LockError::no_permission(what, key))
    }
}

/// What an acquire of any kind asks for, and how long it may wait (not at
/// all inside MULTI, Lua or RM_Call, where a busy lock answers nil, as with
/// BLPOP), once the caller may write every key a grant writes besides the
/// lock: the fencing token keys of `locks` with FENCE, and a read hold's
/// lease key.
pub(super) fn acquire_request(
    ctx: &Context,
    locks: &[RedisString],
    owner: &RedisString,
    options: &AcquireOptions,
    kind: LockKind,
) -> Result<(Request, Option<Wait>), LockError> {
    for name in locks {
        if options.fence {
            let token = token_key_in_slot(name.as_slice())?;
            may_write(ctx, &token, "fencing token key")?;
        }
        if kind == LockKind::Read {
            let lease_key = read_lease_key_in_slot(name.as_slice(), owner.as_slice())?;
            may_write(ctx, &lease_key, "read hold lease key")?;
        }
    }
    let request = Request {
        owner: owner.as_slice().into(),
        lease_ms: options.lease_ms.unwrap_or_else(config::default_lease_ms),
        fence: options.fence,
        kind,
    };
    let wait = options
        .wait
        .filter(|_| !ctx.get_flags().contains(ContextFlags::DENY_BLOCKING));
    Ok((request, wait))
}

/// The acquire of every kind of lock:
/// `COMMAND key owner [PX ms | EX s] [BLOCK ms] [FENCE]`.
pub(super) fn acquire_as(
    ctx: &Context,
    args: &[RedisString],
    command: &str,
    kind: LockKind,
) -> RedisResult {
    run(ctx, || {
        let OwnerCall {
            name,
            owner,
            options,
        } = owner_call(command, args)?;
        let options = parse_acquire_options(options)?;
        let (request, wait) =
            acquire_request(ctx, std::slice::from_ref(name), owner, &options, kind)?;
        let lock = lock_id(ctx, name);
        let origin = Origin::Command {
            owner: Some(owner),
            fences: request.fence,
        };
        let (key, mut tx) = begin(ctx, name, &lock, origin)?;
        let acquired = with_queue(&lock, |queue| tx.acquire(queue, &request, wait.is_some()))?;
        let next_end = tx.next_end();
        handoff::commit(ctx, &lock, &key, tx);
        match (acquired?, wait) {
            (Acquired::Now(reply), _) => Ok(RedisValue::Integer(reply)),
            (Acquired::Wait, Some(wait)) => {
                drop(key);
                let lease_end = handoff::earliest(next_end, store::expires_at(ctx, name));
                enqueue(ctx, lock, request, wait, lease_end)?;
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
    block_caller(ctx, request, wait, |reg, waiter| {
        let id = reg.next_serial();
        reg.enqueue(&lock, id, waiter);
    })?;
    handoff::ensure_lease_timer(ctx, &lock, || lease_end);
    Ok(())
}

/// Blocks the caller and lets `place` queue it; the wait timer then
/// covers its BLOCK deadline. If the queues cannot be had, the caller is
/// answered the error at once.
pub(super) fn block_caller(
    ctx: &Context,
    request: Request,
    wait: Wait,
    place: impl FnOnce(&mut Registry, Waiter),
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
    let deadline = match wait {
        Wait::Millis(ms) => Instant::now().checked_add(Duration::from_millis(ms.max(0) as u64)),
        Wait::Forever => None,
    };
    place(
        &mut reg,
        Waiter {
            request,
            bc,
            deadline,
            group: None,
        },
    );
    handoff::arm_wait_timer(ctx, &mut reg);
    Ok(())
}

/// `LOCK.RELEASE key owner [READ | WRITE]`
pub fn release(ctx: &Context, args: &[RedisString]) -> RedisResult {
    run(ctx, || {
        let (name, owner_arg, kind) = match args {
            [_, name, owner] => (name, owner, None),
            [_, name, owner, kind] => (name, owner, Some(kind)),
            _ => return Err(LockError::arity("lock.release")),
        };
        let owner = parse_owner(owner_arg.as_slice())?;
        let kind = kind.map(|k| parse_release_kind(k.as_slice())).transpose()?;
        let lock = lock_id(ctx, name);
        let (key, mut tx) = begin(ctx, name, &lock, by(Some(owner_arg)))?;
        let left = with_queue(&lock, |queue| tx.release(queue, owner, kind))?;
        handoff::commit(ctx, &lock, &key, tx);
        Ok(RedisValue::Integer(left?))
    })
}

fn parse_release_kind(arg: &[u8]) -> Result<Kind, LockError> {
    if arg.eq_ignore_ascii_case(b"READ") {
        Ok(Kind::Read)
    } else if arg.eq_ignore_ascii_case(b"WRITE") {
        Ok(Kind::Write)
    } else {
        Err(LockError::syntax(format_args!(
            "expected READ or WRITE, got '{}'",
            printable(arg)
        )))
    }
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
        let (state, ttl) = match store::read_only(ctx, name)? {
            Some((LockState::Free, _)) | None => return Ok(RedisValue::Null),
            Some(read) => read,
        };
        let lock = lock_id(ctx, name);
        let waiters = registry().map_or(0, |r| r.queue_len(&lock));
        let ttl = ("ttl", Field::Int(ttl.unwrap_or(-1)));
        let waiters = ("waiters", Field::Int(waiters as i64));
        let mut fields = match &state {
            LockState::Held { owner, holds } => vec![
                ("owner", Field::Bulk(owner)),
                ("holds", Field::Int(*holds)),
                ttl,
                waiters,
            ],
            LockState::Shared(rw) => {
                // A reader whose every lease ran out no longer holds it.
                let readers = rw
                    .readers
                    .iter()
                    .filter(|r| !r.expired())
                    .map(|r| (&r.owner[..], r.holds))
                    .collect();
                let mut fields =
                    vec![("mode", Field::Bulk(rw.mode().map_or(b"read", |m| m.mode())))];
                if let Some((writer, holds)) = &rw.writer {
                    fields.push(("writer", Field::Bulk(writer)));
                    fields.push(("write_holds", Field::Int(*holds)));
                }
                fields.extend([("readers", Field::Counts(readers)), ttl, waiters]);
                fields
            }
            LockState::Free => return Ok(RedisValue::Null),
        };
        let token = store::existing_token(ctx, name.as_slice());
        if let Some(token) = token {
            fields.push(("token", Field::Int(token)));
        }
        ffi::reply_map(ctx, &fields);
        Ok(RedisValue::NoReply)
    })
}
