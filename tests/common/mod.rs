//! Test harness: real redis-server processes with the module loaded, on free
//! loopback ports (or in a network namespace, on an address there), each in
//! its own directory, killed by PID when dropped (started by the workspace's
//! server harness, `lock-harness`; what a test asks of a server is here).
//!
//! `REDIS_SERVER` overrides the server binary, `LOCK_MODULE` the module
//! (default: target/release/liblock.so, built by `make test`).

#![allow(dead_code)]

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub use redis::{Connection, Value};

pub mod cluster_client;
pub mod commands;
pub mod dataset;
pub mod fair;
pub mod netns;
pub mod redis_cli;
pub mod redisson_sem;
pub mod semaphore;
pub mod sentinel;

/// Generous bound for anything a test waits for; reached only on failure.
pub const PATIENCE: Duration = lock_harness::PATIENCE;

pub use lock_harness::{free_port, module_path, server_binary, wait_ready};

/// A new empty directory under the temp dir, named by this process and a
/// counter: a server's, or a test's own files.
pub fn fresh_dir() -> PathBuf {
    lock_harness::fresh_dir("lock-test")
}

/// How to start a server.
#[derive(Clone, Debug)]
pub struct Config {
    pub with_module: bool,
    /// Module arguments after the path (`default-lease-ms 5000`).
    pub module_args: Vec<String>,
    /// Extra `--name value` server arguments.
    pub args: Vec<String>,
    /// The network namespace to run in and the address to listen on there;
    /// `None`: this namespace's 127.0.0.1.
    pub netns: Option<(String, IpAddr)>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            with_module: true,
            module_args: Vec::new(),
            args: Vec::new(),
            netns: None,
        }
    }
}

impl Config {
    pub fn arg(mut self, name: &str, value: &str) -> Self {
        self.args.push(format!("--{name}"));
        self.args.push(value.into());
        self
    }

    pub fn module_arg(mut self, name: &str, value: &str) -> Self {
        self.module_args.push(name.into());
        self.module_args.push(value.into());
        self
    }

    pub fn without_module(mut self) -> Self {
        self.with_module = false;
        self
    }

    /// Runs the server in the network namespace `name` (`ip netns exec`,
    /// which execs the server: the child's pid is the server's), listening
    /// on `addr` there, protected mode off (it admits loopback clients
    /// only).
    pub fn in_netns(mut self, name: &str, addr: IpAddr) -> Self {
        self.netns = Some((name.into(), addr));
        self
    }

    pub fn aof(self) -> Self {
        self.arg("appendonly", "yes").arg("appendfsync", "always")
    }

    pub fn start(self) -> Server {
        match lock_harness::Server::start(self.launch(), fresh_dir()) {
            Ok(inner) => Server { inner },
            Err(e) => panic!("{e}"),
        }
    }

    /// Starts a server that must exit at startup (a module that fails to
    /// load stops it) and returns its log.
    pub fn start_refused(self) -> String {
        lock_harness::Server::start_refused(self.launch(), fresh_dir())
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// The server's command line: the harness's (port, address, directory,
    /// log, no RDB snapshots), then DEBUG allowed, a full sync at once
    /// instead of after 5 s (SHUTDOWN waits for replicas in a full sync
    /// too), the test's arguments, and the module with its arguments.
    fn launch(self) -> lock_harness::Launch {
        let mut args: Vec<String> = ["--enable-debug-command", "yes"]
            .into_iter()
            .chain(["--repl-diskless-sync-delay", "0"])
            .map(String::from)
            .collect();
        args.extend(self.args);
        lock_harness::Launch {
            binary: server_binary(),
            args,
            module: self.with_module.then(|| (module_path(), self.module_args)),
            netns: self.netns,
            core: None,
            tied: false,
        }
    }
}

/// A server of the harness (`port`, `dir`, `pid()`, `kill()`, `restart()`,
/// ... through `Deref`), with what tests ask of it.
pub struct Server {
    inner: lock_harness::Server,
}

impl std::ops::Deref for Server {
    type Target = lock_harness::Server;

