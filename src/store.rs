//! The lock key in Redis: reads it into the rules' [`LockState`], and applies
//! the rules' writes with the key API, replicating each as the native command
//! a replica (with or without this module) and the AOF will replay.

use std::cell::RefCell;
use std::hash::BuildHasher;
use std::sync::LazyLock;

use redis_module::{Context, RedisString};

use crate::config;
use crate::ffi::{self, Key, KeyKind, Native};
use crate::native_writes::{as_own, notify_own, replicate_or_count, set_until};
use crate::placement::in_cluster;
use crate::replication::{self, Replication};
use crate::scratch;
use crate::tokens::set_token;
use crate::waiters::anyone_waits;
use lock_rules::args::parse_i64;
use lock_rules::error::LockError;
use lock_rules::keys::{
    fair_queue_key, fair_timeout_key, fair_waiter_channel, read_lease_key, write_notify_channel,
    write_rw_notify_channel,
};
use lock_rules::names::NameHasher;
use lock_rules::read_write::{ReadWriteHolds, MODE_FIELD};
use lock_rules::request::FieldName;
use lock_rules::state::LockState;
use lock_rules::transition::Change;

/// A lock key opened for writing.
pub struct LockKey<'c> {
    name: &'c RedisString,
    key: Key<'c>,
    /// The caller's owner argument, when there is a caller: its hold is
    /// read and written with this string instead of a copy.
    owner: Option<&'c RedisString>,
    replication: Replication,
}

impl<'c> LockKey<'c> {
    /// Opens `name` in the context's selected db. On a master this runs lazy
    /// expiry first, so an expired lease reads as a free lock.
    pub fn open(
        ctx: &'c Context,
        name: &'c RedisString,
        owner: Option<&'c RedisString>,
        replication: Replication,
    ) -> Result<Self, LockError> {
        let key =
            Key::open(ctx, name, true).ok_or_else(|| LockError::internal("cannot open key"))?;
        Ok(Self {
            name,
            key,
            owner,
            replication,
        })
    }

    /// The lock's state. A one-field hash (an exclusive lock) is first
    /// looked up by the holder it was last seen with ([`holder_hint`]) and
    /// by the caller's owner (release, re-entry, renewal), whichever is
    /// likelier first; it is only scanned when neither is the field. A
    /// lookup that finds its field in a one-field hash is the whole state,
    /// so a wrong guess costs one lookup, never a wrong state.
    pub fn read(&self, ctx: &Context) -> Result<LockState, LockError> {
        if self.key.kind() == KeyKind::Hash && self.key.len() == 1 {
            let hint = holder_hint(self.name.as_slice());
            let caller = self.owner;
            let hint_is_caller =
                matches!((&hint, caller), (Some(h), Some(c)) if h[..] == *c.as_slice());
            let by_caller = || caller.and_then(|c| self.held_as(ctx, c, None));
            let by_hint = || {
                let owner = hint.clone().filter(|_| !hint_is_caller)?;
                self.held_as(ctx, &ffi::string(ctx, &owner), Some(owner))
            };
            let found = if hint.is_none() || hint_is_caller {
                by_caller().or_else(by_hint)
            } else {
                by_hint().or_else(by_caller)
            };
            if let Some(state) = found {
                return state;
            }
        }
        let state = read_state(ctx, self.name.as_slice(), &self.key)?;
        if let LockState::Held { owner, .. } = &state {
            remember_holder(self.name.as_slice(), owner);
        }
        Ok(state)
    }

    /// The state of a one-field hash whose field is `field` (`owner`, if
    /// the caller has it as a FieldName already); `None` if it is not.
    fn held_as(
        &self,
        ctx: &Context,
        field: &RedisString,
        owner: Option<FieldName>,
    ) -> Option<Result<LockState, LockError>> {
        self.key
            .hash_get(ctx, field, |count| match parse_i64(count) {
                Some(holds) if holds > 0 => Ok(LockState::Held {
                    owner: owner.unwrap_or_else(|| field.as_slice().into()),
                    holds,
                }),
                _ => LockState::from_hash(&[(field.as_slice().to_vec(), count.to_vec())]),
            })
    }

