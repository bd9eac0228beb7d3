//! Callers blocked in LATCH.AWAIT, by latch: blocking them, answering them
//! all when their latch opens (its count reached zero: LATCH.COUNTDOWN, or
//! Redisson's count-down script, seen by its `incrby` event) or ends
//! without opening (`GONE`: deleted, expired, evicted, flushed, overwritten
//! with something that is not a count), their BLOCK time (one timer per
//! waiter), the server's callbacks for them (CLIENT UNBLOCK, disconnect),
//! and a timer at the expiry of a latch someone waits for, so its waiters
//! hear at once rather than when Redis's sampled expiry gets to the key.
//!
//! Answering a blocked caller writes nothing, so it is done where the event
//! is seen, the keyspace callback included; reading the key there (after an
//! `incrby` or a `set`, which just wrote it) is a read of a live key.
//!
//! Offers: [`block`], [`opened`], [`key_event`], [`flushed`],
//! [`swapped`], [`demoted`], [`waiting`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{LazyLock, Mutex, MutexGuard};

use redis_module::Context;

use crate::ffi::{self, BlockHandler, BlockedClient, Key, KeyKind, TimerHandler, TimerId};
use crate::sync;
use crate::writable::{writable, Writable};
use lock_rules::args::{Wait, MAX_DURATION_MS};
use lock_rules::error::LockError;
use lock_rules::latch::{is_open, parse_count};

/// What a LATCH.AWAIT caller is told.
#[derive(Debug)]
pub enum LatchReply {
    /// The latch opened: `0`.
    Open,
    /// Its BLOCK time ran out: nil.
    TimedOut,
    /// The latch ended without opening, or the server can no longer say.
    Failed(String),
}

type Handle = BlockedClient<LatchReply>;
type LatchName = (i32, Vec<u8>);

struct Waiter {
    latch: LatchName,
    bc: Handle,
    timer: Option<TimerId>,
}

#[derive(Default)]
struct Latches {
    /// Each latch's waiters, in the order they came.
    by_latch: HashMap<LatchName, Vec<u64>>,
    waiters: HashMap<u64, Waiter>,
    handles: HashMap<Handle, u64>,
    /// The timer at each awaited latch's expiry, and when it fires.
    expiry_timers: HashMap<LatchName, (TimerId, i64)>,
    /// Expiry timer jobs, back to their latch.
    expiry_jobs: HashMap<u64, LatchName>,
    next: u64,
}

static LATCHES: LazyLock<Mutex<Latches>> = LazyLock::new(Mutex::default);
/// Latches with waiters, as of the last change: keyspace events on a
/// server where nobody awaits a latch skip the mutex.
static AWAITED: AtomicUsize = AtomicUsize::new(0);

fn latches() -> MutexGuard<'static, Latches> {
    sync::lock(&LATCHES)
}

impl Latches {
    fn publish_count(&self) {
        AWAITED.store(self.by_latch.len(), Relaxed);
    }

    /// Takes one waiter out; its BLOCK timer, if any, to be stopped.
    fn remove(&mut self, id: u64) -> Option<Waiter> {
        let waiter = self.waiters.remove(&id)?;
        self.handles.remove(&waiter.bc);
        if let Some(ids) = self.by_latch.get_mut(&waiter.latch) {
            ids.retain(|&w| w != id);
            if ids.is_empty() {
                self.by_latch.remove(&waiter.latch);
                self.drop_expiry_timer(&waiter.latch);
            }
        }
        self.publish_count();
        Some(waiter)
    }

    /// Takes every waiter of `latch` out.
    fn take_all(&mut self, latch: &LatchName) -> Vec<Waiter> {
        let ids = self.by_latch.remove(latch).unwrap_or_default();
        self.drop_expiry_timer(latch);
        let out = ids
            .into_iter()
            .filter_map(|id| {
                let waiter = self.waiters.remove(&id)?;
                self.handles.remove(&waiter.bc);
                Some(waiter)
            })
            .collect();
        self.publish_count();
        out
    }

    fn drop_expiry_timer(&mut self, latch: &LatchName) -> Option<TimerId> {
        let (id, _) = self.expiry_timers.remove(latch)?;
        self.expiry_jobs.retain(|_, l| l != latch);
        Some(id)
    }
}

