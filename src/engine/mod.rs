//! The hand-off engine: one FIFO engine for every resource kind. A key's
//! waiters queue in the registry (`waiters.rs`), first come first served;
//! each change of the key is a transition of its kind's rules (begun from
//! what its keys hold, run by the caller, committed: written, replicated,
//! its woken waiters answered, a lease timer kept while others wait).
//!
//! The kinds: a lock (exclusive or read-write; an election is a lock with a
//! record, its record kept by a commit hook) in `lock.rs`, a semaphore in
//! `semaphore.rs`; a multi-lock caller is served across locks by
//! `group.rs`. Each kind supplies its keys, its transition and its writes
//! ([`Resource`]); what is done to any key outside its commands is here,
//! once for every kind: the settle after an outside change or a timer, the
//! release of a grant whose waiter never heard, a KEEPALIVE renewal, the
//! answers to woken or refused waiters. What a key is ([`Kind`]) is decided
//! here and nowhere else. The features built on commits (hold times, an
//! election's record, Redisson's fair queue) plug in at load (`hooks.rs`):
//! the engine imports none of them. Latches and election observers are
//! answered by their own broadcast (`waitlist.rs`), not by this engine.
//!
//! Offers: [`Origin`], [`Kind`], [`Resource`], [`settle`],
//! [`release_lost_grant`], [`renew_kept`], [`holders`], [`deliver`],
//! [`reject_all`], and the kinds' modules [`lock`], [`semaphore`], [`hooks`].

mod group;
pub mod hooks;
pub mod lock;
mod lock_transition;
pub mod semaphore;

use redis_module::{Context, ContextFlags, RedisString};

use crate::deferred;
use crate::ffi;
use crate::placement::Placement;
use crate::replication::Replication;
use crate::semaphore_key::{self, SemaphoreKeys};
use crate::stats::{self, Stats, STATS};
use crate::store::{self, LockKey};
use crate::waiters::{registry, BlockedReply, Grant, Waiter};
use lock_rules::deadlock::{lock_holders, semaphore_holders, Holders};
use lock_rules::error::LockError;
use lock_rules::lock_id::LockId;
use lock_rules::queue::Fifo;
use lock_rules::state::LockState;
use lock_rules::transition::{Transition, Verdict, Wake};

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

/// What a key is to the engine.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    /// Redisson's lock hash (exclusive, read-write, an election's lock).
    Lock,
    /// A counter and a permit set (Redisson's RSemaphore and
    /// RPermitExpirableSemaphore).
    Semaphore,
}

impl Kind {
    /// The kind a key's waiters wait for: a queue is a semaphore's when its
    /// first waiter asked for permits (a command queues only on its own
    /// kind's keys; a lock caller queued on a missing key that becomes a
    /// semaphore is answered WRONGTYPE by the semaphore's settle).
    fn of_queue(lock: &LockId<'_>) -> Kind {
        let semaphore = registry().is_ok_and(|mut r| {
            r.with_queue(lock, |queue| {
                queue
                    .front()
                    .is_some_and(|(_, w)| w.request.kind.permits().is_some())
            })
        });
        if semaphore {
            Kind::Semaphore
        } else {
            Kind::Lock
        }
    }

    /// The kind of what a grant gave: permits, or a lock.
    fn of_grant(grant: &Grant) -> Kind {
        if grant.permits.is_some() {
            Kind::Semaphore
        } else {
            Kind::Lock
        }
    }
}

/// A kind's part in the engine's work outside its commands: its keys
/// (`Self`), opened and read into a transition, the steps the engine asks
/// of that transition, and its commit.
pub trait Resource<'c>: Sized {
    /// The kind's transition (the rules' state machine for it).
    type Tx;

    /// Opens the kind's keys of `name` in the context's db and begins a
    /// transition from what they hold.
    fn begin(
        ctx: &'c Context,
        name: &'c RedisString,
        lock: &LockId<'_>,
        origin: Origin<'c>,
    ) -> Result<(Self, Self::Tx), LockError>;

    /// Serves the queue from its head after a change from outside (a
    /// keyspace event, a timer, a queue change).
    fn settle(tx: &mut Self::Tx, queue: &mut Fifo<Waiter>);

    /// Gives back what `grant` gave a waiter that never heard.
    fn give_back(
        tx: &mut Self::Tx,
        queue: &mut Fifo<Waiter>,
        grant: &Grant,
    ) -> Result<(), LockError>;

    /// A new lease of `lease_ms` on all of `owner`'s holds (LOCK.RENEW's,
    /// SEM.RENEW's rule).
    fn renew(
        tx: &mut Self::Tx,
        lock: &LockId<'_>,
        owner: &[u8],
        lease_ms: i64,
    ) -> Result<(), LockError>;

    /// Whether a refused give-back is still committed: a semaphore's took
    /// back permits whose lease ended and served the queue on the way; a
    /// lock's changed nothing.
    const COMMITS_REFUSED_GIVE_BACK: bool;

    /// Writes, replicates and answers what `tx` did.
    fn commit(&self, ctx: &Context, lock: &LockId<'_>, tx: Self::Tx);
}