    /// The lock's name, as the command gave it.
    pub fn name(&self) -> &'c RedisString {
        self.name
    }

    /// The lease deadline (unix ms, as PEXPIRETIME), `None` without one.
    pub fn expires_at(&self) -> Option<i64> {
        self.key.expires_at()
    }

    /// Applies `writes` in order and replicates each one. The caller's
    /// execution unit wraps them in one MULTI/EXEC.
    pub fn apply(&self, ctx: &Context, writes: &[Change]) {
        let native = self.replication == Replication::Native;
        let mut modified = false;
        // See replication::note_load: a key a reload dropped silently may
        // still be downstream, so a lock made afresh deletes it there first.
        let clear_downstream = || {
            if native
                && replication::downstream_may_keep_dropped_keys()
                && self.key.kind() == KeyKind::Empty
            {
                ffi::replicate(ctx, self.name, Native::Del);
            }
        };
        for write in writes {
            match write {
                Change::SetMode(side) => {
                    clear_downstream();
                    self.key.hash_set_bytes(ctx, MODE_FIELD, side.mode());
                    if native {
                        ffi::replicate(
                            ctx,
                            self.name,
                            Native::HSetBytes {
                                field: MODE_FIELD,
                                value: side.mode(),
                            },
                        );
                    }
                    notify_own(ctx, ffi::NOTIFY_HASH, c"hset", self.name);
                    modified = true;
                }
                Change::SetReadLease { owner, hold, at } => {
                    set_read_lease(ctx, self.name.as_slice(), owner, *hold, *at, native);
                }
                Change::DropReadLease { owner, hold } => {
                    if !drop_read_lease(ctx, self.name.as_slice(), owner, *hold, native) {
                        continue;
                    }
                }
                Change::NotifyReadWrite(message) => {
                    publish(ctx, self.name.as_slice(), message, native, true);
                    continue;
                }
                Change::SetHolds { field, holds } => {
                    clear_downstream();
                    // Read by waiters' acquires: with nobody waiting, a
                    // first one scans the hash once.
                    if anyone_waits() {
                        remember_holder(self.name.as_slice(), field);
                    }
                    match self.owner.filter(|arg| arg.as_slice() == &field[..]) {
                        Some(arg) => self.key.hash_set(ctx, arg, *holds),
                        None => self.key.hash_set(ctx, &ffi::string(ctx, field), *holds),
                    };
                    if native {
                        ffi::replicate(
                            ctx,
                            self.name,
                            Native::HSet {
                                field,
                                value: *holds,
                            },
                        );
                    }
                    notify_own(ctx, ffi::NOTIFY_HASH, c"hset", self.name);
                    modified = true;
                }
                Change::RemoveField { field } => {
                    forget_holder(self.name.as_slice(), Some(field));
                    match self.owner.filter(|arg| arg.as_slice() == &field[..]) {
                        Some(arg) => self.key.hash_delete(arg),
                        None => self.key.hash_delete(&ffi::string(ctx, field)),
                    };
                    if native {
                        ffi::replicate(ctx, self.name, Native::HDel { field });
                    }
                    notify_own(ctx, ffi::NOTIFY_HASH, c"hdel", self.name);
                    modified = true;
                }
                Change::ExpireAt(at) => {
                    self.key.expire_at(*at);
                    if native {
                        ffi::replicate(ctx, self.name, Native::PExpireAt { at_ms: *at });
                    }
                    notify_own(ctx, ffi::NOTIFY_GENERIC, c"expire", self.name);
                    modified = true;
                }
                Change::Delete => {
                    forget_holder(self.name.as_slice(), None);
                    self.key.delete();
                    if native {
                        ffi::replicate(ctx, self.name, Native::Del);
                    }
                    notify_own(ctx, ffi::NOTIFY_GENERIC, c"del", self.name);
                    modified = true;
                }
                Change::SetToken { to, fenced_until } => {
                    set_token(ctx, self.name.as_slice(), *to, *fenced_until, native)
                }
                Change::Notify => {
                    publish(ctx, self.name.as_slice(), b"0", native, false);
                    continue;
                }
                Change::NotifyFairHead { owner } => {
                    let channel = fair_waiter_channel(self.name.as_slice(), owner);
                    publish_for_redisson(ctx, &channel, b"0", native);
                    continue;
                }
                Change::DropFairHead { owner } => {
                    drop_fair_head(ctx, self.name.as_slice(), owner, native);
                    continue;
                }
            }
            if !native {
                ffi::count_unpropagated_change(ctx);
            }
        }
        if modified {
            ffi::signal_modified(ctx, self.name);
        }
    }
}

/// Holder hints: the holder each exclusive lock was last seen with here
/// (a hold written, a hash scanned), for [`LockKey::read`] to look up
/// first. A small table indexed by a keyed hash of the name, each slot
/// overwritten by the next lock that hashes to it and emptied when the
/// module removes the hold: bounded memory, and a lock whose slot was
/// taken is only scanned again. The
/// hot lock's case: its waiters' acquires find the holder a hand-off wrote
/// with one lookup of the hash, where a scan of it cost three times that.
const HINT_SLOTS: usize = 256;

