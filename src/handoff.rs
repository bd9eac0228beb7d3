//! Hand-off: a transition of one lock (or of several, for a multi-lock
//! command) is begun from what the key holds, run through the rules by the
//! caller, then committed: its changes are written and replicated, the
//! waiters it woke are answered, and a lease timer is kept while others wait.
//! A multi-lock caller first in line on a committed lock is then served,
//! all its keys in one step, if it can have them all.
//!
//! One hand-off, a release that gives the lock to the first waiter:
//!
//! ```text
//! LOCK.RELEASE (caller)      handoff                  Redis                waiter
//!   begin ----------------> open key, read state
//!   tx.release(queue)        (rules: free, settle:
//!                             head waiter granted)
//!   commit ---------------> apply changes --------> HSET/HDEL/PEXPIREAT
//!                                                   replicated as one
//!                                                   MULTI/EXEC
//!                           deliver: registry
//!                           forgets the waiter,
//!                           ffi::unblock(reply) --> reply callback
//!                           lease timer if others   (blocking::Blocked)
//!                           still wait               after this command -> (integer) 1
//!   reply 0 <-------------
//! ```
//!
//! If the waiter is gone by the time its reply is written, `blocking.rs`
//! hands the grant to `deferred.rs`, whose drain releases it again (another
//! transition, begun and committed the same way). Every way a lock ends
//! outside a command (lease timer, keyspace event, flush) goes through the
//! drain too (`events.rs`).
//!
//! Offers: [`Origin`], [`begin`], [`commit`], [`commit_all`],
//! [`reject_all`], [`deliver`].

use redis_module::{Context, ContextFlags, RedisString};

use crate::deferred;
use crate::ffi;
use crate::replication::Replication;
use crate::stats::{self, STATS};
use crate::store::{self, LockKey, Placement};
use crate::waiters::{anyone_waits, registry, BlockedReply, Grant, GroupId, Waiter};
use crate::{elections, fair_queue, holds, lease};
use lock_rules::error::LockError;
use lock_rules::lock_id::LockId;
use lock_rules::multilock::{take_all, AllOrNone};
use lock_rules::request::Request;
use lock_rules::state::LockState;
use lock_rules::transition::{TokenValue, Transition, Verdict, Wake};

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
    /// A KEEPALIVE renewal (a timer) of `owner`'s holds.
    Renewal { owner: &'c RedisString },
}

impl<'c> Origin<'c> {
    /// A command without an owner argument (SEM.INIT, SEM.ADD, LATCH.*).
    pub const WITHOUT_OWNER: Origin<'static> = Origin::Command {
        owner: None,
        fences: false,
    };

    /// A command by `owner`, with the fencing counter loaded if it asked
    /// for FENCE.
    pub fn caller(owner: &'c RedisString, fences: bool) -> Self {
        Self::Command {
            owner: Some(owner),
            fences,
        }
    }
}

/// Opens the lock in the context's db and starts a transition from what it
/// holds, with the fencing counter loaded if a grant may need it.
pub fn begin<'c>(
    ctx: &'c Context,
    name: &'c RedisString,
    lock: &LockId<'_>,
    origin: Origin<'c>,
) -> Result<(LockKey<'c>, Transition<Waiter>), LockError> {
    let (owner, fences, replication) = origin.parts(ctx)?;
    let key = LockKey::open(ctx, name, owner, replication)?;
    let state = key.read(ctx)?;
    let token = load_token(ctx, lock, fences);
    // A renewal never frees the lock nor queues anyone: it skips the read.
    let tx = Transition::new(state, ffi::now_ms(), token);
    let tx = match (tx.state(), origin) {
        (LockState::Shared(_), _) | (_, Origin::Renewal { .. }) => tx,
        _ => tx.with_fair(
            fair_queue::read(ctx, &lock.key),
            fair_queue::waiters_remember(),
        ),
    };
    Ok((key, tx))
}

