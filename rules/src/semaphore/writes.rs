//! What a semaphore transition writes to its keys (and publishes for
//! Redisson's waiters), and the counts it adds to `INFO lock`.

use super::state::Permit;

/// What a transition writes, in this order.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SemaphoreWrites {
    /// `ZREM {key}:timeout id`
    pub removed: Vec<Vec<u8>>,
    /// `ZADD {key}:timeout until id`: a new permit or a new lease.
    pub added: Vec<Permit>,
    /// `SET key n` (keeping its TTL): the counter changed (or was created).
    pub available: Option<i64>,
    /// `SET redisson_lock_token:{key} token PXAT ...`: the fencing token
    /// granted, and the lease end it fences.
    pub token: Option<(i64, i64)>,
    /// `PUBLISH redisson_sc:{key} n`, for Redisson's waiters: permits came
    /// back and `n` are available.
    pub notify: Option<i64>,
}

impl SemaphoreWrites {
    pub fn is_empty(&self) -> bool {
        self.removed.is_empty()
            && self.added.is_empty()
            && self.available.is_none()
            && self.token.is_none()
    }
}

/// Counts for `INFO lock`, as this transition changed them.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SemaphoreTally {
    /// Grants, at once or to a waiter.
    pub acquired: u64,
    pub handed_off: u64,
    /// Permits given back by their owner.
    pub released: u64,
    /// Permits taken back because their lease ended.
    pub expired: u64,
}
