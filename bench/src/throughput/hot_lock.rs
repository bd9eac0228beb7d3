//! S2 (hot-lock): one key, 1 to 256 clients, empty critical section,
//! against the ping floor measured before each client count; the module,
//! the real Redisson client, spin locks, and two references: Redis's own
//! BLPOP hand-off and the module API's (module-floor, libfloor.so); the
//! bars and the chart's data ([`S2Chart`]).

use std::io;

use serde_json::json;

use super::cell::{find, header, Cell};
use super::measure::{measure, redisson_client_note, run_note};
use crate::load::{ping_rate, Proto};
use crate::report::{finite, rate, Bar, Section};
use crate::stats::{median, ratios, spread_pct};
use crate::Ctx;

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
    let mut all = vec![
        Proto::Module,
        Proto::RedissonClient,
        Proto::Spin(10),
        Proto::Spin(100),
        Proto::Blpop,
    ];
    // The server loaded libfloor.so only when it was there.
    if ctx.floor {
        all.push(Proto::Floor);
    }
    let protos = ctx.protocols(&all);
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
    let floor_path = ctx.opts.floor_module.display().to_string();
    if protos.contains(&Proto::Floor) {
        section.line(format!(
            "module-floor (a reference, not a lock): libfloor.so ({floor_path}, bench/floor) loaded next to liblock.so: FLOOR.ACQUIRE key 10000 / FLOOR.RELEASE key, a token per key in module memory handed from one blocked client to the next by RM_BlockClient / RM_UnblockClient: block, unblock, nothing else (no keyspace writes, no lease, no owner)"
        ));
    } else if !ctx.floor && !ctx.protocols(&[Proto::Floor]).is_empty() {
        section.line(format!(
            "module-floor: left out, {floor_path} not found (cargo build --release -p lock-bench-floor, or --floor-module PATH)"
        ));
    }
    section.line(header(true, "acq/s"));
    for c in &cells {
        section.line(c.line(true));
    }
    // Information, not bars: the module's hand-off against Redis's own and
    // the module API's, and those two against each other.
    let vs = |a: Proto, b: Proto| -> Vec<(usize, f64, Vec<f64>)> {
        counts
            .iter()
            .filter_map(|&n| {
                let x = find(&cells, a, n)?;
                let y = find(&cells, b, n)?;
                Some((n, x.vs(y), ratios(&x.rates(), &y.rates())))
            })
            .collect()
    };
    let vs_blpop = vs(Proto::Module, Proto::Blpop);
    let vs_floor = vs(Proto::Module, Proto::Floor);
    let floor_vs_blpop = vs(Proto::Floor, Proto::Blpop);
    for (what, v) in [
        (
            "module vs blpop (Redis's own blocked-client hand-off, no module)",
            &vs_blpop,
        ),
        (
            "module vs module-floor (the module API's own hand-off: block, unblock, nothing else)",
            &vs_floor,
        ),
        (
            "module-floor vs blpop (the module API's hand-off against Redis's own)",
            &floor_vs_blpop,
        ),
    ] {
        if !v.is_empty() {
            section.line(format!(
                "{what}: {}",
                v.iter()
                    .map(|(n, r, _)| format!("{n} cli {r:.2}x"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
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
        // blpop and module-floor are reference figures in the table, not
        // locks: not drawn.
        series: protos
            .iter()
            .filter(|&&p| p != Proto::Blpop && p != Proto::Floor)
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
        "module_vs_blpop": ratio_json(&vs_blpop),
        "module_vs_floor": ratio_json(&vs_floor),
        "floor_vs_blpop": ratio_json(&floor_vs_blpop),
        "floor_module": ctx.floor.then_some(floor_path),
    });
    Ok((section, chart))
}

/// Per client count: the median of the ratios within each repetition, and
/// those ratios.
fn ratio_json(v: &[(usize, f64, Vec<f64>)]) -> serde_json::Value {
    json!(v
        .iter()
        .map(|(n, r, rs)| json!({
            "clients": n, "median_ratio": finite(*r), "ratios_by_rep": rs,
        }))
        .collect::<Vec<_>>())
}