    fn deref(&self) -> &lock_harness::Server {
        &self.inner
    }
}

impl std::ops::DerefMut for Server {
    fn deref_mut(&mut self) -> &mut lock_harness::Server {
        &mut self.inner
    }
}

impl Server {
    /// A standalone server with the module and default settings.
    pub fn start() -> Server {
        Config::default().start()
    }

    /// A new connection with a read timeout, so a test can never hang.
    pub fn client(&self) -> Connection {
        let client = redis::Client::open(self.url()).expect("client");
        let con = client
            .get_connection_with_timeout(Duration::from_secs(5))
            .expect("connect");
        con.set_read_timeout(Some(PATIENCE)).expect("read timeout");
        con
    }

    /// A RESP3 connection (`HELLO 3`).
    pub fn client_resp3(&self) -> Connection {
        let client = redis::Client::open(format!("{}?protocol=resp3", self.url())).expect("client");
        let con = client
            .get_connection_with_timeout(Duration::from_secs(5))
            .expect("connect");
        con.set_read_timeout(Some(PATIENCE)).expect("read timeout");
        con
    }

    /// A field of INFO, as text.
    pub fn info_field(&self, section: &str, field: &str) -> Option<String> {
        let info: String = redis::cmd("INFO")
            .arg(section)
            .query(&mut self.client())
            .expect("INFO");
        info.lines().find_map(|line| {
            line.strip_prefix(field)
                .and_then(|rest| rest.strip_prefix(':'))
                .map(|v| v.trim().to_string())
        })
    }

    /// Whether `replica` has loaded this master's data and applied its
    /// replication stream up to where it stands now. WAIT cannot tell: it
    /// waits for the calling connection's own last write, and on a
    /// connection that wrote nothing it counts the connected replicas at
    /// once, a replica still loading a full sync included.
    pub fn replica_caught_up(&self, replica: &Server) -> bool {
        let offset = |server: &Server, field: &str| -> Option<i64> {
            server
                .info_field("replication", field)
                .and_then(|v| v.parse().ok())
        };
        let Some(target) = offset(self, "master_repl_offset") else {
            return false;
        };
        replica
            .info_field("replication", "master_link_status")
            .as_deref()
            == Some("up")
            && offset(replica, "slave_repl_offset").is_some_and(|done| done >= target)
    }

    /// A counter of `INFO lock` (`lock_<name>`).
    pub fn stat(&self, name: &str) -> i64 {
        self.info_field("lock", &format!("lock_{name}"))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("INFO lock has no lock_{name}"))
    }

    /// Starts a replica of `self`, waits until it is in sync.
    pub fn start_replica(&self, mut config: Config) -> Server {
        config.args.extend([
            "--replicaof".to_string(),
            self.host().to_string(),
            self.port.to_string(),
        ]);
        let replica = config.start();
        wait_until("replica link up", || {
            replica
                .info_field("replication", "master_link_status")
                .as_deref()
                == Some("up")
        });
        replica
    }
}

/// Runs `ip args` (iproute2: network namespaces, links) and says why it
/// failed.
pub fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Polls `cond` until it holds; panics with `what` after [`PATIENCE`].
pub fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        thread::sleep(Duration::from_millis(2));
    }
}

/// Runs a command, returning the raw reply (errors as `Err`).
pub fn raw(con: &mut Connection, args: &[&str]) -> redis::RedisResult<Value> {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query(con)
}

/// Runs a command expected to succeed, converting the reply.
pub fn q<T: redis::FromRedisValue>(con: &mut Connection, args: &[&str]) -> T {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query(con)
        .unwrap_or_else(|e| panic!("{args:?} failed: {e}"))
}

/// Runs a command expected to fail; returns the full error line
/// (`CODE message`).
pub fn err(con: &mut Connection, args: &[&str]) -> String {
    match raw(con, args) {
        Ok(v) => panic!("{args:?} should fail, replied {v:?}"),
        Err(e) => error_line(&e),
    }
}

