//! The lease floor: how often the server renews a kept-alive hold, how late
//! a renewal can be, and so the shortest lease it can keep alive (which
//! `INFO lock` shows as `keepalive_min_lease_ms` and the client libraries
//! check a lease against).

use crate::error::LockError;

/// A lease is renewed once this fraction of it has passed: half, as
/// Consul's `RenewPeriodic` renews a session at half its TTL (Redisson's
/// watchdog, a client timer, renews at a third). A renewal made by the
/// server is late only when the server itself stalls, which holds back its
/// expiry too, so half a lease of margin is plenty; a promoted replica has
/// at least that long left for the holder to re-attach. And it halves the
/// server's cost against a third (`make bench`, S9).
pub const RENEW_DIVISOR: i64 = 2;

/// How late a server timer fires at most, beyond the event loop's own
/// stalls: timers are armed in whole milliseconds from a point inside one,
/// and the event loop sleeps in whole milliseconds, rounded up.
pub const TIMER_SLACK_MS: i64 = 2;

/// How long a healthy server can be held up besides its cron, and a
/// renewal with it: a fork for a snapshot or an AOF rewrite of a large
/// dataset (about 10 ms per GB), a short write pause (a `FAILOVER`'s), a
/// machine busy enough to keep the server off its CPU. Measured (`make
/// bench`, S11, 1,000 holds at the floor on a 2-core machine with both
/// cores saturated by CPU hogs and a lock load): a renewal at most 46 ms
/// late in 12 runs of 30 s; in a 13th, with parallel compilations pushing
/// the load average to 19, the server's core stalled 197 ms, which lost
/// every hold of a floor that allowed 100 ms.
pub const HELD_UP_MS: i64 = 250;

/// The shortest lease the server can keep alive, on a server whose cron
/// runs `hz` times a second. A renewal is due at half the lease and can be
/// late by one cron tick (1000/hz ms: the tick's active expiry, client and
/// database housekeeping can hold the event loop for part of it),
/// [`HELD_UP_MS`] and [`TIMER_SLACK_MS`]; so the lease must be at least
/// twice that: 704 ms at the default hz 10. Shorter, renewals can fall
/// behind and a hold be lost while its connection is open. (A write pause
/// longer than that holds renewals back for as long as it lasts, as it
/// holds back the holder's own LOCK.RENEW: no floor covers every pause.)
pub fn min_lease_ms(hz: i64) -> i64 {
    RENEW_DIVISOR * renewal_lateness_ms(hz)
}

/// How late a renewal can be (see [`min_lease_ms`]).
pub fn renewal_lateness_ms(hz: i64) -> i64 {
    tick_ms(hz) + HELD_UP_MS + TIMER_SLACK_MS
}

/// One cron tick in whole ms, rounded up; `hz` as the server bounds it (1
/// to 500).
fn tick_ms(hz: i64) -> i64 {
    let hz = hz.clamp(1, 500);
    (1000 + hz - 1) / hz
}

/// Refuses a lease the server could not keep alive (see [`min_lease_ms`]).
pub fn check_lease(lease_ms: i64, hz: i64) -> Result<(), LockError> {
    let min = min_lease_ms(hz);
    if lease_ms >= min {
        Ok(())
    } else {
        Err(LockError::keepalive_lease_too_short(
            min,
            lease_ms,
            renewal_lateness_ms(hz),
            hz,
        ))
    }
}

/// When a hold bound with `lease_ms` is next renewed, from `now_ms`.
pub fn next_renewal(now_ms: i64, lease_ms: i64) -> i64 {
    now_ms.saturating_add((lease_ms / RENEW_DIVISOR).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shortest_lease_kept_alive_follows_hz() {
        assert_eq!(min_lease_ms(10), 704);
        assert_eq!(min_lease_ms(100), 524);
        assert_eq!(min_lease_ms(500), 508);
        assert_eq!(min_lease_ms(1), 2504);
        // Out of the server's range (1 to 500): clamped, never a panic.
        assert_eq!(min_lease_ms(0), 2504);
        assert_eq!(min_lease_ms(-3), 2504);
        assert_eq!(min_lease_ms(i64::MAX), 508);
        // A renewal at half the lease, late by a tick, the server held up
        // and the timer slack, is still in time.
        for hz in [1, 3, 10, 37, 100, 500] {
            let min = min_lease_ms(hz);
            let late = next_renewal(0, min) + tick_ms(hz) + HELD_UP_MS + TIMER_SLACK_MS;
            assert!(late <= min, "hz {hz}: renewal at {late}, lease {min}");
        }
        assert_eq!(check_lease(704, 10), Ok(()));
        assert_eq!(
            check_lease(703, 10),
            Err(LockError::keepalive_lease_too_short(704, 703, 352, 10))
        );
        assert_eq!(
            LockError::keepalive_lease_too_short(704, 100, 352, 10).to_string(),
            "ERR KEEPALIVE needs a lease of at least 704 ms, got 100: the server renews it at half \
             the lease, and a renewal can be up to 352 ms late (a cron tick at hz 10, a fork, a \
             busy machine)"
        );
    }
}
