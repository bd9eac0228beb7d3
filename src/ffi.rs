//! Every call into the Redis module API that needs `unsafe`, wrapped in safe
//! functions. Nothing above this file writes `unsafe`.
//!
//! Rules kept here:
//! - API function pointers come from Redis at load time; a missing one (an
//!   older or different server) degrades to a failed call, never a panic.
//!   The redis-module crate's own safe wrappers used elsewhere (`Context::
//!   replicate`, `call`, `get_flags`) rely on calls every Redis since 7.0 has.
//! - Every callback Redis calls into goes through [`guard`], because a Rust
//!   panic unwinding into C aborts the server.
//! - Handles (`Key`, strings) never outlive the callback that opened them.
//! - Text for Redis (logs, errors) goes through here, never as a format
//!   string and never with a NUL byte.

use std::ffi::{c_int, c_void, CStr, CString};
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::{self, NonNull};
use std::sync::atomic::{
    AtomicPtr, AtomicUsize,
    Ordering::{Relaxed, SeqCst},
};

use redis_module::{raw, Context, RedisResult, RedisString};

/// Reads an API function pointer. `None` on a server that lacks the call.
macro_rules! api {
    ($name:ident) => {
        // SAFETY: Redis fills these pointers once, in RedisModule_Init during
        // OnLoad on the main thread, before any other call; after that they
        // are only read.
        unsafe { raw::$name }
    };
}

/// Runs `f`; a panic becomes a warning in the server log and `None`, instead
/// of aborting redis-server.
pub fn guard<R>(ctx: &Context, f: impl FnOnce() -> R) -> Option<R> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => Some(r),
        Err(cause) => {
            let what = cause
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| cause.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            log_warning(
                ctx,
                &format!("lock: internal error caught, operation abandoned: {what}"),
            );
            None
        }
    }
}

const OK: c_int = raw::REDISMODULE_OK as c_int;

/// `text` as a C string: NUL, CR and LF become spaces (one line, no cut).
fn c_text(text: &str) -> CString {
    let bytes: Vec<u8> = text
        .bytes()
        .map(|b| {
            if matches!(b, 0 | b'\r' | b'\n') {
                b' '
            } else {
                b
            }
        })
        .collect();
    CString::new(bytes).unwrap_or_default()
}

/// A line in the server log at warning level.
pub fn log_warning(ctx: &Context, message: &str) {
    let message = c_text(message);
    // SAFETY: "%s" with one NUL-terminated argument: the message is data,
    // never a format string.
    if let Some(f) = api!(RedisModule_Log) {
        unsafe {
            f(
                ctx.ctx,
                c"warning".as_ptr(),
                c"%s".as_ptr(),
                message.as_ptr(),
            )
        };
    }
}

/// An error reply; `line` starts with its code (`ERR ...`).
pub fn reply_error(ctx: &Context, line: &str) {
    let line = c_text(line);
    // SAFETY: ctx is a context that may reply; Redis copies the text.
    if let Some(f) = api!(RedisModule_ReplyWithError) {
        unsafe { f(ctx.ctx, line.as_ptr()) };
    }
}

pub fn reply_integer(ctx: &Context, n: i64) {
    // SAFETY: ctx is a context that may reply.
    if let Some(f) = api!(RedisModule_ReplyWithLongLong) {
        unsafe { f(ctx.ctx, n) };
    }
}

/// An array of integers.
pub fn reply_integers(ctx: &Context, values: &[i64]) {
    // SAFETY: ctx is a context that may reply; exactly `len` elements follow.
    if let Some(f) = api!(RedisModule_ReplyWithArray) {
        unsafe { f(ctx.ctx, values.len() as std::ffi::c_long) };
    }
    for n in values {
        reply_integer(ctx, *n);
    }
}

pub fn reply_null(ctx: &Context) {
    // SAFETY: ctx is a context that may reply.
    if let Some(f) = api!(RedisModule_ReplyWithNull) {
        unsafe { f(ctx.ctx) };
    }
}

fn reply_bulk(ctx: &Context, bytes: &[u8]) {
    // SAFETY: ctx may reply; Redis copies `len` bytes from the pointer.
    if let Some(f) = api!(RedisModule_ReplyWithStringBuffer) {
        unsafe { f(ctx.ctx, bytes.as_ptr().cast(), bytes.len()) };
    }
}

// ---------------------------------------------------------------------------
// Time, context state

/// Wall-clock ms, the clock key expiry uses.
pub fn now_ms() -> i64 {
    // SAFETY: RM_Milliseconds reads the clock and has no preconditions.
    api!(RedisModule_Milliseconds).map_or(0, |f| unsafe { f() })
}

pub fn selected_db(ctx: &Context) -> i32 {
    // SAFETY: ctx is the live context of the current callback.
    api!(RedisModule_GetSelectedDb).map_or(0, |f| unsafe { f(ctx.ctx) })
}

pub fn select_db(ctx: &Context, db: i32) -> bool {
    // SAFETY: ctx is live; Redis range-checks `db` and reports an error.
    api!(RedisModule_SelectDb).is_some_and(|f| unsafe { f(ctx.ctx, db) } == OK)
}

/// True while writes must not be propagated: clients paused (CLIENT PAUSE,
/// failover). Propagating then fails an assertion in redis-server 7.0.
pub fn avoid_replica_traffic() -> bool {
    // SAFETY: no arguments; reads server state on the main thread.
    api!(RedisModule_AvoidReplicaTraffic).is_none_or(|f| unsafe { f() } != 0)
}

/// Stop Redis from marking every key opened for writing as modified (which
/// would abort WATCHers even when nothing changed); [`Key::signal_modified`]
/// is called after real writes instead.
pub fn signal_modified_keys_explicitly(ctx: &Context) {
    if let Some(f) = api!(RedisModule_SetModuleOptions) {
        // SAFETY: ctx is the OnLoad context; the option is a plain flag.
        unsafe {
            f(
                ctx.ctx,
                raw::REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED as c_int,
            )
        };
    }
}

// ---------------------------------------------------------------------------
// Commands

/// A command body: the context and the arguments, name first.
pub type CommandBody = fn(&Context, &[RedisString]) -> RedisResult;

pub trait CommandHandler: 'static {
    const BODY: CommandBody;
}

/// Up to this many arguments are passed without a heap allocation.
const INLINE_ARGS: usize = 8;

