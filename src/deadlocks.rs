//! Deadlock detection: the waits-for graph as this server has it, and the
//! check every wait passes.
//!
//! The graph is never stored: the waiter registry says what an owner waits
//! for (its owner index) and which multi-lock callers are queued ahead in a
//! lock's queue, the keys say who holds a lock, and the rules'
//! [`cycle_closed_by`] walks it from what the caller wants. A wait that
//! would close a cycle is refused with `DEADLOCK` naming the cycle (the
//! caller that closes it is the victim, as in PostgreSQL: the others keep
//! waiting), and counted in `INFO lock`.
//!
//! Cost: nothing while nobody waits; otherwise one look in the registry for
//! whom the caller would wait for, from the holders the command read
//! already. Only when one of them waits too does the search read more keys
//! (each lock it reaches once). A hot lock's queue is never walked.
//!
//! With `lock.deadlock-check-ms` N > 0, a wait is queued at once and
//! checked once it has lasted N ms (PostgreSQL's `deadlock_timeout`): the
//! waits to check are kept by due time, with one timer at the first; a
//! wait found to close a cycle then is taken out of its queue and answered
//! `DEADLOCK`.
//!
//! A semaphore that a release leaves with one holder gives its waiters an
//! edge no wait made: [`semaphore_changed`] has their waits checked then.
//!
//! Offers: [`checks_at_wait`], [`holders_to_check`],
//! [`semaphore_holders_to_check`], [`check`], [`check_later`],
//! [`semaphore_changed`], [`holders`], [`waits_for`].

use std::collections::BTreeMap;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use redis_module::Context;

use crate::ffi::{self, TimerHandler};
use crate::stats::{Stats, STATS};
use crate::waiters::{anyone_waits, registry};
use crate::writable::{writable, Writable};
use crate::{blocking, config, engine, sync};
use lock_rules::deadlock::{
    any_holder, any_semaphore_holder, cycle_closed_by, lock_holders, semaphore_holders, Holders,
    WaitsFor,
};
use lock_rules::error::LockError;
use lock_rules::lock_id::LockId;
use lock_rules::registry::TimerId;
use lock_rules::request::FieldName;
use lock_rules::semaphore::SemaphoreState;
use lock_rules::state::LockState;

/// Whether a wait now would be checked before it is queued: detection at
/// each wait, and someone waiting already (a cycle needs a waiter). The
/// command reads whom its caller would wait for only then.
pub fn checks_at_wait() -> bool {
    config::deadlock_check_ms() == 0 && anyone_waits()
}

/// Whom `caller` would wait for on `lock`, held as `state`, for [`check`]:
/// nobody when no holder waits for anything and no multi-lock caller is
/// queued there (the hot lock's case: its holder is busy, not waiting),
/// which [`check`] then passes without copying the holders.
pub fn holders_to_check(
    lock: &LockId<'_>,
    caller: &[u8],
    state: &LockState,
    now_ms: i64,
) -> Holders {
    holders_if_one_waits(
        lock,
        caller,
        |waits| any_holder(state, now_ms, waits),
        || lock_holders(state, now_ms),
    )
}

/// [`holders_to_check`] for a semaphore: nobody when no permit's owner
/// waits for anything and no multi-lock caller is queued there.
pub fn semaphore_holders_to_check(
    lock: &LockId<'_>,
    caller: &[u8],
    state: &SemaphoreState,
    now_ms: i64,
) -> Holders {
    holders_if_one_waits(
        lock,
        caller,
        |waits| any_semaphore_holder(state, now_ms, waits),
        || semaphore_holders(state, now_ms),
    )
}

/// `holders()` if a holder (as `any_holder` walks them) waits, or a
/// multi-lock caller is queued on `lock` ahead of `caller`; else nobody.
fn holders_if_one_waits(
    lock: &LockId<'_>,
    caller: &[u8],
    any_holder: impl FnOnce(&dyn Fn(&[u8]) -> bool) -> bool,
    holders: impl FnOnce() -> Holders,
) -> Holders {
    let may_close = registry().is_ok_and(|r| {
        r.multi_ahead(lock, caller).is_some() || any_holder(&|h: &[u8]| r.owner_waits(h))
    });
    if may_close {
        holders()
    } else {
        Holders::default()
    }
}

