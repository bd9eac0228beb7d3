//! An election's leader record, `{key}:leader`: a hash with the leader's
//! `candidate`, `term` and `value` (`lock_rules::election::Leader`),
//! written whole when leadership changes hands, deleted when nobody leads,
//! with the lock's expiry. Writes go through the key API, replicated as the
//! native `DEL`, `HSET` and `PEXPIREAT` a replica (with or without this
//! module) and the AOF replay. Read back, a record counts only while its
//! candidate holds the lock ([`read_leader`]).
//!
//! Offers: [`Record`], [`Seen`], [`read_leader`], [`reply_fields`].

use redis_module::{Context, RedisString};

use crate::ffi::{self, Field, Key, KeyKind, Native};
use crate::store::{self, notify_own};
use lock_rules::election::{current_leader, Leader};
use lock_rules::error::LockError;
use lock_rules::keys::leader_key;
use lock_rules::state::LockState;

/// A leadership as ELECT.LEADER and ELECT.OBSERVE reply it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub leader: Leader,
    /// ms until the lease ends, -1 without one.
    pub ttl_ms: i64,
}

/// The leader record of an election, opened for writing.
pub struct Record<'c> {
    name: RedisString,
    key: Key<'c>,
}

impl<'c> Record<'c> {
    pub fn open(ctx: &'c Context, election: &[u8]) -> Option<Self> {
        let name = ffi::string(ctx, &leader_key(election));
        let key = Key::open(ctx, &name, true)?;
        Some(Self { name, key })
    }

    pub fn read(&self) -> Option<Leader> {
        (self.key.kind() == KeyKind::Hash)
            .then(|| Leader::from_fields(&self.key.hash_fields()))
            .flatten()
    }

    pub fn exists(&self) -> bool {
        self.key.kind() != KeyKind::Empty
    }

    /// `DEL`, then `HSET` of each field, then `PEXPIREAT` of the lock's
    /// deadline: the record is rewritten whole, so no field of an earlier
    /// leader (its value) survives.
    pub fn write(&self, ctx: &Context, leader: &Leader, expires_at: Option<i64>) {
        if self.exists() {
            self.delete(ctx);
        }
        store::as_own(|| {
            for (field, value) in leader.fields() {
                self.key.hash_set_bytes(ctx, field, &value);
                ffi::replicate(
                    ctx,
                    &self.name,
                    Native::HSetBytes {
                        field,
                        value: &value,
                    },
                );
            }
        });
        notify_own(ctx, ffi::NOTIFY_HASH, c"hset", &self.name);
        if let Some(at) = expires_at {
            self.expire_at(ctx, at);
        }
        ffi::signal_modified(ctx, &self.name);
    }

    pub fn expire_at(&self, ctx: &Context, at: i64) {
        if self.key.expires_at() == Some(at) || !self.exists() {
            return;
        }
        self.key.expire_at(at);
        ffi::replicate(ctx, &self.name, Native::PExpireAt { at_ms: at });
        notify_own(ctx, ffi::NOTIFY_GENERIC, c"expire", &self.name);
    }

    pub fn delete(&self, ctx: &Context) {
        if self.key.delete() {
            ffi::replicate(ctx, &self.name, Native::Del);
            notify_own(ctx, ffi::NOTIFY_GENERIC, c"del", &self.name);
            ffi::signal_modified(ctx, &self.name);
        }
    }
}

/// Who leads `name` now, read without writing (also on replicas).
pub fn read_leader(ctx: &Context, lock_name: &RedisString) -> Result<Option<Seen>, LockError> {
    let (state, ttl_ms) = store::read_only(ctx, lock_name)?.unwrap_or((LockState::Free, None));
    let record_name = ffi::string(ctx, &leader_key(lock_name.as_slice()));
    let record = Key::open(ctx, &record_name, false)
        .filter(|key| key.kind() == KeyKind::Hash)
        .and_then(|key| Leader::from_fields(&key.hash_fields()));
    Ok(current_leader(&state, record).map(|leader| Seen {
        leader,
        ttl_ms: ttl_ms.unwrap_or(-1),
    }))
}

/// The reply fields of a leadership (`None`: nobody leads, for OBSERVE).
pub fn reply_fields(seen: &Option<Seen>) -> Vec<(&'static str, Field<'_>)> {
    match seen {
        Some(Seen { leader, ttl_ms }) => vec![
            ("candidate", Field::Bulk(&leader.candidate)),
            ("term", Field::Int(leader.term)),
            (
                "value",
                leader.value.as_deref().map_or(Field::Null, Field::Bulk),
            ),
            ("ttl", Field::Int(*ttl_ms)),
        ],
        None => vec![
            ("candidate", Field::Null),
            ("term", Field::Int(0)),
            ("value", Field::Null),
            ("ttl", Field::Int(-1)),
        ],
    }
}