/// Views Redis's argument strings as `RedisString`s without retaining them
/// (the crate's own wrapper retains, frees and collects every argument).
/// `ManuallyDrop` keeps them from being freed: Redis owns them.
extern "C" fn on_command<H: CommandHandler>(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    let context = Context::new(ctx);
    let argc = usize::try_from(argc).unwrap_or(0);
    let raw_args: &[*mut raw::RedisModuleString] = if argv.is_null() {
        &[]
    } else {
        // SAFETY: Redis passes `argc` argument strings that live for the
        // whole call.
        unsafe { std::slice::from_raw_parts(argv, argc) }
    };
    let view = |s: *mut raw::RedisModuleString| {
        ManuallyDrop::new(RedisString::from_redis_module_string(ctx, s))
    };
    let reply = if raw_args.len() <= INLINE_ARGS {
        let args: [ManuallyDrop<RedisString>; INLINE_ARGS] =
            std::array::from_fn(|i| view(raw_args.get(i).copied().unwrap_or(ptr::null_mut())));
        H::BODY(&context, as_strings(&args[..raw_args.len()]))
    } else {
        let args: Vec<ManuallyDrop<RedisString>> = raw_args.iter().map(|s| view(*s)).collect();
        H::BODY(&context, as_strings(&args))
    };
    context.reply(reply) as c_int
}

/// Whether Redis calls a `getkeys-api` command only to learn its keys
/// (cluster routing on 7.0 asks this way; key specs serve the rest).
pub fn is_keys_position_request(ctx: &Context) -> bool {
    // SAFETY: ctx is the live context of the command call.
    api!(RedisModule_IsKeysPositionRequest).is_some_and(|f| unsafe { f(ctx.ctx) } != 0)
}

/// Reports argument `pos` as a key, in a keys position request.
pub fn key_at_pos(ctx: &Context, pos: usize) {
    // SAFETY: ctx is the live context of a keys position request.
    if let (Some(f), Ok(pos)) = (api!(RedisModule_KeyAtPos), c_int::try_from(pos)) {
        unsafe { f(ctx.ctx, pos) };
    }
}

fn as_strings(args: &[ManuallyDrop<RedisString>]) -> &[RedisString] {
    // SAFETY: ManuallyDrop<T> is repr(transparent) over T, so the slices
    // have the same layout; the borrow keeps `args` alive.
    unsafe { std::slice::from_raw_parts(args.as_ptr().cast::<RedisString>(), args.len()) }
}

/// Adds the ACL category `name` (RM_AddACLCategory: Redis 7.4+, Valkey 8+,
/// during OnLoad only). False where the server has no such call or refuses.
pub fn add_acl_category(ctx: &Context, name: &CStr) -> bool {
    // SAFETY: OnLoad context; the name is NUL-terminated and copied.
    api!(RedisModule_AddACLCategory).is_some_and(|f| unsafe { f(ctx.ctx, name.as_ptr()) } == OK)
}

/// Registers a command served by `H` (RM_CreateCommand), then, on servers
/// that have them (Redis 7.2+, Valkey), its ACL categories, space-separated.
pub fn create_command<H: CommandHandler>(
    ctx: &Context,
    name: &CStr,
    flags: &CStr,
    keys: (c_int, c_int, c_int),
    acl_categories: &str,
) -> bool {
    let Some(create) = api!(RedisModule_CreateCommand) else {
        return false;
    };
    // SAFETY: OnLoad context; name and flags are NUL-terminated and copied
    // by Redis; the handler is monomorphised for H.
    let created = unsafe {
        create(
            ctx.ctx,
            name.as_ptr(),
            Some(on_command::<H>),
            flags.as_ptr(),
            keys.0,
            keys.1,
            keys.2,
        )
    } == OK;
    if !created {
        return false;
    }
    if let (Some(get), Some(set_categories)) = (
        api!(RedisModule_GetCommand),
        api!(RedisModule_SetCommandACLCategories),
    ) {
        let categories = CString::new(acl_categories).unwrap_or_default();
        // SAFETY: the command was just created; categories are copied.
        let set = unsafe {
            let command = get(ctx.ctx, name.as_ptr());
            !command.is_null() && set_categories(command, categories.as_ptr()) == OK
        };
        if !set {
            log_warning(ctx, &format!("lock: no ACL categories for {name:?}"));
        }
    }
    true
}

// ---------------------------------------------------------------------------
// Strings

/// A copy of the bytes of a string Redis handed to a callback.
fn string_bytes(s: *const raw::RedisModuleString) -> Vec<u8> {
    with_string_bytes(s, <[u8]>::to_vec)
}

/// Runs `f` on the bytes of a live RedisModuleString (empty for NULL).
fn with_string_bytes<R>(s: *const raw::RedisModuleString, f: impl FnOnce(&[u8]) -> R) -> R {
    if s.is_null() {
        return f(&[]);
    }
    let mut len = 0usize;
    // SAFETY: `s` is a live RedisModuleString handed to us by Redis in the
    // current callback.
    let p = api!(RedisModule_StringPtrLen).map_or(ptr::null(), |g| unsafe { g(s, &mut len) });
    if p.is_null() {
        return f(&[]);
    }
    // SAFETY: Redis guarantees `len` readable bytes at `p`, unchanged while
    // the string lives; the slice does not outlive this call.
    f(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) })
}

pub fn string(ctx: &Context, bytes: &[u8]) -> RedisString {
    RedisString::create_from_slice(ctx.ctx, bytes)
}

// ---------------------------------------------------------------------------
// Keys

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    Empty,
    Hash,
    String,
    Other,
}

/// An open key. Closed on drop, so it cannot outlive its callback.
pub struct Key<'c> {
    ptr: NonNull<raw::RedisModuleKey>,
    ctx: PhantomData<&'c Context>,
}

impl<'c> Key<'c> {
    /// Opens `name` in the context's db. Reading a missing key gives `None`.
    /// On a master, opening runs lazy expiry, which fires keyspace events
    /// synchronously.
    pub fn open(ctx: &'c Context, name: &RedisString, write: bool) -> Option<Self> {
        let mode = if write {
            raw::KeyMode::READ | raw::KeyMode::WRITE
        } else {
            raw::KeyMode::READ
        };
        // SAFETY: ctx and name are live for the callback; the handle is
        // closed in Drop before either goes away ('c).
        let p = api!(RedisModule_OpenKey).map_or(ptr::null_mut(), |f| unsafe {
            f(ctx.ctx, name.inner, mode.bits())
        });
        NonNull::new(p.cast()).map(|ptr| Self {
            ptr,
            ctx: PhantomData,
        })
    }

    fn raw(&self) -> *mut raw::RedisModuleKey {
        self.ptr.as_ptr()
    }

    pub fn kind(&self) -> KeyKind {
        // SAFETY: the key handle is open.
        let t = api!(RedisModule_KeyType).map_or(-1, |f| unsafe { f(self.raw()) }) as isize;
        match t {
            raw::REDISMODULE_KEYTYPE_EMPTY => KeyKind::Empty,
            raw::REDISMODULE_KEYTYPE_HASH => KeyKind::Hash,
            raw::REDISMODULE_KEYTYPE_STRING => KeyKind::String,
            _ => KeyKind::Other,
        }
    }

    /// Number of fields of a hash.
    pub fn len(&self) -> usize {
        // SAFETY: the key handle is open.
        api!(RedisModule_ValueLength).map_or(0, |f| unsafe { f(self.raw()) })
    }

