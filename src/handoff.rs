//! Hand-off: starting and committing a transition (writes, replication, then
//! answers to the waiters it woke), and every way a lock can end outside a
//! LOCK.* command: lease timers, keyspace events (DEL, expiry, eviction,
//! RENAME, a Redisson release...), FLUSHDB/FLUSHALL/SWAPDB, and grants whose
//! answer never reached the waiter.
//!
//! Outside a command nothing is written on the spot. Events only note the key
//! and arm a 0 ms timer (writing inside a keyspace callback would reach
//! replicas before the DEL that caused it); timers write only on a master
//! that is not loading and not paused.

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{LazyLock, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use redis_module::{Context, ContextFlags, RedisString};

use crate::alarm;
use crate::ffi::{
    self, BlockHandler, BlockedClient, KeyspaceHandler, ServerEventHandler, TimerHandler,
};
use crate::info::{Stats, STATS};
use crate::replication::{self, Replication};
use crate::rules::args::MAX_DURATION_MS;
use crate::rules::error::LockError;
use crate::rules::ids::IdMap;
use crate::rules::lock::{Answer, LockState, Owner, Request, TokenValue, Transition, Wake};
use crate::rules::multilock::{access, Access};
use crate::rules::rwlock::Kind;
use crate::rules::server::has_unsent_output;
use crate::store::{self, LockKey, Placement};
use crate::waiters::{
    anyone_waits, registry, GroupId, LeaseTimer, LockId, Registry, Released, WaitTimer, Waiter,
};

/// What a blocked caller is finally told.
#[derive(Debug)]
pub enum Outcome {
    Granted(Grant, i64),
    /// A multi-lock caller's keys, with a reply per key.
    GrantedAll(Vec<Grant>, Vec<i64>),
    Failed(String),
    TimedOut,
}

/// A hold handed to a waiter, to be released if the waiter never heard.
#[derive(Debug)]
pub struct Grant {
    lock: LockId<'static>,
    owner: Owner,
    /// Which hold of a read-write lock; `None` for an exclusive lock.
    kind: Option<Kind>,
}

/// Delay before retrying deferred writes while the server refuses them
/// (clients paused, loading).
const RETRY_MS: i64 = 20;

/// A poisoned mutex here only means a panic was caught while it was held;
/// the data behind these is always left whole.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

// ---------------------------------------------------------------------------
// Starting and committing a transition

/// Who starts a transition.
#[derive(Clone, Copy)]
pub enum Origin<'c> {
    /// A LOCK.* command, with the caller's owner argument when it has one.
    Command {
        owner: Option<&'c RedisString>,
        fences: bool,
    },
    /// A timer or an event.
    Event,
}

/// Opens the lock in the context's db and starts a transition from what it
/// holds, with the fencing counter loaded if a grant may need it.
pub fn begin<'c>(
    ctx: &'c Context,
    name: &'c RedisString,
    lock: &LockId<'_>,
    origin: Origin<'c>,
) -> Result<(LockKey<'c>, Transition<Waiter>), LockError> {
    let (owner, fences, replication) = match origin {
        Origin::Command { owner, fences } => {
            let flags = ctx.get_flags();
            // Lock writes on a replica that accepts writes would be
            // overwritten by its master, and its timers never act: refuse
            // them, as a read-only one does.
            if !flags.contains(ContextFlags::MASTER) {
                return Err(LockError::replica());
            }
            (owner, fences, Replication::for_command(ctx, flags))
        }
        Origin::Event => (None, false, Replication::Native),
    };
    let key = LockKey::open(ctx, name, owner, replication)?;
    let state = key.read(ctx)?;
    let token = load_token(ctx, lock, fences);
    Ok((key, Transition::new(state, ffi::now_ms(), token)))
}

/// The fencing counter, read only when a grant may need it: the caller
/// asked for FENCE, or a queued waiter did.
fn load_token(ctx: &Context, lock: &LockId<'_>, caller_fences: bool) -> TokenValue {
    let waiters_fence = anyone_waits() && registry().is_ok_and(|r| r.fenced_waiters(lock) > 0);
    (caller_fences || waiters_fence).then(|| store::read_token(ctx, &lock.key))
}

