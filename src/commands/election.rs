//! ELECT.CAMPAIGN, ELECT.RESIGN, ELECT.PROCLAIM, ELECT.LEADER and
//! ELECT.OBSERVE: leader election on the lock. A campaign is a fenced
//! acquire kept alive by a connection (its reply, the fencing token, is the
//! term); a resign is a release of every hold and every wait of the
//! candidate; the leader record is `leader_record.rs`'s, kept in step by
//! `elections.rs`, and the observers `observers.rs`'s.

use redis_module::{Context, RedisResult, RedisString, RedisValue};

use super::{
    acquire_request, arg, command, lock_id, may_write, option, owner_call, run, Command, OwnerCall,
    BLOCK, KEEPALIVE, KEY, LEASE, SESSION_TOKEN,
};
use crate::elections;
use crate::engine::lock::begin;
use crate::engine::{self, Origin};
use crate::ffi::{self, ArgDoc, ArgKind, CommandSpec, KeyArgs, KEY_RO_ACCESS, KEY_RW_UPDATE};
use crate::leader_record::{self, Seen};
use crate::observers;
use crate::waiters::with_queue;
use crate::{acquisition, blocking, keepalive, subscriptions};
use lock_rules::args::{parse_campaign_options, parse_observe_options};
use lock_rules::election::{holder, observer_answered, Leader};
use lock_rules::error::LockError;
use lock_rules::keys::leader_key_in_slot;
use lock_rules::request::{Campaign, LockKind};

const CANDIDATE: ArgDoc = arg(c"candidate", ArgKind::String);

/// `ELECT.CAMPAIGN key candidate [VALUE value] [PX ms | EX s] (KEEPALIVE | SESSION token) [BLOCK ms]`
pub const CAMPAIGN: Command = command!(
    CommandSpec {
        name: c"elect.campaign",
        flags: c"write deny-oom blocking",
        acl_categories: "write hash blocking",
        summary: c"Waits in FIFO order to lead an election; the reply is the leadership's term, a fencing token.",
        complexity: c"O(1)",
        since: c"1.2.0",
        arity: -4,
        key_flags: KEY_RW_UPDATE,
        keys: KeyArgs::One,
        args: &[
            KEY,
            CANDIDATE,
            option(c"value", ArgKind::String, c"VALUE"),
            LEASE,
            KEEPALIVE,
            SESSION_TOKEN,
            BLOCK,
        ],
    },
    campaign
);

/// `ELECT.RESIGN key candidate`
pub const RESIGN: Command = command!(
    CommandSpec {
        name: c"elect.resign",
        flags: c"write fast",
        acl_categories: "write hash fast",
        summary:
            c"Leaves an election: a leader's leadership ends and the next candidate leads at once.",
        complexity: c"O(N), N the callers waiting for the election",
        since: c"1.2.0",
        arity: 3,
        key_flags: KEY_RW_UPDATE,
        keys: KeyArgs::One,
        args: &[KEY, CANDIDATE],
    },
    resign
);

/// `ELECT.PROCLAIM key candidate value`
pub const PROCLAIM: Command = command!(
    CommandSpec {
        name: c"elect.proclaim",
        flags: c"write deny-oom fast",
        acl_categories: "write hash fast",
        summary: c"Changes the leader's value; observers are answered.",
        complexity: c"O(1)",
        since: c"1.2.0",
        arity: 4,
        key_flags: KEY_RW_UPDATE,
        keys: KeyArgs::One,
        args: &[KEY, CANDIDATE, arg(c"value", ArgKind::String)],
    },
    proclaim
);

/// `ELECT.LEADER key`
pub const LEADER: Command = command!(
    CommandSpec {
        name: c"elect.leader",
        flags: c"readonly fast",
        acl_categories: "read hash fast",
        summary: c"Returns who leads an election: candidate, term, value and the lease left.",
        complexity: c"O(1)",
        since: c"1.2.0",
        arity: 2,
        key_flags: KEY_RO_ACCESS,
        keys: KeyArgs::One,
        args: &[KEY],
    },
    leader
);

/// `ELECT.OBSERVE key [TERM term] [BLOCK ms]`
pub const OBSERVE: Command = command!(
    CommandSpec {
        name: c"elect.observe",
        flags: c"readonly blocking",
        acl_categories: "read hash blocking",
        summary: c"Returns the leadership once it differs from the term the caller saw, waiting in the server with BLOCK.",
        complexity: c"O(1)",
        since: c"1.2.0",
        arity: -2,
        key_flags: KEY_RO_ACCESS,
        keys: KeyArgs::One,
        args: &[KEY, option(c"term", ArgKind::Integer, c"TERM"), BLOCK],
    },
    observe
);

/// The leader record's name, refused when it would land in another slot,
/// and checked against the caller's ACL key patterns for `write`.
fn record_name(ctx: &Context, name: &RedisString, write: bool) -> Result<Vec<u8>, LockError> {
    let record = leader_key_in_slot(name.as_slice())?;
    if write {
        may_write(ctx, &record, "leader record key")?;
    } else if !ffi::may_read_key(ctx, &record) {
        return Err(LockError::no_permission("leader record key", &record));
    }
    Ok(record)
}

