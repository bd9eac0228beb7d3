//! S11 (keepalive-floor): whether the shortest lease `KEEPALIVE` takes
//! (`lock_keepalive_min_lease_ms`, 704 ms at hz 10) is long enough for the
//! server to renew every hold in time on a busy machine. The floor is read
//! from `INFO lock` (and checked against the rules' formula), and a lease
//! 1 ms below it must be refused. Then 1,000 holds (10 connections, 100
//! locks each) are taken with `KEEPALIVE PX <floor>` and kept for 30 s (5 s
//! with `--quick`) while
//!
//! - one thread per core spins (pinned to that core: one shares the
//!   server's core, one the generator's), and
//! - `LOAD_CONNECTIONS` connections run `LOCK.ACQUIRE` + `LOCK.RELEASE`
//!   cycles on keys of their own against the same server, `PIPELINE`
//!   cycles per round trip, as fast as they go.
//!
//! A separate connection reads `PTTL` and `PEXPIRETIME` of all 1,000 keys
//! again and again (one pipeline per sweep): a key gone is a hold lost
//! while its connection was open; the smallest TTL sampled, and the TTL
//! each renewal found left (from the key's expiry time before and after
//! it), give the closest call: a renewal is due when half the lease is
//! left, so half the lease minus it is how late the latest one seen was.
//! `INFO lock` is polled too (`lock_keepalive_ended` must not move,
//! `lock_keepalive_holds` must stay 1,000), and at the end every key must
//! still be held by its owner, kept alive by its connection (`LOCK.INFO`).
//! Any hold lost is an error (non-zero exit). Beside them, what the
//! machine did: each core's busy time, the server's CPU and the time it
//! waited for one (`/proc/<pid>/schedstat`), other processes' CPU, and the
//! longest a thread sleeping 1 ms on each core waited to run again.
//!
//! Offers: [`s11`]. The parts: `holds` (the holds taken: how many, their
//! keys and owners, what the server says of them), `busy` (what keeps the
//! machine busy: the hogs, the load connections), `machine` (what the
//! machine did: each core's time, the server's wait for a CPU, the wake-up
//! probes), `watch` (the sweeps of the keys' TTLs, the `INFO lock` polls)
//! and `run` (one run at the floor, checked and told).

mod busy;
mod holds;
mod machine;
mod run;
mod watch;

use std::io;
use std::time::Duration;

use serde_json::json;

use self::busy::{LOAD_CONNECTIONS, LOAD_KEYS, LOAD_LEASE_MS, PIPELINE};
use self::holds::{lock_stat, CONNECTIONS, HOLDS, LOCKS_PER_CONNECTION};
use self::run::run_once;
use self::watch::POLL;
use crate::conn::{Conn, Reply, ReplyExt};
use crate::report::{Bar, Section};
use crate::server::online_cores;
use crate::Ctx;

/// How long the holds are kept.
const HOLD: Duration = Duration::from_secs(30);
const HOLD_QUICK: Duration = Duration::from_secs(5);
/// What the module answers to a lease below the floor.
const REFUSAL: &str = "ERR KEEPALIVE needs a lease of at least";

pub async fn s11(ctx: &Ctx) -> io::Result<Section> {
    let hold = if ctx.opts.quick { HOLD_QUICK } else { HOLD };
    let reps = ctx.opts.reps(crate::options::REPS_S11);
    let mut admin = Conn::connect(&ctx.addr).await?;
    let hz: i64 = match admin.ok(&["CONFIG", "GET", "hz"]).await? {
        Reply::Array(v) => v.get(1).and_then(ReplyExt::int),
        _ => None,
    }
    .ok_or_else(|| io::Error::other("CONFIG GET hz: no integer"))?;
    let floor = lock_stat(&mut admin, "lock_keepalive_min_lease_ms").await?;
    let mut section = Section::new(
        "S11",
        format!(
            "KEEPALIVE at the floor lease: {HOLDS} holds ({CONNECTIONS} connections x {LOCKS_PER_CONNECTION} locks) at PX {floor} (hz {hz}), kept {} s on a busy machine",
            hold.as_secs()
        ),
    );
    let expected = lock_rules::keepalive::min_lease_ms(hz);
    if floor != expected {
        section.errors.push(format!(
            "lock_keepalive_min_lease_ms is {floor} at hz {hz}, the rules say {expected}"
        ));
    }

    // One ms below the floor is refused, and takes nothing.
    let below = (floor - 1).to_string();
    let refused = admin
        .cmd(&[
            b"LOCK.ACQUIRE",
            b"s11-below",
            b"holder-below",
            b"PX",
            below.as_bytes(),
            b"KEEPALIVE",
        ])
        .await?;
    let refused_ok = matches!(&refused, Reply::ServerError(e) if crate::conn::error_line(e).starts_with(REFUSAL));
    if !refused_ok {
        section.errors.push(format!(
            "LOCK.ACQUIRE ... PX {below} KEEPALIVE (1 ms below the floor) answered {refused:?}, not {REFUSAL} ..."
        ));
    }
    if admin.ok(&["EXISTS", "s11-below"]).await?.int() != Some(0) {
        section
            .errors
            .push("a refused LOCK.ACQUIRE left its key behind".into());
    }
    section.line(format!(
        "floor: lock_keepalive_min_lease_ms {floor} at hz {hz} (2 x (ceil(1000/hz) + 250 + 2)); PX {below} KEEPALIVE: {}",
        if refused_ok { "refused".to_string() } else { format!("{refused:?}") }
    ));
    section.line(format!(
        "load during each run: {} spinning threads (one pinned to each core, the server's included); {LOAD_CONNECTIONS} connections running LOCK.ACQUIRE PX {LOAD_LEASE_MS} + LOCK.RELEASE cycles on {LOAD_KEYS} keys of their own each, {PIPELINE} cycles per round trip, one round trip after another; PTTL + PEXPIRETIME of the {HOLDS} held keys, one pipeline after another; INFO lock every {} ms; a 1 ms sleeper per core",
        online_cores(),
        POLL.as_millis()
    ));

    let mut runs = Vec::with_capacity(reps);
    for rep in 0..reps {
        let run = run_once(ctx, rep, floor, hold).await?;
        section.lines.extend(run.lines.iter().cloned());
        section.errors.extend(run.errors.iter().cloned());
        runs.push(run);
    }
    let lost: usize = runs.iter().map(|r| r.lost).sum();
    let renewals: i64 = runs.iter().map(|r| r.renewals).sum();
    let min_ttl = runs.iter().filter_map(|r| r.min_ttl).min();
    section.line(format!(
        "{} run(s): {lost} of {} holds lost, {renewals} renewals; min TTL left {} ms of {floor}",
        runs.len(),
        HOLDS * runs.len(),
        min_ttl.map_or("n/a".into(), |t| t.to_string())
    ));
    section.bars.push(Bar::at_most(
        format!("KEEPALIVE holds lost at the floor lease ({floor} ms)"),
        lost as f64,
        0.0,
    ));
    section.json = json!({
        "hz": hz, "floor_ms": floor, "below_floor_reply": format!("{refused:?}"),
        "hold_s": hold.as_secs(), "connections": CONNECTIONS,
        "locks_per_connection": LOCKS_PER_CONNECTION, "load_connections": LOAD_CONNECTIONS,
        "hogs": online_cores(), "runs": runs.iter().map(|r| r.json.clone()).collect::<Vec<_>>(),
    });
    Ok(section)
}
