//! S12 (semaphore): a hot semaphore of 4 permits, 16 and 64 clients; the
//! module's `SEM.*` against the real Redisson client's
//! `RPermitExpirableSemaphore` and a list of 4 tokens (BLPOP, Redis's
//! floor), every permit checked back after each run.

use std::io;

use serde_json::json;

use super::cell::{find, header, Cell};
use super::measure::{measure, redisson_client_note, run_note};
use crate::load::Proto;
use crate::report::{finite, ms, Section};
use crate::stats::ratios;
use crate::Ctx;

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
