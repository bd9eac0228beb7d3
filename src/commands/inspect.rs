//! The read-only views, on a master or a replica (which has no waiters):
//! LOCK.INFO (who holds a lock, its lease left, its waiters, its last
//! fencing token, which client keeps a KEEPALIVE hold alive), LOCK.WAITERS
//! (who waits for a lock or a semaphore, first in line first) and LOCK.QUEUES (which locks
//! of the selected database have callers waiting, longest wait first).

use std::collections::HashMap;
use std::time::Instant;

use redis_module::{Context, RedisResult, RedisString, RedisValue};

use super::{command, lock_id, option, run, Command, KEY};
use crate::ffi::{self, ArgDoc, ArgKind, CommandSpec, Field, KeyArgs, KEY_RO_ACCESS};
use crate::tokens;
use crate::waiters::{anyone_waits, registry};
use crate::{deadlocks, engine, keepalive, store};
use lock_rules::args::parse_view_options;
use lock_rules::deadlock::Holders;
use lock_rules::error::LockError;
use lock_rules::keepalive::ClientId;
use lock_rules::lock_id::LockId;
use lock_rules::registry::{longest_waiting_first, QueueView};
use lock_rules::request::FieldName;
use lock_rules::state::LockState;

/// `LOCK.INFO key`
pub const INFO: Command = command!(
    CommandSpec {
        name: c"lock.info",
        flags: c"readonly fast",
        acl_categories: "read hash fast",
        summary: c"Returns the owner, hold count, lease left, waiters and fencing token of a lock.",
        complexity: c"O(1)",
        since: c"1.0.0",
        arity: 2,
        key_flags: KEY_RO_ACCESS,
        keys: KeyArgs::One,
        args: &[KEY],
    },
    info
);

fn info(ctx: &Context, args: &[RedisString]) -> RedisResult {
    run(ctx, || {
        let [_, name] = args else {
            return Err(LockError::arity(INFO.spec.name()));
        };
        let (state, ttl) = match store::read_only(ctx, name)? {
            Some((LockState::Free, _)) | None => return Ok(RedisValue::Null),
            Some(read) => read,
        };
        let lock = lock_id(ctx, name);
        let waiters = registry().map_or(0, |r| r.queue_len(&lock));
        let ttl = ("ttl", Field::Int(ttl.unwrap_or(-1)));
        let waiters = ("waiters", Field::Int(waiters as i64));
        let mut fields = match &state {
            LockState::Held { owner, holds } => vec![
                ("owner", Field::Bulk(owner)),
                ("holds", Field::Int(*holds)),
                ttl,
                waiters,
            ],
            LockState::Shared(rw) => {
                // A reader whose every lease ran out no longer holds it.
                let readers = rw
                    .readers
                    .iter()
                    .filter(|r| !r.expired())
                    .map(|r| (&r.owner[..], r.holds))
                    .collect();
                let mut fields =
                    vec![("mode", Field::Bulk(rw.mode().map_or(b"read", |m| m.mode())))];
                if let Some((writer, holds)) = &rw.writer {
                    fields.push(("writer", Field::Bulk(writer)));
                    fields.push(("write_holds", Field::Int(*holds)));
                }
                fields.extend([("readers", Field::Counts(readers)), ttl, waiters]);
                fields
            }
            LockState::Free => return Ok(RedisValue::Null),
        };
        let token = tokens::existing_token(ctx, name.as_slice());
        if let Some(token) = token {
            fields.push(("token", Field::Int(token)));
        }
        // KEEPALIVE holds of current holders, with the client keeping each.
        let mut bound: Vec<(&[u8], ClientId)> = state
            .owners()
            .into_iter()
            .filter_map(|owner| keepalive::client_of(&lock, owner).map(|c| (owner, c)))
            .collect();
        bound.sort();
        match (&state, bound.as_slice()) {
            (_, []) => {}
            (LockState::Held { .. }, [(_, client), ..]) => {
                fields.push(("keepalive_client", Field::Int(*client as i64)));
            }
            _ => fields.push((
                "keepalive_clients",
                Field::Counts(bound.iter().map(|(o, c)| (*o, *c as i64)).collect()),
            )),
        }
        ffi::reply_map(ctx, &fields);
        Ok(RedisValue::NoReply)
    })
}

