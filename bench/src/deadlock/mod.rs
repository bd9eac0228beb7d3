//! S15: deadlock detection. What the check buys and what it costs.
//!
//! Cycles: groups of 2 (pairs) and 3 (triples) owners; each takes its own
//! lock, then all ask with `BLOCK` for the next one's lock (the last for
//! the first's). With detection on (`lock.deadlock-check-ms 0`) exactly
//! one (the wait that closes the cycle) is answered `DEADLOCK` at once; it
//! releases its lock, the others get theirs one after another and release.
//! Off (-1), the cycle is broken only by the waits' `BLOCK` timeout (50 ms
//! here). With a delay (`lock.deadlock-check-ms 100`), one of them is
//! answered `DEADLOCK` once its wait has lasted that long. A group repeats
//! this as fast as it can; cycles resolved per second and the time until
//! the cycle was broken.
//!
//! Cost where there is no cycle, detection on against off, runs
//! interleaved: a hot lock (16 and 64 clients on one key, the module
//! protocol of S2), uncontended cycles (64 clients on random keys of
//! 100,000, as S1), and waiters joining the queue of a lock 10,000 others
//! already wait for (server time per join). `--s15-baseline` adds the
//! first two on a second server with a module built without the feature:
//! "off" still keeps the registry's owner index, "before" has none.
//!
//! Offers: [`s15`]. The parts: `detection` (the server's setting and
//! counters), `on_off` (runs paired on against off, their ratio),
//! `cycles` (1: the groups' rounds), `cost` (2a, 2c: the hot lock and
//! uncontended cycles, on against off and the baseline module), `joins`
//! (2b: joining a queue of 10,000) and `delayed` (3: the check after a
//! delay).

mod cost;
mod cycles;
mod delayed;
mod detection;
mod joins;
mod on_off;

use std::io;

use serde_json::json;

use self::cycles::{OFF_BLOCK_MS, ON_BLOCK_MS};
use self::detection::set_detection;
use crate::conn::Conn;
use crate::report::Section;
use crate::Ctx;

pub async fn s15(ctx: &Ctx) -> io::Result<Section> {
    let reps = ctx.opts.reps(crate::options::REPS_S15);
    let cycle_reps = ctx.opts.reps(crate::options::REPS_S15_CYCLES);
    let mut section = Section::new(
        "S15",
        "deadlock detection: cycles broken by the check (on) or by BLOCK timeouts (off); the check's cost where there is no cycle",
    );
    let mut admin = Conn::connect(&ctx.addr).await?;
    let result = run_all(ctx, &mut section, &mut admin, reps, cycle_reps).await;
    // Whatever happened, the server is left as configured by default.
    set_detection(&mut admin, true).await?;
    result?;
    Ok(section)
}

async fn run_all(
    ctx: &Ctx,
    section: &mut Section,
    admin: &mut Conn,
    reps: usize,
    cycle_reps: usize,
) -> io::Result<()> {
    // 1. Cycles. Shorter runs than the cost cells: the rates differ by
    // orders of magnitude.
    let cw = ctx.opts.warmup / 2;
    let cm = ctx.opts.measure / 2;
    let cycle_json = cycles::measure_on_off(ctx, section, admin, cycle_reps, (cw, cm)).await?;

    // 2a and 2c. The hot lock and uncontended cycles, on against off
    // (and against the module without the feature, on its own server,
    // between the two).
    let cost_json = cost::measure_on_off(ctx, section, admin, reps).await?;

    // 2b. Joining a queue of 10,000.
    let joins = joins::parked_joins(ctx, section, admin, reps).await?;

    // 3. The check after a delay instead of at each wait.
    let delayed = delayed::delayed_check(ctx, section, admin, reps, cycle_reps, (cw, cm)).await?;
    set_detection(admin, true).await?;
    section.json = json!({
        "off_block_ms": OFF_BLOCK_MS, "on_block_ms": ON_BLOCK_MS,
        "cycles": cycle_json, "cost": cost_json, "joins": joins, "delayed": delayed,
    });
    Ok(())
}
