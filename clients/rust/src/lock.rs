//! Locks: exclusive ([`Lock`]), read-write ([`RwLock`]) and multi-key ([`MultiLock`]), and
//! their constructors on [`Session`]. Their holds, and the acquire that takes them, are the
//! core's ([`crate::session`]): a semaphore's permits and a leadership are holds too.

use std::sync::Arc;
use std::time::Duration;

use redis::RedisError;

use crate::error::{Error, Result};
use crate::proto::{Kind, Wait};
use crate::session::{acquire, Hold, Inner, Of, Session};

/// A lock of the session: exclusive on one key, one side of a read-write lock, or exclusive
/// on several keys at once (a multi-lock). Cheap to clone; each [`Lock::acquire`] is a new
/// owner (`<session-token>:<n>`), so two acquires of the same `Lock` exclude each other.
/// Re-entry is explicit: [`Hold::reenter`].
#[derive(Clone)]
pub struct Lock {
    inner: Arc<Inner>,
    keys: Vec<String>,
    kind: Kind,
    lease: Option<Duration>,
}

/// An exclusive lock on several keys (`LOCK.MACQUIRE`); see [`crate::Session::multi_lock`].
pub type MultiLock = Lock;

impl Lock {
    pub(crate) fn new(inner: Arc<Inner>, keys: Vec<String>, kind: Kind) -> Lock {
        Lock {
            inner,
            keys,
            kind,
            lease: None,
        }
    }

    /// This lock with another lease than the session's: at least the server's
    /// `lock_keepalive_min_lease_ms` (704 ms at `hz 10`), else the acquire is
    /// [`Error::LeaseTooShort`] before anything is sent.
    pub fn lease(mut self, lease: Duration) -> Lock {
        self.lease = Some(lease);
        self
    }

    pub fn keys(&self) -> &[String] {
        &self.keys
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Acquires the lock, waiting in the server's queue as `wait` says: [`Error::Busy`] if
    /// not acquired. Dropping the future while it waits (a `tokio::time::timeout`, a
    /// `select!`) closes its waiting connection, ends the wait in the server (`LOCK.CANCEL`)
    /// and releases a grant that crossed the cancel, on the runtime. If the waiting
    /// connection breaks, the wait is cleaned up the same way and queued again as a fresh
    /// owner for the time left (the place in line is lost); [`Error::Unavailable`] if the
    /// server cannot be reached for it.
    pub async fn acquire(&self, wait: Wait) -> Result<Hold> {
        self.acquire_owned(wait, None).await
    }

    /// The acquire, as a fresh owner or as `owner`.
    async fn acquire_owned(&self, wait: Wait, owner: Option<String>) -> Result<Hold> {
        let lease = self.lease.unwrap_or(self.inner.opts.lease);
        let of = Of::Lock(self.kind);
        acquire(&self.inner, self.keys.clone(), of, lease, wait, owner, None).await
    }

    /// Acquires the lock as the owner of `hold` (a live hold of another lock of this
    /// session) instead of a fresh owner, waiting as `wait` says. The server then sees one
    /// owner holding `hold`'s keys while it waits for this lock, and refuses a wait that
    /// would close a cycle of waits at once with [`Error::Deadlock`] (its message names each
    /// step: owner, key, next owner); `hold` is kept. The new hold is released on its own.
    /// Refused (`Error::Other`) for a hold of another session or of a semaphore, and when the
    /// owner already holds one of this lock's keys (that is [`Hold::reenter`]).
    pub async fn acquire_as(&self, hold: &Hold, wait: Wait) -> Result<Hold> {
        let (session, id) = hold.session();
        if !Arc::ptr_eq(&self.inner, session) || !matches!(hold.of(), Of::Lock(_)) {
            return Err(Error::Other(RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "acquire_as needs a hold of a lock of the same session",
            ))));
        }
        if let Some(e) = hold.lost_error() {
            return Err(e);
        }
        if !self.inner.holds_entry(id) {
            return Err(Error::NotOwner);
        }
        if self.inner.owner_holds_any(hold.owner(), &self.keys) {
            // A re-entry (Hold::reenter), not a second lock: and a cancelled wait's cleanup
            // (a release as this owner) must not drop a hold it already has.
            return Err(Error::Other(RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "acquire_as: the owner already holds one of these keys (use Hold::reenter)",
            ))));
        }
        self.acquire_owned(wait, Some(hold.owner().to_string()))
            .await
    }
}

/// A read-write lock: any number of readers, or one writer, first come first served.
#[derive(Clone)]
pub struct RwLock {
    inner: Arc<Inner>,
    key: String,
}

impl RwLock {
    pub(crate) fn new(inner: Arc<Inner>, key: String) -> RwLock {
        RwLock { inner, key }
    }

    /// The read side (`LOCK.RACQUIRE`).
    pub fn read(&self) -> Lock {
        Lock::new(self.inner.clone(), vec![self.key.clone()], Kind::Read)
    }

    /// The write side (`LOCK.WACQUIRE`).
    pub fn write(&self) -> Lock {
        Lock::new(self.inner.clone(), vec![self.key.clone()], Kind::Write)
    }
}

// The locks' constructors live here, not in the core: the session does not know its objects.
impl Session {
    /// An exclusive lock on `key`.
    pub fn lock(&self, key: impl Into<String>) -> Lock {
        Lock::new(self.inner.clone(), vec![key.into()], Kind::Exclusive)
    }

    /// A read-write lock on `key`: [`RwLock::read`], [`RwLock::write`].
    pub fn rwlock(&self, key: impl Into<String>) -> RwLock {
        RwLock::new(self.inner.clone(), key.into())
    }

    /// An exclusive lock on every key at once (`LOCK.MACQUIRE`): all or none, waiting as
    /// one unit. In a cluster the keys must share a hash tag (`{order:7}:a`, `{order:7}:b`).
    pub fn multi_lock<I, S>(&self, keys: I) -> Lock
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Lock::new(
            self.inner.clone(),
            keys.into_iter().map(Into::into).collect(),
            Kind::Exclusive,
        )
    }
}
