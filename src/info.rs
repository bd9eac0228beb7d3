//! Counters behind `INFO lock`.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::rules::transition::Tally;

pub struct Stats {
    pub acquired: AtomicU64,
    pub reentered: AtomicU64,
    pub released: AtomicU64,
    pub handed_off: AtomicU64,
    pub force_released: AtomicU64,
    pub expired_with_waiters: AtomicU64,
    pub wait_timeouts: AtomicU64,
    pub waiters_disconnected: AtomicU64,
    pub lost_grants_released: AtomicU64,
    pub keepalive_renewals: AtomicU64,
    /// KEEPALIVE holds whose renewals stopped: the connection ended, the
    /// maximum hold time passed, or the hold was gone at its renewal.
    pub keepalive_ended: AtomicU64,
}

pub static STATS: Stats = Stats {
    acquired: AtomicU64::new(0),
    reentered: AtomicU64::new(0),
    released: AtomicU64::new(0),
    handed_off: AtomicU64::new(0),
    force_released: AtomicU64::new(0),
    expired_with_waiters: AtomicU64::new(0),
    wait_timeouts: AtomicU64::new(0),
    waiters_disconnected: AtomicU64::new(0),
    lost_grants_released: AtomicU64::new(0),
    keepalive_renewals: AtomicU64::new(0),
    keepalive_ended: AtomicU64::new(0),
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

    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Relaxed);
    }

    /// Name and value of every counter, in INFO order.
    pub fn fields(&self) -> [(&'static str, u64); 11] {
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
        ]
    }
}
