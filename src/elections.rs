//! Elections on this server (ELECT.*): the leader record kept in step with
//! the election's lock, the callers blocked in ELECT.OBSERVE, and a
//! leadership's end noticed at once and told to its leader.
//!
//! An election is a lock (its holder leads; `lock_rules::election`). What
//! this file adds around the lock's own hand-off:
//!
//! - the leader record `{key}:leader` (candidate, term, value), written in
//!   the commit that hands the lock to a waiting candidate
//!   ([`committed`], called by `handoff` for the names known here as
//!   elections), or by ELECT.CAMPAIGN for a grant at once ([`began`]);
//!   deleted when nobody leads; its expiry kept equal to the lock's, so a
//!   record never outlives its leadership, wherever it is read. Replicated
//!   as native `DEL`, `HSET`, `PEXPIREAT`.
//! - observers: ELECT.OBSERVE callers blocked until the leadership differs
//!   from the term they saw, answered from the commit, from PROCLAIM, or
//!   from the check below (keyspace events: a deleted, expired or flushed
//!   lock on a master; replicated record writes on a replica).
//! - the loss of a leadership that its leader did not give up (the lock
//!   deleted, flushed, overwritten, expired, handed on after its lease ran
//!   out): the check runs in a 0 ms timer after the command or event that
//!   ended it, once that command unbound what it released itself, and ends
//!   the leader's KEEPALIVE binding with a `gone` message on its session's
//!   channel. LOCK.FORCERELEASE already says `forced` at once.
//! - liveness: a leadership's renewal needs its connection to have been
//!   heard from within the lease ([`heard_from`]; `keepalive.rs` asks).
//!
//! Which names are elections is known from the ELECT.* commands run on this
//! server since it loaded: after a failover, a leader's ELECT.CAMPAIGN (its
//! re-attach) or any ELECT.* call on the name makes it known again; until
//! then the record still expires with the lock it was written with.
//!
//! Offers: [`note`], [`is_election`], [`committed`], [`began`],
//! [`proclaimed`], [`read_leader`], [`block_observer`], [`key_event`],
//! [`flushed`], [`swapped`], [`demoted`], [`observers`], [`heard_from`].

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::{LazyLock, Mutex, MutexGuard};

use redis_module::{Context, RedisString};

use crate::ffi::TimerId;
use crate::ffi::{self, BlockHandler, BlockedClient, Field, Key, KeyKind, Native, TimerHandler};
use crate::stats::{Stats, STATS};
use crate::store::{self, notify_own, LockKey};
use crate::waiters::Waiter;
use crate::writable::{writable, Writable};
use crate::{events, keepalive, sync};
use lock_rules::args::{Wait, MAX_DURATION_MS};
use lock_rules::election::{current_leader, holder, observer_answered, Leader};
use lock_rules::error::LockError;
use lock_rules::keepalive::ClientId;
use lock_rules::keys::{elections_of_leader_key, leader_key};
use lock_rules::lock_id::LockId;
use lock_rules::server_text::client_idle_seconds;
use lock_rules::session::LossReason;
use lock_rules::state::LockState;
use lock_rules::transition::{Transition, Verdict};

type Name = (i32, Vec<u8>);
type Handle = BlockedClient<ObserveReply>;

/// A leadership as ELECT.LEADER and ELECT.OBSERVE reply it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub leader: Leader,
    /// ms until the lease ends, -1 without one.
    pub ttl_ms: i64,
}

/// What an ELECT.OBSERVE caller is told.
#[derive(Debug)]
pub enum ObserveReply {
    /// The leadership now (`None`: nobody leads).
    Changed(Option<Seen>),
    /// Its BLOCK time ran out: nil.
    TimedOut,
    Failed(String),
}

struct Observer {
    election: Name,
    seen_term: i64,
    bc: Handle,
    timer: Option<TimerId>,
}