    /// All field/value pairs of a hash.
    pub fn hash_fields(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        unsafe extern "C" fn collect(
            _key: *mut raw::RedisModuleKey,
            field: *mut raw::RedisModuleString,
            value: *mut raw::RedisModuleString,
            out: *mut c_void,
        ) {
            // SAFETY: `out` is the &mut Vec passed to ScanKey below, alive
            // for the whole scan; Redis calls this on the same thread.
            let out = unsafe { &mut *out.cast::<Vec<(Vec<u8>, Vec<u8>)>>() };
            out.push((string_bytes(field), string_bytes(value)));
        }
        let mut out: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let (Some(create), Some(scan), Some(destroy)) = (
            api!(RedisModule_ScanCursorCreate),
            api!(RedisModule_ScanKey),
            api!(RedisModule_ScanCursorDestroy),
        ) else {
            return out;
        };
        // SAFETY: the cursor is created, used on this open key only and
        // destroyed before returning; `collect` matches RedisModuleScanKeyCB.
        unsafe {
            let cursor = create();
            let data = (&mut out as *mut Vec<(Vec<u8>, Vec<u8>)>).cast::<c_void>();
            while scan(self.raw(), cursor, Some(collect), data) != 0 {}
            destroy(cursor);
        }
        out
    }

    /// The value of one hash field, `None` if the field (or key) is absent.
    /// Runs `read` on the value of one field, without copying it.
    pub fn hash_get<R>(
        &self,
        ctx: &Context,
        field: &RedisString,
        read: impl FnOnce(&[u8]) -> R,
    ) -> Option<R> {
        let mut value: *mut raw::RedisModuleString = ptr::null_mut();
        // SAFETY: open key; the variadic list is one (field, out) pair and
        // the NULL terminator RM_HashGet requires.
        let found = api!(RedisModule_HashGet).is_some_and(|f| unsafe {
            f(
                self.raw(),
                raw::REDISMODULE_HASH_NONE as c_int,
                field.inner,
                &mut value as *mut *mut raw::RedisModuleString,
                ptr::null_mut::<raw::RedisModuleString>(),
            ) == OK
        });
        if !found || value.is_null() {
            return None;
        }
        let result = with_string_bytes(value, read);
        // SAFETY: HashGet handed us a new string (no auto memory); freed once.
        if let Some(free) = api!(RedisModule_FreeString) {
            unsafe { free(ctx.ctx, value) };
        }
        Some(result)
    }

    /// `HSET key field value` with the key API (no notification).
    pub fn hash_set(&self, ctx: &Context, field: &RedisString, value: i64) -> bool {
        // A new lock's hold count, 1, is nearly every value written: that
        // string is made once and kept.
        static ONE: AtomicPtr<raw::RedisModuleString> = AtomicPtr::new(ptr::null_mut());
        let (value, owned) = if value == 1 {
            (kept_string(&ONE, b"1"), false)
        } else {
            let created = match api!(RedisModule_CreateStringFromLongLong) {
                // SAFETY: ctx is live; the string is freed below.
                Some(f) => unsafe { f(ctx.ctx, value as std::ffi::c_longlong) },
                None => ptr::null_mut(),
            };
            (created, true)
        };
        if value.is_null() {
            return false;
        }
        // SAFETY: open writable key; the variadic list is field, value, then
        // the NULL terminator RM_HashSet requires. Redis copies both.
        let set = api!(RedisModule_HashSet).is_some_and(|f| unsafe {
            f(
                self.raw(),
                raw::REDISMODULE_HASH_NONE as c_int,
                field.inner,
                value,
                ptr::null_mut::<raw::RedisModuleString>(),
            ) >= 0
        });
        // SAFETY: created above for this call without auto memory; freed once.
        if let (true, Some(free)) = (owned, api!(RedisModule_FreeString)) {
            unsafe { free(ctx.ctx, value) };
        }
        set
    }

    /// `HSET key field value` for a value that is not a count (the `mode`
    /// of a read-write lock).
    pub fn hash_set_bytes(&self, ctx: &Context, field: &[u8], value: &[u8]) -> bool {
        let (field, value) = (string(ctx, field), string(ctx, value));
        // SAFETY: open writable key; field, value, then the NULL terminator
        // RM_HashSet requires. Redis copies both.
        api!(RedisModule_HashSet).is_some_and(|f| unsafe {
            f(
                self.raw(),
                raw::REDISMODULE_HASH_NONE as c_int,
                field.inner,
                value.inner,
                ptr::null_mut::<raw::RedisModuleString>(),
            ) >= 0
        })
    }

    /// Removes one field of a hash (a hash left empty is deleted, as with
    /// HDEL).
    pub fn hash_delete(&self, field: &RedisString) -> bool {
        // REDISMODULE_HASH_DELETE in redismodule.h: the value pointer 1.
        let delete = ptr::without_provenance_mut::<raw::RedisModuleString>(1);
        // SAFETY: open writable key; field, the HASH_DELETE marker, then the
        // NULL terminator RM_HashSet requires.
        api!(RedisModule_HashSet).is_some_and(|f| unsafe {
            f(
                self.raw(),
                raw::REDISMODULE_HASH_NONE as c_int,
                field.inner,
                delete,
                ptr::null_mut::<raw::RedisModuleString>(),
            ) > 0
        })
    }

    pub fn delete(&self) -> bool {
        // SAFETY: the key handle is open.
        api!(RedisModule_DeleteKey).is_some_and(|f| unsafe { f(self.raw()) } == OK)
    }

    /// Remaining time to live in ms, `None` without one.
    pub fn ttl_ms(&self) -> Option<i64> {
        // SAFETY: the key handle is open.
        let ttl = api!(RedisModule_GetExpire).map_or(-1, |f| unsafe { f(self.raw()) });
        (ttl >= 0).then_some(ttl)
    }

    /// Absolute expiry (unix ms), `None` without one.
    pub fn expires_at(&self) -> Option<i64> {
        // SAFETY: the key handle is open.
        let at = api!(RedisModule_GetAbsExpire).map_or(-1, |f| unsafe { f(self.raw()) });
        (at >= 0).then_some(at)
    }

    /// Replaces a string key's value (or creates it). Like SET, this drops
    /// the key's TTL.
    pub fn string_set(&self, ctx: &Context, value: &[u8]) -> bool {
        let value = string(ctx, value);
        // SAFETY: open writable key; Redis takes its own reference.
        api!(RedisModule_StringSet).is_some_and(|f| unsafe { f(self.raw(), value.inner) } == OK)
    }

    /// Sets an absolute expiry (unix ms). The key must exist.
    pub fn expire_at(&self, at_ms: i64) -> bool {
        // SAFETY: open writable key; Redis rejects a missing value.
        api!(RedisModule_SetAbsExpire).is_some_and(|f| unsafe { f(self.raw(), at_ms) } == OK)
    }