impl<'c> Origin<'c> {
    /// The caller's owner argument, whether the fencing counter is needed
    /// for the caller, and how the writes are replicated; `READONLY` for a
    /// command on a replica.
    pub fn parts(
        self,
        ctx: &Context,
    ) -> Result<(Option<&'c RedisString>, bool, Replication), LockError> {
        Ok(match self {
            Origin::Command { owner, fences } => {
                let flags = ctx.get_flags();
                // Writes on a replica that accepts writes would be
                // overwritten by its master, and its timers never act:
                // refuse them, as a read-only one does.
                if !flags.contains(ContextFlags::MASTER) {
                    return Err(LockError::replica());
                }
                (owner, fences, Replication::for_command(ctx, flags))
            }
            Origin::Event => (None, false, Replication::Native),
            // Renewals come by the thousand: they skip building native
            // commands nobody would receive, as commands do.
            Origin::Renewal { owner } => (
                Some(owner),
                false,
                Replication::for_command(ctx, ctx.get_flags()),
            ),
        })
    }
}

/// The fencing counter, read only when a grant may need it: the caller
/// asked for FENCE, or a queued waiter did.
pub fn load_token(ctx: &Context, lock: &LockId<'_>, caller_fences: bool) -> TokenValue {
    let waiters_fence = anyone_waits() && registry().is_ok_and(|r| r.fenced_waiters(lock) > 0);
    (caller_fences || waiters_fence).then(|| store::last_token(ctx, &lock.key))
}

/// Applies `tx` to `key`: writes and their replication first, then the
/// answers to woken waiters (Redis sends them after this execution unit, so
/// the new owner is already written and replicated when it hears), then the
/// lease timer if waiters remain.
pub fn commit(ctx: &Context, lock: &LockId<'_>, key: &LockKey, tx: Transition<Waiter>) {
    commit_only(ctx, lock, key, tx);
    serve_group_at(ctx, lock);
}

/// [`commit`] of a transition that wrote and answered nothing, for a caller
/// about to wait: the lock's lease timer is left to its enqueue, which
/// arms it for the same deadline once the caller is queued (an untouched
/// lock kept the timer its last change or event left it).
pub fn commit_unchanged(ctx: &Context, lock: &LockId<'_>, key: &LockKey, tx: Transition<Waiter>) {
    commit_with(ctx, lock, key, tx, false);
    serve_group_at(ctx, lock);
}

/// Several locks' transitions of one command, committed together (so
/// replicated in one MULTI/EXEC): every one first, and only then a
/// multi-lock caller now first in line on one of them may have its keys,
/// since serving it opens and writes keys of its own, which must not be
/// among the transitions still uncommitted.
pub fn commit_all<'c>(
    ctx: &Context,
    opened: impl IntoIterator<Item = (LockId<'c>, LockKey<'c>, Transition<Waiter>)>,
) {
    let mut locks = Vec::new();
    for (lock, key, tx) in opened {
        commit_only(ctx, &lock, &key, tx);
        locks.push(lock);
    }
    for lock in &locks {
        serve_group_at(ctx, lock);
    }
}

/// [`commit`] without serving a multi-lock caller now first in line (see
/// [`commit_all`]).
fn commit_only(ctx: &Context, lock: &LockId<'_>, key: &LockKey, tx: Transition<Waiter>) {
    commit_with(ctx, lock, key, tx, true);
}

fn commit_with(
    ctx: &Context,
    lock: &LockId<'_>,
    key: &LockKey,
    tx: Transition<Waiter>,
    lease_timer: bool,
) {
    key.apply(ctx, &tx.changes);
    STATS.add(&tx.tally);
    holds::changed(lock, &tx.held_before, tx.state(), tx.now_ms());
    elections::committed(ctx, lock, key, &tx);
    let held_after = *tx.state() != LockState::Free;
    let next_end = tx.next_end();
    if let Some(head) = tx.kept_for() {
        fair_queue::kept(ctx, lock, head);
    }
    deliver(ctx, lock, tx.wakes);
    if held_after && lease_timer {
        lease::ensure_lease_timer(ctx, lock, || lease::earliest(next_end, key.expires_at()));
    }
}

