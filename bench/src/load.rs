//! Closed-loop lock clients for the throughput scenarios (S1, S2, S5), one
//! tokio task per client on a current_thread runtime, and the protocols:
//!
//! - module:   `LOCK.ACQUIRE key owner PX lease BLOCK wait` / `LOCK.RELEASE key owner`
//! - redisson: acquire script by EVALSHA; on a PTTL answer the client's process
//!   subscribes to `redisson_lock__channel:{key}` (once per process and lock) and
//!   the client retries when one message is handed to it or the PTTL passes;
//!   release script (HINCRBY -1, DEL + PUBLISH at 0)
//! - spin:     `SET key owner NX PX lease`, retried after a fixed sleep;
//!   compare-and-delete script to release
//! - raw:      `SET key owner NX PX lease` retried at once / `DEL key`
//! - blpop:    S2's reference, not a lock: the key is a list holding one
//!   token (`DEL` + `RPUSH` before the run); `BLPOP key wait` / `RPUSH key
//!   token`, Redis's own hand-off between blocked clients, no module involved
//!
//! Every grant is checked against a holder flag per key (set when the grant
//! arrives, cleared before the release is sent) and every reply against what
//! the protocol must answer; either failing is reported and fails the run.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::io;
use std::rc::Rc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::{json, Value};
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout_at};

use crate::resp::{Conn, Reply};
use crate::server::CpuMeter;
use crate::stats::{self, jain, Lat};

/// Redisson's acquire (RLock `tryLockInnerAsync`, as described in
/// redisson-protocol.md), the same script the interop tests run: KEYS[1]
/// lock, ARGV[1] lease ms, ARGV[2] owner. Nil = acquired, otherwise the
/// lock's PTTL.
pub const REDISSON_ACQUIRE: &str = include_str!("../../scripts/redisson-acquire.lua");

/// Redisson's release: KEYS[1] lock, KEYS[2] channel, ARGV[1] message,
/// ARGV[2] lease ms, ARGV[3] owner. Nil = not the owner, 0 = holds remain,
/// 1 = released (deleted and published).
pub const REDISSON_RELEASE: &str = include_str!("../../scripts/redisson-release.lua");

/// Compare-and-delete (redis-py's Lock release): 1 = deleted.
pub const COMPARE_AND_DELETE: &str = "\
if redis.call('get', KEYS[1]) == ARGV[1] then \
return redis.call('del', KEYS[1]); \
end; \
return 0;";

#[derive(Clone, Debug)]
pub struct Scripts {
    pub acquire: String,
    pub release: String,
    pub cad: String,
}

