//! S8 (multi-lock): 3 distinct keys of 8 held at once, 16 and 64 clients,
//! named in the random order drawn or sorted; the module's `LOCK.MACQUIRE`
//! against Redisson's `RedissonMultiLock` (redisson-emu), with the lock
//! calls, the attempts that gave up and the waits still open.

use std::io;

use serde_json::json;

use super::cell::{find, header, Cell};
use super::measure::{measure, run_note};
use crate::load::{redisson_multi_wait, KeyOrder, MultiSpec, Proto, REDISSON_MULTI_WAIT_PER_KEY};
use crate::report::{finite, ms, Section};
use crate::stats::ratios;
use crate::Ctx;

/// S8's client counts, key pool and keys per multi-lock.
pub const S8_CLIENTS: [usize; 2] = [16, 64];
pub const S8_KEYS: usize = 8;
pub const S8_KEYS_PER_LOCK: usize = 3;

pub async fn s8(ctx: &Ctx) -> io::Result<Section> {
    let reps = ctx.opts.reps(crate::options::REPS_S8);
    let protos = ctx.protocols(&[Proto::Module, Proto::Redisson]);
    let orders = [KeyOrder::Random, KeyOrder::Sorted];
    let redisson_wait = redisson_multi_wait(S8_KEYS_PER_LOCK);
    let mut section = Section::new(
        "S8",
        format!(
            "multi-key locking: {S8_KEYS_PER_LOCK} distinct keys of {S8_KEYS} per cycle, all held at once; critical section: one round trip that INCRs the data of each (pipelined)"
        ),
    );
    let mut grids: Vec<(KeyOrder, Vec<Cell>)> = orders
        .iter()
        .map(|&o| (o, Cell::grid(&S8_CLIENTS, &protos)))
        .collect();
    for _ in 0..reps {
        for (order, cells) in grids.iter_mut() {
            let multi = MultiSpec {
                keys_per_lock: S8_KEYS_PER_LOCK,
                order: *order,
            };
            for cell in cells.iter_mut() {
                let r = measure(ctx, &mut section, cell.proto, cell.clients, S8_KEYS, &|s| {
                    s.multi = Some(multi);
                    if s.proto == Proto::Redisson {
                        s.measure += redisson_wait;
                    }
                })
                .await?;
                cell.runs.push(r);
            }
        }
    }
    section.line(run_note(ctx, reps));
    section.line(format!(
        "redisson-emu's runs are measured {:.1} s longer ({:.1} s): its tryLock wait, so that an attempt that waits it out and gives up falls inside the window",
        redisson_wait.as_secs_f64(),
        (ctx.opts.measure + redisson_wait).as_secs_f64()
    ));
    section.line(format!(
        "keys: each cycle draws {S8_KEYS_PER_LOCK} distinct keys of the pool at random (seeded RNG per client); random order = named in the order drawn, sorted order = named by index (one global order, the careful caller's way to avoid deadlock); all keys share one hash tag",
    ));
    section.line(
        "module: LOCK.MACQUIRE 3 k1 k2 k3 owner PX 30000 BLOCK 10000 (the caller waits in the server as one unit, granted all keys in one step; nil = BLOCK timeout, counted as gave up, sent again), LOCK.MRELEASE 3 k1 k2 k3 owner",
    );
    section.line(format!(
        "redisson-emu: RedissonMultiLock.lock(): tryLock(wait {} ms = {} ms per key), again whenever it returns false; tryLock takes the keys one by one in the caller's order, each by RLock.tryLock for the wait left (acquire script by EVALSHA, lease 30 s = the watchdog's; on a PTTL the process subscribes to redisson_lock__channel:{{key}} and the thread waits for a message or the PTTL, then tries again), holding the keys it has while it waits for the next; when the wait is used up it unlocks them (release scripts sent together) and gives up; the unlock of all keys is sent together too; processes of {} client threads, one pub/sub connection each",
        redisson_wait.as_millis(),
        REDISSON_MULTI_WAIT_PER_KEY.as_millis(),
        ctx.opts.threads_per_process
    ));
    section.line(
        "checks: a holder flag per key, set for every key when a multi-lock is granted and cleared before its release is sent (a grant while another client holds any of its keys is a violation); every INCR must answer the number of cycles completed on that key + 1; every MACQUIRE grant must answer 1 for each key, every release 0 (module) / 1 (redisson-emu)",
    );
    for (order, cells) in &grids {
        section.line(format!("{} order:", order.name()));
        section.line(header(true, "acq/s"));
        for c in cells {
            section.line(c.line(true));
        }
    }
    section.line("(acq/s = multi-locks granted per second; try/acq = lock calls per multi-lock granted: MACQUIRE calls, or Redisson acquire-script calls over all keys, granted or PTTL)");
    section.line(format!(
        "{:<7} {:<12} {:>4} {:>8} {:>10} {:>8} {:>10} {:>11}",
        "order", "protocol", "cli", "acq", "lock calls", "gave up", "open waits", "max wait ms"
    ));
    for (order, cells) in &grids {
        for c in cells {
            let gave_up = c.med(|r| r.multi.as_ref().map_or(f64::NAN, |m| m.gave_up as f64));
            section.line(format!(
                "{:<7} {:<12} {:>4} {:>8.0} {:>10.0} {:>8.0} {:>10.0} {:>11}",
                order.name(),
                c.proto.name(),
                c.clients,
                c.med(|r| r.acquisitions as f64),
                c.med(|r| r.lock_calls() as f64),
                gave_up,
                c.med(|r| r.open_waits as f64),
                ms(c.med(|r| r.lat.max)),
            ));
        }
    }
    section.line(format!(
        "(medians per run: multi-locks granted in the window, lock calls, attempts that used up their wait and started over (redisson-emu: tryLock after {} ms, module: BLOCK timeout), waits still open when the window closed, longest wait)",
        redisson_wait.as_millis()
    ));
    let mut vs_json = Vec::new();
    for (order, cells) in &grids {
        let mut vs: Vec<String> = Vec::new();
        for &n in &S8_CLIENTS {
            let (Some(m), Some(r)) = (
                find(cells, Proto::Module, n),
                find(cells, Proto::Redisson, n),
            ) else {
                continue;
            };
            // Runs where redisson granted nothing have no ratio: said so.
            let none = r.runs.iter().filter(|x| x.acquisitions == 0).count();
            let ratio = if none == r.runs.len() {
                "redisson-emu granted none".to_string()
            } else if none > 0 {
                format!(
                    "{:.2}x acq/s over the runs where redisson-emu granted any ({none} of {} granted none)",
                    m.vs(r),
                    r.runs.len()
                )
            } else {
                format!("{:.2}x acq/s", m.vs(r))
            };
            vs.push(format!(
                "{n} cli {ratio}, p99 wait {} vs {} ms",
                ms(m.p99()),
                ms(r.p99())
            ));
            vs_json.push(json!({"order": order.name(), "clients": n,
                "median_ratio": finite(m.vs(r)), "ratios_by_rep": ratios(&m.rates(), &r.rates()),
                "redisson_runs_granting_none": none}));
        }
        if !vs.is_empty() {
            section.line(format!(
                "module vs redisson-emu, {} order: {}",
                order.name(),
                vs.join("; ")
            ));
        }
    }
    section.json = json!({"clients": S8_CLIENTS, "keys": S8_KEYS,
        "keys_per_lock": S8_KEYS_PER_LOCK,
        "redisson_try_lock_wait_ms": redisson_wait.as_millis() as u64,
        "redisson_measure_s": (ctx.opts.measure + redisson_wait).as_secs_f64(),
        "threads_per_process": ctx.opts.threads_per_process,
        "orders": grids.iter().map(|(o, cells)| json!({
            "order": o.name(),
            "cells": cells.iter().map(Cell::json).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "module_vs_redisson": vs_json});
    Ok(section)
}