    /// The value of a string key.
    pub fn string_value(&self) -> Vec<u8> {
        let mut len = 0usize;
        // SAFETY: read-only DMA on an open string key; the bytes are copied
        // before the handle can change.
        let p = api!(RedisModule_StringDMA).map_or(ptr::null_mut(), |f| unsafe {
            f(self.raw(), &mut len, raw::REDISMODULE_READ as c_int)
        });
        if p.is_null() {
            return Vec::new();
        }
        // SAFETY: Redis guarantees `len` readable bytes at `p`.
        unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) }.to_vec()
    }
}

impl Drop for Key<'_> {
    fn drop(&mut self) {
        // SAFETY: the handle was opened by RM_OpenKey and is closed once.
        if let Some(f) = api!(RedisModule_CloseKey) {
            unsafe { f(self.raw()) };
        }
    }
}

/// Marks `name` as modified for WATCH and client-side caching.
pub fn signal_modified(ctx: &Context, name: &RedisString) {
    // SAFETY: ctx and name are live for the callback.
    if let Some(f) = api!(RedisModule_SignalModifiedKey) {
        unsafe { f(ctx.ctx, name.inner) };
    }
}

/// Fires a keyspace notification, as the native command would.
pub fn notify(ctx: &Context, class: c_int, event: &CStr, name: &RedisString) {
    // SAFETY: ctx, event and name are live for the duration of the call.
    if let Some(f) = api!(RedisModule_NotifyKeyspaceEvent) {
        unsafe { f(ctx.ctx, class, event.as_ptr(), name.inner) };
    }
}

pub const NOTIFY_GENERIC: c_int = raw::REDISMODULE_NOTIFY_GENERIC;
pub const NOTIFY_HASH: c_int = raw::REDISMODULE_NOTIFY_HASH;
pub const NOTIFY_STRING: c_int = raw::REDISMODULE_NOTIFY_STRING;

/// Publishes Redisson's unlock message, `0` or `1`; `sharded` uses SPUBLISH
/// semantics (cluster).
pub fn publish_unlock(ctx: &Context, channel: &[u8], message: &[u8], sharded: bool) {
    static ZERO: AtomicPtr<raw::RedisModuleString> = AtomicPtr::new(ptr::null_mut());
    static ONE: AtomicPtr<raw::RedisModuleString> = AtomicPtr::new(ptr::null_mut());
    let message = match message {
        b"1" => kept_string(&ONE, b"1"),
        _ => kept_string(&ZERO, b"0"),
    };
    if message.is_null() {
        return;
    }
    let channel = string(ctx, channel);
    let f = if sharded {
        api!(RedisModule_PublishMessageShard).or(api!(RedisModule_PublishMessage))
    } else {
        api!(RedisModule_PublishMessage)
    };
    // SAFETY: ctx and both strings are live for the call.
    if let Some(f) = f {
        unsafe { f(ctx.ctx, channel.inner, message) };
    }
}

/// A string made once, owned by no context and never freed, for a value
/// written over and over. Redis copies what it keeps of it.
fn kept_string(
    slot: &'static AtomicPtr<raw::RedisModuleString>,
    value: &[u8],
) -> *mut raw::RedisModuleString {
    let kept = slot.load(Relaxed);
    if !kept.is_null() {
        return kept;
    }
    let Some(create) = api!(RedisModule_CreateString) else {
        return ptr::null_mut();
    };
    // SAFETY: a NULL context makes a string no context owns; Redis copies
    // `value`.
    let made = unsafe { create(ptr::null_mut(), value.as_ptr().cast(), value.len()) };
    slot.store(made, Relaxed);
    made
}

// ---------------------------------------------------------------------------
// Blocked clients

/// A client blocked in LOCK.ACQUIRE. Only its address is kept; it is valid
/// from BlockClient until Redis frees it after our UnblockClient.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockedClient(NonNull<raw::RedisModuleBlockedClient>);

// SAFETY: the handle is an opaque token; it is only dereferenced by Redis,
// and this module only touches it on Redis's main thread.
unsafe impl Send for BlockedClient {}

#[cfg(test)]
impl BlockedClient {
    /// A distinct, never dereferenced handle for bookkeeping tests.
    pub fn dangling_for_tests(n: usize) -> Self {
        let p = ptr::without_provenance_mut(8 * (n + 1));
        Self(NonNull::new(p).expect("non-zero address"))
    }
}

/// The module's side of a blocked client's life.
pub trait BlockHandler: 'static {
    type Answer: 'static;
    /// Runs when the client is answered after [`unblock`] (client alive).
    fn reply(ctx: &Context, answer: Option<&Self::Answer>);
    /// CLIENT UNBLOCK <id> [TIMEOUT]: must answer and call [`unblock`].
    fn timeout(ctx: &Context, bc: BlockedClient);
    /// The connection closed (or CLIENT UNBLOCK ... ERROR) while blocked.
    fn disconnect(ctx: &Context, bc: BlockedClient);
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
    // `unblock::<H>` passed: NULL or a live Box<H::Answer> that Redis frees
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
        guard(&context, || H::timeout(&context, BlockedClient(bc)));
    }
    OK
}

unsafe extern "C" fn on_blocked_disconnect<H: BlockHandler>(
    ctx: *mut raw::RedisModuleCtx,
    bc: *mut raw::RedisModuleBlockedClient,
) {
    let context = Context::new(ctx);
    if let Some(bc) = NonNull::new(bc) {
        guard(&context, || H::disconnect(&context, BlockedClient(bc)));
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
    // `unblock::<H>`, and Redis calls free exactly once for it.
    let answer = unsafe { Box::from_raw(privdata.cast::<H::Answer>()) };
    // SAFETY: ctx is the free-privdata context Redis just created.
    let gone = api!(RedisModule_BlockedClientDisconnected).is_some_and(|f| unsafe { f(ctx) } != 0);
    guard(&context, || H::free(&context, answer, gone));
}

/// Blocks the calling client with no server-side timeout (the module arms
/// its own, more precise timers). The caller must have checked that the
/// context allows blocking (not MULTI, Lua or RM_Call).
pub fn block_client<H: BlockHandler>(ctx: &Context) -> Option<BlockedClient> {
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
    Some(BlockedClient(bc))
}

/// Answers a blocked client (the reply runs in `H::reply` before the next
/// event loop sleep). Must be called exactly once per blocked client.
pub fn unblock<H: BlockHandler>(bc: BlockedClient, answer: Option<H::Answer>) {
    let data = answer.map_or(ptr::null_mut(), |a| {
        Box::into_raw(Box::new(a)).cast::<c_void>()
    });
    // SAFETY: bc is a live handle not yet unblocked (the waiter registry
    // guarantees once); Redis takes ownership of `data` until on_blocked_free.
    if let Some(f) = api!(RedisModule_UnblockClient) {
        unsafe { f(bc.0.as_ptr(), data) };
    }
}

// ---------------------------------------------------------------------------
// Timers

pub type TimerId = raw::RedisModuleTimerID;

/// A kind of timer; `data` is a plain number chosen by the creator.
pub trait TimerHandler: 'static {
    fn fire(ctx: &Context, data: u64);
}

