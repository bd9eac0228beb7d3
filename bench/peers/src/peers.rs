//! S16 (peers): the module against etcd's and ZooKeeper's own lock services,
//! on the same machine, in the same run, driven by the same generator.
//!
//! Systems, each its own server started here on free loopback ports, pinned
//! to the server core like every redis-server of the benchmark:
//! - **module**: redis-server with the module at the benchmark's usual
//!   `--save '' --appendonly no` (Redis's default durability: nothing fsynced);
//! - **module-always**: the same with `--appendonly yes --appendfsync always`
//!   (its AOF in the server's temp dir): every write batch is fsynced before
//!   its replies go out, as etcd and ZooKeeper fsync their logs;
//! - **etcd**: a single etcd node (data dir in a temp dir, its defaults: the
//!   WAL fsynced on every commit), its v3 lock service (`Lock` / `Unlock`, one
//!   lease of 30 s per client) and election service (`Campaign` / `Resign`)
//!   through the `etcd-client` crate (gRPC);
//! - **zookeeper**: a standalone ZooKeeper server (zookeeper.rs), its lock,
//!   shared-lock and election recipes through the `zookeeper-client` crate.
//!
//! Cells: one hot lock at 1, 16 and 64 clients (acquisitions/s, p50/p99 of
//! the wait = the acquire call's latency), uncontended cycles (16 clients, a
//! key each), read-write (16 clients, 90% reads; etcd's lock service has no
//! shared mode) and the election hand-over (4 candidates; the leader resigns,
//! the time until the next candidate's campaign returns). Every client is a
//! task of the one generator thread, so a second holder is seen: a holder
//! flag per key (a reader/writer count for read-write, a leader slot for the
//! election) that a grant finding it taken trips, as in the other scenarios.

use std::cell::{Cell, RefCell};
use std::io;
use std::rc::Rc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::{json, Value};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout_at};

use crate::etcd::{Etcd, EtcdClient};
use crate::zookeeper::{self, ZkClient, ZooKeeper};
use lock_bench::chart::PeersChart;
use lock_bench::conn::{Conn, Reply, ReplyExt};
use lock_bench::report::{self, Section};
use lock_bench::server::{self, CpuMeter, CpuUse, Server, ServerSpec};
use lock_bench::stats::{self, Lat};
use lock_bench::Opts;

/// Lease and wait of the module's commands, as in the rest of the benchmark.
const LEASE_MS: &str = "30000";
const BLOCK_MS: &str = "10000";
/// Client counts of the hot lock.
pub const HOT_CLIENTS: [usize; 3] = [1, 16, 64];
/// Clients of the uncontended and read-write cells.
const CLIENTS: usize = 16;
/// Share of reads in the read-write cell.
const READ_FRACTION: f64 = 0.9;
/// Candidates of the election, hand-overs measured per repetition (and
/// before them, not counted), and how long a leader leads before it
/// resigns (the others settle in their waits meanwhile).
const CANDIDATES: usize = 4;
const HANDOVERS: usize = 40;
const HANDOVERS_QUICK: usize = 15;
const HANDOVERS_WARM: usize = 4;
const LEAD_FOR: Duration = Duration::from_millis(5);
/// The pass not measured on every system before the first repetition, per
/// cell (1 s with `--quick`).
const WARM_PASS: Duration = Duration::from_secs(2);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum System {
    Module,
    ModuleAlways,
    Etcd,
    ZooKeeper,
}

pub const SYSTEMS: [System; 4] = [
    System::Module,
    System::ModuleAlways,
    System::Etcd,
    System::ZooKeeper,
];

impl System {
    pub fn name(self) -> &'static str {
        match self {
            System::Module => "module",
            System::ModuleAlways => "module-always",
            System::Etcd => "etcd",
            System::ZooKeeper => "zookeeper",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            System::Module => {
                "redis-server + module, --save '' --appendonly no (no fsync); LOCK.ACQUIRE key owner PX 30000 BLOCK 10000 / LOCK.RELEASE, \
                 LOCK.RACQUIRE/WACQUIRE, ELECT.CAMPAIGN key cand PX 30000 KEEPALIVE BLOCK 10000 / ELECT.RESIGN; the generator's own connections (conn.rs)"
            }
            System::ModuleAlways => {
                "the same, --appendonly yes --appendfsync always (AOF fsynced before the replies of each write batch)"
            }
            System::Etcd => {
                "etcd single node, defaults (WAL fsynced per commit); v3 Lock(name, lease)/Unlock(key), Campaign/Resign; \
                 a gRPC connection and a 30 s lease per client (etcd-client crate)"
            }
            System::ZooKeeper => {
                "ZooKeeper standalone, defaults (txn log fsynced per commit); its lock, shared-lock and election recipes \
                 (ephemeral sequential znodes, a watch on the predecessor); a session per client (zookeeper-client crate)"
            }
        }
    }

    fn has_read_write(self) -> bool {
        !matches!(self, System::Etcd)
    }
}

// ------------------------------------------------------------- clients

