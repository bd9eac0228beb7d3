//! 2a and 2c: what the check costs where there is no cycle. A hot lock
//! (16 and 64 clients on one key, S2's module protocol) and uncontended
//! cycles (64 clients on random keys of 100,000, as S1), detection on
//! against off, runs interleaved; with `--s15-baseline`, the same on a
//! second server with a module built without the feature, between the two.
//! Also the cost cell's run and figures the delayed check (3) uses.

use std::io;

use serde_json::{json, Value};

use super::detection::set_detection;
use super::on_off::{onoff, order, Pair, Ratio};
use crate::conn::Conn;
use crate::load::{LoadResult, Proto};
use crate::report::{ms, rate, Section};
use crate::stats::{median, spread_pct};
use crate::Ctx;

/// The hot lock's client counts.
const HOT_CLIENTS: [usize; 2] = [16, 64];
/// Uncontended cycles: clients and keys (as S1).
const UNCONTENDED_CLIENTS: usize = 64;
const UNCONTENDED_KEYS: usize = 100_000;

/// A cost cell: its load, and runs with detection on, off, and on the
/// baseline module.
pub(super) struct Cell {
    pub(super) clients: usize,
    pub(super) keys: usize,
    pub(super) pair: Pair<LoadResult>,
    pub(super) baseline: Vec<LoadResult>,
}

/// One run of a cost cell's load on `ctx`'s server.
pub(super) async fn measure(
    ctx: &Ctx,
    section: &mut Section,
    cell: &Cell,
) -> io::Result<LoadResult> {
    crate::throughput::measure(
        ctx,
        section,
        Proto::Module,
        cell.clients,
        cell.keys,
        &|_| {},
    )
    .await
}

/// The server's CPU time per acquisition in a run, µs (its process's
/// user + system time over the measured window, /proc/<pid>/stat: time
/// the server was kept off its core by other processes does not count).
pub(super) fn cpu_per_acq(r: &LoadResult) -> f64 {
    r.server_cpu * 1e4 / r.rate
}

/// µs per call of `command` in a run's commandstats.
pub(super) fn usec(r: &LoadResult, command: &str) -> f64 {
    r.commandstats
        .iter()
        .find(|c| c.0 == command)
        .map_or(f64::NAN, |c| c.2)
}

