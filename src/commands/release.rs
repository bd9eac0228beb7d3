//! LOCK.RELEASE, LOCK.RENEW and LOCK.FORCERELEASE, on both kinds of lock: a
//! release (or a forced one) that frees the lock hands it to the first
//! waiter in the same command.

use redis_module::{Context, RedisResult, RedisString, RedisValue};

use super::{command, lock_id, owner_call, run, Command, OwnerCall, KEY, LEASE, OWNER};
use crate::engine::lock::begin;
use crate::engine::{self, Origin};
use crate::ffi::{ArgDoc, ArgKind, CommandSpec, KeyArgs, KEY_RW_DELETE, KEY_RW_UPDATE};
use crate::waiters::with_queue;
use crate::{acquisition, config, keepalive};
use lock_rules::args::{parse_owner, parse_renew_options};
use lock_rules::error::{printable, LockError};
use lock_rules::request::Side;

/// `LOCK.RELEASE key owner [READ | WRITE]`
pub const RELEASE: Command = command!(
    CommandSpec {
        name: c"lock.release",
        flags: c"write fast",
        acl_categories: "write hash fast",
        summary: c"Releases one hold on a lock; the last one hands it to the next waiter.",
        complexity: c"O(1) for an exclusive lock; O(N) for a read-write lock, N its read holds",
        since: c"1.0.0",
        arity: -3,
        key_flags: KEY_RW_DELETE,
        keys: KeyArgs::One,
        args: &[
            KEY,
            OWNER,
            ArgDoc {
                name: c"kind",
                kind: ArgKind::OneOf,
                token: None,
                optional: true,
                multiple: false,
                subargs: &[
                    ArgDoc {
                        optional: false,
                        ..super::option(c"read", ArgKind::Flag, c"READ")
                    },
                    ArgDoc {
                        optional: false,
                        ..super::option(c"write", ArgKind::Flag, c"WRITE")
                    },
                ],
            },
        ],
    },
    release
);

/// `LOCK.RENEW key owner [PX ms | EX s]`
pub const RENEW: Command = command!(
    CommandSpec {
        name: c"lock.renew",
        flags: c"write fast",
        acl_categories: "write hash fast",
        summary: c"Sets a new lease on a lock held by the owner.",
        complexity: c"O(1)",
        since: c"1.0.0",
        arity: -3,
        key_flags: KEY_RW_UPDATE,
        keys: KeyArgs::One,
        args: &[KEY, OWNER, LEASE, super::KEEPALIVE, super::SESSION_TOKEN],
    },
    renew
);

/// `LOCK.FORCERELEASE key`
pub const FORCERELEASE: Command = command!(
    CommandSpec {
        name: c"lock.forcerelease",
        flags: c"write fast",
        acl_categories: "write hash fast",
        summary: c"Removes a lock whoever holds it; the next waiter gets it.",
        complexity: c"O(1)",
        since: c"1.0.0",
        arity: 2,
        key_flags: KEY_RW_DELETE,
        keys: KeyArgs::One,
        args: &[KEY],
    },
    force_release
);

fn release(ctx: &Context, args: &[RedisString]) -> RedisResult {
    run(ctx, || {
        let (name, owner_arg, side) = match args {
            [_, name, owner] => (name, owner, None),
            [_, name, owner, side] => (name, owner, Some(side)),
            _ => return Err(LockError::arity(RELEASE.spec.name())),
        };
        let owner = parse_owner(owner_arg.as_slice())?;
        let side = side.map(|s| parse_side(s.as_slice())).transpose()?;
        let lock = lock_id(ctx, name);
        let (key, mut tx) = begin(ctx, name, &lock, Origin::caller(owner_arg, false))?;
        let left = with_queue(&lock, |queue| tx.release(queue, owner, side))?;
        if left.is_ok() {
            keepalive::released(&lock, owner, tx.state());
        }
        engine::lock::commit(ctx, &lock, &key, tx);
        Ok(RedisValue::Integer(left?))
    })
}

fn parse_side(arg: &[u8]) -> Result<Side, LockError> {
    if arg.eq_ignore_ascii_case(b"READ") {
        Ok(Side::Read)
    } else if arg.eq_ignore_ascii_case(b"WRITE") {
        Ok(Side::Write)
    } else {
        Err(LockError::syntax(format_args!(
            "expected READ or WRITE, got '{}'",
            printable(arg)
        )))
    }
}

fn renew(ctx: &Context, args: &[RedisString]) -> RedisResult {
    run(ctx, || {
        let OwnerCall {
            name,
            owner,
            options,
        } = owner_call(&RENEW.spec, args)?;
        let options = parse_renew_options(options)?;
        let lease = options.lease_ms.unwrap_or_else(config::default_lease_ms);
        let lock = lock_id(ctx, name);
        if let Some(how) = &options.keepalive {
            keepalive::may_keep_alive(ctx, how, lease)?;
        } else {
            keepalive::may_set_lease(&lock, owner.as_slice(), lease)?;
        }
        let (key, mut tx) = begin(ctx, name, &lock, Origin::caller(owner, false))?;
        let renewed = tx.renew(owner.as_slice(), lease);
        engine::lock::commit(ctx, &lock, &key, tx);
        let renewed = renewed?;
        acquisition::renewed(
            ctx,
            &lock,
            owner.as_slice(),
            lease,
            options.keepalive.as_ref(),
        );
        Ok(RedisValue::Integer(renewed))
    })
}

fn force_release(ctx: &Context, args: &[RedisString]) -> RedisResult {
    run(ctx, || {
        let [_, name] = args else {
            return Err(LockError::arity(FORCERELEASE.spec.name()));
        };
        let lock = lock_id(ctx, name);
        let (key, mut tx) = begin(
            ctx,
            name,
            &lock,
            Origin::Command {
                owner: None,
                fences: false,
            },
        )?;
        let owners: Vec<Vec<u8>> = tx
            .state()
            .owners()
            .into_iter()
            .map(<[u8]>::to_vec)
            .collect();
        let removed = with_queue(&lock, |queue| tx.force_release(queue))?;
        if removed == 1 {
            keepalive::unbind_lock(ctx, &lock, owners.iter().map(Vec::as_slice));
        }
        engine::lock::commit(ctx, &lock, &key, tx);
        Ok(RedisValue::Integer(removed))
    })
}
