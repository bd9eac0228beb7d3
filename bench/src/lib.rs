//! lock-bench: the load generator for the `lock` Redis module. Starts its own
//! redis-server(s) with the module, drives the module's commands, Redisson's
//! Lua + pub/sub protocol, spin locks and raw SET NX against the same server in
//! the same run, and prints a table with every bar (see bench/README.md).
//!
//! The benchmark is this library; the binary `lock-bench` runs it without
//! the scenarios that measure the module against its peers (S14, S16: etcd,
//! ZooKeeper, a Kubernetes-style election), whose clients need protoc to
//! build. Those are the crate `lock-bench-peers` (bench/peers), whose binary
//! is this benchmark with them ([`Peers`]); `make bench` runs that one.

mod benchmark;
pub mod chart;
mod cli_cost;
mod compare;
pub mod conn;
mod deadlock;
mod expiry;
mod fair;
mod keepalive;
mod keepalive_floor;
mod latch;
mod load;
mod redisson_client;
pub mod report;
mod scale;
pub mod server;
pub mod stats;
mod throughput;

use std::fs;
use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::json;

use crate::chart::PeersChart;
use crate::conn::{Conn, ReplyExt};
use crate::load::{LoadSpec, Proto, Scripts};
use crate::report::Section;
use crate::server::{Pinning, Server, ServerSpec};

/// A future of a scenario, run on the benchmark's one thread.
pub type LocalFuture<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

/// The scenarios that measure the module against its peers, S14 (leader
/// election hand-over: etcd's election, `etcdctl elect`, a Kubernetes-style
/// lease on Redis) and S16 (etcd's and ZooKeeper's locks and elections),
/// and the processes S14 starts: what `lock-bench-peers` (bench/peers) adds.
pub trait Peers {
    /// The names `--systems`, `--faults` (S14) and `--peers` (S16) take.
    fn s14_systems(&self) -> Vec<&'static str>;
    fn s14_faults(&self) -> Vec<&'static str>;
    fn s16_systems(&self) -> Vec<&'static str>;
    fn s14<'a>(&'a self, opts: &'a Opts, started: Instant) -> LocalFuture<'a, io::Result<Section>>;
    fn s16<'a>(
        &'a self,
        opts: &'a Opts,
        started: Instant,
    ) -> LocalFuture<'a, io::Result<(Section, Option<PeersChart>)>>;
    /// Runs one of the processes S14 starts when `argv[1]` is its flag
    /// (the current executable run again); its exit code.
    fn child(&self, argv: &[String]) -> Option<u8>;
}

/// Why S14 and S16 are not in this binary.
const WITHOUT_PEERS: &str = "this lock-bench is built without its peers: \
    target/release/lock-bench-peers (crate bench/peers, built by `make bench`; its etcd client needs protoc) \
    is lock-bench with S14 and S16";

const USAGE: &str = "\
lock-bench: benchmark of the lock module against Redisson (its client and its protocol), spin locks and raw SET NX