thread_local! {
    static HOLDER_HINTS: RefCell<Vec<Option<(u64, FieldName)>>> =
        RefCell::new(vec![None; HINT_SLOTS]);
}

static HINT_SEED: LazyLock<NameHasher> = LazyLock::new(NameHasher::default);

fn hint_slot(name: &[u8]) -> (u64, usize) {
    let hash = HINT_SEED.hash_one(name);
    (hash, hash as usize % HINT_SLOTS)
}

/// Owners longer than this are not remembered: the table keeps each hint's
/// bytes alive until its slot is taken or its hold ends, so its memory is
/// bounded by slots x this (Redisson's `<uuid>:<thread>` ids are about 50
/// bytes; a client may send megabytes).
const HINT_MAX_OWNER: usize = 256;

fn remember_holder(name: &[u8], owner: &FieldName) {
    if owner.len() > HINT_MAX_OWNER {
        return forget_holder(name, None);
    }
    let (hash, slot) = hint_slot(name);
    HOLDER_HINTS.with(|hints| {
        if let Ok(mut hints) = hints.try_borrow_mut() {
            hints[slot] = Some((hash, owner.clone()));
        }
    });
}

/// A hold of `name` ended: `owner`'s field removed (a hand-off writes the
/// next holder's first), or the key deleted (`None`). Its hint, if the slot
/// still has it, goes with it.
fn forget_holder(name: &[u8], owner: Option<&[u8]>) {
    let (hash, slot) = hint_slot(name);
    HOLDER_HINTS.with(|hints| {
        if let Ok(mut hints) = hints.try_borrow_mut() {
            let ended = matches!(&hints[slot], Some((h, hint))
                if *h == hash && owner.is_none_or(|o| hint[..] == *o));
            if ended {
                hints[slot] = None;
            }
        }
    });
}

/// The holder `name` was last seen with, if its slot still has it.
fn holder_hint(name: &[u8]) -> Option<FieldName> {
    let (hash, slot) = hint_slot(name);
    HOLDER_HINTS.with(|hints| match hints.try_borrow().ok()?.get(slot)? {
        Some((h, owner)) if *h == hash => Some(owner.clone()),
        _ => None,
    })
}

/// Redisson's prune of a fair queue's stale head, with the key API: `LPOP`
/// of the queue and `ZREM` of its deadline, each replicated, notified and
/// signalled as that command is (with `del` for a key it empties).
fn drop_fair_head(ctx: &Context, lock: &[u8], owner: &[u8], native: bool) {
    let queue = ffi::string(ctx, &fair_queue_key(lock));
    if let Some(key) = Key::open(ctx, &queue, true).filter(|k| k.kind() == KeyKind::List) {
        if as_own(|| key.list_pop_head()).is_some() {
            replicate_or_count(ctx, &queue, Native::LPop, native);
            notify_own(ctx, ffi::NOTIFY_LIST, c"lpop", &queue);
            notify_if_emptied(ctx, &key, &queue);
            ffi::signal_modified(ctx, &queue);
        }
    }
    let deadlines = ffi::string(ctx, &fair_timeout_key(lock));
    if let Some(key) = Key::open(ctx, &deadlines, true).filter(|k| k.kind() == KeyKind::SortedSet) {
        if as_own(|| key.zset_remove(ctx, owner)) {
            replicate_or_count(ctx, &deadlines, Native::ZRem { member: owner }, native);
            notify_own(ctx, ffi::NOTIFY_ZSET, c"zrem", &deadlines);
            notify_if_emptied(ctx, &key, &deadlines);
            ffi::signal_modified(ctx, &deadlines);
        }
    }
}

/// The `del` a native command fires after removing an aggregate's last
/// element.
fn notify_if_emptied(ctx: &Context, key: &Key, name: &RedisString) {
    if key.len() == 0 {
        notify_own(ctx, ffi::NOTIFY_GENERIC, c"del", name);
    }
}

/// `SET <lease key> 1 PXAT at` with the key API, replicated as such.
fn set_read_lease(ctx: &Context, lock: &[u8], owner: &[u8], hold: i64, at: i64, native: bool) {
    let name = ffi::string(ctx, &read_lease_key(lock, owner, hold));
    let Some(key) = Key::open(ctx, &name, true) else {
        return ffi::log_warning(ctx, "lock: cannot open a read hold's lease key");
    };
    set_until(ctx, &name, &key, 1, at, native);
}

