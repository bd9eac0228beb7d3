//! Every call into the Redis module API and every callback Redis makes into
//! the module: the crate's only `unsafe`, each block saying why it is
//! sound. The API's function pointers come from `redis_module::raw`,
//! filled by `RedisModule_Init` at load; one the server lacks makes its
//! call do nothing (a reply left out, a load refused), never a crash.

#![allow(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]

use std::ffi::{c_int, c_void, CStr};
use std::ptr::{self, NonNull};

use redis_module::raw;

const OK: c_int = raw::REDISMODULE_OK as c_int;
const ERR: c_int = raw::REDISMODULE_ERR as c_int;

/// An API function pointer (`None`: the server lacks the call).
macro_rules! api {
    ($name:ident) => {
        // SAFETY: Redis fills these pointers once, in RedisModule_Init during
        // OnLoad on its main thread, before any other call; they are only
        // read after that.
        unsafe { raw::$name }
    };
}

/// The context of the command or callback running now.
pub(crate) struct Ctx(*mut raw::RedisModuleCtx);

impl Ctx {
    pub(crate) fn reply_int(&self, n: i64) {
        if let Some(f) = api!(RedisModule_ReplyWithLongLong) {
            // SAFETY: self.0 is the live context Redis passed to this call.
            unsafe { f(self.0, n) };
        }
    }

    /// A null bulk string (RESP2 `$-1`).
    pub(crate) fn reply_null(&self) {
        if let Some(f) = api!(RedisModule_ReplyWithNull) {
            // SAFETY: self.0 is the live context Redis passed to this call.
            unsafe { f(self.0) };
        }
    }

    pub(crate) fn reply_error(&self, msg: &CStr) {
        if let Some(f) = api!(RedisModule_ReplyWithError) {
            // SAFETY: live context; msg is NUL-terminated and Redis copies it.
            unsafe { f(self.0, msg.as_ptr()) };
        }
    }

    /// `-ERR wrong number of arguments for '<command>' command`
    pub(crate) fn wrong_arity(&self) {
        if let Some(f) = api!(RedisModule_WrongArity) {
            // SAFETY: self.0 is the live context of a command.
            unsafe { f(self.0) };
        }
    }

    /// The caller cannot block here (MULTI, a script, RM_Call).
    pub(crate) fn deny_blocking(&self) -> bool {
        let Some(f) = api!(RedisModule_GetContextFlags) else {
            return false;
        };
        // SAFETY: self.0 is the live context of a command.
        let flags = unsafe { f(self.0) };
        flags & raw::REDISMODULE_CTX_FLAGS_DENY_BLOCKING as c_int != 0
    }

    /// Blocks the calling client (`timeout_ms` 0: no timeout), to be
    /// answered by [`on_granted`] after [`Waiter::unblock`], or by
    /// [`on_timeout`]; [`on_disconnect`] if its connection ends first.
    /// Runs none of the module's callbacks before it returns.
    pub(crate) fn block(&self, timeout_ms: i64) -> Option<Waiter> {
        let block = api!(RedisModule_BlockClient)?;
        // SAFETY: self.0 is the live context of a command on the main
        // thread; the callbacks are plain functions that live as long as
        // the module. No private data is ever passed (unblock gives NULL),
        // so there is nothing to free.
        let bc = unsafe { block(self.0, Some(on_granted), Some(on_timeout), None, timeout_ms) };
        let bc = NonNull::new(bc)?;
        if let Some(set) = api!(RedisModule_SetDisconnectCallback) {
            // SAFETY: bc was just returned by BlockClient and is not freed
            // before it is unblocked.
            unsafe { set(bc.as_ptr(), Some(on_disconnect)) };
        }
        Some(Waiter(bc))
    }
}

/// A command's or callback's arguments.
pub(crate) struct Args<'a>(&'a [*mut raw::RedisModuleString]);

impl<'a> Args<'a> {
    /// # Safety
    /// `argv` must point to `argc` strings that live as long as `'a` (the
    /// command or callback that received them), or be NULL.
    unsafe fn new(argv: *mut *mut raw::RedisModuleString, argc: c_int) -> Args<'a> {
        let len = usize::try_from(argc).unwrap_or(0);
        if argv.is_null() || len == 0 {
            return Args(&[]);
        }
        // SAFETY: per this function's contract.
        Args(unsafe { std::slice::from_raw_parts(argv, len) })
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// Argument `i`'s bytes.
    pub(crate) fn get(&self, i: usize) -> Option<&'a [u8]> {
        let s = *self.0.get(i)?;
        let f = api!(RedisModule_StringPtrLen)?;
        let mut len = 0;
        // SAFETY: s is one of the live argument strings of this call.
        let p = unsafe { f(s, &mut len) };
        if p.is_null() {
            return None;
        }
        // SAFETY: StringPtrLen points at the string's len bytes, which live
        // as long as the argument vector ('a) and are not changed meanwhile.
        Some(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) })
    }
}

