//! The LATCH.* commands: count-down latches in Redisson's `RCountDownLatch`
//! layout (the count in a string key, deleted at zero). LATCH.INIT sets
//! one, LATCH.COUNTDOWN counts it down and opens it at zero, LATCH.AWAIT
//! waits in the server until it opens (`latches.rs`), LATCH.INFO shows it.
//! Writes are replicated as `SET` (with the absolute `PXAT` of a latch
//! that expires) and `DEL`.

use redis_module::{Context, ContextFlags, RedisResult, RedisString, RedisValue};

use super::{arg, command, run, Command, BLOCK, KEY, LEASE};
use crate::engine::Origin;
use crate::ffi::{self, ArgDoc, ArgKind, CommandSpec, Field, Key, KeyArgs, KeyKind, Native};
use crate::ffi::{KEY_RO_ACCESS, KEY_RW_UPDATE};
use crate::native_writes::{self, notify_own};
use crate::replication::Replication;
use crate::stats::{Stats, STATS};
use crate::store;
use crate::{latches, subscriptions};
use lock_rules::args::{parse_amount, parse_block_option, parse_lease_option};
use lock_rules::error::LockError;
use lock_rules::keys::latch_channel;
use lock_rules::latch::{count_down, is_open, parse_count, MAX_COUNT};

/// `LATCH.INIT key count [PX ms | EX s]`
pub const INIT: Command = command!(
    CommandSpec {
        name: c"latch.init",
        flags: c"write deny-oom fast",
        acl_categories: "write string fast",
        summary: c"Sets a count-down latch if it does not exist (Redisson's trySetCount), optionally with an expiry.",
        complexity: c"O(1)",
        since: c"1.2.0",
        arity: -3,
        key_flags: KEY_RW_UPDATE,
        keys: KeyArgs::One,
        args: &[KEY, arg(c"count", ArgKind::Integer), LEASE],
    },
    init
);

/// `LATCH.COUNTDOWN key [n]`
pub const COUNTDOWN: Command = command!(
    CommandSpec {
        name: c"latch.countdown",
        flags: c"write fast",
        acl_categories: "write string fast",
        summary:
            c"Counts a latch down; at zero it is deleted and every caller awaiting it is answered.",
        complexity: c"O(1), O(N) at zero, N the callers awaiting the latch",
        since: c"1.2.0",
        arity: -2,
        key_flags: KEY_RW_UPDATE,
        keys: KeyArgs::One,
        args: &[
            KEY,
            ArgDoc {
                optional: true,
                ..arg(c"n", ArgKind::Integer)
            },
        ],
    },
    countdown
);

/// `LATCH.AWAIT key [BLOCK ms]`
pub const AWAIT: Command = command!(
    CommandSpec {
        name: c"latch.await",
        flags: c"readonly blocking",
        acl_categories: "read string blocking",
        summary: c"Answers 0 once a latch is open, waiting in the server for it with BLOCK.",
        complexity: c"O(1)",
        since: c"1.2.0",
        arity: -2,
        key_flags: KEY_RO_ACCESS,
        keys: KeyArgs::One,
        args: &[KEY, BLOCK],
    },
    await_latch
);

/// `LATCH.INFO key`
pub const INFO: Command = command!(
    CommandSpec {
        name: c"latch.info",
        flags: c"readonly fast",
        acl_categories: "read string fast",
        summary: c"Returns a latch's count, time to live and the callers awaiting it.",
        complexity: c"O(1)",
        since: c"1.2.0",
        arity: 2,
        key_flags: KEY_RO_ACCESS,
        keys: KeyArgs::One,
        args: &[KEY],
    },
    info
);

/// A latch's count, `None` when the key does not exist.
fn read_count(key: Option<&Key>) -> Result<Option<i64>, LockError> {
    match key.map(Key::kind) {
        None | Some(KeyKind::Empty) => Ok(None),
        Some(KeyKind::String) => match key {
            Some(key) => parse_count(&key.string_value()).map(Some),
            None => Ok(None),
        },
        Some(_) => Err(LockError::wrong_type()),
    }
}

