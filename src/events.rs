//! Everything that can end a lock outside a LOCK.* command, as far as it
//! matters to callers waiting for it: keyspace events (DEL, expiry,
//! eviction, RENAME, a Redisson unlock...), flushes and SWAPDB, role and
//! replication changes, client disconnections; and the drain of deferred
//! work (`deferred.rs`): each key noted is read again and served from its
//! queue (the engine's settle), and each lost grant given back.
//!
//! Keyspace events also end the holds whose times `holds.rs` keeps, and
//! have an election whose lock or record changed looked at again (its
//! leader, if it lost without its doing, hears `gone`; see `elections.rs`).
//!
//! When the module starts listening to each (lazily: until a lock needs
//! them, the rest of Redis pays nothing) is `subscriptions.rs`'s; the
//! handlers here are handed to it at load.
//!
//! Offers: [`KeyspaceEvents`], [`ExpiryEvents`], [`ServerEvents`],
//! [`drain`].

use std::borrow::Cow;
use std::collections::HashSet;

use redis_module::{Context, ContextFlags};

use crate::deferred::{self, Work};
use crate::engine;
use crate::ffi::{self, KeyspaceHandler, ServerEventHandler};
use crate::native_writes;
use crate::placement::Placement;
use crate::sessions;
use crate::stats::{Stats, STATS};
use crate::store;
use crate::tokens;
use crate::waiters::registry;
use crate::{
    blocking, deadlocks, elections, fair_queue, holds, keepalive, latches, leader_record, observers,
};
use crate::{replication, server_settings};
use lock_rules::error::LockError;
use lock_rules::keys::semaphores_of_permits_key;
use lock_rules::lock_id::LockId;
use lock_rules::session::LossReason;

/// The deferred work, on a master that may be written now.
pub fn drain(ctx: &Context, mut work: Work) {
    // Every hold that ends outside a command has its lock looked at for a
    // fair queue: most have none, and cost one key lookup here, not the
    // cluster's slot map.
    work.fair_locks.retain(|lock| {
        !work.keys.contains(lock)
            && ffi::select_db(ctx, lock.db)
            && fair_queue::exists(ctx, &lock.key)
    });
    if work.keys.is_empty()
        && work.fair_locks.is_empty()
        && work.lost_grants.is_empty()
        && work.elections.is_empty()
        && work.semaphores.is_empty()
        && work.token_keys.is_empty()
    {
        return;
    }
    let placement = Placement::read(ctx);
    for counter in &work.token_keys {
        if ffi::select_db(ctx, counter.db) && placement.serves(&counter.key) {
            tokens::keep_token_key(ctx, &counter.key, true);
        }
    }
    for lock in &work.keys {
        engine::settle(ctx, &placement, lock, false);
    }
    for lock in &work.fair_locks {
        engine::settle(ctx, &placement, lock, true);
    }
    for grant in &work.lost_grants {
        engine::release_lost_grant(ctx, &placement, grant);
    }
    let mut looked_at = HashSet::new();
    for (election, leader) in work.elections {
        if !ffi::select_db(ctx, election.db) {
            continue;
        }
        if !placement.serves(&election.key) {
            let name = (election.db, election.key.to_vec());
            observers::fail(ctx, &name, &LockError::slot_not_served());
            continue;
        }
        if let Some(leader) = leader {
            lost_unless_held(ctx, &placement, &election, &leader);
        }
        if looked_at.insert(election.clone()) {
            elections::recheck(ctx, &election, true);
        }
    }
    for semaphore in &work.semaphores {
        if ffi::select_db(ctx, semaphore.db) && placement.serves(&semaphore.key) {
            deadlocks::semaphore_changed(ctx, semaphore);
        }
    }
}