/// Deletes a read hold's lease key; false if it was already gone.
fn drop_read_lease(ctx: &Context, lock: &[u8], owner: &[u8], hold: i64, native: bool) -> bool {
    let name = ffi::string(ctx, &read_lease_key(lock, owner, hold));
    let Some(key) = Key::open(ctx, &name, true) else {
        return false;
    };
    if key.kind() == KeyKind::Empty || !key.delete() {
        return false;
    }
    if native {
        ffi::replicate(ctx, &name, Native::Del);
    }
    notify_own(ctx, ffi::NOTIFY_GENERIC, c"del", &name);
    ffi::signal_modified(ctx, &name);
    true
}

/// Redisson's unlock message, on the exclusive lock's channel or the
/// read-write lock's. Like Redisson's own PUBLISH it also reaches
/// subscribers on replicas: SPUBLISH travels with the shard in a cluster,
/// and a standalone master sends PUBLISH down the replication stream.
fn publish(ctx: &Context, lock: &[u8], message: &[u8], native: bool, read_write: bool) {
    if !config::redisson_notify() {
        return;
    }
    scratch::with_name(
        |channel| {
            if read_write {
                write_rw_notify_channel(lock, channel);
            } else {
                write_notify_channel(lock, channel);
            }
        },
        |channel| {
            let sharded = in_cluster(ctx);
            ffi::publish_unlock(ctx, channel, message, sharded);
            if !sharded && native {
                ffi::replicate_publish(ctx, channel, message);
            }
        },
    );
}

/// `PUBLISH channel message` for Redisson's waiters (a semaphore's count, a
/// latch's 0 or 1), when `lock.redisson-notify` is on. Like Redisson's own
/// PUBLISH it reaches subscribers on replicas too: SPUBLISH travels with the
/// shard in a cluster, and a standalone master sends it down the replication
/// stream.
pub fn publish_for_redisson(ctx: &Context, channel: &[u8], message: &[u8], native: bool) {
    if !config::redisson_notify() {
        return;
    }
    let sharded = in_cluster(ctx);
    ffi::publish_message(ctx, channel, message, sharded);
    if !sharded && native {
        ffi::replicate_publish(ctx, channel, message);
    }
}

/// The key's deadline (PEXPIRETIME) as it is now, read afresh: a handle
/// opened before a grant through another handle no longer sees the key.
pub fn expires_at(ctx: &Context, name: &RedisString) -> Option<i64> {
    Key::open(ctx, name, false)?.expires_at()
}

/// A key's TTL in ms as PTTL answers it: -2 when it does not exist, -1
/// without a TTL.
pub fn pttl(ctx: &Context, name: &RedisString) -> i64 {
    Key::open(ctx, name, false).map_or(-2, |key| key.ttl_ms().unwrap_or(-1))
}

/// A lock key opened for reading only (LOCK.INFO, also on replicas); `None`
/// when the key does not exist.
pub fn read_only(
    ctx: &Context,
    name: &RedisString,
) -> Result<Option<(LockState, Option<i64>)>, LockError> {
    let Some(key) = Key::open(ctx, name, false) else {
        return Ok(None);
    };
    let state = read_state(ctx, name.as_slice(), &key)?;
    Ok(Some((state, key.ttl_ms())))
}

fn read_state(ctx: &Context, name: &[u8], key: &Key) -> Result<LockState, LockError> {
    match key.kind() {
        KeyKind::Empty => Ok(LockState::Free),
        KeyKind::Hash => match key.len() {
            1 => LockState::from_hash(&key.hash_fields()),
            n => {
                let fields = key.hash_fields();
                let Some(mut rw) = ReadWriteHolds::from_hash(&fields)? else {
                    return Err(LockState::too_many_fields(n));
                };
                rw.expires_at = key.expires_at();
                if rw.writer.is_some() {
                    rw.write_until = rw.expires_at;
                }
                read_leases(ctx, name, &mut rw);
                Ok(LockState::Shared(rw))
            }
        },
        KeyKind::String | KeyKind::SortedSet | KeyKind::List | KeyKind::Other => {
            Err(LockError::wrong_type())
        }
    }
}

/// Each read hold's lease end, from its lease key. A key without a TTL
/// lasts as long as the hash.
fn read_leases(ctx: &Context, lock: &[u8], rw: &mut ReadWriteHolds) {
    let forever = rw.expires_at.unwrap_or(i64::MAX);
    for reader in &mut rw.readers {
        let holds = lock_rules::read_write::lease_keys(reader.holds);
        reader.leases = (1..=holds)
            .map(|hold| {
                let name = ffi::string(ctx, &read_lease_key(lock, &reader.owner, hold));
                Key::open(ctx, &name, false)
                    .filter(|key| key.kind() != KeyKind::Empty)
                    .map(|key| key.expires_at().unwrap_or(forever))
            })
            .collect();
    }
}
