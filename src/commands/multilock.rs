//! LOCK.MACQUIRE and LOCK.MRELEASE: several exclusive locks taken or
//! released together, all or none. Every key is opened and run through the
//! same rules as LOCK.ACQUIRE / LOCK.RELEASE; the changes of all keys are
//! committed in the same command, so they are replicated in one MULTI/EXEC.

use std::ffi::CStr;

use redis_module::{Context, RedisResult, RedisString, RedisValue};

use super::{
    acquire_request, arg, command, lock_id, run, with_queue, Command, BLOCK, FENCE, KEEPALIVE,
    LEASE, OWNER,
};
use crate::ffi::{self, ArgDoc, ArgKind, CommandSpec, KeyArgs, KEY_RW_DELETE, KEY_RW_UPDATE};
use crate::handoff::{self, begin, Origin};
use crate::keepalive::{self, Taken};
use crate::store::{self, LockKey};
use crate::waiters::Waiter;
use crate::{blocking, events, lease};
use lock_rules::args::{parse_acquire_options, parse_owner, Wait};
use lock_rules::error::LockError;
use lock_rules::lock_id::LockId;
use lock_rules::multilock::{access, check_distinct, parse_numkeys, KeyAccess};
use lock_rules::request::{LockKind, Request};
use lock_rules::state::LockState;
use lock_rules::transition::Transition;

const NUMKEYS: ArgDoc = arg(c"numkeys", ArgKind::Integer);
const KEYS: ArgDoc = ArgDoc {
    multiple: true,
    ..arg(c"key", ArgKind::Key)
};

/// `LOCK.MACQUIRE numkeys key [key ...] owner [PX ms | EX s] [BLOCK ms] [FENCE]`
pub const MACQUIRE: Command = command!(
    CommandSpec {
        name: c"lock.macquire",
        flags: c"write deny-oom blocking getkeys-api",
        acl_categories: "write hash blocking",
        summary: c"Acquires several reentrant locks at once, all or none, optionally waiting for all of them as one FIFO waiter.",
        complexity: c"O(N), N the number of keys",
        since: c"1.1.0",
        arity: -4,
        key_flags: KEY_RW_UPDATE,
        keys: KeyArgs::NumKeys,
        args: &[NUMKEYS, KEYS, OWNER, LEASE, BLOCK, FENCE, KEEPALIVE],
    },
    acquire
);

/// `LOCK.MRELEASE numkeys key [key ...] owner`
pub const MRELEASE: Command = command!(
    CommandSpec {
        name: c"lock.mrelease",
        flags: c"write fast getkeys-api",
        acl_categories: "write hash fast",
        summary: c"Releases one hold on each of several locks, all or none.",
        complexity: c"O(N), N the number of keys",
        since: c"1.1.0",
        arity: -4,
        key_flags: KEY_RW_DELETE,
        keys: KeyArgs::NumKeys,
        args: &[NUMKEYS, KEYS, OWNER],
    },
    release
);

/// `COMMAND numkeys key [key ...] owner [options...]`, split.
struct MultiCall<'a> {
    names: &'a [RedisString],
    owner: &'a RedisString,
    options: &'a [RedisString],
}

fn multi_call<'a>(command: &CStr, args: &'a [RedisString]) -> Result<MultiCall<'a>, LockError> {
    if args.len() < 4 {
        return Err(LockError::arity(command.to_str().unwrap_or("lock")));
    }
    let raw: Vec<&[u8]> = args[1..].iter().map(|a| a.as_slice()).collect();
    let n = parse_numkeys(&raw)?;
    let names = &args[2..2 + n];
    let owner = &args[2 + n];
    parse_owner(owner.as_slice())?;
    let keys: Vec<&[u8]> = names.iter().map(|k| k.as_slice()).collect();
    check_distinct(&keys)?;
    Ok(MultiCall {
        names,
        owner,
        options: &args[3 + n..],
    })
}

type Opened<'c> = Vec<(LockId<'c>, LockKey<'c>, Transition<Waiter>)>;

/// Opens every key and starts its transition.
fn open_all<'c>(
    ctx: &'c Context,
    names: &'c [RedisString],
    origin: Origin<'c>,
) -> Result<Opened<'c>, LockError> {
    names
        .iter()
        .map(|name| {
            let lock = lock_id(ctx, name);
            let (key, tx) = begin(ctx, name, &lock, origin)?;
            Ok((lock, key, tx))
        })
        .collect()
}

/// Answers Redis's question "which arguments are keys": Redis 7.0 routes a
/// cluster command (MOVED, CROSSSLOT) by asking a `getkeys-api` command,
/// and by the legacy first/last/step otherwise, which cannot express
/// `numkeys key [key ...]`. A call it cannot parse names no key; it is
/// refused when it runs.
fn keys_position_request(ctx: &Context, args: &[RedisString]) -> bool {
    if !ffi::is_keys_position_request(ctx) {
        return false;
    }
    let raw: Vec<&[u8]> = args.iter().skip(1).map(|a| a.as_slice()).collect();
    if let Ok(n) = parse_numkeys(&raw) {
        for pos in 2..2 + n {
            ffi::key_at_pos(ctx, pos);
        }
    }
    true
}

/// Runs a multi-key command's body on its split arguments, or answers
/// Redis's keys position request.
fn multi_command<'a>(
    ctx: &'a Context,
    args: &'a [RedisString],
    command: &CStr,
    body: impl FnOnce(MultiCall<'a>) -> Result<RedisValue, LockError>,
) -> RedisResult {
    if keys_position_request(ctx, args) {
        return Ok(RedisValue::NoReply);
    }
    run(ctx, || body(multi_call(command, args)?))
}