/// Runs a command expected to fail; returns the error code alone (`NOPERM`),
/// for errors worded by the server, whose text differs between versions.
pub fn err_code(con: &mut Connection, args: &[&str]) -> String {
    match raw(con, args) {
        Ok(v) => panic!("{args:?} should fail, replied {v:?}"),
        Err(e) => e.code().unwrap_or("(no code)").to_string(),
    }
}

/// `CODE message` of a server error reply.
pub fn error_line(e: &redis::RedisError) -> String {
    match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_string(),
        _ => e.to_string(),
    }
}

/// Sends a command without reading the reply (for clients that block).
pub fn send(con: &mut Connection, args: &[&str]) {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    con.send_packed_command(&cmd.get_packed_command())
        .expect("send");
}

/// Reads the reply of a command sent with [`send`].
pub fn recv(con: &mut Connection) -> redis::RedisResult<Value> {
    con.recv_response()
}

/// The integers of an array reply made only of integers (a reply per key
/// of LOCK.MACQUIRE / LOCK.MRELEASE); `None` for any other reply.
pub fn ints_of(v: &Value) -> Option<Vec<i64>> {
    match v {
        Value::Array(items) => items
            .iter()
            .map(|item| match item {
                Value::Int(n) => Some(*n),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

/// How many callers are queued for `key`, a lock or a semaphore
/// (LOCK.WAITERS ... COUNT 0).
pub fn queued(con: &mut Connection, key: &str) -> usize {
    match raw(con, &["LOCK.WAITERS", key, "COUNT", "0"]) {
        Ok(Value::Array(items)) => items.len(),
        other => panic!("LOCK.WAITERS {key} replied {other:?}"),
    }
}

/// Waits until `n` callers are queued on `key` (LOCK.INFO waiters).
pub fn wait_for_waiters(con: &mut Connection, key: &str, n: i64) {
    wait_until(&format!("{n} waiters on {key}"), || waiters(con, key) == n);
}

pub fn waiters(con: &mut Connection, key: &str) -> i64 {
    match raw(con, &["LOCK.INFO", key]) {
        Ok(Value::Array(items)) => items
            .chunks(2)
            .find(|kv| matches!(&kv[0], Value::BulkString(k) if k == b"waiters"))
            .and_then(|kv| match kv[1] {
                Value::Int(n) => Some(n),
                _ => None,
            })
            .unwrap_or(0),
        _ => 0,
    }
}

/// LOCK.INFO as (field, value-as-text) pairs; empty when unlocked.
pub fn lock_info(con: &mut Connection, key: &str) -> Vec<(String, String)> {
    match raw(con, &["LOCK.INFO", key]).expect("LOCK.INFO") {
        Value::Nil => Vec::new(),
        Value::Array(items) => items
            .chunks(2)
            .map(|kv| (text(&kv[0]), text(&kv[1])))
            .collect(),
        other => panic!("LOCK.INFO replied {other:?}"),
    }
}

pub fn text(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Int(n) => n.to_string(),
        Value::Nil => "(nil)".into(),
        other => format!("{other:?}"),
    }
}

/// Reads the reply of a command sent with [`send`] that must be an error:
/// `CODE detail`. The redis crate hands an error reply read by `recv` back
/// as `Ok(Value::ServerError)`, not as `Err`.
pub fn recv_error(con: &mut Connection) -> String {
    match recv(con) {
        Ok(Value::ServerError(e)) => match e.details() {
            Some(detail) => format!("{} {detail}", e.code()),
            None => e.code().to_string(),
        },
        Err(e) => error_line(&e),
        Ok(other) => panic!("expected an error reply, got {other:?}"),
    }
}

/// `LOCK.ACQUIRE key owner <opts>`; panics on an error reply.
pub fn acquire(con: &mut Connection, key: &str, owner: &str, opts: &[&str]) -> Value {
    let mut args = vec!["LOCK.ACQUIRE", key, owner];
    args.extend_from_slice(opts);
    q(con, &args)
}

/// A new client of `server` whose owner `owner` holds `key` (a minute's
/// lease).
pub fn holding(server: &Server, key: &str, owner: &str) -> Connection {
    let mut con = server.client();
    acquire(&mut con, key, owner, &["PX", "60000"]);
    con
}

/// A client for callers that block: it sends a command without reading the
/// reply. A [`Connection`] (read with [`recv`]), or a test's own client.
pub trait BlockingClient: Sized {
    /// A new connection to `server`.
    fn open(server: &Server) -> Self;
    /// Sends a command without reading its reply.
    fn send_command(&mut self, args: &[&str]);
}

impl BlockingClient for Connection {
    fn open(server: &Server) -> Self {
        server.client()
    }

    fn send_command(&mut self, args: &[&str]) {
        send(self, args)
    }
}

/// Sends `LOCK.ACQUIRE key owner <opts>` (with `BLOCK` in `opts`) on a new
/// client of `server` and waits until it is the `nth` waiter of `key`.
pub fn queue_waiter<W: BlockingClient>(
    server: &Server,
    con: &mut Connection,
    key: &str,
    owner: &str,
    opts: &[&str],
    nth: i64,
) -> W {
    let mut w = W::open(server);
    let mut args = vec!["LOCK.ACQUIRE", key, owner];
    args.extend_from_slice(opts);
    w.send_command(&args);
    wait_for_waiters(con, key, nth);
    w
}

/// Field `name` of LOCK.INFO pairs (see [`lock_info`]).
pub fn field(info: &[(String, String)], name: &str) -> Option<String> {
    info.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
}

/// Field `name` of LOCK.INFO `key`; `None` when unlocked or absent.
pub fn lock_field(con: &mut Connection, key: &str, name: &str) -> Option<String> {
    field(&lock_info(con, key), name)
}

pub fn pexpiretime(con: &mut Connection, key: &str) -> i64 {
    q(con, &["PEXPIRETIME", key])
}

pub fn pttl(con: &mut Connection, key: &str) -> i64 {
    q(con, &["PTTL", key])
}

pub fn hgetall(con: &mut Connection, key: &str) -> Vec<(String, String)> {
    q(con, &["HGETALL", key])
}

pub fn exists(con: &mut Connection, key: &str) -> bool {
    q::<i64>(con, &["EXISTS", key]) == 1
}

pub fn client_id(con: &mut Connection) -> i64 {
    q(con, &["CLIENT", "ID"])
}

/// Wall-clock time in ms since the Unix epoch (as PEXPIRETIME counts).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64
}

/// Fencing tokens per millisecond of the granting master's clock
/// (`rules::transition::TOKENS_PER_MS`): a token is at least the master's
/// unix time in ms times this, and one more than the lock's last token.
pub const TOKENS_PER_MS: i64 = 1000;

/// The server's clock floor for a fencing token now: its `TIME` in whole
/// milliseconds times [`TOKENS_PER_MS`]. Read it before and after a FENCE
/// grant to bound the token (see [`assert_token_between`]).
pub fn token_floor(con: &mut Connection) -> i64 {
    let time: Vec<i64> = q(con, &["TIME"]);
    assert_eq!(time.len(), 2, "TIME replied {time:?}");
    (time[0] * 1000 + time[1] / 1000) * TOKENS_PER_MS
}

/// Asserts that `token` was granted between the clock floors `before` and
/// `after` (from [`token_floor`]) on a lock whose counter was not ahead of
/// the clock, with at most `earlier` tokens of the same lock granted in
/// that window before it: it is at least `before`, and at most the last
/// token of `after`'s millisecond (tokens of other locks granted in the
/// same millisecond push it up, by the server's per-millisecond sequence)
/// plus `earlier` (each earlier token of the lock can push its counter one
/// past the clock). The first token of a fresh lock has `earlier` = 0.
pub fn assert_token_between(token: i64, before: i64, after: i64, earlier: i64, what: &str) {
    let last = after + TOKENS_PER_MS - 1 + earlier;
    assert!(
        before <= token && token <= last,
        "{what}: token {token} not in [{before}, {last}]"
    );
}

/// Asserts that every token of `tokens` (in grant order) is above the one
/// before it.
pub fn assert_strictly_increasing(tokens: &[i64], what: &str) {
    for pair in tokens.windows(2) {
        assert!(
            pair[0] < pair[1],
            "{what}: tokens not increasing: {tokens:?}"
        );
    }
}

/// Node timeout of the test clusters. No test makes a node fail by
/// timeout, so it only has to ride out a slow moment of a loaded machine;
/// a manual failover (`CLUSTER FAILOVER`) does not wait for it.
pub const CLUSTER_NODE_TIMEOUT_MS: u32 = 5000;

/// Masters covering all slots in equal ranges (master `i` the `i`-th), each
/// with the same number of replicas, all with the module, in one cluster,
/// ready to serve.
pub struct Cluster {
    /// The masters as started, then the replicas (those of master `i` at
    /// `masters + i * replicas ..`). A failover changes the roles: ask
    /// [`Cluster::master_of_slot`] and [`Cluster::replica_of`].
    pub nodes: Vec<Server>,
    pub masters: usize,
}

/// One node's line of `CLUSTER NODES`, as every node should agree on it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct NodeView {
    pub id: String,
    pub port: u16,
    pub master: bool,
    /// The master's id, for a replica.
    pub master_id: Option<String>,
    /// Slot ranges as listed (`0-5460`, `5461`); no migration marks.
    pub slots: Vec<String>,
    /// Flags other than `myself`, `master`, `slave` (`fail?`, `handshake`...).
    pub other_flags: Vec<String>,
    pub connected: bool,
    pub config_epoch: u64,
}

impl NodeView {
    pub fn serves(&self, slot: u16) -> bool {
        self.slots.iter().any(|range| {
            let (lo, hi) = range.split_once('-').unwrap_or((range, range));
            matches!((lo.parse::<u16>(), hi.parse::<u16>()), (Ok(lo), Ok(hi)) if (lo..=hi).contains(&slot))
        })
    }
}

/// Parses `CLUSTER NODES`, sorted by node id.
pub fn parse_cluster_nodes(text: &str) -> Vec<NodeView> {
    let mut views: Vec<NodeView> = text
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let f: Vec<&str> = line.split(' ').collect();
            assert!(f.len() >= 8, "CLUSTER NODES line: {line}");
            let port = f[1]
                .split('@')
                .next()
                .and_then(|a| a.rsplit_once(':'))
                .and_then(|(_, p)| p.parse().ok())
                .unwrap_or(0);
            let flags: Vec<&str> = f[2].split(',').collect();
            NodeView {
                id: f[0].to_string(),
                port,
                master: flags.contains(&"master"),
                master_id: (f[3] != "-").then(|| f[3].to_string()),
                slots: f[8..]
                    .iter()
                    .filter(|s| !s.starts_with('['))
                    .map(|s| s.to_string())
                    .collect(),
                other_flags: flags
                    .iter()
                    .filter(|fl| !["myself", "master", "slave", "noflags"].contains(fl))
                    .map(|fl| fl.to_string())
                    .collect(),
                connected: f[7] == "connected",
                // A replica's epoch as others see it is its master's (the
                // bus header carries that), so only masters' are compared.
                config_epoch: if flags.contains(&"master") {
                    f[6].parse().unwrap_or(0)
                } else {
                    0
                },
            }
        })
        .collect();
    views.sort();
    views
}

