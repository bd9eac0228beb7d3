//! Fencing tokens: each lock's counter (`redisson_lock_token:{name}`, as
//! Redisson's RFencedLock keeps it), read as the next token is counted
//! from, and written with the value itself, not an INCR, so that a replica
//! or an AOF whose counter missed writes lands on it too.
//!
//! Offers: [`last_token`], [`existing_token`], [`set_token`],
//! [`keep_token_key`].

use std::sync::atomic::{AtomicI64, Ordering::Relaxed};

use redis_module::Context;

use crate::ffi::{self, Key, KeyKind, Native};
use crate::native_writes::{notify_own, replicate_or_count, set_counter, set_until};
use crate::placement::Placement;
use crate::{clock, config};
use lock_rules::args::parse_i64;
use lock_rules::error::LockError;
use lock_rules::keys::{token_key, token_key_in_slot};
use lock_rules::transition::TOKENS_PER_MS;

/// The highest fencing token this process handed out on the clock (not
/// ahead of it), for any lock. A lock's next token is above it too, while
/// it is from the current millisecond: the clock floor alone would repeat a
/// token granted earlier in the same millisecond once the lock's counter is
/// gone (FLUSHALL, DEL, its TTL). A token from an earlier millisecond is
/// below the floor anyway. Another server (a promoted replica, a restart)
/// starts from the clock: by then milliseconds have passed.
static HIGHEST_TOKEN: AtomicI64 = AtomicI64::new(0);

/// The first token of the millisecond after the one of `now_us`.
fn tokens_ahead(now_us: i64) -> i64 {
    (now_us / TOKENS_PER_MS)
        .saturating_add(1)
        .saturating_mul(TOKENS_PER_MS)
}

/// The floor of the next token is the clock in microseconds (the rules
/// floor it at the millisecond; this is finer). Two masters alive at once
/// (a stopped master that comes back and serves its clients until Sentinel
/// demotes it) each grant from their own counter: floored at the
/// millisecond their tokens met hundreds of times per failover, at the
/// microsecond only when both grant one lock in the same microsecond.
///
/// The last fencing token of the lock, as the next one is counted from:
/// its counter, this process's highest token of this millisecond, or the
/// microsecond before now, whichever is highest; an error if the counter
/// holds something INCR would refuse.
pub fn last_token(ctx: &Context, lock: &[u8]) -> Result<i64, LockError> {
    let now_us = clock::unix_micros();
    let highest = HIGHEST_TOKEN.load(Relaxed);
    let recent = if highest < tokens_ahead(now_us) {
        highest
    } else {
        0
    };
    read_token(ctx, lock).map(|counter| counter.max(recent).max(now_us - 1))
}

/// The current value of the lock's fencing counter: 0 when it does not
/// exist yet, an error if it holds something INCR would refuse. In a cluster
/// whose slot is migrating, a missing token key may already be on the other
/// node, so its value is unknown here.
fn read_token(ctx: &Context, lock: &[u8]) -> Result<i64, LockError> {
    let name = ffi::string(ctx, &token_key(lock));
    let value = Key::open(ctx, &name, false).map(|key| (key.kind(), key.string_value()));
    match value {
        Some((KeyKind::String, value)) => {
            parse_i64(&value).ok_or_else(LockError::token_not_integer)
        }
        Some((KeyKind::Hash | KeyKind::SortedSet | KeyKind::List | KeyKind::Other, _)) => {
            Err(LockError::token_wrong_type())
        }
        Some((KeyKind::Empty, _)) | None if Placement::read(ctx).serves(lock) => Ok(0),
        Some((KeyKind::Empty, _)) | None => Err(LockError::token_unavailable()),
    }
}

/// The fencing counter for LOCK.INFO: only when it exists, holds an integer,
/// is in the lock's slot, and the caller may read it.
pub fn existing_token(ctx: &Context, lock: &[u8]) -> Option<i64> {
    let token_key = token_key_in_slot(lock).ok()?;
    if !ffi::may_read_key(ctx, &token_key) {
        return None;
    }
    let name = ffi::string(ctx, &token_key);
    let key = Key::open(ctx, &name, false)?;
    (key.kind() == KeyKind::String)
        .then(|| parse_i64(&key.string_value()))
        .flatten()
}

/// `SET <token key> to PXAT at` with the key API, replicated as such: the
/// value itself, not an INCR, so that a replica or an AOF whose counter
/// missed writes lands on it too. The key is kept until the fenced hold's
/// lease ends and `lock.token-ttl-ms` from now at least, and no less than
/// it already was; once it is gone, the next token starts from the clock
/// (see `lock_rules::transition::TOKENS_PER_MS`), so idle locks leave nothing
/// behind. A counter without an expiry is Redisson's (its RFencedLock
/// `INCR`s it, and never lets it expire: see [`keep_token_key`]) and stays
/// without one: Redisson's next `INCR` of a counter that expired would
/// start again from 1, below every token before it.
pub fn set_token(ctx: &Context, lock: &[u8], to: i64, fenced_until: i64, native: bool) {
    let name = ffi::string(ctx, &token_key(lock));
    let Some(key) = Key::open(ctx, &name, true) else {
        return ffi::log_warning(ctx, "lock: cannot open the fencing token key");
    };
    if to < tokens_ahead(clock::unix_micros()) {
        HIGHEST_TOKEN.fetch_max(to, Relaxed);
    }
    if key.kind() == KeyKind::String && key.expires_at().is_none() {
        return set_counter(ctx, &name, &key, to, None, native);
    }
    let keep_until = key
        .expires_at()
        .unwrap_or(0)
        .max(fenced_until)
        .max(ffi::now_ms().saturating_add(config::token_ttl_ms()));
    set_until(ctx, &name, &key, to, keep_until, native);
}

/// A fencing counter Redisson's RFencedLock `INCR`ed (`name`, a
/// `redisson_lock_token:...` key, heard by its keyspace event) loses the
/// expiry the module gave it: Redisson keeps its counters for ever, and its
/// `INCR` of one that expired would hand out 1, below every token before it
/// (the module's next token comes from the clock, Redisson's does not).
/// `PERSIST`, replicated as such; nothing when the key has no expiry.
pub fn keep_token_key(ctx: &Context, name: &[u8], native: bool) {
    let name = ffi::string(ctx, name);
    let Some(key) = Key::open(ctx, &name, true) else {
        return;
    };
    if key.kind() != KeyKind::String || key.expires_at().is_none() || !key.persist() {
        return;
    }
    replicate_or_count(ctx, &name, Native::Persist, native);
    notify_own(ctx, ffi::NOTIFY_GENERIC, c"persist", &name);
    ffi::signal_modified(ctx, &name);
}