usage: lock-bench [options]
  --quick                 smoke run: 1 repetition, short runs, smaller S1b/S4/S6, S14 without
                          its slow cells (etcdctl and k8s-lease kill9/cut)
  --only S2,lease-expiry  run only these scenarios, by tag or name: S1 uncontended,
                          S1b pipelined-acquires, S2 hot-lock, S3 lease-expiry, S4 scale,
                          S5 moderate-contention, S6 no-tax, S7 read-write, S8 multi-lock,
                          S9 keepalive-renewals, S10 cli-cost, S11 keepalive-floor,
                          S12 semaphore, S13 latch, S14 election, S15 deadlock-detection,
                          S16 peers, S17 fair-lock
  --reps N                repetitions of every measurement (default: S1/S5/S1b 7, S2/S3/S4/S7/S8 5,
                          S4 memory 3, S6 9, S9 3 renewal periods, S10 5, S11 1 run of 30 s
                          (5 s with --quick), S12 3, S13 7 rounds; S14 samples per cell: 5,
                          2 for etcdctl's kill -9 and cut, 3 for k8s-lease; S15 5, its cycles 3;
                          S16 3; S17 5; median reported)
  --warmup SECS           warm-up before each measured run (default 0.3, 0.2 with --quick)
  --measure SECS          length of each measured run (default 1, 0.5 with --quick; S8's redisson-emu
                          runs 4.5 s longer: its MultiLock tryLock wait)
  --threads-per-process N Redisson client threads per process (real client: per Redisson
                          instance) (default 4)
  --out DIR               where latest.txt, latest.json, chart.svg go (default bench/results,
                          bench/results/quick with --quick)
  --module PATH           liblock.so (default target/release/liblock.so of this workspace)
  --redis-server PATH     default redis-server from PATH
  --redis-benchmark PATH  default redis-benchmark from PATH
  --cli PATH              redis-lock for S10 (default target/release/redis-lock of this workspace)
  --protocols LIST        only these protocols in S1/S2/S5/S7/S8/S12/S13 (module,module-keepalive,
                          module-fence,redisson,redisson-emu,spin-10ms,spin-100ms,raw; blpop = S2's
                          reference: Redis's own BLPOP/RPUSH hand-off, no module; redisson = the
                          real Java client (S2, S12, S13: needs java and mvn), redisson-emu =
                          Redisson's protocol by this generator (S1, S3-S5, S7, S8, S13))
  --s2-clients LIST       S2 client counts (default 1,4,16,64,256)
  --systems LIST          S14's systems (module,etcd-lease,etcdctl,k8s-lease; default all)
  --faults LIST           S14's faults (clean,kill9,cut; default all; cut needs root)
  --etcd PATH, --etcdctl PATH  for S14 and S16 (default etcd, etcdctl from PATH; skipped when absent)
  --peers LIST            S16's systems (module,module-always,etcd,zookeeper; default all; a peer
                          not installed is skipped with a line saying so)
  --s15-baseline PATH     S15 also measures its hot-lock and uncontended cells on a second server
                          with this module (one built without deadlock detection)
  --compare-models        measure tokio tasks vs blocking threads as the client model, then exit
  -h, --help

S14 and S16, and --systems, --faults, --etcd, --etcdctl, --peers, are lock-bench-peers' (bench/peers,
built by make bench): the same benchmark with the peers' clients, which need protoc to build.";

/// Every scenario, in the order they run: its tag and a name saying what it
/// measures.
const SCENARIOS: [(&str, &str); 18] = [
    ("S1", "uncontended"),
    ("S1b", "pipelined-acquires"),
    ("S2", "hot-lock"),
    ("S3", "lease-expiry"),
    ("S4", "scale"),
    ("S5", "moderate-contention"),
    ("S6", "no-tax"),
    ("S7", "read-write"),
    ("S8", "multi-lock"),
    ("S9", "keepalive-renewals"),
    ("S10", "cli-cost"),
    ("S11", "keepalive-floor"),
    ("S12", "semaphore"),
    ("S13", "latch"),
    ("S14", "election"),
    ("S15", "deadlock-detection"),
    ("S16", "peers"),
    ("S17", "fair-lock"),
];

/// The name of scenario `tag`.
pub fn scenario_name(tag: &str) -> &'static str {
    SCENARIOS
        .iter()
        .find(|(t, _)| *t == tag)
        .map_or("", |(_, name)| name)
}

/// The tag of a scenario given by tag (any case) or by name.
fn scenario_tag(given: &str) -> Option<&'static str> {
    SCENARIOS
        .iter()
        .find(|(tag, name)| tag.eq_ignore_ascii_case(given) || name.eq_ignore_ascii_case(given))
        .map(|(tag, _)| *tag)
}

pub const REPS_S1: usize = 7;
pub const REPS_S1B: usize = 7;
pub const REPS_S2: usize = 5;
pub const REPS_S3: usize = 5;
pub const REPS_S4_MEMORY: usize = 3;
pub const REPS_S4_RELEASE: usize = 5;
pub const REPS_S5: usize = 7;
pub const REPS_S6: usize = 9;
pub const REPS_S7: usize = 5;
pub const REPS_S8: usize = 5;
/// Renewal periods (15 s each, `keepalive::PERIOD`) measured.
pub const REPS_S9: usize = 3;
pub const REPS_S10: usize = 5;
/// Runs of 1,000 holds at the floor lease, 30 s each.
pub const REPS_S11: usize = 1;
pub const REPS_S12: usize = 3;
/// Rounds of 1,000 waiters released at once, per protocol.
pub const REPS_S13: usize = 7;
/// S15: runs per setting (detection on, off) of its cost cells, and of its
/// cycles.
pub const REPS_S15: usize = 5;
pub const REPS_S15_CYCLES: usize = 3;
/// S16: repetitions of every cell (systems interleaved within each).
pub const REPS_S16: usize = 3;
/// S17: repetitions of every cell (cells interleaved within each).
pub const REPS_S17: usize = 5;