/// A blocked client not yet unblocked: made once per handle by
/// [`Ctx::block`], consumed by [`Waiter::unblock`], so that no handle is
/// unblocked twice.
pub(crate) struct Waiter(NonNull<raw::RedisModuleBlockedClient>);

impl Waiter {
    pub(crate) fn is(&self, bc: BlockedRef) -> bool {
        self.0 == bc.0
    }

    /// Hands the client its answer ([`on_granted`] runs before the event
    /// loop sleeps, if the client is still there) or, after a timeout or a
    /// disconnect, only frees the handle.
    pub(crate) fn unblock(self) {
        if let Some(f) = api!(RedisModule_UnblockClient) {
            // SAFETY: self is the one Waiter of a live handle (from
            // BlockClient, freed by Redis only after this call) and is
            // consumed here: the handle is unblocked once. NULL private data.
            unsafe { f(self.0.as_ptr(), ptr::null_mut::<c_void>()) };
        }
    }
}

/// The handle a timeout or disconnect callback is about (compared with
/// the queued [`Waiter`]s; never unblocked itself).
#[derive(Clone, Copy)]
pub(crate) struct BlockedRef(NonNull<raw::RedisModuleBlockedClient>);

extern "C" fn floor_acquire(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    // SAFETY: Redis passes the command's argv/argc, live during the call.
    let args = unsafe { Args::new(argv, argc) };
    crate::acquire(&Ctx(ctx), &args);
    OK
}

extern "C" fn floor_release(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    // SAFETY: Redis passes the command's argv/argc, live during the call.
    let args = unsafe { Args::new(argv, argc) };
    crate::release(&Ctx(ctx), &args);
    OK
}

/// Reply callback: the client was unblocked by a release.
extern "C" fn on_granted(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    crate::granted(&Ctx(ctx));
    OK
}

/// Timeout callback: the client's timeout ran out (or CLIENT UNBLOCK).
extern "C" fn on_timeout(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    let ctx = Ctx(ctx);
    // SAFETY: a timeout callback gets the blocked command's argv/argc,
    // live during the call.
    let args = unsafe { Args::new(argv, argc) };
    let bc = api!(RedisModule_GetBlockedClientHandle)
        // SAFETY: ctx is the timeout context, which carries its blocked client.
        .map_or(ptr::null_mut(), |f| unsafe { f(ctx.0) });
    match NonNull::new(bc) {
        Some(bc) => crate::timed_out(&ctx, &args, BlockedRef(bc)),
        None => ctx.reply_null(),
    }
    OK
}

/// Disconnect callback: the blocked client's connection ended.
extern "C" fn on_disconnect(
    _ctx: *mut raw::RedisModuleCtx,
    bc: *mut raw::RedisModuleBlockedClient,
) {
    if let Some(bc) = NonNull::new(bc) {
        crate::disconnected(BlockedRef(bc));
    }
}

/// Registers the module `floor` and its two commands (first, last key and
/// step 1: the key is the first argument, for cluster routing).
///
/// # Safety
/// Called by Redis only, once, with the load context.
#[no_mangle]
pub unsafe extern "C" fn RedisModule_OnLoad(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    // SAFETY: ctx is the load context; Init fills the API pointers and
    // copies the name.
    let init = unsafe {
        raw::Export_RedisModule_Init(
            ctx,
            c"floor".as_ptr(),
            1,
            raw::REDISMODULE_APIVER_1 as c_int,
        )
    };
    if init == ERR {
        return ERR;
    }
    let Some(create) = api!(RedisModule_CreateCommand) else {
        return ERR;
    };
    type Command =
        extern "C" fn(*mut raw::RedisModuleCtx, *mut *mut raw::RedisModuleString, c_int) -> c_int;
    // The flags LOCK.ACQUIRE and LOCK.RELEASE have, so that Redis runs the
    // same checks before each.
    let commands: [(&CStr, Command, &CStr); 2] = [
        (c"floor.acquire", floor_acquire, c"write deny-oom blocking"),
        (c"floor.release", floor_release, c"write fast"),
    ];
    for (name, handler, flags) in commands {
        // SAFETY: the load context; name and flags are NUL-terminated and
        // copied by Redis; the handler lives as long as the module.
        let created = unsafe { create(ctx, name.as_ptr(), Some(handler), flags.as_ptr(), 1, 1, 1) };
        if created == ERR {
            return ERR;
        }
    }
    OK
}