fn init(ctx: &Context, args: &[RedisString]) -> RedisResult {
    run(ctx, || {
        let [_, name, count, options @ ..] = args else {
            return Err(LockError::arity(INIT.spec.name()));
        };
        let count = parse_amount("count", count.as_slice(), 1, MAX_COUNT)?;
        let lease = parse_lease_option(options)?;
        let native = Origin::WITHOUT_OWNER.parts(ctx)?.2 == Replication::Native;
        let key =
            Key::open(ctx, name, true).ok_or_else(|| LockError::internal("cannot open key"))?;
        if key.kind() != KeyKind::Empty {
            return Ok(RedisValue::Integer(0));
        }
        let at = match lease {
            Some(ms) => Some(
                ffi::now_ms()
                    .checked_add(ms)
                    .ok_or_else(LockError::lease_overflow)?,
            ),
            None => None,
        };
        native_writes::set_counter(ctx, name, &key, count, at, native);
        let channel = latch_channel(name.as_slice());
        store::publish_for_redisson(ctx, &channel, b"1", native);
        Ok(RedisValue::Integer(1))
    })
}

fn countdown(ctx: &Context, args: &[RedisString]) -> RedisResult {
    run(ctx, || {
        let (name, n) = match args {
            [_, name] => (name, 1),
            [_, name, n] => (name, parse_amount("n", n.as_slice(), 1, MAX_COUNT)?),
            _ => return Err(LockError::arity(COUNTDOWN.spec.name())),
        };
        let native = Origin::WITHOUT_OWNER.parts(ctx)?.2 == Replication::Native;
        let key =
            Key::open(ctx, name, true).ok_or_else(|| LockError::internal("cannot open key"))?;
        let Some(count) = read_count(Some(&key))? else {
            // Open already (or never set): nothing to count down.
            return Ok(RedisValue::Integer(0));
        };
        let left = count_down(count, n);
        if left > 0 {
            let at = key.expires_at();
            native_writes::set_counter(ctx, name, &key, left, at, native);
            return Ok(RedisValue::Integer(left));
        }
        key.delete();
        drop(key);
        if native {
            ffi::replicate(ctx, name, Native::Del);
        } else {
            ffi::count_unpropagated_change(ctx);
        }
        notify_own(ctx, ffi::NOTIFY_GENERIC, c"del", name);
        ffi::signal_modified(ctx, name);
        store::publish_for_redisson(ctx, &latch_channel(name.as_slice()), b"0", native);
        Stats::bump(&STATS.latches_opened);
        latches::opened(ctx, ffi::selected_db(ctx), name.as_slice());
        Ok(RedisValue::Integer(0))
    })
}

fn await_latch(ctx: &Context, args: &[RedisString]) -> RedisResult {
    run(ctx, || {
        let [_, name, options @ ..] = args else {
            return Err(LockError::arity(AWAIT.spec.name()));
        };
        let wait = parse_block_option(options)?;
        let key = Key::open(ctx, name, false);
        let count = read_count(key.as_ref())?;
        if count.is_none_or(is_open) {
            return Ok(RedisValue::Integer(0));
        }
        let flags = ctx.get_flags();
        let Some(wait) = wait.filter(|_| !flags.contains(ContextFlags::DENY_BLOCKING)) else {
            return Ok(RedisValue::Null);
        };
        // A replica hears the master's count-down to zero as a DEL: its
        // waiters could not tell an open latch from a deleted one.
        if !flags.contains(ContextFlags::MASTER) {
            return Err(LockError::replica());
        }
        let expires_at = key.and_then(|k| k.expires_at());
        subscriptions::watch_for_waiters(ctx);
        subscriptions::watch_strings(ctx);
        latches::block(
            ctx,
            ffi::selected_db(ctx),
            name.as_slice(),
            wait,
            expires_at,
        )?;
        Ok(RedisValue::NoReply)
    })
}

fn info(ctx: &Context, args: &[RedisString]) -> RedisResult {
    run(ctx, || {
        let [_, name] = args else {
            return Err(LockError::arity(INFO.spec.name()));
        };
        let key = Key::open(ctx, name, false);
        let Some(count) = read_count(key.as_ref())? else {
            return Ok(RedisValue::Null);
        };
        let ttl = key.and_then(|k| k.ttl_ms()).unwrap_or(-1);
        let waiters = latches::waiting(ffi::selected_db(ctx), name.as_slice());
        ffi::reply_map(
            ctx,
            &[
                ("count", Field::Int(count.max(0))),
                ("ttl", Field::Int(ttl)),
                ("waiters", Field::Int(waiters as i64)),
            ],
        );
        Ok(RedisValue::NoReply)
    })
}
