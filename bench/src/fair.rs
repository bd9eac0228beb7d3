//! S17 (fair-lock): Redisson `RFairLock` clients and the module's callers on
//! one hot lock (issue 28: both kinds in one FIFO order).
//!
//! - **fair**: Redisson's `lock()` with our copies of its scripts
//!   (`scripts/redisson-fair-*.lua`, by `EVALSHA`): the acquire script
//!   (`ttl` variant, wait = Redisson's `fairLockWaitTimeout` default of
//!   300 s, lease = the watchdog's 30 s); nil is the grant. On a ttl the
//!   client subscribes to its own channel
//!   `redisson_lock__channel:{name}:<owner>` on its own pub/sub connection,
//!   tries again, and then loops: wait for a message or the ttl (a ttl of 0:
//!   retry at once, taking a message already there; below 0: a message
//!   only), try again. Unsubscribed (not waiting for the answer) once granted.
//!   `unlock()` = the release script (must answer 1), then `DEL` of its
//!   unlock latch, as Redisson does after the reply.
//! - **module**: `LOCK.ACQUIRE name owner PX 30000 BLOCK 0` (must answer 1)
//!   and `LOCK.RELEASE name owner` (must answer 0).
//!
//! Cells, 16 closed-loop clients on one lock, critical section one round
//! trip (`INCR` of the guarded counter `{name}:data`): all
//! module, all fair, mixed 8 + 8 (module loaded), and all fair on a plain
//! redis-server without the module (Redisson's own baseline). Measured per
//! kind: grants/s, share of the grants, wait (first acquire sent -> grant;
//! waits open at the end counted so far) p50/p99, acquire scripts per fair
//! grant (the spin measure), and how fair waits ended (a message on the
//! own channel or the ttl running out).
//!
//! Mutual exclusion: one holder slot for both kinds, taken when a grant
//! arrives and freed just before the release is sent; a grant that finds it
//! taken is a violation (the critical section's round trip is what lets a
//! second grant reach the generator meanwhile); every `INCR` must answer
//! the critical sections completed so far + 1, and the counter the total at
//! the end. Every reply is checked. At the end of the window
//! every waiter keeps waiting until granted (then releases and stops), for
//! at most `DRAIN`; a fair client still waiting then leaves the queue with
//! `acquireFailed` (an error: the lock was not handed on), a module caller
//! closes its connection. After each run the lock, its queue and its
//! timeout set must be gone and no module waiter left.

use std::cell::{Cell, RefCell};
use std::io;
use std::rc::Rc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use lock_rules::keys::{fair_queue_key, fair_timeout_key, fair_waiter_channel, notify_channel};
use serde_json::{json, Value};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::{sleep, sleep_until, timeout_at};

use crate::conn::{unexpected, Conn, Reply, ReplyExt};
use crate::load::owner_id;
use crate::report::{finite, ms, rate, Bar, Findings, Section, INTERFERENCE_PCT, RETRIES};
use crate::server::{self, CpuMeter, Server};
use crate::stats::{self, jain, median, spread_pct, Lat};
use crate::{Ctx, Opts};

/// Redisson's fair acquire (`tryLock`): KEYS lock, queue, timeouts; ARGV
/// lease, owner, wait, now, 'ttl' | 'bool'.
pub const FAIR_ACQUIRE: &str = include_str!("../../scripts/redisson-fair-acquire.lua");
/// Redisson's fair unlock: KEYS lock, queue, timeouts, channel prefix,
/// latch; ARGV '0', lease, owner, now, publish command, latch PX.
pub const FAIR_RELEASE: &str = include_str!("../../scripts/redisson-fair-release.lua");
/// Redisson's acquireFailed: KEYS queue, timeouts; ARGV owner, wait.
pub const FAIR_ACQUIRE_FAILED: &str =
    include_str!("../../scripts/redisson-fair-acquire-failed.lua");

const LEASE_MS: &str = "30000";
/// Redisson's `fairLockWaitTimeout` default, the wait `lock()` queues with.
const WAIT_MS: &str = "300000";
/// The unlock latch's PX (Redisson: the response timeout, 3 s by default;
/// DEL'd right after the reply anyway).
const LATCH_PX: &str = "3000";
/// Clients of every cell.
const CLIENTS: usize = 16;
/// How long waiters may take to be served after the window closes.
const DRAIN: Duration = Duration::from_secs(15);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Module,
    Fair,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Module => "module",
            Kind::Fair => "fair",
        }
    }

    fn index(self) -> usize {
        match self {
            Kind::Module => 0,
            Kind::Fair => 1,
        }
    }
}

/// One cell: who runs, on which server.
#[derive(Clone, Copy, Debug)]
struct CellSpec {
    name: &'static str,
    module_clients: usize,
    fair_clients: usize,
    /// On the server with the module (else a plain redis-server).
    with_module: bool,
}

