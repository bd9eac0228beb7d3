//! Elections on this server (ELECT.*): which names are elections, the
//! leader record kept in step with each one's lock, and a leadership's end
//! noticed at once and told to its leader.
//!
//! An election is a lock (its holder leads; `lock_rules::election`). What
//! this file adds around the lock's own hand-off:
//!
//! - the leader record (`leader_record.rs`), written in the commit that
//!   hands the lock to a waiting candidate ([`committed`], called by
//!   `handoff` for the names known here as elections), or by ELECT.CAMPAIGN
//!   for a grant at once ([`began`]); deleted when nobody leads; its expiry
//!   kept equal to the lock's, so a record never outlives its leadership,
//!   wherever it is read;
//! - observers (`observers.rs`) answered on every change;
//! - the loss of a leadership that its leader did not give up (the lock
//!   deleted, flushed, overwritten, expired, handed on after its lease ran
//!   out): the check runs in a 0 ms timer after the command or event that
//!   ended it, once that command unbound what it released itself, and ends
//!   the leader's KEEPALIVE binding with a `gone` message on its session's
//!   channel (the drain's, `events.rs`, for the binding is `keepalive.rs`'s).
//!   LOCK.FORCERELEASE already says `forced` at once. Keyspace events on an
//!   election or its record run the same check (on a replica, whose
//!   replicated writes they are, it only answers observers);
//! - liveness: a leadership's renewal needs its connection to have been
//!   heard from within the lease ([`heard_from`]; `keepalive.rs` asks).
//!
//! Which names are elections is known from the ELECT.* commands run on this
//! server since it loaded: after a failover, a leader's ELECT.CAMPAIGN (its
//! re-attach) or any ELECT.* call on the name makes it known again; until
//! then the record still expires with the lock it was written with.
//!
//! Offers: [`note`], [`is_election`], [`committed`], [`began`],
//! [`recheck`], [`recheck_later`], [`of_key`], [`known_in`], [`heard_from`].

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{LazyLock, Mutex, MutexGuard};

use redis_module::{Context, RedisString};

use crate::ffi::{self, TimerHandler};
use crate::leader_record::{read_leader, Record, Seen};
use crate::observers::{self, Name};
use crate::stats::{Stats, STATS};
use crate::store::{self, LockKey};
use crate::waiters::Waiter;
use crate::{deferred, sync};
use lock_rules::election::{holder, Leader};
use lock_rules::keepalive::Binding;
use lock_rules::keys::elections_of_leader_key;
use lock_rules::lock_id::LockId;
use lock_rules::server_text::client_idle_seconds;
use lock_rules::transition::{Transition, Verdict};

#[derive(Default)]
struct Elections {
    /// The names ELECT.* commands used on this server, by key, then the
    /// dbs they were used in (a lookup by the key's bytes allocates
    /// nothing: every lock's commit asks once an election exists).
    known: HashMap<Vec<u8>, Vec<i32>>,
    /// The leaderships granted to a campaign here, by name and candidate:
    /// only they are renewed under the liveness rule, and only their
    /// bindings end when their record goes.
    leaderships: HashSet<(Name, Vec<u8>)>,
    /// Elections whose observers to answer from the next [`Recheck`].
    to_recheck: Vec<LockId<'static>>,
    recheck_armed: bool,
}

static ELECTIONS: LazyLock<Mutex<Elections>> = LazyLock::new(Mutex::default);
/// Bit `len % 64` is set for the length of every name ever known as an
/// election here (0: none ever was): a commit or a KEEPALIVE renewal of a
/// lock whose name's length has no bit set (most locks, beside a few
/// elections) skips the mutex and the lookup.
static LENGTHS: AtomicU64 = AtomicU64::new(0);

fn length_bit(key: &[u8]) -> u64 {
    1 << (key.len() % 64)
}

fn elections() -> MutexGuard<'static, Elections> {
    sync::lock(&ELECTIONS)
}

fn name_of(lock: &LockId<'_>) -> Name {
    (lock.db, lock.key.to_vec())
}

fn lock_of(name: &Name) -> LockId<'static> {
    LockId {
        db: name.0,
        key: Cow::Owned(name.1.clone()),
    }
}

impl Elections {
    fn is_known(&self, db: i32, key: &[u8]) -> bool {
        self.known.get(key).is_some_and(|dbs| dbs.contains(&db))
    }
}

/// `lock` is an election: ELECT.CAMPAIGN (or PROCLAIM) names it. Known
/// until nobody leads it and nobody campaigns for it ([`forget`]).
pub fn note(lock: &LockId<'_>) {
    let mut e = elections();
    if !e.is_known(lock.db, &lock.key) {
        e.known.entry(lock.key.to_vec()).or_default().push(lock.db);
        LENGTHS.fetch_or(length_bit(&lock.key), Relaxed);
    }
}

