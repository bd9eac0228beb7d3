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
//!
//! Offers: [`s16`], [`SYSTEMS`]. The parts: `system` (the systems and how
//! each is set up), `servers` (each system's server started, alive, named),
//! `clients` (one client of any system, the same calls), `cells` (what
//! each cell runs), `runs` (one measured run of a cell on a system: the
//! load cells and the election) and `table` (the table, the ratios, the
//! JSON and the chart).

mod cells;
mod clients;
mod runs;
mod servers;
mod system;
mod table;

use std::io;
use std::time::{Duration, Instant};

use serde_json::json;

use self::cells::{Kind, CANDIDATES, CLIENTS, HOT_CLIENTS};
use self::runs::{run_election, run_load};
use self::servers::{start, started_line, Target};
use self::system::System;
pub use self::system::SYSTEMS;
use self::table::Cellrec;
use lock_bench::chart::PeersChart;
use lock_bench::report::{self, Section};
use lock_bench::Opts;

/// Hand-overs measured per repetition of the election (15 with `--quick`).
const HANDOVERS: usize = 40;
const HANDOVERS_QUICK: usize = 15;
/// The pass not measured on every system before the first repetition, per
/// cell (1 s with `--quick`).
const WARM_PASS: Duration = Duration::from_secs(2);

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

    let chart = table::write(
        &mut section,
        &targets,
        &kinds,
        &cells,
        (reps, handovers),
        &skipped,
    );
    drop(targets);
    Ok((section, chart))
}