const CELLS: [CellSpec; 4] = [
    CellSpec {
        name: "all-module",
        module_clients: CLIENTS,
        fair_clients: 0,
        with_module: true,
    },
    CellSpec {
        name: "all-fair",
        module_clients: 0,
        fair_clients: CLIENTS,
        with_module: true,
    },
    CellSpec {
        name: "mixed",
        module_clients: CLIENTS / 2,
        fair_clients: CLIENTS - CLIENTS / 2,
        with_module: true,
    },
    CellSpec {
        name: "all-fair-plain",
        module_clients: 0,
        fair_clients: CLIENTS,
        with_module: false,
    },
];

impl CellSpec {
    fn clients(&self, kind: Kind) -> usize {
        match kind {
            Kind::Module => self.module_clients,
            Kind::Fair => self.fair_clients,
        }
    }
}

/// Per kind, the measured window's figures.
struct KindStats {
    hist: RefCell<Histogram<u64>>,
    grants: Cell<u64>,
    /// Fair: acquire scripts sent.
    evals: Cell<u64>,
    /// Fair: acquire scripts that answered a ttl of 0 or less (retry at once
    /// or wait for a message only).
    zero_ttls: Cell<u64>,
    /// Fair: waits ended by a message on the own channel, by the ttl.
    msg_wakes: Cell<u64>,
    ttl_wakes: Cell<u64>,
}

impl KindStats {
    fn new() -> KindStats {
        KindStats {
            hist: RefCell::new(stats::histogram()),
            grants: Cell::new(0),
            evals: Cell::new(0),
            zero_ttls: Cell::new(0),
            msg_wakes: Cell::new(0),
            ttl_wakes: Cell::new(0),
        }
    }
}

/// Names of the run's lock.
struct Names {
    lock: Vec<u8>,
    queue: Vec<u8>,
    timeouts: Vec<u8>,
    /// `redisson_lock__channel:{name}` (the release script adds `:<owner>`).
    channel: Vec<u8>,
    /// `redisson_unlock_latch:{name}` (the client adds `:<request id>`).
    latch_prefix: Vec<u8>,
    /// The guarded counter, `{name}:data`.
    data: Vec<u8>,
    acquire_sha: Vec<u8>,
    release_sha: Vec<u8>,
    failed_sha: Vec<u8>,
}

struct Shared {
    measuring: Cell<bool>,
    stopping: Cell<bool>,
    drain_deadline: Cell<Option<tokio::time::Instant>>,
    stop: Notify,
    /// The client holding the lock, as the generator sees it.
    holder: Cell<Option<usize>>,
    kind_of: Vec<Kind>,
    counts: Vec<Cell<u64>>,
    wait_start: Vec<Cell<Option<Instant>>>,
    all_hist: RefCell<Histogram<u64>>,
    kinds: [KindStats; 2],
    violations: Findings,
    errors: Findings,
    /// Clients still waiting when the drain ran out.
    stuck: [Cell<u64>; 2],
    /// Critical sections completed (the guarded counter's value).
    done: Cell<i64>,
}

impl Shared {
    /// The critical section of client `id`: one `INCR` of the guarded
    /// counter, which must answer the sections completed so far + 1.
    async fn critical(&self, id: usize, names: &Names, conn: &mut Conn) -> io::Result<()> {
        let r = conn.cmd(&[b"INCR", &names.data]).await?;
        let want = self.done.get() + 1;
        match r {
            Reply::Int(v) => {
                if v != want {
                    self.violations.note(format!(
                        "{} client {id}: INCR of the guarded counter answered {v}, {} sections completed before",
                        self.kind_of[id].name(),
                        want - 1
                    ));
                }
                self.done.set(v.max(want));
                Ok(())
            }
            other => Err(unexpected("INCR of the guarded counter", &other)),
        }
    }

    fn kind(&self, id: usize) -> &KindStats {
        &self.kinds[self.kind_of[id].index()]
    }

    fn count(&self, c: &Cell<u64>) {
        if self.measuring.get() {
            c.set(c.get() + 1);
        }
    }

    /// A grant reached client `id`, whose wait began at `t0`.
    fn granted(&self, id: usize, t0: Instant) {
        self.wait_start[id].set(None);
        if let Some(other) = self.holder.get() {
            self.violations.note(format!(
                "{} client {id} granted while {} client {other} holds the lock",
                self.kind_of[id].name(),
                self.kind_of[other].name()
            ));
        }
        self.holder.set(Some(id));
        if self.measuring.get() {
            let us = t0.elapsed().as_micros() as u64;
            stats::record(&mut self.kind(id).hist.borrow_mut(), us);
            stats::record(&mut self.all_hist.borrow_mut(), us);
            self.count(&self.kind(id).grants);
            self.count(&self.counts[id]);
        }
    }

    /// Client `id` is about to send its release.
    fn releasing(&self, id: usize) {
        if self.holder.get() == Some(id) {
            self.holder.set(None);
        }
    }

