//! A small synchronous Redis Cluster client for the tests, written on
//! `redis::Connection` (the crate's cluster feature is not used), so a test
//! sees and counts every redirect.
//!
//! - Keys are mapped to slots as Redis does: CRC16 (XMODEM) of the key, or of
//!   the part between the first `{` and the next `}` when that part is not
//!   empty, modulo 16384.
//! - The slot map starts empty (or is loaded with [`ClusterClient::refresh`])
//!   and is filled from `CLUSTER SLOTS` of any reachable node. A command for a
//!   slot the map does not know goes to any known node.
//! - One connection per node address, opened on first use.
//!
//! What is resent, and why. A command is only ever resent when it is certain
//! that it did not run:
//!
//! - The reply is `MOVED`, `ASK`, `TRYAGAIN` or `CLUSTERDOWN`: the server
//!   refused the command before running it. `MOVED` updates the slot and
//!   reloads the map from the node it names, then resends there; `ASK`
//!   resends once to the named node behind `ASKING`, without touching the
//!   map; `TRYAGAIN` and `CLUSTERDOWN` (which also reloads the map) resend
//!   after a short backoff. A waiter answered `TRYAGAIN` by the module (its
//!   slot moved while it waited) was not granted the lock either.
//! - Connecting failed, or sending failed: a failed write leaves at least the
//!   command's last byte unsent, and Redis runs nothing before a command is
//!   complete. The connection is dropped and the map reloaded.
//!
//! An I/O error or timeout while reading the reply of a command that was
//! sent is an unknown outcome: the command may have run (an acquire may
//! have been granted). It is never resent: the caller gets
//! [`CallError::Unknown`] and must find out itself (for instance with
//! `LOCK.INFO`). The connection is dropped, since a late reply would
//! otherwise be read as the answer to the next command.
//!
//! Every other error reply (`UNBLOCKED ...`, `NOTOWNER ...`, `CROSSSLOT ...`,
//! `READONLY ...`, `WRONGTYPE ...`) goes to the caller unchanged as
//! [`CallError::Reply`]. After `UNBLOCKED` the connection is dropped: Redis
//! closes a connection whose blocked command it unblocks on a role change.
//!
//! Retries are bounded ([`ClusterClient::max_attempts`] sends per call); past
//! that the call fails with [`CallError::NotRun`]. A command that blocks
//! (`BLOCK ms`) is read with a timeout of its block time plus the default
//! read timeout (`BLOCK 0`: [`super::PATIENCE`] more).

use std::collections::HashMap;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use redis::{Connection, Value};

pub const SLOTS: usize = 16384;

/// The module's own slot function; `tests/cluster_failover.rs` checks it
/// against `CLUSTER KEYSLOT`.
pub use lock_rules::keys::key_slot;

/// How a call failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallError {
    /// An error reply of the server, `CODE detail`, passed on unchanged.
    Reply(String),
    /// Sent, but no reply was read: it may or may not have run.
    Unknown(String),
    /// Did not run: no node reachable, or still redirected or refused
    /// (`TRYAGAIN`, `CLUSTERDOWN`) after the last attempt.
    NotRun(String),
}

impl CallError {
    /// The error reply's text, when the server answered with one.
    pub fn reply(&self) -> Option<&str> {
        match self {
            CallError::Reply(line) => Some(line),
            _ => None,
        }
    }
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Reply(line) => write!(f, "error reply: {line}"),
            CallError::Unknown(why) => write!(f, "unknown outcome: {why}"),
            CallError::NotRun(why) => write!(f, "not run: {why}"),
        }
    }
}

/// What the client has seen since it was made.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub moved: u64,
    pub ask: u64,
    pub tryagain: u64,
    pub clusterdown: u64,
    /// Connect or send failures (the command did not run; resent).
    pub connection_errors: u64,
    /// Replies not read after the command was sent (not resent).
    pub unknown_outcomes: u64,
    /// Full reloads of the slot map.
    pub map_reloads: u64,
    /// Sends after the first one of a call, for any of the reasons above.
    pub retries: u64,
}

impl Stats {
    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &Stats) {
        self.moved += other.moved;
        self.ask += other.ask;
        self.tryagain += other.tryagain;
        self.clusterdown += other.clusterdown;
        self.connection_errors += other.connection_errors;
        self.unknown_outcomes += other.unknown_outcomes;
        self.map_reloads += other.map_reloads;
        self.retries += other.retries;
    }
}

