//! Module configuration, settable at load (`--loadmodule liblock.so
//! default-lease-ms 5000`) and with CONFIG SET `lock.<name>`.
//!
//! Offers the settings, their [`Range`]s (which CONFIG SET enforces), and
//! [`load_args_out_of_range`] for the values given at load, which Redis
//! takes as the registered defaults without checking them.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering::Relaxed};

use crate::rules::args::MAX_DURATION_MS;

/// The values a numeric setting accepts, bounds included.
pub struct Range {
    pub min: i64,
    pub max: i64,
}

/// `lock.default-lease-ms`: the lease of an acquire without PX/EX.
pub static DEFAULT_LEASE_MS: AtomicI64 = AtomicI64::new(DEFAULT_LEASE);
pub const DEFAULT_LEASE: i64 = 30_000;
pub const DEFAULT_LEASE_RANGE: Range = Range {
    min: 1,
    max: MAX_DURATION_MS,
};

/// `lock.redisson-notify`: publish `0` on `redisson_lock__channel:{key}`
/// when a lock is released, so Redisson clients waiting on it wake up.
pub static REDISSON_NOTIFY: AtomicBool = AtomicBool::new(true);

/// `lock.keepalive-dead-peer-ms`: the connection of a KEEPALIVE holder
/// whose host stops answering (a crash, a network cut) is closed by the
/// kernel within about this long (TCP keepalive probes and
/// TCP_USER_TIMEOUT on that connection), which ends the renewals.
pub static KEEPALIVE_DEAD_PEER_MS: AtomicI64 = AtomicI64::new(DEFAULT_DEAD_PEER_MS);
pub const DEFAULT_DEAD_PEER_MS: i64 = 10_000;
/// At least a second: below that the kernel would cut connections that are
/// only slow.
pub const DEAD_PEER_RANGE: Range = Range {
    min: 1000,
    max: 86_400_000,
};

/// `lock.keepalive-max-hold-ms`: renewals of a KEEPALIVE hold stop this long
/// after it was first bound (0: never), so that a holder that is alive at
/// the TCP level but stuck (stopped, deadlocked) loses the lock after all.
pub static KEEPALIVE_MAX_HOLD_MS: AtomicI64 = AtomicI64::new(0);
pub const MAX_HOLD_RANGE: Range = Range {
    min: 0,
    max: MAX_DURATION_MS,
};

/// `lock.token-ttl-ms`: how long a fencing token key is kept after the
/// latest token (and at least until the lease it fenced ends). Tokens
/// start from the clock once it is gone, so this only bounds how far back
/// a server's clock may step without a token going back.
pub static TOKEN_TTL_MS: AtomicI64 = AtomicI64::new(DEFAULT_TOKEN_TTL_MS);
pub const DEFAULT_TOKEN_TTL_MS: i64 = 3_600_000;
pub const TOKEN_TTL_RANGE: Range = Range {
    min: 1,
    max: MAX_DURATION_MS,
};

pub fn token_ttl_ms() -> i64 {
    TOKEN_TTL_MS.load(Relaxed)
}

/// The first numeric setting whose value given at load is outside its
/// range, as "name value is out of range (min to max)". Checked once the
/// settings are registered, so that a load argument CONFIG SET would refuse
/// fails the load instead.
pub fn load_args_out_of_range() -> Option<String> {
    [
        ("default-lease-ms", &DEFAULT_LEASE_MS, DEFAULT_LEASE_RANGE),
        (
            "keepalive-dead-peer-ms",
            &KEEPALIVE_DEAD_PEER_MS,
            DEAD_PEER_RANGE,
        ),
        (
            "keepalive-max-hold-ms",
            &KEEPALIVE_MAX_HOLD_MS,
            MAX_HOLD_RANGE,
        ),
        ("token-ttl-ms", &TOKEN_TTL_MS, TOKEN_TTL_RANGE),
    ]
    .into_iter()
    .find_map(|(name, value, Range { min, max })| {
        let value = value.load(Relaxed);
        (!(min..=max).contains(&value))
            .then(|| format!("{name} {value} is out of range ({min} to {max})"))
    })
}

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