const COUNT: ArgDoc = option(c"count", ArgKind::Integer, c"COUNT");

/// `LOCK.WAITERS key [COUNT count]`
pub const WAITERS: Command = command!(
    CommandSpec {
        name: c"lock.waiters",
        flags: c"readonly",
        acl_categories: "read hash",
        summary: c"Lists the callers queued for a lock, first in line first.",
        complexity: c"O(N), N the callers listed (COUNT, 10 by default; COUNT 0: all)",
        since: c"1.1.0",
        arity: -2,
        key_flags: KEY_RO_ACCESS,
        keys: KeyArgs::One,
        args: &[KEY, COUNT],
    },
    waiters
);

/// `LOCK.QUEUES [COUNT count]`
pub const QUEUES: Command = command!(
    CommandSpec {
        name: c"lock.queues",
        flags: c"readonly",
        acl_categories: "read hash",
        summary: c"Lists the locks of the database that callers wait for on this server, longest wait first.",
        complexity: c"O(N + M log M), N the locks with waiters in the database, M the locks listed",
        since: c"1.1.0",
        arity: -1,
        key_flags: 0,
        keys: KeyArgs::None,
        args: &[COUNT],
    },
    queues
);

/// One waiter, copied out of the registry before replying.
struct Shown {
    owner: FieldName,
    kind: &'static str,
    waited: i64,
    lease: i64,
    keepalive: bool,
    fence: bool,
    timeout: i64,
    /// The permits a semaphore caller asked for.
    permits: Option<u32>,
    /// Every key of a multi-lock caller (none for one key).
    keys: Vec<LockId<'static>>,
}

fn waiters(ctx: &Context, args: &[RedisString]) -> RedisResult {
    run(ctx, || {
        let [_, name, options @ ..] = args else {
            return Err(LockError::arity(WAITERS.spec.name()));
        };
        let limit = parse_view_options(options)?;
        // As LOCK.INFO: a key that is neither a lock nor a semaphore is an
        // error.
        engine::holders(ctx, name)?;
        let lock = lock_id(ctx, name);
        let shown: Vec<Shown> = if anyone_waits() {
            let now = Instant::now();
            let registry = registry()?;
            registry
                .waiters(&lock, limit)
                .into_iter()
                .map(|w| Shown {
                    keys: w.group.map(|g| registry.group_locks(g)).unwrap_or_default(),
                    owner: w.request.owner.clone(),
                    kind: w.kind(),
                    waited: w.waited_ms(now),
                    lease: w.request.lease_ms,
                    keepalive: w.request.keepalive.is_some(),
                    fence: w.request.fence,
                    timeout: w.timeout_ms(now),
                    permits: w.request.kind.permits(),
                })
                .collect()
        } else {
            Vec::new()
        };
        // Whom each waits for on its key, or on each key of a multi-lock
        // caller (each key's holders read once), each owner once.
        let mut holders: HashMap<LockId<'static>, Holders> = HashMap::new();
        let waits_for: Vec<Vec<Vec<u8>>> = shown
            .iter()
            .map(|w| {
                let mut owners: Vec<Vec<u8>> = Vec::new();
                let here = [lock.to_owned()];
                let keys = if w.keys.is_empty() {
                    &here[..]
                } else {
                    &w.keys[..]
                };
                for key in keys {
                    let held = holders
                        .entry(key.clone())
                        .or_insert_with(|| deadlocks::holders(ctx, key));
                    for h in deadlocks::waits_for(key, &w.owner, held) {
                        if !owners.contains(&h) {
                            owners.push(h);
                        }
                    }
                }
                owners
            })
            .collect();
        let maps: Vec<Vec<(&str, Field)>> = shown
            .iter()
            .zip(&waits_for)
            .map(|(w, waits_for)| {
                let mut fields = vec![
                    ("owner", Field::Bulk(&w.owner)),
                    ("kind", Field::Bulk(w.kind.as_bytes())),
                    ("waited", Field::Int(w.waited)),
                    ("lease", Field::Int(w.lease)),
                    ("keepalive", Field::Int(i64::from(w.keepalive))),
                    ("fence", Field::Int(i64::from(w.fence))),
                    ("timeout", Field::Int(w.timeout)),
                ];
                if let Some(n) = w.permits {
                    fields.push(("permits", Field::Int(i64::from(n))));
                }
                let waits_for = waits_for.iter().map(Vec::as_slice).collect();
                fields.push(("waits_for", Field::Bulks(waits_for)));
                fields
            })
            .collect();
        ffi::reply_maps(ctx, &maps);
        Ok(RedisValue::NoReply)
    })
}

