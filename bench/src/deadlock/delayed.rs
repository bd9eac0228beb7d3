//! 3: the check after a delay (`lock.deadlock-check-ms 100`, PostgreSQL's
//! way) instead of at each wait: cycles of 1 and 16 pairs broken by the
//! delayed check, and the hot lock of 64 clients with the delay against the
//! check at each wait, interleaved.

use std::io;
use std::time::Duration;

use serde_json::{json, Value};

use super::cost::{cpu_per_acq, measure, usec, Cell};
use super::cycles::{cycle_run, CycleRun, ON_BLOCK_MS, SHAPES};
use super::detection::set_check_ms;
use super::on_off::{order, Pair, Ratio};
use crate::conn::Conn;
use crate::load::LoadResult;
use crate::report::{finite, ms, rate, Section};
use crate::stats::{median, spread_pct};
use crate::Ctx;

/// The delay of the delayed check measured beside the check at each wait.
const DELAY_MS: i64 = 100;

/// 3: `lock.deadlock-check-ms DELAY_MS` (PostgreSQL's way): cycles of 1
/// and 16 pairs broken by a delayed check, and the hot lock of 64 clients
/// with the delay against the check at each wait, interleaved.
pub(super) async fn delayed_check(
    ctx: &Ctx,
    section: &mut Section,
    admin: &mut Conn,
    reps: usize,
    cycle_reps: usize,
    (cw, cm): (Duration, Duration),
) -> io::Result<Value> {
    set_check_ms(admin, DELAY_MS).await?;
    let mut cycle_lines = Vec::new();
    let mut cycle_json = Vec::new();
    for shape in [SHAPES[0], SHAPES[2]] {
        let mut runs = Vec::new();
        for rep in 0..cycle_reps {
            let run = 1000 + rep;
            runs.push(cycle_run(ctx, section, admin, shape, DELAY_MS, run, (cw, cm)).await?);
        }
        let rates: Vec<f64> = runs.iter().map(|r| r.rate).collect();
        let p50 = median(&runs.iter().map(|r| r.broken.p50).collect::<Vec<_>>());
        let p99 = median(&runs.iter().map(|r| r.broken.p99).collect::<Vec<_>>());
        cycle_lines.push(format!(
            "   {:<8} {:>6} {:>11} {:>6.0}% {:>7} ms {:>7} ms",
            shape.name(),
            shape.groups,
            rate(median(&rates)),
            spread_pct(&rates),
            ms(p50),
            ms(p99),
        ));
        cycle_json.push(json!({
            "size": shape.size, "groups": shape.groups, "check_ms": DELAY_MS,
            "median_cycles_per_s": finite(median(&rates)),
            "median_broken_p50_ms": finite(p50), "median_broken_p99_ms": finite(p99),
            "runs": runs.iter().map(CycleRun::json).collect::<Vec<_>>(),
        }));
    }
    // The hot lock: delayed as "on", the check at each wait as "off".
    let mut cell = Cell {
        clients: 64,
        keys: 1,
        pair: Pair::new(),
        baseline: Vec::new(),
    };
    for rep in 0..reps {
        for delayed in order(rep) {
            set_check_ms(admin, if delayed { DELAY_MS } else { 0 }).await?;
            ctx.progress(&format!(
                "S15 lock.deadlock-check-ms {}:",
                if delayed { DELAY_MS } else { 0 }
            ));
            let r = measure(ctx, section, &cell).await?;
            cell.pair.push(delayed, r);
        }
    }
    let of = |f: fn(&LoadResult) -> f64| {
        Ratio::of(
            &cell.pair.on.iter().map(f).collect::<Vec<_>>(),
            &cell.pair.off.iter().map(f).collect::<Vec<_>>(),
        )
    };
    let ratios = [
        ("acq/s", of(|r| r.rate)),
        ("acquire us", of(|r| usec(r, "lock.acquire"))),
        ("server us/acq", of(cpu_per_acq)),
    ];
    section.line(format!(
        "3. the check after a delay (lock.deadlock-check-ms {DELAY_MS}: a caller is queued at once, its wait checked once it has lasted {DELAY_MS} ms) instead of at each wait; cycles as in 1 (BLOCK {ON_BLOCK_MS}: exactly one DEADLOCK per round), {cycle_reps} runs each:"
    ));
    section.line(format!(
        "   {:<8} {:>6} {:>11} {:>7} {:>10} {:>10}",
        "groups", "x", "cycles/s", "spread", "broken p50", "broken p99"
    ));
    for line in cycle_lines {
        section.line(line);
    }
    section.line(format!(
        "   hot lock 64 cli, delayed / at each wait ({reps} runs each, interleaved): {}",
        ratios
            .iter()
            .map(|(n, r)| format!("{n} {}", r.text()))
            .collect::<Vec<_>>()
            .join("; ")
    ));
    Ok(json!({
        "check_ms": DELAY_MS,
        "cycles": cycle_json,
        "hot_lock_64": {
            "delayed": cell.pair.on.iter().map(LoadResult::json).collect::<Vec<_>>(),
            "at_each_wait": cell.pair.off.iter().map(LoadResult::json).collect::<Vec<_>>(),
            "delayed_over_at_each_wait": ratios
                .iter()
                .map(|(n, r)| (n.to_string(), r.json()))
                .collect::<serde_json::Map<_, _>>(),
        },
    }))
}
