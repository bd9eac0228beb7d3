//! The blocking face: the same session, locks and holds for code without an async
//! runtime. A [`Session`] runs the library on a small tokio runtime of its own (one worker
//! thread: the session connection's pings, re-attaches and loss messages); each call
//! blocks the calling thread until it is done. Do not call it from inside an async
//! runtime (tokio panics on a nested `block_on`): use the async face there.
//!
//! ```no_run
//! use std::time::Duration;
//! use redis_lock_client::{blocking::Session, Wait};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let client = redis::Client::open("redis://127.0.0.1/")?;
//! let session = Session::open(&client)?;
//! let hold = session.lock("invoice:7").acquire(Wait::For(Duration::from_secs(5)))?;
//! println!("token {}", hold.token());
//! hold.release()?;
//! # Ok(()) }
//! ```

use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Runtime;
use tokio::sync::watch;

use crate::error::Result;
use crate::proto::{Kind, Leader, Lost, Wait};
use crate::session::{Options, Target};

/// A session (see [`crate::Session`]) with its own runtime.
pub struct Session {
    rt: Arc<Runtime>,
    session: Option<crate::Session>,
}

impl Session {
    /// Opens a session with default [`Options`] on `target`.
    pub fn open(target: impl Into<Target>) -> Result<Session> {
        Session::open_with(target, Options::default())
    }

    pub fn open_with(target: impl Into<Target>, opts: Options) -> Result<Session> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("redis-lock-session")
            .enable_all()
            .build()
            .map_err(|e| crate::Error::Other(e.into()))?;
        let target = target.into();
        let session = rt.block_on(crate::Session::open_with(target, opts))?;
        Ok(Session {
            rt: Arc::new(rt),
            session: Some(session),
        })
    }

    fn s(&self) -> &crate::Session {
        self.session.as_ref().expect("open until dropped")
    }

    pub fn lock(&self, key: impl Into<String>) -> Lock {
        Lock {
            rt: self.rt.clone(),
            lock: self.s().lock(key),
        }
    }

    /// A read-write lock: `.read()` and `.write()`.
    pub fn rwlock(&self, key: impl Into<String>) -> RwLock {
        RwLock {
            rt: self.rt.clone(),
            lock: self.s().rwlock(key),
        }
    }

    pub fn multi_lock<I, S>(&self, keys: I) -> Lock
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Lock {
            rt: self.rt.clone(),
            lock: self.s().multi_lock(keys),
        }
    }

    /// A semaphore (see [`crate::Semaphore`]).
    pub fn semaphore(&self, key: impl Into<String>) -> Semaphore {
        Semaphore {
            rt: self.rt.clone(),
            sem: self.s().semaphore(key),
        }
    }

    /// An election (see [`crate::Election`]).
    pub fn election(&self, key: impl Into<String>) -> Election {
        Election {
            rt: self.rt.clone(),
            election: self.s().election(key),
        }
    }

    /// A count-down latch (see [`crate::Latch`]).
    pub fn latch(&self, key: impl Into<String>) -> Latch {
        Latch {
            rt: self.rt.clone(),
            latch: self.s().latch(key),
        }
    }

    pub fn token(&self) -> &str {
        self.s().token()
    }

    pub fn lost(&self) -> watch::Receiver<Option<Lost>> {
        self.s().lost()
    }

    pub fn holds(&self) -> usize {
        self.s().holds()
    }

    /// Releases every hold and closes the session connections.
    pub fn close(mut self) {
        if let Some(s) = self.session.take() {
            self.rt.block_on(s.close());
        }
    }
}

impl Drop for Session {
    /// As [`Session::close`], blocking.
    fn drop(&mut self) {
        if let Some(s) = self.session.take() {
            self.rt.block_on(s.close());
        }
    }
}

/// A lock (see [`crate::Lock`]).
#[derive(Clone)]
pub struct Lock {
    rt: Arc<Runtime>,
    lock: crate::Lock,
}

impl Lock {
    pub fn lease(self, lease: Duration) -> Lock {
        Lock {
            rt: self.rt,
            lock: self.lock.lease(lease),
        }
    }

    /// Acquires, waiting as `wait` says; [`crate::Error::Busy`] if not acquired.
    pub fn acquire(&self, wait: Wait) -> Result<Hold> {
        let hold = self.rt.block_on(self.lock.acquire(wait))?;
        Ok(Hold {
            rt: self.rt.clone(),
            hold: Some(hold),
        })
    }

    /// Acquires as the owner of `hold`: see [`crate::Lock::acquire_as`] ([`crate::Error::Deadlock`]
    /// when the wait would close a cycle of waits).
    pub fn acquire_as(&self, hold: &Hold, wait: Wait) -> Result<Hold> {
        let hold = self.rt.block_on(self.lock.acquire_as(hold.h(), wait))?;
        Ok(Hold {
            rt: self.rt.clone(),
            hold: Some(hold),
        })
    }