/// `lock` was left free in a commit (nobody leads it, and no candidate
/// waits: one would have been handed it): it is no longer known, so names
/// campaigned for once cost nothing after.
fn forget(lock: &LockId<'_>) {
    let mut e = elections();
    let emptied = match e.known.get_mut(&lock.key[..]) {
        Some(dbs) => {
            dbs.retain(|db| *db != lock.db);
            dbs.is_empty()
        }
        None => false,
    };
    if emptied {
        e.known.remove(&lock.key[..]);
    }
}

/// Whether commits of `lock` concern an election: it is known, or
/// observers wait on it.
pub fn is_election(lock: &LockId<'_>) -> bool {
    (LENGTHS.load(Relaxed) & length_bit(&lock.key) != 0 && elections().is_known(lock.db, &lock.key))
        || observers::watching(lock)
}

/// Whether `owner` leads `lock` by a campaign granted on this server.
pub fn is_leadership(lock: &LockId<'_>, owner: &[u8]) -> bool {
    LENGTHS.load(Relaxed) & length_bit(&lock.key) != 0
        && elections()
            .leaderships
            .contains(&(name_of(lock), owner.to_vec()))
}

fn set_leadership(lock: &LockId<'_>, owner: &[u8], leads: bool) {
    let entry = (name_of(lock), owner.to_vec());
    let mut e = elections();
    if leads {
        e.leaderships.insert(entry);
    } else {
        e.leaderships.remove(&entry);
    }
}

/// A transition of `lock` was committed to `key` (called before its wakes
/// are delivered). For an election: a candidate it handed the lock to gets
/// the record, a lock left free loses it, a renewed one keeps its expiry in
/// step; observers hear of a change, and a leader that lost without giving
/// up is checked once the command is done.
pub fn committed(ctx: &Context, lock: &LockId<'_>, key: &LockKey, tx: &Transition<Waiter>) {
    if !is_election(lock) {
        return;
    }
    let Some(record) = Record::open(ctx, &lock.key) else {
        return;
    };
    let before = record.read();
    let holder = holder(tx.state());
    // A candidate handed the lock: a campaign's grant (a LOCK.ACQUIRE
    // caller handed an election's lock leads nothing).
    let handed = holder.and_then(|candidate| {
        tx.wakes.iter().find_map(|wake| {
            let request = &wake.waiter.request;
            match (&wake.verdict, &request.campaign) {
                (Verdict::Granted(term), Some(campaign))
                    if &*request.owner == candidate && !wake.held =>
                {
                    Some(Leader {
                        candidate: candidate.to_vec(),
                        term: *term,
                        value: campaign.value.as_deref().map(<[u8]>::to_vec),
                    })
                }
                _ => None,
            }
        })
    });
    let kept = before
        .as_ref()
        .is_some_and(|l| Some(&l.candidate[..]) == holder);
    if let Some(leader) = &handed {
        record.write(ctx, leader, key.expires_at());
        Stats::bump(&STATS.elections_won);
    } else if kept {
        // Renewed, re-entered: the record keeps the lock's expiry.
        if let Some(at) = key.expires_at() {
            record.expire_at(ctx, at);
        }
    } else {
        // Left free, or taken at once (ELECT.CAMPAIGN then writes the
        // record, `began`; a LOCK.ACQUIRE caller leads nothing): a record
        // naming someone else goes.
        record.delete(ctx);
    }
    drop(record);
    if let Some(before) = before.filter(|_| !kept) {
        set_leadership(lock, &before.candidate, false);
        check_soon(ctx, name_of(lock), Some(before.candidate));
    }
    match handed {
        Some(leader) => {
            set_leadership(lock, &leader.candidate, true);
            let ttl_ms = key
                .expires_at()
                .map_or(-1, |at| (at - ffi::now_ms()).max(0));
            observers::answer(ctx, &name_of(lock), &Some(Seen { leader, ttl_ms }));
        }
        // What observers hear is read once the command is done (a
        // campaign granted at once has its record written by then).
        None if !kept => {
            if holder.is_none() {
                forget(lock);
            }
            check_soon(ctx, name_of(lock), None);
        }
        None => {}
    }
}

/// ELECT.CAMPAIGN's candidate leads at once (or re-attached): its record is
/// written (a re-attach keeps the term), and observers hear.
pub fn began(ctx: &Context, lock: &LockId<'_>, lock_name: &RedisString, leader: Leader) {
    let Some(record) = Record::open(ctx, &lock.key) else {
        return;
    };
    let before = record.read();
    let expires_at = store::expires_at(ctx, lock_name);
    if before.as_ref() == Some(&leader) {
        if let Some(at) = expires_at {
            record.expire_at(ctx, at);
        }
        set_leadership(lock, &leader.candidate, true);
        return;
    }
    let new_term = before.as_ref().map(|l| l.term) != Some(leader.term);
    record.write(ctx, &leader, expires_at);
    drop(record);
    if new_term {
        Stats::bump(&STATS.elections_won);
    }
    set_leadership(lock, &leader.candidate, true);
    let ttl_ms = expires_at.map_or(-1, |at| (at - ffi::now_ms()).max(0));
    observers::answer(ctx, &name_of(lock), &Some(Seen { leader, ttl_ms }));
}

