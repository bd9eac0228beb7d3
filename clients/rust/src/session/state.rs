//! The session's state, shared by every part of the core and every object of the session:
//! [`Inner`] (its fields, the lease floor, owners, the slot map), what a hold is of ([`Of`],
//! with the commands that release and renew it), a kept hold ([`Entry`]), a watched
//! connection ([`Conn`]) and a node's session-connection signals ([`NodeState`]). The
//! behaviour lives beside it, in `impl Inner` blocks of the files that own each part
//! (connections, waits, the hold registry, the session connection's task): those import
//! this file, and this file imports none of them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
#[cfg(feature = "cluster")]
use redis::cluster_async::ClusterConnection;
use redis::{RedisError, Value};
use tokio::runtime::Handle;
use tokio::sync::watch;

use super::target::{Backend, Options};
use crate::error::{Error, Result};
use crate::proto::{self, Binding, Kind, Lost, Wait};

/// What a hold is of: a lock (of some kind), or permits of a semaphore.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Of {
    Lock(Kind),
    /// `permits`: how many an acquire asks for.
    Semaphore {
        permits: u32,
    },
    /// A leadership of an election (`ELECT.*`): the owner is the candidate. Not re-attached
    /// after a reconnect: a leadership is lost when its session connection breaks.
    Election,
}

impl Of {
    /// What drops the owner's hold: `LOCK.RELEASE` / `LOCK.MRELEASE`, or `SEM.RELEASE key
    /// owner` (all its permits).
    pub fn release(self, keys: &[String], owner: &str) -> Vec<String> {
        match self {
            Of::Lock(kind) => proto::release(keys, owner, kind),
            Of::Semaphore { .. } => {
                proto::sem_release(keys.first().map_or("", String::as_str), owner, None)
            }
            Of::Election => proto::elect_resign(keys.first().map_or("", String::as_str), owner),
        }
    }

    /// A new lease and binding: `LOCK.RENEW` or `SEM.RENEW`.
    pub fn renew(
        self,
        key: &str,
        owner: &str,
        lease: Duration,
        binding: Binding<'_>,
    ) -> Vec<String> {
        match self {
            Of::Lock(_) => proto::renew(key, owner, lease, binding),
            Of::Semaphore { .. } => proto::sem_renew(key, owner, lease, binding),
            // The leader's re-attach (a new lease, the binding moved); see Of::Election.
            Of::Election => proto::elect_campaign(key, owner, None, lease, binding, Wait::No),
        }
    }

    /// Whether the code word of a release's or renewal's error says the owner holds nothing
    /// there any more: `NOTOWNER`, and for a semaphore `EXPIRED` too.
    pub fn not_held(self, code: Option<&str>) -> bool {
        match self {
            Of::Lock(_) | Of::Election => code == Some("NOTOWNER"),
            Of::Semaphore { .. } => proto::Refusal::not_held(code),
        }
    }
}

/// A hold the session keeps: re-attached after a reconnect, signalled when lost.
pub(crate) struct Entry {
    pub keys: Vec<String>,
    pub owner: String,
    pub of: Of,
    pub lease: Duration,
    pub node: String,
    pub tx: watch::Sender<Option<Lost>>,
}

/// A command or waiting connection, and whether the redis crate saw it close (its push
/// sender's `Disconnection`): one the server dropped while it sat idle (its `timeout`, a
/// `CLIENT KILL`) is replaced before use instead of failing the next command.
#[derive(Clone)]
pub(crate) struct Conn {
    pub con: MultiplexedConnection,
    pub(super) closed: Arc<AtomicBool>,
}

impl Conn {
    pub(super) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }
}

pub(super) struct NodeState {
    pub(super) up: watch::Receiver<bool>,
    /// When the last round trip on the session connection that was answered (a PING, or
    /// the connection's handshake) was sent.
    pub(super) alive: watch::Receiver<Instant>,
}

