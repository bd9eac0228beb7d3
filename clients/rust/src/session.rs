//! The session: its dedicated session connection per server (node), kept by a task that
//! pings, reconnects, re-attaches every hold and turns loss messages into [`Lost`]
//! signals; the connections commands and waits go on.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
#[cfg(feature = "cluster")]
use redis::cluster_async::ClusterConnection;
#[cfg(feature = "cluster")]
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
#[cfg(feature = "cluster")]
use redis::ConnectionAddr;
#[cfg(any(feature = "cluster", feature = "sentinel"))]
use redis::IntoConnectionInfo;
use redis::{
    AsyncConnectionConfig, ConnectionInfo, ProtocolVersion, PushInfo, PushKind, RedisError,
    RedisResult, Value,
};
use tokio::runtime::Handle;
use tokio::sync::{mpsc, watch};

use crate::election::Election;
use crate::error::{is_unusable, Error, Result};
use crate::lock::{Lock, RwLock};
use crate::proto::{self, Binding, Kind, Lost, Message, Reason, Wait};
use crate::sem::{Latch, Semaphore};

/// Where the session connects: one server, a Sentinel-monitored master (feature
/// `sentinel`), or a cluster (feature `cluster`).
pub struct Target(pub(crate) Backend);

pub(crate) enum Backend {
    Single(redis::Client),
    #[cfg(feature = "sentinel")]
    Sentinel {
        sentinel: tokio::sync::Mutex<redis::sentinel::SentinelClient>,
        master: Mutex<Option<redis::Client>>,
    },
    #[cfg(feature = "cluster")]
    Cluster {
        client: redis::cluster::ClusterClient,
        template: ConnectionInfo,
    },
}

impl Target {
    /// A cluster, from the addresses of some of its nodes (the first one's user, password
    /// and TLS settings are used for the direct connections to every node).
    #[cfg(feature = "cluster")]
    pub fn cluster<T: IntoConnectionInfo>(nodes: Vec<T>) -> RedisResult<Target> {
        let infos: Vec<ConnectionInfo> = nodes
            .into_iter()
            .map(IntoConnectionInfo::into_connection_info)
            .collect::<RedisResult<_>>()?;
        let template = infos.first().cloned().ok_or_else(|| {
            RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "no cluster node given",
            ))
        })?;
        let client = redis::cluster::ClusterClient::builder(infos)
            .connection_timeout(Duration::from_secs(5))
            .response_timeout(Duration::from_secs(10))
            .build()?;
        Ok(Target(Backend::Cluster { client, template }))
    }

    /// The master that Sentinels at `sentinels` monitor as `master_name`. The session asks
    /// them for the master at every (re)connection, so after a failover it re-attaches its
    /// holds on the new master.
    #[cfg(feature = "sentinel")]
    pub fn sentinel<T: IntoConnectionInfo>(
        sentinels: Vec<T>,
        master_name: impl Into<String>,
    ) -> RedisResult<Target> {
        let sentinel = redis::sentinel::SentinelClient::build(
            sentinels,
            // A `String`: the redis crate takes one without `tls-rustls`, `impl AsRef<str>` with.
            master_name.into(),
            None,
            redis::sentinel::SentinelServerType::Master,
        )?;
        Ok(Target(Backend::Sentinel {
            sentinel: tokio::sync::Mutex::new(sentinel),
            master: Mutex::new(None),
        }))
    }
}

impl From<redis::Client> for Target {
    fn from(c: redis::Client) -> Target {
        Target(Backend::Single(c))
    }
}

impl From<&redis::Client> for Target {
    fn from(c: &redis::Client) -> Target {
        Target(Backend::Single(c.clone()))
    }
}

/// Session settings.
#[derive(Clone, Debug)]
pub struct Options {
    /// The lease of every hold (default 30 s): how long a hold outlives its session once the
    /// session connection is gone. At least the server's `lock_keepalive_min_lease_ms` (704
    /// ms at `hz 10`, `INFO lock`): else opening the session is
    /// [`Error::LeaseTooShort`].
    pub lease: Duration,
    /// How often the session connection is pinged (default 1 s).
    pub ping_interval: Duration,
    /// How long connecting may take (default 5 s).
    pub connect_timeout: Duration,
    /// How long a command that does not wait may take (default 5 s).
    pub response_timeout: Duration,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            lease: Duration::from_secs(30),
            ping_interval: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(5),
            response_timeout: Duration::from_secs(5),
        }
    }
}

impl Options {
    pub fn lease(mut self, lease: Duration) -> Options {
        self.lease = lease;
        self
    }

    pub fn ping_interval(mut self, every: Duration) -> Options {
        self.ping_interval = every;
        self
    }
}

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
    closed: Arc<AtomicBool>,
}

impl Conn {
    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }
}