#[derive(Clone, Debug)]
pub struct Opts {
    pub quick: bool,
    pub only: Option<Vec<String>>,
    /// `--reps`, when given, for every scenario.
    pub reps_given: Option<usize>,
    pub warmup: Duration,
    pub measure: Duration,
    pub threads_per_process: usize,
    pub out: PathBuf,
    pub module: PathBuf,
    pub redis_server: String,
    pub redis_benchmark: String,
    /// redis-lock, for S10.
    pub cli: PathBuf,
    pub compare_models: bool,
    pub protocols: Option<Vec<String>>,
    pub s2_clients: Vec<usize>,
    pub pinning: Pinning,
    /// Requests per redis-benchmark run, S1b and S6.
    pub bench_requests: u64,
    pub s6_requests: u64,
    /// Locks written for S4's memory figure.
    pub s4_locks: u64,
    pub s4_waiters: usize,
    pub s4_releases: usize,
    /// S14's systems and faults (None: all).
    pub systems: Option<Vec<String>>,
    pub faults: Option<Vec<String>>,
    pub etcd: String,
    pub etcdctl: String,
    /// S15's module without deadlock detection, to compare with.
    pub s15_baseline: Option<PathBuf>,
    /// S16's systems (None: all).
    pub peers: Option<Vec<String>>,
}

impl Opts {
    /// Repetitions of a measurement whose default is `default`: `--reps`
    /// when given, 1 with `--quick`.
    pub fn reps(&self, default: usize) -> usize {
        match self.reps_given {
            Some(n) => n,
            None if self.quick => 1,
            None => default,
        }
    }
}

fn workspace_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