unsafe extern "C" fn on_timer<H: TimerHandler>(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    let context = Context::new(ctx);
    guard(&context, || H::fire(&context, data as u64));
}

/// Arms a one-shot timer `ms` from now (~1 ms resolution, independent of hz).
pub fn create_timer<H: TimerHandler>(ctx: &Context, ms: i64, data: u64) -> Option<TimerId> {
    let f = api!(RedisModule_CreateTimer)?;
    // SAFETY: the data is a number smuggled in the pointer, never
    // dereferenced; the callback is monomorphised for H.
    Some(unsafe { f(ctx.ctx, ms.max(0), Some(on_timer::<H>), data as *mut c_void) })
}

/// A context of this module for use outside any callback (the main
/// thread's one-shot events have none), made once at load.
static DETACHED: AtomicPtr<raw::RedisModuleCtx> = AtomicPtr::new(ptr::null_mut());
/// One-shot events queued and not run yet: their callback is in this
/// library, so it must not be unloaded meanwhile.
static ONE_SHOTS_PENDING: AtomicUsize = AtomicUsize::new(0);

pub fn keep_detached_context(ctx: &Context) {
    if let Some(f) = api!(RedisModule_GetDetachedThreadSafeContext) {
        // SAFETY: ctx is the live load context; the detached context lives
        // until the module is unloaded.
        DETACHED.store(unsafe { f(ctx.ctx) }, Relaxed);
    }
}

/// Whether a one-shot event of this module is still queued.
pub fn one_shots_pending() -> bool {
    ONE_SHOTS_PENDING.load(SeqCst) > 0
}

/// From any thread: runs timer handler `H` with `data` on the main thread
/// as soon as it is free (a 0 ms timer armed from a one-shot event, which
/// wakes the event loop through its pipe).
pub fn run_timer_on_main_thread<H: TimerHandler>(data: u64) {
    unsafe extern "C" fn arm<H: TimerHandler>(data: *mut c_void) {
        ONE_SHOTS_PENDING.fetch_sub(1, SeqCst);
        let ctx = DETACHED.load(Relaxed);
        if ctx.is_null() {
            return;
        }
        // SAFETY: on the main thread (one-shot events run there); the
        // detached context is this module's and still alive; data is a
        // number smuggled in the pointer.
        if let Some(create) = api!(RedisModule_CreateTimer) {
            unsafe { create(ctx, 0, Some(on_timer::<H>), data) };
        }
    }
    let Some(add) = api!(RedisModule_EventLoopAddOneShot) else {
        return;
    };
    ONE_SHOTS_PENDING.fetch_add(1, SeqCst);
    // SAFETY: RM_EventLoopAddOneShot is the API's thread-safe entry point;
    // the callback is monomorphised for H and data is a plain number.
    if unsafe { add(Some(arm::<H>), data as *mut c_void) } != OK {
        ONE_SHOTS_PENDING.fetch_sub(1, SeqCst);
    }
}

/// Wakes the event loop if it is about to sleep. A timer armed in the
/// server's before-sleep step (blocked-client callbacks, client frees) does
/// not shorten a sleep whose timeout was computed before that step.
pub fn wake_event_loop() {
    unsafe extern "C" fn nothing(_: *mut c_void) {}
    // SAFETY: the callback ignores its argument and Redis frees its own
    // bookkeeping; only the pipe write that wakes the loop matters.
    if let Some(f) = api!(RedisModule_EventLoopAddOneShot) {
        unsafe { f(Some(nothing), ptr::null_mut()) };
    }
}

/// Cancels a timer; false if it already fired or never existed.
pub fn stop_timer(ctx: &Context, id: TimerId) -> bool {
    // SAFETY: Redis looks the id up and ignores unknown ones; the data
    // out-pointer may be NULL.
    api!(RedisModule_StopTimer).is_some_and(|f| unsafe { f(ctx.ctx, id, ptr::null_mut()) } == OK)
}

// ---------------------------------------------------------------------------
// Keyspace notifications

pub trait KeyspaceHandler: 'static {
    /// A keyspace event (`del`, `expired`, `hset`...) on `key` in the
    /// context's selected db. Runs inside the command or expiry that caused
    /// it: must not write.
    fn event(ctx: &Context, event: &[u8], key: &[u8]);
}

unsafe extern "C" fn on_keyspace_event<H: KeyspaceHandler>(
    ctx: *mut raw::RedisModuleCtx,
    _class: c_int,
    event: *const std::ffi::c_char,
    key: *mut raw::RedisModuleString,
) -> c_int {
    let context = Context::new(ctx);
    let event = if event.is_null() {
        &[][..]
    } else {
        // SAFETY: Redis passes a NUL-terminated event name valid for the call.
        unsafe { CStr::from_ptr(event) }.to_bytes()
    };
    let key = string_bytes(key);
    guard(&context, || H::event(&context, event, &key));
    OK
}

/// The keyspace event classes that can end a lock: `del` (DEL, UNLINK, the
/// last HDEL, an EXPIRE in the past), RENAME, MOVE, RESTORE, and expiry and
/// eviction. Commands that overwrite a key with another type (SET, LPUSH...)
/// are not listened to: every SET or HSET on the server would pay for it.
pub fn subscribe_keyspace_events<H: KeyspaceHandler>(ctx: &Context) -> bool {
    let classes = raw::REDISMODULE_NOTIFY_GENERIC
        | raw::REDISMODULE_NOTIFY_EXPIRED
        | raw::REDISMODULE_NOTIFY_EVICTED;
    // SAFETY: ctx is live; the callback is monomorphised for H.
    api!(RedisModule_SubscribeToKeyspaceEvents)
        .is_some_and(|f| unsafe { f(ctx.ctx, classes, Some(on_keyspace_event::<H>)) } == OK)
}

// ---------------------------------------------------------------------------
// Server events

pub trait ServerEventHandler: 'static {
    /// FLUSHDB / FLUSHALL finished; `db` is -1 for all databases.
    fn flushed(ctx: &Context, db: i32);
    /// SWAPDB a b finished.
    fn swapped(ctx: &Context, a: i32, b: i32);
    /// Something that decides who receives replicated commands may have
    /// changed: a role change, a replica coming or going, a fork (a full
    /// sync starts with one), the end of loading.
    fn replication_changed(ctx: &Context);
    /// This master became a replica (REPLICAOF, a cluster failover).
    fn demoted(ctx: &Context);
    /// Loading a dataset (at startup, DEBUG RELOAD, a full sync) finished.
    fn loading_ended(ctx: &Context);
    /// A client connection is being freed.
    fn client_gone(ctx: &Context, client_id: u64);
    /// The event loop woke up, before it reads from any client.
    fn after_sleep(ctx: &Context);
}