/// For a lock with a multi-lock caller first in line (left free, or handed
/// to that caller's own owner): it may now have all its keys.
fn serve_group_at(ctx: &Context, lock: &LockId<'_>) {
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
/// line on each and each is free or already its own (the rules' all-or-none
/// decision, as LOCK.MACQUIRE's); otherwise leaves it waiting, or answers
/// it the error if it can never have them.
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
    let mut first_in_line = Vec::with_capacity(entries.len());
    for ((lock, first), name) in entries.iter().zip(&names) {
        match begin(ctx, name, lock, Origin::Event) {
            Ok((key, tx)) => {
                opened.push((lock, key, tx));
                first_in_line.push(*first);
            }
            // Another type now: waiting on would never end.
            Err(e) => return fail_group(ctx, group, e),
        }
    }
    let held: Vec<bool> = opened
        .iter()
        .map(|(_, _, tx)| tx.state().held_by(&request.owner))
        .collect();
    let taken = take_all(
        opened.iter_mut().map(|(_, _, tx)| tx).zip(first_in_line),
        &request,
    );
    let replies = match taken {
        AllOrNone::Taken(replies) => replies,
        // Nothing was taken: the transitions are dropped unwritten.
        AllOrNone::Busy => return,
        AllOrNone::Refused(e) => return fail_group(ctx, group, e),
    };
    let Some((waiter, released)) = registry().ok().and_then(|mut r| r.take_group(group)) else {
        return;
    };
    deferred::after_queue_change(ctx, released);
    stats::record_wait(waiter.queued_at.elapsed());
    let mut grants = Vec::with_capacity(opened.len());
    for ((lock, key, mut tx), held) in opened.into_iter().zip(held) {
        tx.tally.handed_off += 1;
        grants.push(grant_of(lock, &request, held));
        commit_only(ctx, lock, &key, tx);
    }
    ffi::unblock(waiter.bc, Some(BlockedReply::GrantedAll(grants, replies)));
    // The next caller in line on these keys may be a multi-lock caller of
    // the same owner.
    for (lock, _) in &entries {
        serve_group_at(ctx, lock);
    }
}

fn grant_of(lock: &LockId<'_>, request: &Request, reentry: bool) -> Grant {
    Grant {
        lock: lock.to_owned(),
        side: request.kind.side(),
        permits: request.kind.permits(),
        owner: request.owner.clone(),
        lease_ms: request.lease_ms,
        keepalive: request.keepalive.clone(),
        reentry,
    }
}

/// Answers a multi-lock caller with an error and takes it out of every
/// queue.
fn fail_group(ctx: &Context, group: GroupId, error: LockError) {
    let Some((waiter, released)) = registry().ok().and_then(|mut r| r.remove(group)) else {
        return;
    };
    deferred::after_queue_change(ctx, released);
    ffi::unblock(waiter.bc, Some(BlockedReply::Failed(error.to_string())));
}

/// Answers the waiters a transition woke (of a lock or of a semaphore),
/// after taking them out of the registry.
pub fn deliver(ctx: &Context, lock: &LockId<'_>, wakes: Vec<Wake<Waiter>>) {
    if wakes.is_empty() {
        return;
    }
    match registry() {
        Ok(mut reg) => {
            let released = reg.forget_woken(lock, &wakes);
            deferred::after_queue_change(ctx, released);
        }
        Err(e) => ffi::log_warning(ctx, &format!("lock: waiter bookkeeping skipped: {e}")),
    }
    for wake in wakes {
        let outcome = match wake.verdict {
            Verdict::Granted(reply) => {
                stats::record_wait(wake.waiter.queued_at.elapsed());
                BlockedReply::Granted(grant_of(lock, &wake.waiter.request, wake.held), reply)
            }
            Verdict::Failed(e) => BlockedReply::Failed(e.to_string()),
        };
        ffi::unblock(wake.waiter.bc, Some(outcome));
    }
}

/// Answers every waiter of `lock` with `error` instead of the lock: the key
/// now holds another type, the node no longer serves its slot, or the
/// server was demoted.
pub fn reject_all(ctx: &Context, lock: &LockId<'_>, error: &LockError) {
    let mut tx = Transition::new(LockState::Free, ffi::now_ms(), None);
    if let Ok(mut reg) = registry() {
        reg.with_queue(lock, |queue| tx.reject_all(queue, error));
    }
    deliver(ctx, lock, tx.wakes);
}
