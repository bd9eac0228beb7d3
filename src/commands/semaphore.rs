//! The SEM.* commands: semaphores in Redisson's layout (a counter of the
//! permits available and `{key}:timeout`, the permits held with their lease
//! ends). SEM.INIT, SEM.ADD set the permits; SEM.ACQUIRE, SEM.RELEASE and
//! SEM.RENEW take, give back and renew an owner's permits, which end with
//! their lease (or, with KEEPALIVE, with their holder's connection); SEM.TAKE
//! and SEM.GIVE are Redisson's owner-less `RSemaphore`; SEM.INFO shows it
//! all. Callers that wait queue in the key's one FIFO (the lock registry),
//! so LOCK.WAITERS, LOCK.QUEUES and LOCK.CANCEL see them.

use std::slice;

use redis_module::{Context, ContextFlags, RedisResult, RedisString, RedisValue};

use super::{
    acquire_request, arg, command, lock_id, may_write, option, owner_call, run, Command, OwnerCall,
    BLOCK, FENCE, KEEPALIVE, KEY, LEASE, OWNER, SESSION_TOKEN,
};
use crate::acquisition;
use crate::engine::semaphore::{self as kind, Transition};
use crate::engine::Origin;
use crate::ffi::{
    self, ArgDoc, ArgKind, CommandSpec, Field, KeyArgs, KEY_RO_ACCESS, KEY_RW_UPDATE,
};
use crate::waiters::{registry, with_queue, Waiter};
use crate::{config, deadlocks, keepalive, subscriptions};
use crate::{scratch, semaphore_key};
use lock_rules::args::{
    parse_amount, parse_permits_option, parse_renew_options, parse_semaphore_acquire_options,
    parse_take_options, Wait,
};
use lock_rules::deadlock::Holders;
use lock_rules::error::LockError;
use lock_rules::keys::{permits_key_in_slot, permits_key_slot_ok, write_permits_key};
use lock_rules::lock_id::LockId;
use lock_rules::queue::Fifo;
use lock_rules::request::{LockKind, Request};
use lock_rules::semaphore::MAX_PERMITS;
use lock_rules::transition::Acquisition;

const PERMITS: ArgDoc = option(c"permits", ArgKind::Integer, c"PERMITS");

/// `SEM.INIT key permits`
pub const INIT: Command = command!(
    CommandSpec {
        name: c"sem.init",
        flags: c"write deny-oom fast",
        acl_categories: "write string sortedset fast",
        summary: c"Sets a semaphore's permits if it has none yet (Redisson's trySetPermits).",
        complexity: c"O(N), N the permits held",
        since: c"1.2.0",
        arity: 3,
        key_flags: KEY_RW_UPDATE,
        keys: KeyArgs::One,
        args: &[KEY, arg(c"permits", ArgKind::Integer)],
    },
    init
);

/// `SEM.ACQUIRE key owner [PERMITS n] [PX ms | EX s] [KEEPALIVE | SESSION token] [BLOCK ms] [FENCE]`
pub const ACQUIRE: Command = command!(
    CommandSpec {
        name: c"sem.acquire",
        flags: c"write deny-oom blocking",
        acl_categories: "write string sortedset blocking",
        summary: c"Takes permits of a semaphore for an owner and a lease, optionally waiting in a FIFO queue.",
        complexity: c"O(N), N the permits held",
        since: c"1.2.0",
        arity: -3,
        key_flags: KEY_RW_UPDATE,
        keys: KeyArgs::One,
        args: &[KEY, OWNER, PERMITS, LEASE, KEEPALIVE, SESSION_TOKEN, BLOCK, FENCE],
    },
    acquire
);

/// `SEM.RELEASE key owner [PERMITS n]`
pub const RELEASE: Command = command!(
    CommandSpec {
        name: c"sem.release",
        flags: c"write fast",
        acl_categories: "write string sortedset fast",
        summary: c"Gives back an owner's permits of a semaphore, serving its queue.",
        complexity: c"O(N), N the permits held",
        since: c"1.2.0",
        arity: -3,
        key_flags: KEY_RW_UPDATE,
        keys: KeyArgs::One,
        args: &[KEY, OWNER, PERMITS],
    },
    release
);