#[derive(Default)]
struct Elections {
    /// The names ELECT.* commands used on this server, by key, then the
    /// dbs they were used in (a lookup by the key's bytes allocates
    /// nothing: every lock's commit asks once an election exists).
    known: HashMap<Vec<u8>, Vec<i32>>,
    /// Each election's observers, in the order they came.
    observed: HashMap<Name, Vec<u64>>,
    observers: HashMap<u64, Observer>,
    handles: HashMap<Handle, u64>,
    /// Elections to look at again, and leaders whose binding to check,
    /// from the next run of the check timer.
    to_check: Vec<(Name, Option<Vec<u8>>)>,
    check_armed: bool,
    next: u64,
}

static ELECTIONS: LazyLock<Mutex<Elections>> = LazyLock::new(Mutex::default);
/// Whether any name is known as an election: the commits of other locks
/// skip the mutex.
static ANY: AtomicBool = AtomicBool::new(false);
static OBSERVERS: AtomicUsize = AtomicUsize::new(0);
static WATCHING_HASHES: AtomicBool = AtomicBool::new(false);

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

    fn publish_count(&self) {
        OBSERVERS.store(self.observers.len(), Relaxed);
    }

    fn remove(&mut self, id: u64) -> Option<Observer> {
        let observer = self.observers.remove(&id)?;
        self.handles.remove(&observer.bc);
        if let Some(ids) = self.observed.get_mut(&observer.election) {
            ids.retain(|&o| o != id);
            if ids.is_empty() {
                self.observed.remove(&observer.election);
            }
        }
        self.publish_count();
        Some(observer)
    }
}

/// `lock` is an election: an ELECT.* command names it. Its keyspace events
/// are listened to from now on.
pub fn note(ctx: &Context, lock: &LockId<'_>) {
    events::watch_for_waiters(ctx);
    let mut e = elections();
    if !e.is_known(lock.db, &lock.key) {
        e.known.entry(lock.key.to_vec()).or_default().push(lock.db);
        ANY.store(true, Relaxed);
    }
}

pub fn is_election(lock: &LockId<'_>) -> bool {
    ANY.load(Relaxed) && elections().is_known(lock.db, &lock.key)
}

/// The leader record of an election, opened for writing.
struct Record<'c> {
    name: RedisString,
    key: Key<'c>,
}

impl<'c> Record<'c> {
    fn open(ctx: &'c Context, election: &[u8]) -> Option<Self> {
        let name = ffi::string(ctx, &leader_key(election));
        let key = Key::open(ctx, &name, true)?;
        Some(Self { name, key })
    }

    fn read(&self) -> Option<Leader> {
        (self.key.kind() == KeyKind::Hash)
            .then(|| Leader::from_fields(&self.key.hash_fields()))
            .flatten()
    }

    fn exists(&self) -> bool {
        self.key.kind() != KeyKind::Empty
    }

