//! The runs of one (protocol, clients) cell: their medians as a table row
//! (rate, spread, waits, Jain, tries per acquisition, CPU) and as JSON,
//! ratios against another cell repetition by repetition, and the server's
//! time per command.

use serde_json::{json, Value};

use crate::load::{LoadResult, Proto};
use crate::report::{finite, ms, rate, Bar};
use crate::stats::{median, paired_ratio, spread_pct};

/// Runs of one (protocol, clients) cell.
pub(super) struct Cell {
    pub(super) proto: Proto,
    pub(super) clients: usize,
    pub(super) runs: Vec<LoadResult>,
}

impl Cell {
    /// An empty cell per client count and protocol, counts outermost.
    pub(super) fn grid(counts: &[usize], protos: &[Proto]) -> Vec<Cell> {
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
    pub(super) fn server_time(&self) -> String {
        let runs = self.runs.iter().map(|r| r.commandstats.as_slice());
        crate::stats::server_time(runs, 10, &["config", "info"])
    }

    pub(super) fn med(&self, f: impl Fn(&LoadResult) -> f64) -> f64 {
        let v: Vec<f64> = self.runs.iter().map(f).collect();
        median(&v)
    }

    pub(super) fn rate(&self) -> f64 {
        self.med(|r| r.rate)
    }

    pub(super) fn rates(&self) -> Vec<f64> {
        self.runs.iter().map(|r| r.rate).collect()
    }

    /// Median of this cell's rate / `other`'s, repetition by repetition.
    pub(super) fn vs(&self, other: &Cell) -> f64 {
        paired_ratio(&self.rates(), &other.rates())
    }

    pub(super) fn bar_vs(&self, what: String, other: &Cell, at_least: f64) -> Bar {
        Bar::paired(what, &self.rates(), &other.rates(), at_least)
    }

    pub(super) fn p99(&self) -> f64 {
        self.med(|r| r.lat.p99)
    }

    pub(super) fn jain(&self) -> f64 {
        self.med(|r| r.jain)
    }

    pub(super) fn tries_per_acq(&self) -> f64 {
        self.med(|r| {
            if r.acquisitions == 0 {
                f64::NAN
            } else {
                r.lock_calls() as f64 / r.acquisitions as f64
            }
        })
    }

    pub(super) fn line(&self, unit_clients: bool) -> String {
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

    pub(super) fn json(&self) -> Value {
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

pub(super) fn header(unit_clients: bool, what: &str) -> String {
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

pub(super) fn find(cells: &[Cell], proto: Proto, clients: usize) -> Option<&Cell> {
    cells
        .iter()
        .find(|c| c.proto == proto && c.clients == clients)
}