/// What a command answered, or a redirection to follow (a cluster's `MOVED` on a direct
/// connection), or a wait whose connection broke.
pub(crate) enum CallError {
    Redis(RedisError),
    Moved(String),
    /// The waiting connection broke (killed, reaped, reset) while the server can still be
    /// reached: the owner's wait and a grant that crossed the break were cleaned up as a
    /// cancel does, so the caller may queue again as a fresh owner.
    Broken,
}

impl From<RedisError> for CallError {
    fn from(e: RedisError) -> CallError {
        CallError::Redis(e)
    }
}

struct NodeState {
    up: watch::Receiver<bool>,
    /// When the last round trip on the session connection that was answered (a PING, or
    /// the connection's handshake) was sent.
    alive: watch::Receiver<Instant>,
}

/// The wait left of `wait`, begun at `started`: the rest of a [`Wait::For`] (a try once it
/// ran out); [`Wait::No`] and [`Wait::Forever`] as they are.
pub(crate) fn wait_left(wait: Wait, started: Instant) -> Wait {
    match wait {
        Wait::For(d) => Wait::from_duration(d.saturating_sub(started.elapsed())),
        other => other,
    }
}

/// Idle waiting connections kept per node.
const POOL_MAX: usize = 64;
/// Extra time, past a `BLOCK` time, that the reply to a waiting acquire may take.
pub(crate) const WAIT_MARGIN: Duration = Duration::from_secs(5);