fn parse_args(peers: Option<&dyn Peers>) -> Result<Opts, String> {
    let mut args = std::env::args().skip(1);
    let mut quick = false;
    let mut only = None;
    let mut reps = None;
    let mut warmup = None;
    let mut measure = None;
    let mut tpp = 4;
    let mut out = None;
    let mut module = None;
    let mut redis_server = "redis-server".to_string();
    let mut redis_benchmark = "redis-benchmark".to_string();
    let mut cli = None;
    let mut compare_models = false;
    let mut protocols = None;
    let mut s2_clients = vec![1, 4, 16, 64, 256];
    let mut systems = None;
    let mut faults = None;
    let mut etcd = "etcd".to_string();
    let mut etcdctl = "etcdctl".to_string();
    let mut s15_baseline = None;
    let mut peer_systems = None;
    fn value(args: &mut impl Iterator<Item = String>, name: &str) -> Result<String, String> {
        args.next().ok_or_else(|| format!("{name} needs a value"))
    }
    fn secs(s: &str, name: &str) -> Result<Duration, String> {
        s.parse::<f64>()
            .ok()
            .filter(|x| *x > 0.0 && x.is_finite())
            .map(Duration::from_secs_f64)
            .ok_or_else(|| format!("{name}: not a positive number of seconds: {s}"))
    }
    while let Some(a) = args.next() {
        match a.as_str() {
            "--quick" => quick = true,
            "--only" => {
                let v = value(&mut args, &a)?;
                let mut list = Vec::new();
                for s in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                    let tag =
                        scenario_tag(s).ok_or_else(|| format!("--only: unknown scenario {s}"))?;
                    list.push(tag.to_string());
                }
                if peers.is_none() {
                    if let Some(t) = list.iter().find(|t| *t == "S14" || *t == "S16") {
                        return Err(format!("--only {t}: {WITHOUT_PEERS}"));
                    }
                }
                only = Some(list);
            }
            "--reps" => {
                let v = value(&mut args, &a)?;
                reps = Some(
                    v.parse::<usize>()
                        .ok()
                        .filter(|n| *n >= 1)
                        .ok_or_else(|| format!("--reps: not a positive integer: {v}"))?,
                );
            }
            "--warmup" => warmup = Some(secs(&value(&mut args, &a)?, &a)?),
            "--measure" => measure = Some(secs(&value(&mut args, &a)?, &a)?),
            "--threads-per-process" => {
                let v = value(&mut args, &a)?;
                tpp =
                    v.parse::<usize>().ok().filter(|n| *n >= 1).ok_or_else(|| {
                        format!("--threads-per-process: not a positive integer: {v}")
                    })?;
            }
            "--out" => out = Some(PathBuf::from(value(&mut args, &a)?)),
            "--module" => module = Some(PathBuf::from(value(&mut args, &a)?)),
            "--redis-server" => redis_server = value(&mut args, &a)?,
            "--redis-benchmark" => redis_benchmark = value(&mut args, &a)?,
            "--cli" => cli = Some(PathBuf::from(value(&mut args, &a)?)),
            "--compare-models" => compare_models = true,
            "--protocols" => {
                let v = value(&mut args, &a)?;
                let list: Vec<String> = v.split(',').map(|s| s.trim().to_string()).collect();
                for p in &list {
                    if ![
                        "module",
                        "module-keepalive",
                        "module-fence",
                        "redisson",
                        "redisson-emu",
                        "spin-10ms",
                        "spin-100ms",
                        "raw",
                        "blpop",
                    ]
                    .contains(&p.as_str())
                    {
                        return Err(format!("--protocols: unknown protocol {p}"));
                    }
                }
                protocols = Some(list);
            }
            "--s2-clients" => {
                let v = value(&mut args, &a)?;
                s2_clients = v
                    .split(',')
                    .map(|s| s.trim().parse::<usize>().ok().filter(|n| *n >= 1))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| format!("--s2-clients: not a list of positive integers: {v}"))?;
            }
            "--systems" | "--faults" | "--peers" | "--etcd" | "--etcdctl" if peers.is_none() => {
                return Err(format!("{a}: {WITHOUT_PEERS}"));
            }
            "--systems" | "--faults" => {
                let v = value(&mut args, &a)?;
                let list: Vec<String> = v.split(',').map(|s| s.trim().to_string()).collect();
                let known: Vec<&str> = match peers {
                    Some(p) if a == "--systems" => p.s14_systems(),
                    Some(p) => p.s14_faults(),
                    None => Vec::new(),
                };
                if let Some(bad) = list.iter().find(|x| !known.contains(&x.as_str())) {
                    return Err(format!("{a}: unknown {bad} (one of {})", known.join(",")));
                }
                if a == "--systems" {
                    systems = Some(list);
                } else {
                    faults = Some(list);
                }
            }
            "--etcd" => etcd = value(&mut args, &a)?,
            "--etcdctl" => etcdctl = value(&mut args, &a)?,
            "--s15-baseline" => s15_baseline = Some(PathBuf::from(value(&mut args, &a)?)),
            "--peers" => {
                let v = value(&mut args, &a)?;
                let list: Vec<String> = v.split(',').map(|s| s.trim().to_string()).collect();
                let known: Vec<&str> = peers.map(|p| p.s16_systems()).unwrap_or_default();
                if let Some(bad) = list.iter().find(|x| !known.contains(&x.as_str())) {
                    return Err(format!(
                        "--peers: unknown {bad} (one of {})",
                        known.join(",")
                    ));
                }
                peer_systems = Some(list);
            }
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown option {other}")),
        }
    }
    let module = module
        .or_else(|| std::env::var_os("LOCK_MODULE").map(PathBuf::from))
        .unwrap_or_else(|| workspace_dir().join("target/release/liblock.so"));
    let out = out.unwrap_or_else(|| {
        let base = workspace_dir().join("bench/results");
        if quick {
            base.join("quick")
        } else {
            base
        }
    });
    Ok(Opts {
        quick,
        only,
        reps_given: reps,
        warmup: warmup.unwrap_or(Duration::from_millis(if quick { 200 } else { 300 })),
        measure: measure.unwrap_or(Duration::from_millis(if quick { 500 } else { 1000 })),
        threads_per_process: tpp,
        out,
        module: server::absolute(&module),
        redis_server,
        redis_benchmark,
        cli: server::absolute(
            &cli.unwrap_or_else(|| workspace_dir().join("target/release/redis-lock")),
        ),
        compare_models,
        protocols,
        s2_clients,
        pinning: Pinning::detect(),
        bench_requests: if quick { 100_000 } else { 400_000 },
        s6_requests: if quick { 100_000 } else { 250_000 },
        s4_locks: if quick { 200_000 } else { 1_000_000 },
        s4_waiters: 10_000,
        s4_releases: if quick { 50 } else { 200 },
        systems,
        faults,
        etcd,
        etcdctl,
        s15_baseline: s15_baseline.map(|p| server::absolute(&p)),
        peers: peer_systems,
    })
}

