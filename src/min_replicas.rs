//! `min-replicas-to-write` for the module's own writes. Redis refuses a
//! write command (`NOREPLICAS`) while fewer replicas than that have acked
//! within `min-replicas-max-lag`; the module's timers and events (a lease
//! ending and the lock handed to the next caller, a KEEPALIVE renewal, a
//! lost grant released) write outside any command, so Redis does not stop
//! them. This file does: a master cut off from its replicas, about to be
//! replaced by one of them, would otherwise go on handing locks to its
//! queued callers while the new master hands the same locks to others.
//!
//! The setting is read at load and after every `CONFIG SET`; the count of
//! good replicas from `INFO replication` at each check, and only while the
//! setting is on.
//!
//! Offers: [`read_setting`], [`enough`].

use std::sync::atomic::{AtomicI64, Ordering::Relaxed};

use redis_module::Context;

use crate::ffi;

/// `min-replicas-to-write` as last read; 0 (off) until read.
static MIN_REPLICAS_TO_WRITE: AtomicI64 = AtomicI64::new(0);

/// Reads `min-replicas-to-write` (at load, after a configuration change).
/// Unreadable, it keeps its last value.
pub fn read_setting(ctx: &Context) {
    if let Some(n) = ffi::min_replicas_to_write(ctx) {
        MIN_REPLICAS_TO_WRITE.store(n, Relaxed);
    }
}

/// Whether this master has the replicas a write needs, as Redis decides
/// for a write command.
pub fn enough(ctx: &Context) -> bool {
    let needed = MIN_REPLICAS_TO_WRITE.load(Relaxed);
    // Without the good-replica count (min-replicas-max-lag is 0) Redis
    // refuses nothing either.
    needed <= 0 || ffi::good_replicas(ctx).is_none_or(|good| good >= needed)
}