/// Re-reads a key that has waiters (or, `for_fair_queue`, a lock whose
/// Redisson fair queue may have one) and serves them from the head. In a
/// cluster a timer may only write keys of slots this node serves (commands
/// are routed by the server, timers are not): the waiters of a key no
/// longer served hear so.
pub fn settle(ctx: &Context, placement: &Placement, lock: &LockId<'_>, for_fair_queue: bool) {
    let waited = registry().is_ok_and(|r| r.queue_len(lock) > 0);
    if !(waited || for_fair_queue) || !ffi::select_db(ctx, lock.db) {
        return;
    }
    // Without waiters, only a lock with a fair queue gets here (the drain
    // checked: the rest, elections' locks among them, must not see a
    // transition nobody made). A slot no longer served: its waiters hear so,
    // and a fair queue without waiters here is left alone.
    if !placement.serves(&lock.key) {
        if waited {
            reject_all(ctx, lock, &LockError::slot_not_served());
        }
        return;
    }
    let name = ffi::string(ctx, &lock.key);
    match Kind::of_queue(lock) {
        Kind::Lock => settle_as::<LockKey>(ctx, &name, lock),
        Kind::Semaphore => settle_as::<SemaphoreKeys>(ctx, &name, lock),
    }
}

fn settle_as<'c, R: Resource<'c>>(ctx: &'c Context, name: &'c RedisString, lock: &LockId<'_>) {
    let (keys, mut tx) = match R::begin(ctx, name, lock, Origin::Event) {
        Ok(started) => started,
        // The key now holds another type: waiting on would never end.
        Err(e) => return reject_all(ctx, lock, &e),
    };
    match registry() {
        Ok(mut reg) => reg.with_queue(lock, |queue| R::settle(&mut tx, queue)),
        Err(e) => return ffi::log_warning(ctx, &format!("lock: {e}")),
    }
    keys.commit(ctx, lock, tx);
}

/// Gives back what a waiter that never got its answer was granted (a lock
/// or permits), serving the next in line.
pub fn release_lost_grant(ctx: &Context, placement: &Placement, grant: &Grant) {
    let lock = &grant.lock;
    if !ffi::select_db(ctx, lock.db) || !placement.serves(&lock.key) {
        return;
    }
    let name = ffi::string(ctx, &lock.key);
    match Kind::of_grant(grant) {
        Kind::Lock => give_back_as::<LockKey>(ctx, &name, grant),
        Kind::Semaphore => give_back_as::<SemaphoreKeys>(ctx, &name, grant),
    }
}

fn give_back_as<'c, R: Resource<'c>>(ctx: &'c Context, name: &'c RedisString, grant: &Grant) {
    let lock = &grant.lock;
    let Ok((keys, mut tx)) = R::begin(ctx, name, lock, Origin::Event) else {
        return;
    };
    let given = match registry() {
        Ok(mut reg) => reg.with_queue(lock, |queue| R::give_back(&mut tx, queue, grant)),
        Err(_) => return,
    };
    // NOTOWNER or EXPIRED: the lease ended, or someone released it.
    if given.is_ok() {
        Stats::bump(&STATS.lost_grants_released);
    }
    if given.is_ok() || R::COMMITS_REFUSED_GIVE_BACK {
        keys.commit(ctx, lock, tx);
    }
}

/// A KEEPALIVE renewal of `owner`'s hold of `lock` (named `name`, in the
/// selected db): LOCK.RENEW's transition on a lock, SEM.RENEW's on a
/// semaphore's permits. Errs when the owner holds nothing there any more.
pub fn renew_kept(
    ctx: &Context,
    lock: &LockId<'_>,
    name: &RedisString,
    owner: &RedisString,
    lease_ms: i64,
) -> Result<(), LockError> {
    let begun = lock::begin(ctx, name, lock, Origin::Renewal { owner });
    // Not a lock held here (a string, or no key): a semaphore's permits,
    // looked for only then, so a lock's renewal opens no second key.
    let lock_held = begun
        .as_ref()
        .is_ok_and(|(_, tx)| *tx.state() != LockState::Free);
    if !lock_held && semaphore::is_semaphore(ctx, name) {
        drop(begun);
        let (keys, tx) = SemaphoreKeys::begin(ctx, name, lock, Origin::Renewal { owner })?;
        return renewed(ctx, lock, keys, tx, owner, lease_ms);
    }
    let (key, tx) = begun?;
    renewed(ctx, lock, key, tx, owner, lease_ms)
}

fn renewed<'c, R: Resource<'c>>(
    ctx: &Context,
    lock: &LockId<'_>,
    keys: R,
    mut tx: R::Tx,
    owner: &RedisString,
    lease_ms: i64,
) -> Result<(), LockError> {
    let renewed = R::renew(&mut tx, lock, owner.as_slice(), lease_ms);
    keys.commit(ctx, lock, tx);
    renewed
}

/// The holders of the lock or semaphore named `name` in the selected
/// database (nobody if it is neither, or missing); the lock's read error if
/// the key is neither a lock nor a semaphore.
pub fn holders(ctx: &Context, name: &RedisString) -> Result<Holders, LockError> {
    let now_ms = ffi::now_ms();
    let as_lock = match store::read_only(ctx, name) {
        Ok(Some((state, _))) => return Ok(lock_holders(&state, now_ms)),
        other => other.map(|_| ()),
    };
    // A semaphore's counter is a string (a lock read refuses it), or
    // missing while permits are held.
    match semaphore_key::read_only(ctx, name) {
        Ok(Some(state)) => Ok(semaphore_holders(&state, now_ms)),
        Ok(None) => Ok(Holders::default()),
        Err(_) => as_lock.map(|()| Holders::default()),
    }
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
                BlockedReply::Granted(
                    group::grant_of(lock, &wake.waiter.request, wake.held),
                    reply,
                )
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