    /// `DEL`, then `HSET` of each field, then `PEXPIREAT` of the lock's
    /// deadline: the record is rewritten whole, so no field of an earlier
    /// leader (its value) survives.
    fn write(&self, ctx: &Context, leader: &Leader, expires_at: Option<i64>) {
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

    fn expire_at(&self, ctx: &Context, at: i64) {
        if self.key.expires_at() == Some(at) || !self.exists() {
            return;
        }
        self.key.expire_at(at);
        ffi::replicate(ctx, &self.name, Native::PExpireAt { at_ms: at });
        notify_own(ctx, ffi::NOTIFY_GENERIC, c"expire", &self.name);
    }

    fn delete(&self, ctx: &Context) {
        if self.key.delete() {
            ffi::replicate(ctx, &self.name, Native::Del);
            notify_own(ctx, ffi::NOTIFY_GENERIC, c"del", &self.name);
            ffi::signal_modified(ctx, &self.name);
        }
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
    // A candidate handed the lock: a fenced grant (a campaign always is;
    // a LOCK.ACQUIRE caller without FENCE has no term, and leads nothing).
    let handed = holder.and_then(|candidate| {
        tx.wakes.iter().find_map(|wake| {
            let request = &wake.waiter.request;
            match wake.verdict {
                Verdict::Granted(term)
                    if &*request.owner == candidate && request.fence && !wake.held =>
                {
                    Some(Leader {
                        candidate: candidate.to_vec(),
                        term,
                        value: request.value.as_deref().map(<[u8]>::to_vec),
                    })
                }
                _ => None,
            }
        })
    });
    let changed = match (&handed, holder) {
        (Some(leader), _) => {
            record.write(ctx, leader, key.expires_at());
            Stats::bump(&STATS.elections_won);
            true
        }
        (None, Some(candidate)) if before.as_ref().is_some_and(|l| l.candidate == candidate) => {
            // Renewed, re-entered: the record keeps the lock's expiry.
            if let Some(at) = key.expires_at() {
                record.expire_at(ctx, at);
            }
            false
        }
        // Left free, or taken at once (ELECT.CAMPAIGN then writes the
        // record, `began`; a LOCK.ACQUIRE caller leads nothing): a record
        // naming someone else goes.
        (None, _) => {
            let existed = record.exists();
            record.delete(ctx);
            existed
        }
    };
    drop(record);
    if let Some(before) = before.filter(|l| Some(&l.candidate[..]) != holder) {
        check_soon(ctx, name_of(lock), Some(before.candidate));
    }
    if changed {
        let now = handed.map(|leader| Seen {
            ttl_ms: key
                .expires_at()
                .map_or(-1, |at| (at - ffi::now_ms()).max(0)),
            leader,
        });
        answer_observers(ctx, &name_of(lock), &now, false);
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
        return;
    }
    let new_term = before.as_ref().map(|l| l.term) != Some(leader.term);
    record.write(ctx, &leader, expires_at);
    drop(record);
    if new_term {
        Stats::bump(&STATS.elections_won);
    }
    let ttl_ms = expires_at.map_or(-1, |at| (at - ffi::now_ms()).max(0));
    answer_observers(
        ctx,
        &name_of(lock),
        &Some(Seen { leader, ttl_ms }),
        !new_term,
    );
}

/// ELECT.PROCLAIM: the leader's value changed; every observer hears.
pub fn proclaimed(ctx: &Context, lock: &LockId<'_>, lock_name: &RedisString, leader: Leader) {
    began(ctx, lock, lock_name, leader);
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

/// Blocks an ELECT.OBSERVE caller that saw `seen_term` of `lock` until the
/// leadership differs, the leader's value changes, or `wait` runs out.
pub fn block_observer(
    ctx: &Context,
    lock: &LockId<'_>,
    seen_term: i64,
    wait: Wait,
) -> Result<(), LockError> {
    if !ctx.get_flags().contains(redis_module::ContextFlags::MASTER) {
        // A replica hears of changes by the record's replicated writes.
        watch_hashes(ctx);
    }
    let bc = ffi::block_client::<Blocked>(ctx)
        .ok_or_else(|| LockError::internal("the server refused to block the client"))?;
    let mut e = elections();
    e.next += 1;
    let id = e.next;
    let timer = match wait {
        Wait::Forever => None,
        Wait::Millis(ms) => ffi::create_timer::<BlockTimeout>(ctx, ms.min(MAX_DURATION_MS), id),
    };
    let election = name_of(lock);
    e.observed.entry(election.clone()).or_default().push(id);
    e.handles.insert(bc, id);
    e.observers.insert(
        id,
        Observer {
            election,
            seen_term,
            bc,
            timer,
        },
    );
    e.publish_count();
    Ok(())
}

fn watch_hashes(ctx: &Context) {
    if WATCHING_HASHES.swap(true, Relaxed) {
        return;
    }
    if !ffi::subscribe_hash_events::<events::KeyspaceEvents>(ctx) {
        ffi::log_warning(
            ctx,
            "lock: could not subscribe to hash events; observers on a replica hear of \
             new leaders only when a key is deleted or expires",
        );
    }
}

/// Answers the observers of `election` to whom `now` differs from what they
/// saw (all of them with `all`: the leader's value changed).
fn answer_observers(ctx: &Context, election: &Name, now: &Option<Seen>, all: bool) {
    if OBSERVERS.load(Relaxed) == 0 {
        return;
    }
    let term = Leader::term_of(now.as_ref().map(|s| &s.leader));
    let answered: Vec<Observer> = {
        let mut e = elections();
        let ids: Vec<u64> = e.observed.get(election).cloned().unwrap_or_default();
        ids.into_iter()
            .filter(|id| {
                e.observers
                    .get(id)
                    .is_some_and(|o| all || observer_answered(term, o.seen_term))
            })
            .collect::<Vec<_>>()
            .into_iter()
            .filter_map(|id| e.remove(id))
            .collect()
    };
    for observer in answered {
        if let Some(timer) = observer.timer {
            ffi::stop_timer(ctx, timer);
        }
        ffi::unblock(observer.bc, Some(ObserveReply::Changed(now.clone())));
    }
}

/// Looks at `election` again from the check timer, and at whether
/// `leader` (who led it) still holds it.
fn check_soon(ctx: &Context, election: Name, leader: Option<Vec<u8>>) {
    let arm = {
        let mut e = elections();
        e.to_check.push((election, leader));
        !std::mem::replace(&mut e.check_armed, true)
    };
    if arm && ffi::create_timer::<Check>(ctx, 0, 0).is_none() {
        elections().check_armed = false;
    }
}

/// The check timer: each election noted is read again. On a master that
/// may write, a leader noted that no longer holds it loses its binding (and
/// its session hears `gone`), and a record nobody leads by is deleted;
/// anywhere, observers hear of a change.
struct Check;

impl TimerHandler for Check {
    fn fire(ctx: &Context, _: u64) {
        let work = {
            let mut e = elections();
            e.check_armed = false;
            std::mem::take(&mut e.to_check)
        };
        let writes = writable(ctx) == Writable::Now;
        let mut seen = HashSet::new();
        for (election, leader) in work {
            if !ffi::select_db(ctx, election.0) {
                continue;
            }
            if let Some(leader) = leader {
                if writes {
                    lost_unless_held(ctx, &election, &leader);
                }
            }
            if seen.insert(election.clone()) {
                recheck(ctx, &election, writes);
            }
        }
    }
}

/// Ends the binding of `leader`, who led `election`, unless it holds it.
fn lost_unless_held(ctx: &Context, election: &Name, leader: &[u8]) {
    let lock = lock_of(election);
    if keepalive::client_of(&lock, leader).is_none() {
        return;
    }
    let name = ffi::string(ctx, &election.1);
    let holds = store::read_only(ctx, &name)
        .ok()
        .flatten()
        .is_some_and(|(state, _)| state.held_by(leader));
    if !holds && keepalive::end(ctx, &lock, leader, LossReason::Gone) {
        Stats::bump(&STATS.elections_lost);
    }
}

fn recheck(ctx: &Context, election: &Name, writes: bool) {
    let name = ffi::string(ctx, &election.1);
    let Ok(now) = read_leader(ctx, &name) else {
        return;
    };
    if writes && now.is_none() {
        // Nobody leads by the record (deleted lock, flushed, expired,
        // taken outside ELECT.*): it goes.
        if let Some(record) = Record::open(ctx, &election.1) {
            record.delete(ctx);
        }
    }
    answer_observers(ctx, election, &now, false);
}

/// A keyspace event on `key` (not one of this module's own writes): the
/// election it is, or whose record it is, is looked at again.
pub fn key_event(ctx: &Context, db: i32, key: &[u8]) {
    if !ANY.load(Relaxed) {
        return;
    }
    let names: Vec<Name> = {
        let e = elections();
        let mut names: Vec<&[u8]> = elections_of_leader_key(key);
        names.push(key);
        names
            .into_iter()
            .filter(|n| e.is_known(db, n))
            .map(|n| (db, n.to_vec()))
            .collect()
    };
    for name in names {
        check_all_soon(ctx, name);
    }
}

/// Looks at `election` again, and at every owner bound to it: the record
/// that named its leader may be gone with the lock (it expires with it).
fn check_all_soon(ctx: &Context, election: Name) {
    for owner in keepalive::owners_of(&lock_of(&election)) {
        check_soon(ctx, election.clone(), Some(owner));
    }
    check_soon(ctx, election, None);
}

/// FLUSHDB / FLUSHALL (`db` -1), SWAPDB: the elections there are looked
/// at again.
pub fn flushed(ctx: &Context, dbs: &[i32]) {
    if !ANY.load(Relaxed) {
        return;
    }
    let names: Vec<Name> = elections()
        .known
        .iter()
        .flat_map(|(key, in_dbs)| in_dbs.iter().map(move |db| (*db, key.clone())))
        .filter(|(db, _)| dbs.contains(&-1) || dbs.contains(db))
        .collect();
    for name in names {
        check_all_soon(ctx, name);
    }
}

/// The server became a replica: observers are answered as Redis answers
/// its own blocked callers then.
pub fn demoted(ctx: &Context) {
    if OBSERVERS.load(Relaxed) == 0 {
        return;
    }
    let error = LockError::demoted().to_string();
    let all: Vec<Observer> = {
        let mut e = elections();
        let ids: Vec<u64> = e.observers.keys().copied().collect();
        ids.into_iter().filter_map(|id| e.remove(id)).collect()
    };
    for observer in all {
        if let Some(timer) = observer.timer {
            ffi::stop_timer(ctx, timer);
        }
        ffi::unblock(observer.bc, Some(ObserveReply::Failed(error.clone())));
    }
}

/// How many callers are blocked in ELECT.OBSERVE.
pub fn observers() -> usize {
    OBSERVERS.load(Relaxed)
}

/// Whether the connection `client`, which keeps a leadership of `lock`
/// renewed with `lease_ms` since `since_ms`, was heard from within that
/// lease (see `lock_rules::election::heard_within_lease`), or was granted
/// it less than a lease ago (a candidate that waited long in BLOCK said
/// nothing meanwhile). Locks that are not elections, and a connection the
/// server cannot describe, are renewed.
pub fn heard_from(
    ctx: &Context,
    lock: &LockId<'_>,
    client: ClientId,
    lease_ms: i64,
    since_ms: i64,
) -> bool {
    if !is_election(lock) || ffi::now_ms().saturating_sub(since_ms) < lease_ms {
        return true;
    }
    let line = ctx
        .call("CLIENT", &["LIST", "ID", &client.to_string()])
        .and_then(String::try_from)
        .unwrap_or_default();
    client_idle_seconds(&line)
        .is_none_or(|idle| lock_rules::election::heard_within_lease(idle, lease_ms))
}

/// The server's side of an ELECT.OBSERVE caller.
pub struct Blocked;

impl BlockHandler for Blocked {
    type Answer = ObserveReply;

    fn reply(ctx: &Context, answer: Option<&ObserveReply>) {
        match answer {
            Some(ObserveReply::Changed(seen)) => ffi::reply_map(ctx, &reply_fields(seen)),
            Some(ObserveReply::Failed(e)) => ffi::reply_error(ctx, e),
            Some(ObserveReply::TimedOut) | None => ffi::reply_null(ctx),
        }
    }

    fn timeout(ctx: &Context, bc: Handle) {
        // CLIENT UNBLOCK <id> [TIMEOUT].
        if leave(ctx, bc) {
            ffi::reply_null(ctx);
            ffi::unblock(bc, None);
        }
    }

    fn disconnect(ctx: &Context, bc: Handle) {
        if leave(ctx, bc) {
            ffi::unblock(bc, None);
        }
    }

    fn free(_ctx: &Context, _answer: Box<ObserveReply>, _client_gone: bool) {}
}

fn leave(ctx: &Context, bc: Handle) -> bool {
    let observer = {
        let mut e = elections();
        let Some(id) = e.handles.get(&bc).copied() else {
            return false;
        };
        e.remove(id)
    };
    if let Some(timer) = observer.as_ref().and_then(|o| o.timer) {
        ffi::stop_timer(ctx, timer);
    }
    observer.is_some()
}

/// An observer's BLOCK time ran out.
struct BlockTimeout;

impl TimerHandler for BlockTimeout {
    fn fire(_ctx: &Context, id: u64) {
        let observer = elections().remove(id);
        if let Some(observer) = observer {
            ffi::unblock(observer.bc, Some(ObserveReply::TimedOut));
        }
    }
}
