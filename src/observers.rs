//! Callers blocked in ELECT.OBSERVE, by election: blocking them, answering
//! those to whom the leadership now differs from the term they saw (from
//! `elections.rs`, when it hands a leadership on, ends it, or its value
//! changes), their BLOCK time (one timer per observer), the server's
//! callbacks for them (CLIENT UNBLOCK, disconnect), and a master's demotion.
//! Answering writes nothing.
//!
//! Offers: [`Name`], [`ObserveReply`], [`block`], [`answer`], [`demoted`],
//! [`count`], [`Blocked`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{LazyLock, Mutex, MutexGuard};

use redis_module::Context;

use crate::ffi::{self, BlockHandler, BlockedClient, TimerHandler, TimerId};
use crate::leader_record::{reply_fields, Seen};
use crate::sync;
use lock_rules::args::{Wait, MAX_DURATION_MS};
use lock_rules::election::{observer_answered, Leader};
use lock_rules::error::LockError;
use lock_rules::lock_id::LockId;

/// An election: its db and key.
pub type Name = (i32, Vec<u8>);
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

struct Observer {
    election: Name,
    seen_term: i64,
    bc: Handle,
    timer: Option<TimerId>,
}

#[derive(Default)]
struct Observers {
    /// Each election's observers, in the order they came.
    observed: HashMap<Name, Vec<u64>>,
    waiting: HashMap<u64, Observer>,
    handles: HashMap<Handle, u64>,
    next: u64,
}

static OBSERVERS: LazyLock<Mutex<Observers>> = LazyLock::new(Mutex::default);
/// Observers blocked now: elections with none skip the mutex.
static COUNT: AtomicUsize = AtomicUsize::new(0);

fn observers() -> MutexGuard<'static, Observers> {
    sync::lock(&OBSERVERS)
}

impl Observers {
    fn publish_count(&self) {
        COUNT.store(self.waiting.len(), Relaxed);
    }

    fn remove(&mut self, id: u64) -> Option<Observer> {
        let observer = self.waiting.remove(&id)?;
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

/// Blocks an ELECT.OBSERVE caller that saw `seen_term` of `lock` until the
/// leadership differs, the leader's value changes, or `wait` runs out.
pub fn block(
    ctx: &Context,
    lock: &LockId<'_>,
    seen_term: i64,
    wait: Wait,
) -> Result<(), LockError> {
    let bc = ffi::block_client::<Blocked>(ctx)
        .ok_or_else(|| LockError::internal("the server refused to block the client"))?;
    let mut o = observers();
    o.next += 1;
    let id = o.next;
    let timer = match wait {
        Wait::Forever => None,
        Wait::Millis(ms) => ffi::create_timer::<BlockTimeout>(ctx, ms.min(MAX_DURATION_MS), id),
    };
    let election = (lock.db, lock.key.to_vec());
    o.observed.entry(election.clone()).or_default().push(id);
    o.handles.insert(bc, id);
    o.waiting.insert(
        id,
        Observer {
            election,
            seen_term,
            bc,
            timer,
        },
    );
    o.publish_count();
    Ok(())
}

/// Answers the observers of `election` to whom `now` differs from what they
/// saw (all of them with `all`: the leader's value changed).
pub fn answer(ctx: &Context, election: &Name, now: &Option<Seen>, all: bool) {
    if COUNT.load(Relaxed) == 0 {
        return;
    }
    let term = Leader::term_of(now.as_ref().map(|s| &s.leader));
    let answered: Vec<Observer> = {
        let mut o = observers();
        let ids: Vec<u64> = o.observed.get(election).cloned().unwrap_or_default();
        ids.into_iter()
            .filter(|id| {
                o.waiting
                    .get(id)
                    .is_some_and(|o| all || observer_answered(term, o.seen_term))
            })
            .collect::<Vec<_>>()
            .into_iter()
            .filter_map(|id| o.remove(id))
            .collect()
    };
    for observer in answered {
        if let Some(timer) = observer.timer {
            ffi::stop_timer(ctx, timer);
        }
        ffi::unblock(observer.bc, Some(ObserveReply::Changed(now.clone())));
    }
}

/// The server became a replica: observers are answered as Redis answers
/// its own blocked callers then.
pub fn demoted(ctx: &Context) {
    if COUNT.load(Relaxed) == 0 {
        return;
    }
    let error = LockError::demoted().to_string();
    let all: Vec<Observer> = {
        let mut o = observers();
        let ids: Vec<u64> = o.waiting.keys().copied().collect();
        ids.into_iter().filter_map(|id| o.remove(id)).collect()
    };
    for observer in all {
        if let Some(timer) = observer.timer {
            ffi::stop_timer(ctx, timer);
        }
        ffi::unblock(observer.bc, Some(ObserveReply::Failed(error.clone())));
    }
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
        let mut o = observers();
        let Some(id) = o.handles.get(&bc).copied() else {
            return false;
        };
        o.remove(id)
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
        let observer = observers().remove(id);
        if let Some(observer) = observer {
            ffi::unblock(observer.bc, Some(ObserveReply::TimedOut));
        }
    }
}