    /// Resolves once the window has closed and the drain time is up.
    async fn drain_over(&self) {
        while !self.stopping.get() {
            self.stop.notified().await;
        }
        if let Some(d) = self.drain_deadline.get() {
            sleep_until(d).await;
        }
    }

    fn drain_expired(&self) -> bool {
        self.stopping.get()
            && self
                .drain_deadline
                .get()
                .is_some_and(|d| tokio::time::Instant::now() >= d)
    }
}

fn unix_ms() -> Vec<u8> {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
        .to_string()
        .into_bytes()
}

// ------------------------------------------------------------- clients

async fn module_client(
    id: usize,
    sh: Rc<Shared>,
    names: Rc<Names>,
    mut conn: Conn,
) -> io::Result<()> {
    let owner = owner_id(id, 0);
    loop {
        if sh.stopping.get() {
            return Ok(());
        }
        let t0 = Instant::now();
        sh.wait_start[id].set(Some(t0));
        conn.push(&[
            b"LOCK.ACQUIRE",
            &names.lock,
            &owner,
            b"PX",
            LEASE_MS.as_bytes(),
            b"BLOCK",
            b"0",
        ]);
        conn.flush().await?;
        let r = tokio::select! {
            r = conn.read() => r?,
            _ = sh.drain_over() => {
                // Closing the connection takes it out of the queue.
                sh.stuck[Kind::Module.index()].set(sh.stuck[0].get() + 1);
                return Ok(());
            }
        };
        if r != Reply::Int(1) {
            return Err(unexpected("LOCK.ACQUIRE ... BLOCK 0", &r));
        }
        sh.granted(id, t0);
        sh.critical(id, &names, &mut conn).await?;
        sh.releasing(id);
        let r = conn.cmd(&[b"LOCK.RELEASE", &names.lock, &owner]).await?;
        if r != Reply::Int(0) {
            return Err(unexpected("LOCK.RELEASE", &r));
        }
    }
}

struct FairClient {
    id: usize,
    sh: Rc<Shared>,
    names: Rc<Names>,
    conn: Conn,
    sub: Conn,
    owner: Vec<u8>,
    channel: Vec<u8>,
    unlocks: u64,
}

impl FairClient {
    /// One acquire script: None = granted, else the ttl.
    async fn attempt(&mut self) -> io::Result<Option<i64>> {
        let n = &self.names;
        self.sh.count(&self.sh.kinds[1].evals);
        let now = unix_ms();
        let r = self
            .conn
            .cmd(&[
                b"EVALSHA",
                &n.acquire_sha,
                b"3",
                &n.lock,
                &n.queue,
                &n.timeouts,
                LEASE_MS.as_bytes(),
                &self.owner,
                WAIT_MS.as_bytes(),
                &now,
                b"ttl",
            ])
            .await?;
        match r {
            Reply::Nil => Ok(None),
            Reply::Int(ttl) => {
                if ttl <= 0 {
                    self.sh.count(&self.sh.kinds[1].zero_ttls);
                }
                Ok(Some(ttl))
            }
            other => Err(unexpected("the fair acquire script", &other)),
        }
    }

    /// SUBSCRIBE to the own channel and wait for its confirmation (skipping
    /// what an earlier subscription left: its UNSUBSCRIBE's answer, late
    /// messages).
    async fn subscribe(&mut self) -> io::Result<()> {
        self.sub.push(&[b"SUBSCRIBE", &self.channel]);
        self.sub.flush().await?;
        loop {
            let r = self.sub.read().await?;
            let Reply::Array(items) = &r else {
                return Err(unexpected("SUBSCRIBE", &r));
            };
            if let [Reply::BulkString(kind), Reply::BulkString(ch), _] = items.as_slice() {
                if kind == b"subscribe" && *ch == self.channel {
                    return Ok(());
                }
            }
        }
    }

    async fn unsubscribe(&mut self) -> io::Result<()> {
        self.sub.push(&[b"UNSUBSCRIBE", &self.channel]);
        self.sub.flush().await
    }

    /// A message on the own channel, when one is there already.
    async fn take_message(&mut self) -> io::Result<bool> {
        match tokio::time::timeout(Duration::ZERO, self.sub.read()).await {
            Ok(r) => {
                r?;
                Ok(true)
            }
            Err(_) => Ok(false),
        }
    }