/// Why a call goes round again.
enum Again {
    /// To this address (MOVED, ASK).
    To { addr: Arc<str>, asking: bool },
    /// After a backoff.
    Later,
}

pub struct ClusterClient {
    seeds: Vec<Arc<str>>,
    slots: Vec<Option<Arc<str>>>,
    conns: HashMap<Arc<str>, Connection>,
    pub stats: Stats,
    /// Read timeout of commands that do not block.
    pub read_timeout: Duration,
    /// Sends per call, the first one included.
    pub max_attempts: u32,
}

impl ClusterClient {
    /// A client that knows only `seeds` (`host:port`) and no slot: its first
    /// command for each shard goes to a seed and follows the redirect.
    pub fn new(seeds: &[String]) -> Self {
        assert!(!seeds.is_empty(), "a cluster client needs a seed node");
        Self {
            seeds: seeds.iter().map(|s| Arc::from(s.as_str())).collect(),
            slots: vec![None; SLOTS],
            conns: HashMap::new(),
            stats: Stats::default(),
            read_timeout: Duration::from_secs(5),
            max_attempts: 16,
        }
    }

    /// The address the map gives for `slot`.
    pub fn addr_of_slot(&self, slot: u16) -> Option<&str> {
        self.slots[slot as usize].as_deref()
    }

    /// Runs one command, routed by its key (see [`routing_key`]). An error
    /// reply comes back as [`CallError::Reply`].
    pub fn query(&mut self, args: &[&str]) -> Result<Value, CallError> {
        let slot = routing_key(args).map(|k| key_slot(k.as_bytes()));
        let timeout = self.timeout_for(args);
        let mut replies = self.run(slot, &pack(&[args]), 1, 0, timeout)?;
        into_result(replies.pop().expect("one reply"))
    }

    /// `MULTI`, `commands`, `EXEC`, sent together to the node of the first
    /// command's key. Redirects of the first command (the transaction is
    /// then aborted and nothing ran) are followed; anything else is the
    /// server's answer to `EXEC`: its reply, or its error (`CROSSSLOT`,
    /// `EXECABORT` when a later command was redirected).
    pub fn transaction(&mut self, commands: &[&[&str]]) -> Result<Value, CallError> {
        assert!(!commands.is_empty(), "an empty transaction");
        let slot = routing_key(commands[0]).map(|k| key_slot(k.as_bytes()));
        let mut all: Vec<&[&str]> = vec![&["MULTI"]];
        all.extend_from_slice(commands);
        all.push(&["EXEC"]);
        let timeout = self.read_timeout;
        let replies = self.run(slot, &pack(&all), all.len(), 1, timeout)?;
        into_result(replies.into_iter().last().expect("EXEC reply"))
    }

    /// Loads the slot map from `CLUSTER SLOTS` of the first node that
    /// answers, trying `preferred` first, then the seeds and every address
    /// the map knows. Returns whether a node answered.
    pub fn refresh(&mut self, preferred: Option<Arc<str>>) -> bool {
        let mut candidates: Vec<Arc<str>> = preferred.into_iter().collect();
        candidates.extend(self.seeds.iter().cloned());
        for addr in self.slots.iter().flatten() {
            if !candidates.contains(addr) {
                candidates.push(addr.clone());
            }
        }
        for addr in candidates {
            let timeout = self.read_timeout;
            let Ok(con) = self.connection(&addr) else {
                continue;
            };
            let _ = con.set_read_timeout(Some(timeout));
            let reply = redis::cmd("CLUSTER").arg("SLOTS").query::<Value>(con);
            match reply.ok().and_then(|v| parse_cluster_slots(&v, &addr)) {
                Some(ranges) => {
                    self.slots = vec![None; SLOTS];
                    for (first, last, master) in ranges {
                        let master: Arc<str> = Arc::from(master.as_str());
                        for slot in first..=last {
                            self.slots[slot as usize] = Some(master.clone());
                        }
                    }
                    self.stats.map_reloads += 1;
                    return true;
                }
                None => {
                    self.conns.remove(&addr);
                }
            }
        }
        false
    }

    /// Read timeout for `args`: longer than its `BLOCK` time.
    fn timeout_for(&self, args: &[&str]) -> Duration {
        let block = args
            .windows(2)
            .skip(1)
            .find(|w| w[0].eq_ignore_ascii_case("BLOCK"))
            .and_then(|w| w[1].parse::<u64>().ok());
        match block {
            None => self.read_timeout,
            Some(0) => self.read_timeout + super::PATIENCE,
            Some(ms) => self.read_timeout + Duration::from_millis(ms),
        }
    }

