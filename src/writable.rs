//! Whether the module may write outside a command now (a timer, a deferred
//! job, a KEEPALIVE renewal): only on a master that is neither loading nor
//! paused, and that has the replicas `min-replicas-to-write` asks for.
//!
//! Redis refuses a write command (`NOREPLICAS`) while fewer replicas than
//! that have acked within `min-replicas-max-lag`; the module's timers and
//! events (a lease ending and the lock handed to the next caller, a
//! KEEPALIVE renewal, a lost grant released) write outside any command, so
//! Redis does not stop them. This file does: a master cut off from its
//! replicas, about to be replaced by one of them, would otherwise go on
//! handing locks to its queued callers while the new master hands the same
//! locks to others. The count of good replicas is read from `INFO
//! replication` at each check, and only while the setting is on.
//!
//! Offers: [`Writable`], [`writable`].

use redis_module::{Context, ContextFlags};

use crate::ffi;
use crate::server_settings;

/// Whether a timer or deferred job may write now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writable {
    Now,
    /// Loading, or clients are paused: try again shortly.
    Later,
    /// Fewer good replicas than `min-replicas-to-write` (Redis refuses
    /// write commands with `NOREPLICAS` now): try again, less often.
    TooFewReplicas,
    /// A replica: its data comes from its master, and it has no waiters
    /// (they are answered when it is demoted).
    Never,
}

pub fn writable(ctx: &Context) -> Writable {
    let flags = ctx.get_flags();
    if !flags.contains(ContextFlags::MASTER) {
        Writable::Never
    } else if flags.contains(ContextFlags::LOADING) || ffi::writes_paused(ctx) {
        Writable::Later
    } else if !enough_replicas(ctx) {
        Writable::TooFewReplicas
    } else {
        Writable::Now
    }
}

/// Whether this master has the replicas a write needs, as Redis decides
/// for a write command.
fn enough_replicas(ctx: &Context) -> bool {
    let needed = server_settings::min_replicas_to_write();
    // Without the good-replica count (min-replicas-max-lag is 0) Redis
    // refuses nothing either.
    needed <= 0 || ffi::good_replicas(ctx).is_none_or(|good| good >= needed)
}