    pub fn kind(&self) -> Kind {
        self.lock.kind()
    }
}

/// A read-write lock.
#[derive(Clone)]
pub struct RwLock {
    rt: Arc<Runtime>,
    lock: crate::RwLock,
}

impl RwLock {
    pub fn read(&self) -> Lock {
        Lock {
            rt: self.rt.clone(),
            lock: self.lock.read(),
        }
    }

    pub fn write(&self) -> Lock {
        Lock {
            rt: self.rt.clone(),
            lock: self.lock.write(),
        }
    }
}

/// A hold (see [`crate::Hold`]). Dropped unreleased, it is released before `drop` returns
/// (errors ignored).
pub struct Hold {
    rt: Arc<Runtime>,
    hold: Option<crate::Hold>,
}

impl Hold {
    fn h(&self) -> &crate::Hold {
        self.hold.as_ref().expect("held until released")
    }

    pub fn token(&self) -> i64 {
        self.h().token()
    }

    pub fn tokens(&self) -> &[i64] {
        self.h().tokens()
    }

    pub fn owner(&self) -> &str {
        self.h().owner()
    }

    pub fn keys(&self) -> &[String] {
        self.h().keys()
    }

    /// `Some(Lost)` once lost; `borrow()` it, or block on it with [`Hold::wait_lost`].
    pub fn lost(&self) -> watch::Receiver<Option<Lost>> {
        self.h().lost()
    }

    pub fn is_lost(&self) -> bool {
        self.h().is_lost()
    }

    /// Blocks until the hold is lost or `timeout` passes.
    pub fn wait_lost(&self, timeout: Duration) -> Option<Lost> {
        let mut rx = self.h().lost();
        self.rt.block_on(async {
            tokio::time::timeout(timeout, rx.wait_for(Option::is_some))
                .await
                .ok()
                .and_then(|r| r.ok().and_then(|v| v.clone()))
        })
    }

    pub fn release(mut self) -> Result<()> {
        let hold = self.hold.take().expect("held until released");
        self.rt.block_on(hold.release())
    }

    pub fn extend(&mut self, lease: Duration) -> Result<()> {
        let rt = self.rt.clone();
        let hold = self.hold.as_mut().expect("held until released");
        rt.block_on(hold.extend(lease))
    }

    pub fn reenter(&self) -> Result<Hold> {
        let hold = self.rt.block_on(self.h().reenter())?;
        Ok(Hold {
            rt: self.rt.clone(),
            hold: Some(hold),
        })
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        if let Some(hold) = self.hold.take() {
            if tokio::runtime::Handle::try_current().is_ok() {
                drop(hold); // inside a runtime: released in the background
            } else {
                let _ = self.rt.block_on(hold.release());
            }
        }
    }
}

/// A semaphore (see [`crate::Semaphore`]).
#[derive(Clone)]
pub struct Semaphore {
    rt: Arc<Runtime>,
    sem: crate::Semaphore,
}

impl Semaphore {
    pub fn lease(self, lease: Duration) -> Semaphore {
        Semaphore {
            rt: self.rt,
            sem: self.sem.lease(lease),
        }
    }

    pub fn key(&self) -> &str {
        self.sem.key()
    }

    pub fn init(&self, permits: u32) -> Result<bool> {
        self.rt.block_on(self.sem.init(permits))
    }

    pub fn add(&self, delta: i64) -> Result<i64> {
        self.rt.block_on(self.sem.add(delta))
    }

    pub fn acquire(&self, wait: Wait) -> Result<Permits> {
        self.acquire_many(1, wait)
    }

    pub fn acquire_many(&self, n: u32, wait: Wait) -> Result<Permits> {
        let permits = self.rt.block_on(self.sem.acquire_many(n, wait))?;
        Ok(Permits {
            rt: self.rt.clone(),
            permits: Some(permits),
        })
    }

    pub fn total(&self) -> Result<Option<i64>> {
        self.rt.block_on(self.sem.total())
    }

    pub fn available(&self) -> Result<i64> {
        self.rt.block_on(self.sem.available())
    }
}

/// Permits (see [`crate::Permits`]). Dropped unreleased, they are released before `drop`
/// returns (errors ignored).
pub struct Permits {
    rt: Arc<Runtime>,
    permits: Option<crate::Permits>,
}

impl Permits {
    fn p(&self) -> &crate::Permits {
        self.permits.as_ref().expect("held until released")
    }

    pub fn count(&self) -> i64 {
        self.p().count()
    }

    pub fn key(&self) -> &str {
        self.p().key()
    }

    pub fn owner(&self) -> &str {
        self.p().owner()
    }

    pub fn lost(&self) -> watch::Receiver<Option<Lost>> {
        self.p().lost()
    }

    pub fn is_lost(&self) -> bool {
        self.p().is_lost()
    }

