//! A semaphore's keys in Redis: the counter string `key` and the permit set
//! `{key}:timeout` (Redisson's layout), read into the rules'
//! [`SemaphoreState`], and the rules' [`SemaphoreWrites`] applied with the
//! key API and replicated as the native commands a replica (with or without
//! this module) and the AOF replay: `ZREM`, `ZADD` with the absolute lease
//! end, `SET` of the counter's value (never an INCRBY, so a replica that
//! missed writes lands on it too), `PUBLISH`.

use redis_module::{Context, RedisString};

use crate::ffi::{self, Key, KeyKind, Native};
use crate::native_writes::{self, notify_own};
use crate::replication::Replication;
use crate::scratch;
use crate::store;
use crate::tokens;
use lock_rules::error::LockError;
use lock_rules::keys::{permits_key_in_slot, semaphore_channel, write_permits_key};
use lock_rules::semaphore::{Permit, SemaphoreState, SemaphoreWrites};

/// A semaphore's two keys, opened.
pub struct SemaphoreKeys<'c> {
    name: &'c RedisString,
    counter: Key<'c>,
    permits_name: RedisString,
    permits: Key<'c>,
    replication: Replication,
}

impl<'c> SemaphoreKeys<'c> {
    /// Opens both keys in the context's selected db for writing. On a
    /// master, opening runs lazy expiry.
    pub fn open(
        ctx: &'c Context,
        name: &'c RedisString,
        replication: Replication,
    ) -> Result<Self, LockError> {
        // The commands checked the set's slot (`permits_key_in_slot`); the
        // rest only opens semaphores a command opened first.
        let permits_name = scratch::with_name(
            |buf| write_permits_key(name.as_slice(), buf),
            |bytes| ffi::string(ctx, bytes),
        );
        let counter = Key::open(ctx, name, true);
        let permits = Key::open(ctx, &permits_name, true);
        let (Some(counter), Some(permits)) = (counter, permits) else {
            return Err(LockError::internal("cannot open key"));
        };
        Ok(Self {
            name,
            counter,
            permits_name,
            permits,
            replication,
        })
    }

    /// What the keys hold.
    pub fn read(&self) -> Result<SemaphoreState, LockError> {
        read_state(Some(&self.counter), Some(&self.permits))
    }

    /// Writes and replicates `writes`, in order: removed permits, added or
    /// re-scored ones, the counter, the fencing token, then Redisson's
    /// notice. The caller's execution unit wraps them in one MULTI/EXEC.
    pub fn apply(&self, ctx: &Context, writes: &SemaphoreWrites) {
        let native = self.replication == Replication::Native;
        let changed = |ctx: &Context| {
            if !native {
                ffi::count_unpropagated_change(ctx);
            }
        };
        let mut permits_modified = false;
        for id in &writes.removed {
            if self.permits.zset_remove(ctx, id) {
                if native {
                    ffi::replicate(ctx, &self.permits_name, Native::ZRem { member: id });
                }
                notify_own(ctx, ffi::NOTIFY_ZSET, c"zrem", &self.permits_name);
                changed(ctx);
                permits_modified = true;
            }
        }
        if !writes.added.is_empty() {
            for Permit { id, until } in &writes.added {
                native_writes::as_own(|| self.permits.zset_add(ctx, *until as f64, id));
                if native {
                    ffi::replicate(
                        ctx,
                        &self.permits_name,
                        Native::ZAdd {
                            score: *until,
                            member: id,
                        },
                    );
                }
                changed(ctx);
            }
            notify_own(ctx, ffi::NOTIFY_ZSET, c"zadd", &self.permits_name);
            // Redisson's acquire gives the permit set the counter's TTL,
            // when the counter has one (a semaphore set with a time to live).
            if let Some(at) = self.counter.expires_at() {
                self.permits.expire_at(at);
                if native {
                    ffi::replicate(ctx, &self.permits_name, Native::PExpireAt { at_ms: at });
                }
                notify_own(ctx, ffi::NOTIFY_GENERIC, c"expire", &self.permits_name);
            }
            permits_modified = true;
        }
        if permits_modified {
            ffi::signal_modified(ctx, &self.permits_name);
        }
        if let Some(value) = writes.available {
            // Redisson's INCRBY and DECRBY keep the counter's TTL.
            let at = self.counter.expires_at();
            native_writes::set_counter(ctx, self.name, &self.counter, value, at, native);
        }
        if let Some((to, fenced_until)) = writes.token {
            tokens::set_token(ctx, self.name.as_slice(), to, fenced_until, native);
        }
        if let Some(available) = writes.notify {
            let channel = semaphore_channel(self.name.as_slice());
            store::publish_for_redisson(ctx, &channel, available.to_string().as_bytes(), native);
        }
    }
}

/// A semaphore read without writing (SEM.INFO, also on replicas); `None`
/// when neither key exists.
pub fn read_only(ctx: &Context, name: &RedisString) -> Result<Option<SemaphoreState>, LockError> {
    let permits_name = ffi::string(ctx, &permits_key_in_slot(name.as_slice())?);
    let counter = Key::open(ctx, name, false);
    let permits = Key::open(ctx, &permits_name, false);
    let state = read_state(counter.as_ref(), permits.as_ref())?;
    Ok(state.exists().then_some(state))
}

fn read_state(counter: Option<&Key>, permits: Option<&Key>) -> Result<SemaphoreState, LockError> {
    let available = match counter.map(|k| (k.kind(), k)) {
        None | Some((KeyKind::Empty, _)) => None,
        Some((KeyKind::String, key)) => Some(SemaphoreState::parse_available(&key.string_value())?),
        Some(_) => return Err(LockError::wrong_type()),
    };
    let permits = match permits.map(|k| (k.kind(), k)) {
        None | Some((KeyKind::Empty, _)) => Vec::new(),
        Some((KeyKind::SortedSet, key)) => key
            .zset_members()
            .into_iter()
            .map(|(id, score)| Permit {
                id,
                // Scores are whole ms; a hand-written fraction or infinity
                // is clamped as `as` does.
                until: score as i64,
            })
            .collect(),
        Some(_) => return Err(LockError::wrong_type()),
    };
    Ok(SemaphoreState { available, permits })
}