impl Cluster {
    /// `masters` masters without replicas.
    pub fn start(masters: usize) -> Cluster {
        Self::start_with_replicas(masters, 0)
    }

    /// `masters` masters with `replicas` replicas each. Returns when every
    /// node reports `cluster_state:ok`, every replica's link is up and
    /// every node sees the same masters and replicas (see
    /// [`Cluster::wait_until_settled`]).
    pub fn start_with_replicas(masters: usize, replicas: usize) -> Cluster {
        assert!(masters >= 1, "a cluster needs a master");
        let total = masters * (1 + replicas);
        let mut nodes = Vec::with_capacity(total);
        let mut bus_ports = Vec::with_capacity(total);
        for _ in 0..total {
            // An explicit bus port: the default, port + 10000, is past
            // 65535 for about a fifth of the ephemeral ports.
            let bus = free_port();
            nodes.push(
                Config::default()
                    .arg("cluster-enabled", "yes")
                    .arg("cluster-config-file", "nodes.conf")
                    .arg("cluster-node-timeout", &CLUSTER_NODE_TIMEOUT_MS.to_string())
                    .arg("cluster-port", &bus.to_string())
                    // MODULE UNLOAD shows no module timer is left armed.
                    .arg("enable-module-command", "yes")
                    .start(),
            );
            bus_ports.push(bus);
        }
        let cluster = Cluster { nodes, masters };
        // Distinct config epochs before the nodes meet, as `redis-cli
        // --cluster create` assigns them: otherwise they all start at 0 and
        // the collision rule bumps them one by one while tests run, and a
        // bump landing between the two SETSLOT NODE of a migration can give
        // the slot back to its old owner.
        for (i, node) in cluster.nodes.iter().enumerate() {
            let epoch = (i + 1).to_string();
            let _: () = q(&mut node.client(), &["CLUSTER", "SET-CONFIG-EPOCH", &epoch]);
        }
        for i in 0..masters {
            let (first, last) = cluster.slot_range(i);
            let _: () = q(
                &mut cluster.nodes[i].client(),
                &[
                    "CLUSTER",
                    "ADDSLOTSRANGE",
                    &first.to_string(),
                    &last.to_string(),
                ],
            );
        }
        let (port0, bus0) = (cluster.nodes[0].port.to_string(), bus_ports[0].to_string());
        for node in &cluster.nodes[1..] {
            let _: () = q(
                &mut node.client(),
                &["CLUSTER", "MEET", "127.0.0.1", &port0, &bus0],
            );
        }
        // A replica can only follow a master it knows.
        let mut cons: Vec<Connection> = cluster.nodes.iter().map(Server::client).collect();
        wait_until("every node knows every other", || {
            cons.iter_mut().all(|con| {
                let views = parse_cluster_nodes(&q::<String>(con, &["CLUSTER", "NODES"]));
                views.len() == total && views.iter().all(|v| v.other_flags.is_empty())
            })
        });
        for i in 0..masters {
            let id = cluster.node_id(&cluster.nodes[i]);
            for j in 0..replicas {
                let replica = &cluster.nodes[masters + i * replicas + j];
                let _: () = q(&mut replica.client(), &["CLUSTER", "REPLICATE", &id]);
            }
        }
        cluster.wait_until_settled();
        cluster
    }

