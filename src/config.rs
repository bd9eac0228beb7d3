//! Module configuration, settable at load (`--loadmodule liblock.so
//! default-lease-ms 5000`) and with CONFIG SET `lock.<name>`.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering::Relaxed};

/// `lock.default-lease-ms`: the lease of an acquire without PX/EX.
pub static DEFAULT_LEASE_MS: AtomicI64 = AtomicI64::new(DEFAULT_LEASE);
pub const DEFAULT_LEASE: i64 = 30_000;

/// `lock.redisson-notify`: publish `0` on `redisson_lock__channel:{key}`
/// when a lock is released, so Redisson clients waiting on it wake up.
pub static REDISSON_NOTIFY: AtomicBool = AtomicBool::new(true);

/// `lock.keepalive-dead-peer-ms`: the connection of a KEEPALIVE holder
/// whose host stops answering (a crash, a network cut) is closed by the
/// kernel within about this long (TCP keepalive probes and
/// TCP_USER_TIMEOUT on that connection), which ends the renewals.
pub static KEEPALIVE_DEAD_PEER_MS: AtomicI64 = AtomicI64::new(DEFAULT_DEAD_PEER_MS);
pub const DEFAULT_DEAD_PEER_MS: i64 = 10_000;

/// `lock.keepalive-max-hold-ms`: renewals of a KEEPALIVE hold stop this long
/// after it was first bound (0: never), so that a holder that is alive at
/// the TCP level but stuck (stopped, deadlocked) loses the lock after all.
pub static KEEPALIVE_MAX_HOLD_MS: AtomicI64 = AtomicI64::new(0);

pub fn keepalive_dead_peer_ms() -> i64 {
    KEEPALIVE_DEAD_PEER_MS.load(Relaxed)
}

pub fn keepalive_max_hold_ms() -> i64 {
    KEEPALIVE_MAX_HOLD_MS.load(Relaxed)
}

pub fn default_lease_ms() -> i64 {
    DEFAULT_LEASE_MS.load(Relaxed)
}

pub fn redisson_notify() -> bool {
    REDISSON_NOTIFY.load(Relaxed)
}