/// Applies `tx` to `key`: writes and their replication first, then the
/// answers to woken waiters (Redis sends them after this execution unit, so
/// the new owner is already written and replicated when it hears), then the
/// lease timer if waiters remain.
pub fn commit(ctx: &Context, lock: &LockId<'_>, key: &LockKey, tx: Transition<Waiter>) {
    commit_only(ctx, lock, key, tx);
    serve_group_at(ctx, lock);
}

/// [`commit`] without serving a multi-lock caller now first in line: a
/// command (or grant) that holds other keys' transitions still uncommitted
/// commits them all first, then calls [`serve_group_at`] for each, since
/// serving a group opens and writes keys of its own.
pub fn commit_only(ctx: &Context, lock: &LockId<'_>, key: &LockKey, tx: Transition<Waiter>) {
    key.apply(ctx, &tx.writes);
    STATS.add(&tx.tally);
    let held_after = *tx.state() != LockState::Free;
    let next_end = tx.next_end();
    deliver(ctx, lock, tx.wakes);
    if held_after {
        ensure_lease_timer(ctx, lock, || earliest(next_end, key.expires_at()));
    }
}

/// For a lock with a multi-lock caller first in line (left free, or handed
/// to that caller's own owner): it may now have all its keys.
pub fn serve_group_at(ctx: &Context, lock: &LockId<'_>) {
    if let Some(group) = group_at_head(lock) {
        serve_group(ctx, group);
    }
}

fn group_at_head(lock: &LockId<'_>) -> Option<GroupId> {
    if !anyone_waits() {
        return None;
    }
    registry().ok()?.group_at_head(lock)
}

/// Grants a multi-lock caller all its keys, in one step, if it is first in
/// line on each and each is free or already its own; otherwise leaves it
/// waiting.
fn serve_group(ctx: &Context, group: GroupId) {
    let Some((request, entries)) = registry().ok().and_then(|r| r.group(group)) else {
        return;
    };
    let placement = Placement::read(ctx);
    if entries.iter().any(|(lock, _)| !placement.serves(&lock.key)) {
        return fail_group(ctx, group, LockError::slot_not_served());
    }
    let names: Vec<RedisString> = entries
        .iter()
        .map(|(lock, _)| ffi::string(ctx, &lock.key))
        .collect();
    let mut opened = Vec::with_capacity(entries.len());
    for ((lock, first), name) in entries.iter().zip(&names) {
        match begin(ctx, name, lock, Origin::Event) {
            Ok((key, tx)) => opened.push((lock, *first, key, tx)),
            // Another type now: waiting on would never end.
            Err(e) => return fail_group(ctx, group, e),
        }
    }
    let mut ready = true;
    for (_, first, _, tx) in &opened {
        match access(tx.state(), &request.owner, *first) {
            Ok(Access::Free | Access::Reentry) => {}
            Ok(Access::Busy) => ready = false,
            Err(e) => return fail_group(ctx, group, e),
        }
    }
    if !ready {
        return;
    }
    if let Some(e) = opened
        .iter()
        .find_map(|(_, _, _, tx)| tx.check_take(&request).err())
    {
        return fail_group(ctx, group, e);
    }
    let Some((waiter, released)) = registry().ok().and_then(|mut r| r.take_group(group)) else {
        return;
    };
    stop_timers(ctx, released);
    let mut grants = Vec::with_capacity(opened.len());
    let mut replies = Vec::with_capacity(opened.len());
    for (lock, _, key, mut tx) in opened {
        match tx.take(&request) {
            Ok(reply) => replies.push(reply),
            Err(e) => {
                ffi::log_warning(
                    ctx,
                    &format!("lock: multi-lock grant failed after its checks: {e}"),
                );
                replies.push(0);
            }
        }
        tx.tally.handed_off += 1;
        grants.push(grant_of(lock, &request));
        commit_only(ctx, lock, &key, tx);
    }
    ffi::unblock::<Blocked>(waiter.bc, Some(Outcome::GrantedAll(grants, replies)));
    // The next caller in line on these keys may be a multi-lock caller of
    // the same owner.
    for (lock, _) in &entries {
        serve_group_at(ctx, lock);
    }
}