    /// The slots master `i` was started with (`first`, `last`).
    pub fn slot_range(&self, i: usize) -> (u16, u16) {
        let per = 16384 / self.masters;
        let first = i * per;
        let last = if i + 1 == self.masters {
            16383
        } else {
            first + per - 1
        };
        (first as u16, last as u16)
    }

    /// Which of the started slot ranges (shards) holds `slot`.
    pub fn shard_of_slot(&self, slot: u16) -> usize {
        (slot as usize / (16384 / self.masters)).min(self.masters - 1)
    }

    /// The node that served `key`'s slot when the cluster started (before
    /// any failover or slot migration).
    pub fn node_for(&self, key: &str) -> &Server {
        let slot: i64 = q(&mut self.nodes[0].client(), &["CLUSTER", "KEYSLOT", key]);
        &self.nodes[self.shard_of_slot(slot as u16)]
    }

    pub fn node_id(&self, server: &Server) -> String {
        q(&mut server.client(), &["CLUSTER", "MYID"])
    }

    /// The node listening on `port`.
    pub fn node_on(&self, port: u16) -> &Server {
        self.nodes
            .iter()
            .find(|n| n.port == port)
            .unwrap_or_else(|| panic!("no node of the cluster on port {port}"))
    }

    /// Whether the cluster is settled, as seen through `cons` (one
    /// connection per node, in `nodes` order); `Err` says what is not.
    fn settled(&self, cons: &mut [Connection]) -> Result<(), String> {
        let replicas = self.nodes.len() - self.masters;
        let mut first: Option<Vec<NodeView>> = None;
        for (node, con) in self.nodes.iter().zip(cons.iter_mut()) {
            let info: String = q(con, &["CLUSTER", "INFO"]);
            if !info.contains("cluster_state:ok") {
                return Err(format!("{} cluster_state not ok", node.port));
            }
            let view = parse_cluster_nodes(&q::<String>(con, &["CLUSTER", "NODES"]));
            let masters = view.iter().filter(|v| v.master).count();
            let slaves = view.iter().filter(|v| !v.master).count();
            if masters != self.masters || slaves != replicas {
                return Err(format!(
                    "{} sees {masters} masters, {slaves} replicas",
                    node.port
                ));
            }
            if let Some(v) = view
                .iter()
                .find(|v| !v.other_flags.is_empty() || !v.connected)
            {
                return Err(format!("{} sees {v:?}", node.port));
            }
            let mut epochs: Vec<u64> = view
                .iter()
                .filter(|v| v.master)
                .map(|v| v.config_epoch)
                .collect();
            epochs.sort_unstable();
            epochs.dedup();
            if epochs.len() != masters || epochs.contains(&0) {
                return Err(format!("{} sees masters' epochs {epochs:?}", node.port));
            }
            for v in view.iter().filter(|v| !v.master) {
                let follows_a_master = view
                    .iter()
                    .any(|m| m.master && Some(&m.id) == v.master_id.as_ref());
                if !follows_a_master || !v.slots.is_empty() {
                    return Err(format!("{} sees replica {v:?}", node.port));
                }
            }
            let role: String = q(con, &["INFO", "replication"]);
            let me = view
                .iter()
                .find(|v| v.port == node.port)
                .ok_or_else(|| format!("{} does not list itself", node.port))?;
            if me.master {
                if !role.contains("role:master") {
                    return Err(format!("{} not yet a master", node.port));
                }
            } else {
                let master = view
                    .iter()
                    .find(|m| Some(&m.id) == me.master_id.as_ref())
                    .expect("checked above");
                let expected = format!("master_port:{}\r", master.port);
                if !role.contains("role:slave")
                    || !role.contains(&expected)
                    || !role.contains("master_link_status:up")
                {
                    return Err(format!(
                        "{} not yet in sync with {}",
                        node.port, master.port
                    ));
                }
            }
            match &first {
                None => first = Some(view),
                Some(v0) if *v0 == view => {}
                Some(_) => return Err(format!("{} sees another cluster", node.port)),
            }
        }
        Ok(())
    }