    /// `lock()`: true when granted, false when the drain ran out (the
    /// client then left the queue by acquireFailed).
    async fn lock(&mut self) -> io::Result<bool> {
        if self.attempt().await?.is_none() {
            return Ok(true);
        }
        self.subscribe().await?;
        let granted = loop {
            let Some(ttl) = self.attempt().await? else {
                break true;
            };
            if self.sh.drain_expired() {
                break false;
            }
            if ttl == 0 {
                // Redisson's tryAcquire(0): a message already there is
                // taken, none is waited for.
                if self.take_message().await? {
                    self.sh.count(&self.sh.kinds[1].msg_wakes);
                }
                continue;
            }
            let sh = self.sh.clone();
            let until =
                (ttl > 0).then(|| tokio::time::Instant::now() + Duration::from_millis(ttl as u64));
            let sleep_ttl = async {
                match until {
                    Some(t) => sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                r = self.sub.read() => {
                    r?;
                    sh.count(&sh.kinds[1].msg_wakes);
                }
                _ = sleep_ttl => sh.count(&sh.kinds[1].ttl_wakes),
                _ = sh.drain_over() => break false,
            }
        };
        self.unsubscribe().await?;
        if !granted {
            let n = &self.names;
            let r = self
                .conn
                .cmd(&[
                    b"EVALSHA",
                    &n.failed_sha,
                    b"2",
                    &n.queue,
                    &n.timeouts,
                    &self.owner,
                    WAIT_MS.as_bytes(),
                ])
                .await?;
            if r != Reply::Nil {
                return Err(unexpected("the fair acquireFailed script", &r));
            }
        }
        Ok(granted)
    }

    async fn unlock(&mut self) -> io::Result<()> {
        self.unlocks += 1;
        let n = &self.names;
        let latch = [
            n.latch_prefix.as_slice(),
            b":",
            &self.owner,
            b"-",
            self.unlocks.to_string().as_bytes(),
        ]
        .concat();
        let now = unix_ms();
        let r = self
            .conn
            .cmd(&[
                b"EVALSHA",
                &n.release_sha,
                b"5",
                &n.lock,
                &n.queue,
                &n.timeouts,
                &n.channel,
                &latch,
                b"0",
                LEASE_MS.as_bytes(),
                &self.owner,
                &now,
                b"publish",
                LATCH_PX.as_bytes(),
            ])
            .await?;
        if r != Reply::Int(1) {
            return Err(unexpected("the fair release script", &r));
        }
        let r = self.conn.cmd(&[b"DEL", &latch]).await?;
        if r != Reply::Int(1) {
            return Err(unexpected("DEL of the unlock latch", &r));
        }
        Ok(())
    }

    async fn run(mut self) -> io::Result<()> {
        loop {
            if self.sh.stopping.get() {
                return Ok(());
            }
            let t0 = Instant::now();
            self.sh.wait_start[self.id].set(Some(t0));
            if !self.lock().await? {
                self.sh.stuck[Kind::Fair.index()].set(self.sh.stuck[1].get() + 1);
                return Ok(());
            }
            self.sh.granted(self.id, t0);
            self.sh
                .critical(self.id, &self.names, &mut self.conn)
                .await?;
            self.sh.releasing(self.id);
            self.unlock().await?;
        }
    }
}

// ------------------------------------------------------------- runs

/// One kind's figures in one run.
#[derive(Clone, Debug)]
struct KindRun {
    clients: usize,
    grants: u64,
    rate: f64,
    /// Of all grants in the window.
    share: f64,
    lat: Lat,
    jain: f64,
    evals: u64,
    zero_ttls: u64,
    msg_wakes: u64,
    ttl_wakes: u64,
    stuck: u64,
}

impl KindRun {
    fn evals_per_grant(&self) -> f64 {
        if self.grants == 0 {
            f64::NAN
        } else {
            self.evals as f64 / self.grants as f64
        }
    }

