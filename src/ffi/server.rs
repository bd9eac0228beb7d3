//! What the server says about itself and the current context: the clock,
//! the selected db, whether it is paused, INFO fields the module reads, the
//! client id.

use std::ffi::{c_int, CStr};

use super::OK;
use redis_module::{raw, Context, RedisValue};

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
///
/// Redis decides that a pause is over by its cached clock, which a command
/// (`call()`) and the cron (every 1000/hz ms) refresh, a timer not: asked
/// from a timer after a pause ended on an otherwise idle server, it says
/// "paused" for up to 100 ms more, which once kept a KEEPALIVE renewal out
/// past its lease. So a "paused" is asked again after a PING through
/// RM_Call, which runs `call()`.
pub fn writes_paused(ctx: &Context) -> bool {
    if !avoid_replica_traffic() {
        return false;
    }
    let _ = ctx.call("PING", &[] as &[&str]);
    avoid_replica_traffic()
}

fn avoid_replica_traffic() -> bool {
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

/// `min_slaves_good_slaves` of `INFO replication`: the replicas whose last
/// ack is within `min-replicas-max-lag`. `None` when the server does not
/// show it, which it does only while `min-replicas-to-write` and
/// `min-replicas-max-lag` are both set (it then refuses no write for want
/// of replicas), or when INFO cannot be read.
pub fn good_replicas(ctx: &Context) -> Option<i64> {
    info_signed(ctx, c"replication", c"min_slaves_good_slaves")
}

/// `CONFIG GET <name>` of an integer setting of the server; `None` if the
/// reply is not the one expected.
pub fn server_config_i64(ctx: &Context, name: &str) -> Option<i64> {
    let reply = ctx.call("CONFIG", &["GET", name]).ok()?;
    let RedisValue::Array(pair) = reply else {
        return None;
    };
    match pair.get(1)? {
        RedisValue::SimpleString(s) => s.parse().ok(),
        RedisValue::BulkString(s) => s.parse().ok(),
        RedisValue::StringBuffer(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        RedisValue::BulkRedisString(s) => s.to_string_lossy().parse().ok(),
        _ => None,
    }
}

/// `rdb_last_load_keys_expired` of `INFO persistence`: keys the last load
/// dropped because their TTL had passed. 0 when unknown.
pub fn keys_expired_by_last_load(ctx: &Context) -> i64 {
    info_signed(ctx, c"persistence", c"rdb_last_load_keys_expired").unwrap_or(0)
}

/// One integer field of one `INFO` section; `None` when the server does not
/// show it or INFO cannot be read.
fn info_signed(ctx: &Context, section: &CStr, field: &CStr) -> Option<i64> {
    let (Some(get), Some(signed), Some(free)) = (
        api!(RedisModule_GetServerInfo),
        api!(RedisModule_ServerInfoGetFieldSigned),
        api!(RedisModule_FreeServerInfo),
    ) else {
        return None;
    };
    // SAFETY: ctx is live; section and field are NUL-terminated; the info
    // data is read, then freed once.
    unsafe {
        let info = get(ctx.ctx, section.as_ptr());
        if info.is_null() {
            return None;
        }
        let mut err: c_int = 0;
        let value = signed(info, field.as_ptr(), &mut err);
        free(ctx.ctx, info);
        (err == 0).then_some(value)
    }
}

/// The id of the context's client (the real client in a blocked-reply
/// callback).
pub fn client_id(ctx: &Context) -> u64 {
    // SAFETY: ctx is the live context of the current callback.
    api!(RedisModule_GetClientId).map_or(0, |f| unsafe { f(ctx.ctx) })
}