    /// Waits until every node reports `cluster_state:ok`, every node's
    /// `CLUSTER NODES` is the same (same masters with the same slots, same
    /// replicas of the same masters, all connected, no failure or handshake
    /// flag), and every node's `INFO replication` agrees with it: masters
    /// are masters, replicas replicate their master with the link up.
    pub fn wait_until_settled(&self) {
        let mut cons: Vec<Connection> = self.nodes.iter().map(Server::client).collect();
        let deadline = Instant::now() + PATIENCE;
        loop {
            let last = match self.settled(&mut cons) {
                Ok(()) => return,
                Err(why) => why,
            };
            assert!(
                Instant::now() < deadline,
                "timed out waiting for the cluster to settle: {last}"
            );
            thread::sleep(Duration::from_millis(2));
        }
    }

    /// The master serving `slot`, once every node agrees on it (asked each
    /// time: failovers move it).
    pub fn master_of_slot(&self, slot: u16) -> &Server {
        let mut cons: Vec<Connection> = self.nodes.iter().map(Server::client).collect();
        let mut port = 0;
        wait_until(
            &format!("the nodes agree on the master of slot {slot}"),
            || {
                let ports: Vec<Option<u16>> = cons
                    .iter_mut()
                    .map(|con| {
                        parse_cluster_nodes(&q::<String>(con, &["CLUSTER", "NODES"]))
                            .iter()
                            .find(|v| v.master && v.serves(slot))
                            .map(|v| v.port)
                    })
                    .collect();
                match ports[0] {
                    Some(p) if ports.iter().all(|o| *o == Some(p)) => {
                        port = p;
                        true
                    }
                    _ => false,
                }
            },
        );
        self.node_on(port)
    }