fn acquire(ctx: &Context, args: &[RedisString]) -> RedisResult {
    multi_command(ctx, args, MACQUIRE.spec.name, |call| {
        let MultiCall {
            names,
            owner,
            options,
        } = call;
        let options = parse_acquire_options(options)?;
        let (request, wait) = acquire_request(ctx, names, owner, &options, LockKind::Exclusive)?;
        let origin = Origin::Command {
            owner: Some(owner),
            fences: request.fence,
        };
        let mut opened = open_all(ctx, names, origin)?;

        // Waiters already queued on a key are served first, as for one key.
        // Whatever goes wrong, every transition is committed: a settle may
        // have handed a key on, and its waiter must hear.
        let mut ready = true;
        let mut refused = None;
        let mut re_entries = Vec::with_capacity(opened.len());
        for (lock, _, tx) in &mut opened {
            let first_in_line = with_queue(lock, |queue| {
                tx.settle(queue);
                queue.is_empty()
            });
            let access =
                first_in_line.and_then(|first| access(tx.state(), owner.as_slice(), first));
            let access = match access {
                // A hold kept alive takes no lease it could not be kept
                // alive with.
                Ok(KeyAccess::Reentry) if !request.keepalive => {
                    keepalive::may_set_lease(lock, owner.as_slice(), request.lease_ms)
                        .map(|()| KeyAccess::Reentry)
                }
                access => access,
            };
            re_entries.push(matches!(access, Ok(KeyAccess::Reentry)));
            match access {
                Ok(KeyAccess::Free | KeyAccess::Reentry) => {}
                Ok(KeyAccess::Busy) => ready = false,
                Err(e) => refused = refused.or(Some(e)),
            }
        }
        if refused.is_none() && ready {
            refused = opened
                .iter()
                .find_map(|(_, _, tx)| tx.check_take(&request).err());
        }
        if let Some(e) = refused {
            handoff::commit_all(ctx, opened);
            return Err(e);
        }
        if ready {
            let replies: Result<Vec<RedisValue>, LockError> = opened
                .iter_mut()
                .map(|(_, _, tx)| tx.take(&request).map(RedisValue::Integer))
                .collect();
            let locks: Vec<LockId<'static>> = opened.iter().map(|(l, _, _)| l.to_owned()).collect();
            handoff::commit_all(ctx, opened);
            if replies.is_ok() {
                events::watch_expiry(ctx);
                if request.keepalive {
                    events::watch_clients(ctx);
                }
                for (lock, re_entry) in locks.iter().zip(re_entries) {
                    let how = match (request.keepalive, re_entry) {
                        (true, _) => Taken::KeepAlive,
                        (false, true) => Taken::Reentry,
                        (false, false) => Taken::Fresh,
                    };
                    keepalive::taken(ctx, lock, owner.as_slice(), how, request.lease_ms);
                }
            }
            return replies.map(RedisValue::Array);
        }
        let locks: Vec<LockId<'static>> = opened.iter().map(|(l, _, _)| l.to_owned()).collect();
        handoff::commit_all(ctx, opened);
        // Read after the commits: a hand-off among them moves a deadline.
        let lease_ends: Vec<Option<i64>> = names
            .iter()
            .map(|name| store::expires_at(ctx, name))
            .collect();
        match wait {
            Some(wait) => {
                enqueue_group(ctx, &locks, request, wait, &lease_ends)?;
                Ok(RedisValue::NoReply)
            }
            None => Ok(RedisValue::Null),
        }
    })
}

/// Blocks the caller with an entry at the tail of every key's queue.
fn enqueue_group(
    ctx: &Context,
    locks: &[LockId<'static>],
    request: Request,
    wait: Wait,
    lease_ends: &[Option<i64>],
) -> Result<(), LockError> {
    events::watch_for_waiters(ctx);
    blocking::block_caller(ctx, request, wait, |reg, waiter| {
        let ids: Vec<u64> = locks.iter().map(|_| reg.next_serial()).collect();
        reg.enqueue_group(locks, &ids, waiter);
    })?;
    for (lock, lease_end) in locks.iter().zip(lease_ends) {
        lease::ensure_lease_timer(ctx, lock, || *lease_end);
    }
    Ok(())
}

fn release(ctx: &Context, args: &[RedisString]) -> RedisResult {
    multi_command(ctx, args, MRELEASE.spec.name, |call| {
        let MultiCall {
            names,
            owner,
            options,
        } = call;
        if !options.is_empty() {
            return Err(LockError::arity(MRELEASE.spec.name()));
        }
        let mut opened = open_all(
            ctx,
            names,
            Origin::Command {
                owner: Some(owner),
                fences: false,
            },
        )?;
        let who = owner.as_slice();
        let refused = opened.iter().find_map(|(_, _, tx)| match tx.state() {
            LockState::Shared(_) => Some(LockError::holds_read_write_lock()),
            state if state.holds_of(who).is_none() => Some(LockError::not_owner()),
            _ => None,
        });
        if let Some(e) = refused {
            handoff::commit_all(ctx, opened);
            return Err(e);
        }
        let left: Result<Vec<RedisValue>, LockError> = opened
            .iter_mut()
            .map(|(lock, _, tx)| {
                with_queue(lock, |queue| tx.release(queue, who, None))
                    .and_then(|holds| holds.map(RedisValue::Integer))
            })
            .collect();
        for (lock, _, tx) in &opened {
            if !tx.state().held_by(who) {
                keepalive::unbind(lock, who);
            }
        }
        handoff::commit_all(ctx, opened);
        left.map(RedisValue::Array)
    })
}