fn queues(ctx: &Context, args: &[RedisString]) -> RedisResult {
    run(ctx, || {
        let [_, options @ ..] = args else {
            return Err(LockError::arity(QUEUES.spec.name()));
        };
        let limit = parse_view_options(options)?;
        let mut all = if anyone_waits() {
            registry()?.queues(ffi::selected_db(ctx))
        } else {
            Vec::new()
        };
        // Only locks LOCK.INFO would show this caller.
        let readable = ffi::may_read_keys(ctx, all.iter().map(|q| &q.key[..]));
        let mut readable = readable.into_iter();
        all.retain(|_| readable.next().unwrap_or(false));
        let now = Instant::now();
        let shown: Vec<(QueueView, Option<FieldName>, i64)> = longest_waiting_first(all, limit)
            .into_iter()
            .map(|q| {
                let (owner, ttl) = holder(ctx, &q.key);
                (q, owner, ttl)
            })
            .collect();
        let maps: Vec<Vec<(&str, Field)>> = shown
            .iter()
            .map(|(q, owner, ttl)| {
                vec![
                    ("key", Field::Bulk(&q.key)),
                    (
                        "waiters",
                        Field::Int(i64::try_from(q.waiters).unwrap_or(i64::MAX)),
                    ),
                    ("longest_wait", Field::Int(q.longest_wait_ms(now))),
                    ("owner", owner.as_deref().map_or(Field::Null, Field::Bulk)),
                    ("ttl", Field::Int(*ttl)),
                ]
            })
            .collect();
        ffi::reply_maps(ctx, &maps);
        Ok(RedisValue::NoReply)
    })
}

/// Who holds the lock at `key`, as one owner: an exclusive lock's holder,
/// a read-write lock's writer; nobody when it is free or only read; and
/// its TTL, as PTTL.
fn holder(ctx: &Context, key: &[u8]) -> (Option<FieldName>, i64) {
    let name = ffi::string(ctx, key);
    match store::read_only(ctx, &name) {
        Ok(Some((LockState::Held { owner, .. }, ttl))) => (Some(owner), ttl.unwrap_or(-1)),
        Ok(Some((LockState::Shared(rw), ttl))) => (rw.writer.map(|(w, _)| w), ttl.unwrap_or(-1)),
        Ok(Some((LockState::Free, _)) | None) => (None, -2),
        // Another type now: its waiters are about to be answered so.
        Err(_) => (None, store::pttl(ctx, &name)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_are_read_only_and_take_count() {
        for c in [&WAITERS, &QUEUES] {
            assert_eq!(c.spec.flags, c"readonly");
            assert!(c.spec.acl_categories.split(' ').any(|c| c == "read"));
            assert!(c.spec.args.iter().any(|a| a.token == Some(c"COUNT")));
        }
        assert!(WAITERS.spec.keys == KeyArgs::One && QUEUES.spec.keys == KeyArgs::None);
    }
}
