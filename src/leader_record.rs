//! An election's leader record, `{key}:leader`: a hash with the leader's
//! `candidate`, `term` and `value` (`lock_rules::election::Leader`),
//! written whole when leadership changes hands, deleted when nobody leads,
//! with the lock's expiry. Writes go through the key API, replicated as the
//! native `DEL`, `HSET` and `PEXPIREAT` a replica (with or without this
//! module) and the AOF replay. Read back, a record counts only while its
//! candidate holds the lock ([`read_leader`]).
//!
//! A key of that name that is not a record (a user's, another election's
//! lock) is never read as one nor written: the writes refuse it
//! ([`check_writable`], `WRONGTYPE`).
//!
//! Offers: [`Record`], [`Seen`], [`check_writable`], [`read_leader`],
//! [`reply_fields`].

use redis_module::{Context, RedisString};

use crate::ffi::{self, Field, Key, KeyKind, Native};
use crate::native_writes::{self, notify_own};
use crate::store;
use lock_rules::election::{current_leader, Leader, NotARecord};
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

/// The leader record of an election, opened for writing: only ever one
/// (or nothing): a key of that name that is not a record is never opened as
/// one, so never overwritten or deleted.
pub struct Record<'c> {
    name: RedisString,
    key: Key<'c>,
    leader: Option<Leader>,
}

impl<'c> Record<'c> {
    /// The record of `election`; `None` when its name holds something else.
    pub fn open(ctx: &'c Context, election: &[u8]) -> Option<Self> {
        let name = ffi::string(ctx, &leader_key(election));
        let key = Key::open(ctx, &name, true)?;
        let leader = read_record(&key).ok()?;
        Some(Self { name, key, leader })
    }

    pub fn read(&self) -> Option<Leader> {
        self.leader.clone()
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
        native_writes::as_own(|| {
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

/// What `key` holds: nothing, a record, or `Err` for a key that is not one.
fn read_record(key: &Key) -> Result<Option<Leader>, NotARecord> {
    match key.kind() {
        KeyKind::Empty => Ok(None),
        KeyKind::Hash => Leader::from_record_hash(&key.hash_fields()),
        _ => Err(NotARecord),
    }
}

/// Refuses a write to `election` whose record's name holds a key that is
/// not a leader record (`WRONGTYPE`): the module would have to overwrite or
/// delete it.
pub fn check_writable(ctx: &Context, election: &[u8]) -> Result<(), LockError> {
    let record = leader_key(election);
    let name = ffi::string(ctx, &record);
    match Key::open(ctx, &name, false).map(|key| read_record(&key)) {
        Some(Err(NotARecord)) => Err(LockError::not_a_leader_record(&record)),
        _ => Ok(()),
    }
}

/// Who leads `name` now, read without writing (also on replicas).
pub fn read_leader(ctx: &Context, lock_name: &RedisString) -> Result<Option<Seen>, LockError> {
    let (state, ttl_ms) = store::read_only(ctx, lock_name)?.unwrap_or((LockState::Free, None));
    let record_name = ffi::string(ctx, &leader_key(lock_name.as_slice()));
    let record =
        Key::open(ctx, &record_name, false).and_then(|key| read_record(&key).ok().flatten());
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