/// Looks at `election` again, after the command: on a master in the drain
/// (`events::drain`, which ends the binding of `leader`, who led it, unless
/// it still holds it: a leader that lost without its doing hears `gone`);
/// on a replica (or a master that may not write) its observers now.
fn check_soon(ctx: &Context, election: Name, leader: Option<Vec<u8>>) {
    deferred::defer_election(ctx, lock_of(&election), leader);
}

/// An election noted for the drain, on a master that may write: a record
/// nobody leads by is deleted; observers hear of a change.
pub fn recheck(ctx: &Context, election: &LockId<'_>, writes: bool) {
    if !ffi::select_db(ctx, election.db) {
        return;
    }
    let name = ffi::string(ctx, &election.key);
    // A key of another type: nobody leads (its waiters hear WRONGTYPE).
    let now = read_leader(ctx, &name).unwrap_or(None);
    if writes && now.is_none() {
        // Nobody leads by the record (deleted lock, flushed, expired,
        // taken outside ELECT.*): it goes.
        if let Some(record) = Record::open(ctx, &election.key) {
            record.delete(ctx);
        }
    }
    observers::answer(ctx, &name_of(election), &now);
}

/// Looks at `election` again for its observers only, in a 0 ms timer: on a
/// replica, whose master's hand-off arrives as several writes in one
/// MULTI/EXEC (the record deleted, then written), which the timer sees
/// whole.
pub fn recheck_later(ctx: &Context, election: LockId<'static>) {
    let arm = {
        let mut e = elections();
        if !e.to_recheck.contains(&election) {
            e.to_recheck.push(election);
        }
        !std::mem::replace(&mut e.recheck_armed, true)
    };
    if arm && ffi::create_timer::<Recheck>(ctx, 0, 0).is_none() {
        elections().recheck_armed = false;
    }
}

struct Recheck;

impl TimerHandler for Recheck {
    fn fire(ctx: &Context, _: u64) {
        let work = {
            let mut e = elections();
            e.recheck_armed = false;
            std::mem::take(&mut e.to_recheck)
        };
        for election in work {
            recheck(ctx, &election, false);
        }
    }
}

/// The elections that a keyspace event on `key` concerns: `key` itself,
/// or the election whose record it is, if known here.
pub fn of_key(db: i32, key: &[u8]) -> Vec<LockId<'static>> {
    if LENGTHS.load(Relaxed) == 0 && observers::count() == 0 {
        return Vec::new();
    }
    let mut names: Vec<&[u8]> = elections_of_leader_key(key);
    names.push(key);
    names
        .into_iter()
        .map(|n| lock_of(&(db, n.to_vec())))
        .filter(is_election)
        .collect()
}

/// The elections known in `dbs` (-1: all).
pub fn known_in(dbs: &[i32]) -> Vec<LockId<'static>> {
    let in_dbs = |db: &i32| dbs.contains(&-1) || dbs.contains(db);
    let mut names: HashSet<Name> = observers::observed(in_dbs);
    if LENGTHS.load(Relaxed) != 0 {
        let e = elections();
        for (key, known_dbs) in &e.known {
            names.extend(
                known_dbs
                    .iter()
                    .filter(|db| in_dbs(db))
                    .map(|db| (*db, key.clone())),
            );
        }
    }
    names.iter().map(lock_of).collect()
}

/// Whether the connection of `binding`, which keeps `owner`'s hold of
/// `lock` renewed, may renew it: a hold that is not a leadership granted
/// by a campaign here always; a leadership if its connection was heard
/// from within the lease (see `lock_rules::election::heard_within_lease`:
/// Redis counts a reply written to it as heard, so a leader's session
/// connection must carry nothing else), or was granted it less than a
/// lease ago (a candidate that waited long in BLOCK said nothing
/// meanwhile). A connection the server cannot describe is renewed.
pub fn heard_from(ctx: &Context, lock: &LockId<'_>, owner: &[u8], binding: &Binding) -> bool {
    let (client, lease_ms) = (binding.client, binding.lease_ms);
    if !is_leadership(lock, owner) || ffi::now_ms().saturating_sub(binding.since_ms) < lease_ms {
        return true;
    }
    let line = ctx
        .call("CLIENT", &["LIST", "ID", &client.to_string()])
        .and_then(String::try_from)
        .unwrap_or_default();
    client_idle_seconds(&line)
        .is_none_or(|idle| lock_rules::election::heard_within_lease(idle, lease_ms))
}