unsafe extern "C" fn on_server_event<H: ServerEventHandler>(
    ctx: *mut raw::RedisModuleCtx,
    event: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    let context = Context::new(ctx);
    match event.id {
        raw::REDISMODULE_EVENT_FLUSHDB
            if subevent == raw::REDISMODULE_SUBEVENT_FLUSHDB_END && !data.is_null() =>
        {
            // SAFETY: for FLUSHDB events Redis passes a RedisModuleFlushInfoV1.
            let db = unsafe { (*data.cast::<raw::RedisModuleFlushInfo>()).dbnum };
            guard(&context, || H::flushed(&context, db));
        }
        raw::REDISMODULE_EVENT_SWAPDB if !data.is_null() => {
            // SAFETY: for SWAPDB events Redis passes a RedisModuleSwapDbInfoV1.
            let info = unsafe { *data.cast::<raw::RedisModuleSwapDbInfo>() };
            guard(&context, || {
                H::swapped(&context, info.dbnum_first, info.dbnum_second)
            });
        }
        raw::REDISMODULE_EVENT_CLIENT_CHANGE
            if subevent == raw::REDISMODULE_SUBEVENT_CLIENT_CHANGE_DISCONNECTED
                && !data.is_null() =>
        {
            // SAFETY: for CLIENT_CHANGE events Redis passes a RedisModuleClientInfoV1.
            let id = unsafe { (*data.cast::<raw::RedisModuleClientInfo>()).id };
            guard(&context, || H::client_gone(&context, id));
        }
        raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED => {
            guard(&context, || {
                H::replication_changed(&context);
                if subevent == raw::REDISMODULE_EVENT_REPLROLECHANGED_NOW_REPLICA {
                    H::demoted(&context);
                }
            });
        }
        raw::REDISMODULE_EVENT_REPLICA_CHANGE => {
            guard(&context, || H::replication_changed(&context));
        }
        raw::REDISMODULE_EVENT_FORK_CHILD
            if subevent == raw::REDISMODULE_SUBEVENT_FORK_CHILD_BORN =>
        {
            guard(&context, || H::replication_changed(&context));
        }
        raw::REDISMODULE_EVENT_LOADING if subevent == raw::REDISMODULE_SUBEVENT_LOADING_ENDED => {
            guard(&context, || H::loading_ended(&context));
        }
        _ => {}
    }
}

unsafe extern "C" fn on_event_loop<H: ServerEventHandler>(
    ctx: *mut raw::RedisModuleCtx,
    _event: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut c_void,
) {
    if subevent == raw::REDISMODULE_SUBEVENT_EVENTLOOP_AFTER_SLEEP {
        let context = Context::new(ctx);
        guard(&context, || H::after_sleep(&context));
    }
}

type ServerEventCallback =
    unsafe extern "C" fn(*mut raw::RedisModuleCtx, raw::RedisModuleEvent, u64, *mut c_void);

fn subscribe_server_events(ctx: &Context, events: &[(u64, ServerEventCallback)]) -> bool {
    let Some(f) = api!(RedisModule_SubscribeToServerEvent) else {
        return false;
    };
    events.iter().all(|&(id, callback)| {
        let event = raw::RedisModuleEvent { id, dataver: 1 };
        // SAFETY: ctx is live; the callbacks are monomorphised handlers.
        unsafe { f(ctx.ctx, event, Some(callback)) == OK }
    })
}

/// Events that change data or replication as a whole: FLUSHDB/FLUSHALL,
/// SWAPDB, role changes, replicas, forks, the end of loading. All rare.
pub fn subscribe_data_events<H: ServerEventHandler>(ctx: &Context) -> bool {
    subscribe_server_events(
        ctx,
        &[
            (raw::REDISMODULE_EVENT_FLUSHDB, on_server_event::<H>),
            (raw::REDISMODULE_EVENT_SWAPDB, on_server_event::<H>),
            (
                raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED,
                on_server_event::<H>,
            ),
            (raw::REDISMODULE_EVENT_REPLICA_CHANGE, on_server_event::<H>),
            (raw::REDISMODULE_EVENT_FORK_CHILD, on_server_event::<H>),
            (raw::REDISMODULE_EVENT_LOADING, on_server_event::<H>),
        ],
    )
}

/// Client disconnections and event loop wake-ups, which only matter once
/// callers wait: the second fires on every turn of the event loop.
pub fn subscribe_waiter_events<H: ServerEventHandler>(ctx: &Context) -> bool {
    subscribe_server_events(
        ctx,
        &[
            (raw::REDISMODULE_EVENT_CLIENT_CHANGE, on_server_event::<H>),
            (raw::REDISMODULE_EVENT_EVENTLOOP, on_event_loop::<H>),
        ],
    )
}

/// Whether `INFO replication` shows anything that could receive replicated
/// commands: a replica role, connected replicas, or a replication backlog
/// (kept for partial resyncs after replicas leave). `true` when unsure.
pub fn replication_may_listen(ctx: &Context) -> bool {
    let (Some(get), Some(field), Some(signed), Some(free)) = (
        api!(RedisModule_GetServerInfo),
        api!(RedisModule_ServerInfoGetFieldC),
        api!(RedisModule_ServerInfoGetFieldSigned),
        api!(RedisModule_FreeServerInfo),
    ) else {
        return true;
    };
    // SAFETY: ctx is live; the info data is read, then freed once.
    unsafe {
        let info = get(ctx.ctx, c"replication".as_ptr());
        if info.is_null() {
            return true;
        }
        let role = field(info, c"role".as_ptr());
        let master = !role.is_null() && CStr::from_ptr(role).to_bytes() == b"master";
        let mut err: c_int = 0;
        let replicas = signed(info, c"connected_slaves".as_ptr(), &mut err);
        let replicas_known = err == 0;
        let backlog = signed(info, c"repl_backlog_active".as_ptr(), &mut err);
        let known = replicas_known && err == 0;
        free(ctx.ctx, info);
        !(master && known && replicas == 0 && backlog == 0)
    }
}

/// `rdb_last_load_keys_expired` of `INFO persistence`: keys the last load
/// dropped because their TTL had passed. 0 when unknown.
pub fn keys_expired_by_last_load(ctx: &Context) -> i64 {
    let (Some(get), Some(signed), Some(free)) = (
        api!(RedisModule_GetServerInfo),
        api!(RedisModule_ServerInfoGetFieldSigned),
        api!(RedisModule_FreeServerInfo),
    ) else {
        return 0;
    };
    // SAFETY: ctx is live; the info data is read, then freed once.
    unsafe {
        let info = get(ctx.ctx, c"persistence".as_ptr());
        if info.is_null() {
            return 0;
        }
        let mut err: c_int = 0;
        let expired = signed(info, c"rdb_last_load_keys_expired".as_ptr(), &mut err);
        free(ctx.ctx, info);
        if err == 0 {
            expired
        } else {
            0
        }
    }
}

// ---------------------------------------------------------------------------
// Replication of effects as native commands

