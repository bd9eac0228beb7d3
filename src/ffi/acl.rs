//! ACL checks the module makes itself: whether the caller's user may read
//! and write a key the command did not declare (a fencing token key, a read
//! hold lease key, the locks LOCK.QUEUES lists).

use std::ffi::c_int;
use std::ptr::{self, NonNull};

use super::server::client_id;
use super::string::{string, with_string_bytes};
use super::OK;
use redis_module::{raw, Context};

/// errno values RM_Call documents for `C`: no ACL user for the context
/// (ENOTSUP) and an ACL refusal (EACCES).
#[cfg(target_os = "linux")]
const ENOTSUP: i32 = 95;
#[cfg(not(target_os = "linux"))]
const ENOTSUP: i32 = 45;
const EACCES: i32 = 13;

/// A string Redis handed over (no auto memory), freed once on drop.
struct OwnedString<'c> {
    ptr: NonNull<raw::RedisModuleString>,
    ctx: &'c Context,
}

impl Drop for OwnedString<'_> {
    fn drop(&mut self) {
        if let Some(free) = api!(RedisModule_FreeString) {
            // SAFETY: the string was created for this context, without auto
            // memory, and is freed exactly once here.
            unsafe { free(self.ctx.ctx, self.ptr.as_ptr()) };
        }
    }
}

/// Who runs the current command, for ACL purposes.
enum Caller<'c> {
    /// An ACL user, by name.
    User(OwnedString<'c>),
    /// No user: runs unrestricted, as Redis runs it (the master link, a
    /// module's RM_Call without `C`, a script run by one of those, AOF
    /// loading).
    Unrestricted,
    /// Could not be told (a server without the calls, or RM_Call failing
    /// for another reason).
    Unknown,
}

/// Whether the context's client has an ACL user, asked with
/// `RM_Call(ctx, "PING", "C")`: RM_Call checks for a user before anything
/// else and fails with ENOTSUP, running nothing, when there is none. With a
/// user, PING runs (no effect on data, but counted in `INFO commandstats`
/// and shown to MONITOR) or is refused by the user's ACL (EACCES, and an
/// ACL LOG entry for `ping`), which proves a user just as well. `None`: no
/// answer either way. Only asked for callers that are not connections.
fn context_has_user(ctx: &Context) -> Option<bool> {
    let (Some(call), Some(free)) = (api!(RedisModule_Call), api!(RedisModule_FreeCallReply)) else {
        return None;
    };
    // SAFETY: ctx is the live context of a command; "C" takes no argument.
    let reply = unsafe { call(ctx.ctx, c"PING".as_ptr(), c"C".as_ptr()) };
    if reply.is_null() {
        // Read at once: no call has been made since RM_Call set errno.
        return match std::io::Error::last_os_error().raw_os_error() {
            Some(ENOTSUP) => Some(false),
            Some(EACCES) => Some(true),
            _ => None,
        };
    }
    // SAFETY: a reply RM_Call returned without auto memory, freed once.
    unsafe { free(reply) };
    Some(true)
}

/// Who runs the current command.
///
/// RM_GetCurrentUserName dereferences the client's user, which is NULL on
/// 7.0 for the callers that run unrestricted, so it is only called once a
/// user is known to exist. A connection is looked up by id
/// (RM_GetClientUserNameById, which checks). Scripts, functions and RM_Call
/// run on clients that are not connections, and the master link has no
/// user; for those [`context_has_user`] decides (a script runs as the user
/// of whoever called it).
fn caller(ctx: &Context) -> Caller<'_> {
    if ctx
        .get_flags()
        .contains(redis_module::ContextFlags::LOADING)
    {
        // AOF replay: Redis applies no ACL to it.
        return Caller::Unrestricted;
    }
    let by_id = api!(RedisModule_GetClientUserNameById).map_or(ptr::null_mut(), |f| {
        // SAFETY: ctx is live; Redis looks the id up and returns NULL for
        // no such connection or a connection without a user.
        unsafe { f(ctx.ctx, client_id(ctx)) }
    });
    if let Some(name) = NonNull::new(by_id) {
        return Caller::User(OwnedString { ptr: name, ctx });
    }
    match context_has_user(ctx) {
        Some(true) => {
            // SAFETY: the context's client has a user (asked just above,
            // nothing ran since); Redis copies its name.
            let name = api!(RedisModule_GetCurrentUserName)
                .map_or(ptr::null_mut(), |f| unsafe { f(ctx.ctx) });
            NonNull::new(name).map_or(Caller::Unknown, |ptr| {
                Caller::User(OwnedString { ptr, ctx })
            })
        }
        Some(false) => Caller::Unrestricted,
        None => Caller::Unknown,
    }
}