fn grant_of(lock: &LockId<'_>, request: &Request) -> Grant {
    Grant {
        lock: lock.to_owned(),
        kind: request.kind.read_write(),
        owner: request.owner.clone(),
    }
}

/// Answers a multi-lock caller with an error and takes it out of every
/// queue.
fn fail_group(ctx: &Context, group: GroupId, error: LockError) {
    let Some((waiter, released)) = registry().ok().and_then(|mut r| r.remove(group)) else {
        return;
    };
    stop_timers(ctx, released);
    ffi::unblock::<Blocked>(waiter.bc, Some(Outcome::Failed(error.to_string())));
}

/// When a held lock must be looked at again for its waiters: the key's
/// deadline, or a read-write lock's earliest reader lease end before it.
pub fn earliest(next_end: Option<i64>, expires_at: Option<i64>) -> Option<i64> {
    next_end.into_iter().chain(expires_at).min()
}

fn deliver(ctx: &Context, lock: &LockId<'_>, wakes: Vec<Wake<Waiter>>) {
    if wakes.is_empty() {
        return;
    }
    match registry() {
        Ok(mut reg) => {
            let released = reg.forget_woken(lock, &wakes);
            stop_timers(ctx, released);
        }
        Err(e) => ffi::log_warning(ctx, &format!("lock: waiter bookkeeping skipped: {e}")),
    }
    for wake in wakes {
        let outcome = match wake.answer {
            Answer::Granted(reply) => Outcome::Granted(grant_of(lock, &wake.waiter.request), reply),
            Answer::Failed(e) => Outcome::Failed(e.to_string()),
        };
        ffi::unblock::<Blocked>(wake.waiter.bc, Some(outcome));
    }
}

/// Stops the timers a queue change made useless, and looks again at the
/// keys where a multi-lock caller left the head of the queue.
fn stop_timers(ctx: &Context, released: Released) {
    for id in released.lease_timers {
        ffi::stop_timer(ctx, id);
    }
    stop(ctx, released.wait_timer);
    for lock in released.resettle {
        defer_key(ctx, lock);
    }
}

fn stop(ctx: &Context, timer: Option<ffi::TimerId>) {
    if let Some(id) = timer {
        ffi::stop_timer(ctx, id);
    }
}

/// Makes sure a lock with waiters has a timer at (or before) its lease
/// deadline. A timer that fires early finds the lock still held and is
/// re-armed; so a renewal that extends the lease costs nothing here. The
/// TTL is only read when someone waits, which most commands skip.
pub fn ensure_lease_timer(
    ctx: &Context,
    lock: &LockId<'_>,
    lease_end: impl FnOnce() -> Option<i64>,
) {
    if !anyone_waits() {
        return;
    }
    let Ok(mut reg) = registry() else {
        return;
    };
    if reg.queue_len(lock) == 0 {
        return;
    }
    let Some(deadline) = lease_end() else {
        return;
    };
    let now = ffi::now_ms();
    let ttl = deadline.saturating_sub(now).max(0);
    // Redis expires a key once the clock is past its deadline millisecond,
    // and not before: a lease lasts at least what its holder asked for from
    // the moment it sent the request (the deadline is the current
    // millisecond, rounded down, plus the lease). So aim 1 ms past the
    // deadline. A TTL set by hand can be far longer than the server's timer
    // arithmetic allows: such a timer fires early and is re-armed.
    let delay = ttl.saturating_add(1).min(MAX_DURATION_MS);
    let fires_at = now + delay;
    if reg
        .lease_timer(lock)
        .is_some_and(|t| t.fires_at <= fires_at)
    {
        return;
    }
    let job = reg.next_serial();
    let Some(id) = ffi::create_timer::<LeaseExpiry>(ctx, delay, job) else {
        return;
    };
    if let Some(old) = reg.set_lease_timer(lock, LeaseTimer { id, job, fires_at }) {
        ffi::stop_timer(ctx, old.id);
    }
    // The timer above is the fallback; the alarm is on time.
    alarm::set(deadline, job);
}

// ---------------------------------------------------------------------------
// Settling a lock outside a command

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Writable {
    Now,
    Later,
    Never,
}