fn campaign(ctx: &Context, args: &[RedisString]) -> RedisResult {
    run(ctx, || {
        let OwnerCall {
            name,
            owner,
            options,
        } = owner_call(&CAMPAIGN.spec, args)?;
        let (options, value) = parse_campaign_options(options)?;
        record_name(ctx, name, true)?;
        let (mut request, wait) = acquire_request(
            ctx,
            std::slice::from_ref(name),
            owner,
            &options,
            LockKind::Exclusive,
        )?;
        leader_record::check_writable(ctx, name.as_slice())?;
        request.campaign = Some(Campaign {
            value: value.map(Vec::into_boxed_slice),
        });
        let lock = lock_id(ctx, name);
        let (key, mut tx) = begin(ctx, name, &lock, Origin::caller(owner, true))?;
        elections::note(&lock);
        subscriptions::watch_for_waiters(ctx);
        let leader = |term| Leader {
            candidate: owner.as_slice().to_vec(),
            term,
            value: request
                .campaign
                .as_ref()
                .and_then(|c| c.value.as_deref())
                .map(<[u8]>::to_vec),
        };
        if holder(tx.state()) == Some(owner.as_slice()) {
            // The leader campaigns again (a re-attach after a failover, or
            // a new connection): no second hold, a fresh lease and binding.
            // Held under this name outside ELECT.* (LOCK.ACQUIRE): no term.
            let Some(Seen { leader: led, .. }) = leader_record::read_leader(ctx, name)? else {
                return Err(LockError::held_outside_election());
            };
            let term = led.term;
            let renewed = tx.renew(owner.as_slice(), request.lease_ms);
            engine::lock::commit(ctx, &lock, &key, tx);
            renewed?;
            acquisition::renewed(
                ctx,
                &lock,
                owner.as_slice(),
                request.lease_ms,
                request.keepalive.as_ref(),
            );
            let mut now = leader(term);
            if now.value.is_none() {
                now.value = led.value;
            }
            elections::began(ctx, &lock, name, now);
            return Ok(RedisValue::Integer(term));
        }
        let reply = acquisition::acquire(ctx, &lock, key, tx, &request, wait)?;
        if let RedisValue::Integer(term) = reply {
            elections::began(ctx, &lock, name, leader(term));
        }
        Ok(reply)
    })
}

fn resign(ctx: &Context, args: &[RedisString]) -> RedisResult {
    run(ctx, || {
        let OwnerCall { name, owner, .. } = owner_call(&RESIGN.spec, args)?;
        if args.len() != 3 {
            return Err(LockError::arity(RESIGN.spec.name()));
        }
        record_name(ctx, name, true)?;
        let lock = lock_id(ctx, name);
        let (key, mut tx) = begin(ctx, name, &lock, Origin::caller(owner, false))?;
        leader_record::check_writable(ctx, name.as_slice())?;
        if holder(tx.state()) == Some(owner.as_slice()) {
            // Its leadership ends here: the record goes with it (a name
            // not known on this server since a failover included).
            elections::note(&lock);
        }
        blocking::cancel(ctx, &lock, owner.as_slice());
        let led = with_queue(&lock, |queue| tx.resign(queue, owner.as_slice()))?;
        if led {
            keepalive::released_all(&lock, owner.as_slice());
        }
        engine::lock::commit(ctx, &lock, &key, tx);
        Ok(RedisValue::Integer(i64::from(led)))
    })
}

fn proclaim(ctx: &Context, args: &[RedisString]) -> RedisResult {
    run(ctx, || {
        let [_, name, owner, value] = args else {
            return Err(LockError::arity(PROCLAIM.spec.name()));
        };
        lock_rules::args::parse_owner(owner.as_slice())?;
        record_name(ctx, name, true)?;
        // A write: refused on a replica as the other writes are.
        Origin::caller(owner, false).parts(ctx)?;
        leader_record::check_writable(ctx, name.as_slice())?;
        let lock = lock_id(ctx, name);
        elections::note(&lock);
        subscriptions::watch_for_waiters(ctx);
        let Some(Seen { mut leader, .. }) = leader_record::read_leader(ctx, name)? else {
            return Err(LockError::not_owner());
        };
        if leader.candidate != owner.as_slice() {
            return Err(LockError::not_owner());
        }
        leader.value = Some(value.as_slice().to_vec());
        let term = leader.term;
        elections::began(ctx, &lock, name, leader);
        Ok(RedisValue::Integer(term))
    })
}

fn leader(ctx: &Context, args: &[RedisString]) -> RedisResult {
    run(ctx, || {
        let [_, name] = args else {
            return Err(LockError::arity(LEADER.spec.name()));
        };
        record_name(ctx, name, false)?;
        match leader_record::read_leader(ctx, name)? {
            None => Ok(RedisValue::Null),
            seen => {
                ffi::reply_map(ctx, &leader_record::reply_fields(&seen));
                Ok(RedisValue::NoReply)
            }
        }
    })
}

fn observe(ctx: &Context, args: &[RedisString]) -> RedisResult {
    run(ctx, || {
        let [_, name, options @ ..] = args else {
            return Err(LockError::arity(OBSERVE.spec.name()));
        };
        let (seen_term, wait) = parse_observe_options(options)?;
        record_name(ctx, name, false)?;
        let lock = lock_id(ctx, name);
        subscriptions::watch_for_waiters(ctx);
        let now = leader_record::read_leader(ctx, name)?;
        let term = Leader::term_of(now.as_ref().map(|s| &s.leader));
        if observer_answered(term, seen_term) {
            ffi::reply_map(ctx, &leader_record::reply_fields(&now));
            return Ok(RedisValue::NoReply);
        }
        let blocks = !ctx
            .get_flags()
            .contains(redis_module::ContextFlags::DENY_BLOCKING);
        match wait.filter(|_| blocks) {
            Some(wait) => {
                if !ctx.get_flags().contains(redis_module::ContextFlags::MASTER) {
                    // A replica hears of changes by the record's replicated
                    // writes.
                    subscriptions::watch_hashes(ctx);
                }
                observers::block(ctx, &lock, &now, wait)?;
                Ok(RedisValue::NoReply)
            }
            None => Ok(RedisValue::Null),
        }
    })
}