/// Whether the connection `client` is logged in as the ACL user running the
/// current command: a session token binds holds to another connection only
/// for its own user. True when the command runs unrestricted; false when
/// either user cannot be told, or `client` is not a connection.
pub fn same_user(ctx: &Context, client: u64) -> bool {
    let name = match caller(ctx) {
        Caller::User(name) => name,
        Caller::Unrestricted => return true,
        Caller::Unknown => return false,
    };
    let Some(by_id) = api!(RedisModule_GetClientUserNameById) else {
        return false;
    };
    // SAFETY: ctx is live; Redis returns NULL for no such connection or one
    // without a user, else a new string freed on drop below.
    let Some(other) = NonNull::new(unsafe { by_id(ctx.ctx, client) }) else {
        return false;
    };
    let other = OwnedString { ptr: other, ctx };
    with_string_bytes(name.ptr.as_ptr(), |a| {
        with_string_bytes(other.ptr.as_ptr(), |b| a == b)
    })
}

/// Whether the ACL user running the current command may read and write
/// `key`, as INCR needs (key spec RW ACCESS UPDATE: `~` or both `%R~` and
/// `%W~` patterns), by any key pattern of that user
/// (RM_ACLCheckKeyPermissions). True when the command runs unrestricted
/// (see [`caller`]). A refusal is written to ACL LOG (reason `key`, context
/// `module`), as Redis logs a refused declared key. Fails closed: false
/// when the user cannot be told or the server lacks the calls.
pub fn may_update_key(ctx: &Context, key: &[u8]) -> bool {
    KeyChecker::new(ctx).allows(key, KeyUse::Update)
}

/// Whether the ACL user running the current command may read `key`; like
/// [`may_update_key`], but a refusal is not logged: the caller leaves out
/// what it would have read instead of failing.
pub fn may_read_key(ctx: &Context, key: &[u8]) -> bool {
    KeyChecker::new(ctx).allows(key, KeyUse::Read)
}

/// [`may_read_key`] for each of `keys`, the caller and its user looked up
/// once.
pub fn may_read_keys<'k>(ctx: &Context, keys: impl IntoIterator<Item = &'k [u8]>) -> Vec<bool> {
    let checker = KeyChecker::new(ctx);
    keys.into_iter()
        .map(|key| checker.allows(key, KeyUse::Read))
        .collect()
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum KeyUse {
    Read,
    Update,
}

/// The key permissions of the current command's caller.
enum KeyChecker<'c> {
    /// Runs unrestricted.
    Everything,
    /// Cannot be told (or the server lacks the calls): fails closed.
    Nothing,
    /// An ACL user's handle, freed on drop. Only used during the command
    /// (a user can be deleted between commands).
    User {
        ctx: &'c Context,
        user: NonNull<raw::RedisModuleUser>,
    },
}

impl<'c> KeyChecker<'c> {
    fn new(ctx: &'c Context) -> Self {
        let name = match caller(ctx) {
            Caller::User(name) => name,
            Caller::Unrestricted => return Self::Everything,
            Caller::Unknown => return Self::Nothing,
        };
        let (Some(get_user), Some(_), Some(_)) = (
            api!(RedisModule_GetModuleUserFromUserName),
            api!(RedisModule_ACLCheckKeyPermissions),
            api!(RedisModule_FreeModuleUser),
        ) else {
            return Self::Nothing;
        };
        // SAFETY: `name` is a live string; the handle is freed on drop.
        match NonNull::new(unsafe { get_user(name.ptr.as_ptr()) }) {
            Some(user) => Self::User { ctx, user },
            // The client's user is gone: nothing to grant from.
            None => Self::Nothing,
        }
    }

    fn allows(&self, key: &[u8], usage: KeyUse) -> bool {
        let (ctx, user) = match self {
            Self::Everything => return true,
            Self::Nothing => return false,
            Self::User { ctx, user } => (*ctx, *user),
        };
        let Some(check) = api!(RedisModule_ACLCheckKeyPermissions) else {
            return false;
        };
        let key = string(ctx, key);
        let flags = match usage {
            KeyUse::Read => raw::REDISMODULE_CMD_KEY_ACCESS,
            KeyUse::Update => raw::REDISMODULE_CMD_KEY_ACCESS | raw::REDISMODULE_CMD_KEY_UPDATE,
        } as c_int;
        // SAFETY: live user handle and key string; the flags are within the
        // mask 7.0 accepts (ACCESS, INSERT, DELETE, UPDATE).
        let allowed = unsafe { check(user.as_ptr(), key.inner, flags) } == OK;
        if !allowed && usage == KeyUse::Update {
            if let Some(log) = api!(RedisModule_ACLAddLogEntry) {
                // SAFETY: ctx is a command context (its client describes the
                // entry); Redis copies the user name and the key.
                unsafe {
                    log(
                        ctx.ctx,
                        user.as_ptr(),
                        key.inner,
                        raw::RedisModuleACLLogEntryReason_REDISMODULE_ACL_LOG_KEY,
                    )
                };
            }
        }
        allowed
    }
}

impl Drop for KeyChecker<'_> {
    fn drop(&mut self) {
        if let (Self::User { user, .. }, Some(free_user)) = (self, api!(RedisModule_FreeModuleUser))
        {
            // SAFETY: a handle from GetModuleUserFromUserName: this frees
            // only the handle, never the ACL user itself; freed once.
            unsafe { free_user(user.as_ptr()) };
        }
    }
}