/// One module client: its own connection and owner id.
struct ModuleClient {
    conn: Conn,
    owner: String,
    held: Option<String>,
    leading: Option<String>,
}

impl ModuleClient {
    async fn acquire(&mut self, cmd: &str, name: &str) -> io::Result<()> {
        loop {
            let r = self
                .conn
                .cmd(&[
                    cmd.as_bytes(),
                    name.as_bytes(),
                    self.owner.as_bytes(),
                    b"PX",
                    LEASE_MS.as_bytes(),
                    b"BLOCK",
                    BLOCK_MS.as_bytes(),
                ])
                .await?;
            match r {
                Reply::Int(1) => {
                    self.held = Some(name.to_string());
                    return Ok(());
                }
                // The BLOCK time ran out: ask again.
                Reply::Nil => continue,
                other => return Err(io::Error::other(format!("{cmd} answered {other:?}"))),
            }
        }
    }

    async fn release(&mut self) -> io::Result<()> {
        let name = self.held.take();
        self.let_go("LOCK.RELEASE", name, 0).await
    }

    /// Sends `cmd name owner` for the hold or leadership `name` and checks
    /// that it answered `want`.
    async fn let_go(&mut self, cmd: &str, name: Option<String>, want: i64) -> io::Result<()> {
        let name = name.ok_or_else(|| io::Error::other(format!("{cmd} with nothing held")))?;
        let r = self
            .conn
            .cmd(&[cmd.as_bytes(), name.as_bytes(), self.owner.as_bytes()])
            .await?;
        if r != Reply::Int(want) {
            return Err(io::Error::other(format!("{cmd} answered {r:?}")));
        }
        Ok(())
    }

    async fn campaign(&mut self, name: &str) -> io::Result<()> {
        loop {
            let r = self
                .conn
                .cmd(&[
                    b"ELECT.CAMPAIGN",
                    name.as_bytes(),
                    self.owner.as_bytes(),
                    b"PX",
                    LEASE_MS.as_bytes(),
                    b"KEEPALIVE",
                    b"BLOCK",
                    BLOCK_MS.as_bytes(),
                ])
                .await?;
            match r {
                Reply::Int(term) if term > 0 => {
                    self.leading = Some(name.to_string());
                    return Ok(());
                }
                Reply::Nil => continue,
                other => {
                    return Err(io::Error::other(format!(
                        "ELECT.CAMPAIGN answered {other:?}"
                    )))
                }
            }
        }
    }

    async fn resign(&mut self) -> io::Result<()> {
        let name = self.leading.take();
        self.let_go("ELECT.RESIGN", name, 1).await
    }
}

/// A client of any system, with the same calls.
enum Client {
    Module(Box<ModuleClient>),
    Etcd(Box<EtcdClient>),
    Zk(Box<ZkClient>),
}

impl Client {
    async fn connect(system: System, addr: &str, owner: String) -> io::Result<Client> {
        Ok(match system {
            System::Module | System::ModuleAlways => Client::Module(Box::new(ModuleClient {
                conn: Conn::connect(addr).await?,
                owner,
                held: None,
                leading: None,
            })),
            System::Etcd => Client::Etcd(Box::new(EtcdClient::connect(addr).await?)),
            System::ZooKeeper => Client::Zk(Box::new(ZkClient::connect(addr).await?)),
        })
    }

    async fn lock(&mut self, name: &str) -> io::Result<()> {
        match self {
            Client::Module(c) => c.acquire("LOCK.ACQUIRE", name).await,
            Client::Etcd(c) => c.lock(name).await,
            Client::Zk(c) => c.lock(name).await,
        }
    }

    async fn read_lock(&mut self, name: &str) -> io::Result<()> {
        match self {
            Client::Module(c) => c.acquire("LOCK.RACQUIRE", name).await,
            Client::Etcd(_) => Err(io::Error::other("etcd has no read-write lock")),
            Client::Zk(c) => c.read_lock(name).await,
        }
    }

    async fn write_lock(&mut self, name: &str) -> io::Result<()> {
        match self {
            Client::Module(c) => c.acquire("LOCK.WACQUIRE", name).await,
            Client::Etcd(_) => Err(io::Error::other("etcd has no read-write lock")),
            Client::Zk(c) => c.write_lock(name).await,
        }
    }

    async fn unlock(&mut self) -> io::Result<()> {
        match self {
            Client::Module(c) => c.release().await,
            Client::Etcd(c) => c.unlock().await,
            Client::Zk(c) => c.unlock().await,
        }
    }

    async fn campaign(&mut self, name: &str) -> io::Result<()> {
        match self {
            Client::Module(c) => c.campaign(name).await,
            Client::Etcd(c) => c.campaign(name).await,
            Client::Zk(c) => c.campaign(name).await,
        }
    }

    async fn resign(&mut self) -> io::Result<()> {
        match self {
            Client::Module(c) => c.resign().await,
            Client::Etcd(c) => c.resign().await,
            Client::Zk(c) => c.resign().await,
        }
    }

