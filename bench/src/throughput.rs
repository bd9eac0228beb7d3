//! S1 (uncontended cycles), S2 (one hot lock), S5 (64 keys, 256 clients),
//! S7 (one read-write lock, 90% reads) and S8 (multi-locks of 3 keys of 8):
//! closed-loop clients from `load`,
//! every protocol in the same run, reps interleaved so that drift spreads
//! over all protocols.

use std::io;

use serde_json::{json, Value};

use crate::conn::Conn;
use crate::load::{
    commandstats, ping_rate, redisson_multi_wait, run_load, KeyOrder, LoadResult, LoadSpec,
    MultiSpec, Proto, RwStats, REDISSON_MULTI_WAIT_PER_KEY,
};
use crate::report::{finite, ms, rate, Bar, Section, INTERFERENCE_PCT, RETRIES};
use crate::stats::{median, paired_ratio, range, ratios, spread_pct};
use crate::Ctx;

/// Runs of one (protocol, clients) cell.
struct Cell {
    proto: Proto,
    clients: usize,
    runs: Vec<LoadResult>,
}

impl Cell {
    /// An empty cell per client count and protocol, counts outermost.
    fn grid(counts: &[usize], protos: &[Proto]) -> Vec<Cell> {
        counts
            .iter()
            .flat_map(|&clients| {
                protos.iter().map(move |&proto| Cell {
                    proto,
                    clients,
                    runs: Vec::new(),
                })
            })
            .collect()
    }

    /// Median µs per call in the server of the commands this protocol sent
    /// (those with at least as many calls as a tenth of the busiest).
    fn server_time(&self) -> String {
        let runs = self.runs.iter().map(|r| r.commandstats.as_slice());
        crate::stats::server_time(runs, 10, &["config", "info"])
    }

    fn med(&self, f: impl Fn(&LoadResult) -> f64) -> f64 {
        let v: Vec<f64> = self.runs.iter().map(f).collect();
        median(&v)
    }

    fn rate(&self) -> f64 {
        self.med(|r| r.rate)
    }

    fn rates(&self) -> Vec<f64> {
        self.runs.iter().map(|r| r.rate).collect()
    }

    /// Median of this cell's rate / `other`'s, repetition by repetition.
    fn vs(&self, other: &Cell) -> f64 {
        paired_ratio(&self.rates(), &other.rates())
    }

    fn bar_vs(&self, what: String, other: &Cell, at_least: f64) -> Bar {
        Bar::paired(what, &self.rates(), &other.rates(), at_least)
    }

    fn p99(&self) -> f64 {
        self.med(|r| r.lat.p99)
    }

    fn jain(&self) -> f64 {
        self.med(|r| r.jain)
    }

    fn tries_per_acq(&self) -> f64 {
        self.med(|r| {
            if r.acquisitions == 0 {
                f64::NAN
            } else {
                r.lock_calls() as f64 / r.acquisitions as f64
            }
        })
    }

    fn line(&self, unit_clients: bool) -> String {
        let who = if unit_clients {
            format!("{:<12} {:>4}", self.proto.name(), self.clients)
        } else {
            format!("{:<12}", self.proto.name())
        };
        format!(
            "{who} {:>11} {:>5.0}% {:>9} {:>9} {:>9} {:>7.4} {:>7.2} {:>6.0}% {:>6.0}% {:>6.0}%",
            rate(self.rate()),
            spread_pct(&self.rates()),
            ms(self.med(|r| r.lat.p50)),
            ms(self.p99()),
            ms(self.med(|r| r.lat.p999)),
            self.jain(),
            self.tries_per_acq(),
            self.med(|r| r.server_cpu),
            self.med(|r| r.generator_cpu),
            self.med(|r| r.others_cpu),
        )
    }

    fn json(&self) -> Value {
        json!({
            "protocol": self.proto.name(), "clients": self.clients,
            "median": {
                "rate_per_s": finite(self.rate()),
                "p50_ms": finite(self.med(|r| r.lat.p50)),
                "p99_ms": finite(self.p99()),
                "p999_ms": finite(self.med(|r| r.lat.p999)),
                "jain": finite(self.jain()),
                "tries_per_acquisition": finite(self.tries_per_acq()),
                "server_cpu_pct": finite(self.med(|r| r.server_cpu)),
                "generator_cpu_pct": finite(self.med(|r| r.generator_cpu)),
                "others_cpu_pct": finite(self.med(|r| r.others_cpu)),
            },
            "runs": self.runs.iter().map(LoadResult::json).collect::<Vec<_>>(),
        })
    }
}

