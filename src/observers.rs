//! Callers blocked in ELECT.OBSERVE, by election (a `waitlist.rs` list):
//! blocking them, answering those to whom the leadership now differs from
//! the term they saw (from `elections.rs`, when it hands a leadership on,
//! ends it, or its value changes), their BLOCK time, the server's callbacks
//! for them (CLIENT UNBLOCK, disconnect), and a master's demotion.
//! Answering writes nothing.
//!
//! Offers: [`Name`], [`ObserveReply`], [`block`], [`answer`], [`demoted`],
//! [`count`], [`Blocked`].

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

/// The observers, each with the term it saw.
static OBSERVERS: LazyLock<Mutex<Waitlist<ObserveReply, i64>>> = LazyLock::new(Mutex::default);
/// Observers blocked now: elections with none skip the mutex.
static COUNT: AtomicUsize = AtomicUsize::new(0);

fn observers() -> MutexGuard<'static, Waitlist<ObserveReply, i64>> {
    sync::lock(&OBSERVERS)
}

fn publish_count() {
    COUNT.store(observers().len(), Relaxed);
}

/// Blocks an ELECT.OBSERVE caller that saw `seen_term` of `lock` until the
/// leadership differs, the leader's value changes, or `wait` runs out.
pub fn block(
    ctx: &Context,
    lock: &LockId<'_>,
    seen_term: i64,
    wait: Wait,
) -> Result<(), LockError> {
    let election = (lock.db, lock.key.to_vec());
    waitlist::block::<Blocked, BlockTimeout, _>(ctx, &OBSERVERS, election, wait, seen_term)?;
    publish_count();
    Ok(())
}

/// Answers the observers of `election` to whom `now` differs from what they
/// saw (all of them with `all`: the leader's value changed).
pub fn answer(ctx: &Context, election: &Name, now: &Option<Seen>, all: bool) {
    if COUNT.load(Relaxed) == 0 {
        return;
    }
    let term = Leader::term_of(now.as_ref().map(|s| &s.leader));
    let answered = observers().take(election, |seen_term| {
        all || observer_answered(term, *seen_term)
    });
    publish_count();
    waitlist::answer(ctx, answered, || ObserveReply::Changed(now.clone()));
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
