//! The module's one waiter registry (`lock_rules::registry`: who waits for
//! which lock, pure bookkeeping), keyed by the server's blocked-client
//! handles, and what a blocked caller is told when it is unblocked.
//!
//! The registry sits behind one mutex, taken for short, non-reentrant
//! stretches; it is never held across a call that can run a keyspace-event
//! callback (opening a key, RM_Call), since that callback reads it too.
//! Beside it, a count of locks with a queue lets commands on locks nobody
//! waits for (nearly all of them) skip the mutex.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{LazyLock, Mutex, MutexGuard};

use crate::ffi::BlockedClient;
use crate::sync;
use lock_rules::error::LockError;
use lock_rules::queue::Fifo;
use lock_rules::registry;
use lock_rules::request::{FieldName, KeepAlive, Side};

use lock_rules::lock_id::LockId;
pub use lock_rules::registry::{GroupId, LeaseTimer, Released, WaitTimer};

/// The blocked-client handle of a waiter, answered with a [`BlockedReply`].
pub type Handle = BlockedClient<BlockedReply>;
pub type Registry = registry::Registry<Handle>;
pub type Waiter = registry::Waiter<Handle>;

/// A hold handed to a waiter, to be released if the waiter never heard.
#[derive(Debug, Clone)]
pub struct Grant {
    pub lock: LockId<'static>,
    pub owner: FieldName,
    /// Which side of a read-write lock; `None` for an exclusive lock.
    pub side: Option<Side>,
    /// The permits a semaphore caller was given; `None` for a lock.
    pub permits: Option<u32>,
    /// The lease the grant set.
    pub lease_ms: i64,
    /// KEEPALIVE (the waiter's connection) or SESSION (the session's): the
    /// server renews the hold while that connection lives, once the waiter
    /// hears of the grant.
    pub keepalive: Option<KeepAlive>,
    /// The owner held the lock already (a multi-lock caller's key it held,
    /// the other side of a read-write lock): a binding it has stays.
    pub reentry: bool,
}

/// What a blocked caller is told when it is unblocked.
#[derive(Debug)]
pub enum BlockedReply {
    /// The lock, with the reply (hold count or fencing token).
    Granted(Grant, i64),
    /// A multi-lock caller's keys, with a reply per key.
    GrantedAll(Vec<Grant>, Vec<i64>),
    /// An error line (`CODE message`) instead of the lock.
    Failed(String),
    /// Its BLOCK time ran out: nil.
    TimedOut,
}

static REGISTRY: LazyLock<Mutex<Registry>> = LazyLock::new(Mutex::default);
/// Locks with a queue, as of the last time the registry was let go.
static QUEUED_LOCKS: AtomicUsize = AtomicUsize::new(0);

/// Whether anyone waits for any lock.
pub fn anyone_waits() -> bool {
    QUEUED_LOCKS.load(Relaxed) > 0
}

/// Runs `rules` on the lock's wait queue; without waiters anywhere, on an
/// empty queue without touching the registry.
pub fn with_queue<R>(
    lock: &LockId<'_>,
    rules: impl FnOnce(&mut Fifo<Waiter>) -> R,
) -> Result<R, LockError> {
    if anyone_waits() {
        Ok(registry()?.with_queue(lock, rules))
    } else {
        Ok(rules(&mut Fifo::default()))
    }
}

/// The registry, held until dropped.
pub struct RegistryGuard(MutexGuard<'static, Registry>);

impl Deref for RegistryGuard {
    type Target = Registry;
    fn deref(&self) -> &Registry {
        &self.0
    }
}

impl DerefMut for RegistryGuard {
    fn deref_mut(&mut self) -> &mut Registry {
        &mut self.0
    }
}

impl Drop for RegistryGuard {
    fn drop(&mut self) {
        QUEUED_LOCKS.store(self.0.lock_count(), Relaxed);
    }
}

/// The registry, or `BUSY` if it is already held further up this same call
/// stack (a bug, but one that must not deadlock or crash the server).
pub fn registry() -> Result<RegistryGuard, LockError> {
    sync::try_lock(&REGISTRY)
        .map(RegistryGuard)
        .ok_or_else(LockError::busy)
}