fn header(unit_clients: bool, what: &str) -> String {
    let who = if unit_clients {
        format!("{:<12} {:>4}", "protocol", "cli")
    } else {
        format!("{:<12}", "protocol")
    };
    format!(
        "{who} {:>11} {:>6} {:>9} {:>9} {:>9} {:>7} {:>7} {:>7} {:>7} {:>7}",
        what, "spread", "p50 ms", "p99 ms", "p999 ms", "jain", "try/acq", "server", "gen", "others"
    )
}

fn absorb(section: &mut Section, r: &LoadResult) {
    section.violations.extend(r.violations.iter().cloned());
    section.errors.extend(r.errors.iter().cloned());
}

/// One run of `proto` with `clients` on `keys` keys (`variant` adjusts the
/// spec: read-write, multi-lock), measured again while other processes
/// disturb it.
pub(crate) async fn measure(
    ctx: &Ctx,
    section: &mut Section,
    proto: Proto,
    clients: usize,
    keys: usize,
    variant: &dyn Fn(&mut LoadSpec),
) -> io::Result<LoadResult> {
    let mut attempt = 0;
    loop {
        let mut spec = ctx.spec(proto, clients, keys);
        variant(&mut spec);
        let mut admin = Conn::connect(&ctx.addr).await?;
        admin.ok(&["CONFIG", "RESETSTAT"]).await?;
        let r = if proto == Proto::RedissonClient {
            let (port, pid) = (ctx.port(), ctx.server_pid);
            let (mut r, grants) = ctx.with_redisson(|c| c.run(port, pid, &spec))?;
            r.commandstats = commandstats(&mut admin).await?;
            r.failed_tries = crate::redisson_client::failed_tries(&r, grants);
            r
        } else {
            let mut r = run_load(&ctx.addr, ctx.server_pid, &spec, &ctx.scripts).await?;
            r.commandstats = commandstats(&mut admin).await?;
            r
        };
        // Violations and errors count in every run, kept or not.
        absorb(section, &r);
        ctx.settle(section).await;
        // A FENCE run leaves a token key behind for every key it fenced
        // (kept an hour): tens of thousands per run, which made every later
        // run's commands slower (the plain acquire from 1.0 to 1.5-2.1 us).
        // Every other protocol leaves nothing once its holds are released,
        // so the next run starts on an empty keyspace again.
        if proto == Proto::ModuleFence {
            admin.ok(&["FLUSHALL", "SYNC"]).await?;
        }
        ctx.progress(&format!(
            "{} {} clients={} keys={}: {}/s p99 {} ms (server {:.0}%, gen {:.0}%, others {:.0}%)",
            section.id,
            proto.name(),
            clients,
            keys,
            rate(r.rate),
            ms(r.lat.p99),
            r.server_cpu,
            r.generator_cpu,
            r.others_cpu
        ));
        if let Some(rw) = &r.rw {
            ctx.progress(&format!(
                "  reads {} (p99 {} ms), writes {} (p99 {} ms), readers at once max {}, overlap violations {}",
                rw.reads,
                ms(rw.read_lat.p99),
                rw.writes,
                ms(rw.write_lat.p99),
                rw.max_readers,
                rw.violations
            ));
        }
        if let Some(m) = &r.multi {
            ctx.progress(&format!(
                "  {} order, {} keys per lock: {} acquisitions, {} lock calls, {} gave up, {} waits open at the end (longest {} ms)",
                m.order.name(),
                m.keys_per_lock,
                r.acquisitions,
                r.lock_calls(),
                m.gave_up,
                r.open_waits,
                ms(r.lat.max)
            ));
        }
        if r.others_cpu > INTERFERENCE_PCT && attempt < RETRIES {
            ctx.measure_again(section, r.json());
            attempt += 1;
            continue;
        }
        if r.others_cpu > INTERFERENCE_PCT {
            section.disturbed_kept += 1;
        }
        return Ok(r);
    }
}

/// `reps` rounds of one run per protocol, interleaved so that slow spells of
/// the machine fall on every protocol alike.
async fn measure_interleaved(
    ctx: &Ctx,
    section: &mut Section,
    protos: &[Proto],
    clients: usize,
    keys: usize,
    reps: usize,
) -> io::Result<Vec<Cell>> {
    let mut cells: Vec<Cell> = protos
        .iter()
        .map(|&proto| Cell {
            proto,
            clients,
            runs: Vec::new(),
        })
        .collect();
    for _ in 0..reps {
        for cell in cells.iter_mut() {
            let r = measure(ctx, section, cell.proto, clients, keys, &|_| {}).await?;
            cell.runs.push(r);
        }
    }
    Ok(cells)
}