    fn connection(&mut self, addr: &Arc<str>) -> redis::RedisResult<&mut Connection> {
        if !self.conns.contains_key(addr) {
            let client = redis::Client::open(format!("redis://{addr}/"))?;
            let con = client.get_connection_with_timeout(Duration::from_secs(2))?;
            con.set_write_timeout(Some(Duration::from_secs(5)))?;
            self.conns.insert(addr.clone(), con);
        }
        Ok(self.conns.get_mut(addr).expect("just inserted"))
    }

    /// Where a command for `slot` goes when nothing redirected it.
    fn route(&self, slot: Option<u16>) -> Arc<str> {
        slot.and_then(|s| self.slots[s as usize].clone())
            .or_else(|| self.slots.iter().flatten().next().cloned())
            .unwrap_or_else(|| self.seeds[0].clone())
    }

    /// Sends `body` (holding `n` commands) and reads `n` replies, following
    /// redirects and retrying as the module doc says. `watch` is the index
    /// of the reply that tells whether the batch was refused by routing.
    fn run(
        &mut self,
        slot: Option<u16>,
        body: &[u8],
        n: usize,
        watch: usize,
        timeout: Duration,
    ) -> Result<Vec<Value>, CallError> {
        let mut redirect: Option<(Arc<str>, bool)> = None;
        let mut last = String::from("no attempt");
        let mut failures_in_a_row = 0u32;
        for attempt in 0..self.max_attempts {
            if attempt > 0 {
                self.stats.retries += 1;
            }
            let (addr, asking) = redirect.take().unwrap_or_else(|| (self.route(slot), false));
            match self.attempt(&addr, asking, body, n, watch, timeout)? {
                Ok(replies) => return Ok(replies),
                Err((again, why)) => {
                    last = why;
                    match again {
                        Again::To { addr, asking } => {
                            failures_in_a_row = 0;
                            redirect = Some((addr, asking));
                        }
                        Again::Later => {
                            failures_in_a_row += 1;
                            let ms = (5u64 << failures_in_a_row.min(5)).min(100);
                            thread::sleep(Duration::from_millis(ms));
                        }
                    }
                }
            }
        }
        Err(CallError::NotRun(format!(
            "{} attempts, the last: {last}",
            self.max_attempts
        )))
    }

    /// One send. `Ok(Ok(replies))`: answered; `Ok(Err(..))`: not run, go
    /// again; `Err`: unknown outcome.
    #[allow(clippy::type_complexity)]
    fn attempt(
        &mut self,
        addr: &Arc<str>,
        asking: bool,
        body: &[u8],
        n: usize,
        watch: usize,
        timeout: Duration,
    ) -> Result<Result<Vec<Value>, (Again, String)>, CallError> {
        let con = match self.connection(addr) {
            Ok(con) => con,
            Err(e) => {
                self.stats.connection_errors += 1;
                self.conns.remove(addr);
                let why = format!("connect to {addr}: {e}");
                self.refresh(None);
                return Ok(Err((Again::Later, why)));
            }
        };
        let sent = con.set_read_timeout(Some(timeout)).and_then(|()| {
            if asking {
                let mut with_asking = pack(&[&["ASKING"]]);
                with_asking.extend_from_slice(body);
                con.send_packed_command(&with_asking)
            } else {
                con.send_packed_command(body)
            }
        });
        if let Err(e) = sent {
            self.stats.connection_errors += 1;
            self.conns.remove(addr);
            let why = format!("send to {addr}: {e}");
            self.refresh(None);
            return Ok(Err((Again::Later, why)));
        }
        let mut replies = Vec::with_capacity(n + 1);
        for _ in 0..n + usize::from(asking) {
            match con.recv_response() {
                Ok(v) => replies.push(v),
                Err(e) => {
                    self.stats.unknown_outcomes += 1;
                    self.conns.remove(addr);
                    return Err(CallError::Unknown(format!("reading from {addr}: {e}")));
                }
            }
        }
        if asking {
            replies.remove(0);
        }
        let Value::ServerError(e) = &replies[watch] else {
            return Ok(Ok(replies));
        };
        let detail = e.details().unwrap_or("");
        let line = format!("{} {detail}", e.code());
        match e.code() {
            "MOVED" | "ASK" => {
                let Some((slot, target)) = parse_redirect(detail, addr) else {
                    return Ok(Ok(replies));
                };
                let target: Arc<str> = Arc::from(target.as_str());
                let asking = e.code() == "ASK";
                if asking {
                    self.stats.ask += 1;
                } else {
                    self.stats.moved += 1;
                    // The map is stale: reload it from the node that serves
                    // the slot now, and keep what MOVED said for this slot
                    // whatever that node's view of the others is.
                    self.refresh(Some(target.clone()));
                    self.slots[slot as usize] = Some(target.clone());
                }
                Ok(Err((
                    Again::To {
                        addr: target,
                        asking,
                    },
                    format!("{line} (from {addr})"),
                )))
            }
            "TRYAGAIN" => {
                self.stats.tryagain += 1;
                Ok(Err((Again::Later, format!("{line} (from {addr})"))))
            }
            "CLUSTERDOWN" => {
                self.stats.clusterdown += 1;
                self.refresh(None);
                Ok(Err((Again::Later, format!("{line} (from {addr})"))))
            }
            code => {
                if code == "UNBLOCKED" {
                    // Redis closes the connection after this reply.
                    self.conns.remove(addr);
                }
                Ok(Ok(replies))
            }
        }
    }
}

