//! S5 (moderate-contention): 256 clients on 64 keys, each cycle on a random
//! key; the module against redisson-emu and spin locks.

use std::io;

use serde_json::json;

use super::cell::{find, header, Cell};
use super::measure::{measure_interleaved, run_note};
use crate::load::Proto;
use crate::report::{ms, Section};
use crate::Ctx;

pub async fn s5(ctx: &Ctx) -> io::Result<Section> {
    let reps = ctx.opts.reps(crate::options::REPS_S5);
    let clients = 256;
    let keys = 64;
    let protos = ctx.protocols(&[
        Proto::Module,
        Proto::Redisson,
        Proto::Spin(10),
        Proto::Spin(100),
    ]);
    let mut section = Section::new(
        "S5",
        format!("moderate contention: {keys} keys, {clients} clients, each cycle on a random key"),
    );
    let cells = measure_interleaved(ctx, &mut section, &protos, clients, keys, reps).await?;
    section.line(run_note(ctx, reps));
    section.line(format!(
        "redisson-emu (Redisson's protocol by this generator): processes of {} client threads",
        ctx.opts.threads_per_process
    ));
    section.line(header(false, "acq/s"));
    for c in &cells {
        section.line(c.line(false));
    }
    let m = find(&cells, Proto::Module, clients);
    let r = find(&cells, Proto::Redisson, clients);
    if let (Some(m), Some(r)) = (m, r) {
        section
            .bars
            .push(m.bar_vs("module acq/s vs redisson-emu".into(), r, 10.0));
        section.line(format!(
            "p99 wait: module {} ms, redisson-emu {} ms",
            ms(m.p99()),
            ms(r.p99())
        ));
    }
    section.json = json!({"clients": clients, "keys": keys,
        "cells": cells.iter().map(Cell::json).collect::<Vec<_>>()});
    Ok(section)
}
