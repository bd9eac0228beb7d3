//! S7 (read-write): one read-write lock, 16 and 64 clients, 90% reads; the
//! critical section reads (`GET`) or writes (`INCR`) the data it guards;
//! the module against redisson-emu, with the figures by kind (reads,
//! writes, their waits, readers at once).

use std::io;

use serde_json::json;

use super::cell::{find, header, Cell};
use super::measure::{measure, run_note};
use crate::load::{LoadResult, Proto, RwStats};
use crate::report::{ms, rate, Section};
use crate::Ctx;

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