/// Ends the binding of `leader`, who led `election`, unless it still holds
/// it: it lost without its doing (its lock deleted, flushed, overwritten,
/// handed on after its lease ran out), and its session hears `gone`. A
/// release or a forced release unbound it in its own command. A leader
/// that holds the lock but whose record is gone (deleted, expired apart
/// from the lock) leads nothing anyone can see: its leadership ends too.
fn lost_unless_held(ctx: &Context, placement: &Placement, election: &LockId<'_>, leader: &[u8]) {
    if keepalive::client_of(election, leader).is_none() {
        return;
    }
    let name = ffi::string(ctx, &election.key);
    // The common case, read once: the record names it, and it holds the lock.
    let recorded = leader_record::read_leader(ctx, &name)
        .ok()
        .flatten()
        .is_some_and(|seen| seen.leader.candidate == leader);
    if recorded {
        return;
    }
    let holds = store::read_only(ctx, &name)
        .ok()
        .flatten()
        .is_some_and(|(state, _)| state.held_by(leader));
    if !holds {
        keepalive::end(ctx, election, leader, LossReason::Gone);
    } else if elections::is_leadership(election, leader) {
        keepalive::end(ctx, election, leader, LossReason::Gone);
        keepalive::resign_leadership(ctx, placement, election, leader);
    }
}

/// An election changed outside a command (a keyspace event on it or on its
/// record, a flush): on a master, it is looked at again in the drain with
/// every owner bound to it (the record that named its leader may have
/// gone with the lock); on a replica, whose change came from its master,
/// its observers are answered once the master's writes are all in.
fn election_changed(ctx: &Context, election: LockId<'static>) {
    if !ctx.get_flags().contains(ContextFlags::MASTER) {
        return elections::recheck_later(ctx, election);
    }
    for owner in keepalive::owners_of(&election) {
        deferred::defer_election(ctx, election.clone(), Some(owner));
    }
    deferred::defer_election(ctx, election, None);
}

/// Keyspace notifications. Writing here is unsafe (see the module notes):
/// a key someone waits for is only noted for the 0 ms drain.
pub struct KeyspaceEvents;

impl KeyspaceHandler for KeyspaceEvents {
    fn event(ctx: &Context, event: &[u8], key: &[u8]) {
        fair_queue::key_event(key);
        if native_writes::is_own_notification() {
            return;
        }
        keyspace_event(ctx, event, key);
        deferred::drain_after_event(ctx);
    }
}

/// Every fencing counter's name starts so (`lock_rules::keys::token_key`).
const TOKEN_KEY_PREFIX: &[u8] = b"redisson_lock_token:";

/// A keyspace event from outside the module (see [`KeyspaceEvents`]).
fn keyspace_event(ctx: &Context, event: &[u8], key: &[u8]) {
    let db = ffi::selected_db(ctx);
    if event == b"new" {
        return new_key(ctx, db, key);
    }
    // Redisson's RFencedLock takes its token with INCR (event `incrby`).
    if event == b"incrby" && key.starts_with(TOKEN_KEY_PREFIX) {
        deferred::defer_token_key(
            ctx,
            LockId {
                db,
                key: Cow::Owned(key.to_vec()),
            },
        );
    }
    latches::key_event(ctx, db, event, key);
    // Expiry and eviction end holds (and are seen by elections) through
    // `ExpiryEvents`.
    if event != b"expired" && event != b"evicted" {
        if holds::key_event(db, event, key) {
            fair_queue::hold_ended(ctx, db, key);
        }
        for election in elections::of_key(db, key) {
            election_changed(ctx, election);
        }
    }
    // When the registry is busy (never expected), note the key anyway:
    // the drain re-checks everything.
    if registry().is_ok_and(|r| !r.has_waiters(db, key)) {
        return;
    }
    // Whoever noticed first (the lease timer, Redis's active or lazy
    // expiry, a command opening the key), the lease ran out while
    // callers waited.
    if event == b"expired" {
        Stats::bump(&STATS.expired_with_waiters);
    }
    let lock = LockId {
        db,
        key: Cow::Owned(key.to_vec()),
    };
    deferred::defer_key(ctx, lock);
}

