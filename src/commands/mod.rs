//! The LOCK.* commands, one file per family, each command declared next to
//! its handler (name, flags, ACL categories, arity, key spec and docs in one
//! [`Command`]); [`ALL`] is the table the module registers.
//!
//! Every handler is a straight line: parse the arguments, begin the
//! transition of each key (its kind's `begin` in `engine/`: open, read), then an acquire
//! hands it to `acquisition` (rules, commit, binding, or the wait), and the
//! other commands run their rule on the key's queue, commit
//! (the kind's `commit`) and reply.

mod acquire;
mod election;
mod inspect;
mod latch;
mod multilock;
mod release;
mod semaphore;
mod session;

use std::borrow::Cow;
use std::ffi::CStr;

use redis_module::{Context, ContextFlags, RedisResult, RedisString, RedisValue};

use crate::ffi::{self, ArgDoc, ArgKind, CommandSpec};
use crate::{config, keepalive};
use lock_rules::args::{parse_owner, AcquireOptions, Wait};
use lock_rules::error::LockError;
use lock_rules::keys::{read_lease_key_in_slot, token_key_in_slot};
use lock_rules::lock_id::LockId;
use lock_rules::request::{LockKind, Request};

/// A command of the module: what the server is told about it, and the
/// registration of its handler (`ffi::register_command` for it).
pub struct Command {
    pub spec: CommandSpec,
    register: fn(&Context, &CommandSpec, &str) -> bool,
}

/// `Command` for a spec and the function that serves it.
macro_rules! command {
    ($spec:expr, $body:path) => {{
        struct Handler;
        impl $crate::ffi::CommandHandler for Handler {
            const BODY: $crate::ffi::CommandBody = $body;
        }
        $crate::commands::Command::new($spec, $crate::ffi::register_command::<Handler>)
    }};
}
use command;

impl Command {
    pub const fn new(
        spec: CommandSpec,
        register: fn(&Context, &CommandSpec, &str) -> bool,
    ) -> Self {
        Self { spec, register }
    }
}

/// Every command, in the order it is registered.
pub const ALL: &[&Command] = &[
    &acquire::ACQUIRE,
    &acquire::RACQUIRE,
    &acquire::WACQUIRE,
    &acquire::CANCEL,
    &multilock::MACQUIRE,
    &multilock::MRELEASE,
    &release::RELEASE,
    &release::RENEW,
    &release::FORCERELEASE,
    &session::SESSION,
    &inspect::INFO,
    &inspect::WAITERS,
    &inspect::QUEUES,
    &semaphore::INIT,
    &semaphore::ACQUIRE,
    &semaphore::RELEASE,
    &semaphore::RENEW,
    &semaphore::ADD,
    &semaphore::TAKE,
    &semaphore::GIVE,
    &semaphore::INFO,
    &latch::INIT,
    &latch::COUNTDOWN,
    &latch::AWAIT,
    &latch::INFO,
    &election::CAMPAIGN,
    &election::RESIGN,
    &election::PROCLAIM,
    &election::LEADER,
    &election::OBSERVE,
];

/// Registers every command. Their ACL categories are set where the server
/// lets modules set them (Redis 7.2+, Valkey; 7.0 gives module commands
/// none: grant them by name), with `lock` among them where modules may add
/// categories (Redis 7.4+, Valkey 8+), so that `+@lock` grants all.
pub fn register_all(ctx: &Context) -> bool {
    let more = if ffi::add_acl_category(ctx, c"lock") {
        " lock"
    } else {
        ""
    };
    ALL.iter().all(|c| (c.register)(ctx, &c.spec, more))
}

/// Runs a command body on the FFI boundary: a [`LockError`] becomes its error
/// reply, and a panic becomes an error reply instead of a crashed server.
fn run(ctx: &Context, body: impl FnOnce() -> Result<RedisValue, LockError>) -> RedisResult {
    match ffi::guard(ctx, body) {
        Some(Ok(value)) => Ok(value),
        Some(Err(e)) => {
            ffi::reply_error(ctx, &e.to_string());
            Ok(RedisValue::NoReply)
        }
        None => {
            ffi::reply_error(ctx, "ERR internal error, see the server log");
            Ok(RedisValue::NoReply)
        }
    }
}

// ---------------------------------------------------------------------------
// What the docs of several commands share

const fn arg(name: &'static CStr, kind: ArgKind) -> ArgDoc {
    ArgDoc {
        name,
        kind,
        token: None,
        optional: false,
        multiple: false,
        subargs: &[],
    }
}

const fn option(name: &'static CStr, kind: ArgKind, token: &'static CStr) -> ArgDoc {
    ArgDoc {
        name,
        kind,
        token: Some(token),
        optional: true,
        multiple: false,
        subargs: &[],
    }
}

const KEY: ArgDoc = arg(c"key", ArgKind::Key);
const OWNER: ArgDoc = arg(c"owner", ArgKind::String);
const LEASE: ArgDoc = ArgDoc {
    name: c"lease",
    kind: ArgKind::OneOf,
    token: None,
    optional: true,
    multiple: false,
    subargs: &[
        ArgDoc {
            optional: false,
            ..option(c"milliseconds", ArgKind::Integer, c"PX")
        },
        ArgDoc {
            optional: false,
            ..option(c"seconds", ArgKind::Integer, c"EX")
        },
    ],
};
const BLOCK: ArgDoc = option(c"timeout", ArgKind::Integer, c"BLOCK");
const FENCE: ArgDoc = option(c"fence", ArgKind::Flag, c"FENCE");
const KEEPALIVE: ArgDoc = option(c"keepalive", ArgKind::Flag, c"KEEPALIVE");
const SESSION_TOKEN: ArgDoc = option(c"token", ArgKind::String, c"SESSION");

// ---------------------------------------------------------------------------
// What the handlers of several commands share

fn lock_id<'k>(ctx: &Context, name: &'k RedisString) -> LockId<'k> {
    LockId {
        db: ffi::selected_db(ctx),
        key: Cow::Borrowed(name.as_slice()),
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
fn owner_call<'a>(spec: &CommandSpec, args: &'a [RedisString]) -> Result<OwnerCall<'a>, LockError> {
    let [_, name, owner, options @ ..] = args else {
        return Err(LockError::arity(spec.name()));
    };
    parse_owner(owner.as_slice())?;
    Ok(OwnerCall {
        name,
        owner,
        options,
    })
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
fn acquire_request(
    ctx: &Context,
    locks: &[RedisString],
    owner: &RedisString,
    options: &AcquireOptions,
    kind: LockKind,
) -> Result<(Request, Option<Wait>), LockError> {
    let lease_ms = options.lease_ms.unwrap_or_else(config::default_lease_ms);
    if let Some(how) = &options.keepalive {
        keepalive::may_keep_alive(ctx, how, lease_ms)?;
    }
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
        lease_ms,
        fence: options.fence,
        kind,
        keepalive: options.keepalive.clone(),
        campaign: None,
    };
    let wait = options
        .wait
        .filter(|_| !ctx.get_flags().contains(ContextFlags::DENY_BLOCKING));
    Ok((request, wait))
}