/// 2a and 2c: every cost cell, detection on and off (and the baseline
/// module between them), `reps` times; the table and the ratios. The runs'
/// JSON.
pub(super) async fn measure_on_off(
    ctx: &Ctx,
    section: &mut Section,
    admin: &mut Conn,
    reps: usize,
) -> io::Result<Vec<Value>> {
    let baseline = match &ctx.opts.s15_baseline {
        Some(module) => {
            let mut opts = ctx.opts.clone();
            opts.module = module.clone();
            Some(Ctx::new(&opts, "S15-baseline", ctx.started).await?)
        }
        None => None,
    };
    let mut cells: Vec<Cell> = HOT_CLIENTS
        .iter()
        .map(|&n| (n, 1))
        .chain(std::iter::once((UNCONTENDED_CLIENTS, UNCONTENDED_KEYS)))
        .map(|(clients, keys)| Cell {
            clients,
            keys,
            pair: Pair::new(),
            baseline: Vec::new(),
        })
        .collect();
    for rep in 0..reps {
        for cell in cells.iter_mut() {
            let [first, second] = order(rep);
            set_detection(admin, first).await?;
            ctx.progress(&format!("S15 detection {}:", onoff(first)));
            let r = measure(ctx, section, cell).await?;
            cell.pair.push(first, r);
            if let Some(b) = &baseline {
                ctx.progress("S15 baseline module (no deadlock detection):");
                let r = measure(b, section, cell).await?;
                cell.baseline.push(r);
            }
            set_detection(admin, second).await?;
            ctx.progress(&format!("S15 detection {}:", onoff(second)));
            let r = measure(ctx, section, cell).await?;
            cell.pair.push(second, r);
        }
    }
    drop(baseline);
    section.line(format!(
        "2. cost where there is no cycle, detection on vs off; each figure: median of {reps} runs of {:.1} s after {:.1} s warm-up, on and off interleaved (order alternating{}); ratio = median of the ratios within each repetition [lowest .. highest]: \"within noise\" when 1.0 lies in that range",
        ctx.opts.measure.as_secs_f64(),
        ctx.opts.warmup.as_secs_f64(),
        match &ctx.opts.s15_baseline {
            Some(m) => format!(
                "; before = the module without deadlock detection ({}) on a second server started the same way, run between the two",
                m.display()
            ),
            None => String::new(),
        }
    ));
    section.line(format!(
        "   hot lock: one key, each client loops LOCK.ACQUIRE key owner PX 30000 BLOCK 10000 -> LOCK.RELEASE (S2's module protocol; every acquire but the holder's waits, so the check runs on nearly every acquire); uncontended: {UNCONTENDED_CLIENTS} clients on random keys of {UNCONTENDED_KEYS} (S1's; waits are rare, the check almost never runs); acquire us, release us = server time per call (INFO commandstats usec_per_call: a mean, so a command held up by the machine weighs in); server us/acq = the server process's CPU time per acquisition (/proc/<pid>/stat over the window: time kept off its core does not count)"
    ));
    section.line(format!(
        "   {:<12} {:>4} {:>9} {:>11} {:>7} {:>9} {:>9} {:>11} {:>11} {:>11} {:>7}",
        "load",
        "cli",
        "detection",
        "acq/s",
        "spread",
        "p50 ms",
        "p99 ms",
        "acquire us",
        "release us",
        "server us/acq",
        "server"
    ));
    let mut cost_json = Vec::new();
    for cell in &cells {
        let what = if cell.keys == 1 {
            "hot lock"
        } else {
            "uncontended"
        };
        let settings: [(&str, &[LoadResult]); 3] = [
            ("on", &cell.pair.on),
            ("off", &cell.pair.off),
            ("before", &cell.baseline),
        ];
        for (name, runs) in settings {
            if runs.is_empty() {
                continue;
            }
            let v = |f: fn(&LoadResult) -> f64| runs.iter().map(f).collect::<Vec<f64>>();
            let rates = v(|r| r.rate);
            section.line(format!(
                "   {:<12} {:>4} {:>9} {:>11} {:>6.0}% {:>9} {:>9} {:>11.2} {:>11.2} {:>11.2} {:>6.0}%",
                what,
                cell.clients,
                name,
                rate(median(&rates)),
                spread_pct(&rates),
                ms(median(&v(|r| r.lat.p50))),
                ms(median(&v(|r| r.lat.p99))),
                median(&v(|r| usec(r, "lock.acquire"))),
                median(&v(|r| usec(r, "lock.release"))),
                median(&v(cpu_per_acq)),
                median(&v(|r| r.server_cpu)),
            ));
        }
        let ratios_vs = |other: &[LoadResult]| {
            let of = |f: fn(&LoadResult) -> f64| {
                Ratio::of(
                    &cell.pair.on.iter().map(f).collect::<Vec<_>>(),
                    &other.iter().map(f).collect::<Vec<_>>(),
                )
            };
            [
                ("acq/s", of(|r| r.rate)),
                ("acquire us", of(|r| usec(r, "lock.acquire"))),
                ("release us", of(|r| usec(r, "lock.release"))),
                ("server us/acq", of(cpu_per_acq)),
            ]
        };
        let mut j = json!({
            "load": what, "clients": cell.clients, "keys": cell.keys,
            "on": cell.pair.on.iter().map(LoadResult::json).collect::<Vec<_>>(),
            "off": cell.pair.off.iter().map(LoadResult::json).collect::<Vec<_>>(),
        });
        let mut compare = vec![("off", ratios_vs(&cell.pair.off))];
        if !cell.baseline.is_empty() {
            compare.push(("before", ratios_vs(&cell.baseline)));
            j["before"] = json!(cell
                .baseline
                .iter()
                .map(LoadResult::json)
                .collect::<Vec<_>>());
        }
        for (other, rs) in compare {
            section.line(format!(
                "   {what} {} cli, on / {other}: {}",
                cell.clients,
                rs.iter()
                    .map(|(n, r)| format!("{n} {}", r.text()))
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
            j[format!("on_over_{other}")] = json!(rs
                .iter()
                .map(|(n, r)| (n.to_string(), r.json()))
                .collect::<serde_json::Map<_, _>>());
        }
        cost_json.push(j);
    }
    Ok(cost_json)
}
