//! Whether anything receives replicated commands, so that a LOCK.* command
//! builds its native HSET / PEXPIREAT / DEL only when someone will read them.
//!
//! `RM_Replicate` looks the command up by name and builds its argv before
//! Redis checks whether an AOF or a replica exists; with neither, that was
//! most of an uncontended acquire's cost. Redis itself propagates to the AOF
//! when it is on (any state but off) and to replicas when it has replicas or
//! a replication backlog. The AOF state is in the context flags of every
//! call; replicas and backlog are read from `INFO replication` once, and
//! again after any event that can change them: a role change, a replica
//! coming or going, a fork (a full sync forks before any replica is owed a
//! command), the end of loading.
//!
//! LOCK.* commands and KEEPALIVE renewals (which come by the thousand) take
//! the shortcut, and still count each change for the `save` points. Other
//! timers and events (rare) always replicate.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering::Relaxed};

use redis_module::{Context, ContextFlags};

use crate::ffi;

const UNKNOWN: u8 = 0;
const NOBODY: u8 = 1;
const SOMEONE: u8 = 2;

static REPLICATION: AtomicU8 = AtomicU8::new(UNKNOWN);

/// How the writes of one execution unit reach replicas and the AOF.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replication {
    /// Replicated as native commands.
    Native,
    /// Nothing would receive them: only counted as changes.
    Unheard,
}

impl Replication {
    /// For a LOCK.* command (or a KEEPALIVE renewal) running now.
    pub fn for_command(ctx: &Context, flags: ContextFlags) -> Self {
        if flags.contains(ContextFlags::AOF) || replicas_may_listen(ctx) {
            Self::Native
        } else {
            Self::Unheard
        }
    }
}

fn replicas_may_listen(ctx: &Context) -> bool {
    match REPLICATION.load(Relaxed) {
        NOBODY => false,
        SOMEONE => true,
        _ => {
            let listens = ffi::replication_may_listen(ctx);
            REPLICATION.store(if listens { SOMEONE } else { NOBODY }, Relaxed);
            listens
        }
    }
}

/// Called on every event that can add or remove replication listeners.
pub fn forget_listeners() {
    REPLICATION.store(UNKNOWN, Relaxed);
}

/// Set for good once a load on a master dropped expired keys while replicas
/// or the AOF were listening: `DEBUG RELOAD` drops them without sending
/// their DEL, so replicas and the AOF may still have such a key. A lock then
/// taken afresh under its name replicates a `DEL` before its `HSET`, or the
/// stale hash would keep its old owner beside the new one downstream.
/// A master's restart from an RDB file drops expired keys too, but sends
/// their DELs itself; the flag then costs a few bytes per fresh lock.
static DOWNSTREAM_MAY_KEEP_DROPPED_KEYS: AtomicBool = AtomicBool::new(false);

/// Called when loading a dataset ends.
pub fn note_load(ctx: &Context) {
    let flags = ctx.get_flags();
    if flags.contains(ContextFlags::MASTER)
        && (flags.contains(ContextFlags::AOF) || replicas_may_listen(ctx))
        && ffi::keys_expired_by_last_load(ctx) > 0
    {
        DOWNSTREAM_MAY_KEEP_DROPPED_KEYS.store(true, Relaxed);
    }
}

pub fn downstream_may_keep_dropped_keys() -> bool {
    DOWNSTREAM_MAY_KEEP_DROPPED_KEYS.load(Relaxed)
}