fn writable(ctx: &Context) -> Writable {
    let flags = ctx.get_flags();
    if !flags.contains(ContextFlags::MASTER) {
        Writable::Never
    } else if flags.contains(ContextFlags::LOADING) || ffi::avoid_replica_traffic() {
        Writable::Later
    } else {
        Writable::Now
    }
}

/// Re-reads a lock that has waiters and hands it on if it is free. In a
/// cluster a timer may only write keys of slots this node serves (commands
/// are routed by the server, timers are not).
fn settle(ctx: &Context, placement: &Placement, lock: &LockId<'_>) {
    if !registry().is_ok_and(|r| r.queue_len(lock) > 0) || !ffi::select_db(ctx, lock.db) {
        return;
    }
    if !placement.serves(&lock.key) {
        return reject_all(ctx, lock, &LockError::slot_not_served());
    }
    let name = ffi::string(ctx, &lock.key);
    let (key, mut tx) = match begin(ctx, &name, lock, Origin::Event) {
        Ok(started) => started,
        // The key now holds another type: waiting on would never end.
        Err(e) => return reject_all(ctx, lock, &e),
    };
    match registry() {
        Ok(mut reg) => reg.with_queue(lock, |queue| tx.settle(queue)),
        Err(e) => return ffi::log_warning(ctx, &format!("lock: {e}")),
    }
    commit(ctx, lock, &key, tx);
}

fn reject_all(ctx: &Context, lock: &LockId<'_>, error: &LockError) {
    let mut tx = Transition::new(LockState::Free, ffi::now_ms(), None);
    if let Ok(mut reg) = registry() {
        reg.with_queue(lock, |queue| tx.reject_all(queue, error));
    }
    deliver(ctx, lock, tx.wakes);
}

/// Releases the hold of a waiter that never got its answer, handing the
/// lock on.
fn release_lost_grant(ctx: &Context, placement: &Placement, grant: &Grant) {
    let lock = &grant.lock;
    if !ffi::select_db(ctx, lock.db) || !placement.serves(&lock.key) {
        return;
    }
    let name = ffi::string(ctx, &lock.key);
    let Ok((key, mut tx)) = begin(ctx, &name, lock, Origin::Event) else {
        return;
    };
    let released = match registry() {
        Ok(mut reg) => reg.with_queue(lock, |queue| tx.release(queue, &grant.owner, grant.kind)),
        Err(_) => return,
    };
    // NOTOWNER: the lease ran out or someone removed it already.
    if released.is_ok() {
        Stats::bump(&STATS.lost_grants_released);
        commit(ctx, lock, &key, tx);
    }
}

// ---------------------------------------------------------------------------
// Deferred work and its 0 ms timer

#[derive(Default)]
struct Deferred {
    keys: HashSet<LockId<'static>>,
    lost_grants: Vec<Grant>,
    armed: bool,
}

static DEFERRED: LazyLock<Mutex<Deferred>> = LazyLock::new(Mutex::default);

fn defer(ctx: &Context, add: impl FnOnce(&mut Deferred)) {
    let mut deferred = lock(&DEFERRED);
    add(&mut deferred);
    if !deferred.armed {
        deferred.armed = ffi::create_timer::<Drain>(ctx, 0, 0).is_some();
        ffi::wake_event_loop();
    }
}

fn defer_key(ctx: &Context, lock: LockId<'static>) {
    defer(ctx, |d| {
        d.keys.insert(lock);
    });
}

struct Drain;

impl TimerHandler for Drain {
    fn fire(ctx: &Context, _: u64) {
        let work = {
            let mut deferred = lock(&DEFERRED);
            deferred.armed = false;
            match writable(ctx) {
                // A replica has no waiters (they are disconnected on demotion).
                Writable::Never => {
                    *deferred = Deferred::default();
                    return;
                }
                Writable::Later => {
                    deferred.armed = ffi::create_timer::<Drain>(ctx, RETRY_MS, 0).is_some();
                    return;
                }
                Writable::Now => std::mem::take(&mut *deferred),
            }
        };
        let placement = Placement::read(ctx);
        for lock in &work.keys {
            settle(ctx, &placement, lock);
        }
        for grant in &work.lost_grants {
            release_lost_grant(ctx, &placement, grant);
        }
    }
}

