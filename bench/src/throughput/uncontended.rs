//! S1 (uncontended): 64 clients on random keys of 100,000, each cycle an
//! acquire then a release; every protocol, with the bars against raw
//! `SET NX` + `DEL`, redisson-emu and KEEPALIVE's cost, FENCE's as
//! information.

use std::io;

use serde_json::{json, Value};

use super::cell::{find, header, Cell};
use super::measure::{measure_interleaved, run_note};
use crate::load::Proto;
use crate::report::{finite, Section};
use crate::stats::{range, ratios};
use crate::Ctx;

pub async fn s1(ctx: &Ctx) -> io::Result<Section> {
    let reps = ctx.opts.reps(crate::options::REPS_S1);
    let clients = 64;
    let keys = 100_000;
    let protos = ctx.protocols(&[
        Proto::Module,
        Proto::ModuleKeepalive,
        Proto::ModuleFence,
        Proto::Raw,
        Proto::Redisson,
        Proto::Spin(10),
        Proto::Spin(100),
    ]);
    let mut section = Section::new(
        "S1",
        format!(
            "uncontended cycles: {clients} clients, random keys of {keys}, acquire then release"
        ),
    );
    let cells = measure_interleaved(ctx, &mut section, &protos, clients, keys, reps).await?;
    section.line(run_note(ctx, reps));
    section.line(header(false, "cycles/s"));
    for c in &cells {
        section.line(c.line(false));
    }
    let vs = |p| match (
        find(&cells, Proto::Module, clients),
        find(&cells, p, clients),
    ) {
        (Some(m), Some(o)) => m.vs(o),
        _ => f64::NAN,
    };
    for (p, what, want) in [
        (Proto::Raw, "module cycles/s vs raw SET NX PX + DEL", 0.95),
        (Proto::Redisson, "module cycles/s vs redisson-emu", 1.8),
    ] {
        if let (Some(m), Some(o)) = (
            find(&cells, Proto::Module, clients),
            find(&cells, p, clients),
        ) {
            section.bars.push(m.bar_vs(what.into(), o, want));
        }
    }
    // KEEPALIVE binds the hold to the connection on acquire and unbinds it
    // on release: that costs no more than a tenth of a plain cycle.
    if let (Some(k), Some(m)) = (
        find(&cells, Proto::ModuleKeepalive, clients),
        find(&cells, Proto::Module, clients),
    ) {
        section
            .bars
            .push(k.bar_vs("module-keepalive cycles/s vs module".into(), m, 0.9));
    }
    // FENCE makes every acquire write the token key (SET ... PXAT, two
    // keyspace events, replicated): a cost paid for a guarantee, told as
    // information beside the plain cycle, with no bar to hold it to.
    let fence = match (
        find(&cells, Proto::ModuleFence, clients),
        find(&cells, Proto::Module, clients),
    ) {
        (Some(f), Some(m)) => {
            let by_rep = ratios(&f.rates(), &m.rates());
            let reach =
                range(&by_rep).map_or(String::new(), |(lo, hi)| format!(" [{lo:.3}x .. {hi:.3}x]"));
            section.line(format!(
                "module-fence vs module: {:.3}x cycles/s{reach} (median of the ratios within each repetition; information, no bar)",
                f.vs(m)
            ));
            json!({"median_ratio": finite(f.vs(m)), "ratios_by_rep": by_rep})
        }
        _ => Value::Null,
    };
    section.line("server time per call, us (INFO commandstats usec_per_call, median of runs):");
    for c in &cells {
        section.line(format!("  {:<12} {}", c.proto.name(), c.server_time()));
    }
    section.line(format!(
        "module vs spin-10ms: {:.2}x, vs spin-100ms: {:.2}x",
        vs(Proto::Spin(10)),
        vs(Proto::Spin(100))
    ));
    section.json = json!({"clients": clients, "keys": keys,
        "cells": cells.iter().map(Cell::json).collect::<Vec<_>>(),
        "module_fence_vs_module": fence});
    Ok(section)
}