/// Blocks the caller until `latch` (in db `db`) opens or ends, or its BLOCK
/// time runs out; `expires_at` is the latch's deadline, if it has one.
pub fn block(
    ctx: &Context,
    db: i32,
    key: &[u8],
    wait: Wait,
    expires_at: Option<i64>,
) -> Result<(), LockError> {
    let bc = ffi::block_client::<Blocked>(ctx)
        .ok_or_else(|| LockError::internal("the server refused to block the client"))?;
    let latch: LatchName = (db, key.to_vec());
    let mut l = latches();
    l.next += 1;
    let id = l.next;
    let timer = match wait {
        Wait::Forever => None,
        Wait::Millis(ms) => ffi::create_timer::<BlockTimeout>(ctx, ms.min(MAX_DURATION_MS), id),
    };
    l.by_latch.entry(latch.clone()).or_default().push(id);
    l.handles.insert(bc, id);
    l.waiters.insert(
        id,
        Waiter {
            latch: latch.clone(),
            bc,
            timer,
        },
    );
    l.publish_count();
    if let Some(at) = expires_at {
        arm_expiry_timer(ctx, &mut l, latch, at);
    }
    Ok(())
}

/// A timer just past the latch's deadline, unless one fires by then.
fn arm_expiry_timer(ctx: &Context, l: &mut Latches, latch: LatchName, at: i64) {
    let fires_at = at.saturating_add(1);
    if l.expiry_timers
        .get(&latch)
        .is_some_and(|&(_, t)| t <= fires_at)
    {
        return;
    }
    l.next += 1;
    let job = l.next;
    let delay = fires_at
        .saturating_sub(ffi::now_ms())
        .clamp(0, MAX_DURATION_MS);
    let Some(id) = ffi::create_timer::<LatchExpiry>(ctx, delay, job) else {
        return;
    };
    if let Some(old) = l.drop_expiry_timer(&latch) {
        ffi::stop_timer(ctx, old);
    }
    l.expiry_timers.insert(latch.clone(), (id, fires_at));
    l.expiry_jobs.insert(job, latch);
}

/// Answers every waiter of the latch, and stops their timers.
fn answer_all(ctx: &Context, latch: &LatchName, reply: impl Fn() -> LatchReply) {
    let (waiters, expiry) = {
        let mut l = latches();
        let expiry = l.expiry_timers.get(latch).map(|&(id, _)| id);
        (l.take_all(latch), expiry)
    };
    if let Some(id) = expiry {
        ffi::stop_timer(ctx, id);
    }
    for waiter in waiters {
        if let Some(id) = waiter.timer {
            ffi::stop_timer(ctx, id);
        }
        ffi::unblock(waiter.bc, Some(reply()));
    }
}

/// The latch opened (LATCH.COUNTDOWN reached zero): its waiters hear `0`.
pub fn opened(ctx: &Context, db: i32, key: &[u8]) {
    if AWAITED.load(Relaxed) == 0 {
        return;
    }
    answer_all(ctx, &(db, key.to_vec()), || LatchReply::Open);
}

fn gone(ctx: &Context, latch: &LatchName, expired: bool) {
    let error = LockError::latch_gone(expired).to_string();
    answer_all(ctx, latch, || LatchReply::Failed(error.clone()));
}

/// A keyspace event on `key` (not one of this module's own writes).
pub fn key_event(ctx: &Context, db: i32, event: &[u8], key: &[u8]) {
    if AWAITED.load(Relaxed) == 0 {
        return;
    }
    let latch: LatchName = (db, key.to_vec());
    if !latches().by_latch.contains_key(&latch) {
        return;
    }
    match event {
        b"expired" => gone(ctx, &latch, true),
        // A TTL set on a latch someone awaits: a timer at its end.
        b"expire" => watch_expiry(ctx, latch),
        b"persist" => {}
        b"del" | b"evicted" | b"rename_from" | b"move_from" => gone(ctx, &latch, false),
        // Written in place (Redisson's count-down script DECRs, then DELs
        // at zero; a SET, a RESTORE, a renamed key landing here): what it
        // holds now decides.
        _ => recheck(ctx, &latch),
    }
}

/// Keeps a timer at the latch's deadline as it is now.
fn watch_expiry(ctx: &Context, latch: LatchName) {
    let name = ffi::string(ctx, &latch.1);
    let Some(at) = Key::open(ctx, &name, false).and_then(|key| key.expires_at()) else {
        return;
    };
    let mut l = latches();
    if l.by_latch.contains_key(&latch) {
        arm_expiry_timer(ctx, &mut l, latch, at);
    }
}