    /// Ends the client's session: for etcd its lease is revoked (any key of
    /// a wait cut off at the end of a run goes with it); a module or
    /// ZooKeeper client's connection closes when dropped.
    async fn close(self) -> io::Result<()> {
        match self {
            Client::Module(_) | Client::Zk(_) => Ok(()),
            Client::Etcd(c) => (*c).close().await,
        }
    }
}

// ------------------------------------------------------------- servers

enum Backend {
    Redis(Server),
    Etcd(Etcd),
    Zk(ZooKeeper),
}

/// A running server of one system.
struct Target {
    system: System,
    addr: String,
    pid: Option<u32>,
    backend: Backend,
}

impl Target {
    fn alive(&mut self) -> bool {
        match &mut self.backend {
            Backend::Redis(s) => s.alive(),
            Backend::Etcd(e) => e.alive(),
            // Not reaped until dropped: a dead server is a zombie.
            Backend::Zk(z) => pid_alive(z.pid()),
        }
    }

    fn log_tail(&self) -> String {
        match &self.backend {
            Backend::Redis(s) => s.log_tail(20),
            Backend::Etcd(e) => e.log_tail(),
            Backend::Zk(_) => "(its log is in its temp dir, removed when it stops)".into(),
        }
    }
}

/// Starts the server of `system`: Ok(None) with the reason when it is not
/// installed.
async fn start(opts: &Opts, system: System) -> io::Result<Result<Target, String>> {
    let core = opts.pinning.server;
    match system {
        System::Module | System::ModuleAlways => {
            let mut extra: Vec<String> = vec!["--maxclients".into(), "1000".into()];
            if system == System::ModuleAlways {
                extra.extend(["--appendonly", "yes", "--appendfsync", "always"].map(String::from));
            }
            let server = lock_bench::server::start(
                &ServerSpec {
                    binary: opts.redis_server.clone(),
                    module: Some(opts.module.clone()),
                    core,
                    extra,
                },
                "S16",
            )?;
            let addr = server.addr();
            // The durability asked for is the one the server runs with.
            let mut c = Conn::connect(&addr).await?;
            for (param, want) in [
                (
                    "appendonly",
                    if system == System::ModuleAlways {
                        "yes"
                    } else {
                        "no"
                    },
                ),
                ("appendfsync", "always"),
            ] {
                if param == "appendfsync" && system == System::Module {
                    continue;
                }
                let r = c.ok(&["CONFIG", "GET", param]).await?;
                let got = match &r {
                    Reply::Array(v) if v.len() == 2 => v[1].text(),
                    other => format!("{other:?}"),
                };
                if got != want {
                    return Err(io::Error::other(format!(
                        "{}: CONFIG GET {param} answered {got}, not {want}",
                        system.name()
                    )));
                }
            }
            Ok(Ok(Target {
                system,
                addr,
                pid: server.pid(),
                backend: Backend::Redis(server),
            }))
        }
        System::Etcd => {
            let Some(bin) = server::find(&opts.etcd) else {
                return Ok(Err(format!(
                    "etcd not found ({}; install: scripts/deps.sh --bench)",
                    opts.etcd
                )));
            };
            let e = Etcd::start(&bin, None, core)?;
            Ok(Ok(Target {
                system,
                addr: e.addr(),
                pid: Some(e.pid()),
                backend: Backend::Etcd(e),
            }))
        }
        System::ZooKeeper => {
            let install = match zookeeper::find_install() {
                Ok(i) => i,
                Err(why) => return Ok(Err(why)),
            };
            let z = ZooKeeper::start(&install, core).await?;
            Ok(Ok(Target {
                system,
                addr: z.addr(),
                pid: Some(z.pid()),
                backend: Backend::Zk(z),
            }))
        }
    }
}

/// Is process `pid` running (not gone, not a zombie)?
fn pid_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rfind(')')
                .and_then(|i| s[i + 1..].split_whitespace().next().map(|st| st != "Z"))
        })
        .unwrap_or(false)
}

/// A line naming a started server and its version.
async fn started_line(opts: &Opts, t: &Target) -> String {
    let version = match t.system {
        System::Module | System::ModuleAlways => {
            lock_bench::command_output(&opts.redis_server, "--version")
        }
        System::Etcd => server::find(&opts.etcd)
            .map(|b| Etcd::version(&b))
            .unwrap_or_default(),
        System::ZooKeeper => zookeeper::version(&t.addr).await,
    };
    format!(
        "{:<14} on {} (pid {}): {version}",
        t.system.name(),
        t.addr,
        t.pid.map_or("?".into(), |p| p.to_string())
    )
}

// ------------------------------------------------------------- runs

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    /// One key, n clients.
    Hot(usize),
    /// n clients, a key each.
    Uncontended(usize),
    /// One read-write lock, n clients, `READ_FRACTION` reads.
    ReadWrite(usize),
    /// n candidates of one election.
    Election(usize),
}

