//! Counters and time percentiles behind `INFO lock`: how long callers
//! waited before they were granted, since the module was loaded, and the
//! histogram type that `holds.rs` keeps hold times in.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use hdrhistogram::Histogram;

use crate::sync;

use lock_rules::percentiles::{self, Distribution};
use lock_rules::semaphore::SemaphoreTally;
use lock_rules::transition::Tally;

pub struct Stats {
    pub acquired: AtomicU64,
    pub reentered: AtomicU64,
    pub released: AtomicU64,
    pub handed_off: AtomicU64,
    pub force_released: AtomicU64,
    pub expired_with_waiters: AtomicU64,
    pub wait_timeouts: AtomicU64,
    pub wait_cancels: AtomicU64,
    pub waiters_disconnected: AtomicU64,
    pub lost_grants_released: AtomicU64,
    pub keepalive_renewals: AtomicU64,
    /// KEEPALIVE holds whose renewals stopped: the connection ended, the
    /// maximum hold time passed, or the hold was gone at its renewal.
    pub keepalive_ended: AtomicU64,
    /// SEM.ACQUIRE and SEM.TAKE callers given permits, at once or queued.
    pub semaphore_grants: AtomicU64,
    /// Permits given back by SEM.RELEASE (and lost grants given back).
    pub semaphore_permits_released: AtomicU64,
    /// Permits taken back because their lease ended.
    pub semaphore_permits_expired: AtomicU64,
    /// Latches counted down to zero by LATCH.COUNTDOWN.
    pub latches_opened: AtomicU64,
    /// Leaderships begun (ELECT.CAMPAIGN granted, at once or handed on).
    pub elections_won: AtomicU64,
    /// Leaderships the server ended while their leader kept them alive, the
    /// leader told why (forced, gone, idle, maxhold, moved).
    pub elections_lost: AtomicU64,
    /// Waits refused with DEADLOCK: each would have closed a cycle.
    pub deadlocks: AtomicU64,
}

pub static STATS: Stats = Stats {
    acquired: AtomicU64::new(0),
    reentered: AtomicU64::new(0),
    released: AtomicU64::new(0),
    handed_off: AtomicU64::new(0),
    force_released: AtomicU64::new(0),
    expired_with_waiters: AtomicU64::new(0),
    wait_timeouts: AtomicU64::new(0),
    wait_cancels: AtomicU64::new(0),
    waiters_disconnected: AtomicU64::new(0),
    lost_grants_released: AtomicU64::new(0),
    keepalive_renewals: AtomicU64::new(0),
    keepalive_ended: AtomicU64::new(0),
    semaphore_grants: AtomicU64::new(0),
    semaphore_permits_released: AtomicU64::new(0),
    semaphore_permits_expired: AtomicU64::new(0),
    latches_opened: AtomicU64::new(0),
    elections_won: AtomicU64::new(0),
    elections_lost: AtomicU64::new(0),
    deadlocks: AtomicU64::new(0),
};

impl Stats {
    pub fn add(&self, t: &Tally) {
        for (counter, n) in [
            (&self.acquired, t.acquired),
            (&self.reentered, t.reentered),
            (&self.released, t.released),
            (&self.handed_off, t.handed_off),
            (&self.force_released, t.force_released),
        ] {
            if n > 0 {
                counter.fetch_add(n, Relaxed);
            }
        }
    }

    pub fn add_semaphore(&self, t: &SemaphoreTally) {
        for (counter, n) in [
            (&self.semaphore_grants, t.acquired),
            (&self.semaphore_permits_released, t.released),
            (&self.semaphore_permits_expired, t.expired),
        ] {
            if n > 0 {
                counter.fetch_add(n, Relaxed);
            }
        }
    }

    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Relaxed);
    }

    /// Name and value of every counter, in INFO order.
    pub fn fields(&self) -> [(&'static str, u64); 19] {
        [
            ("acquired", self.acquired.load(Relaxed)),
            ("reentered", self.reentered.load(Relaxed)),
            ("released", self.released.load(Relaxed)),
            ("force_released", self.force_released.load(Relaxed)),
            ("handed_off", self.handed_off.load(Relaxed)),
            (
                "expired_with_waiters",
                self.expired_with_waiters.load(Relaxed),
            ),
            ("wait_timeouts", self.wait_timeouts.load(Relaxed)),
            ("wait_cancels", self.wait_cancels.load(Relaxed)),
            (
                "waiters_disconnected",
                self.waiters_disconnected.load(Relaxed),
            ),
            (
                "lost_grants_released",
                self.lost_grants_released.load(Relaxed),
            ),
            ("keepalive_renewals", self.keepalive_renewals.load(Relaxed)),
            ("keepalive_ended", self.keepalive_ended.load(Relaxed)),
            ("semaphore_grants", self.semaphore_grants.load(Relaxed)),
            (
                "semaphore_permits_released",
                self.semaphore_permits_released.load(Relaxed),
            ),
            (
                "semaphore_permits_expired",
                self.semaphore_permits_expired.load(Relaxed),
            ),
            ("latches_opened", self.latches_opened.load(Relaxed)),
            ("elections_won", self.elections_won.load(Relaxed)),
            ("elections_lost", self.elections_lost.load(Relaxed)),
            ("deadlocks", self.deadlocks.load(Relaxed)),
        ]
    }
}

/// A distribution of times in ms, to 2 significant digits (exact up to
/// 255 ms, within 1 % above), its range growing to the largest value
/// recorded: a few KB.
pub struct Times(Option<Histogram<u64>>);

impl Default for Times {
    fn default() -> Self {
        Self(Histogram::new(2).ok())
    }
}

impl Times {
    /// Records `n` values of `ms`.
    pub fn record(&mut self, ms: u64, n: u64) {
        if let Some(h) = self.0.as_mut() {
            let _ = h.record_n(ms, n);
        }
    }

    /// The INFO fields of these times, named `name` (`wait_ms`).
    pub fn fields(&self, name: &str) -> Vec<(String, u64)> {
        self.0
            .as_ref()
            .map_or_else(Vec::new, |h| percentiles::fields(name, &Hdr(h)).to_vec())
    }
}

struct Hdr<'h>(&'h Histogram<u64>);

impl Distribution for Hdr<'_> {
    fn count(&self) -> u64 {
        self.0.len()
    }

    fn at(&self, percentile: f64) -> u64 {
        self.0.value_at_percentile(percentile)
    }

    fn max(&self) -> u64 {
        self.0.max()
    }
}

/// Waits of callers that were granted the lock, from queued to granted (a
/// multi-lock caller once, for all its keys). Hold times are `holds.rs`'s.
static WAITS: LazyLock<Mutex<Times>> = LazyLock::new(Mutex::default);

pub fn record_wait(waited: Duration) {
    let ms = u64::try_from(waited.as_millis()).unwrap_or(u64::MAX);
    sync::lock(&WAITS).record(ms, 1);
}

/// `wait_ms_p50`, `wait_ms_p99`, `wait_ms_max`. Never blocks (INFO also
/// runs in crash reports): nothing if the histogram is held at that moment.
pub fn wait_fields() -> Vec<(String, u64)> {
    sync::try_lock(&WAITS).map_or_else(Vec::new, |times| times.fields("wait_ms"))
}