    /// A replica of `master` whose link to it is up.
    pub fn replica_of(&self, master: &Server) -> &Server {
        let mut found = None;
        wait_until(&format!("a replica of {} in sync", master.port), || {
            found = self.nodes.iter().find(|n| {
                n.port != master.port && {
                    let info: String = q(&mut n.client(), &["INFO", "replication"]);
                    info.contains("role:slave")
                        && info.contains(&format!("master_port:{}\r", master.port))
                        && info.contains("master_link_status:up")
                }
            });
            found.is_some()
        });
        found.expect("found")
    }

    /// `CLUSTER FAILOVER` (the coordinated manual failover) on `replica`;
    /// returns once it is a master and the cluster has settled again (its
    /// old master now replicating it).
    pub fn failover(&self, replica: &Server) {
        let _: () = q(&mut replica.client(), &["CLUSTER", "FAILOVER"]);
        wait_until(&format!("{} promoted", replica.port), || {
            replica.info_field("replication", "role").as_deref() == Some("master")
        });
        self.wait_until_settled();
    }
}

/// splitmix64: small and seedable, so a randomized test replays from the
/// seed it prints.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (0 for `n` = 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    pub fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

/// Asserts `lo_exclusive < value <= hi_inclusive` (a TTL, say).
pub fn assert_in(value: i64, lo_exclusive: i64, hi_inclusive: i64, what: &str) {
    assert!(
        value > lo_exclusive && value <= hi_inclusive,
        "{what}: {value} not in ({lo_exclusive}, {hi_inclusive}]"
    );
}

