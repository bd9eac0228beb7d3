//! Callers blocked in LATCH.AWAIT, by latch (a `waitlist.rs` list): blocking them, answering them
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
use crate::waitlist::{self, Name, Waitlist};
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
type LatchName = Name;

/// The callers awaiting each latch, in the order they came.
static WAITING: LazyLock<Mutex<Waitlist<LatchReply, ()>>> = LazyLock::new(Mutex::default);
/// Callers awaiting a latch, as of the last change: keyspace events on a
/// server where nobody awaits a latch skip the mutex.
static AWAITED: AtomicUsize = AtomicUsize::new(0);

fn awaiting() -> MutexGuard<'static, Waitlist<LatchReply, ()>> {
    sync::lock(&WAITING)
}

fn publish_count() {
    AWAITED.store(awaiting().len(), Relaxed);
}

/// The timer at each awaited latch's expiry.
#[derive(Default)]
struct ExpiryTimers {
    /// Each latch's timer, and when it fires.
    by_latch: HashMap<LatchName, (TimerId, i64)>,
    /// Timer jobs, back to their latch.
    jobs: HashMap<u64, LatchName>,
    next: u64,
}

static EXPIRY: LazyLock<Mutex<ExpiryTimers>> = LazyLock::new(Mutex::default);

fn expiry() -> MutexGuard<'static, ExpiryTimers> {
    sync::lock(&EXPIRY)
}

impl ExpiryTimers {
    fn drop_timer(&mut self, latch: &LatchName) -> Option<TimerId> {
        let (id, _) = self.by_latch.remove(latch)?;
        self.jobs.retain(|_, l| l != latch);
        Some(id)
    }
}

/// Whether anyone awaits `latch`.
fn awaited(latch: &LatchName) -> bool {
    awaiting().waiting_on(latch) > 0
}

/// Stops the expiry timer of a latch nobody awaits any more.
fn forget_expiry(ctx: &Context, latch: &LatchName) {
    if let Some(id) = expiry().drop_timer(latch) {
        ffi::stop_timer(ctx, id);
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
    let latch: LatchName = (db, key.to_vec());
    waitlist::block::<Blocked, BlockTimeout, _>(ctx, &WAITING, latch.clone(), wait, ())?;
    publish_count();
    if let Some(at) = expires_at {
        arm_expiry_timer(ctx, latch, at);
    }
    Ok(())
}

/// A timer just past the latch's deadline, unless one fires by then.
fn arm_expiry_timer(ctx: &Context, latch: LatchName, at: i64) {
    let fires_at = at.saturating_add(1);
    let mut e = expiry();
    if e.by_latch.get(&latch).is_some_and(|&(_, t)| t <= fires_at) {
        return;
    }
    e.next += 1;
    let job = e.next;
    let delay = fires_at
        .saturating_sub(ffi::now_ms())
        .clamp(0, MAX_DURATION_MS);
    let Some(id) = ffi::create_timer::<LatchExpiry>(ctx, delay, job) else {
        return;
    };
    if let Some(old) = e.drop_timer(&latch) {
        ffi::stop_timer(ctx, old);
    }
    e.by_latch.insert(latch.clone(), (id, fires_at));
    e.jobs.insert(job, latch);
}

/// Answers every waiter of the latch, and stops their timers.
fn answer_all(ctx: &Context, latch: &LatchName, reply: impl Fn() -> LatchReply) {
    let answered = awaiting().take(latch, |_| true);
    publish_count();
    forget_expiry(ctx, latch);
    waitlist::answer(ctx, answered, reply);
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
    if !awaited(&latch) {
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
    if awaited(&latch) {
        arm_expiry_timer(ctx, latch, at);
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
    awaiting()
        .names()
        .filter(|(db, _)| dbs(*db))
        .cloned()
        .collect()
}

/// How many callers await the latch.
pub fn waiting(db: i32, key: &[u8]) -> usize {
    if AWAITED.load(Relaxed) == 0 {
        return 0;
    }
    awaiting().waiting_on(&(db, key.to_vec()))
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
    let Some((waiter, last)) = waitlist::leave(ctx, &WAITING, bc) else {
        return false;
    };
    publish_count();
    if last {
        forget_expiry(ctx, &waiter.name);
    }
    true
}

/// A waiter's BLOCK time ran out.
struct BlockTimeout;

impl TimerHandler for BlockTimeout {
    fn fire(ctx: &Context, id: u64) {
        if let Some((latch, last)) = waitlist::timed_out(&WAITING, id, LatchReply::TimedOut) {
            publish_count();
            if last {
                forget_expiry(ctx, &latch);
            }
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
            let mut e = expiry();
            let Some(latch) = e.jobs.remove(&job) else {
                return;
            };
            e.by_latch.remove(&latch);
            latch
        };
        if writable(ctx) != Writable::Now || !ffi::select_db(ctx, latch.0) {
            if awaited(&latch) {
                let retry = ffi::now_ms() + RETRY_MS;
                arm_expiry_timer(ctx, latch, retry);
            }
            return;
        }
        let name = ffi::string(ctx, &latch.1);
        let deadline = Key::open(ctx, &name, false).and_then(|key| key.expires_at());
        if let Some(at) = deadline {
            if awaited(&latch) {
                arm_expiry_timer(ctx, latch, at);
            }
        }
    }
}