/// What the `redisson` rows (the real client) ran.
pub(crate) fn redisson_client_note(ctx: &Ctx, calls: &str) -> String {
    format!(
        "redisson: the real client, Redisson {} ({calls}, its defaults otherwise: pub/sub waits, retries), in one JVM pinned to the generator's core (interop/redisson's load driver): Redisson instances of {} client threads, each its own id, connections and subscriptions as a process has, sharing the JVM's Netty event loop; the JVM's first run of a kind warms up for at least {} ms; try/acq from the server's eval/evalsha calls (every grant sends one unlock script); gen = the JVM's CPU",
        crate::redisson_client::REDISSON_VERSION,
        ctx.opts.threads_per_process,
        crate::redisson_client::JIT_WARMUP_MS
    )
}

fn run_note(ctx: &Ctx, reps: usize) -> String {
    format!(
        "each figure: median of {} runs of {:.1} s measured after {:.1} s warm-up, protocols interleaved; spread = (max - min) / median of the runs' rates; ratios in bars = median of the ratios within each repetition; waits still open at the end count with their length so far",
        reps,
        ctx.opts.measure.as_secs_f64(),
        ctx.opts.warmup.as_secs_f64()
    )
}

fn find(cells: &[Cell], proto: Proto, clients: usize) -> Option<&Cell> {
    cells
        .iter()
        .find(|c| c.proto == proto && c.clients == clients)
}

pub async fn s1(ctx: &Ctx) -> io::Result<Section> {
    let reps = ctx.opts.reps(crate::options::REPS_S1);
    let clients = 64;
    let keys = 100_000;
    let protos = ctx.protocols(&[
        Proto::Module,
        Proto::ModuleKeepalive,
        Proto::ModuleFence,
        Proto::Raw,
        Proto::Redisson,
        Proto::Spin(10),
        Proto::Spin(100),
    ]);
    let mut section = Section::new(
        "S1",
        format!(
            "uncontended cycles: {clients} clients, random keys of {keys}, acquire then release"
        ),
    );
    let cells = measure_interleaved(ctx, &mut section, &protos, clients, keys, reps).await?;
    section.line(run_note(ctx, reps));
    section.line(header(false, "cycles/s"));
    for c in &cells {
        section.line(c.line(false));
    }
    let vs = |p| match (
        find(&cells, Proto::Module, clients),
        find(&cells, p, clients),
    ) {
        (Some(m), Some(o)) => m.vs(o),
        _ => f64::NAN,
    };
    for (p, what, want) in [
        (Proto::Raw, "module cycles/s vs raw SET NX PX + DEL", 0.95),
        (Proto::Redisson, "module cycles/s vs redisson-emu", 1.8),
    ] {
        if let (Some(m), Some(o)) = (
            find(&cells, Proto::Module, clients),
            find(&cells, p, clients),
        ) {
            section.bars.push(m.bar_vs(what.into(), o, want));
        }
    }
    // KEEPALIVE binds the hold to the connection on acquire and unbinds it
    // on release: that costs no more than a tenth of a plain cycle.
    if let (Some(k), Some(m)) = (
        find(&cells, Proto::ModuleKeepalive, clients),
        find(&cells, Proto::Module, clients),
    ) {
        section
            .bars
            .push(k.bar_vs("module-keepalive cycles/s vs module".into(), m, 0.9));
    }
    // FENCE makes every acquire write the token key (SET ... PXAT, two
    // keyspace events, replicated): a cost paid for a guarantee, told as
    // information beside the plain cycle, with no bar to hold it to.
    let fence = match (
        find(&cells, Proto::ModuleFence, clients),
        find(&cells, Proto::Module, clients),
    ) {
        (Some(f), Some(m)) => {
            let by_rep = ratios(&f.rates(), &m.rates());
            let reach =
                range(&by_rep).map_or(String::new(), |(lo, hi)| format!(" [{lo:.3}x .. {hi:.3}x]"));
            section.line(format!(
                "module-fence vs module: {:.3}x cycles/s{reach} (median of the ratios within each repetition; information, no bar)",
                f.vs(m)
            ));
            json!({"median_ratio": finite(f.vs(m)), "ratios_by_rep": by_rep})
        }
        _ => Value::Null,
    };
    section.line("server time per call, us (INFO commandstats usec_per_call, median of runs):");
    for c in &cells {
        section.line(format!("  {:<12} {}", c.proto.name(), c.server_time()));
    }
    section.line(format!(
        "module vs spin-10ms: {:.2}x, vs spin-100ms: {:.2}x",
        vs(Proto::Spin(10)),
        vs(Proto::Spin(100))
    ));
    section.json = json!({"clients": clients, "keys": keys,
        "cells": cells.iter().map(Cell::json).collect::<Vec<_>>(),
        "module_fence_vs_module": fence});
    Ok(section)
}