/// The state of one session, shared (an `Arc`) by its objects, its holds and its tasks.
/// The objects read the token, the settings and the runtime; the rest is the core's
/// (`pub(super)`: the files of `session`), reached by the objects through methods only.
pub(crate) struct Inner {
    pub(crate) token: String,
    pub(crate) opts: Options,
    pub(crate) handle: Handle,
    pub(super) backend: Backend,
    pub(super) cmd: Mutex<Option<Conn>>,
    pub(super) connecting: tokio::sync::Mutex<()>,
    #[cfg(feature = "cluster")]
    pub(super) cluster: Option<ClusterConnection>,
    pub(super) slots: Mutex<Vec<(u16, u16, String)>>,
    pub(super) pool: Mutex<HashMap<String, Vec<Conn>>>,
    pub(super) holds: Mutex<HashMap<u64, Entry>>,
    pub(super) nodes: Mutex<HashMap<String, NodeState>>,
    pub(super) session_open: tokio::sync::Mutex<()>,
    pub(super) counter: AtomicU64,
    pub(super) generation: AtomicU64,
    /// The shortest lease the servers can keep alive (`lock_keepalive_min_lease_ms` in
    /// `INFO lock`, the highest of the nodes' seen): 0 until read.
    pub(super) lease_floor_ms: AtomicU64,
    pub(super) closed: AtomicBool,
    pub(super) shutdown: watch::Sender<bool>,
    pub(super) lost: watch::Sender<Option<Lost>>,
    /// How often the session connections are pinged: `opts.ping_interval`, or less for an
    /// election's lease (a quarter of it).
    pub(super) ping_every: watch::Sender<Duration>,
}

/// Locks `m`, also after a panic while it was held (no state here is left half-written).
pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A reply or a setting that is not what the protocol says.
pub(super) fn protocol_error(what: &str) -> RedisError {
    RedisError::from((
        redis::ErrorKind::Parse,
        "unexpected reply",
        what.to_string(),
    ))
}

impl Inner {
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    pub fn check_open(&self) -> Result<()> {
        if self.is_closed() {
            Err(Error::Closed)
        } else {
            Ok(())
        }
    }

    /// [`Error::LeaseTooShort`] for a lease below the servers' floor (as far as read).
    pub fn check_lease(&self, lease: Duration) -> Result<()> {
        let min_lease_ms = self.lease_floor_ms.load(Ordering::SeqCst);
        let lease_ms = proto::millis(lease);
        if lease_ms < min_lease_ms {
            return Err(Error::LeaseTooShort {
                lease_ms,
                min_lease_ms,
            });
        }
        Ok(())
    }

    /// Keeps the highest lease floor seen (`lock_keepalive_min_lease_ms` in an `INFO lock`
    /// reply). A module without the field leaves it as it was (the server then refuses a
    /// short lease itself).
    pub(super) fn note_lease_floor(&self, info: &Value) {
        let text = match info {
            Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
            Value::VerbatimString { text, .. } => text.clone(),
            Value::SimpleString(s) => s.clone(),
            _ => return,
        };
        // The server prefixes a module's INFO fields with its name.
        let floor = text.lines().find_map(|line| {
            line.strip_prefix("lock_keepalive_min_lease_ms:")?
                .trim()
                .parse::<u64>()
                .ok()
        });
        if let Some(floor) = floor {
            self.lease_floor_ms.fetch_max(floor, Ordering::SeqCst);
        }
    }

    pub fn new_owner(&self) -> String {
        format!(
            "{}:{}",
            self.token,
            self.counter.fetch_add(1, Ordering::Relaxed) + 1
        )
    }

    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Pings the session connections at least every `every` from now on.
    pub fn ping_at_least_every(&self, every: Duration) {
        let every = every.max(Duration::from_millis(10));
        self.ping_every.send_if_modified(|now| {
            let lower = every < *now;
            if lower {
                *now = every;
            }
            lower
        });
    }

    /// When the last answered round trip on `node`'s session connection was sent, as a
    /// watch channel (`None` if the session has no connection there).
    pub fn alive(&self, node: &str) -> Option<watch::Receiver<Instant>> {
        lock(&self.nodes).get(node).map(|n| n.alive.clone())
    }

    pub(super) fn is_cluster(&self) -> bool {
        #[cfg(feature = "cluster")]
        return matches!(self.backend, Backend::Cluster { .. });
        #[cfg(not(feature = "cluster"))]
        false
    }

    /// The node serving `key`: "" outside a cluster, else `host:port` (from the slot map).
    pub fn node_of(&self, key: &str) -> String {
        if !self.is_cluster() {
            return String::new();
        }
        let slot = proto::key_slot(key.as_bytes());
        lock(&self.slots)
            .iter()
            .find(|(a, b, _)| *a <= slot && slot <= *b)
            .map(|(_, _, n)| n.clone())
            .unwrap_or_default()
    }

    /// Learns that `key`'s slot is served by `node` (a `MOVED`).
    pub fn moved(&self, key: &str, node: &str) {
        let slot = proto::key_slot(key.as_bytes());
        let mut slots = lock(&self.slots);
        slots.retain(|(a, b, _)| !(*a <= slot && slot <= *b && a == b));
        slots.insert(0, (slot, slot, node.to_string()));
    }
}
