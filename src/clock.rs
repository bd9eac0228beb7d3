//! The wall clock in microseconds since 1970: the floor of the next fencing
//! token (`store.rs`) and the lease alarm's wake-up times (`lease.rs`). The
//! server's own millisecond clock, the one key expiry uses, is
//! `ffi::now_ms`; both read the same system clock.
//!
//! Offers: [`unix_micros`].

use std::time::{SystemTime, UNIX_EPOCH};

/// Microseconds since 1970; 0 if the clock is set before it.
pub fn unix_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}