impl Scripts {
    pub async fn load(conn: &mut Conn) -> io::Result<Scripts> {
        Ok(Scripts {
            acquire: conn.ok(&["SCRIPT", "LOAD", REDISSON_ACQUIRE]).await?.text(),
            release: conn.ok(&["SCRIPT", "LOAD", REDISSON_RELEASE]).await?.text(),
            cad: conn
                .ok(&["SCRIPT", "LOAD", COMPARE_AND_DELETE])
                .await?
                .text(),
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    Module,
    Redisson,
    /// Retry sleep in ms.
    Spin(u64),
    Raw,
    /// Redis's native blocked-client hand-off: BLPOP / RPUSH of one token.
    Blpop,
}

impl Proto {
    pub fn name(&self) -> String {
        match self {
            Proto::Module => "module".into(),
            Proto::Redisson => "redisson".into(),
            Proto::Spin(ms) => format!("spin-{ms}ms"),
            Proto::Raw => "raw".into(),
            Proto::Blpop => "blpop".into(),
        }
    }
}

/// The one element of a `blpop` key's list.
pub const BLPOP_TOKEN: &[u8] = b"token";

/// BLPOP's timeout (seconds, decimals allowed since Redis 6) for a BLOCK
/// wait in ms: 10000 -> "10", 500 -> "0.5", 0 -> "0" (forever, as BLOCK 0).
pub fn blpop_timeout(block_ms: u64) -> String {
    let (s, ms) = (block_ms / 1000, block_ms % 1000);
    if ms == 0 {
        s.to_string()
    } else {
        format!("{s}.{ms:03}").trim_end_matches('0').to_string()
    }
}

/// Redisson channel of a lock name.
pub fn channel_of(key: &[u8]) -> Vec<u8> {
    let mut c = b"redisson_lock__channel:{".to_vec();
    c.extend_from_slice(key);
    c.push(b'}');
    c
}

/// Owner id in Redisson's `<uuid>:<thread>` form: one uuid-like id per
/// simulated process.
pub fn owner_id(process: usize, thread: usize) -> Vec<u8> {
    format!(
        "8743c9c0-0795-4907-87fd-{:012x}:{}",
        0x6c71_9a6b_0000u64 + process as u64,
        thread + 1
    )
    .into_bytes()
}

#[derive(Clone, Debug)]
pub struct LoadSpec {
    pub proto: Proto,
    pub clients: usize,
    pub keys: usize,
    /// Redisson: client threads per simulated process.
    pub threads_per_process: usize,
    pub warmup: Duration,
    pub measure: Duration,
    pub lease_ms: u64,
    pub block_ms: u64,
    /// Key prefix, unique per run.
    pub prefix: String,
    pub seed: u64,
}

#[derive(Clone, Debug)]
pub struct LoadResult {
    pub proto: String,
    pub clients: usize,
    pub keys: usize,
    pub processes: usize,
    pub measured_s: f64,
    pub acquisitions: u64,
    pub rate: f64,
    pub lat: Lat,
    pub jain: f64,
    pub per_client: Vec<u64>,
    /// Waits still open when the window closed (counted in `lat` with their
    /// length so far).
    pub open_waits: u64,
    /// Failed tries (PTTL answers, SET NX nil) in the window.
    pub failed_tries: u64,
    /// BLOCK timeouts (module and blpop nil answers).
    pub timeouts: u64,
    pub violations: Vec<String>,
    pub errors: Vec<String>,
    pub server_cpu: f64,
    pub generator_cpu: f64,
    pub others_cpu: f64,
    /// INFO commandstats of the run (warm-up and drain included):
    /// (command, calls, µs per call).
    pub commandstats: Vec<(String, u64, f64)>,
}

impl LoadResult {
    pub fn json(&self) -> Value {
        json!({
            "protocol": self.proto, "clients": self.clients, "keys": self.keys,
            "processes": self.processes, "measured_s": self.measured_s,
            "acquisitions": self.acquisitions, "rate_per_s": self.rate,
            "wait": self.lat.json(), "jain": self.jain,
            "open_waits_at_end": self.open_waits, "failed_tries": self.failed_tries,
            "block_timeouts": self.timeouts, "violations": self.violations,
            "errors": self.errors, "server_cpu_pct": self.server_cpu,
            "generator_cpu_pct": self.generator_cpu, "others_cpu_pct": self.others_cpu,
            "per_client_acquisitions": self.per_client,
            "commandstats": self.commandstats.iter().map(|(c, n, us)| json!({"command": c, "calls": n, "usec_per_call": us})).collect::<Vec<_>>(),
        })
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Warmup,
    Measure,
    Drain,
}

struct Shared {
    proto: Proto,
    phase: Cell<Phase>,
    stopping: Cell<bool>,
    stop: Notify,
    keys: Vec<Vec<u8>>,
    channels: Vec<Vec<u8>>,
    channel_index: HashMap<Vec<u8>, usize>,
    holders: Vec<Cell<u32>>,
    hist: RefCell<Histogram<u64>>,
    counts: Vec<Cell<u64>>,
    wait_start: Vec<Cell<Option<Instant>>>,
    violations: RefCell<Vec<String>>,
    errors: RefCell<Vec<String>>,
    failed_tries: Cell<u64>,
    timeouts: Cell<u64>,
    lease: Vec<u8>,
    block: Vec<u8>,
    /// `block` in seconds (BLPOP's timeout), e.g. "10" or "0.5".
    block_secs: Vec<u8>,
    scripts: Scripts,
}

impl Shared {
    fn error(&self, msg: String) {
        let mut e = self.errors.borrow_mut();
        if e.len() < 20 {
            e.push(msg);
        }
    }

    fn violation(&self, msg: String) {
        let mut v = self.violations.borrow_mut();
        if v.len() < 20 {
            v.push(msg);
        }
    }

    fn measuring(&self) -> bool {
        self.phase.get() == Phase::Measure
    }

    fn failed_try(&self) {
        if self.measuring() {
            self.failed_tries.set(self.failed_tries.get() + 1);
        }
    }
}

/// A subscription of one process to one lock's channel.
#[derive(Default)]
struct Chan {
    /// 0 none, 1 SUBSCRIBE sent, 2 confirmed.
    state: Cell<u8>,
    ready: Notify,
    /// One message wakes one waiting thread of the process (a message that
    /// finds none waiting is kept as one permit, like Redisson's semaphore).
    wake: Notify,
}

/// A simulated Redisson client process: one pub/sub connection shared by its
/// threads.
struct Process {
    sub_tx: mpsc::UnboundedSender<usize>,
    chans: RefCell<HashMap<usize, Rc<Chan>>>,
}

impl Process {
    fn chan(&self, key: usize) -> Rc<Chan> {
        self.chans.borrow_mut().entry(key).or_default().clone()
    }

    /// Subscribes this process to `key`'s channel if no thread did yet, and
    /// waits until the subscription is confirmed.
    async fn subscribe(&self, key: usize) -> io::Result<Rc<Chan>> {
        let chan = self.chan(key);
        if chan.state.get() == 0 {
            chan.state.set(1);
            self.sub_tx
                .send(key)
                .map_err(|_| io::Error::other("pub/sub connection closed"))?;
        }
        while chan.state.get() != 2 {
            chan.ready.notified().await;
        }
        Ok(chan)
    }
}

async fn pubsub_task(
    mut conn: Conn,
    mut rx: mpsc::UnboundedReceiver<usize>,
    process: Rc<Process>,
    shared: Rc<Shared>,
) {
    if let Err(e) = pubsub_loop(&mut conn, &mut rx, &process, &shared).await {
        if !shared.stopping.get() {
            shared.error(format!("redisson pub/sub connection: {e}"));
        }
    }
}

async fn pubsub_loop(
    conn: &mut Conn,
    rx: &mut mpsc::UnboundedReceiver<usize>,
    process: &Process,
    shared: &Shared,
) -> io::Result<()> {
    loop {
        tokio::select! {
            biased;
            reply = conn.read() => {
                let reply = reply?;
                let Reply::Array(items) = &reply else {
                    return Err(io::Error::other(format!("unexpected pub/sub reply {reply:?}")));
                };
                match items.as_slice() {
                    [Reply::Bulk(kind), Reply::Bulk(ch), _] => {
                        let Some(&key) = shared.channel_index.get(ch) else {
                            continue;
                        };
                        let chan = process.chan(key);
                        if kind == b"message" {
                            chan.wake.notify_one();
                        } else if kind == b"subscribe" {
                            chan.state.set(2);
                            chan.ready.notify_waiters();
                        }
                    }
                    _ => return Err(io::Error::other(format!("unexpected pub/sub reply {reply:?}"))),
                }
            }
            req = rx.recv() => match req {
                Some(key) => {
                    conn.push(&[b"SUBSCRIBE", &shared.channels[key]]);
                    conn.flush().await?;
                }
                None => return Ok(()),
            },
        }
    }
}

enum Outcome {
    Granted,
    Stopped,
}

pub struct Client {
    id: usize,
    pub conn: Conn,
    owner: Vec<u8>,
    process: Option<Rc<Process>>,
    shared: Rc<Shared>,
}

fn unexpected(what: &str, r: &Reply) -> io::Error {
    io::Error::other(format!("{what} answered {r:?}"))
}

impl Client {
    /// Acquires the run's first key with the protocol's waiting strategy
    /// (true = granted, false = stopped).
    pub async fn acquire_first(&mut self) -> io::Result<bool> {
        Ok(matches!(self.acquire(0).await?, Outcome::Granted))
    }

    async fn acquire(&mut self, k: usize) -> io::Result<Outcome> {
        let sh = self.shared.clone();
        let key = &sh.keys[k];
        match sh.proto {
            Proto::Module => loop {
                let r = self
                    .conn
                    .cmd(&[
                        b"LOCK.ACQUIRE",
                        key,
                        &self.owner,
                        b"PX",
                        &sh.lease,
                        b"BLOCK",
                        &sh.block,
                    ])
                    .await?;
                match r {
                    Reply::Int(1) => return Ok(Outcome::Granted),
                    Reply::Nil => {
                        sh.timeouts.set(sh.timeouts.get() + 1);
                        if sh.stopping.get() {
                            return Ok(Outcome::Stopped);
                        }
                    }
                    other => return Err(unexpected("LOCK.ACQUIRE", &other)),
                }
            },
            Proto::Redisson => {
                let mut chan: Option<Rc<Chan>> = None;
                loop {
                    let r = self
                        .conn
                        .cmd(&[
                            b"EVALSHA",
                            sh.scripts.acquire.as_bytes(),
                            b"1",
                            key,
                            &sh.lease,
                            &self.owner,
                        ])
                        .await?;
                    let pttl = match r {
                        Reply::Nil => return Ok(Outcome::Granted),
                        Reply::Int(t) => t,
                        other => return Err(unexpected("redisson acquire script", &other)),
                    };
                    sh.failed_try();
                    if sh.stopping.get() {
                        return Ok(Outcome::Stopped);
                    }
                    match &chan {
                        // First failure: subscribe, then try again at once
                        // (a release may have been published before the
                        // subscription was in place).
                        None => {
                            let process = self.process.clone().ok_or_else(|| {
                                io::Error::other("redisson client without process")
                            })?;
                            chan = Some(process.subscribe(k).await?);
                        }
                        Some(c) => {
                            let wait = if pttl >= 0 {
                                Duration::from_millis(pttl as u64)
                            } else {
                                Duration::from_secs(3600)
                            };
                            tokio::select! {
                                _ = c.wake.notified() => {}
                                _ = sleep(wait) => {}
                                _ = sh.stop.notified() => {}
                            }
                        }
                    }
                    if sh.stopping.get() {
                        return Ok(Outcome::Stopped);
                    }
                }
            }
            Proto::Blpop => loop {
                let r = self.conn.cmd(&[b"BLPOP", key, &sh.block_secs]).await?;
                match r {
                    Reply::Array(items)
                        if items.len() == 2
                            && items[0] == Reply::Bulk(key.clone())
                            && items[1] == Reply::Bulk(BLPOP_TOKEN.to_vec()) =>
                    {
                        return Ok(Outcome::Granted)
                    }
                    Reply::Nil => {
                        sh.timeouts.set(sh.timeouts.get() + 1);
                        if sh.stopping.get() {
                            return Ok(Outcome::Stopped);
                        }
                    }
                    other => return Err(unexpected("BLPOP", &other)),
                }
            },
            // Raw retries at once; spin sleeps between tries.
            Proto::Spin(_) | Proto::Raw => loop {
                let r = self
                    .conn
                    .cmd(&[b"SET", key, &self.owner, b"NX", b"PX", &sh.lease])
                    .await?;
                match r {
                    Reply::Status(s) if s == b"OK" => return Ok(Outcome::Granted),
                    Reply::Nil => {}
                    other => return Err(unexpected("SET NX PX", &other)),
                }
                sh.failed_try();
                if sh.stopping.get() {
                    return Ok(Outcome::Stopped);
                }
                if let Proto::Spin(ms) = sh.proto {
                    tokio::select! {
                        _ = sleep(Duration::from_millis(ms)) => {}
                        _ = sh.stop.notified() => {}
                    }
                    if sh.stopping.get() {
                        return Ok(Outcome::Stopped);
                    }
                }
            },
        }
    }

    async fn release(&mut self, k: usize) -> io::Result<()> {
        let sh = self.shared.clone();
        let key = &sh.keys[k];
        let (what, r, want) = match sh.proto {
            Proto::Module => (
                "LOCK.RELEASE",
                self.conn.cmd(&[b"LOCK.RELEASE", key, &self.owner]).await?,
                0,
            ),
            Proto::Redisson => (
                "redisson release script",
                self.conn
                    .cmd(&[
                        b"EVALSHA",
                        sh.scripts.release.as_bytes(),
                        b"2",
                        key,
                        &sh.channels[k],
                        b"0",
                        &sh.lease,
                        &self.owner,
                    ])
                    .await?,
                1,
            ),
            Proto::Spin(_) => (
                "compare-and-delete script",
                self.conn
                    .cmd(&[
                        b"EVALSHA",
                        sh.scripts.cad.as_bytes(),
                        b"1",
                        key,
                        &self.owner,
                    ])
                    .await?,
                1,
            ),
            Proto::Raw => ("DEL", self.conn.cmd(&[b"DEL", key]).await?, 1),
            // The holder popped the only token, so the list is empty: 1 even
            // when RPUSH serves a blocked BLPOP at once.
            Proto::Blpop => (
                "RPUSH",
                self.conn.cmd(&[b"RPUSH", key, BLPOP_TOKEN]).await?,
                1,
            ),
        };
        if r != Reply::Int(want) {
            return Err(unexpected(what, &r));
        }
        Ok(())
    }

    async fn run(mut self, seed: u64) {
        let sh = self.shared.clone();
        let mut rng = stats::Rng::new(seed);
        let n = sh.keys.len();
        loop {
            if sh.stopping.get() {
                break;
            }
            let k = if n == 1 { 0 } else { rng.below(n) };
            let t0 = Instant::now();
            sh.wait_start[self.id].set(Some(t0));
            let got = self.acquire(k).await;
            sh.wait_start[self.id].set(None);
            match got {
                Ok(Outcome::Granted) => {}
                Ok(Outcome::Stopped) => break,
                Err(e) => {
                    sh.error(format!(
                        "{} client {} acquire {}: {e}",
                        sh.proto.name(),
                        self.id,
                        String::from_utf8_lossy(&sh.keys[k])
                    ));
                    break;
                }
            }
            let t1 = Instant::now();
            let holder = &sh.holders[k];
            if holder.get() != 0 {
                sh.violation(format!(
                    "{}: {} granted to client {} while client {} holds it",
                    sh.proto.name(),
                    String::from_utf8_lossy(&sh.keys[k]),
                    self.id,
                    holder.get() - 1
                ));
            }
            holder.set(self.id as u32 + 1);
            if sh.measuring() {
                let c = &sh.counts[self.id];
                c.set(c.get() + 1);
                stats::record(&mut sh.hist.borrow_mut(), (t1 - t0).as_micros() as u64);
            }
            // Empty critical section. Cleared before the release is sent: the
            // release itself may hand the lock to the next owner.
            holder.set(0);
            if let Err(e) = self.release(k).await {
                sh.error(format!(
                    "{} client {} release {}: {e}",
                    sh.proto.name(),
                    self.id,
                    String::from_utf8_lossy(&sh.keys[k])
                ));
                break;
            }
        }
    }
}

/// Connected clients (and, for Redisson, their processes' pub/sub
/// connections) for one run; not yet started.
pub struct Harness {
    shared: Rc<Shared>,
    processes: Vec<Rc<Process>>,
    sub_tasks: Vec<JoinHandle<()>>,
    pub clients: Vec<Client>,
}

impl Harness {
    pub async fn new(addr: &str, spec: &LoadSpec, scripts: &Scripts) -> io::Result<Harness> {
        let keys: Vec<Vec<u8>> = (0..spec.keys)
            .map(|i| format!("{}:{i}", spec.prefix).into_bytes())
            .collect();
        let channels: Vec<Vec<u8>> = keys.iter().map(|k| channel_of(k)).collect();
        let channel_index = if spec.proto == Proto::Redisson {
            channels
                .iter()
                .enumerate()
                .map(|(i, c)| (c.clone(), i))
                .collect()
        } else {
            HashMap::new()
        };
        let shared = Rc::new(Shared {
            proto: spec.proto,
            phase: Cell::new(Phase::Warmup),
            stopping: Cell::new(false),
            stop: Notify::new(),
            holders: (0..spec.keys).map(|_| Cell::new(0)).collect(),
            keys,
            channels,
            channel_index,
            hist: RefCell::new(stats::histogram()),
            counts: (0..spec.clients).map(|_| Cell::new(0)).collect(),
            wait_start: (0..spec.clients).map(|_| Cell::new(None)).collect(),
            violations: RefCell::new(Vec::new()),
            errors: RefCell::new(Vec::new()),
            failed_tries: Cell::new(0),
            timeouts: Cell::new(0),
            lease: spec.lease_ms.to_string().into_bytes(),
            block: spec.block_ms.to_string().into_bytes(),
            block_secs: blpop_timeout(spec.block_ms).into_bytes(),
            scripts: scripts.clone(),
        });

        if spec.proto == Proto::Blpop {
            // Exactly one token per key.
            let mut admin = Conn::connect(addr).await?;
            for key in &shared.keys {
                admin.cmd(&[b"DEL", key]).await?;
                let r = admin.cmd(&[b"RPUSH", key, BLPOP_TOKEN]).await?;
                if r != Reply::Int(1) {
                    return Err(unexpected("RPUSH of the blpop token", &r));
                }
            }
        }

        let tpp = spec.threads_per_process.max(1);
        let nproc = if spec.proto == Proto::Redisson {
            spec.clients.div_ceil(tpp)
        } else {
            0
        };
        let mut processes = Vec::new();
        let mut sub_tasks: Vec<JoinHandle<()>> = Vec::new();
        for _ in 0..nproc {
            let conn = Conn::connect(addr).await?;
            let (tx, rx) = mpsc::unbounded_channel();
            let p = Rc::new(Process {
                sub_tx: tx,
                chans: RefCell::new(HashMap::new()),
            });
            sub_tasks.push(tokio::task::spawn_local(pubsub_task(
                conn,
                rx,
                p.clone(),
                shared.clone(),
            )));
            processes.push(p);
        }

        let mut clients = Vec::with_capacity(spec.clients);
        for id in 0..spec.clients {
            let (p, t) = (id / tpp, id % tpp);
            clients.push(Client {
                id,
                conn: Conn::connect(addr).await?,
                owner: if spec.proto == Proto::Redisson {
                    owner_id(p, t)
                } else {
                    owner_id(id, 0)
                },
                process: processes.get(p).cloned(),
                shared: shared.clone(),
            });
        }
        Ok(Harness {
            shared,
            processes,
            sub_tasks,
            clients,
        })
    }

    pub fn processes(&self) -> usize {
        self.processes.len()
    }

    pub fn errors(&self) -> Vec<String> {
        self.shared.errors.borrow().clone()
    }

    /// Stops the pub/sub connections.
    pub fn close(&mut self) {
        self.shared.stopping.set(true);
        self.shared.stop.notify_waiters();
        for t in self.sub_tasks.drain(..) {
            t.abort();
        }
        self.processes.clear();
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.close();
    }
}

/// Runs one closed-loop measurement: connects `clients` clients, runs them for
/// warm-up + window, then stops them and drains (every waiter ends its wait).
pub async fn run_load(
    addr: &str,
    server_pid: Option<u32>,
    spec: &LoadSpec,
    scripts: &Scripts,
) -> io::Result<LoadResult> {
    let mut harness = Harness::new(addr, spec, scripts).await?;
    let shared = harness.shared.clone();
    let nproc = harness.processes();
    let mut tasks: Vec<JoinHandle<()>> = std::mem::take(&mut harness.clients)
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            tokio::task::spawn_local(c.run(spec.seed.wrapping_mul(1000).wrapping_add(i as u64)))
        })
        .collect();

    sleep(spec.warmup).await;
    let cpu = CpuMeter::start(server_pid);
    let t_start = Instant::now();
    shared.phase.set(Phase::Measure);
    sleep(spec.measure).await;
    shared.phase.set(Phase::Drain);
    let t_end = Instant::now();
    let cpu = cpu.stop();

    let mut open_waits = 0;
    for ws in &shared.wait_start {
        if let Some(t0) = ws.get() {
            open_waits += 1;
            stats::record(
                &mut shared.hist.borrow_mut(),
                (t_end - t0).as_micros() as u64,
            );
        }
    }
    shared.stopping.set(true);
    shared.stop.notify_waiters();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let mut stuck = 0;
    for t in tasks.iter_mut() {
        if timeout_at(deadline, &mut *t).await.is_err() {
            stuck += 1;
        }
    }
    if stuck > 0 {
        shared.error(format!(
            "{stuck} of {} {} clients did not finish within 15 s after the run (stuck waiting?)",
            spec.clients,
            spec.proto.name()
        ));
    }
    for t in tasks.iter() {
        t.abort();
    }
    harness.close();

    let measured_s = (t_end - t_start).as_secs_f64();
    let per_client: Vec<u64> = shared.counts.iter().map(|c| c.get()).collect();
    let acquisitions: u64 = per_client.iter().sum();
    let lat = Lat::of(&shared.hist.borrow());
    let result = LoadResult {
        proto: spec.proto.name(),
        clients: spec.clients,
        keys: spec.keys,
        processes: nproc,
        measured_s,
        acquisitions,
        rate: acquisitions as f64 / measured_s,
        lat,
        jain: jain(&per_client),
        per_client,
        open_waits,
        failed_tries: shared.failed_tries.get(),
        timeouts: shared.timeouts.get(),
        violations: shared.violations.borrow().clone(),
        errors: shared.errors.borrow().clone(),
        server_cpu: cpu.server,
        generator_cpu: cpu.generator,
        others_cpu: cpu.others,
        commandstats: Vec::new(),
    };
    Ok(result)
}

/// `INFO commandstats` as (command, calls, µs per call).
pub async fn commandstats(conn: &mut Conn) -> io::Result<Vec<(String, u64, f64)>> {
    let info = conn.ok(&["INFO", "commandstats"]).await?.text();
    let mut out = Vec::new();
    for line in info.lines() {
        let Some((name, rest)) = line
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        let field = |k: &str| {
            rest.split(',')
                .find_map(|kv| kv.strip_prefix(k))
                .and_then(|v| v.parse::<f64>().ok())
        };
        if let (Some(calls), Some(us)) = (field("calls="), field("usec_per_call=")) {
            out.push((name.to_string(), calls as u64, us));
        }
    }
    Ok(out)
}

/// Sequential PINGs from one client: replies per second in the window.
pub async fn ping_rate(addr: &str, warmup: Duration, measure: Duration) -> io::Result<f64> {
    let mut conn = Conn::connect(addr).await?;
    let ping = crate::resp::command(&[b"PING"]);
    let pong = Reply::Status(b"PONG".to_vec());
    let end_warm = Instant::now() + warmup;
    while Instant::now() < end_warm {
        let r = conn.raw(&ping).await?;
        if r != pong {
            return Err(unexpected("PING", &r));
        }
    }
    let start = Instant::now();
    let end = start + measure;
    let mut n = 0u64;
    loop {
        let r = conn.raw(&ping).await?;
        if r != pong {
            return Err(unexpected("PING", &r));
        }
        n += 1;
        if n.is_multiple_of(64) && Instant::now() >= end {
            break;
        }
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blpop_timeout_is_block_in_seconds() {
        assert_eq!(blpop_timeout(10_000), "10");
        assert_eq!(blpop_timeout(500), "0.5");
        assert_eq!(blpop_timeout(1_250), "1.25");
        assert_eq!(blpop_timeout(7), "0.007");
        assert_eq!(blpop_timeout(0), "0");
    }
}