pub struct LeaseExpiry;

impl TimerHandler for LeaseExpiry {
    fn fire(ctx: &Context, job: u64) {
        let Some(lock) = registry().ok().and_then(|mut r| r.take_lease_job(job)) else {
            return;
        };
        match writable(ctx) {
            Writable::Never => {}
            Writable::Later => defer_key(ctx, lock),
            Writable::Now => settle(ctx, &Placement::read(ctx), &lock),
        }
    }
}

// ---------------------------------------------------------------------------
// Blocked callers

pub struct Blocked;

impl BlockHandler for Blocked {
    type Answer = Outcome;

    fn reply(ctx: &Context, answer: Option<&Outcome>) {
        match answer {
            Some(Outcome::Granted(grant, reply)) => {
                remember_answered(ctx, std::slice::from_ref(grant));
                ffi::reply_integer(ctx, *reply);
            }
            Some(Outcome::GrantedAll(grants, replies)) => {
                remember_answered(ctx, grants);
                ffi::reply_integers(ctx, replies);
            }
            Some(Outcome::Failed(e)) => ffi::reply_error(ctx, e),
            Some(Outcome::TimedOut) | None => ffi::reply_null(ctx),
        }
    }

    fn timeout(ctx: &Context, bc: BlockedClient) {
        // CLIENT UNBLOCK <id> [TIMEOUT]. Already answered if not queued.
        if leave_queue(ctx, bc) {
            Stats::bump(&STATS.wait_timeouts);
            ffi::reply_null(ctx);
            ffi::unblock::<Blocked>(bc, None);
        }
    }

    fn disconnect(ctx: &Context, bc: BlockedClient) {
        // Also CLIENT UNBLOCK <id> ERROR. Only a queued waiter is unblocked
        // here: one already granted was unblocked once and must not be again.
        if leave_queue(ctx, bc) {
            Stats::bump(&STATS.waiters_disconnected);
            ffi::unblock::<Blocked>(bc, None);
        }
    }

    fn free(ctx: &Context, outcome: Box<Outcome>, client_gone: bool) {
        match (client_gone, *outcome) {
            (true, Outcome::Granted(grant, _)) => defer(ctx, |d| d.lost_grants.push(grant)),
            (true, Outcome::GrantedAll(grants, _)) => defer(ctx, |d| d.lost_grants.extend(grants)),
            _ => {}
        }
    }
}

/// Grants answered in the server's before-sleep step, by client id, until
/// the event loop next wakes up. In between the server writes pending
/// replies and frees the clients it marked to close. A waiter freed there
/// with output still unsent (its connection failed, or it was already
/// closing) never got its answer, so its grant is released. A waiter freed
/// with everything sent (a pipelined QUIT) got it, and keeps the lock.
static ANSWERED: LazyLock<Mutex<IdMap<u64, Vec<Grant>>>> = LazyLock::new(Mutex::default);
static ANY_ANSWERED: AtomicBool = AtomicBool::new(false);

fn remember_answered(ctx: &Context, grants: &[Grant]) {
    let grants = grants
        .iter()
        .map(|grant| Grant {
            lock: grant.lock.clone(),
            owner: grant.owner.clone(),
            kind: grant.kind,
        })
        .collect();
    lock(&ANSWERED).insert(ffi::client_id(ctx), grants);
    ANY_ANSWERED.store(true, Relaxed);
}

fn leave_queue(ctx: &Context, bc: BlockedClient) -> bool {
    let Ok(mut reg) = registry() else {
        return false;
    };
    let Some((_, released)) = reg.waiter_of(bc).and_then(|id| reg.remove(id)) else {
        return false;
    };
    drop(reg);
    stop_timers(ctx, released);
    true
}