/// Looks at a latch again: open at zero or below, ended if it holds
/// something that is not a count, still closed otherwise.
fn recheck(ctx: &Context, latch: &LatchName) {
    let name = ffi::string(ctx, &latch.1);
    let count = match Key::open(ctx, &name, false) {
        Some(key) if key.kind() == KeyKind::String => parse_count(&key.string_value()).ok(),
        Some(key) if key.kind() == KeyKind::Empty => Some(0),
        None => Some(0),
        Some(_) => None,
    };
    match count {
        Some(count) if is_open(count) => answer_all(ctx, latch, || LatchReply::Open),
        Some(_) => {}
        None => gone(ctx, latch, false),
    }
}

/// FLUSHDB / FLUSHALL (`db` -1): every latch awaited there is gone.
pub fn flushed(ctx: &Context, db: i32) {
    for latch in awaited_in(|d| db == -1 || d == db) {
        gone(ctx, &latch, false);
    }
}

/// SWAPDB: the awaited latches of both databases are looked at again.
pub fn swapped(ctx: &Context, a: i32, b: i32) {
    for latch in awaited_in(|d| d == a || d == b) {
        if ffi::select_db(ctx, latch.0) {
            recheck(ctx, &latch);
        }
    }
}

/// The server became a replica: its waiters are answered as Redis answers
/// its own blocked callers then.
pub fn demoted(ctx: &Context) {
    let error = LockError::demoted().to_string();
    for latch in awaited_in(|_| true) {
        answer_all(ctx, &latch, || LatchReply::Failed(error.clone()));
    }
}

fn awaited_in(dbs: impl Fn(i32) -> bool) -> Vec<LatchName> {
    if AWAITED.load(Relaxed) == 0 {
        return Vec::new();
    }
    latches()
        .by_latch
        .keys()
        .filter(|(db, _)| dbs(*db))
        .cloned()
        .collect()
}

/// How many callers await the latch.
pub fn waiting(db: i32, key: &[u8]) -> usize {
    if AWAITED.load(Relaxed) == 0 {
        return 0;
    }
    latches()
        .by_latch
        .get(&(db, key.to_vec()))
        .map_or(0, Vec::len)
}

/// The server's side of a LATCH.AWAIT caller.
pub struct Blocked;

impl BlockHandler for Blocked {
    type Answer = LatchReply;

    fn reply(ctx: &Context, answer: Option<&LatchReply>) {
        match answer {
            Some(LatchReply::Open) => ffi::reply_integer(ctx, 0),
            Some(LatchReply::Failed(e)) => ffi::reply_error(ctx, e),
            Some(LatchReply::TimedOut) | None => ffi::reply_null(ctx),
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

    fn free(_ctx: &Context, _answer: Box<LatchReply>, _client_gone: bool) {}
}

fn leave(ctx: &Context, bc: Handle) -> bool {
    let waiter = {
        let mut l = latches();
        let Some(id) = l.handles.get(&bc).copied() else {
            return false;
        };
        l.remove(id)
    };
    if let Some(id) = waiter.as_ref().and_then(|w| w.timer) {
        ffi::stop_timer(ctx, id);
    }
    waiter.is_some()
}

/// A waiter's BLOCK time ran out.
struct BlockTimeout;

impl TimerHandler for BlockTimeout {
    fn fire(_ctx: &Context, id: u64) {
        let waiter = latches().remove(id);
        if let Some(waiter) = waiter {
            ffi::unblock(waiter.bc, Some(LatchReply::TimedOut));
        }
    }
}

/// How soon a timer that may not act now (a replica, a paused or loading
/// master) looks again.
const RETRY_MS: i64 = 10;

/// An awaited latch's deadline passed: reading it on a master expires it
/// (its `expired` event answers the waiters). A replica or a paused master
/// looks again shortly; a latch whose TTL moved gets a new timer.
struct LatchExpiry;

impl TimerHandler for LatchExpiry {
    fn fire(ctx: &Context, job: u64) {
        let latch = {
            let mut l = latches();
            let Some(latch) = l.expiry_jobs.remove(&job) else {
                return;
            };
            l.expiry_timers.remove(&latch);
            latch
        };
        if writable(ctx) != Writable::Now || !ffi::select_db(ctx, latch.0) {
            let mut l = latches();
            if l.by_latch.contains_key(&latch) {
                let retry = ffi::now_ms() + RETRY_MS;
                arm_expiry_timer(ctx, &mut l, latch, retry);
            }
            return;
        }
        let name = ffi::string(ctx, &latch.1);
        let deadline = Key::open(ctx, &name, false).and_then(|key| key.expires_at());
        if let Some(at) = deadline {
            let mut l = latches();
            if l.by_latch.contains_key(&latch) {
                arm_expiry_timer(ctx, &mut l, latch, at);
            }
        }
    }
}