/// The key a command is routed by: the first key of `EVAL`/`EVALSHA`/
/// `FCALL` (and their `_RO` forms) when they declare one, nothing for a few
/// keyless commands, otherwise the first argument.
pub fn routing_key<'a>(args: &[&'a str]) -> Option<&'a str> {
    let name = args.first()?.to_ascii_uppercase();
    match name.as_str() {
        "EVAL" | "EVALSHA" | "EVAL_RO" | "EVALSHA_RO" | "FCALL" | "FCALL_RO" => {
            let numkeys: usize = args.get(2)?.parse().ok()?;
            (numkeys > 0).then(|| args.get(3).copied()).flatten()
        }
        "PING" | "INFO" | "CLUSTER" | "DBSIZE" | "WAIT" | "MULTI" | "EXEC" => None,
        _ => args.get(1).copied(),
    }
}

fn pack(commands: &[&[&str]]) -> Vec<u8> {
    let mut out = Vec::new();
    for args in commands {
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        out.extend_from_slice(&cmd.get_packed_command());
    }
    out
}

fn into_result(v: Value) -> Result<Value, CallError> {
    match v {
        Value::ServerError(e) => Err(CallError::Reply(match e.details() {
            Some(detail) => format!("{} {detail}", e.code()),
            None => e.code().to_string(),
        })),
        v => Ok(v),
    }
}

/// `<slot> <host:port>` of a MOVED or ASK reply; an empty host (a node that
/// does not know its own address) is the host of the node that answered.
fn parse_redirect(detail: &str, from: &str) -> Option<(u16, String)> {
    let (slot, addr) = detail.trim().split_once(' ')?;
    let slot: u16 = slot.parse().ok().filter(|s| (*s as usize) < SLOTS)?;
    let (host, port) = addr.rsplit_once(':')?;
    let host = if host.is_empty() || host == "?" {
        from.rsplit_once(':').map_or("127.0.0.1", |(h, _)| h)
    } else {
        host
    };
    Some((slot, format!("{host}:{port}")))
}

/// `(first, last, master address)` of each range of a `CLUSTER SLOTS` reply.
fn parse_cluster_slots(v: &Value, from: &str) -> Option<Vec<(u16, u16, String)>> {
    let Value::Array(ranges) = v else {
        return None;
    };
    let mut out = Vec::new();
    for range in ranges {
        let Value::Array(fields) = range else {
            return None;
        };
        let (Some(Value::Int(first)), Some(Value::Int(last)), Some(Value::Array(master))) =
            (fields.first(), fields.get(1), fields.get(2))
        else {
            return None;
        };
        let host = match master.first() {
            Some(Value::BulkString(h)) if !h.is_empty() && h != b"?" => {
                String::from_utf8_lossy(h).into_owned()
            }
            _ => from
                .rsplit_once(':')
                .map_or("127.0.0.1", |(h, _)| h)
                .to_string(),
        };
        let Some(Value::Int(port)) = master.get(1) else {
            return None;
        };
        out.push((*first as u16, *last as u16, format!("{host}:{port}")));
    }
    Some(out)
}