/// A key was created (heard once a caller waited on a semaphore): a
/// semaphore someone waits for whose counter or permit set now exists is
/// looked at again, since it may have been created as another type (`RPUSH`
/// on a missing semaphore fires no other event the module hears), and its
/// waiters must then hear `WRONGTYPE`.
fn new_key(ctx: &Context, db: i32, key: &[u8]) {
    let Ok(reg) = registry() else {
        return;
    };
    let mut names: Vec<&[u8]> = semaphores_of_permits_key(key);
    names.push(key);
    names.retain(|name| reg.has_waiters(db, name));
    let locks: Vec<LockId<'static>> = names
        .into_iter()
        .map(|name| LockId {
            db,
            key: Cow::Owned(name.to_vec()),
        })
        .collect();
    drop(reg);
    for lock in locks {
        deferred::defer_key(ctx, lock);
    }
}

/// Expiry and eviction, for hold times: a hold whose lease runs out ends
/// when its key expires.
pub struct ExpiryEvents;

impl KeyspaceHandler for ExpiryEvents {
    fn event(ctx: &Context, event: &[u8], key: &[u8]) {
        let db = ffi::selected_db(ctx);
        if holds::key_event(db, event, key) {
            fair_queue::hold_ended(ctx, db, key);
        }
        for election in elections::of_key(db, key) {
            election_changed(ctx, election);
        }
        deferred::drain_after_event(ctx);
    }
}

pub struct ServerEvents;

impl ServerEventHandler for ServerEvents {
    fn replication_changed(_ctx: &Context) {
        replication::forget_listeners();
    }

    fn demoted(ctx: &Context) {
        // Redis answers a demoted master's blocked callers itself (UNBLOCKED,
        // through their disconnect callbacks) before this event. Valkey 9
        // (not 8.0) leaves module-blocked callers blocked in cluster mode and
        // for clients with CLIENT CAPA redirect: on a replica they would wait
        // forever, or until their BLOCK time and a nil that says "timed out".
        // Answer them as Redis does.
        let locks = registry().map_or_else(|_| Vec::new(), |r| r.locks_in(-1));
        for lock in &locks {
            engine::reject_all(ctx, lock, &LockError::demoted());
        }
        // A replica renews nothing; holders re-attach on the new master, and
        // sessions hear so now.
        sessions::demoted(ctx);
        latches::demoted(ctx);
        observers::demoted(ctx);
        keepalive::clear();
        holds::clear();
    }

    fn loading_ended(ctx: &Context) {
        fair_queue::keys_replaced();
        replication::forget_listeners();
        replication::note_load(ctx);
    }

    fn flushed(ctx: &Context, db: i32) {
        holds::flushed(db);
        latches::flushed(ctx, db);
        for election in elections::known_in(&[db]) {
            election_changed(ctx, election);
        }
        defer_locks_in(ctx, &[db]);
    }

    fn swapped(ctx: &Context, a: i32, b: i32) {
        fair_queue::keys_replaced();
        holds::swapped(a, b);
        latches::swapped(ctx, a, b);
        for election in elections::known_in(&[a, b]) {
            election_changed(ctx, election);
        }
        defer_locks_in(ctx, &[a, b]);
    }

    fn client_gone(ctx: &Context, client_id: u64) {
        blocking::client_gone(ctx, client_id);
        keepalive::client_gone(client_id);
        sessions::client_gone(client_id);
    }

    fn after_sleep(_ctx: &Context) {
        blocking::forget_answered();
    }

    fn config_changed(ctx: &Context) {
        server_settings::read(ctx);
    }
}

fn defer_locks_in(ctx: &Context, dbs: &[i32]) {
    let locks: Vec<LockId<'static>> = match registry() {
        Ok(reg) => dbs.iter().flat_map(|db| reg.locks_in(*db)).collect(),
        Err(_) => return,
    };
    for lock in locks {
        deferred::defer_key(ctx, lock);
    }
}
