//! LOCK.INFO: who holds a lock, its lease left, its waiters, its last
//! fencing token, and which client keeps a KEEPALIVE hold alive. Read-only,
//! on a master or a replica.

use redis_module::{Context, RedisResult, RedisString, RedisValue};

use super::{command, lock_id, run, Command, KEY};
use crate::ffi::{self, CommandSpec, Field, KeyArgs, KEY_RO_ACCESS};
use crate::waiters::registry;
use crate::{keepalive, store};
use lock_rules::error::LockError;
use lock_rules::keepalive::ClientId;
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
        let token = store::existing_token(ctx, name.as_slice());
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