    fn json(&self) -> Value {
        json!({
            "clients": self.clients, "grants": self.grants, "rate_per_s": self.rate,
            "share": finite(self.share), "wait": self.lat.json(), "jain": self.jain,
            "acquire_scripts": self.evals, "ttl_0_or_less": self.zero_ttls,
            "message_wakes": self.msg_wakes, "ttl_wakes": self.ttl_wakes,
            "still_waiting_after_drain": self.stuck,
        })
    }
}

#[derive(Clone, Debug)]
struct Run {
    cell: &'static str,
    measured_s: f64,
    grants: u64,
    rate: f64,
    lat: Lat,
    jain: f64,
    kinds: [Option<KindRun>; 2],
    open_waits: u64,
    server_cpu: f64,
    generator_cpu: f64,
    others_cpu: f64,
    /// INFO commandstats (command, calls, µs per call).
    commandstats: Vec<(String, u64, f64)>,
    violations: Vec<String>,
    errors: Vec<String>,
}

impl Run {
    fn json(&self) -> Value {
        json!({
            "cell": self.cell, "measured_s": self.measured_s, "grants": self.grants,
            "rate_per_s": self.rate, "wait": self.lat.json(), "jain": self.jain,
            "module": self.kinds[0].as_ref().map(KindRun::json),
            "fair": self.kinds[1].as_ref().map(KindRun::json),
            "open_waits_at_end": self.open_waits, "server_cpu_pct": self.server_cpu,
            "generator_cpu_pct": self.generator_cpu, "others_cpu_pct": self.others_cpu,
            "commandstats": self.commandstats.iter().map(|(c, n, us)| json!({"command": c, "calls": n, "usec_per_call": us})).collect::<Vec<_>>(),
            "violations": self.violations, "errors": self.errors,
        })
    }
}

/// A server of this scenario, with the fair scripts loaded.
struct Target {
    server: Server,
    addr: String,
    with_module: bool,
    shas: [Vec<u8>; 3],
}

impl Target {
    async fn start(opts: &Opts, with_module: bool) -> io::Result<Target> {
        let tag = if with_module { "S17" } else { "S17-plain" };
        let server = crate::server::start(&Ctx::server_spec(opts, with_module), tag)?;
        let addr = server.addr();
        let mut c = Conn::connect(&addr).await?;
        let mut shas: [Vec<u8>; 3] = Default::default();
        for (i, script) in [FAIR_ACQUIRE, FAIR_RELEASE, FAIR_ACQUIRE_FAILED]
            .iter()
            .enumerate()
        {
            shas[i] = c.ok(&["SCRIPT", "LOAD", script]).await?.text().into_bytes();
        }
        Ok(Target {
            server,
            addr,
            with_module,
            shas,
        })
    }
}

/// The lock, its queue and its timeout set are gone, and (with the module)
/// no caller is left queued; polled for 3 s.
async fn check_clean(t: &Target, names: &Names, done: i64) -> io::Result<Option<String>> {
    let mut c = Conn::connect(&t.addr).await?;
    let data = c.cmd(&[b"GET", &names.data]).await?;
    c.cmd(&[b"DEL", &names.data]).await?;
    if done > 0 && data.int() != Some(done) {
        return Ok(Some(format!(
            "the guarded counter is {data:?} after {done} critical sections"
        )));
    }
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let left = c
            .cmd(&[b"EXISTS", &names.lock, &names.queue, &names.timeouts])
            .await?;
        let waiters = if t.with_module {
            crate::info_field(&mut c, "lock", "lock_waiters").await?
        } else {
            Some("0".into())
        };
        if left == Reply::Int(0) && waiters.as_deref() == Some("0") {
            return Ok(None);
        }
        if Instant::now() > deadline {
            return Ok(Some(format!(
                "after the run: {left:?} of the lock, its queue and its timeout set left, lock_waiters {}",
                waiters.unwrap_or_else(|| "missing".into())
            )));
        }
        sleep(Duration::from_millis(5)).await;
    }
}

