//! One throughput run measured: the server's stats reset, the load run (by
//! this generator's clients or by the real Redisson client's driver), its
//! violations and errors kept, the server settled, a progress line; and
//! measured again while other processes disturb it. Also the lines that
//! say how the runs were made.

use std::io;

use super::cell::Cell;
use crate::conn::Conn;
use crate::load::{commandstats, run_load, LoadResult, LoadSpec, Proto};
use crate::report::{ms, rate, Section, INTERFERENCE_PCT, RETRIES};
use crate::Ctx;

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
pub(super) async fn measure_interleaved(
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
pub(super) fn redisson_client_note(ctx: &Ctx, calls: &str) -> String {
    format!(
        "redisson: the real client, Redisson {} ({calls}, its defaults otherwise: pub/sub waits, retries), in one JVM pinned to the generator's core (interop/redisson's load driver): Redisson instances of {} client threads, each its own id, connections and subscriptions as a process has, sharing the JVM's Netty event loop; the JVM's first run of a kind warms up for at least {} ms; try/acq from the server's eval/evalsha calls (every grant sends one unlock script); gen = the JVM's CPU",
        crate::redisson_client::REDISSON_VERSION,
        ctx.opts.threads_per_process,
        crate::redisson_client::JIT_WARMUP_MS
    )
}

pub(super) fn run_note(ctx: &Ctx, reps: usize) -> String {
    format!(
        "each figure: median of {} runs of {:.1} s measured after {:.1} s warm-up, protocols interleaved; spread = (max - min) / median of the runs' rates; ratios in bars = median of the ratios within each repetition; waits still open at the end count with their length so far",
        reps,
        ctx.opts.measure.as_secs_f64(),
        ctx.opts.warmup.as_secs_f64()
    )
}
