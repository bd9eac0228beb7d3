//! S16's report after the runs: the table (each cell on each system: acq/s
//! or hand-overs, the wait's p50/p99, server CPU, spread), the ratios of
//! module-always to each peer, the section's JSON and the chart of the hot
//! lock.

use serde_json::{json, Value};

use super::cells::{Kind, CANDIDATES, HOT_CLIENTS, READ_FRACTION};
use super::runs::LEAD_FOR;
use super::servers::Target;
use super::system::System;
use lock_bench::chart::PeersChart;
use lock_bench::report::{self, Section};
use lock_bench::stats::{self, Lat};

/// The runs of one cell on one system over the repetitions.
#[derive(Default)]
pub(super) struct Cellrec {
    pub(super) rates: Vec<f64>,
    pub(super) p50: Vec<f64>,
    pub(super) p99: Vec<f64>,
    pub(super) server_cpu: Vec<f64>,
    pub(super) samples_us: Vec<u64>,
    pub(super) runs: Vec<Value>,
}

/// The section after the runs: the table, the ratios, the JSON; the
/// chart's data when any system ran.
pub(super) fn write(
    section: &mut Section,
    targets: &[Target],
    kinds: &[Kind],
    cells: &[Vec<Cellrec>],
    (reps, handovers): (usize, usize),
    skipped: &[Value],
) -> Option<PeersChart> {
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
    chart
}