async fn run_once(opts: &Opts, t: &Target, cell: &CellSpec, n: u64) -> io::Result<Run> {
    let lock = format!("s17-{n}-{}", cell.name).into_bytes();
    let names = Rc::new(Names {
        queue: fair_queue_key(&lock),
        timeouts: fair_timeout_key(&lock),
        channel: notify_channel(&lock),
        latch_prefix: [
            b"redisson_unlock_latch:".as_slice(),
            &lock_rules::keys::tagged_name(&lock),
        ]
        .concat(),
        data: [lock_rules::keys::tagged_name(&lock).as_slice(), b":data"].concat(),
        acquire_sha: t.shas[0].clone(),
        release_sha: t.shas[1].clone(),
        failed_sha: t.shas[2].clone(),
        lock,
    });
    let total = cell.module_clients + cell.fair_clients;
    // Module callers and fair clients alternate, so that neither kind is
    // connected (and starts) first.
    let kind_of: Vec<Kind> = {
        let (mut m, mut f) = (cell.module_clients, cell.fair_clients);
        let mut v = Vec::with_capacity(total);
        while m + f > 0 {
            if m > 0 && (m >= f) {
                v.push(Kind::Module);
                m -= 1;
            } else {
                v.push(Kind::Fair);
                f -= 1;
            }
        }
        v
    };
    let sh = Rc::new(Shared {
        measuring: Cell::new(false),
        stopping: Cell::new(false),
        drain_deadline: Cell::new(None),
        stop: Notify::new(),
        holder: Cell::new(None),
        counts: (0..total).map(|_| Cell::new(0)).collect(),
        wait_start: (0..total).map(|_| Cell::new(None)).collect(),
        kind_of: kind_of.clone(),
        all_hist: RefCell::new(stats::histogram()),
        kinds: [KindStats::new(), KindStats::new()],
        violations: Findings::default(),
        errors: Findings::default(),
        stuck: [Cell::new(0), Cell::new(0)],
        done: Cell::new(0),
    });
    let mut admin = Conn::connect(&t.addr).await?;
    admin.ok(&["CONFIG", "RESETSTAT"]).await?;
    let mut tasks: Vec<JoinHandle<()>> = Vec::with_capacity(total);
    for (id, kind) in kind_of.iter().enumerate() {
        let conn = Conn::connect(&t.addr).await?;
        let sh2 = sh.clone();
        let fut: std::pin::Pin<Box<dyn std::future::Future<Output = io::Result<()>>>> = match kind {
            Kind::Module => Box::pin(module_client(id, sh.clone(), names.clone(), conn)),
            Kind::Fair => {
                let owner = owner_id(id, 0);
                Box::pin(
                    FairClient {
                        id,
                        sh: sh.clone(),
                        channel: fair_waiter_channel(&names.lock, &owner),
                        names: names.clone(),
                        conn,
                        sub: Conn::connect(&t.addr).await?,
                        owner,
                        unlocks: 0,
                    }
                    .run(),
                )
            }
        };
        let kind = *kind;
        tasks.push(tokio::task::spawn_local(async move {
            if let Err(e) = fut.await {
                sh2.errors.note(format!("{} client {id}: {e}", kind.name()));
            }
        }));
    }

    sleep(opts.warmup).await;
    let cpu = CpuMeter::start(t.server.pid());
    let t_start = Instant::now();
    sh.measuring.set(true);
    sleep(opts.measure).await;
    sh.measuring.set(false);
    let t_end = Instant::now();
    let cpu = cpu.stop();
    let mut open_waits = 0;
    for (id, ws) in sh.wait_start.iter().enumerate() {
        if let Some(t0) = ws.get() {
            open_waits += 1;
            let us = (t_end - t0).as_micros() as u64;
            stats::record(&mut sh.kind(id).hist.borrow_mut(), us);
            stats::record(&mut sh.all_hist.borrow_mut(), us);
        }
    }
    sh.drain_deadline
        .set(Some(tokio::time::Instant::now() + DRAIN));
    sh.stopping.set(true);
    sh.stop.notify_waiters();
    let deadline = tokio::time::Instant::now() + DRAIN + Duration::from_secs(5);
    let mut hung = 0;
    for task in tasks.iter_mut() {
        if timeout_at(deadline, &mut *task).await.is_err() {
            hung += 1;
        }
    }
    for task in &tasks {
        task.abort();
    }
    if hung > 0 {
        sh.errors
            .note(format!("{hung} clients did not end after the drain"));
    }
    for kind in [Kind::Module, Kind::Fair] {
        let stuck = sh.stuck[kind.index()].get();
        if stuck > 0 {
            sh.errors.note(format!(
                "{stuck} {} clients still waiting {} s after the window closed (the lock was not handed on to them)",
                kind.name(),
                DRAIN.as_secs()
            ));
        }
    }
    if hung == 0 {
        if let Some(e) = check_clean(t, &names, sh.done.get()).await? {
            sh.errors.note(e);
        }
    }
    let commandstats = crate::load::commandstats(&mut admin).await?;

    let measured_s = (t_end - t_start).as_secs_f64();
    let per_client: Vec<u64> = sh.counts.iter().map(Cell::get).collect();
    let grants: u64 = per_client.iter().sum();
    let kinds = [Kind::Module, Kind::Fair].map(|kind| {
        let clients = cell.clients(kind);
        (clients > 0).then(|| {
            let ks = &sh.kinds[kind.index()];
            let mine: Vec<u64> = per_client
                .iter()
                .zip(&kind_of)
                .filter(|(_, k)| **k == kind)
                .map(|(c, _)| *c)
                .collect();
            KindRun {
                clients,
                grants: ks.grants.get(),
                rate: ks.grants.get() as f64 / measured_s,
                share: if grants == 0 {
                    f64::NAN
                } else {
                    ks.grants.get() as f64 / grants as f64
                },
                lat: Lat::of(&ks.hist.borrow()),
                jain: jain(&mine),
                evals: ks.evals.get(),
                zero_ttls: ks.zero_ttls.get(),
                msg_wakes: ks.msg_wakes.get(),
                ttl_wakes: ks.ttl_wakes.get(),
                stuck: sh.stuck[kind.index()].get(),
            }
        })
    });
    let run = Run {
        cell: cell.name,
        measured_s,
        grants,
        rate: grants as f64 / measured_s,
        lat: Lat::of(&sh.all_hist.borrow()),
        jain: jain(&per_client),
        kinds,
        open_waits,
        server_cpu: cpu.server,
        generator_cpu: cpu.generator,
        others_cpu: cpu.others,
        commandstats,
        violations: sh.violations.list(),
        errors: sh.errors.list(),
    };
    Ok(run)
}

// ------------------------------------------------------------- report

struct CellRuns {
    spec: CellSpec,
    runs: Vec<Run>,
}

impl CellRuns {
    fn med(&self, f: impl Fn(&Run) -> f64) -> f64 {
        median(&self.runs.iter().map(f).collect::<Vec<_>>())
    }

    fn kind_med(&self, kind: Kind, f: impl Fn(&KindRun) -> f64) -> f64 {
        median(
            &self
                .runs
                .iter()
                .filter_map(|r| r.kinds[kind.index()].as_ref().map(&f))
                .collect::<Vec<_>>(),
        )
    }

    fn rates(&self) -> Vec<f64> {
        self.runs.iter().map(|r| r.rate).collect()
    }

    fn kind_sum(&self, kind: Kind, f: impl Fn(&KindRun) -> u64) -> u64 {
        self.runs
            .iter()
            .filter_map(|r| r.kinds[kind.index()].as_ref().map(&f))
            .sum()
    }