/// `HSET key field value`.
pub fn replicate_hset(ctx: &Context, key: &RedisString, field: &[u8], value: i64) {
    // SAFETY: "sbl": a live RedisModuleString, a (pointer, length) pair and a
    // long long, in that order; Redis copies them before returning.
    if let Some(f) = api!(RedisModule_Replicate) {
        unsafe {
            f(
                ctx.ctx,
                c"HSET".as_ptr(),
                c"sbl".as_ptr(),
                key.inner,
                field.as_ptr(),
                field.len(),
                value as std::ffi::c_longlong,
            )
        };
    }
}

/// `HSET key field value` with a value that is not a number.
pub fn replicate_hset_bytes(ctx: &Context, key: &RedisString, field: &[u8], value: &[u8]) {
    // SAFETY: "sbb": a live RedisModuleString and two (pointer, length)
    // pairs; Redis copies them before returning.
    if let Some(f) = api!(RedisModule_Replicate) {
        unsafe {
            f(
                ctx.ctx,
                c"HSET".as_ptr(),
                c"sbb".as_ptr(),
                key.inner,
                field.as_ptr(),
                field.len(),
                value.as_ptr(),
                value.len(),
            )
        };
    }
}

/// `SET key 1 PXAT at`: a read hold's lease key, with its absolute end.
pub fn replicate_set_one_pxat(ctx: &Context, key: &RedisString, at_ms: i64) {
    // SAFETY: "sccl": a live RedisModuleString, two C strings and a long
    // long; Redis copies them before returning.
    if let Some(f) = api!(RedisModule_Replicate) {
        unsafe {
            f(
                ctx.ctx,
                c"SET".as_ptr(),
                c"sccl".as_ptr(),
                key.inner,
                c"1".as_ptr(),
                c"PXAT".as_ptr(),
                at_ms as std::ffi::c_longlong,
            )
        };
    }
}

/// `HDEL key field`.
pub fn replicate_hdel(ctx: &Context, key: &RedisString, field: &[u8]) {
    // SAFETY: "sb": a live RedisModuleString and a (pointer, length) pair;
    // Redis copies them before returning.
    if let Some(f) = api!(RedisModule_Replicate) {
        unsafe {
            f(
                ctx.ctx,
                c"HDEL".as_ptr(),
                c"sb".as_ptr(),
                key.inner,
                field.as_ptr(),
                field.len(),
            )
        };
    }
}

/// `PEXPIREAT key at`.
pub fn replicate_pexpireat(ctx: &Context, key: &RedisString, at_ms: i64) {
    // SAFETY: "sl": a live RedisModuleString and a long long.
    if let Some(f) = api!(RedisModule_Replicate) {
        unsafe {
            f(
                ctx.ctx,
                c"PEXPIREAT".as_ptr(),
                c"sl".as_ptr(),
                key.inner,
                at_ms as std::ffi::c_longlong,
            )
        };
    }
}

/// A one-key command: `DEL key`, `INCR key`.
pub fn replicate_key_command(ctx: &Context, command: &CStr, key: &RedisString) {
    // SAFETY: "s": one live RedisModuleString.
    if let Some(f) = api!(RedisModule_Replicate) {
        unsafe { f(ctx.ctx, command.as_ptr(), c"s".as_ptr(), key.inner) };
    }
}

/// Counts a change towards the `save` points without building a command,
/// for when nothing receives replicated commands. (It asks Redis to
/// propagate the call verbatim, which Redis drops at once with no AOF and
/// no replica; the dirty counter still moves.)
pub fn count_unpropagated_change(ctx: &Context) {
    // SAFETY: ctx is the live context of the current command or callback.
    if let Some(f) = api!(RedisModule_ReplicateVerbatim) {
        unsafe { f(ctx.ctx) };
    }
}

/// The id of the context's client (the real client in a blocked-reply
/// callback).
pub fn client_id(ctx: &Context) -> u64 {
    // SAFETY: ctx is the live context of the current callback.
    api!(RedisModule_GetClientId).map_or(0, |f| unsafe { f(ctx.ctx) })
}