/// `SEM.RENEW key owner [PX ms | EX s] [KEEPALIVE | SESSION token]`
pub const RENEW: Command = command!(
    CommandSpec {
        name: c"sem.renew",
        flags: c"write fast",
        acl_categories: "write string sortedset fast",
        summary: c"Sets a new lease on an owner's permits of a semaphore.",
        complexity: c"O(N), N the permits held",
        since: c"1.2.0",
        arity: -3,
        key_flags: KEY_RW_UPDATE,
        keys: KeyArgs::One,
        args: &[KEY, OWNER, LEASE, KEEPALIVE, SESSION_TOKEN],
    },
    renew
);

/// `SEM.ADD key delta`
pub const ADD: Command = command!(
    CommandSpec {
        name: c"sem.add",
        flags: c"write deny-oom fast",
        acl_categories: "write string sortedset fast",
        summary: c"Adds permits to a semaphore (or takes them away), serving its queue.",
        complexity: c"O(N), N the permits held",
        since: c"1.2.0",
        arity: 3,
        key_flags: KEY_RW_UPDATE,
        keys: KeyArgs::One,
        args: &[KEY, arg(c"delta", ArgKind::Integer)],
    },
    add
);

/// `SEM.TAKE key [PERMITS n] [BLOCK ms]`
pub const TAKE: Command = command!(
    CommandSpec {
        name: c"sem.take",
        flags: c"write deny-oom blocking",
        acl_categories: "write string sortedset blocking",
        summary: c"Takes owner-less permits of a semaphore (Redisson's RSemaphore), optionally waiting in its FIFO queue.",
        complexity: c"O(N), N the permits held",
        since: c"1.2.0",
        arity: -2,
        key_flags: KEY_RW_UPDATE,
        keys: KeyArgs::One,
        args: &[KEY, PERMITS, BLOCK],
    },
    take
);

/// `SEM.GIVE key [PERMITS n]`
pub const GIVE: Command = command!(
    CommandSpec {
        name: c"sem.give",
        flags: c"write deny-oom fast",
        acl_categories: "write string sortedset fast",
        summary: c"Gives owner-less permits to a semaphore (Redisson's RSemaphore release), serving its queue.",
        complexity: c"O(N), N the permits held",
        since: c"1.2.0",
        arity: -2,
        key_flags: KEY_RW_UPDATE,
        keys: KeyArgs::One,
        args: &[KEY, PERMITS],
    },
    give
);

/// `SEM.INFO key`
pub const INFO: Command = command!(
    CommandSpec {
        name: c"sem.info",
        flags: c"readonly",
        acl_categories: "read string sortedset",
        summary: c"Returns a semaphore's permits, available permits, holders and waiters.",
        complexity: c"O(N), N the permits held",
        since: c"1.2.0",
        arity: 2,
        key_flags: KEY_RO_ACCESS,
        keys: KeyArgs::One,
        args: &[KEY],
    },
    info
);

/// The permit set must be in the semaphore's slot, and the caller's ACL
/// user may write it (it is not among the command's declared keys).
fn check_permits_key(ctx: &Context, name: &RedisString) -> Result<(), LockError> {
    let name = name.as_slice();
    scratch::with_name(
        |buf| write_permits_key(name, buf),
        |permits| {
            permits_key_slot_ok(name, permits)?;
            may_write(ctx, permits, "semaphore permit key")
        },
    )
}

/// Begins a transition of `name` for a command, runs `rules` on its queue,
/// commits, and hands back what the rules said.
fn change<R>(
    ctx: &Context,
    name: &RedisString,
    origin: Origin<'_>,
    rules: impl FnOnce(&mut Transition, &mut Fifo<Waiter>) -> R,
) -> Result<R, LockError> {
    check_permits_key(ctx, name)?;
    let lock = lock_id(ctx, name);
    let (keys, mut tx) = kind::begin(ctx, name, &lock, origin)?;
    let result = with_queue(&lock, |queue| rules(&mut tx, queue))?;
    kind::commit(ctx, &lock, &keys, tx);
    Ok(result)
}

