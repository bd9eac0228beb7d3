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
//!
//! The crate's parts: `options` (the command line, the scenarios it names
//! and their repetitions), `run` (the scenarios run in order, the report
//! written), `header` (what the report says of the machine and the run),
//! `ctx` (the server and settings a scenario runs against), one module per
//! scenario or group of scenarios, and beneath them the generator's clients
//! (`load`), connections (`conn`), servers and CPU accounting (`server`),
//! statistics, the report's sections and the charts.

mod benchmark;
pub mod chart;
mod cli_cost;
mod compare;
pub mod conn;
mod ctx;
mod deadlock;
mod expiry;
mod fair;
mod header;
mod keepalive;
mod keepalive_floor;
mod latch;
mod load;
pub mod options;
mod redisson_client;
pub mod report;
mod run;
mod scale;
pub mod server;
pub mod stats;
mod throughput;

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::process::ExitCode;
use std::time::Instant;

use crate::chart::PeersChart;
use crate::options::{parse_args, USAGE};
use crate::report::Section;

pub use crate::ctx::{info_field, Ctx};
pub use crate::header::command_output;
pub use crate::options::Opts;

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
    match local.block_on(&rt, run::run(opts, peers)) {
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