/// S2's data for the chart.
pub struct S2Chart {
    pub counts: Vec<usize>,
    /// (protocol, acquisitions/s per count, p99 ms per count)
    pub series: Vec<(String, Vec<f64>, Vec<f64>)>,
    pub ping: f64,
    pub threads_per_process: usize,
}

pub async fn s2(ctx: &Ctx) -> io::Result<(Section, S2Chart)> {
    let reps = ctx.opts.reps(crate::options::REPS_S2);
    let counts: Vec<usize> = ctx.opts.s2_clients.clone();
    let protos = ctx.protocols(&[
        Proto::Module,
        Proto::RedissonClient,
        Proto::Spin(10),
        Proto::Spin(100),
        Proto::Blpop,
    ]);
    let mut section = Section::new(
        "S2",
        "one hot lock, empty critical section: acquisitions/s, wait (send acquire -> grant), Jain fairness",
    );
    // pings[count index][rep]: measured right before that count's runs.
    let mut pings: Vec<Vec<f64>> = counts.iter().map(|_| Vec::new()).collect();
    let mut cells = Cell::grid(&counts, &protos);
    for _ in 0..reps {
        for (ci, &n) in counts.iter().enumerate() {
            let p = ping_rate(&ctx.addr, ctx.opts.warmup, ctx.opts.measure).await?;
            ctx.progress(&format!("S2 ping: {}/s", rate(p)));
            pings[ci].push(p);
            for cell in cells.iter_mut().filter(|c| c.clients == n) {
                let r = measure(ctx, &mut section, cell.proto, cell.clients, 1, &|_| {}).await?;
                cell.runs.push(r);
            }
        }
    }
    let all_pings: Vec<f64> = pings.iter().flatten().copied().collect();
    let ping = median(&all_pings);
    section.line(run_note(ctx, reps));
    section.line(format!(
        "ping floor: one client's sequential PING, measured before each client count's runs: median {}/s, spread {:.0}% over {} runs",
        rate(ping),
        spread_pct(&all_pings),
        all_pings.len()
    ));
    section.line(redisson_client_note(
        ctx,
        "RLock.lock(30 s lease) / unlock()",
    ));
    section.line(header(true, "acq/s"));
    for c in &cells {
        section.line(c.line(true));
    }
    // Information, not a bar: the module's hand-off against Redis's own.
    let vs_blpop: Vec<(usize, f64, Vec<f64>)> = counts
        .iter()
        .filter_map(|&n| {
            let m = find(&cells, Proto::Module, n)?;
            let b = find(&cells, Proto::Blpop, n)?;
            Some((n, m.vs(b), ratios(&m.rates(), &b.rates())))
        })
        .collect();
    if !vs_blpop.is_empty() {
        section.line(format!(
            "module vs blpop (Redis's own blocked-client hand-off, no module): {}",
            vs_blpop
                .iter()
                .map(|(n, r, _)| format!("{n} cli {r:.2}x"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    for (ci, &n) in counts.iter().enumerate() {
        if let Some(m) = find(&cells, Proto::Module, n) {
            if n >= 4 {
                section.bars.push(Bar::paired(
                    format!("module acq/s at {n} clients vs ping"),
                    &m.rates(),
                    &pings[ci],
                    0.9,
                ));
            }
        }
    }
    for (n, want) in [(16, 1.8), (64, 6.0)] {
        if let (Some(m), Some(r)) = (
            find(&cells, Proto::Module, n),
            find(&cells, Proto::RedissonClient, n),
        ) {
            section.bars.push(m.bar_vs(
                format!("module acq/s at {n} clients vs redisson"),
                r,
                want,
            ));
        }
    }
    if let Some(m) = find(&cells, Proto::Module, 64) {
        let p99s: Vec<f64> = m.runs.iter().map(|r| r.lat.p99).collect();
        section.bars.push(
            Bar::at_most_ms("module p99 wait at 64 clients", m.p99(), 12.0).with_range(&p99s),
        );
    }
    for &n in &counts {
        if let Some(m) = find(&cells, Proto::Module, n) {
            let jains: Vec<f64> = m.runs.iter().map(|r| r.jain).collect();
            section.bars.push(
                Bar::at_least(format!("module Jain index at {n} clients"), m.jain(), 0.99)
                    .with_range(&jains),
            );
        }
    }
    let chart = S2Chart {
        counts: counts.clone(),
        // blpop is a reference figure in the table, not a lock: not drawn.
        series: protos
            .iter()
            .filter(|&&p| p != Proto::Blpop)
            .map(|&p| {
                let of = |f: fn(&Cell) -> f64| {
                    counts
                        .iter()
                        .map(|&n| find(&cells, p, n).map(f).unwrap_or(f64::NAN))
                        .collect::<Vec<f64>>()
                };
                (p.name(), of(Cell::rate), of(Cell::p99))
            })
            .collect(),
        ping,
        threads_per_process: ctx.opts.threads_per_process,
    };
    section.json = json!({
        "ping_per_s": {"median": finite(ping),
            "runs_by_clients": counts.iter().zip(&pings).map(|(n, p)| json!({"clients": n, "runs": p})).collect::<Vec<_>>()},
        "threads_per_process": ctx.opts.threads_per_process,
        "cells": cells.iter().map(Cell::json).collect::<Vec<_>>(),
        "module_vs_blpop": vs_blpop.iter().map(|(n, r, rs)| json!({
            "clients": n, "median_ratio": finite(*r), "ratios_by_rep": rs,
        })).collect::<Vec<_>>(),
    });
    Ok((section, chart))
}

pub async fn s5(ctx: &Ctx) -> io::Result<Section> {
    let reps = ctx.opts.reps(crate::options::REPS_S5);
    let clients = 256;
    let keys = 64;
    let protos = ctx.protocols(&[
        Proto::Module,
        Proto::Redisson,
        Proto::Spin(10),
        Proto::Spin(100),
    ]);
    let mut section = Section::new(
        "S5",
        format!("moderate contention: {keys} keys, {clients} clients, each cycle on a random key"),
    );
    let cells = measure_interleaved(ctx, &mut section, &protos, clients, keys, reps).await?;
    section.line(run_note(ctx, reps));
    section.line(format!(
        "redisson-emu (Redisson's protocol by this generator): processes of {} client threads",
        ctx.opts.threads_per_process
    ));
    section.line(header(false, "acq/s"));
    for c in &cells {
        section.line(c.line(false));
    }
    let m = find(&cells, Proto::Module, clients);
    let r = find(&cells, Proto::Redisson, clients);
    if let (Some(m), Some(r)) = (m, r) {
        section
            .bars
            .push(m.bar_vs("module acq/s vs redisson-emu".into(), r, 10.0));
        section.line(format!(
            "p99 wait: module {} ms, redisson-emu {} ms",
            ms(m.p99()),
            ms(r.p99())
        ));
    }
    section.json = json!({"clients": clients, "keys": keys,
        "cells": cells.iter().map(Cell::json).collect::<Vec<_>>()});
    Ok(section)
}

/// S7's client counts and share of reads.
pub const S7_CLIENTS: [usize; 2] = [16, 64];
pub const S7_READ_FRACTION: f64 = 0.9;

pub async fn s7(ctx: &Ctx) -> io::Result<Section> {
    let reps = ctx.opts.reps(crate::options::REPS_S7);
    let protos = ctx.protocols(&[Proto::Module, Proto::Redisson]);
    let read_pct = S7_READ_FRACTION * 100.0;
    let mut section = Section::new(
        "S7",
        format!(
            "read-heavy read-write lock: one lock, each cycle a read ({read_pct:.0}%) or a write ({:.0}%); critical section: one GET (read) or INCR (write) of the data it guards",
            100.0 - read_pct
        ),
    );
    let mut cells = Cell::grid(&S7_CLIENTS, &protos);
    for _ in 0..reps {
        for cell in cells.iter_mut() {
            let r = measure(ctx, &mut section, cell.proto, cell.clients, 1, &|s| {
                s.read_fraction = Some(S7_READ_FRACTION)
            })
            .await?;
            cell.runs.push(r);
        }
    }
    section.line(run_note(ctx, reps));
    section.line(
        "module: LOCK.RACQUIRE / LOCK.WACQUIRE key owner PX 30000 BLOCK 10000 (waits in the server, FIFO), LOCK.RELEASE",
    );
    section.line(format!(
        "redisson-emu: RReadWriteLock scripts by EVALSHA; processes of {} client threads, one pub/sub connection each on redisson_rwlock:{{lock}}; a busy try waits for a message or the PTTL, then tries again (the last read release publishes 0: wakes one thread per process; a write release publishes 1: wakes all)",
        ctx.opts.threads_per_process
    ));
    section.line(
        "checks: every grant adds the holder to an atomic count of the lock's readers and writers (taken off before the release is sent), and a writer beside anyone or a reader beside a writer is a violation; a reader's GET must see exactly the writes completed so far, a writer's INCR the next number",
    );
    section.line(header(true, "acq/s"));
    for c in &cells {
        section.line(c.line(true));
    }
    section.line(format!(
        "{:<12} {:>4} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>11} {:>10}",
        "by kind",
        "cli",
        "reads/s",
        "writes/s",
        "r p50 ms",
        "r p99 ms",
        "w p50 ms",
        "w p99 ms",
        "readers max",
        "violations"
    ));
    for c in &cells {
        let rw = |f: fn(&RwStats, &LoadResult) -> f64| {
            c.med(|r| r.rw.as_ref().map(|s| f(s, r)).unwrap_or(f64::NAN))
        };
        let violations: u64 = c
            .runs
            .iter()
            .map(|r| r.rw.as_ref().map_or(0, |s| s.violations))
            .sum();
        section.line(format!(
            "{:<12} {:>4} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>5.0} {:>5.1} {:>10}",
            c.proto.name(),
            c.clients,
            rate(rw(|s, r| s.reads as f64 / r.measured_s)),
            rate(rw(|s, r| s.writes as f64 / r.measured_s)),
            ms(rw(|s, _| s.read_lat.p50)),
            ms(rw(|s, _| s.read_lat.p99)),
            ms(rw(|s, _| s.write_lat.p50)),
            ms(rw(|s, _| s.write_lat.p99)),
            rw(|s, _| s.max_readers as f64),
            rw(|s, _| s.mean_readers),
            violations
        ));
    }
    section.line("(readers max = most read holds at once, then the mean at a read grant; violations summed over every run)");
    let vs: Vec<String> = S7_CLIENTS
        .iter()
        .filter_map(|&n| {
            let m = find(&cells, Proto::Module, n)?;
            let r = find(&cells, Proto::Redisson, n)?;
            Some(format!(
                "{n} cli {:.2}x acq/s, p99 wait {} vs {} ms",
                m.vs(r),
                ms(m.p99()),
                ms(r.p99())
            ))
        })
        .collect();
    if !vs.is_empty() {
        section.line(format!("module vs redisson-emu: {}", vs.join("; ")));
    }
    section.json = json!({"clients": S7_CLIENTS, "keys": 1, "read_fraction": S7_READ_FRACTION,
        "threads_per_process": ctx.opts.threads_per_process,
        "cells": cells.iter().map(Cell::json).collect::<Vec<_>>()});
    Ok(section)
}

/// S8's client counts, key pool and keys per multi-lock.
pub const S8_CLIENTS: [usize; 2] = [16, 64];
pub const S8_KEYS: usize = 8;
pub const S8_KEYS_PER_LOCK: usize = 3;

pub async fn s8(ctx: &Ctx) -> io::Result<Section> {
    let reps = ctx.opts.reps(crate::options::REPS_S8);
    let protos = ctx.protocols(&[Proto::Module, Proto::Redisson]);
    let orders = [KeyOrder::Random, KeyOrder::Sorted];
    let redisson_wait = redisson_multi_wait(S8_KEYS_PER_LOCK);
    let mut section = Section::new(
        "S8",
        format!(
            "multi-key locking: {S8_KEYS_PER_LOCK} distinct keys of {S8_KEYS} per cycle, all held at once; critical section: one round trip that INCRs the data of each (pipelined)"
        ),
    );
    let mut grids: Vec<(KeyOrder, Vec<Cell>)> = orders
        .iter()
        .map(|&o| (o, Cell::grid(&S8_CLIENTS, &protos)))
        .collect();
    for _ in 0..reps {
        for (order, cells) in grids.iter_mut() {
            let multi = MultiSpec {
                keys_per_lock: S8_KEYS_PER_LOCK,
                order: *order,
            };
            for cell in cells.iter_mut() {
                let r = measure(ctx, &mut section, cell.proto, cell.clients, S8_KEYS, &|s| {
                    s.multi = Some(multi);
                    if s.proto == Proto::Redisson {
                        s.measure += redisson_wait;
                    }
                })
                .await?;
                cell.runs.push(r);
            }
        }
    }
    section.line(run_note(ctx, reps));
    section.line(format!(
        "redisson-emu's runs are measured {:.1} s longer ({:.1} s): its tryLock wait, so that an attempt that waits it out and gives up falls inside the window",
        redisson_wait.as_secs_f64(),
        (ctx.opts.measure + redisson_wait).as_secs_f64()
    ));
    section.line(format!(
        "keys: each cycle draws {S8_KEYS_PER_LOCK} distinct keys of the pool at random (seeded RNG per client); random order = named in the order drawn, sorted order = named by index (one global order, the careful caller's way to avoid deadlock); all keys share one hash tag",
    ));
    section.line(
        "module: LOCK.MACQUIRE 3 k1 k2 k3 owner PX 30000 BLOCK 10000 (the caller waits in the server as one unit, granted all keys in one step; nil = BLOCK timeout, counted as gave up, sent again), LOCK.MRELEASE 3 k1 k2 k3 owner",
    );
    section.line(format!(
        "redisson-emu: RedissonMultiLock.lock(): tryLock(wait {} ms = {} ms per key), again whenever it returns false; tryLock takes the keys one by one in the caller's order, each by RLock.tryLock for the wait left (acquire script by EVALSHA, lease 30 s = the watchdog's; on a PTTL the process subscribes to redisson_lock__channel:{{key}} and the thread waits for a message or the PTTL, then tries again), holding the keys it has while it waits for the next; when the wait is used up it unlocks them (release scripts sent together) and gives up; the unlock of all keys is sent together too; processes of {} client threads, one pub/sub connection each",
        redisson_wait.as_millis(),
        REDISSON_MULTI_WAIT_PER_KEY.as_millis(),
        ctx.opts.threads_per_process
    ));
    section.line(
        "checks: a holder flag per key, set for every key when a multi-lock is granted and cleared before its release is sent (a grant while another client holds any of its keys is a violation); every INCR must answer the number of cycles completed on that key + 1; every MACQUIRE grant must answer 1 for each key, every release 0 (module) / 1 (redisson-emu)",
    );
    for (order, cells) in &grids {
        section.line(format!("{} order:", order.name()));
        section.line(header(true, "acq/s"));
        for c in cells {
            section.line(c.line(true));
        }
    }
    section.line("(acq/s = multi-locks granted per second; try/acq = lock calls per multi-lock granted: MACQUIRE calls, or Redisson acquire-script calls over all keys, granted or PTTL)");
    section.line(format!(
        "{:<7} {:<12} {:>4} {:>8} {:>10} {:>8} {:>10} {:>11}",
        "order", "protocol", "cli", "acq", "lock calls", "gave up", "open waits", "max wait ms"
    ));
    for (order, cells) in &grids {
        for c in cells {
            let gave_up = c.med(|r| r.multi.as_ref().map_or(f64::NAN, |m| m.gave_up as f64));
            section.line(format!(
                "{:<7} {:<12} {:>4} {:>8.0} {:>10.0} {:>8.0} {:>10.0} {:>11}",
                order.name(),
                c.proto.name(),
                c.clients,
                c.med(|r| r.acquisitions as f64),
                c.med(|r| r.lock_calls() as f64),
                gave_up,
                c.med(|r| r.open_waits as f64),
                ms(c.med(|r| r.lat.max)),
            ));
        }
    }
    section.line(format!(
        "(medians per run: multi-locks granted in the window, lock calls, attempts that used up their wait and started over (redisson-emu: tryLock after {} ms, module: BLOCK timeout), waits still open when the window closed, longest wait)",
        redisson_wait.as_millis()
    ));
    let mut vs_json = Vec::new();
    for (order, cells) in &grids {
        let mut vs: Vec<String> = Vec::new();
        for &n in &S8_CLIENTS {
            let (Some(m), Some(r)) = (
                find(cells, Proto::Module, n),
                find(cells, Proto::Redisson, n),
            ) else {
                continue;
            };
            // Runs where redisson granted nothing have no ratio: said so.
            let none = r.runs.iter().filter(|x| x.acquisitions == 0).count();
            let ratio = if none == r.runs.len() {
                "redisson-emu granted none".to_string()
            } else if none > 0 {
                format!(
                    "{:.2}x acq/s over the runs where redisson-emu granted any ({none} of {} granted none)",
                    m.vs(r),
                    r.runs.len()
                )
            } else {
                format!("{:.2}x acq/s", m.vs(r))
            };
            vs.push(format!(
                "{n} cli {ratio}, p99 wait {} vs {} ms",
                ms(m.p99()),
                ms(r.p99())
            ));
            vs_json.push(json!({"order": order.name(), "clients": n,
                "median_ratio": finite(m.vs(r)), "ratios_by_rep": ratios(&m.rates(), &r.rates()),
                "redisson_runs_granting_none": none}));
        }
        if !vs.is_empty() {
            section.line(format!(
                "module vs redisson-emu, {} order: {}",
                order.name(),
                vs.join("; ")
            ));
        }
    }
    section.json = json!({"clients": S8_CLIENTS, "keys": S8_KEYS,
        "keys_per_lock": S8_KEYS_PER_LOCK,
        "redisson_try_lock_wait_ms": redisson_wait.as_millis() as u64,
        "redisson_measure_s": (ctx.opts.measure + redisson_wait).as_secs_f64(),
        "threads_per_process": ctx.opts.threads_per_process,
        "orders": grids.iter().map(|(o, cells)| json!({
            "order": o.name(),
            "cells": cells.iter().map(Cell::json).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "module_vs_redisson": vs_json});
    Ok(section)
}

/// S12's permits and client counts.
pub const S12_PERMITS: usize = 4;
pub const S12_CLIENTS: [usize; 2] = [16, 64];

pub async fn s12(ctx: &Ctx) -> io::Result<Section> {
    let reps = ctx.opts.reps(crate::options::REPS_S12);
    let protos = ctx.protocols(&[Proto::Module, Proto::RedissonClient, Proto::Blpop]);
    let mut section = Section::new(
        "S12",
        format!(
            "hot semaphore: {S12_PERMITS} permits, each client loops acquire 1 permit -> release (empty critical section): acquisitions/s, wait (send acquire -> grant), Jain fairness"
        ),
    );
    let mut cells = Cell::grid(&S12_CLIENTS, &protos);
    for _ in 0..reps {
        for cell in cells.iter_mut() {
            let r = measure(ctx, &mut section, cell.proto, cell.clients, 1, &|s| {
                s.semaphore = Some(S12_PERMITS);
                s.block_ms = 0;
            })
            .await?;
            cell.runs.push(r);
        }
    }
    section.line(run_note(ctx, reps));
    section.line(format!(
        "module: SEM.INIT key {S12_PERMITS}, then SEM.ACQUIRE key owner PX 30000 BLOCK 0 (must answer 1; waits in the server, FIFO) and SEM.RELEASE key owner (must answer 0)"
    ));
    section.line(redisson_client_note(
        ctx,
        "RPermitExpirableSemaphore.trySetPermits(4) once, then acquire(30 s lease) / release(id)",
    ));
    section.line(format!(
        "blpop (Redis's floor for a pool, no module, no lease, no owner): a list of {S12_PERMITS} tokens, BLPOP key 0 takes one, RPUSH key token gives it back"
    ));
    section.line(format!(
        "checks: every reply; at the end of each run every permit is back (GET key = {S12_PERMITS} and no {{key}}:timeout left; blpop: LLEN = {S12_PERMITS}); a grant seen while {S12_PERMITS} clients hold permits is a violation"
    ));
    section.line(header(true, "acq/s"));
    for c in &cells {
        section.line(c.line(true));
    }
    let mut vs_json = Vec::new();
    let mut vs_blpop = Vec::new();
    let mut vs_redisson = Vec::new();
    for &n in &S12_CLIENTS {
        let Some(m) = find(&cells, Proto::Module, n) else {
            continue;
        };
        let mut j = json!({"clients": n});
        if let Some(b) = find(&cells, Proto::Blpop, n) {
            vs_blpop.push(format!(
                "{n} cli {:.2}x acq/s, p50 {} vs {} ms, p99 {} vs {} ms",
                m.vs(b),
                ms(m.med(|r| r.lat.p50)),
                ms(b.med(|r| r.lat.p50)),
                ms(m.p99()),
                ms(b.p99())
            ));
            j["module_vs_blpop"] = json!({"median_ratio": finite(m.vs(b)), "ratios_by_rep": ratios(&m.rates(), &b.rates())});
        }
        if let Some(r) = find(&cells, Proto::RedissonClient, n) {
            vs_redisson.push(format!(
                "{n} cli {:.2}x acq/s, p99 {} vs {} ms",
                m.vs(r),
                ms(m.p99()),
                ms(r.p99())
            ));
            j["module_vs_redisson"] = json!({"median_ratio": finite(m.vs(r)), "ratios_by_rep": ratios(&m.rates(), &r.rates())});
        }
        vs_json.push(j);
    }
    if !vs_blpop.is_empty() {
        section.line(format!(
            "module vs blpop (information, no bar): {}",
            vs_blpop.join("; ")
        ));
    }
    if !vs_redisson.is_empty() {
        section.line(format!(
            "module vs redisson (information, no bar): {}",
            vs_redisson.join("; ")
        ));
    }
    section.line("server time per call, us (INFO commandstats usec_per_call, median of runs):");
    for c in &cells {
        section.line(format!(
            "  {:<12} {:>4} {}",
            c.proto.name(),
            c.clients,
            c.server_time()
        ));
    }
    section.json = json!({"permits": S12_PERMITS, "clients": S12_CLIENTS, "keys": 1,
        "threads_per_process": ctx.opts.threads_per_process,
        "cells": cells.iter().map(Cell::json).collect::<Vec<_>>(),
        "ratios": vs_json});
    Ok(section)
}
