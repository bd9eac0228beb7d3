//! The core: the session and everything the objects of a session (locks, semaphores, latches,
//! elections: the modules `lock`, `sem`, `election`, on top of this one) share. It imports
//! none of them; each adds its own constructor to [`Session`] (`session.lock(..)`,
//! `session.semaphore(..)`, ...) in an `impl Session` block of its own module.
//!
//! Its parts, each importing only those below it:
//! - `target`: where the session connects ([`Target`]) and its settings ([`Options`]);
//! - `state`: the shared state ([`Inner`]), what a hold is of ([`Of`]), a kept hold;
//! - `conn`: the command connection, the waiting connections' pool, reaching a node;
//! - `wait`: waits on a dedicated connection, their cancel and re-queue cleanup;
//! - `registry`: the kept holds, their re-attach and the loss dispatch;
//! - `keeper`: each node's session connection and the task that keeps it;
//! - `hold`: a [`Hold`] and the acquire that makes one (for every object);
//! - this file: the public [`Session`] (open, close, its accessors).

mod conn;
mod hold;
mod keeper;
mod registry;
mod state;
mod target;
mod wait;

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::watch;

pub(crate) use hold::acquire;
pub use hold::Hold;
use state::{lock, protocol_error, Entry};
pub(crate) use state::{Inner, Of};
#[cfg(feature = "cluster")]
use target::Backend;
pub use target::{Options, Target};

use crate::error::{Error, Result};
use crate::proto::Lost;

/// A session: one dedicated session connection per server holding its locks, every hold
/// bound to it (`SESSION token`). See the crate documentation.
pub struct Session {
    pub(crate) inner: Arc<Inner>,
}

impl Session {
    /// Opens a session with default [`Options`] (30 s lease) on `target`: a
    /// `&redis::Client`, or a [`Target`] (cluster, Sentinel).
    pub async fn open(target: impl Into<Target>) -> Result<Session> {
        Session::open_with(target, Options::default()).await
    }

    /// Opens a session with `opts`.
    pub async fn open_with(target: impl Into<Target>, opts: Options) -> Result<Session> {
        let Target(backend) = target.into();
        #[cfg(feature = "cluster")]
        let cluster = match &backend {
            Backend::Cluster { client, .. } => Some(client.get_async_connection().await?),
            _ => None,
        };
        let (shutdown, _) = watch::channel(false);
        let (lost, _) = watch::channel(None);
        let (ping_every, _) = watch::channel(opts.ping_interval);
        let inner = Arc::new(Inner {
            token: random_token(),
            opts,
            handle: Handle::current(),
            backend,
            cmd: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(()),
            #[cfg(feature = "cluster")]
            cluster,
            slots: Mutex::new(Vec::new()),
            pool: Mutex::new(HashMap::new()),
            holds: Mutex::new(HashMap::new()),
            nodes: Mutex::new(HashMap::new()),
            session_open: tokio::sync::Mutex::new(()),
            counter: AtomicU64::new(0),
            generation: AtomicU64::new(0),
            lease_floor_ms: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            shutdown,
            lost,
            ping_every,
        });
        if inner.is_cluster() {
            inner.refresh_slots().await;
            if lock(&inner.slots).is_empty() {
                return Err(Error::Unavailable(protocol_error(
                    "no slot map from CLUSTER SLOTS",
                )));
            }
            #[cfg(feature = "cluster")]
            inner.read_cluster_lease_floor().await?;
            inner.check_lease(inner.opts.lease)?;
        } else {
            inner.ensure_session("").await?;
        }
        Ok(Session { inner })
    }

    /// The session's token (`LOCK.SESSION`); owners are `<token>:<n>`.
    pub fn token(&self) -> &str {
        &self.inner.token
    }

    /// The lease of every hold.
    pub fn lease(&self) -> Duration {
        self.inner.opts.lease
    }

    /// The latest hold this session lost (any hold), as a watch channel.
    pub fn lost(&self) -> watch::Receiver<Option<Lost>> {
        self.inner.lost.subscribe()
    }

    /// How many holds the session keeps now.
    pub fn holds(&self) -> usize {
        lock(&self.inner.holds).len()
    }

    /// Releases every hold and closes the session connections.
    pub async fn close(self) {
        self.inner.close().await;
    }
}

impl Drop for Session {
    /// Releases every hold (on the runtime, best effort) and closes the session connections.
    fn drop(&mut self) {
        if self.inner.is_closed() {
            return;
        }
        let inner = self.inner.clone();
        self.inner.handle.spawn(async move { inner.close().await });
    }
}

/// A random 128-bit id, hex: the standard library's per-process random hash keys mixed
/// with the time, the process id and a counter.
fn random_token() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let mut words = [0u64; 2];
    for (i, w) in words.iter_mut().enumerate() {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(nanos);
        h.write_u32(std::process::id());
        h.write_u64(N.fetch_add(1, Ordering::Relaxed));
        h.write_usize(i);
        *w = h.finish();
    }
    format!("{:016x}{:016x}", words[0], words[1])
}

impl Inner {
    /// Releases every hold, stops the session connections.
    pub async fn close(&self) {
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        let holds: Vec<Entry> = lock(&self.holds).drain().map(|(_, e)| e).collect();
        for e in &holds {
            let _ = self
                .command(
                    &e.of.release(&e.keys, &e.owner),
                    e.keys.first().map(String::as_str),
                )
                .await;
        }
        self.shutdown.send_replace(true);
        lock(&self.pool).clear();
        *lock(&self.cmd) = None;
    }
}
