//! The lock key in Redis: reads it into the rules' [`LockState`], and applies
//! the rules' writes with the key API, replicating each as the native command
//! a replica (with or without this module) and the AOF will replay.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use redis_module::{CallOptionsBuilder, CallResult, Context, ContextFlags, RedisString};

use crate::config;
use crate::ffi::{self, Key, KeyKind};
use crate::rules::args::parse_i64;
use crate::rules::error::LockError;
use crate::rules::keys::{notify_channel, token_key};
use crate::rules::lock::{LockState, Write};

/// Set while this module fires keyspace notifications for its own writes, so
/// its own listener can tell them from outside changes.
static NOTIFYING: AtomicBool = AtomicBool::new(false);

pub fn is_own_notification() -> bool {
    NOTIFYING.load(Relaxed)
}

fn notify_own(ctx: &Context, class: std::ffi::c_int, event: &std::ffi::CStr, name: &RedisString) {
    NOTIFYING.store(true, Relaxed);
    ffi::notify(ctx, class, event, name);
    NOTIFYING.store(false, Relaxed);
}

/// A lock key opened for writing.
pub struct LockKey<'c> {
    name: &'c RedisString,
    key: Key<'c>,
}

impl<'c> LockKey<'c> {
    /// Opens `name` in the context's selected db. On a master this runs lazy
    /// expiry first, so an expired lease reads as a free lock.
    pub fn open(ctx: &'c Context, name: &'c RedisString) -> Result<Self, LockError> {
        let key =
            Key::open(ctx, name, true).ok_or_else(|| LockError::internal("cannot open key"))?;
        Ok(Self { name, key })
    }

    pub fn read(&self) -> Result<LockState, LockError> {
        read_state(&self.key)
    }

    pub fn ttl_ms(&self) -> Option<i64> {
        self.key.ttl_ms()
    }

    /// Applies `writes` in order and replicates each one. The caller's
    /// execution unit wraps them in one MULTI/EXEC.
    pub fn apply(&self, ctx: &Context, writes: &[Write]) {
        let name = self.name.as_slice();
        let mut modified = false;
        for write in writes {
            match write {
                Write::SetHolds { owner, holds } => {
                    let holds = holds.to_string();
                    self.key.hash_set(ctx, owner, holds.as_bytes());
                    ctx.replicate("HSET", &[name, owner.as_slice(), holds.as_bytes()]);
                    notify_own(ctx, ffi::NOTIFY_HASH, c"hset", self.name);
                    modified = true;
                }
                Write::ExpireAt(at) => {
                    self.key.expire_at(*at);
                    ctx.replicate("PEXPIREAT", &[name, at.to_string().as_bytes()]);
                    notify_own(ctx, ffi::NOTIFY_GENERIC, c"expire", self.name);
                    modified = true;
                }
                Write::Delete => {
                    self.key.delete();
                    ctx.replicate("DEL", &[name]);
                    notify_own(ctx, ffi::NOTIFY_GENERIC, c"del", self.name);
                    modified = true;
                }
                Write::IncrToken => incr_token(ctx, name),
                Write::Notify => {
                    if config::redisson_notify() {
                        let sharded = ctx.get_flags().contains(ContextFlags::CLUSTER);
                        ffi::publish(ctx, &notify_channel(name), b"0", sharded);
                    }
                }
            }
        }
        if modified {
            ffi::signal_modified(ctx, self.name);
        }
    }
}

/// A lock key opened for reading only (LOCK.INFO, also on replicas); `None`
/// when the key does not exist.
pub fn read_only(
    ctx: &Context,
    name: &RedisString,
) -> Result<Option<(LockState, Option<i64>)>, LockError> {
    let Some(key) = Key::open(ctx, name, false) else {
        return Ok(None);
    };
    let state = read_state(&key)?;
    Ok(Some((state, key.ttl_ms())))
}

fn read_state(key: &Key) -> Result<LockState, LockError> {
    match key.kind() {
        KeyKind::Empty => Ok(LockState::Free),
        KeyKind::Hash => match key.len() {
            // Only a one-field hash is worth scanning; anything bigger is
            // not a lock whatever it holds.
            1 => LockState::from_hash(&key.hash_fields()),
            n => Err(LockState::too_many_fields(n)),
        },
        KeyKind::String | KeyKind::Other => Err(LockError::wrong_type()),
    }
}

/// The current value of the lock's fencing counter: 0 when it does not
/// exist yet, an error if it holds something INCR would refuse.
pub fn read_token(ctx: &Context, lock: &[u8]) -> Result<i64, LockError> {
    let name = ffi::string(ctx, &token_key(lock));
    let Some(key) = Key::open(ctx, &name, false) else {
        return Ok(0);
    };
    match key.kind() {
        KeyKind::Empty => Ok(0),
        KeyKind::String => parse_i64(&key.string_value()).ok_or_else(LockError::token_not_integer),
        KeyKind::Hash | KeyKind::Other => Err(LockError::token_wrong_type()),
    }
}

/// The fencing counter for LOCK.INFO: only when it exists and is valid.
pub fn existing_token(ctx: &Context, lock: &[u8]) -> Option<i64> {
    let name = ffi::string(ctx, &token_key(lock));
    let key = Key::open(ctx, &name, false)?;
    (key.kind() == KeyKind::String)
        .then(|| parse_i64(&key.string_value()))
        .flatten()
}

/// INCR through the server itself, so the token key behaves on the master
/// exactly as the replicated INCR will on replicas (encoding, kept TTL).
fn incr_token(ctx: &Context, lock: &[u8]) {
    let key = token_key(lock);
    let options = CallOptionsBuilder::new()
        .replicate()
        .errors_as_replies()
        .build();
    NOTIFYING.store(true, Relaxed);
    let result: CallResult = ctx.call_ext("INCR", &options, &[key.as_slice()]);
    NOTIFYING.store(false, Relaxed);
    if let Err(e) = result {
        // The rules checked the value before deciding; reaching this means
        // the check and the server disagree.
        ctx.log_warning(&format!("lock: INCR of the fencing token failed: {e:?}"));
    }
}
