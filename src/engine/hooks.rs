//! What the features built on a lock's transitions plug into the engine,
//! handed in once at load (`lib.rs`), so that the engine imports none of
//! them: Redisson's fair queue (read into each transition that may serve
//! it, told when a free lock is kept for its head), and whatever follows a
//! committed transition (hold times, an election's leader record).
//!
//! Without hooks installed (unit tests, or before load), a lock has no fair
//! queue and a commit is followed by nothing.
//!
//! Offers: [`LockHooks`], [`install`], [`fair_queue`], [`committed`].

use std::sync::OnceLock;

use redis_module::Context;

use crate::store::LockKey;
use crate::waiters::Waiter;
use lock_rules::fair::{FairEntry, FairQueue};
use lock_rules::lock_id::LockId;
use lock_rules::transition::Transition;

/// A committed lock transition, written and replicated, before its woken
/// waiters are answered.
pub type Committed = fn(&Context, &LockId<'_>, &LockKey, &Transition<Waiter>);

/// The features that take part in a lock's transitions.
pub struct LockHooks {
    /// The fair queue of a lock (in the context's db), if it has one.
    pub fair_queue: fn(&Context, &LockId<'_>) -> Option<FairQueue>,
    /// Whether a module waiter queued behind fair waiters remembers them
    /// (list events are heard).
    pub fair_waiters_remembered: fn() -> bool,
    /// A free lock was kept for the fair queue's head.
    pub kept_for_fair_head: fn(&Context, &LockId<'_>, &FairEntry),
    /// Called in order after every commit.
    pub committed: &'static [Committed],
}

static HOOKS: OnceLock<LockHooks> = OnceLock::new();

/// Sets the hooks (once, at load).
pub fn install(hooks: LockHooks) {
    let _ = HOOKS.set(hooks);
}

/// The fair queue of `lock`, and whether waiters remember it.
pub fn fair_queue(ctx: &Context, lock: &LockId<'_>) -> (Option<FairQueue>, bool) {
    match HOOKS.get() {
        Some(h) => ((h.fair_queue)(ctx, lock), (h.fair_waiters_remembered)()),
        None => (None, false),
    }
}

/// Runs the hooks of a committed transition.
pub fn committed(ctx: &Context, lock: &LockId<'_>, key: &LockKey, tx: &Transition<Waiter>) {
    let Some(h) = HOOKS.get() else {
        return;
    };
    for hook in h.committed {
        hook(ctx, lock, key, tx);
    }
    if let Some(head) = tx.kept_for() {
        (h.kept_for_fair_head)(ctx, lock, head);
    }
}