    /// Table rows: the cell, and each kind when it has both.
    fn lines(&self) -> Vec<String> {
        let mut out = vec![format!(
            "{:<15} {:<6} {:>3} {:>9} {:>5.0}% {:>6} {:>8} {:>8} {:>6.3} {:>8} {:>11} {:>5.0}% {:>5.0}%",
            self.spec.name,
            "all",
            self.spec.module_clients + self.spec.fair_clients,
            rate(self.med(|r| r.rate)),
            spread_pct(&self.rates()),
            "1",
            ms(self.med(|r| r.lat.p50)),
            ms(self.med(|r| r.lat.p99)),
            self.med(|r| r.jain),
            "",
            "",
            self.med(|r| r.server_cpu),
            self.med(|r| r.generator_cpu),
        )];
        for kind in [Kind::Module, Kind::Fair] {
            if self.spec.clients(kind) == 0 {
                continue;
            }
            let fair = kind == Kind::Fair;
            out.push(format!(
                "{:<15} {:<6} {:>3} {:>9} {:>6} {:>6.3} {:>8} {:>8} {:>6.3} {:>8} {:>11} {:>6} {:>6}",
                "",
                kind.name(),
                self.spec.clients(kind),
                rate(self.kind_med(kind, |k| k.rate)),
                "",
                self.kind_med(kind, |k| k.share),
                ms(self.kind_med(kind, |k| k.lat.p50)),
                ms(self.kind_med(kind, |k| k.lat.p99)),
                self.kind_med(kind, |k| k.jain),
                if fair {
                    format!("{:.2}", self.kind_med(kind, KindRun::evals_per_grant))
                } else {
                    String::new()
                },
                if fair {
                    format!(
                        "{}/{}",
                        self.kind_sum(kind, |k| k.msg_wakes),
                        self.kind_sum(kind, |k| k.ttl_wakes)
                    )
                } else {
                    String::new()
                },
                "",
                "",
            ));
        }
        out
    }

    fn json(&self) -> Value {
        let kind = |kind: Kind| {
            (self.spec.clients(kind) > 0).then(|| {
                json!({
                    "clients": self.spec.clients(kind),
                    "rate_per_s": finite(self.kind_med(kind, |k| k.rate)),
                    "share": finite(self.kind_med(kind, |k| k.share)),
                    "p50_ms": finite(self.kind_med(kind, |k| k.lat.p50)),
                    "p99_ms": finite(self.kind_med(kind, |k| k.lat.p99)),
                    "jain": finite(self.kind_med(kind, |k| k.jain)),
                    "acquire_scripts_per_grant": finite(self.kind_med(kind, KindRun::evals_per_grant)),
                })
            })
        };
        json!({
            "cell": self.spec.name, "module_clients": self.spec.module_clients,
            "fair_clients": self.spec.fair_clients, "module_loaded": self.spec.with_module,
            "median": {
                "rate_per_s": finite(self.med(|r| r.rate)),
                "p50_ms": finite(self.med(|r| r.lat.p50)),
                "p99_ms": finite(self.med(|r| r.lat.p99)),
                "jain": finite(self.med(|r| r.jain)),
                "server_cpu_pct": finite(self.med(|r| r.server_cpu)),
                "generator_cpu_pct": finite(self.med(|r| r.generator_cpu)),
                "module": kind(Kind::Module), "fair": kind(Kind::Fair),
            },
            "runs": self.runs.iter().map(Run::json).collect::<Vec<_>>(),
        })
    }

    /// Median µs per call in the server of the busiest commands.
    fn server_time(&self) -> String {
        let runs = self.runs.iter().map(|r| r.commandstats.as_slice());
        crate::stats::server_time(runs, 20, &["config", "info", "script", "exists"])
    }
}

fn progress(started: Instant, msg: &str) {
    eprintln!("[{:>6.1}s] {msg}", started.elapsed().as_secs_f64());
}

