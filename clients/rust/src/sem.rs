//! Semaphores (`SEM.*`) and count-down latches (`LATCH.*`), and their constructors on
//! [`Session`]. A semaphore's permits are a hold of the core ([`crate::session`]).

use std::sync::Arc;
use std::time::Duration;

use redis::Value;
use tokio::sync::watch;

use crate::error::{unexpected, Result};
use crate::proto::{self, Lost, Wait};
use crate::session::{acquire, Hold, Inner, Of, Session};

/// A semaphore of the session: at most its total of permits held at once, across every
/// client (Redisson's `RSemaphore` / `RPermitExpirableSemaphore` layout). Permits are held as
/// locks are: bound to the session (`SESSION token`), a fresh owner per acquisition, waited
/// for in the server's first-come-first-served queue, re-attached after a reconnect, and
/// signalled when lost. Cheap to clone.
#[derive(Clone)]
pub struct Semaphore {
    inner: Arc<Inner>,
    key: String,
    lease: Option<Duration>,
}

impl Semaphore {
    pub(crate) fn new(inner: Arc<Inner>, key: String) -> Semaphore {
        Semaphore {
            inner,
            key,
            lease: None,
        }
    }

    /// This semaphore's permits with another lease than the session's (at least the
    /// server's `lock_keepalive_min_lease_ms`, else [`Error::LeaseTooShort`] at the acquire).
    ///
    /// [`Error::LeaseTooShort`]: crate::Error::LeaseTooShort
    pub fn lease(mut self, lease: Duration) -> Semaphore {
        self.lease = Some(lease);
        self
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    /// Sets the total of permits once (`SEM.INIT`): `true` if set, `false` if the semaphore
    /// exists already (nothing changed; see [`Semaphore::total`]).
    pub async fn init(&self, permits: u32) -> Result<bool> {
        let v = self.call(&proto::sem_init(&self.key, permits)).await?;
        proto::integer(&v)
            .map(|n| n == 1)
            .map_err(|_| unexpected("SEM.INIT", &v))
    }

    /// Adds `delta` permits (`SEM.ADD`; negative takes them away, held ones stay held): the
    /// permits available now.
    pub async fn add(&self, delta: i64) -> Result<i64> {
        let v = self.call(&proto::sem_add(&self.key, delta)).await?;
        proto::integer(&v).map_err(|_| unexpected("SEM.ADD", &v))
    }

    /// Takes one permit, waiting as `wait` says: [`Error::Busy`] if not taken. Dropping the
    /// future while it waits ends the wait in the server (`LOCK.CANCEL`) and gives back a
    /// permit that crossed the cancel (`SEM.RELEASE`), on the runtime.
    ///
    /// [`Error::Busy`]: crate::Error::Busy
    pub async fn acquire(&self, wait: Wait) -> Result<Permits> {
        self.acquire_many(1, wait).await
    }

    /// Takes `n` permits at once (all or none; a caller asking for many is never overtaken
    /// by later callers asking for fewer).
    pub async fn acquire_many(&self, n: u32, wait: Wait) -> Result<Permits> {
        let lease = self.lease.unwrap_or(self.inner.opts.lease);
        let hold = acquire(
            &self.inner,
            vec![self.key.clone()],
            Of::Semaphore { permits: n },
            lease,
            wait,
            None,
            None,
        )
        .await?;
        Ok(Permits { hold })
    }

    /// The total of permits (`SEM.INFO` `permits`: available plus held by owners), `None`
    /// when the semaphore does not exist.
    pub async fn total(&self) -> Result<Option<i64>> {
        let v = self.call(&proto::sem_info(&self.key)).await?;
        Ok(proto::int_field(&v, "permits"))
    }

    /// The permits available now (0 when the semaphore does not exist).
    pub async fn available(&self) -> Result<i64> {
        let v = self.call(&proto::sem_info(&self.key)).await?;
        Ok(proto::int_field(&v, "available").unwrap_or(0))
    }

    async fn call(&self, args: &[String]) -> Result<Value> {
        self.inner.check_open()?;
        Ok(self.inner.command(args, Some(&self.key)).await?)
    }
}

/// Permits held by one owner of a semaphore. The server keeps them while the session lives;
/// [`Permits::lost`] says when they end otherwise. Release them with [`Permits::release`];
/// dropped unreleased, they are released in the background (as a [`Hold`]).
#[derive(Debug)]
pub struct Permits {
    hold: Hold,
}

impl Permits {
    /// How many permits the owner holds (the `SEM.ACQUIRE` reply).
    pub fn count(&self) -> i64 {
        self.hold.token()
    }

