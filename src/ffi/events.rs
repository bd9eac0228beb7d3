//! Subscriptions: keyspace notifications and server events (flushes,
//! SWAPDB, role and replica changes, forks, loading, CONFIG SET, client
//! disconnections, event-loop wake-ups).

use std::ffi::{c_int, c_void, CStr};

use super::string::with_string_bytes;
use super::{guard, OK};
use redis_module::{raw, Context};

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
    // The key's bytes in place: the string lives for the whole callback.
    with_string_bytes(key, |key| {
        guard(&context, || H::event(&context, event, key))
    });
    OK
}

/// Calls `H::event` for every keyspace event of `classes`.
fn subscribe<H: KeyspaceHandler>(ctx: &Context, classes: c_int) -> bool {
    // SAFETY: ctx is live; the callback is monomorphised for H.
    api!(RedisModule_SubscribeToKeyspaceEvents)
        .is_some_and(|f| unsafe { f(ctx.ctx, classes, Some(on_keyspace_event::<H>)) } == OK)
}

/// The keyspace event classes that can end a lock: `del` (DEL, UNLINK, the
/// last HDEL, an EXPIRE in the past), RENAME, MOVE, RESTORE, and expiry and
/// eviction. Commands that overwrite a key with another type (SET, LPUSH...)
/// are not among them: every SET or HSET on the server would pay for it
/// (string events and key creations are listened to apart, once a caller
/// waited on a semaphore or a latch).
pub fn subscribe_keyspace_events<H: KeyspaceHandler>(ctx: &Context) -> bool {
    subscribe::<H>(
        ctx,
        raw::REDISMODULE_NOTIFY_GENERIC
            | raw::REDISMODULE_NOTIFY_EXPIRED
            | raw::REDISMODULE_NOTIFY_EVICTED,
    )
}

/// String commands' events (`incrby`, `set`...).
pub fn subscribe_string_events<H: KeyspaceHandler>(ctx: &Context) -> bool {
    subscribe::<H>(ctx, raw::REDISMODULE_NOTIFY_STRING)
}

/// Hash commands' events (`hset`, `hdel`...): on a replica, the replicated
/// writes of an election's leader record.
pub fn subscribe_hash_events<H: KeyspaceHandler>(ctx: &Context) -> bool {
    subscribe::<H>(ctx, raw::REDISMODULE_NOTIFY_HASH)
}

/// List commands' events (`rpush`, `lpop`, `lrem`...): Redisson's fair
/// queues.
pub fn subscribe_list_events<H: KeyspaceHandler>(ctx: &Context) -> bool {
    subscribe::<H>(ctx, raw::REDISMODULE_NOTIFY_LIST)
}

/// Key creations (`new`; servers before 7.0 never send them).
pub fn subscribe_new_key_events<H: KeyspaceHandler>(ctx: &Context) -> bool {
    subscribe::<H>(ctx, raw::REDISMODULE_NOTIFY_NEW)
}

/// Only expiry and eviction: no command (this module's own writes
/// included) fires them, so listening costs the lock commands nothing.
pub fn subscribe_expiry_events<H: KeyspaceHandler>(ctx: &Context) -> bool {
    subscribe::<H>(
        ctx,
        raw::REDISMODULE_NOTIFY_EXPIRED | raw::REDISMODULE_NOTIFY_EVICTED,
    )
}

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
    /// `CONFIG SET` changed settings.
    fn config_changed(ctx: &Context);
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
        raw::REDISMODULE_EVENT_CONFIG => {
            guard(&context, || H::config_changed(&context));
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
/// SWAPDB, role changes, replicas, forks, the end of loading, `CONFIG SET`.
/// All rare.
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
            (raw::REDISMODULE_EVENT_CONFIG, on_server_event::<H>),
        ],
    )
}

/// Client disconnections: they matter to waiters and KEEPALIVE holds.
pub fn subscribe_client_events<H: ServerEventHandler>(ctx: &Context) -> bool {
    subscribe_server_events(
        ctx,
        &[(raw::REDISMODULE_EVENT_CLIENT_CHANGE, on_server_event::<H>)],
    )
}

/// Event loop wake-ups, which only matter once callers wait: this fires on
/// every turn of the event loop.
pub fn subscribe_event_loop<H: ServerEventHandler>(ctx: &Context) -> bool {
    subscribe_server_events(
        ctx,
        &[(raw::REDISMODULE_EVENT_EVENTLOOP, on_event_loop::<H>)],
    )
}
