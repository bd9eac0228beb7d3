//! The command line: its usage text, the options it sets ([`Opts`]), the
//! scenarios it names (by tag or name, in the order they run) and their
//! default repetitions.
//!
//! Offers: [`Opts`], [`scenario_name`], the `REPS_*` defaults.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::server::{self, Pinning};
use crate::{Peers, WITHOUT_PEERS};

pub(crate) const USAGE: &str = "\
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
  --floor-module PATH     libfloor.so, loaded next to liblock.so in S2's server for its module-floor row
                          (default target/release/libfloor.so of this workspace, built by
                          `cargo build --release -p lock-bench-floor`; absent: the row is left out)
  --redis-server PATH     default redis-server from PATH
  --redis-benchmark PATH  default redis-benchmark from PATH
  --cli PATH              redis-lock for S10 (default target/release/redis-lock of this workspace)
  --protocols LIST        only these protocols in S1/S2/S5/S7/S8/S12/S13 (module,module-keepalive,
                          module-fence,redisson,redisson-emu,spin-10ms,spin-100ms,raw; blpop = S2's
                          reference: Redis's own BLPOP/RPUSH hand-off, no module; module-floor =
                          S2's other: the module API's own hand-off (libfloor.so); redisson = the
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
pub(crate) const SCENARIOS: [(&str, &str); 18] = [
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
    /// libfloor.so (bench/floor), S2's module-floor row; see [`Opts::floor`].
    pub floor_module: PathBuf,
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

    /// libfloor.so, when the file is there (else S2 leaves its row out).
    pub fn floor(&self) -> Option<&Path> {
        Some(self.floor_module.as_path()).filter(|p| p.is_file())
    }
}

pub(crate) fn workspace_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

pub(crate) fn parse_args(peers: Option<&dyn Peers>) -> Result<Opts, String> {
    let mut args = std::env::args().skip(1);
    let mut quick = false;
    let mut only = None;
    let mut reps = None;
    let mut warmup = None;
    let mut measure = None;
    let mut tpp = 4;
    let mut out = None;
    let mut module = None;
    let mut floor_module = None;
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
            "--floor-module" => floor_module = Some(PathBuf::from(value(&mut args, &a)?)),
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
                        "module-floor",
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
        floor_module: server::absolute(
            &floor_module.unwrap_or_else(|| workspace_dir().join("target/release/libfloor.so")),
        ),
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