/// Makes sure the wait timer fires by the earliest BLOCK deadline.
pub fn arm_wait_timer(ctx: &Context, reg: &mut Registry) {
    let Some(next) = reg.next_deadline() else {
        return;
    };
    if reg.wait_timer.is_some_and(|t| t.fires_at <= next) {
        return;
    }
    let now = Instant::now();
    // Whole milliseconds, rounded up: a timer never fires before the
    // deadline it was armed for.
    let delay_ms = next
        .saturating_duration_since(now)
        .as_micros()
        .div_ceil(1000)
        .min(MAX_DURATION_MS as u128) as i64;
    let Some(id) = ffi::create_timer::<WaitTimeout>(ctx, delay_ms, 0) else {
        return;
    };
    let fires_at = now + Duration::from_millis(delay_ms as u64);
    if let Some(old) = reg.wait_timer.replace(WaitTimer { id, fires_at }) {
        ffi::stop_timer(ctx, old.id);
    }
}

/// Fires at the earliest BLOCK deadline: answers nil to every waiter whose
/// time is over, then re-arms for the next one.
pub struct WaitTimeout;

impl TimerHandler for WaitTimeout {
    fn fire(ctx: &Context, _: u64) {
        let due = match registry() {
            Ok(mut reg) => {
                reg.wait_timer = None;
                reg.remove_due(Instant::now())
            }
            Err(_) => return,
        };
        for (waiter, released) in due {
            stop_timers(ctx, released);
            Stats::bump(&STATS.wait_timeouts);
            ffi::unblock::<Blocked>(waiter.bc, Some(Outcome::TimedOut));
        }
        if let Ok(mut reg) = registry() {
            arm_wait_timer(ctx, &mut reg);
        }
    }
}

// ---------------------------------------------------------------------------
// Events that may end a lock someone waits for

/// Keyspace notifications. Writing here is unsafe (see the module notes):
/// a key someone waits for is only noted for the 0 ms drain.
pub struct KeyspaceEvents;

impl KeyspaceHandler for KeyspaceEvents {
    fn event(ctx: &Context, event: &[u8], key: &[u8]) {
        if store::is_own_notification() {
            return;
        }
        let db = ffi::selected_db(ctx);
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
        defer_key(ctx, lock);
    }
}

/// Set once the module listens to the events that only matter to waiters.
static WATCHING: AtomicBool = AtomicBool::new(false);

/// Starts listening, at the first wait, to keyspace events that can end a
/// lock, client disconnections and event-loop wake-ups. Until a caller has
/// waited, no lock can need them, and the rest of Redis pays nothing for
/// them; Redis offers no way to stop listening to keyspace events later.
pub fn watch_for_waiters(ctx: &Context) {
    if WATCHING.swap(true, Relaxed) {
        return;
    }
    if !ffi::subscribe_keyspace_events::<KeyspaceEvents>(ctx)
        || !ffi::subscribe_waiter_events::<ServerEvents>(ctx)
    {
        ffi::log_warning(
            ctx,
            "lock: could not subscribe to keyspace and client events; \
             waiters are served at lease deadlines only",
        );
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
            reject_all(ctx, lock, &LockError::demoted());
        }
    }

    fn loading_ended(ctx: &Context) {
        replication::forget_listeners();
        replication::note_load(ctx);
    }

    fn flushed(ctx: &Context, db: i32) {
        defer_locks_in(ctx, &[db]);
    }

    fn swapped(ctx: &Context, a: i32, b: i32) {
        defer_locks_in(ctx, &[a, b]);
    }

    fn client_gone(ctx: &Context, client_id: u64) {
        if !ANY_ANSWERED.load(Relaxed) {
            return;
        }
        let Some(grants) = lock(&ANSWERED).remove(&client_id) else {
            return;
        };
        // The client is still whole while this event runs.
        let line = ctx
            .call("CLIENT", &["LIST", "ID", &client_id.to_string()])
            .and_then(String::try_from)
            .unwrap_or_default();
        if has_unsent_output(&line) {
            defer(ctx, |d| d.lost_grants.extend(grants));
        }
    }

    fn after_sleep(_ctx: &Context) {
        if ANY_ANSWERED.swap(false, Relaxed) {
            lock(&ANSWERED).clear();
        }
    }
}

fn defer_locks_in(ctx: &Context, dbs: &[i32]) {
    let locks: Vec<LockId<'static>> = match registry() {
        Ok(reg) => dbs.iter().flat_map(|db| reg.locks_in(*db)).collect(),
        Err(_) => return,
    };
    for lock in locks {
        defer_key(ctx, lock);
    }
}