pub(crate) struct Inner {
    pub token: String,
    pub opts: Options,
    pub handle: Handle,
    backend: Backend,
    cmd: Mutex<Option<Conn>>,
    connecting: tokio::sync::Mutex<()>,
    #[cfg(feature = "cluster")]
    cluster: Option<ClusterConnection>,
    slots: Mutex<Vec<(u16, u16, String)>>,
    pool: Mutex<HashMap<String, Vec<Conn>>>,
    pub holds: Mutex<HashMap<u64, Entry>>,
    nodes: Mutex<HashMap<String, NodeState>>,
    session_open: tokio::sync::Mutex<()>,
    counter: AtomicU64,
    generation: AtomicU64,
    /// The shortest lease the servers can keep alive (`lock_keepalive_min_lease_ms` in
    /// `INFO lock`, the highest of the nodes' seen): 0 until read.
    lease_floor_ms: AtomicU64,
    closed: AtomicBool,
    shutdown: watch::Sender<bool>,
    lost: watch::Sender<Option<Lost>>,
    /// How often the session connections are pinged: `opts.ping_interval`, or less for an
    /// election's lease (a quarter of it).
    ping_every: watch::Sender<Duration>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
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

fn protocol_error(what: &str) -> RedisError {
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

    /// Reads the server's lease floor (`INFO lock`) on `con`; see [`Inner::note_lease_floor`].
    async fn read_lease_floor(&self, con: &mut MultiplexedConnection) -> RedisResult<()> {
        let info: Value = redis::cmd("INFO").arg("lock").query_async(con).await?;
        self.note_lease_floor(&info);
        Ok(())
    }

    /// A cluster's lease floor, from one node (`INFO lock`) when the session opens; each
    /// node's own is read when its session connection opens.
    #[cfg(feature = "cluster")]
    async fn read_cluster_lease_floor(&self) -> RedisResult<()> {
        let Some(cluster) = &self.cluster else {
            return Ok(());
        };
        let info = cluster
            .clone()
            .route_command(
                redis::cmd("INFO").arg("lock").clone(),
                RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
            )
            .await?;
        self.note_lease_floor(&info);
        Ok(())
    }

    /// Keeps the highest lease floor seen (`lock_keepalive_min_lease_ms` in an `INFO lock`
    /// reply). A module without the field leaves it as it was (the server then refuses a
    /// short lease itself).
    fn note_lease_floor(&self, info: &Value) {
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

    fn is_cluster(&self) -> bool {
        #[cfg(feature = "cluster")]
        return matches!(self.backend, Backend::Cluster { .. });
        #[cfg(not(feature = "cluster"))]
        false
    }

    /// A waiting command (`command`: LATCH.AWAIT, ELECT.OBSERVE), `args` for a wait, with
    /// `BLOCK`, on a waiting connection of `key`'s node, following `MOVED`. The connection
    /// goes back to the pool only once answered: dropped mid-wait, it is closed, which ends
    /// the wait in the server. A connection that breaks mid-wait took the wait with it (the
    /// command holds nothing): sent again on a new connection for the time left.
    pub async fn waiting_call(
        &self,
        key: &str,
        wait: Wait,
        command: &str,
        args: impl Fn(Wait) -> Vec<String>,
    ) -> Result<Value> {
        let started = Instant::now();
        let mut node = self.node_of(key);
        let mut redirects = 0;
        loop {
            let left = wait_left(wait, started);
            let cmd = proto::cmd(&args(left));
            let mut wc = self.checkout(&node).await?;
            let bound = match left {
                Wait::For(d) => Some(d + WAIT_MARGIN),
                Wait::No => Some(self.opts.response_timeout),
                Wait::Forever => None,
            };
            let send = wc.con.send_packed_command(&cmd);
            let reply = match bound {
                Some(bound) => match tokio::time::timeout(bound, send).await {
                    Ok(r) => r,
                    Err(_) => {
                        return Err(Error::Unavailable(RedisError::from((
                            redis::ErrorKind::Io,
                            "no reply in time",
                            command.to_string(),
                        ))))
                    }
                },
                None => send.await,
            }
            .and_then(Value::extract_error);
            match reply {
                Ok(v) => {
                    self.checkin(&node, wc);
                    return Ok(v);
                }
                // Broken: again on a new connection (whose connect fails if the server is
                // gone: Unavailable).
                Err(e) if crate::is_unusable(&e) => continue,
                Err(e) => {
                    self.checkin(&node, wc);
                    match e.redirect_node() {
                        Some((addr, _)) if e.code() == Some("MOVED") && redirects < 5 => {
                            redirects += 1;
                            self.moved(key, addr);
                            node = addr.to_string();
                        }
                        _ => return Err(e.into()),
                    }
                }
            }
        }
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

    /// Connection settings for a node: the single server, the master Sentinel names now,
    /// or a cluster node.
    // `node` names a cluster node; one server or Sentinel's master has one node ("").
    #[cfg_attr(not(feature = "cluster"), allow(unused_variables))]
    async fn node_info(&self, node: &str) -> RedisResult<ConnectionInfo> {
        match &self.backend {
            Backend::Single(c) => Ok(c.get_connection_info().clone()),
            #[cfg(feature = "sentinel")]
            Backend::Sentinel { sentinel, master } => {
                if let Some(c) = lock(master).clone() {
                    return Ok(c.get_connection_info().clone());
                }
                let c = sentinel.lock().await.async_get_client().await?;
                *lock(master) = Some(c.clone());
                Ok(c.get_connection_info().clone())
            }
            #[cfg(feature = "cluster")]
            Backend::Cluster { template, .. } => {
                let (host, port) = node
                    .rsplit_once(':')
                    .and_then(|(h, p)| Some((h.to_string(), p.parse::<u16>().ok()?)))
                    .ok_or_else(|| protocol_error(&format!("cluster node '{node}'")))?;
                let addr = match template.addr() {
                    ConnectionAddr::TcpTls {
                        insecure,
                        tls_params,
                        ..
                    } => ConnectionAddr::TcpTls {
                        host,
                        port,
                        insecure: *insecure,
                        tls_params: tls_params.clone(),
                    },
                    _ => ConnectionAddr::Tcp(host, port),
                };
                Ok(template.clone().set_addr(addr))
            }
        }
    }

    async fn connect(
        &self,
        node: &str,
        config: AsyncConnectionConfig,
        resp3: bool,
    ) -> RedisResult<MultiplexedConnection> {
        let mut info = self.node_info(node).await?;
        if resp3 {
            let settings = info
                .redis_settings()
                .clone()
                .set_protocol(ProtocolVersion::RESP3);
            info = info.set_redis_settings(settings);
        }
        let client = redis::Client::open(info)?;
        client
            .get_multiplexed_async_connection_with_config(
                &config.set_connection_timeout(Some(self.opts.connect_timeout)),
            )
            .await
    }

    /// Forgets connections to `node` after it failed or stopped being the master: the next
    /// use connects again (asking Sentinel anew).
    pub fn invalidate(&self, node: &str) {
        #[cfg(feature = "sentinel")]
        if let Backend::Sentinel { master, .. } = &self.backend {
            *lock(master) = None;
        }
        lock(&self.pool).remove(node);
        if !self.is_cluster() {
            *lock(&self.cmd) = None;
        }
    }

    /// A connection watched for its close (RESP3: the redis crate reports a close through a
    /// push sender only there).
    async fn connect_watched(
        &self,
        node: &str,
        config: AsyncConnectionConfig,
    ) -> RedisResult<Conn> {
        let closed = Arc::new(AtomicBool::new(false));
        let seen = closed.clone();
        let config = config.set_push_sender(move |p: PushInfo| {
            if p.kind == PushKind::Disconnection {
                seen.store(true, Ordering::SeqCst);
            }
            Ok::<(), std::convert::Infallible>(())
        });
        let con = self.connect(node, config, true).await?;
        Ok(Conn { con, closed })
    }

    /// The shared command connection: the open one, or a new one if it closed.
    async fn command_conn(&self) -> RedisResult<MultiplexedConnection> {
        let open = || lock(&self.cmd).clone().filter(|c| !c.is_closed());
        if let Some(c) = open() {
            return Ok(c.con);
        }
        let _one = self.connecting.lock().await;
        if let Some(c) = open() {
            return Ok(c.con);
        }
        let c = self
            .connect_watched(
                "",
                AsyncConnectionConfig::new().set_response_timeout(Some(self.opts.response_timeout)),
            )
            .await?;
        *lock(&self.cmd) = Some(c.clone());
        Ok(c.con)
    }

    /// Sends a command that answers at once on the shared command connection (a cluster:
    /// routed to the master of `key`'s slot, following `MOVED`).
    // `key` routes in a cluster only.
    #[cfg_attr(not(feature = "cluster"), allow(unused_variables))]
    pub async fn command(&self, args: &[String], key: Option<&str>) -> RedisResult<Value> {
        let cmd = proto::cmd(args);
        #[cfg(feature = "cluster")]
        if let Some(cluster) = &self.cluster {
            let mut c = cluster.clone();
            let routing = match key {
                Some(k) => RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(
                    Route::new(proto::key_slot(k.as_bytes()), SlotAddr::Master),
                )),
                None => RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
            };
            return c
                .route_command(cmd, routing)
                .await
                .and_then(Value::extract_error);
        }
        let mut c = self.command_conn().await?;
        let r = c
            .send_packed_command(&cmd)
            .await
            .and_then(Value::extract_error);
        if let Err(e) = &r {
            if is_unusable(e) || e.code() == Some("READONLY") {
                self.invalidate("");
            }
        }
        r
    }

    /// A dedicated connection to `node` for one wait: an open one from the pool (those the
    /// server closed meanwhile are dropped), or a new one.
    pub async fn checkout(&self, node: &str) -> RedisResult<Conn> {
        loop {
            let Some(c) = lock(&self.pool).get_mut(node).and_then(Vec::pop) else {
                break;
            };
            if !c.is_closed() {
                return Ok(c);
            }
        }
        self.connect_watched(
            node,
            AsyncConnectionConfig::new().set_response_timeout(None),
        )
        .await
    }

    pub fn checkin(&self, node: &str, c: Conn) {
        if self.is_closed() || c.is_closed() {
            return;
        }
        let mut pool = lock(&self.pool);
        let idle = pool.entry(node.to_string()).or_default();
        if idle.len() < POOL_MAX {
            idle.push(c);
        }
    }

    /// After a cancelled or broken wait: ends the owner's waits in the server
    /// (`LOCK.CANCEL`, for semaphore waits too), after which no grant can reach it, then
    /// releases a grant that crossed the cancel (`LOCK.RELEASE`, or `SEM.RELEASE`: `NOTOWNER`
    /// / `EXPIRED` ignored). Closing the waiting connection alone is not enough: a grant
    /// written into a socket the client just closed looks delivered to the server, and a
    /// hold bound to the session outlives the waiting connection. `Err` when the server
    /// could not be reached (or refused the client: `NOAUTH`, `WRONGPASS`, `NOPERM`) for one
    /// of the two.
    pub async fn clean_cancelled(&self, keys: &[String], owner: &str, of: Of) -> RedisResult<()> {
        let key = keys.first().map(String::as_str);
        // A failed cancel does not stop the release: the server may have lost the waiter
        // with the connection, or answered the cancel on a connection that broke after.
        let cancelled = self.answered(&proto::cancel(keys, owner), key).await;
        let released = self.answered(&of.release(keys, owner), key).await;
        cancelled.and(released)
    }

    /// Sends a command whose repetition does no harm (a cancel, the release of a fresh
    /// owner's single grant), again on a new connection when the connection failed: `Ok`
    /// once the server answered, whatever it answered; `Err` when it could not be reached or
    /// refused the client.
    async fn answered(&self, args: &[String], key: Option<&str>) -> RedisResult<()> {
        let mut attempt = 0;
        loop {
            match self.command(args, key).await {
                Ok(_) => return Ok(()),
                Err(e) if crate::is_auth_error(&e) => return Err(e),
                Err(e) if is_unusable(&e) && attempt < 2 => {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) if is_unusable(&e) => return Err(e),
                Err(_) => return Ok(()),
            }
        }
    }

    /// Sends a waiting acquire on a dedicated connection of `node`. Cancelled (the future
    /// dropped): the connection is closed and the owner's possible grant released, on the
    /// runtime. Broken (the connection killed, reset or reaped): the owner is cleaned up
    /// here the same way, then [`CallError::Broken`] if the server could be reached for it.
    /// No reply by the client-side bound: cleaned up in the background, an I/O error.
    pub async fn wait_call(
        self: &Arc<Self>,
        node: &str,
        args: &[String],
        wait: proto::Wait,
        keys: &[String],
        owner: &str,
        of: Of,
    ) -> std::result::Result<Value, CallError> {
        let wc = self.checkout(node).await?;
        let con = wc.con.clone();
        let mut guard = CancelGuard {
            inner: self.clone(),
            node: node.to_string(),
            wc: Some(wc),
            keys: keys.to_vec(),
            owner: owner.to_string(),
            of,
            armed: true,
        };
        let cmd = proto::cmd(args);
        let send = async move {
            let mut con = con;
            con.send_packed_command(&cmd)
                .await
                .and_then(Value::extract_error)
        };
        let reply = match wait {
            proto::Wait::For(d) => match tokio::time::timeout(d + WAIT_MARGIN, send).await {
                Ok(r) => r,
                // Not a broken connection: a server that does not answer (in time). The
                // guard cleans up in the background.
                Err(_) => {
                    return Err(CallError::Redis(RedisError::from((
                        redis::ErrorKind::Io,
                        "no reply to a waiting acquire in time",
                    ))))
                }
            },
            _ => send.await,
        };
        match reply {
            Ok(v) => {
                guard.done(true);
                Ok(v)
            }
            // The grant may have been sent as the connection broke. The guard stays armed
            // while this runs: dropped meanwhile, it cleans up again (both are harmless
            // twice).
            Err(e) if is_unusable(&e) => {
                drop(guard.wc.take());
                let cleaned = self.clean_cancelled(keys, owner, of).await;
                guard.armed = false;
                match cleaned {
                    Ok(()) => Err(CallError::Broken),
                    Err(unreachable) => Err(CallError::Redis(unreachable)),
                }
            }
            Err(e) => {
                guard.done(true);
                match e.redirect_node() {
                    Some((addr, _)) if e.code() == Some("MOVED") => {
                        Err(CallError::Moved(addr.to_string()))
                    }
                    _ => Err(e.into()),
                }
            }
        }
    }

    /// Registers a granted hold.
    pub fn register(&self, entry: Entry) -> u64 {
        let id = self.counter.fetch_add(1, Ordering::Relaxed) + 1;
        lock(&self.holds).insert(id, entry);
        id
    }

    /// Re-attaches hold `id` if the session reconnected since `sent_at` (when its acquire
    /// was sent): the re-attach of the reconnect may have missed it.
    /// `token`: the hold's (first) token, a leadership's term.
    pub async fn reattach_if_reconnected(&self, id: u64, sent_at: u64, token: i64) {
        if self.generation() == sent_at {
            return;
        }
        let hold = lock(&self.holds)
            .get(&id)
            .map(|e| (e.keys.clone(), e.owner.clone(), e.of, e.lease));
        if let Some((keys, owner, Of::Election, lease)) = &hold {
            let key = keys.first().cloned().unwrap_or_default();
            self.reattach_leadership(id, &key, owner, *lease, token)
                .await;
            return;
        }
        if let Some((keys, owner, of, lease)) = hold {
            for key in &keys {
                self.reattach_one(id, key, &owner, of, lease).await;
            }
        }
    }

    /// A leadership granted while a session connection was replaced may be bound to the one
    /// that broke: `ELECT.CAMPAIGN` again without `BLOCK` binds it to the session's connection
    /// now if the candidate still leads with term `term`. Anything else is a loss (a new
    /// term won here is not the one the caller was given: its watcher resigns it).
    async fn reattach_leadership(
        &self,
        id: u64,
        key: &str,
        owner: &str,
        lease: Duration,
        term: i64,
    ) {
        let args = Of::Election.renew(key, owner, lease, Binding::Session(&self.token));
        let sent = self.command(&args, Some(key));
        match tokio::time::timeout(self.opts.response_timeout, sent).await {
            Ok(Ok(v)) if proto::campaigned(&v) == Ok(Some(term)) => {}
            Ok(Ok(_)) => self.lose_id(id, key, Reason::NotOwner),
            _ => self.lose_id(id, key, Reason::ConnectionLost),
        }
    }

    async fn reattach_one(&self, id: u64, key: &str, owner: &str, of: Of, lease: Duration) {
        let args = of.renew(key, owner, lease, Binding::Session(&self.token));
        // A command connection to a server gone or demoted is replaced after its error: once
        // more on the new one.
        for _ in 0..2 {
            let sent = self.command(&args, Some(key));
            match tokio::time::timeout(self.opts.response_timeout, sent).await {
                Ok(Ok(_)) => return,
                Ok(Err(e)) if of.not_held(e.code()) => {
                    self.lose_id(id, key, Reason::NotOwner);
                    return;
                }
                Ok(Err(e)) if is_unusable(&e) || e.code() == Some("READONLY") => continue,
                // No answer in time: the connection is replaced.
                Err(_) => self.invalidate(""),
                Ok(Err(_)) => return,
            }
        }
    }

    /// Re-attaches every hold on `node` to the session connection named just now.
    async fn reattach(&self, node: &str) {
        let holds: Vec<(u64, Vec<String>, String, Of, Duration)> = lock(&self.holds)
            .iter()
            .filter(|(_, e)| e.node == node && e.of != Of::Election)
            .map(|(id, e)| (*id, e.keys.clone(), e.owner.clone(), e.of, e.lease))
            .collect();
        for (id, keys, owner, of, lease) in holds {
            for key in &keys {
                self.reattach_one(id, key, &owner, of, lease).await;
            }
        }
    }

    fn signal(&self, entry: Entry, key: &str, reason: Reason) {
        let lost = Lost {
            key: key.to_string(),
            owner: entry.owner.clone(),
            reason,
        };
        entry.tx.send_replace(Some(lost.clone()));
        self.lost.send_replace(Some(lost));
    }

    fn lose_id(&self, id: u64, key: &str, reason: Reason) {
        let entry = lock(&self.holds).remove(&id);
        if let Some(e) = entry {
            self.signal(e, key, reason);
        }
    }

    /// A loss message: every hold of `owner` on `key`.
    fn lose(&self, owner: &str, key: &str, reason: Reason) {
        let gone: Vec<Entry> = {
            let mut holds = lock(&self.holds);
            let ids: Vec<u64> = holds
                .iter()
                .filter(|(_, e)| e.owner == owner && e.keys.iter().any(|k| k == key))
                .map(|(id, _)| *id)
                .collect();
            ids.iter().filter_map(|id| holds.remove(id)).collect()
        };
        for e in gone {
            self.signal(e, key, reason.clone());
        }
    }

    fn lose_node(&self, node: &str, reason: Reason) {
        let gone: Vec<Entry> = {
            let mut holds = lock(&self.holds);
            let ids: Vec<u64> = holds
                .iter()
                .filter(|(_, e)| e.node == node)
                .map(|(id, _)| *id)
                .collect();
            ids.iter().filter_map(|id| holds.remove(id)).collect()
        };
        for e in gone {
            let key = e.keys.first().cloned().unwrap_or_default();
            self.signal(e, &key, reason.clone());
        }
    }

    /// Every leadership on `node`: its session connection broke or was demoted.
    fn lose_elections(&self, node: &str, reason: Reason) {
        let gone: Vec<Entry> = {
            let mut holds = lock(&self.holds);
            let ids: Vec<u64> = holds
                .iter()
                .filter(|(_, e)| e.node == node && e.of == Of::Election)
                .map(|(id, _)| *id)
                .collect();
            ids.iter().filter_map(|id| holds.remove(id)).collect()
        };
        for e in gone {
            let key = e.keys.first().cloned().unwrap_or_default();
            self.signal(e, &key, reason.clone());
        }
    }

    /// Signals hold `id` lost (if it is still kept) and forgets it.
    pub fn lose_hold(&self, id: u64, key: &str, reason: Reason) {
        self.lose_id(id, key, reason);
    }

    pub fn forget(&self, id: u64) -> Option<Entry> {
        lock(&self.holds).remove(&id)
    }

    /// The node hold `id` is on, if it is still kept.
    pub fn node_of_hold(&self, id: u64) -> Option<String> {
        lock(&self.holds).get(&id).map(|e| e.node.clone())
    }

    pub fn holds_entry(&self, id: u64) -> bool {
        lock(&self.holds).contains_key(&id)
    }

    /// Whether `owner` holds one of `keys` in this session (any of its holds).
    pub fn owner_holds_any(&self, owner: &str, keys: &[String]) -> bool {
        lock(&self.holds)
            .values()
            .any(|e| e.owner == owner && e.keys.iter().any(|k| keys.contains(k)))
    }

    pub fn set_lease(&self, id: u64, lease: Duration) {
        if let Some(e) = lock(&self.holds).get_mut(&id) {
            e.lease = lease;
        }
    }

    /// Opens the session connection: `CLIENT SETNAME`, `LOCK.SESSION token`, `SUBSCRIBE`.
    async fn connect_session(&self, node: &str) -> Result<SessionConn> {
        let sent = Instant::now();
        let (tx, rx) = mpsc::unbounded_channel::<PushInfo>();
        let timeout = self.opts.ping_interval.max(Duration::from_secs(1));
        let mut con = self
            .connect(
                node,
                AsyncConnectionConfig::new()
                    .set_response_timeout(Some(timeout))
                    .set_push_sender(tx),
                true,
            )
            .await?;
        let _ = redis::cmd("CLIENT")
            .arg("SETNAME")
            .arg(format!("lock-session:{}", self.token))
            .exec_async(&mut con)
            .await;
        // `ERR unknown command`: Error::ModuleNotLoaded.
        con.send_packed_command(&proto::cmd(&proto::session(&self.token)))
            .await
            .and_then(Value::extract_error)?;
        self.read_lease_floor(&mut con).await?;
        #[cfg(feature = "sentinel")]
        if matches!(self.backend, Backend::Sentinel { .. }) {
            // Sentinel may still name the old master for a moment after a failover.
            let role: Value = redis::cmd("ROLE").query_async(&mut con).await?;
            let is_master = matches!(&role, Value::Array(v) if matches!(v.first(),
                Some(Value::BulkString(b)) if b == b"master"));
            if !is_master {
                return Err(Error::Unavailable(RedisError::from((
                    redis::ErrorKind::Io,
                    "Sentinel named a server that is not a master (yet)",
                ))));
            }
        }
        con.subscribe(proto::channel(&self.token)).await?;
        Ok(SessionConn { con, rx, sent })
    }

    /// Makes sure a session connection is open on `node` (a cluster opens one per node on
    /// the first hold there).
    pub async fn ensure_session(self: &Arc<Self>, node: &str) -> Result<()> {
        if lock(&self.nodes).contains_key(node) {
            return Ok(());
        }
        let _one = self.session_open.lock().await;
        if lock(&self.nodes).contains_key(node) {
            return Ok(());
        }
        let first = self.connect_session(node).await?;
        // Refused when it opens rather than at each acquire, in the lease's words (the
        // server's refusal names KEEPALIVE). Dropping `first` closes its connection.
        self.check_lease(self.opts.lease)?;
        let (up_tx, up_rx) = watch::channel(true);
        let (alive_tx, alive_rx) = watch::channel(first.sent);
        lock(&self.nodes).insert(
            node.to_string(),
            NodeState {
                up: up_rx,
                alive: alive_rx,
            },
        );
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.handle.spawn(keep(
            self.clone(),
            node.to_string(),
            first,
            Signals {
                up: up_tx,
                alive: alive_tx,
            },
        ));
        Ok(())
    }

    /// After `NOSESSION` from `node`: the session there is down or unknown to that server
    /// (a restart, a failover, a new cluster node). Waits until the session connection has
    /// been named again since `sent_at` (bounded by the lease), opening it if it is new.
    pub async fn resume_session(self: &Arc<Self>, node: &str, sent_at: u64) -> Result<()> {
        if self.is_cluster() {
            self.refresh_slots().await;
        }
        let up = lock(&self.nodes).get(node).map(|n| n.up.clone());
        let Some(mut up) = up else {
            return self.ensure_session(node).await;
        };
        let deadline = tokio::time::Instant::now() + self.opts.lease.min(Duration::from_secs(10));
        loop {
            if *up.borrow_and_update() && self.generation() != sent_at {
                return Ok(());
            }
            match tokio::time::timeout_at(deadline, up.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Err(Error::Closed),
                Err(_) => {
                    if *up.borrow() && self.generation() == sent_at {
                        // Up all along by its pings, yet unknown to the server: reconnect it.
                        return Ok(());
                    }
                    return Err(Error::Unavailable(RedisError::from((
                        redis::ErrorKind::Io,
                        "the session connection could not be opened again",
                    ))));
                }
            }
        }
    }

    /// Reads the cluster's slot map (`CLUSTER SLOTS`).
    #[cfg(not(feature = "cluster"))]
    pub async fn refresh_slots(&self) {}

    /// Reads the cluster's slot map (`CLUSTER SLOTS`).
    #[cfg(feature = "cluster")]
    pub async fn refresh_slots(&self) {
        let Some(cluster) = &self.cluster else { return };
        let mut c = cluster.clone();
        let Ok(Value::Array(ranges)) = c
            .route_command(
                redis::cmd("CLUSTER").arg("SLOTS").clone(),
                RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
            )
            .await
        else {
            return;
        };
        let default_host = match &self.backend {
            Backend::Cluster { template, .. } => match template.addr() {
                ConnectionAddr::Tcp(h, _) | ConnectionAddr::TcpTls { host: h, .. } => h.clone(),
                _ => "127.0.0.1".into(),
            },
            _ => return,
        };
        let mut map = Vec::new();
        for r in ranges {
            let Value::Array(parts) = r else { continue };
            let (Some(Value::Int(a)), Some(Value::Int(b)), Some(Value::Array(master))) =
                (parts.first(), parts.get(1), parts.get(2))
            else {
                continue;
            };
            let host = match master.first() {
                Some(Value::BulkString(h)) if !h.is_empty() && h != b"?" => {
                    String::from_utf8_lossy(h).into_owned()
                }
                _ => default_host.clone(),
            };
            let Some(Value::Int(port)) = master.get(1) else {
                continue;
            };
            map.push((*a as u16, *b as u16, format!("{host}:{port}")));
        }
        if !map.is_empty() {
            *lock(&self.slots) = map;
        }
    }

    /// Learns that `key`'s slot is served by `node` (a `MOVED`).
    pub fn moved(&self, key: &str, node: &str) {
        let slot = proto::key_slot(key.as_bytes());
        let mut slots = lock(&self.slots);
        slots.retain(|(a, b, _)| !(*a <= slot && slot <= *b && a == b));
        slots.insert(0, (slot, slot, node.to_string()));
    }

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

/// Cleans a cancelled wait when dropped armed.
struct CancelGuard {
    inner: Arc<Inner>,
    node: String,
    wc: Option<Conn>,
    keys: Vec<String>,
    owner: String,
    of: Of,
    armed: bool,
}

impl CancelGuard {
    fn done(&mut self, reuse: bool) {
        self.armed = false;
        if let Some(wc) = self.wc.take() {
            if reuse {
                self.inner.checkin(&self.node, wc);
            }
        }
    }
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // Closes the waiting connection: the last handle of it, whose task ends with it.
        drop(self.wc.take());
        let inner = self.inner.clone();
        let (keys, owner, of) = (
            std::mem::take(&mut self.keys),
            std::mem::take(&mut self.owner),
            self.of,
        );
        self.inner.handle.spawn(async move {
            let _ = inner.clean_cancelled(&keys, &owner, of).await;
        });
    }
}

pub(crate) struct SessionConn {
    con: MultiplexedConnection,
    rx: mpsc::UnboundedReceiver<PushInfo>,
    /// When its handshake was sent.
    sent: Instant,
}

/// What the task keeping a node's session connection tells: whether it is up, and when the
/// last answered round trip on it was sent.
struct Signals {
    up: watch::Sender<bool>,
    alive: watch::Sender<Instant>,
}

enum End {
    Shutdown,
    Dropped,
    Demoted,
}

/// Until the session is closed: at once if it is. The value, not a change: a session closed
/// before its connection's task first ran (the task's receiver, made then, sees `true` as
/// already seen) would not be told otherwise, and its task would ping on forever.
async fn closed(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|closed| *closed).await;
}

/// Keeps the session connection of `node`: pings it, reconnects and re-attaches every hold
/// when it drops, and signals losses.
async fn keep(inner: Arc<Inner>, node: String, first: SessionConn, signals: Signals) {
    let Signals { up, alive } = signals;
    let mut shutdown = inner.shutdown.subscribe();
    let mut conn = Some(first);
    let mut last_ok = Instant::now();
    let mut backoff = Duration::from_millis(20);
    let mut reattach = false;
    loop {
        if let Some(c) = conn.take() {
            if reattach {
                inner.generation.fetch_add(1, Ordering::SeqCst);
                inner.reattach(&node).await;
            }
            reattach = true;
            up.send_replace(true);
            alive.send_replace(c.sent);
            last_ok = Instant::now();
            backoff = Duration::from_millis(20);
            let end = run(&inner, c, &mut last_ok, &alive, &mut shutdown).await;
            up.send_replace(false);
            match end {
                End::Shutdown => return,
                End::Demoted => {
                    inner.lose_elections(&node, Reason::Demoted);
                    inner.invalidate(&node)
                }
                End::Dropped => inner.lose_elections(&node, Reason::ConnectionLost),
            }
        }
        if *shutdown.borrow() {
            return;
        }
        if last_ok.elapsed() > inner.opts.lease {
            inner.lose_node(&node, Reason::SessionDown);
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = closed(&mut shutdown) => return,
        }
        backoff = (backoff * 2).min(Duration::from_millis(500));
        match inner.connect_session(&node).await {
            Ok(c) => conn = Some(c),
            Err(_) => inner.invalidate(&node),
        }
    }
}

async fn run(
    inner: &Inner,
    c: SessionConn,
    last_ok: &mut Instant,
    alive: &watch::Sender<Instant>,
    shutdown: &mut watch::Receiver<bool>,
) -> End {
    let SessionConn {
        mut con, mut rx, ..
    } = c;
    let mut every = inner.ping_every.subscribe();
    let mut last_ping = tokio::time::Instant::now();
    loop {
        let next_ping = last_ping + *every.borrow_and_update();
        tokio::select! {
            // A shorter interval asked for (an election): the next ping is due sooner.
            _ = every.changed() => {}
            _ = closed(shutdown) => return End::Shutdown,
            msg = rx.recv() => match msg {
                None => return End::Dropped,
                // Seen at once: the connection lived until now.
                Some(p) if p.kind == PushKind::Disconnection => {
                    *last_ok = Instant::now();
                    return End::Dropped;
                }
                Some(p) if p.kind == PushKind::Message => {
                    let payload = match p.data.get(1) {
                        Some(Value::BulkString(b)) => b.clone(),
                        Some(Value::SimpleString(s)) => s.clone().into_bytes(),
                        _ => continue,
                    };
                    match proto::message(&payload) {
                        Some(Message::Demoted) => return End::Demoted,
                        Some(Message::Lost { reason, owner, key }) => inner.lose(&owner, &key, reason),
                        None => {}
                    }
                }
                Some(_) => {}
            },
            _ = tokio::time::sleep_until(next_ping) => {
                let sent = Instant::now();
                last_ping = tokio::time::Instant::now();
                match redis::cmd("PING").query_async::<Value>(&mut con).await {
                    Ok(_) => {
                        *last_ok = Instant::now();
                        alive.send_replace(sent);
                    }
                    Err(_) => return End::Dropped,
                }
            }
        }
    }
}

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

    /// A semaphore on `key` (`SEM.*`): [`Semaphore::init`] sets its total once,
    /// [`Semaphore::acquire`] takes a permit bound to this session.
    pub fn semaphore(&self, key: impl Into<String>) -> Semaphore {
        Semaphore::new(self.inner.clone(), key.into())
    }

    /// An election on `key` (`ELECT.*`): [`Election::campaign`] leads it in turn.
    pub fn election(&self, key: impl Into<String>) -> Election {
        Election::new(self.inner.clone(), key.into())
    }

    /// A count-down latch on `key` (`LATCH.*`).
    pub fn latch(&self, key: impl Into<String>) -> Latch {
        Latch::new(self.inner.clone(), key.into())
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
