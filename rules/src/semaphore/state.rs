//! What a semaphore's two keys hold, as the rules read them (the counter of
//! the permits available and the permits held with their lease ends), and
//! SEM.INFO's view of it.

use crate::names::NameMap;

use super::member::owner_of;
use crate::args::parse_i64;
use crate::error::LockError;

/// Redisson's score for a permit without a lease
/// (`RedissonPermitExpirableSemaphore.nonExpirableTimeout`).
pub const NEVER: i64 = 922_337_203_685_477;

/// The most permits a semaphore has in all (available plus held by
/// owners): Redisson's `int`.
pub const MAX_PERMITS: i64 = i32::MAX as i64;

/// One permit held: a member of the sorted set and its lease end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permit {
    pub id: Vec<u8>,
    pub until: i64,
}

/// What a semaphore's keys hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SemaphoreState {
    /// The counter; `None` when its key does not exist (no permits).
    pub available: Option<i64>,
    /// The sorted set's members, in any order.
    pub permits: Vec<Permit>,
}

impl SemaphoreState {
    /// The counter's value as read from its string key.
    pub fn parse_available(raw: &[u8]) -> Result<i64, LockError> {
        parse_i64(raw).ok_or_else(LockError::not_a_semaphore)
    }

    pub fn exists(&self) -> bool {
        self.available.is_some() || !self.permits.is_empty()
    }

    /// As SEM.INFO shows it at `now_ms`, without writing: permits whose
    /// lease ended count as available.
    pub fn view(&self, now_ms: i64) -> SemaphoreView {
        let mut available = self.available.unwrap_or(0);
        let mut holders: Vec<HolderView> = Vec::new();
        let mut index: NameMap<Vec<u8>, usize> = NameMap::default();
        for permit in &self.permits {
            if expired(permit.until, now_ms) {
                available = available.saturating_add(1);
                continue;
            }
            let owner = owner_of(&permit.id).map_or(&permit.id[..], |(owner, _)| owner);
            match index.get(owner) {
                Some(&i) => {
                    holders[i].permits += 1;
                    holders[i].until = holders[i].until.max(permit.until);
                }
                None => {
                    index.insert(owner.to_vec(), holders.len());
                    holders.push(HolderView {
                        owner: owner.to_vec(),
                        permits: 1,
                        until: permit.until,
                    });
                }
            }
        }
        holders.sort_by(|a, b| a.owner.cmp(&b.owner));
        let held: i64 = holders.iter().map(|h| h.permits).sum();
        SemaphoreView {
            permits: available.saturating_add(held),
            available,
            holders,
        }
    }
}

/// SEM.INFO's view of a semaphore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SemaphoreView {
    /// Available plus held by owners.
    pub permits: i64,
    pub available: i64,
    /// By owner.
    pub holders: Vec<HolderView>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HolderView {
    pub owner: Vec<u8>,
    pub permits: i64,
    /// The latest lease end of its permits ([`NEVER`]: none).
    pub until: i64,
}

impl HolderView {
    /// Ms left of its lease, -1 for a permit without one.
    pub fn ttl_ms(&self, now_ms: i64) -> i64 {
        if self.until >= NEVER {
            -1
        } else {
            self.until.saturating_sub(now_ms).max(0)
        }
    }
}

/// A lease is over once the clock is past its deadline millisecond, as a
/// key's TTL is: a permit lasts at least what its holder asked for.
pub(super) fn expired(until: i64, now_ms: i64) -> bool {
    until < now_ms
}