/// What a scenario runs against: a fresh server with the module.
pub struct Ctx {
    pub opts: Opts,
    pub server: Server,
    pub addr: String,
    pub server_pid: Option<u32>,
    pub scripts: Scripts,
    runs: std::cell::Cell<u64>,
    started: Instant,
    /// The real Redisson client's load driver (a JVM), started at its first
    /// run; Err: why it could not be (its rows are then left out).
    redisson: std::cell::RefCell<Option<Result<redisson_client::RedissonClient, String>>>,
}

impl Ctx {
    pub fn server_spec(opts: &Opts, with_module: bool) -> ServerSpec {
        ServerSpec {
            binary: opts.redis_server.clone(),
            module: with_module.then(|| opts.module.clone()),
            core: opts.pinning.server,
            // S4 queues 10k waiters; every server is started the same way.
            extra: vec!["--maxclients".into(), "20100".into()],
        }
    }

    async fn new(opts: &Opts, tag: &str, started: Instant) -> io::Result<Ctx> {
        let server = crate::server::start(&Ctx::server_spec(opts, true), tag)?;
        let addr = server.addr();
        let mut conn = Conn::connect(&addr).await?;
        let scripts = Scripts::load(&mut conn).await?;
        Ok(Ctx {
            opts: opts.clone(),
            server_pid: server.pid(),
            server,
            addr,
            scripts,
            runs: std::cell::Cell::new(0),
            started,
            redisson: std::cell::RefCell::new(None),
        })
    }

    /// Runs `f` with the real Redisson client's driver, started (built with
    /// Maven, its JVM pinned to the generator's core) at the first call.
    pub fn with_redisson<T>(
        &self,
        f: impl FnOnce(&mut redisson_client::RedissonClient) -> io::Result<T>,
    ) -> io::Result<T> {
        let mut slot = self.redisson.borrow_mut();
        if slot.is_none() {
            self.progress(&format!(
                "starting the real Redisson client {} (interop/redisson's load driver: mvn compile, then a JVM)",
                redisson_client::REDISSON_VERSION
            ));
            *slot = Some(redisson_client::RedissonClient::start(
                &workspace_dir(),
                self.opts.pinning.generator,
            ));
        }
        match slot.as_mut() {
            Some(Ok(client)) => f(client),
            Some(Err(why)) => Err(io::Error::other(why.clone())),
            None => Err(io::Error::other("no Redisson driver")),
        }
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.addr
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or(0)
    }

    pub fn spec(&self, proto: Proto, clients: usize, keys: usize) -> LoadSpec {
        let n = self.runs.get() + 1;
        self.runs.set(n);
        LoadSpec {
            proto,
            clients,
            keys,
            threads_per_process: self.opts.threads_per_process,
            warmup: self.opts.warmup,
            measure: self.opts.measure,
            lease_ms: 30_000,
            block_ms: 10_000,
            prefix: format!("b{n}-{}", proto.name()),
            seed: n,
            read_fraction: None,
            multi: None,
            semaphore: None,
        }
    }

    /// The protocols of `all` that `--protocols` keeps.
    pub fn protocols(&self, all: &[Proto]) -> Vec<Proto> {
        all.iter()
            .copied()
            .filter(|p| {
                self.opts
                    .protocols
                    .as_ref()
                    .is_none_or(|l| l.iter().any(|n| *n == p.name()))
            })
            .collect()
    }

    pub fn progress(&self, msg: &str) {
        eprintln!("[{:>6.1}s] {msg}", self.started.elapsed().as_secs_f64());
    }

    /// A run that other processes disturbed: kept aside (`json`), then
    /// waits for quiet before it is measured again.
    pub fn measure_again(&self, section: &mut Section, json: serde_json::Value) {
        section.discarded.push(json);
        let waited = crate::server::wait_for_quiet(self.server_pid, report::INTERFERENCE_PCT);
        self.progress(&format!(
            "  other processes were busy: waited {:.1} s for quiet, measuring again",
            waited.as_secs_f64()
        ));
    }