pub async fn s17(opts: &Opts, started: Instant) -> io::Result<Section> {
    let reps = opts.reps(crate::options::REPS_S17);
    let mut section = Section::new(
        "S17",
        format!(
            "Redisson fair-lock clients and module callers on one hot lock, {CLIENTS} clients, critical section one INCR round trip: grants/s, share, wait p50/p99 per kind"
        ),
    );
    let module_target = Target::start(opts, true).await?;
    // The same redis-server without the module: Redisson's own baseline.
    let plain_target = Target::start(opts, false).await?;
    let mut cells: Vec<CellRuns> = CELLS
        .iter()
        .map(|&spec| CellRuns {
            spec,
            runs: Vec::new(),
        })
        .collect();
    let mut n = 0u64;
    for _ in 0..reps {
        for cell in cells.iter_mut() {
            let t = if cell.spec.with_module {
                &module_target
            } else {
                &plain_target
            };
            let mut attempt = 0;
            loop {
                n += 1;
                let r = run_once(opts, t, &cell.spec, n).await?;
                section.violations.extend(r.violations.iter().cloned());
                section.errors.extend(r.errors.iter().cloned());
                let kind_text = |k: Kind| {
                    r.kinds[k.index()].as_ref().map_or(String::new(), |x| {
                        format!(
                            ", {} {}/s share {:.2} p99 {} ms",
                            k.name(),
                            rate(x.rate),
                            x.share,
                            ms(x.lat.p99)
                        )
                    })
                };
                progress(
                    started,
                    &format!(
                        "S17 {}: {}/s p99 {} ms{}{} (server {:.0}%, gen {:.0}%, others {:.0}%)",
                        cell.spec.name,
                        rate(r.rate),
                        ms(r.lat.p99),
                        kind_text(Kind::Module),
                        kind_text(Kind::Fair),
                        r.server_cpu,
                        r.generator_cpu,
                        r.others_cpu
                    ),
                );
                if r.others_cpu > INTERFERENCE_PCT && attempt < RETRIES {
                    section.discarded.push(r.json());
                    let waited = server::wait_for_quiet(t.server.pid(), INTERFERENCE_PCT);
                    progress(
                        started,
                        &format!(
                            "  other processes were busy: waited {:.1} s for quiet, measuring again",
                            waited.as_secs_f64()
                        ),
                    );
                    attempt += 1;
                    continue;
                }
                if r.others_cpu > INTERFERENCE_PCT {
                    section.disturbed_kept += 1;
                }
                cell.runs.push(r);
                break;
            }
        }
    }
    for mut t in [module_target, plain_target] {
        if !t.server.alive() {
            section.errors.push(format!(
                "redis-server died during S17; log:\n{}",
                t.server.log_tail(20)
            ));
        }
    }

    section.line(format!(
        "each figure: median of {} runs of {:.1} s measured after {:.1} s warm-up, cells interleaved; spread = (max - min) / median of the runs' rates; waits still open at the end count with their length so far",
        reps,
        opts.measure.as_secs_f64(),
        opts.warmup.as_secs_f64()
    ));
    section.line(format!(
        "module: LOCK.ACQUIRE name owner PX {LEASE_MS} BLOCK 0 / LOCK.RELEASE; fair: Redisson's RFairLock lock() (scripts/redisson-fair-*.lua by EVALSHA, wait {WAIT_MS} ms, lease {LEASE_MS} ms, own channel on its own pub/sub connection) / unlock() + DEL of its latch; module: {}",
        opts.module.display()
    ));
    section.line(
        "share = the kind's grants / all grants (its clients / 16 when fair); scr/grant = fair acquire scripts per fair grant (1 = first try; more = ttl answers and spins); wakes = fair waits ended by a message / by the ttl (sums over the runs)",
    );
    section.line(format!(
        "{:<15} {:<6} {:>3} {:>9} {:>6} {:>6} {:>8} {:>8} {:>6} {:>8} {:>11} {:>6} {:>6}",
        "cell",
        "kind",
        "cli",
        "grants/s",
        "spread",
        "share",
        "p50 ms",
        "p99 ms",
        "jain",
        "scr/grant",
        "wakes m/ttl",
        "server",
        "gen"
    ));
    for c in &cells {
        for l in c.lines() {
            section.line(l);
        }
    }
    let find = |name: &str| cells.iter().find(|c| c.spec.name == name);
    if let (Some(f), Some(p)) = (find("all-fair"), find("all-fair-plain")) {
        section.line(format!(
            "all-fair with the module loaded / without it: {:.3}x grants/s (median of the ratios within each repetition; information, no bar)",
            stats::paired_ratio(&f.rates(), &p.rates())
        ));
    }
    if let (Some(mx), Some(m)) = (find("mixed"), find("all-module")) {
        section.line(format!(
            "mixed / all-module: {:.3}x grants/s (information, no bar)",
            stats::paired_ratio(&mx.rates(), &m.rates())
        ));
    }
    section.line("server time per call, us (INFO commandstats usec_per_call, median of runs):");
    for c in &cells {
        section.line(format!("  {:<15} {}", c.spec.name, c.server_time()));
    }
    if let Some(mx) = find("mixed") {
        // Both kinds in one FIFO order: each gets the share of its clients.
        let ratio = |r: &Run| {
            [Kind::Module, Kind::Fair]
                .iter()
                .filter_map(|k| {
                    r.kinds[k.index()]
                        .as_ref()
                        .map(|x| x.share * CLIENTS as f64 / x.clients as f64)
                })
                .fold(f64::INFINITY, f64::min)
        };
        let v: Vec<f64> = mx.runs.iter().map(ratio).collect();
        section.bars.push(
            Bar::ratio(
                "mixed: lower kind's grant share / its client share",
                median(&v),
                0.8,
            )
            .with_range(&v),
        );
    }
    section.json = json!({
        "clients": CLIENTS, "lease_ms": LEASE_MS, "fair_wait_ms": WAIT_MS,
        "drain_s": DRAIN.as_secs(),
        "cells": cells.iter().map(CellRuns::json).collect::<Vec<_>>(),
    });
    Ok(section)
}
