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
//!
//! The crate root denies `unsafe` everywhere but here, and here every
//! `unsafe` block says why it is sound (`// SAFETY:`).

#![deny(clippy::undocumented_unsafe_blocks)]

use std::ffi::{c_int, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_module::{raw, Context};

/// Reads an API function pointer. `None` on a server that lacks the call.
macro_rules! api {
    ($name:ident) => {
        // SAFETY: Redis fills these pointers once, in RedisModule_Init during
        // OnLoad on the main thread, before any other call; after that they
        // are only read.
        unsafe { raw::$name }
    };
}

mod acl;
mod blocked;
mod command;
mod config;
mod events;
mod key;
mod publish;
mod replicate;
mod reply;
mod server;
mod socket;
mod string;
mod timer;

pub use acl::{may_read_key, may_read_keys, may_update_key, same_user};
pub use blocked::{block_client, unblock, BlockHandler, BlockedClient};
pub use command::{
    add_acl_category, is_keys_position_request, key_at_pos, register_command, ArgDoc, ArgKind,
    CommandBody, CommandHandler, CommandSpec, KeyArgs, KEY_RO_ACCESS, KEY_RW_DELETE, KEY_RW_UPDATE,
};
pub use config::{load_configs, register_bool_config, register_i64_config};
pub use events::{
    subscribe_client_events, subscribe_data_events, subscribe_event_loop, subscribe_expiry_events,
    subscribe_hash_events, subscribe_keyspace_events, subscribe_list_events,
    subscribe_new_key_events, subscribe_string_events, KeyspaceHandler, ServerEventHandler,
};
pub use key::{
    notify, signal_modified, Key, KeyKind, NOTIFY_GENERIC, NOTIFY_HASH, NOTIFY_LIST, NOTIFY_STRING,
    NOTIFY_ZSET,
};
pub use publish::{publish, publish_message, publish_unlock, replicate_publish};
pub use replicate::{count_unpropagated_change, replicate, Native};
pub use reply::{
    reply_error, reply_integer, reply_integers, reply_map, reply_maps, reply_null, Field,
};
pub use server::{
    client_id, good_replicas, keys_expired_by_last_load, now_ms, replication_may_listen, select_db,
    selected_db, server_config_i64, signal_modified_keys_explicitly, writes_paused,
};
pub use socket::close_when_peer_is_gone;
pub use string::string;
pub use timer::{
    after_every_timer, create_timer, in_timer, keep_detached_context, one_shots_pending,
    run_after_event, run_timer_on_main_thread, stop_timer, wake_event_loop, TimerHandler, TimerId,
};

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
    if let Some(f) = api!(RedisModule_Log) {
        // SAFETY: "%s" with one NUL-terminated argument: the message is data,
        // never a format string.
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
