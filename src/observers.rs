//! Callers blocked in ELECT.OBSERVE, by election (a `waitlist.rs` list):
//! blocking them, answering those to whom the leadership now differs from
//! the term they saw (from `elections.rs`, when it hands a leadership on,
//! ends it, or its value changes), their BLOCK time, the server's callbacks
//! for them (CLIENT UNBLOCK, disconnect), and a master's demotion.
//! Answering writes nothing.
//!
//! Offers: [`Name`], [`ObserveReply`], [`block`], [`answer`], [`fail`],
//! [`watching`], [`observed`], [`demoted`], [`count`], [`Blocked`].

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{LazyLock, Mutex, MutexGuard};

use redis_module::Context;

use crate::ffi::{self, BlockHandler, BlockedClient, TimerHandler};
use crate::leader_record::{reply_fields, Seen};
use crate::sync;
pub use crate::waitlist::Name;
use crate::waitlist::{self, Waitlist};
use lock_rules::args::Wait;
use lock_rules::election::{observer_answered, Leader};
use lock_rules::error::LockError;
use lock_rules::lock_id::LockId;

type Handle = BlockedClient<ObserveReply>;

/// What an ELECT.OBSERVE caller is told.
#[derive(Debug)]
pub enum ObserveReply {
    /// The leadership now (`None`: nobody leads).
    Changed(Option<Seen>),
    /// Its BLOCK time ran out: nil.
    TimedOut,
    Failed(String),
}

/// What an observer saw: the term (0: nobody led) and the leader's value.
type SeenTerm = (i64, Option<Vec<u8>>);

fn seen_of(now: &Option<Seen>) -> SeenTerm {
    match now {
        Some(s) => (s.leader.term, s.leader.value.clone()),
        None => (Leader::term_of(None), None),
    }
}

/// The observers, each with what it saw.
static OBSERVERS: LazyLock<Mutex<Waitlist<ObserveReply, SeenTerm>>> = LazyLock::new(Mutex::default);
/// Observers blocked now: elections with none skip the mutex.
static COUNT: AtomicUsize = AtomicUsize::new(0);

fn observers() -> MutexGuard<'static, Waitlist<ObserveReply, SeenTerm>> {
    sync::lock(&OBSERVERS)
}

fn publish_count() {
    COUNT.store(observers().len(), Relaxed);
}

/// Blocks an ELECT.OBSERVE caller of `lock`, where `now` leads (in the
/// term the caller saw), until the leadership or its value differs, or
/// `wait` runs out.
pub fn block(
    ctx: &Context,
    lock: &LockId<'_>,
    now: &Option<Seen>,
    wait: Wait,
) -> Result<(), LockError> {
    let election = (lock.db, lock.key.to_vec());
    waitlist::block::<Blocked, BlockTimeout, _>(ctx, &OBSERVERS, election, wait, seen_of(now))?;
    publish_count();
    Ok(())
}

/// Answers the observers of `election` to whom `now` differs from what they
/// saw: another term, or another value.
pub fn answer(ctx: &Context, election: &Name, now: &Option<Seen>) {
    if COUNT.load(Relaxed) == 0 {
        return;
    }
    let (term, value) = seen_of(now);
    let answered = observers().take(election, |(seen_term, seen_value)| {
        observer_answered(term, *seen_term) || value != *seen_value
    });
    publish_count();
    waitlist::answer(ctx, answered, || ObserveReply::Changed(now.clone()));
}

/// Answers every observer of `election` with `error` (its slot is no
/// longer this node's).
pub fn fail(ctx: &Context, election: &Name, error: &LockError) {
    if COUNT.load(Relaxed) == 0 {
        return;
    }
    let answered = observers().take(election, |_| true);
    publish_count();
    let error = error.to_string();
    waitlist::answer(ctx, answered, || ObserveReply::Failed(error.clone()));
}

/// The elections observed in the dbs `in_dbs` picks.
pub fn observed(in_dbs: impl Fn(&i32) -> bool) -> std::collections::HashSet<Name> {
    if COUNT.load(Relaxed) == 0 {
        return Default::default();
    }
    observers()
        .names()
        .filter(|(db, _)| in_dbs(db))
        .cloned()
        .collect()
}

/// Whether anyone observes `lock`.
pub fn watching(lock: &LockId<'_>) -> bool {
    COUNT.load(Relaxed) > 0 && observers().waiting_on(&(lock.db, lock.key.to_vec())) > 0
}

/// The server became a replica: observers are answered as Redis answers
/// its own blocked callers then.
pub fn demoted(ctx: &Context) {
    if COUNT.load(Relaxed) == 0 {
        return;
    }
    let error = LockError::demoted().to_string();
    let everyone = observers().take_everyone();
    publish_count();
    waitlist::answer(ctx, everyone, || ObserveReply::Failed(error.clone()));
}

/// How many callers are blocked in ELECT.OBSERVE.
pub fn count() -> usize {
    COUNT.load(Relaxed)
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
        if waitlist::leave(ctx, &OBSERVERS, bc).is_some() {
            publish_count();
            ffi::reply_null(ctx);
            ffi::unblock(bc, None);
        }
    }

    fn disconnect(ctx: &Context, bc: Handle) {
        if waitlist::leave(ctx, &OBSERVERS, bc).is_some() {
            publish_count();
            ffi::unblock(bc, None);
        }
    }

    fn free(_ctx: &Context, _answer: Box<ObserveReply>, _client_gone: bool) {}
}

/// An observer's BLOCK time ran out.
struct BlockTimeout;

impl TimerHandler for BlockTimeout {
    fn fire(_ctx: &Context, id: u64) {
        if waitlist::timed_out(&OBSERVERS, id, ObserveReply::TimedOut).is_some() {
            publish_count();
        }
    }
}
