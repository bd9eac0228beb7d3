//! S17's report: each cell's runs ([`CellRuns`]) as table rows (the cell,
//! then each kind: grants/s, share, waits, Jain, scripts per grant, wakes)
//! and JSON; after the runs, the section's lines, the ratios (the module
//! loaded against not, mixed against all-module), the server's time per
//! command, the bar on the mixed cell's shares, and its JSON.

use serde_json::{json, Value};

use super::cells::{CellSpec, Kind, CLIENTS};
use super::clients::{LEASE_MS, WAIT_MS};
use super::run::{KindRun, Run, DRAIN};
use crate::report::{finite, ms, rate, Bar, Section};
use crate::stats::{self, median, spread_pct};
use crate::Opts;

pub(super) struct CellRuns {
    pub(super) spec: CellSpec,
    pub(super) runs: Vec<Run>,
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

    pub(super) fn rates(&self) -> Vec<f64> {
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

/// The section after the runs: how they were made, the table of cells and
/// kinds, the ratios, the server's time per command, the bar, the JSON.
pub(super) fn write(section: &mut Section, opts: &Opts, reps: usize, cells: &[CellRuns]) {
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
    for c in cells {
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
    for c in cells {
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
}