    /// Blocks until the permits are lost or `timeout` passes.
    pub fn wait_lost(&self, timeout: Duration) -> Option<Lost> {
        let mut rx = self.p().lost();
        self.rt.block_on(async {
            tokio::time::timeout(timeout, rx.wait_for(Option::is_some))
                .await
                .ok()
                .and_then(|r| r.ok().and_then(|v| v.clone()))
        })
    }

    pub fn release(mut self) -> Result<()> {
        let permits = self.permits.take().expect("held until released");
        self.rt.block_on(permits.release())
    }

    pub fn extend(&mut self, lease: Duration) -> Result<()> {
        let rt = self.rt.clone();
        let permits = self.permits.as_mut().expect("held until released");
        rt.block_on(permits.extend(lease))
    }
}

impl Drop for Permits {
    fn drop(&mut self) {
        if let Some(permits) = self.permits.take() {
            if tokio::runtime::Handle::try_current().is_ok() {
                drop(permits); // inside a runtime: released in the background
            } else {
                let _ = self.rt.block_on(permits.release());
            }
        }
    }
}

/// A count-down latch (see [`crate::Latch`]).
#[derive(Clone)]
pub struct Latch {
    rt: Arc<Runtime>,
    latch: crate::Latch,
}

impl Latch {
    pub fn key(&self) -> &str {
        self.latch.key()
    }

    pub fn init(&self, count: u64, ttl: Option<Duration>) -> Result<bool> {
        self.rt.block_on(self.latch.init(count, ttl))
    }

    pub fn count_down(&self, n: u64) -> Result<i64> {
        self.rt.block_on(self.latch.count_down(n))
    }

    pub fn count(&self) -> Result<i64> {
        self.rt.block_on(self.latch.count())
    }

    /// Blocks until the latch opens (`true`) or the wait runs out (`false`);
    /// [`crate::Error::Gone`] if it expired or was deleted first.
    pub fn wait(&self, wait: Wait) -> Result<bool> {
        self.rt.block_on(self.latch.wait(wait))
    }
}

/// An election (see [`crate::Election`]).
#[derive(Clone)]
pub struct Election {
    rt: Arc<Runtime>,
    election: crate::Election,
}

impl Election {
    pub fn value(self, value: impl Into<String>) -> Election {
        Election {
            rt: self.rt,
            election: self.election.value(value),
        }
    }

    pub fn lease(self, lease: Duration) -> Election {
        Election {
            rt: self.rt,
            election: self.election.lease(lease),
        }
    }

    pub fn key(&self) -> &str {
        self.election.key()
    }

    /// Campaigns as a new candidate until it leads, waiting as `wait` says.
    pub fn campaign(&self, wait: Wait) -> Result<Leadership> {
        let leadership = self.rt.block_on(self.election.campaign(wait))?;
        Ok(Leadership {
            rt: self.rt.clone(),
            leadership: Some(leadership),
        })
    }

    pub fn leader(&self) -> Result<Option<Leader>> {
        self.rt.block_on(self.election.leader())
    }

    pub fn observe(&self, last_term: i64, wait: Wait) -> Result<Option<Leader>> {
        self.rt.block_on(self.election.observe(last_term, wait))
    }
}

/// A leadership (see [`crate::Leadership`]). Dropped unresigned, it is resigned before
/// `drop` returns (errors ignored).
pub struct Leadership {
    rt: Arc<Runtime>,
    leadership: Option<crate::Leadership>,
}

impl Leadership {
    fn l(&self) -> &crate::Leadership {
        self.leadership.as_ref().expect("leading until resigned")
    }

    pub fn term(&self) -> i64 {
        self.l().term()
    }

    pub fn key(&self) -> &str {
        self.l().key()
    }

    pub fn candidate(&self) -> &str {
        self.l().candidate()
    }

    pub fn lost(&self) -> watch::Receiver<Option<Lost>> {
        self.l().lost()
    }

    /// Signalled lost, or past its local deadline.
    pub fn is_lost(&self) -> bool {
        self.l().is_lost()
    }

    /// Blocks until the leadership is lost or `timeout` passes.
    pub fn wait_lost(&self, timeout: Duration) -> Option<Lost> {
        let mut rx = self.l().lost();
        self.rt.block_on(async {
            tokio::time::timeout(timeout, rx.wait_for(Option::is_some))
                .await
                .ok()
                .and_then(|r| r.ok().and_then(|v| v.clone()))
        })
    }

    pub fn proclaim(&self, value: &str) -> Result<()> {
        self.rt.block_on(self.l().proclaim(value))
    }

    pub fn resign(mut self) -> Result<bool> {
        let leadership = self.leadership.take().expect("leading until resigned");
        self.rt.block_on(leadership.resign())
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        if let Some(leadership) = self.leadership.take() {
            if tokio::runtime::Handle::try_current().is_ok() {
                drop(leadership); // inside a runtime: resigned in the background
            } else {
                let _ = self.rt.block_on(leadership.resign());
            }
        }
    }
}
