//! Opening keys and reading and writing them through the key API, and the
//! side effects a native write has: WATCH/client-side-caching invalidation
//! and keyspace notifications.

use std::ffi::{c_int, c_void, CStr};
use std::marker::PhantomData;
use std::ptr::{self, NonNull};
use std::sync::atomic::AtomicPtr;

use super::string::{kept_string, string, string_bytes, with_string_bytes};
use super::OK;
use redis_module::{raw, Context, RedisString};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    Empty,
    Hash,
    String,
    SortedSet,
    List,
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
            raw::REDISMODULE_KEYTYPE_ZSET => KeyKind::SortedSet,
            raw::REDISMODULE_KEYTYPE_LIST => KeyKind::List,
            _ => KeyKind::Other,
        }
    }

    /// Number of fields of a hash (elements of a list).
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
        if let Some(free) = api!(RedisModule_FreeString) {
            // SAFETY: HashGet handed us a new string (no auto memory); freed once.
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
        if let (true, Some(free)) = (owned, api!(RedisModule_FreeString)) {
            // SAFETY: created above for this call without auto memory; freed once.
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

    /// Removes the key's expiry (PERSIST). The key must exist.
    pub fn persist(&self) -> bool {
        // SAFETY: open writable key; REDISMODULE_NO_EXPIRE (-1) removes its
        // expiry, and Redis rejects a missing value.
        api!(RedisModule_SetExpire).is_some_and(|f| unsafe { f(self.raw(), -1) } == OK)
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

impl Key<'_> {
    /// Every member of a sorted set with its score, lowest score first.
    pub fn zset_members(&self) -> Vec<(Vec<u8>, f64)> {
        let mut out = Vec::new();
        let (Some(first), Some(current), Some(next), Some(end), Some(stop)) = (
            api!(RedisModule_ZsetFirstInScoreRange),
            api!(RedisModule_ZsetRangeCurrentElement),
            api!(RedisModule_ZsetRangeNext),
            api!(RedisModule_ZsetRangeEndReached),
            api!(RedisModule_ZsetRangeStop),
        ) else {
            return out;
        };
        let free = api!(RedisModule_FreeString);
        // SAFETY: the key handle is open and holds a sorted set (checked by
        // the caller; the range calls fail harmlessly otherwise); each
        // element string is copied and freed once (no auto memory: a NULL
        // context frees it); the range is stopped before returning.
        unsafe {
            if first(self.raw(), f64::NEG_INFINITY, f64::INFINITY, 0, 0) != OK {
                return out;
            }
            while end(self.raw()) == 0 {
                let mut score = 0.0;
                let member = current(self.raw(), &mut score);
                if member.is_null() {
                    break;
                }
                out.push((string_bytes(member), score));
                if let Some(free) = free {
                    free(ptr::null_mut(), member);
                }
                if next(self.raw()) == 0 {
                    break;
                }
            }
            stop(self.raw());
        }
        out
    }

    /// Every element of a list, head first.
    pub fn list_items(&self) -> Vec<Vec<u8>> {
        let Some(get) = api!(RedisModule_ListGet) else {
            return Vec::new();
        };
        let free = api!(RedisModule_FreeString);
        let len = self.len();
        let mut out = Vec::with_capacity(len);
        for index in 0..len {
            let Ok(index) = std::ffi::c_long::try_from(index) else {
                break;
            };
            // SAFETY: the key handle is open (a list, checked by the caller;
            // ListGet fails with NULL otherwise); the element is copied and
            // freed once (no auto memory: a NULL context frees it).
            unsafe {
                let item = get(self.raw(), index);
                if item.is_null() {
                    break;
                }
                out.push(string_bytes(item));
                if let Some(free) = free {
                    free(ptr::null_mut(), item);
                }
            }
        }
        out
    }

    /// `LPOP key` with the key API (no notification): the head element. An
    /// emptied list is deleted.
    pub fn list_pop_head(&self) -> Option<Vec<u8>> {
        let pop = api!(RedisModule_ListPop)?;
        let free = api!(RedisModule_FreeString);
        // SAFETY: open writable key; the popped string is copied and freed
        // once (a NULL context frees it).
        unsafe {
            let item = pop(self.raw(), raw::REDISMODULE_LIST_HEAD as c_int);
            if item.is_null() {
                return None;
            }
            let bytes = string_bytes(item);
            if let Some(free) = free {
                free(ptr::null_mut(), item);
            }
            Some(bytes)
        }
    }

    /// `ZSCORE key member`; `None` when it is not a member.
    pub fn zset_score(&self, ctx: &Context, member: &[u8]) -> Option<f64> {
        let member = string(ctx, member);
        let mut score = 0.0;
        // SAFETY: open key; the member string is live for the call.
        let found = api!(RedisModule_ZsetScore)
            .is_some_and(|f| unsafe { f(self.raw(), member.inner, &mut score) } == OK);
        found.then_some(score)
    }

    /// `ZADD key score member` with the key API (no notification).
    pub fn zset_add(&self, ctx: &Context, score: f64, member: &[u8]) -> bool {
        let member = string(ctx, member);
        let mut flags: c_int = 0;
        // SAFETY: open writable key; Redis copies the member.
        api!(RedisModule_ZsetAdd)
            .is_some_and(|f| unsafe { f(self.raw(), score, member.inner, &mut flags) } == OK)
    }

    /// `ZREM key member` with the key API (no notification). An emptied
    /// set is deleted when the key is closed.
    pub fn zset_remove(&self, ctx: &Context, member: &[u8]) -> bool {
        let member = string(ctx, member);
        let mut deleted: c_int = 0;
        // SAFETY: open writable key; the member string is live for the call.
        api!(RedisModule_ZsetRem)
            .is_some_and(|f| unsafe { f(self.raw(), member.inner, &mut deleted) } == OK)
            && deleted != 0
    }
}

impl Drop for Key<'_> {
    fn drop(&mut self) {
        if let Some(f) = api!(RedisModule_CloseKey) {
            // SAFETY: the handle was opened by RM_OpenKey and is closed once.
            unsafe { f(self.raw()) };
        }
    }
}

/// Marks `name` as modified for WATCH and client-side caching.
pub fn signal_modified(ctx: &Context, name: &RedisString) {
    if let Some(f) = api!(RedisModule_SignalModifiedKey) {
        // SAFETY: ctx and name are live for the callback.
        unsafe { f(ctx.ctx, name.inner) };
    }
}

/// Fires a keyspace notification, as the native command would.
pub fn notify(ctx: &Context, class: c_int, event: &CStr, name: &RedisString) {
    if let Some(f) = api!(RedisModule_NotifyKeyspaceEvent) {
        // SAFETY: ctx, event and name are live for the duration of the call.
        unsafe { f(ctx.ctx, class, event.as_ptr(), name.inner) };
    }
}

pub const NOTIFY_GENERIC: c_int = raw::REDISMODULE_NOTIFY_GENERIC;
pub const NOTIFY_HASH: c_int = raw::REDISMODULE_NOTIFY_HASH;
pub const NOTIFY_STRING: c_int = raw::REDISMODULE_NOTIFY_STRING;
pub const NOTIFY_ZSET: c_int = raw::REDISMODULE_NOTIFY_ZSET;
pub const NOTIFY_LIST: c_int = raw::REDISMODULE_NOTIFY_LIST;