// ---------------------------------------------------------------------------
// ACL

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
        // SAFETY: the string was created for this context, without auto
        // memory, and is freed exactly once here.
        if let Some(free) = api!(RedisModule_FreeString) {
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

/// Whether the ACL user running the current command may read and write
/// `key`, as INCR needs (key spec RW ACCESS UPDATE: `~` or both `%R~` and
/// `%W~` patterns), by any key pattern of that user
/// (RM_ACLCheckKeyPermissions). True when the command runs unrestricted
/// (see [`caller`]). A refusal is written to ACL LOG (reason `key`, context
/// `module`), as Redis logs a refused declared key. Fails closed: false
/// when the user cannot be told or the server lacks the calls.
pub fn may_update_key(ctx: &Context, key: &[u8]) -> bool {
    key_permitted(ctx, key, KeyUse::Update)
}

/// Whether the ACL user running the current command may read `key`; like
/// [`may_update_key`], but a refusal is not logged: the caller leaves out
/// what it would have read instead of failing.
pub fn may_read_key(ctx: &Context, key: &[u8]) -> bool {
    key_permitted(ctx, key, KeyUse::Read)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum KeyUse {
    Read,
    Update,
}

fn key_permitted(ctx: &Context, key: &[u8], usage: KeyUse) -> bool {
    let name = match caller(ctx) {
        Caller::User(name) => name,
        Caller::Unrestricted => return true,
        Caller::Unknown => return false,
    };
    let (Some(get_user), Some(check), Some(free_user)) = (
        api!(RedisModule_GetModuleUserFromUserName),
        api!(RedisModule_ACLCheckKeyPermissions),
        api!(RedisModule_FreeModuleUser),
    ) else {
        return false;
    };
    // SAFETY: `name` is a live string; the user handle is only used in
    // this call (a user can be deleted between commands) and freed below.
    let Some(user) = NonNull::new(unsafe { get_user(name.ptr.as_ptr()) }) else {
        // The client's user is gone: nothing to grant from.
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
    // SAFETY: a handle from GetModuleUserFromUserName: this frees only the
    // handle, never the ACL user itself; freed once.
    unsafe { free_user(user.as_ptr()) };
    allowed
}

// ---------------------------------------------------------------------------
// Replies

pub enum Field<'a> {
    Int(i64),
    Bulk(&'a [u8]),
    /// A nested map of names to counts.
    Counts(Vec<(&'a [u8], i64)>),
}

/// A map header (RESP3) or the array header of `len` flat pairs (RESP2).
fn reply_map_header(ctx: &Context, len: usize) -> bool {
    let len = len as std::ffi::c_long;
    // SAFETY: ctx may reply; the map header is followed by exactly `len`
    // key/value pairs (RESP2: a flat array of twice as many elements).
    match (
        api!(RedisModule_ReplyWithMap),
        api!(RedisModule_ReplyWithArray),
    ) {
        (Some(map), _) => unsafe { map(ctx.ctx, len) },
        (None, Some(array)) => unsafe { array(ctx.ctx, len * 2) },
        (None, None) => return false,
    };
    true
}

/// A map reply (RESP3) or flat array of pairs (RESP2), in the given order.
pub fn reply_map(ctx: &Context, fields: &[(&str, Field)]) {
    if !reply_map_header(ctx, fields.len()) {
        return;
    }
    for (name, value) in fields {
        reply_bulk(ctx, name.as_bytes());
        match value {
            Field::Int(n) => reply_integer(ctx, *n),
            Field::Bulk(b) => reply_bulk(ctx, b),
            Field::Counts(counts) => {
                if reply_map_header(ctx, counts.len()) {
                    for (name, n) in counts {
                        reply_bulk(ctx, name);
                        reply_integer(ctx, *n);
                    }
                } else {
                    reply_null(ctx);
                }
            }
        }
    }
}

/// Sends `PUBLISH channel message` to replicas only (not the AOF), as Redis
/// does for a PUBLISH on a standalone master, so subscribers on replicas
/// hear it too.
pub fn replicate_publish(ctx: &Context, channel: &[u8], message: &[u8]) {
    // SAFETY: "bbA" takes two (pointer, length) pairs; A = not to the AOF.
    if let Some(f) = api!(RedisModule_Replicate) {
        unsafe {
            f(
                ctx.ctx,
                c"PUBLISH".as_ptr(),
                c"bbA".as_ptr(),
                channel.as_ptr(),
                channel.len(),
                message.as_ptr(),
                message.len(),
            )
        };
    }
}

// ---------------------------------------------------------------------------
// Command metadata for COMMAND INFO / COMMAND DOCS

pub struct CommandDoc {
    pub name: &'static CStr,
    pub summary: &'static CStr,
    pub complexity: &'static CStr,
    pub since: &'static CStr,
    pub arity: c_int,
    /// Key spec flags of the key at argv[1], or of the keys after numkeys.
    pub key_flags: u64,
    /// `numkeys key [key ...]` from argv[1] instead of one key at argv[1].
    pub numkeys: bool,
    pub args: &'static [ArgDoc],
}

#[derive(Clone, Copy)]
pub enum ArgKind {
    /// The lock's key (key spec 0).
    Key,
    String,
    Integer,
    /// A bare keyword such as `FENCE`.
    Flag,
    /// Exactly one of the sub-arguments.
    OneOf,
}

pub struct ArgDoc {
    pub name: &'static CStr,
    pub kind: ArgKind,
    pub token: Option<&'static CStr>,
    pub optional: bool,
    /// May be repeated (`key [key ...]`).
    pub multiple: bool,
    pub subargs: &'static [ArgDoc],
}

/// Lays out `args` (and their sub-arguments) as the zero-terminated C
/// arrays Redis reads; `arrays` keeps every level alive until the call.
fn c_args(
    args: &[ArgDoc],
    arrays: &mut Vec<Vec<raw::RedisModuleCommandArg>>,
) -> *mut raw::RedisModuleCommandArg {
    if args.is_empty() {
        return ptr::null_mut();
    }
    let mut out = Vec::with_capacity(args.len() + 1);
    for arg in args {
        // SAFETY: all-zero is a valid empty RedisModuleCommandArg.
        let mut c: raw::RedisModuleCommandArg = unsafe { std::mem::zeroed() };
        c.name = arg.name.as_ptr();
        c.type_ = match arg.kind {
            ArgKind::Key => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY,
            ArgKind::String => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
            ArgKind::Integer => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
            ArgKind::Flag => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN,
            ArgKind::OneOf => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_ONEOF,
        };
        c.key_spec_index = if matches!(arg.kind, ArgKind::Key) {
            0
        } else {
            -1
        };
        c.token = arg.token.map_or(ptr::null(), CStr::as_ptr);
        c.flags = if arg.optional {
            raw::REDISMODULE_CMD_ARG_OPTIONAL as c_int
        } else {
            raw::REDISMODULE_CMD_ARG_NONE as c_int
        };
        if arg.multiple {
            c.flags |= raw::REDISMODULE_CMD_ARG_MULTIPLE as c_int;
        }
        c.subargs = c_args(arg.subargs, arrays);
        out.push(c);
    }
    // SAFETY: the zeroed entry terminates the array.
    out.push(unsafe { std::mem::zeroed() });
    let p = out.as_mut_ptr();
    // Moving the Vec into `arrays` keeps its heap buffer (and `p`) valid.
    arrays.push(out);
    p
}

pub const KEY_RW_UPDATE: u64 = (raw::REDISMODULE_CMD_KEY_RW
    | raw::REDISMODULE_CMD_KEY_ACCESS
    | raw::REDISMODULE_CMD_KEY_UPDATE) as u64;
pub const KEY_RW_DELETE: u64 =
    (raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_DELETE) as u64;
pub const KEY_RO_ACCESS: u64 =
    (raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS) as u64;

/// Registers summary, arity and key spec of an already created command.
/// Redis copies everything it is given, so nothing needs to outlive this.
pub fn set_command_doc(ctx: &Context, doc: &CommandDoc) -> bool {
    let (Some(get), Some(set)) = (
        api!(RedisModule_GetCommand),
        api!(RedisModule_SetCommandInfo),
    ) else {
        // Older than 7.0: commands still work, only COMMAND DOCS is poorer.
        return true;
    };
    // SAFETY: OnLoad context and a NUL-terminated name.
    let cmd = unsafe { get(ctx.ctx, doc.name.as_ptr()) };
    if cmd.is_null() {
        return false;
    }
    // SAFETY: all-zero is the documented "empty / terminator" value of these
    // plain C structs.
    let mut specs: [raw::RedisModuleCommandKeySpec; 2] = unsafe { std::mem::zeroed() };
    specs[0].flags = doc.key_flags;
    specs[0].begin_search_type = raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX;
    specs[0].bs.index.pos = 1;
    if doc.numkeys {
        // argv[1] is the key count, the keys follow it one by one.
        specs[0].find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_KEYNUM;
        specs[0].fk.keynum = raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_2 {
            keynumidx: 0,
            firstkey: 1,
            keystep: 1,
        };
    } else {
        specs[0].find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE;
        specs[0].fk.range = raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_1 {
            lastkey: 0,
            keystep: 1,
            limit: 0,
        };
    }
    let version = raw::RedisModuleCommandInfoVersion {
        version: 1,
        sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
        sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
        sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
    };
    let mut arrays = Vec::new();
    let args = c_args(doc.args, &mut arrays);
    let info = raw::RedisModuleCommandInfo {
        version: &version,
        summary: doc.summary.as_ptr(),
        complexity: doc.complexity.as_ptr(),
        since: doc.since.as_ptr(),
        history: ptr::null_mut(),
        tips: ptr::null(),
        arity: doc.arity,
        key_specs: specs.as_mut_ptr(),
        args,
    };
    // SAFETY: `info` and everything it points to live until the call
    // returns, and Redis copies what it keeps.
    unsafe { set(cmd, &info) == OK }
}
