//! Callers blocked on a name until something about it changes, the
//! bookkeeping LATCH.AWAIT (`latches.rs`) and ELECT.OBSERVE
//! (`observers.rs`) share: who waits on which name, in the order they came,
//! their blocked-client handles and BLOCK timers; blocking one, taking
//! some or all out to answer them, and the server's callbacks for one
//! (CLIENT UNBLOCK, a disconnect) and its BLOCK time. Each user keeps its
//! list behind its own mutex and says what its callers are told.
//!
//! Offers: [`Name`], [`Waitlist`], [`Waiting`], [`block`], [`answer`],
//! [`leave`], [`timed_out`].

use std::sync::Mutex;

use redis_module::Context;

use crate::ffi::{self, BlockHandler, BlockedClient, TimerHandler, TimerId};
use crate::sync;
use lock_rules::args::{Wait, MAX_DURATION_MS};
use lock_rules::error::LockError;
use lock_rules::ids::IdMap;
use lock_rules::names::NameMap;

/// What callers wait on: a db and a key.
pub type Name = (i32, Vec<u8>);

/// One caller blocked on `name`, with what its list keeps of it (`data`).
pub struct Waiting<A: 'static, D> {
    pub name: Name,
    pub bc: BlockedClient<A>,
    pub timer: Option<TimerId>,
    pub data: D,
}

/// The callers blocked on each name, `A` what they are answered.
pub struct Waitlist<A: 'static, D> {
    by_name: NameMap<Name, Vec<u64>>,
    waiting: IdMap<u64, Waiting<A, D>>,
    handles: IdMap<BlockedClient<A>, u64>,
    next: u64,
}

impl<A: 'static, D> Default for Waitlist<A, D> {
    fn default() -> Self {
        Self {
            by_name: NameMap::default(),
            waiting: IdMap::default(),
            handles: IdMap::default(),
            next: 0,
        }
    }
}

impl<A: 'static, D> Waitlist<A, D> {
    /// How many callers wait, on any name.
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    /// How many callers wait on `name`.
    pub fn waiting_on(&self, name: &Name) -> usize {
        self.by_name.get(name).map_or(0, Vec::len)
    }

    /// The names someone waits on.
    pub fn names(&self) -> impl Iterator<Item = &Name> {
        self.by_name.keys()
    }

    /// Takes one caller out; `true` beside it if it was the last one on its
    /// name.
    pub fn remove(&mut self, id: u64) -> Option<(Waiting<A, D>, bool)> {
        let waiting = self.waiting.remove(&id)?;
        self.handles.remove(&waiting.bc);
        let mut last = false;
        if let Some(ids) = self.by_name.get_mut(&waiting.name) {
            ids.retain(|&w| w != id);
            if ids.is_empty() {
                self.by_name.remove(&waiting.name);
                last = true;
            }
        }
        Some((waiting, last))
    }

    /// Takes out, in the order they came, the callers on `name` that
    /// `answered` picks.
    pub fn take(&mut self, name: &Name, answered: impl Fn(&D) -> bool) -> Vec<Waiting<A, D>> {
        let ids: Vec<u64> = self.by_name.get(name).cloned().unwrap_or_default();
        let picked: Vec<u64> = ids
            .into_iter()
            .filter(|id| self.waiting.get(id).is_some_and(|w| answered(&w.data)))
            .collect();
        picked
            .into_iter()
            .filter_map(|id| self.remove(id).map(|(w, _)| w))
            .collect()
    }

    /// Takes every caller out, on every name.
    pub fn take_everyone(&mut self) -> Vec<Waiting<A, D>> {
        self.by_name.clear();
        self.handles.clear();
        self.waiting.drain().map(|(_, w)| w).collect()
    }
}

/// Blocks the caller on `name` in `list` (handled by `H`, its BLOCK time
/// by the timer `T`, which is given the caller's id), keeping `data`.
pub fn block<H, T, D>(
    ctx: &Context,
    list: &Mutex<Waitlist<H::Answer, D>>,
    name: Name,
    wait: Wait,
    data: D,
) -> Result<(), LockError>
where
    H: BlockHandler,
    T: TimerHandler,
{
    let bc = ffi::block_client::<H>(ctx)
        .ok_or_else(|| LockError::internal("the server refused to block the client"))?;
    let mut l = sync::lock(list);
    l.next += 1;
    let id = l.next;
    let timer = match wait {
        Wait::Forever => None,
        Wait::Millis(ms) => ffi::create_timer::<T>(ctx, ms.min(MAX_DURATION_MS), id),
    };
    l.by_name.entry(name.clone()).or_default().push(id);
    l.handles.insert(bc, id);
    l.waiting.insert(
        id,
        Waiting {
            name,
            bc,
            timer,
            data,
        },
    );
    Ok(())
}

/// Answers callers taken out of their list, stopping their BLOCK timers.
pub fn answer<A: 'static, D>(ctx: &Context, answered: Vec<Waiting<A, D>>, reply: impl Fn() -> A) {
    for waiting in answered {
        if let Some(timer) = waiting.timer {
            ffi::stop_timer(ctx, timer);
        }
        ffi::unblock(waiting.bc, Some(reply()));
    }
}

/// The server's callback for `bc` (CLIENT UNBLOCK, a disconnect): it
/// leaves its list, its BLOCK timer stopped. False if it had left already.
pub fn leave<A: 'static, D>(
    ctx: &Context,
    list: &Mutex<Waitlist<A, D>>,
    bc: BlockedClient<A>,
) -> Option<(Waiting<A, D>, bool)> {
    let left = {
        let mut l = sync::lock(list);
        let id = l.handles.get(&bc).copied()?;
        l.remove(id)
    };
    if let Some(timer) = left.as_ref().and_then(|(w, _)| w.timer) {
        ffi::stop_timer(ctx, timer);
    }
    left
}

/// A caller's BLOCK time ran out (its timer, with its id): it leaves its
/// list and is answered `reply`.
pub fn timed_out<A: 'static, D>(
    list: &Mutex<Waitlist<A, D>>,
    id: u64,
    reply: A,
) -> Option<(Name, bool)> {
    let (waiting, last) = sync::lock(list).remove(id)?;
    let name = waiting.name.clone();
    ffi::unblock(waiting.bc, Some(reply));
    Some((name, last))
}
