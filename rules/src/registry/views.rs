//! What LOCK.WAITERS and LOCK.QUEUES show of the registry: each queued
//! caller (its kind, how long it has waited, its BLOCK time left) and each
//! queue (its length, its longest wait), and the pick of the queues that
//! have waited longest.

use std::hash::Hash;
use std::time::Instant;

use super::{GroupId, Registry};
use crate::args::Limit;
use crate::lock_id::LockId;
use crate::request::{LockKind, Request};

/// One queued caller as LOCK.WAITERS shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaiterView<'r> {
    pub request: &'r Request,
    /// A LOCK.MACQUIRE caller (its request's kind is the exclusive lock).
    pub multi: bool,
    /// Its multi-lock caller, to list every key it waits for.
    pub group: Option<GroupId>,
    pub queued_at: Instant,
    /// The end of its BLOCK time; `None` for BLOCK 0.
    pub deadline: Option<Instant>,
}

impl WaiterView<'_> {
    /// `exclusive`, `read`, `write`, `multi` for a LOCK.MACQUIRE caller,
    /// `semaphore` for SEM.ACQUIRE, `take` for SEM.TAKE.
    pub fn kind(&self) -> &'static str {
        match (self.multi, self.request.kind) {
            (true, _) => "multi",
            (false, LockKind::Exclusive) => "exclusive",
            (false, LockKind::Read) => "read",
            (false, LockKind::Write) => "write",
            (false, LockKind::Permits(_)) if self.request.owner.is_empty() => "take",
            (false, LockKind::Permits(_)) => "semaphore",
        }
    }

    /// Whole ms since it was queued.
    pub fn waited_ms(&self, now: Instant) -> i64 {
        whole_ms(now.saturating_duration_since(self.queued_at))
    }

    /// Ms left of its BLOCK time, rounded up (as the wait timer is armed);
    /// -1 for BLOCK 0.
    pub fn timeout_ms(&self, now: Instant) -> i64 {
        self.deadline.map_or(-1, |at| {
            let left = at.saturating_duration_since(now).as_micros().div_ceil(1000);
            i64::try_from(left).unwrap_or(i64::MAX)
        })
    }
}

fn whole_ms(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// One lock's queue as LOCK.QUEUES shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueView {
    pub key: Vec<u8>,
    pub waiters: usize,
    /// When the first in line was queued: it has waited longest, since
    /// callers only ever join at the tail.
    pub first_queued_at: Instant,
}

impl QueueView {
    /// Whole ms the first in line has waited.
    pub fn longest_wait_ms(&self, now: Instant) -> i64 {
        whole_ms(now.saturating_duration_since(self.first_queued_at))
    }
}

/// The `limit` queues that have waited longest, longest first (ties by
/// key), out of `queues`: O(N) to pick them, O(M log M) to order the M
/// kept.
pub fn longest_waiting_first(mut queues: Vec<QueueView>, limit: Limit) -> Vec<QueueView> {
    let order = |a: &QueueView, b: &QueueView| {
        a.first_queued_at
            .cmp(&b.first_queued_at)
            .then_with(|| a.key.cmp(&b.key))
    };
    let keep = limit.max();
    if keep == 0 {
        return Vec::new();
    }
    if keep < queues.len() {
        queues.select_nth_unstable_by(keep - 1, order);
        queues.truncate(keep);
    }
    queues.sort_unstable_by(order);
    queues
}

impl<H: Copy + Eq + Hash> Registry<H> {
    /// The callers queued for `lock`, first in line first, at most `limit`.
    pub fn waiters(&self, lock: &LockId<'_>, limit: Limit) -> Vec<WaiterView<'_>> {
        let Some(queue) = self.queue(lock) else {
            return Vec::new();
        };
        queue
            .fifo
            .iter()
            .take(limit.max())
            .map(|(_, w)| {
                let group = w.group.and_then(|g| self.groups.get(&g));
                WaiterView {
                    request: &w.request,
                    multi: w.group.is_some(),
                    group: w.group,
                    queued_at: w.queued_at,
                    deadline: group.map_or(w.deadline, |g| g.deadline),
                }
            })
            .collect()
    }

    /// Every lock of `db` someone waits for, in no particular order.
    pub fn queues(&self, db: i32) -> Vec<QueueView> {
        let Some(keys) = self.queues.get(&db) else {
            return Vec::new();
        };
        keys.iter()
            .filter_map(|(key, q)| {
                let (_, first) = q.fifo.front()?;
                Some(QueueView {
                    key: key.clone(),
                    waiters: q.fifo.len(),
                    first_queued_at: first.queued_at,
                })
            })
            .collect()
    }
}