impl Kind {
    fn name(self) -> String {
        match self {
            Kind::Hot(n) => format!("hot-{n}"),
            Kind::Uncontended(n) => format!("uncontended-{n}"),
            Kind::ReadWrite(n) => format!("read-write-{n}"),
            Kind::Election(n) => format!("election-{n}"),
        }
    }

    fn label(self) -> String {
        match self {
            Kind::Hot(1) => "hot lock, 1 client".into(),
            Kind::Hot(n) => format!("hot lock, {n} clients"),
            Kind::Uncontended(n) => format!("uncontended, {n} keys"),
            Kind::ReadWrite(n) => format!("read-write, {n} (90% rd)"),
            Kind::Election(n) => format!("hand-over, {n} cand."),
        }
    }

    fn clients(self) -> usize {
        match self {
            Kind::Hot(n) | Kind::Uncontended(n) | Kind::ReadWrite(n) | Kind::Election(n) => n,
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Phase {
    Warmup,
    Measure,
    Drain,
}

struct Shared {
    phase: Cell<Phase>,
    hist: RefCell<Histogram<u64>>,
    counts: Vec<Cell<u64>>,
    /// When each client's acquire (or campaign) was sent, while it waits.
    wait_start: Vec<Cell<Option<Instant>>>,
    /// Holder flag per key.
    held: Vec<Cell<bool>>,
    /// Read-write: readers holding now, a writer holding now.
    readers: Cell<u32>,
    writer: Cell<bool>,
    reads: Cell<u64>,
    writes: Cell<u64>,
    /// Election: who leads, when the last leader sent its resign, hand-overs
    /// seen, and the signal that enough were measured.
    leader: Cell<Option<usize>>,
    resigned_at: Cell<Option<Instant>>,
    handovers: Cell<usize>,
    wanted: usize,
    done: Notify,
    samples_us: RefCell<Vec<u64>>,
    violations: RefCell<Vec<String>>,
    errors: RefCell<Vec<String>>,
}

impl Shared {
    fn new(clients: usize, keys: usize, wanted: usize) -> Shared {
        Shared {
            phase: Cell::new(Phase::Warmup),
            hist: RefCell::new(stats::histogram()),
            counts: (0..clients).map(|_| Cell::new(0)).collect(),
            wait_start: (0..clients).map(|_| Cell::new(None)).collect(),
            held: (0..keys).map(|_| Cell::new(false)).collect(),
            readers: Cell::new(0),
            writer: Cell::new(false),
            reads: Cell::new(0),
            writes: Cell::new(0),
            leader: Cell::new(None),
            resigned_at: Cell::new(None),
            handovers: Cell::new(0),
            wanted,
            done: Notify::new(),
            samples_us: RefCell::new(Vec::new()),
            violations: RefCell::new(Vec::new()),
            errors: RefCell::new(Vec::new()),
        }
    }

    fn violation(&self, msg: String) {
        let mut v = self.violations.borrow_mut();
        if v.len() < 20 {
            v.push(msg);
        }
    }

    fn error(&self, msg: String) {
        let mut e = self.errors.borrow_mut();
        if e.len() < 20 {
            e.push(msg);
        }
    }
}

/// One measured run of one cell on one system.
struct Run {
    rate: f64,
    lat: Lat,
    acquisitions: u64,
    measured_s: f64,
    open_waits: usize,
    jain: f64,
    reads: u64,
    writes: u64,
    cpu: CpuUse,
    samples_us: Vec<u64>,
    violations: Vec<String>,
    errors: Vec<String>,
}

impl Run {
    fn json(&self, system: System, kind: Kind, rep: usize) -> Value {
        json!({
            "system": system.name(), "cell": kind.name(), "clients": kind.clients(), "rep": rep,
            "rate": report::finite(self.rate), "acquisitions": self.acquisitions,
            "measured_s": self.measured_s, "wait": self.lat.json(), "open_waits": self.open_waits,
            "jain": report::finite(self.jain), "reads": self.reads, "writes": self.writes,
            "server_cpu_pct": self.cpu.server, "generator_cpu_pct": self.cpu.generator,
            "others_cpu_pct": self.cpu.others, "handover_samples_us": self.samples_us,
            "violations": self.violations, "errors": self.errors,
        })
    }
}

async fn connect_all(t: &Target, n: usize, run: u64) -> io::Result<Vec<Client>> {
    let mut clients = Vec::with_capacity(n);
    for i in 0..n {
        clients.push(Client::connect(t.system, &t.addr, format!("s16-{run}-c{i}")).await?);
    }
    Ok(clients)
}

/// Waits for the client tasks (15 s at most), then closes the clients they
/// hand back. Returns how many did not finish.
async fn finish(tasks: Vec<JoinHandle<Option<Client>>>, sh: &Shared) -> usize {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let mut stuck = 0;
    let mut back = Vec::new();
    for mut t in tasks {
        match timeout_at(deadline, &mut t).await {
            Ok(Ok(Some(c))) => back.push(c),
            Ok(_) => {}
            Err(_) => {
                stuck += 1;
                t.abort();
            }
        }
    }
    for c in back {
        if let Err(e) = c.close().await {
            sh.error(format!("closing a client: {e}"));
        }
    }
    stuck
}

/// Hot lock, uncontended or read-write: `warmup`, then a measured window of
/// `measure`; every client then finishes its cycle and stops.
async fn run_load(
    t: &Target,
    kind: Kind,
    run: u64,
    warmup: Duration,
    measure: Duration,
) -> io::Result<Run> {
    let n = kind.clients();
    let keys = if matches!(kind, Kind::Uncontended(_)) {
        n
    } else {
        1
    };
    let clients = connect_all(t, n, run).await?;
    let sh = Rc::new(Shared::new(n, keys, 0));
    let mut tasks = Vec::with_capacity(n);
    for (i, mut c) in clients.into_iter().enumerate() {
        let sh = sh.clone();
        let key = if keys == 1 { 0 } else { i };
        let name = format!("s16-{run}-k{key}");
        let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ (run << 20) ^ (i as u64 + 1);
        tasks.push(tokio::task::spawn_local(async move {
            loop {
                if sh.phase.get() == Phase::Drain {
                    break;
                }
                let write = match kind {
                    Kind::ReadWrite(_) => {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        (rng >> 11) as f64 / (1u64 << 53) as f64 >= READ_FRACTION
                    }
                    _ => true,
                };
                let t0 = Instant::now();
                sh.wait_start[i].set(Some(t0));
                let r = match kind {
                    Kind::ReadWrite(_) if write => c.write_lock(&name).await,
                    Kind::ReadWrite(_) => c.read_lock(&name).await,
                    _ => c.lock(&name).await,
                };
                sh.wait_start[i].set(None);
                if let Err(e) = r {
                    sh.error(format!("client {i} acquire of {name}: {e}"));
                    return None;
                }
                let waited = t0.elapsed();
                let measuring = sh.phase.get() == Phase::Measure;
                if measuring {
                    stats::record(&mut sh.hist.borrow_mut(), waited.as_micros() as u64);
                    sh.counts[i].set(sh.counts[i].get() + 1);
                }
                match kind {
                    Kind::ReadWrite(_) if write => {
                        if sh.writer.get() || sh.readers.get() > 0 {
                            sh.violation(format!(
                                "client {i} granted the write hold of {name} while {} reader(s) and {} writer hold it",
                                sh.readers.get(),
                                u8::from(sh.writer.get())
                            ));
                        }
                        sh.writer.set(true);
                        if measuring {
                            sh.writes.set(sh.writes.get() + 1);
                        }
                    }
                    Kind::ReadWrite(_) => {
                        if sh.writer.get() {
                            sh.violation(format!(
                                "client {i} granted a read hold of {name} while a writer holds it"
                            ));
                        }
                        sh.readers.set(sh.readers.get() + 1);
                        if measuring {
                            sh.reads.set(sh.reads.get() + 1);
                        }
                    }
                    _ => {
                        if sh.held[key].replace(true) {
                            sh.violation(format!(
                                "client {i} granted {name} while another client holds it"
                            ));
                        }
                    }
                }
                // Cleared just before the release is sent (the release
                // itself may hand the lock on).
                match kind {
                    Kind::ReadWrite(_) if write => sh.writer.set(false),
                    Kind::ReadWrite(_) => sh.readers.set(sh.readers.get() - 1),
                    _ => sh.held[key].set(false),
                }
                if let Err(e) = c.unlock().await {
                    sh.error(format!("client {i} release of {name}: {e}"));
                    return None;
                }
            }
            Some(c)
        }));
    }
    sleep(warmup).await;
    let cpu = CpuMeter::start(t.pid);
    let t_start = Instant::now();
    sh.phase.set(Phase::Measure);
    sleep(measure).await;
    sh.phase.set(Phase::Drain);
    let t_end = Instant::now();
    let cpu = cpu.stop();
    // Waits still open count with their length so far.
    let mut open_waits = 0;
    for ws in &sh.wait_start {
        if let Some(t0) = ws.get() {
            open_waits += 1;
            stats::record(&mut sh.hist.borrow_mut(), (t_end - t0).as_micros() as u64);
        }
    }
    let stuck = finish(tasks, &sh).await;
    if stuck > 0 {
        sh.error(format!(
            "{stuck} of {n} {} clients did not finish within 15 s after the run",
            t.system.name()
        ));
    }
    let per_client: Vec<u64> = sh.counts.iter().map(Cell::get).collect();
    let acquisitions: u64 = per_client.iter().sum();
    let measured_s = (t_end - t_start).as_secs_f64();
    let lat = Lat::of(&sh.hist.borrow());
    let run = Run {
        rate: acquisitions as f64 / measured_s,
        lat,
        acquisitions,
        measured_s,
        open_waits,
        jain: stats::jain(&per_client),
        reads: sh.reads.get(),
        writes: sh.writes.get(),
        cpu,
        samples_us: Vec::new(),
        violations: sh.violations.borrow().clone(),
        errors: sh.errors.borrow().clone(),
    };
    Ok(run)
}

/// The election: `n` candidates campaign for one name; the leader leads for
/// `LEAD_FOR`, then resigns and campaigns again (to the back of the line);
/// hand-over = from just before its resign is sent to the return of the
/// next leader's campaign. `HANDOVERS_WARM` hand-overs first, then `wanted`
/// measured.
async fn run_election(t: &Target, n: usize, wanted: usize, run: u64) -> io::Result<Run> {
    let clients = connect_all(t, n, run).await?;
    let sh = Rc::new(Shared::new(n, 0, wanted));
    let name = format!("s16-{run}-election");
    let mut tasks = Vec::with_capacity(n);
    for (i, mut c) in clients.into_iter().enumerate() {
        let sh = sh.clone();
        let name = name.clone();
        tasks.push(tokio::task::spawn_local(async move {
            loop {
                if sh.phase.get() == Phase::Drain {
                    break;
                }
                sh.wait_start[i].set(Some(Instant::now()));
                let r = c.campaign(&name).await;
                sh.wait_start[i].set(None);
                if let Err(e) = r {
                    sh.error(format!("candidate {i} campaign: {e}"));
                    sh.done.notify_one();
                    return None;
                }
                let at = Instant::now();
                if let Some(j) = sh.leader.replace(Some(i)) {
                    sh.violation(format!("candidate {i} leads while candidate {j} does"));
                }
                if let Some(t0) = sh.resigned_at.take() {
                    let k = sh.handovers.get() + 1;
                    sh.handovers.set(k);
                    if k > HANDOVERS_WARM && k <= HANDOVERS_WARM + sh.wanted {
                        let us = (at - t0).as_micros() as u64;
                        stats::record(&mut sh.hist.borrow_mut(), us);
                        sh.samples_us.borrow_mut().push(us);
                        sh.counts[i].set(sh.counts[i].get() + 1);
                    }
                    if k == HANDOVERS_WARM + sh.wanted {
                        sh.phase.set(Phase::Drain);
                        sh.done.notify_one();
                    }
                }
                sleep(LEAD_FOR).await;
                sh.leader.set(None);
                sh.resigned_at.set(Some(Instant::now()));
                if let Err(e) = c.resign().await {
                    sh.error(format!("candidate {i} resign: {e}"));
                    sh.done.notify_one();
                    return None;
                }
            }
            Some(c)
        }));
    }
    let cpu = CpuMeter::start(t.pid);
    let t_start = Instant::now();
    sh.phase.set(Phase::Measure);
    let limit = Duration::from_secs(60);
    if tokio::time::timeout(limit, sh.done.notified())
        .await
        .is_err()
    {
        sh.error(format!(
            "{} hand-overs of {} not done within {} s",
            HANDOVERS_WARM + wanted,
            t.system.name(),
            limit.as_secs()
        ));
    }
    sh.phase.set(Phase::Drain);
    let t_end = Instant::now();
    let cpu = cpu.stop();
    let stuck = finish(tasks, &sh).await;
    if stuck > 0 {
        sh.error(format!(
            "{stuck} of {n} {} candidates did not finish within 15 s after the run",
            t.system.name()
        ));
    }
    let samples = sh.samples_us.borrow().clone();
    let measured_s = (t_end - t_start).as_secs_f64();
    let per_client: Vec<u64> = sh.counts.iter().map(Cell::get).collect();
    let lat = Lat::of(&sh.hist.borrow());
    let run = Run {
        rate: samples.len() as f64 / measured_s,
        lat,
        acquisitions: samples.len() as u64,
        measured_s,
        open_waits: 0,
        jain: stats::jain(&per_client),
        reads: 0,
        writes: 0,
        cpu,
        samples_us: samples,
        violations: sh.violations.borrow().clone(),
        errors: sh.errors.borrow().clone(),
    };
    Ok(run)
}

// ------------------------------------------------------------- scenario

/// The runs of one cell on one system over the repetitions.
#[derive(Default)]
struct Cellrec {
    rates: Vec<f64>,
    p50: Vec<f64>,
    p99: Vec<f64>,
    server_cpu: Vec<f64>,
    samples_us: Vec<u64>,
    runs: Vec<Value>,
}

pub async fn s16(opts: &Opts, started: Instant) -> io::Result<(Section, Option<PeersChart>)> {
    let progress = |msg: &str| eprintln!("[{:>6.1}s] {msg}", started.elapsed().as_secs_f64());
    let mut section = Section::new(
        "S16",
        "the module vs etcd and ZooKeeper: hot lock, uncontended, read-write, election hand-over (same machine, same run)",
    );
    let reps = opts.reps(lock_bench::options::REPS_S16);
    let handovers = if opts.quick && opts.reps_given.is_none() {
        HANDOVERS_QUICK
    } else {
        HANDOVERS
    };
    let systems: Vec<System> = SYSTEMS
        .into_iter()
        .filter(|s| {
            opts.peers
                .as_ref()
                .is_none_or(|l| l.iter().any(|n| n == s.name()))
        })
        .collect();
    let mut targets: Vec<Target> = Vec::new();
    let mut skipped = Vec::new();
    for &system in &systems {
        progress(&format!("S16: starting {}", system.name()));
        match start(opts, system).await {
            Ok(Ok(t)) => {
                section.line(started_line(opts, &t).await);
                targets.push(t);
            }
            Ok(Err(why)) => {
                section.line(format!("{:<14} skipped: {why}", system.name()));
                skipped.push(json!({"system": system.name(), "why": why}));
            }
            Err(e) => section
                .errors
                .push(format!("{} did not start: {e}", system.name())),
        }
    }
    for t in &targets {
        section.line(format!("{:<14} = {}", t.system.name(), t.system.describe()));
    }
    section.line(
        "all single node on loopback, each server pinned to the server core, every client a task of the one generator \
         thread (Rust async clients); the module's default does not fsync, module-always, etcd and ZooKeeper fsync each commit",
    );
    let mut kinds: Vec<Kind> = HOT_CLIENTS.iter().map(|&n| Kind::Hot(n)).collect();
    kinds.push(Kind::Uncontended(CLIENTS));
    kinds.push(Kind::ReadWrite(CLIENTS));
    kinds.push(Kind::Election(CANDIDATES));

    // A pass not measured on every system first (ZooKeeper's JVM compiles
    // its hot paths meanwhile; every system gets the same).
    let warm = if opts.quick {
        Duration::from_secs(1)
    } else {
        WARM_PASS
    };
    let mut run_no: u64 = 0;
    for t in &targets {
        for kind in [Kind::Uncontended(CLIENTS), Kind::Hot(CLIENTS)] {
            progress(&format!(
                "S16 warm-up pass: {} on {} ({:.0} s, not measured)",
                kind.label(),
                t.system.name(),
                warm.as_secs_f64()
            ));
            run_no += 1;
            match run_load(t, kind, run_no, warm, Duration::from_millis(100)).await {
                Ok(r) => {
                    for v in r.violations {
                        section.violations.push(format!(
                            "{} {} (warm-up): {v}",
                            t.system.name(),
                            kind.label()
                        ));
                    }
                    for e in r.errors {
                        section.errors.push(format!(
                            "{} {} (warm-up): {e}",
                            t.system.name(),
                            kind.label()
                        ));
                    }
                }
                Err(e) => section.errors.push(format!(
                    "{} {} (warm-up): {e}",
                    t.system.name(),
                    kind.label()
                )),
            }
        }
    }
    let mut cells: Vec<Vec<Cellrec>> = kinds
        .iter()
        .map(|_| targets.iter().map(|_| Cellrec::default()).collect())
        .collect();
    for rep in 0..reps {
        for (ki, &kind) in kinds.iter().enumerate() {
            for (ti, t) in targets.iter().enumerate() {
                if matches!(kind, Kind::ReadWrite(_)) && !t.system.has_read_write() {
                    continue;
                }
                progress(&format!(
                    "S16 rep {}/{reps}: {} on {}",
                    rep + 1,
                    kind.label(),
                    t.system.name()
                ));
                let mut attempt = 0;
                let run = loop {
                    run_no += 1;
                    let r = match kind {
                        Kind::Election(n) => run_election(t, n, handovers, run_no).await,
                        _ => run_load(t, kind, run_no, opts.warmup, opts.measure).await,
                    };
                    let r = match r {
                        Ok(r) => r,
                        Err(e) => {
                            section.errors.push(format!(
                                "{} {}: {e}",
                                t.system.name(),
                                kind.label()
                            ));
                            break None;
                        }
                    };
                    if r.cpu.others > report::INTERFERENCE_PCT && attempt < report::RETRIES {
                        attempt += 1;
                        section.discarded.push(r.json(t.system, kind, rep));
                        let waited =
                            lock_bench::server::wait_for_quiet(t.pid, report::INTERFERENCE_PCT);
                        progress(&format!(
                            "  other processes were busy: waited {:.1} s for quiet, measuring again",
                            waited.as_secs_f64()
                        ));
                        continue;
                    }
                    if r.cpu.others > report::INTERFERENCE_PCT {
                        section.disturbed_kept += 1;
                    }
                    break Some(r);
                };
                let Some(run) = run else { continue };
                for v in &run.violations {
                    section
                        .violations
                        .push(format!("{} {}: {v}", t.system.name(), kind.label()));
                }
                for e in &run.errors {
                    section
                        .errors
                        .push(format!("{} {}: {e}", t.system.name(), kind.label()));
                }
                let c = &mut cells[ki][ti];
                c.rates.push(run.rate);
                c.p50.push(run.lat.p50);
                c.p99.push(run.lat.p99);
                c.server_cpu.push(run.cpu.server);
                c.samples_us.extend(&run.samples_us);
                c.runs.push(run.json(t.system, kind, rep));
            }
        }
    }
    for t in &mut targets {
        if !t.alive() {
            section.errors.push(format!(
                "{} died during S16; log:\n{}",
                t.system.name(),
                t.log_tail()
            ));
        }
    }

    // The table.
    section.line(format!(
        "{:<24} {:<14} {:>10} {:>9} {:>9} {:>7} {:>7}",
        "cell", "system", "acq/s", "p50 ms", "p99 ms", "server", "spread"
    ));
    let mut rows = Vec::new();
    for (ki, &kind) in kinds.iter().enumerate() {
        for (ti, t) in targets.iter().enumerate() {
            let c = &cells[ki][ti];
            if matches!(kind, Kind::ReadWrite(_)) && !t.system.has_read_write() {
                section.line(format!(
                    "{:<24} {:<14} (none: etcd's lock service has no shared mode)",
                    kind.label(),
                    t.system.name()
                ));
                continue;
            }
            if c.runs.is_empty() {
                continue;
            }
            let (rate, p50, p99) = if let Kind::Election(_) = kind {
                // Every hand-over of every repetition: percentiles of the lot.
                let mut h = stats::histogram();
                for &us in &c.samples_us {
                    stats::record(&mut h, us);
                }
                let l = Lat::of(&h);
                (stats::median(&c.rates), l.p50, l.p99)
            } else {
                (
                    stats::median(&c.rates),
                    stats::median(&c.p50),
                    stats::median(&c.p99),
                )
            };
            let rate_col = if let Kind::Election(_) = kind {
                format!("n={}", c.samples_us.len())
            } else {
                report::rate(rate)
            };
            let spread = if let Kind::Election(_) = kind {
                "-".to_string()
            } else {
                format!("{:.0}%", stats::spread_pct(&c.rates))
            };
            section.line(format!(
                "{:<24} {:<14} {:>10} {:>9} {:>9} {:>6.0}% {:>7}",
                kind.label(),
                t.system.name(),
                rate_col,
                report::ms(p50),
                report::ms(p99),
                stats::median(&c.server_cpu),
                spread
            ));
            rows.push(json!({
                "cell": kind.name(), "system": t.system.name(), "clients": kind.clients(),
                "rate_median": report::finite(rate), "p50_ms": report::finite(p50),
                "p99_ms": report::finite(p99),
                "server_cpu_pct_median": report::finite(stats::median(&c.server_cpu)),
                "spread_pct": stats::spread_pct(&c.rates), "runs": c.runs,
            }));
        }
    }
    section.line(
        "acq/s = acquisitions (uncontended: cycles) per second in the measured window; p50/p99 = the wait, from sending the \
         acquire to its grant (waits still open at the window's end count with their length so far); hand-over = from sending \
         the leader's resign to the return of the next candidate's campaign (n hand-overs, all repetitions pooled); \
         server = server CPU, % of a core; spread = (max - min) / median of acq/s over the repetitions",
    );
    // Ratios of runs made side by side.
    let find = |s: System| targets.iter().position(|t| t.system == s);
    if let Some(ma) = find(System::ModuleAlways) {
        for peer in [System::Etcd, System::ZooKeeper] {
            let Some(pi) = find(peer) else { continue };
            let mut parts = Vec::new();
            for (ki, &kind) in kinds.iter().enumerate() {
                if matches!(kind, Kind::Election(_) | Kind::ReadWrite(_)) {
                    continue;
                }
                let r = stats::paired_ratio(&cells[ki][ma].rates, &cells[ki][pi].rates);
                parts.push(format!("{} {:.1}x", kind.name(), r));
            }
            section.line(format!(
                "module-always / {} acq/s (median of per-repetition ratios): {}",
                peer.name(),
                parts.join(", ")
            ));
        }
    }
    section.json = json!({
        "reps": reps, "handovers_per_rep": handovers, "candidates": CANDIDATES,
        "read_fraction": READ_FRACTION, "lead_for_ms": LEAD_FOR.as_millis() as u64,
        "systems": targets.iter().map(|t| json!({"system": t.system.name(),
            "describe": t.system.describe(), "addr": t.addr})).collect::<Vec<_>>(),
        "skipped": skipped, "rows": rows,
    });
    let chart = (!targets.is_empty()).then(|| PeersChart {
        counts: HOT_CLIENTS.to_vec(),
        series: targets
            .iter()
            .enumerate()
            .map(|(ti, t)| {
                let of = |f: fn(&Cellrec) -> f64| {
                    HOT_CLIENTS
                        .iter()
                        .map(|&n| {
                            kinds
                                .iter()
                                .position(|k| *k == Kind::Hot(n))
                                .map_or(f64::NAN, |ki| f(&cells[ki][ti]))
                        })
                        .collect::<Vec<f64>>()
                };
                (
                    t.system.name().to_string(),
                    of(|c| stats::median(&c.rates)),
                    of(|c| stats::median(&c.p99)),
                )
            })
            .collect(),
    });
    drop(targets);
    Ok((section, chart))
}