fn init(ctx: &Context, args: &[RedisString]) -> RedisResult {
    run(ctx, || {
        let [_, name, permits] = args else {
            return Err(LockError::arity(INIT.spec.name()));
        };
        let permits = parse_amount("permits", permits.as_slice(), 0, MAX_PERMITS)?;
        let set = change(ctx, name, Origin::WITHOUT_OWNER, |tx, queue| {
            tx.init(queue, permits)
        })?;
        Ok(RedisValue::Integer(i64::from(set)))
    })
}

fn add(ctx: &Context, args: &[RedisString]) -> RedisResult {
    run(ctx, || {
        let [_, name, delta] = args else {
            return Err(LockError::arity(ADD.spec.name()));
        };
        let delta = parse_amount("delta", delta.as_slice(), -MAX_PERMITS, MAX_PERMITS)?;
        let available = change(ctx, name, Origin::WITHOUT_OWNER, |tx, queue| {
            tx.add(queue, delta)
        })??;
        Ok(RedisValue::Integer(available))
    })
}

fn acquire(ctx: &Context, args: &[RedisString]) -> RedisResult {
    run(ctx, || {
        let OwnerCall {
            name,
            owner,
            options,
        } = owner_call(&ACQUIRE.spec, args)?;
        let (options, n) = parse_semaphore_acquire_options(options)?;
        let (request, wait) = acquire_request(
            ctx,
            slice::from_ref(name),
            owner,
            &options,
            LockKind::Permits(n),
        )?;
        take_permits(
            ctx,
            name,
            &request,
            wait,
            Origin::caller(owner, request.fence),
        )
    })
}

fn take(ctx: &Context, args: &[RedisString]) -> RedisResult {
    run(ctx, || {
        let [_, name, options @ ..] = args else {
            return Err(LockError::arity(TAKE.spec.name()));
        };
        let (n, wait) = parse_take_options(options)?;
        let wait = wait.filter(|_| !ctx.get_flags().contains(ContextFlags::DENY_BLOCKING));
        let request = kind::request(b"", 0, false, n);
        take_permits(ctx, name, &request, wait, Origin::WITHOUT_OWNER)
    })
}

/// SEM.ACQUIRE and SEM.TAKE: the permits at once, or the caller queued.
fn take_permits(
    ctx: &Context,
    name: &RedisString,
    request: &Request,
    wait: Option<Wait>,
    origin: Origin<'_>,
) -> Result<RedisValue, LockError> {
    check_permits_key(ctx, name)?;
    let lock = lock_id(ctx, name);
    let (keys, mut tx) = kind::begin(ctx, name, &lock, origin)?;
    let owned = !request.owner.is_empty();
    let held = owned && tx.held_by(&request.owner) > 0;
    if held && request.keepalive.is_none() {
        keepalive::may_set_lease(&lock, &request.owner, request.lease_ms)?;
    }
    let acquired = with_queue(&lock, |queue| tx.acquire(queue, request, wait.is_some()))?;
    let next_end = tx.next_end();
    // Whom the caller would wait for, as the rules left the semaphore.
    let holders = match (&acquired, wait) {
        (Ok(Acquisition::Wait), Some(_)) if owned && deadlocks::checks_at_wait() => {
            deadlocks::semaphore_holders_to_check(&lock, &request.owner, tx.state(), tx.now_ms())
        }
        _ => Holders::default(),
    };
    kind::commit(ctx, &lock, &keys, tx);
    drop(keys);
    match (acquired?, wait) {
        (Acquisition::Now(reply), _) => {
            if owned {
                acquisition::granted(ctx, &lock, request, held);
            }
            Ok(RedisValue::Integer(reply))
        }
        (Acquisition::Wait, Some(wait)) => {
            deadlocks::check(ctx, &request.owner, &[(lock.clone(), holders)])?;
            enqueue(ctx, &lock, request, wait, next_end)?;
            Ok(RedisValue::NoReply)
        }
        (Acquisition::Busy | Acquisition::Wait, _) => Ok(RedisValue::Null),
    }
}

