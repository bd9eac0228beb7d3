//! Module configuration, settable at load (`--loadmodule liblock.so
//! default-lease-ms 5000`) and with CONFIG SET `lock.<name>`.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering::Relaxed};

/// `lock.default-lease-ms`: the lease of an acquire without PX/EX.
pub static DEFAULT_LEASE_MS: AtomicI64 = AtomicI64::new(DEFAULT_LEASE);
pub const DEFAULT_LEASE: i64 = 30_000;

/// `lock.redisson-notify`: publish `0` on `redisson_lock__channel:{key}`
/// when a lock is released, so Redisson clients waiting on it wake up.
pub static REDISSON_NOTIFY: AtomicBool = AtomicBool::new(true);

pub fn default_lease_ms() -> i64 {
    DEFAULT_LEASE_MS.load(Relaxed)
}

pub fn redisson_notify() -> bool {
    REDISSON_NOTIFY.load(Relaxed)
}