/// Refuses `caller`'s wait for `wanted` (each lock with its holders as the
/// command just read them) with `DEADLOCK` if it would close a cycle.
/// Called on a master only, after the rules decided the caller waits and
/// before it is queued.
pub fn check(
    ctx: &Context,
    caller: &[u8],
    wanted: &[(LockId<'_>, Holders)],
) -> Result<(), LockError> {
    if caller.is_empty() || !checks_at_wait() {
        return Ok(());
    }
    {
        // The common case ends here: nobody the caller would wait for
        // waits for anything (a hot lock's holder is busy, not waiting),
        // and no multi-lock caller is queued for what it wants.
        let registry = registry()?;
        let may_close = wanted.iter().any(|(lock, holders)| {
            registry.multi_ahead(lock, caller).is_some()
                || holders
                    .waited_for_by(caller)
                    .into_iter()
                    .any(|holder| registry.owner_waits(holder))
        });
        if !may_close {
            return Ok(());
        }
    }
    let graph = ServerGraph::new(ctx, wanted);
    let locks: Vec<LockId<'_>> = wanted.iter().map(|(lock, _)| lock.clone()).collect();
    match cycle_closed_by(&graph, caller, &locks) {
        Some(cycle) => {
            Stats::bump(&STATS.deadlocks);
            Err(cycle.error())
        }
        None => Ok(()),
    }
}

/// A wait to check once it has lasted the delay.
struct Pending {
    owner: FieldName,
    locks: Vec<LockId<'static>>,
}

#[derive(Default)]
struct Delayed {
    /// By due time (then arrival): a wait queued after the delay was
    /// lowered comes due before those queued earlier.
    due: BTreeMap<(Instant, u64), Pending>,
    arrivals: u64,
    /// The timer and when it fires.
    timer: Option<(TimerId, Instant)>,
}

impl Delayed {
    fn push(&mut self, due: Instant, owner: FieldName, locks: Vec<LockId<'static>>) {
        self.arrivals += 1;
        self.due
            .insert((due, self.arrivals), Pending { owner, locks });
    }
}

static DELAYED: LazyLock<Mutex<Delayed>> = LazyLock::new(Mutex::default);

/// How soon due checks are tried again while the server loads or is paused.
const RETRY_MS: u64 = 100;

/// `owner` was just queued for `locks` (one key, or each of a multi-lock
/// caller's): with a delay set, its wait is checked once it has lasted it.
pub fn check_later(ctx: &Context, owner: &FieldName, locks: &[LockId<'static>]) {
    let Ok(delay) = u64::try_from(config::deadlock_check_ms()) else {
        return;
    };
    if delay == 0 || owner.is_empty() {
        return;
    }
    let due = Instant::now() + Duration::from_millis(delay);
    let mut delayed = sync::lock(&DELAYED);
    delayed.push(due, owner.clone(), locks.to_vec());
    arm(ctx, &mut delayed, due);
}

/// A semaphore transition left semaphore `lock` (of the selected
/// database) with few holders while callers wait. A waiter waits for the
/// one other owner holding permits, if there is exactly one: a release or a
/// lease that left one holder (of two) made that edge with no new wait, so
/// no check at a wait saw it. When that owner waits too, each such
/// waiter's wait is checked now, by the delayed-check timer at 0 ms.
pub fn semaphore_changed(ctx: &Context, lock: &LockId<'_>) {
    if config::deadlock_check_ms() != 0 {
        return;
    }
    let holders = read_holders(ctx, &lock.key);
    if holders.unnamed || holders.owners.is_empty() || holders.owners.len() > 2 {
        return;
    }
    let waiting: Vec<FieldName> = {
        let Ok(registry) = registry() else {
            return;
        };
        if !holders.owners.iter().any(|h| registry.owner_waits(h)) {
            return;
        }
        registry
            .queued_owners(lock)
            .into_iter()
            .filter(|w| {
                let others = holders.waited_for_by(w);
                others.len() == 1 && registry.owner_waits(others[0])
            })
            .collect()
    };
    if waiting.is_empty() {
        return;
    }
    let now = Instant::now();
    let mut delayed = sync::lock(&DELAYED);
    for owner in waiting {
        delayed.push(now, owner, vec![lock.to_owned()]);
    }
    arm(ctx, &mut delayed, now);
}

/// Makes sure the timer fires by `at`.
fn arm(ctx: &Context, delayed: &mut Delayed, at: Instant) {
    if delayed.timer.is_some_and(|(_, fires)| fires <= at) {
        return;
    }
    // Whole ms, rounded up: never before the wait has lasted the delay.
    let ms = at
        .saturating_duration_since(Instant::now())
        .as_micros()
        .div_ceil(1000);
    let ms = u64::try_from(ms)
        .unwrap_or(u64::MAX)
        .min(config::MAX_DEADLOCK_CHECK_MS as u64);
    let Some(id) = ffi::create_timer::<DelayedCheck>(ctx, ms as i64, 0) else {
        return;
    };
    let fires = Instant::now() + Duration::from_millis(ms);
    if let Some((old, _)) = delayed.timer.replace((id, fires)) {
        ffi::stop_timer(ctx, old);
    }
}

/// Fires at the first due check: checks every due wait that is still
/// waiting, then re-arms for the next.
struct DelayedCheck;

impl TimerHandler for DelayedCheck {
    fn fire(ctx: &Context, _: u64) {
        let due: Vec<Pending> = {
            let mut delayed = sync::lock(&DELAYED);
            delayed.timer = None;
            match writable(ctx) {
                // Loading or paused: keys are not to be touched (a read
                // may expire one); the cycle, if any, is still there later.
                Writable::Later => {
                    let later = Instant::now() + Duration::from_millis(RETRY_MS);
                    arm(ctx, &mut delayed, later);
                    return;
                }
                // A replica has no waiters: they were answered when it
                // was demoted.
                Writable::Never => {
                    delayed.due.clear();
                    return;
                }
                Writable::Now | Writable::TooFewReplicas => {}
            }
            let now = Instant::now();
            let mut due = Vec::new();
            while let Some(entry) = delayed.due.first_entry() {
                if entry.key().0 > now {
                    break;
                }
                due.push(entry.remove());
            }
            due
        };
        for wait in due {
            check_waiting(ctx, wait);
        }
        let mut delayed = sync::lock(&DELAYED);
        if let Some(&(next, _)) = delayed.due.keys().next() {
            arm(ctx, &mut delayed, next);
        }
    }
}

/// A wait that has lasted the delay (or was given a new edge): if it is
/// still waiting (for what it was queued for) and closes a cycle now, it
/// leaves its queue with `DEADLOCK`.
fn check_waiting(ctx: &Context, wait: Pending) {
    if config::deadlock_check_ms() < 0 {
        return;
    }
    let waits = registry().map_or_else(|_| Vec::new(), |r| r.waits_of(&wait.owner));
    let wanted: Vec<LockId<'static>> = wait
        .locks
        .into_iter()
        .filter(|lock| waits.contains(lock))
        .collect();
    if wanted.is_empty() {
        return;
    }
    let graph = ServerGraph::new(ctx, &[]);
    let Some(cycle) = cycle_closed_by(&graph, &wait.owner, &wanted) else {
        return;
    };
    let error = cycle.error().to_string();
    let lock = &cycle.steps[0].lock;
    if blocking::fail(ctx, lock, &wait.owner, &error) > 0 {
        Stats::bump(&STATS.deadlocks);
    }
}

/// Who holds `lock` (of the selected database) now.
pub fn holders(ctx: &Context, lock: &LockId<'_>) -> Holders {
    read_holders(ctx, &lock.key)
}

/// Whom `owner`, queued for `lock`, waits for now, as LOCK.WAITERS shows
/// it: the `holders` (nobody if it holds the lock itself; every other
/// owner holding permits of a semaphore, not only the one the search
/// follows) and the multi-lock caller queued nearest ahead of it.
pub fn waits_for(lock: &LockId<'_>, owner: &[u8], holders: &Holders) -> Vec<Vec<u8>> {
    if !holders.any_one && holders.owners.iter().any(|o| o[..] == *owner) {
        // A key it holds (a multi-lock caller's): no wait there.
        return Vec::new();
    }
    let mut owners: Vec<Vec<u8>> = holders
        .owners
        .iter()
        .filter(|o| o[..] != *owner)
        .cloned()
        .collect();
    let ahead = registry().ok().and_then(|r| r.multi_ahead(lock, owner));
    if let Some(ahead) = ahead {
        if !owners.iter().any(|o| o[..] == ahead[..]) {
            owners.push(ahead.to_vec());
        }
    }
    owners
}

/// The graph read from this server: the registry for waits and callers
/// ahead, the keys for holders (those of the caller's own locks as the
/// command read them).
struct ServerGraph<'a, 'k> {
    ctx: &'a Context,
    /// The caller's database, selected again after a lock of another.
    db: i32,
    known: &'a [(LockId<'k>, Holders)],
}

impl<'a, 'k> ServerGraph<'a, 'k> {
    fn new(ctx: &'a Context, known: &'a [(LockId<'k>, Holders)]) -> Self {
        Self {
            ctx,
            db: ffi::selected_db(ctx),
            known,
        }
    }
}

impl WaitsFor for ServerGraph<'_, '_> {
    fn waits_of(&self, owner: &[u8]) -> Vec<LockId<'static>> {
        // Taken for the one lookup: opening keys (below) may run a
        // keyspace-event callback that takes it too.
        registry().map_or_else(|_| Vec::new(), |r| r.waits_of(owner))
    }

    fn holders_of(&self, lock: &LockId<'_>) -> Holders {
        if let Some((_, holders)) = self.known.iter().find(|(known, _)| known == lock) {
            return holders.clone();
        }
        if lock.db != self.db && !ffi::select_db(self.ctx, lock.db) {
            return Holders::default();
        }
        let holders = read_holders(self.ctx, &lock.key);
        if lock.db != self.db {
            ffi::select_db(self.ctx, self.db);
        }
        holders
    }

    fn multi_ahead(&self, lock: &LockId<'_>, owner: &[u8]) -> Option<Vec<u8>> {
        let registry = registry().ok()?;
        registry.multi_ahead(lock, owner).map(|o| o.to_vec())
    }
}

/// The holders of the lock or semaphore named `key` in the selected
/// database; nobody if it is neither (nothing to wait for there).
fn read_holders(ctx: &Context, key: &[u8]) -> Holders {
    engine::holders(ctx, &ffi::string(ctx, key)).unwrap_or_default()
}