    /// After a run: the server is alive and no caller is left queued.
    pub async fn settle(&self, section: &mut Section) {
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            match self.info_field("lock", "lock_waiters").await {
                Ok(Some(v)) if v == "0" => return,
                Ok(v) if Instant::now() > deadline => {
                    section.errors.push(format!(
                        "lock_waiters is {} after every client of the run disconnected",
                        v.unwrap_or_else(|| "missing".into())
                    ));
                    return;
                }
                Err(e) => {
                    section
                        .errors
                        .push(format!("server not answering after a run: {e}"));
                    return;
                }
                _ => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        }
    }

    pub async fn info_field(&self, section: &str, field: &str) -> io::Result<Option<String>> {
        let mut c = Conn::connect(&self.addr).await?;
        info_field(&mut c, section, field).await
    }
}

/// A field of `INFO section`, as text.
pub async fn info_field(c: &mut Conn, section: &str, field: &str) -> io::Result<Option<String>> {
    let info = c.ok(&["INFO", section]).await?.text();
    Ok(info.lines().find_map(|line| {
        line.strip_prefix(field)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(|v| v.trim().to_string())
    }))
}

fn wanted(opts: &Opts, id: &str) -> bool {
    opts.only.as_ref().is_none_or(|l| l.iter().any(|s| s == id))
}

/// `YYYY-MM-DD HH:MM:SS UTC` for a unix time.
fn utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn first_line(path: &str, prefix: &str) -> Option<String> {
    fs::read_to_string(path).ok().and_then(|s| {
        s.lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
    })
}

/// The trimmed stdout of `cmd arg` (a version), or why it could not run.
pub fn command_output(cmd: &str, arg: &str) -> String {
    std::process::Command::new(cmd)
        .arg(arg)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|e| format!("({cmd}: {e})"))
}

