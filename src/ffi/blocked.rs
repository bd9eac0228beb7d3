//! Blocked clients: blocking a caller, the callbacks Redis runs for it
//! (reply, timeout, disconnect, free), and unblocking it with its answer.

use std::ffi::{c_int, c_void};
use std::marker::PhantomData;
use std::ptr::{self, NonNull};

use super::reply::reply_error;
use super::{guard, OK};
use redis_module::{raw, Context};

/// A client blocked in an acquire, to be answered with an `A` (the answer
/// type of the [`BlockHandler`] it was blocked with, so the handle cannot be
/// unblocked with another type). Only its address is kept; it is valid from
/// BlockClient until Redis frees it after our UnblockClient.
pub struct BlockedClient<A> {
    ptr: NonNull<raw::RedisModuleBlockedClient>,
    answer: PhantomData<fn(A)>,
}

impl<A> BlockedClient<A> {
    fn new(ptr: NonNull<raw::RedisModuleBlockedClient>) -> Self {
        Self {
            ptr,
            answer: PhantomData,
        }
    }
}

// Plain handle semantics, whatever `A` is (derives would ask `A` for them).
impl<A> Clone for BlockedClient<A> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<A> Copy for BlockedClient<A> {}
impl<A> PartialEq for BlockedClient<A> {
    fn eq(&self, other: &Self) -> bool {
        self.ptr == other.ptr
    }
}
impl<A> Eq for BlockedClient<A> {}
impl<A> std::hash::Hash for BlockedClient<A> {
    fn hash<S: std::hash::Hasher>(&self, state: &mut S) {
        self.ptr.hash(state);
    }
}
impl<A> std::fmt::Debug for BlockedClient<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BlockedClient({:p})", self.ptr)
    }
}

// SAFETY: the handle is an opaque token; it is only dereferenced by Redis,
// and this module only touches it on Redis's main thread.
unsafe impl<A> Send for BlockedClient<A> {}

/// The module's side of a blocked client's life.
pub trait BlockHandler: 'static {
    type Answer: 'static;
    /// Runs when the client is answered after [`unblock`] (client alive).
    fn reply(ctx: &Context, answer: Option<&Self::Answer>);
    /// CLIENT UNBLOCK <id> [TIMEOUT]: must answer and call [`unblock`].
    fn timeout(ctx: &Context, bc: BlockedClient<Self::Answer>);
    /// The connection closed (or CLIENT UNBLOCK ... ERROR) while blocked.
    fn disconnect(ctx: &Context, bc: BlockedClient<Self::Answer>);
    /// Last word on an answer; `client_gone` if it never reached the client.
    fn free(ctx: &Context, answer: Box<Self::Answer>, client_gone: bool);
}

unsafe extern "C" fn on_blocked_reply<H: BlockHandler>(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let context = Context::new(ctx);
    // SAFETY: in a blocked-reply context the private data is what
    // `unblock` passed for a handle of H: NULL or a live Box<H::Answer> that Redis frees
    // (through on_blocked_free) only after this callback.
    let answer = api!(RedisModule_GetBlockedClientPrivateData)
        .map_or(ptr::null_mut(), |f| unsafe { f(ctx) })
        .cast::<H::Answer>();
    // SAFETY: see above; the reference does not escape this call.
    let answer = unsafe { answer.as_ref() };
    if guard(&context, || H::reply(&context, answer)).is_none() {
        // The client waits for exactly one reply; never leave it without.
        reply_error(&context, "ERR internal error, see the server log");
    }
    OK
}

unsafe extern "C" fn on_blocked_timeout<H: BlockHandler>(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    let context = Context::new(ctx);
    // SAFETY: a timeout context always carries its blocked client.
    let bc =
        api!(RedisModule_GetBlockedClientHandle).map_or(ptr::null_mut(), |f| unsafe { f(ctx) });
    if let Some(bc) = NonNull::new(bc) {
        guard(&context, || H::timeout(&context, BlockedClient::new(bc)));
    }
    OK
}

unsafe extern "C" fn on_blocked_disconnect<H: BlockHandler>(
    ctx: *mut raw::RedisModuleCtx,
    bc: *mut raw::RedisModuleBlockedClient,
) {
    let context = Context::new(ctx);
    if let Some(bc) = NonNull::new(bc) {
        guard(&context, || H::disconnect(&context, BlockedClient::new(bc)));
    }
}

unsafe extern "C" fn on_blocked_free<H: BlockHandler>(
    ctx: *mut raw::RedisModuleCtx,
    privdata: *mut c_void,
) {
    if privdata.is_null() {
        return;
    }
    let context = Context::new(ctx);
    // SAFETY: non-NULL private data is always a Box<H::Answer> leaked by
    // `unblock` (its handle's type says H::Answer), and Redis calls free
    // exactly once for it.
    let answer = unsafe { Box::from_raw(privdata.cast::<H::Answer>()) };
    // SAFETY: ctx is the free-privdata context Redis just created.
    let gone = api!(RedisModule_BlockedClientDisconnected).is_some_and(|f| unsafe { f(ctx) } != 0);
    guard(&context, || H::free(&context, answer, gone));
}

/// Blocks the calling client with no server-side timeout (the module arms
/// its own, more precise timers). The caller must have checked that the
/// context allows blocking (not MULTI, Lua or RM_Call).
pub fn block_client<H: BlockHandler>(ctx: &Context) -> Option<BlockedClient<H::Answer>> {
    let f = api!(RedisModule_BlockClient)?;
    // SAFETY: called from a command on the main thread; the callbacks are
    // monomorphised for H and live for the program.
    let bc = unsafe {
        f(
            ctx.ctx,
            Some(on_blocked_reply::<H>),
            Some(on_blocked_timeout::<H>),
            Some(on_blocked_free::<H>),
            0,
        )
    };
    let bc = NonNull::new(bc)?;
    if let Some(set) = api!(RedisModule_SetDisconnectCallback) {
        // SAFETY: bc was just returned by BlockClient and is not yet freed.
        unsafe { set(bc.as_ptr(), Some(on_blocked_disconnect::<H>)) };
    }
    Some(BlockedClient::new(bc))
}

/// Answers a blocked client (the reply runs in `H::reply` before the next
/// event loop sleep). Must be called exactly once per blocked client.
pub fn unblock<A: 'static>(bc: BlockedClient<A>, answer: Option<A>) {
    let data = answer.map_or(ptr::null_mut(), |a| {
        Box::into_raw(Box::new(a)).cast::<c_void>()
    });
    if let Some(f) = api!(RedisModule_UnblockClient) {
        // SAFETY: bc is a live handle not yet unblocked (the waiter registry
        // guarantees once); Redis takes ownership of `data` until on_blocked_free.
        unsafe { f(bc.ptr.as_ptr(), data) };
    }
}