    pub fn key(&self) -> &str {
        &self.hold.keys()[0]
    }

    /// The owner the permits were granted to (`<session-token>:<n>`).
    pub fn owner(&self) -> &str {
        self.hold.owner()
    }

    /// `Some(Lost)` once the permits are lost: gone (the semaphore deleted, its lease ended
    /// on a stalled server), not held at a re-attach (`NOTOWNER` or `EXPIRED`), or the session
    /// connection down longer than the lease.
    pub fn lost(&self) -> watch::Receiver<Option<Lost>> {
        self.hold.lost()
    }

    pub fn is_lost(&self) -> bool {
        self.hold.is_lost()
    }

    /// Gives every permit back (`SEM.RELEASE key owner`). [`Error::Lost`], or
    /// [`Error::NotOwner`] / [`Error::Expired`], if they were no longer held.
    ///
    /// [`Error::Lost`]: crate::Error::Lost
    /// [`Error::NotOwner`]: crate::Error::NotOwner
    /// [`Error::Expired`]: crate::Error::Expired
    pub async fn release(self) -> Result<()> {
        self.hold.release().await
    }

    /// Sets a new lease from now on every permit (`SEM.RENEW ... SESSION token`).
    pub async fn extend(&mut self, lease: Duration) -> Result<()> {
        self.hold.extend(lease).await
    }
}

/// A count-down latch (Redisson's `RCountDownLatch` layout): open once its count reaches
/// zero. Waiting is done by the server (`LATCH.AWAIT ... BLOCK`) on a dedicated waiting
/// connection; a latch holds nothing, so dropping a wait only closes that connection.
#[derive(Clone)]
pub struct Latch {
    inner: Arc<Inner>,
    key: String,
}

impl Latch {
    pub(crate) fn new(inner: Arc<Inner>, key: String) -> Latch {
        Latch { inner, key }
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    /// Sets the count if the latch does not exist (`LATCH.INIT`), with an expiry if `ttl`:
    /// `true` if set, `false` if it exists already.
    pub async fn init(&self, count: u64, ttl: Option<Duration>) -> Result<bool> {
        let v = self.call(&proto::latch_init(&self.key, count, ttl)).await?;
        proto::integer(&v)
            .map(|n| n == 1)
            .map_err(|_| unexpected("LATCH.INIT", &v))
    }

    /// Counts down by `n` (`LATCH.COUNTDOWN`): the count left, 0 when open (also for a latch
    /// that does not exist).
    pub async fn count_down(&self, n: u64) -> Result<i64> {
        let v = self.call(&proto::latch_count_down(&self.key, n)).await?;
        proto::integer(&v).map_err(|_| unexpected("LATCH.COUNTDOWN", &v))
    }

    /// The count now (`LATCH.INFO`), 0 when open (the latch does not exist).
    pub async fn count(&self) -> Result<i64> {
        let v = self.call(&proto::latch_info(&self.key)).await?;
        Ok(proto::int_field(&v, "count").unwrap_or(0))
    }

    /// Waits as `wait` says for the latch to open: `true` once open, `false` if the wait ran
    /// out (`Wait::No`: at once). [`Error::Gone`] when the latch expired or was deleted
    /// before reaching zero.
    ///
    /// [`Error::Gone`]: crate::Error::Gone
    pub async fn wait(&self, wait: Wait) -> Result<bool> {
        self.inner.check_open()?;
        let v = if wait.block_ms().is_none() {
            let args = proto::latch_await(&self.key, wait);
            self.inner.command(&args, Some(&self.key)).await?
        } else {
            self.inner
                .waiting_call(&self.key, wait, "LATCH.AWAIT", |left| {
                    proto::latch_await(&self.key, left)
                })
                .await?
        };
        proto::latch_opened(&v).map_err(|_| unexpected("LATCH.AWAIT", &v))
    }

    async fn call(&self, args: &[String]) -> Result<Value> {
        self.inner.check_open()?;
        Ok(self.inner.command(args, Some(&self.key)).await?)
    }
}

// The constructors of semaphores and latches live here: the core does not know its objects.
impl Session {
    /// A semaphore on `key` (`SEM.*`): [`Semaphore::init`] sets its total once,
    /// [`Semaphore::acquire`] takes a permit bound to this session.
    pub fn semaphore(&self, key: impl Into<String>) -> Semaphore {
        Semaphore::new(self.inner.clone(), key.into())
    }

    /// A count-down latch on `key` (`LATCH.*`).
    pub fn latch(&self, key: impl Into<String>) -> Latch {
        Latch::new(self.inner.clone(), key.into())
    }
}