fn enqueue(
    ctx: &Context,
    lock: &LockId<'_>,
    request: &Request,
    wait: Wait,
    next_end: Option<i64>,
) -> Result<(), LockError> {
    // A Redisson client gives permits back with INCRBY: a string event.
    subscriptions::watch_strings(ctx);
    acquisition::enqueue(
        ctx,
        &[lock.to_owned()],
        request,
        wait,
        &[next_end],
        |reg, locks, waiter| {
            let id = reg.next_serial();
            reg.enqueue(&locks[0], id, waiter);
        },
    )
}

fn release(ctx: &Context, args: &[RedisString]) -> RedisResult {
    run(ctx, || {
        let OwnerCall {
            name,
            owner,
            options,
        } = owner_call(&RELEASE.spec, args)?;
        let n = parse_permits_option(options)?;
        let origin = Origin::caller(owner, false);
        let left = change(ctx, name, origin, |tx, queue| {
            tx.release(queue, owner.as_slice(), n)
        })?;
        if !matches!(left, Ok(n) if n > 0) {
            keepalive::released_all(&lock_id(ctx, name), owner.as_slice());
        }
        Ok(RedisValue::Integer(left?))
    })
}

fn renew(ctx: &Context, args: &[RedisString]) -> RedisResult {
    run(ctx, || {
        let OwnerCall {
            name,
            owner,
            options,
        } = owner_call(&RENEW.spec, args)?;
        let options = parse_renew_options(options)?;
        let lease_ms = options.lease_ms.unwrap_or_else(config::default_lease_ms);
        let lock = lock_id(ctx, name);
        match &options.keepalive {
            Some(how) => keepalive::may_keep_alive(ctx, how, lease_ms)?,
            None => keepalive::may_set_lease(&lock, owner.as_slice(), lease_ms)?,
        }
        let origin = Origin::caller(owner, false);
        let held = change(ctx, name, origin, |tx, queue| {
            tx.renew(queue, owner.as_slice(), lease_ms)
        })??;
        acquisition::renewed(
            ctx,
            &lock,
            owner.as_slice(),
            lease_ms,
            options.keepalive.as_ref(),
        );
        Ok(RedisValue::Integer(held))
    })
}

fn give(ctx: &Context, args: &[RedisString]) -> RedisResult {
    run(ctx, || {
        let [_, name, options @ ..] = args else {
            return Err(LockError::arity(GIVE.spec.name()));
        };
        let n = parse_permits_option(options)?.unwrap_or(1);
        let available = change(ctx, name, Origin::WITHOUT_OWNER, |tx, queue| {
            tx.give(queue, n)
        })??;
        Ok(RedisValue::Integer(available))
    })
}

fn info(ctx: &Context, args: &[RedisString]) -> RedisResult {
    run(ctx, || {
        let [_, name] = args else {
            return Err(LockError::arity(INFO.spec.name()));
        };
        let permits = permits_key_in_slot(name.as_slice())?;
        if !ffi::may_read_key(ctx, &permits) {
            return Err(LockError::no_permission("semaphore permit key", &permits));
        }
        let Some(state) = semaphore_key::read_only(ctx, name)? else {
            return Ok(RedisValue::Null);
        };
        let now = ffi::now_ms();
        let view = state.view(now);
        let lock = lock_id(ctx, name);
        let waiters = registry().map_or(0, |r| r.queue_len(&lock));
        let holders = view
            .holders
            .iter()
            .map(|h| {
                let mut fields = vec![
                    ("owner", Field::Bulk(&h.owner)),
                    ("permits", Field::Int(h.permits)),
                    ("ttl", Field::Int(h.ttl_ms(now))),
                ];
                if let Some(client) = keepalive::client_of(&lock, &h.owner) {
                    fields.push(("keepalive_client", Field::Int(client as i64)));
                }
                fields
            })
            .collect();
        ffi::reply_map(
            ctx,
            &[
                ("permits", Field::Int(view.permits)),
                ("available", Field::Int(view.available)),
                ("holders", Field::Maps(holders)),
                ("waiters", Field::Int(waiters as i64)),
            ],
        );
        Ok(RedisValue::NoReply)
    })
}
