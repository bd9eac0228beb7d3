//! LOCK.MACQUIRE and LOCK.MRELEASE: several exclusive locks taken or
//! released together, all or none. Every key is opened and run through the
//! same rules as LOCK.ACQUIRE / LOCK.RELEASE; the changes of all keys are
//! committed in the same command, so they are replicated in one MULTI/EXEC.

use std::ffi::CStr;

use redis_module::{Context, RedisResult, RedisString, RedisValue};

use super::{
    acquire_request, arg, command, lock_id, run, Command, BLOCK, FENCE, KEEPALIVE, LEASE, OWNER,
    SESSION_TOKEN,
};
use crate::engine::lock::begin;
use crate::engine::{self, Origin};
use crate::ffi::{self, ArgDoc, ArgKind, CommandSpec, KeyArgs, KEY_RW_DELETE, KEY_RW_UPDATE};
use crate::store::LockKey;
use crate::waiters::{with_queue, Waiter};
use crate::{acquisition, keepalive};
use lock_rules::args::{parse_acquire_options, parse_owner};
use lock_rules::error::LockError;
use lock_rules::lock_id::LockId;
use lock_rules::multilock::{check_distinct, may_release_all, parse_numkeys};
use lock_rules::request::LockKind;
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
        args: &[NUMKEYS, KEYS, OWNER, LEASE, BLOCK, FENCE, KEEPALIVE, SESSION_TOKEN],
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
        let opened = open_all(ctx, names, Origin::caller(owner, request.fence))?;
        acquisition::acquire_all(ctx, opened, &request, wait)
    })
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
        let mut opened = open_all(ctx, names, Origin::caller(owner, false))?;
        let who = owner.as_slice();
        let left =
            may_release_all(opened.iter().map(|(_, _, tx)| tx.state()), who).and_then(|()| {
                opened
                    .iter_mut()
                    .map(|(lock, _, tx)| {
                        let left = with_queue(lock, |queue| tx.release(queue, who, None))??;
                        keepalive::released(lock, who, tx.state());
                        Ok(RedisValue::Integer(left))
                    })
                    .collect::<Result<Vec<_>, LockError>>()
            });
        engine::lock::commit_all(ctx, opened);
        left.map(RedisValue::Array)
    })
}