/// A module setting's value, as `CONFIG GET` gives it.
pub fn config_get(con: &mut Connection, name: &str) -> String {
    let kv: Vec<String> = q(con, &["CONFIG", "GET", name]);
    assert_eq!(kv.len(), 2, "CONFIG GET {name}: {kv:?}");
    kv[1].clone()
}

/// A session connection (`LOCK.SESSION token`), then subscribed to its
/// loss channel `__lock__:session:<token>`; `id` is its client id.
pub struct Session {
    pub con: Connection,
    pub id: i64,
}

impl Session {
    pub fn open(server: &Server, token: &str) -> Session {
        let mut con = server.client();
        let id = client_id(&mut con);
        assert_eq!(q::<String>(&mut con, &["LOCK.SESSION", token]), "OK");
        send(
            &mut con,
            &["SUBSCRIBE", &format!("__lock__:session:{token}")],
        );
        recv(&mut con).expect("subscribed");
        con.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .expect("read timeout");
        Session { con, id }
    }

    /// The next message on the session's channel (10 s at most).
    pub fn next_message(&mut self) -> String {
        match recv(&mut self.con).expect("a message on the session's channel") {
            Value::Array(items) if items.len() == 3 => text(&items[2]),
            other => panic!("not a pub/sub message: {other:?}"),
        }
    }
}

/// An integer reply (read with [`recv`] or [`raw`]), `what` naming it when
/// it is not one.
pub fn int_reply(v: redis::RedisResult<Value>, what: &str) -> i64 {
    match v {
        Ok(Value::Int(n)) => n,
        other => panic!("{what}: {other:?}"),
    }
}