fn command_line() -> String {
    std::env::args()
        .map(|a| {
            if a.is_empty() || a.contains(|c: char| c.is_whitespace() || c == '\'') {
                format!("'{}'", a.replace('\'', "'\\''"))
            } else {
                a
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

struct Header {
    text: String,
    json: serde_json::Value,
}

fn header(opts: &Opts, date: &str, load_before: &str) -> Header {
    let cores = server::online_cores();
    let cpu = first_line("/proc/cpuinfo", "model name").unwrap_or_else(|| "unknown".into());
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    let redis = command_output(&opts.redis_server, "--version");
    let text = format!(
        "lock-bench: the lock module vs Redisson (its client and its protocol), spin locks and raw SET NX\n\
         date:     {date}\n\
         command:  {}\n\
         machine:  {cores} cores, {cpu}, Linux {kernel}, load average at start {load_before}\n\
         server:   {redis}\n\
         module:   {}\n\
         pinning:  {}\n\
         runs:     every figure is the median of repeated runs (S1 {}, S1b {}, S2 {}, S3 {}, S4 {}/{}, S5 {}, S6 {}, S7 {}, S8 {}, S9 {}, S10 {}, S11 {}, S12 {}, S13 {}, S14 {}, S15 {}/{}, S16 {}; all runs in latest.json); \
         throughput runs {:.1} s measured after {:.1} s warm-up{}\n\
         clients:  one tokio current_thread runtime (one core), a task per client, RESP2 over TCP_NODELAY sockets (commands packed by the redis crate, replies parsed by redis-protocol);\n          \
         redisson-emu: Redisson's protocol simulated as processes of {} threads (one pub/sub connection per process); redisson: the real client in a JVM\n          \
         (interop/redisson's load driver); spin retries after 10 ms / 100 ms\n",
        command_line(),
        opts.module.display(),
        opts.pinning.describe(),
        opts.reps(REPS_S1),
        opts.reps(REPS_S1B),
        opts.reps(REPS_S2),
        opts.reps(REPS_S3),
        opts.reps(REPS_S4_MEMORY),
        opts.reps(REPS_S4_RELEASE),
        opts.reps(REPS_S5),
        opts.reps(REPS_S6),
        opts.reps(REPS_S7),
        opts.reps(REPS_S8),
        opts.reps(REPS_S9),
        opts.reps(REPS_S10),
        opts.reps(REPS_S11),
        opts.reps(REPS_S12),
        opts.reps(REPS_S13),
        match opts.reps_given {
            Some(n) => n.to_string(),
            None if opts.quick => "1 per fast cell".to_string(),
            None => "5 per cell, fewer for slow cells".to_string(),
        },
        opts.reps(REPS_S15),
        opts.reps(REPS_S15_CYCLES),
        opts.reps(REPS_S16),
        opts.measure.as_secs_f64(),
        opts.warmup.as_secs_f64(),
        if opts.quick { " (--quick)" } else { "" },
        opts.threads_per_process,
    );
    let json = json!({
        "date": date, "command": command_line(), "cores": cores, "cpu": cpu,
        "kernel": kernel, "redis_server": redis, "module": opts.module.display().to_string(),
        "pinning": opts.pinning.describe(), "reps_given": opts.reps_given,
        "measure_s": opts.measure.as_secs_f64(), "warmup_s": opts.warmup.as_secs_f64(),
        "quick": opts.quick, "threads_per_process": opts.threads_per_process,
        "load_average_at_start": load_before,
    });
    Header { text, json }
}

/// The CPU probe on the server's and the generator's cores, as text and JSON.
fn probe(opts: &Opts) -> (String, serde_json::Value) {
    let mut text = Vec::new();
    let mut js = serde_json::Map::new();
    for (name, core) in [
        ("server core", opts.pinning.server),
        ("generator core", opts.pinning.generator),
    ] {
        let v = server::cpu_probe(core, 8);
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(0.0, f64::max);
        text.push(format!(
            "{name} {:.0} ms median [{lo:.0} .. {hi:.0}]",
            stats::median(&v)
        ));
        js.insert(name.replace(' ', "_"), json!(v));
    }
    (
        format!(
            "same fixed work timed 8 times per core: {} (slowest/fastest shows the machine's own noise)",
            text.join(", ")
        ),
        serde_json::Value::Object(js),
    )
}

fn loadavg() -> String {
    fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

async fn run(opts: Opts, peers: Option<&dyn Peers>) -> io::Result<bool> {
    if !opts.module.is_file() {
        return Err(io::Error::other(format!(
            "module not found: {} (build it with `cargo build --release -p redis-lock`)",
            opts.module.display()
        )));
    }
    let started = Instant::now();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let date = utc(now);
    let probe_start = probe(&opts);
    let mut head = header(&opts, &date, &loadavg());
    head.text
        .push_str(&format!("cpu probe: {}\n", probe_start.0));
    head.json["cpu_probe_start"] = probe_start.1;
    eprint!("{}", head.text);

    let mut sections: Vec<Section> = Vec::new();
    let mut chart_data = None;
    let mut peers_chart = None;
    for (id, _) in SCENARIOS {
        if !wanted(&opts, id) {
            continue;
        }
        let t0 = Instant::now();
        let result: io::Result<Section> = async {
            if id == "S6" {
                return benchmark::s6(&opts, started).await;
            }
            if id == "S14" || id == "S16" {
                let Some(p) = peers else {
                    let mut s = Section::new(id, "not run");
                    s.line(WITHOUT_PEERS);
                    return Ok(s);
                };
                if id == "S14" {
                    return p.s14(&opts, started).await;
                }
                let (s, c) = p.s16(&opts, started).await?;
                peers_chart = c;
                return Ok(s);
            }
            if id == "S17" {
                return fair::s17(&opts, started).await;
            }
            let ctx = Ctx::new(&opts, id, started).await?;
            let section = match id {
                "S1" => throughput::s1(&ctx).await,
                "S1b" => benchmark::s1b(&ctx).await,
                "S2" => {
                    let (s, c) = throughput::s2(&ctx).await?;
                    chart_data = Some(c);
                    Ok(s)
                }
                "S3" => expiry::s3(&ctx).await,
                "S4" => scale::s4(&ctx).await,
                "S7" => throughput::s7(&ctx).await,
                "S8" => throughput::s8(&ctx).await,
                "S9" => keepalive::s9(&ctx).await,
                "S10" => cli_cost::s10(&ctx).await,
                "S11" => keepalive_floor::s11(&ctx).await,
                "S12" => throughput::s12(&ctx).await,
                "S13" => latch::s13(&ctx).await,
                "S15" => deadlock::s15(&ctx).await,
                _ => throughput::s5(&ctx).await,
            };
            let mut ctx = ctx;
            if !ctx.server.alive() {
                return Err(io::Error::other(format!(
                    "redis-server died during {id}; log:\n{}",
                    ctx.server.log_tail(20)
                )));
            }
            section
        }
        .await;
        let mut section = match result {
            Ok(s) => s,
            Err(e) => {
                let mut s = Section::new(id, "did not complete");
                s.errors.push(e.to_string());
                s
            }
        };
        section.line(format!(
            "scenario time: {:.0} s",
            t0.elapsed().as_secs_f64()
        ));
        eprint!("{}", section.render());
        sections.push(section);
    }

    let probe_end = probe(&opts);
    head.json["cpu_probe_end"] = probe_end.1;
    let total = started.elapsed().as_secs_f64();
    let bars: Vec<&report::Bar> = sections.iter().flat_map(|s| s.bars.iter()).collect();
    let passed = bars.iter().filter(|b| b.pass()).count();
    let violations: usize = sections.iter().map(|s| s.violations.len()).sum();
    let errors: usize = sections.iter().map(|s| s.errors.len()).sum();
    let mut text = head.text.clone();
    text.push('\n');
    for s in &sections {
        text.push_str(&s.render());
        text.push('\n');
    }
    text.push_str(&format!("cpu probe at the end: {}\n", probe_end.0));
    text.push_str(&format!(
        "summary: {passed} of {} bars PASS, {} FALL SHORT; mutual-exclusion violations: {violations}; errors: {errors}; total time {:.0} s; load average at end {}\n",
        bars.len(),
        bars.len() - passed,
        total,
        loadavg()
    ));
    print!("{text}");

    fs::create_dir_all(&opts.out)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", opts.out.display())))?;
    let doc = json!({
        "header": head.json,
        "scenarios": sections.iter().map(Section::to_json).collect::<Vec<_>>(),
        "bars": sections.iter().flat_map(|s| s.bars.iter().map(move |b| {
            let mut j = b.json();
            j["scenario"] = json!(s.id);
            j
        })).collect::<Vec<_>>(),
        "summary": {"bars": bars.len(), "pass": passed, "violations": violations,
                    "errors": errors, "total_s": total},
    });
    let write = |name: &str, body: &[u8]| -> io::Result<()> {
        let p = opts.out.join(name);
        fs::write(&p, body).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))
    };
    write("latest.txt", text.as_bytes())?;
    let compact = serde_json::to_string(&doc).map_err(io::Error::other)?;
    write("latest.json", compact.as_bytes())?;
    let mut files = vec!["latest.txt", "latest.json"];
    if let Some(c) = &chart_data {
        let p = opts.out.join("chart.svg");
        chart::draw(c, &p, &date).map_err(|e| io::Error::other(format!("chart: {e}")))?;
        files.push("chart.svg");
    }
    if let Some(c) = &peers_chart {
        // chart.svg is S2's when S2 ran.
        let name = if chart_data.is_some() {
            "peers.svg"
        } else {
            "chart.svg"
        };
        chart::draw_peers(c, &opts.out.join(name), &date)
            .map_err(|e| io::Error::other(format!("chart: {e}")))?;
        files.push(name);
    }
    eprintln!("wrote {} in {}", files.join(", "), opts.out.display());
    Ok(violations == 0 && errors == 0)
}

/// The benchmark's `main`, with the peers' scenarios when given
/// (lock-bench-peers) and without (lock-bench).
pub fn main(peers: Option<&dyn Peers>) -> ExitCode {
    // The processes S14 starts.
    let argv: Vec<String> = std::env::args().collect();
    if let Some(code) = peers.and_then(|p| p.child(&argv)) {
        return ExitCode::from(code);
    }
    let opts = match parse_args(peers) {
        Ok(o) => o,
        Err(e) => {
            if e.is_empty() {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            eprintln!("lock-bench: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if let Some(core) = opts.pinning.generator {
        if let Err(e) = server::pin_self(core) {
            eprintln!("lock-bench: cannot pin the generator to core {core}: {e}");
        }
    }
    if let Err(e) = server::raise_nofile() {
        eprintln!("lock-bench: cannot raise the open-file limit: {e}");
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("lock-bench: tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let local = tokio::task::LocalSet::new();
    if opts.compare_models {
        return match local.block_on(&rt, compare::run(&opts)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("lock-bench: {e}");
                ExitCode::FAILURE
            }
        };
    }
    match local.block_on(&rt, run(opts, peers)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("lock-bench: FAILED: mutual-exclusion violations or errors (see above)");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("lock-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
