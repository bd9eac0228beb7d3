//! 2b: joining a long queue. One lock held, 10,000 waiters parked on it;
//! then 1,000 more join, detection on and off alternately: the server
//! time of each `LOCK.ACQUIRE` that joined and the server's CPU per join.

use std::io;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::detection::{err, set_detection, wait_for_waiters};
use super::on_off::{onoff, order, Pair, Ratio};
use crate::conn::{Conn, Reply};
use crate::report::{finite, Section};
use crate::stats::{median, range};
use crate::Ctx;

/// Waiters parked on one lock for the join cost.
pub(super) const PARKED: usize = 10_000;
/// Waiters joining that queue per measurement.
pub(super) const JOINERS: usize = 1_000;

/// One measurement of `JOINERS` waiters joining the parked queue.
#[derive(Clone, Debug)]
struct Join {
    /// Server time per `LOCK.ACQUIRE` that joined, µs (INFO commandstats:
    /// a command that blocks is counted when it blocks on Redis 7; NaN on
    /// a server that counts it only when answered, Valkey 9).
    acquire_us: f64,
    /// Server main-thread CPU per join, µs (networking and event loop
    /// too), less the server time of the `INFO` polls.
    cpu_us: f64,
}

async fn join_round(
    ctx: &Ctx,
    admin: &mut Conn,
    joiners: &mut [Conn],
    key: &[u8],
    round: usize,
) -> io::Result<Join> {
    admin.ok(&["CONFIG", "RESETSTAT"]).await?;
    let cpu0 = crate::server::on_cpu_ms(ctx.server_pid);
    for (i, c) in joiners.iter_mut().enumerate() {
        let owner = format!("s15-j{round}-{i}");
        c.push(&[b"LOCK.ACQUIRE", key, owner.as_bytes(), b"BLOCK", b"0"]);
        c.flush().await?;
    }
    wait_for_waiters(admin, PARKED + joiners.len(), Duration::from_millis(2)).await?;
    let cpu = crate::server::on_cpu_ms(ctx.server_pid) - cpu0;
    let stats = crate::load::commandstats(admin).await?;
    let of = |name: &str| stats.iter().find(|c| c.0 == name);
    let poll_us = of("info").map_or(0.0, |c| c.1 as f64 * c.2);
    let (calls, acquire_us) = of("lock.acquire").map_or((0, f64::NAN), |c| (c.1, c.2));
    // Valkey counts a command that blocks only once it is answered: none
    // of the joins then (NaN, told in the table).
    if calls != joiners.len() as u64 && calls != 0 {
        return Err(err(format!(
            "INFO commandstats counts {calls} LOCK.ACQUIRE calls for {} joins",
            joiners.len()
        )));
    }
    Ok(Join {
        acquire_us,
        cpu_us: (cpu * 1000.0 - poll_us) / joiners.len() as f64,
    })
}

/// `n` new connections.
async fn connect(ctx: &Ctx, n: usize) -> io::Result<Vec<Conn>> {
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        v.push(Conn::connect(&ctx.addr).await?);
    }
    Ok(v)
}

/// 2b: `PARKED` waiters in `BLOCK 0` on one held lock, then `JOINERS`
/// more join, detection on and off alternately.
pub(super) async fn parked_joins(
    ctx: &Ctx,
    section: &mut Section,
    admin: &mut Conn,
    reps: usize,
) -> io::Result<Value> {
    let key = b"s15-parked".as_slice();
    let r = admin
        .cmd(&[b"LOCK.ACQUIRE", key, b"s15-holder", b"PX", b"3600000"])
        .await?;
    if r != Reply::Int(1) {
        return Err(err(format!(
            "LOCK.ACQUIRE of the parked lock answered {r:?}"
        )));
    }
    let t0 = Instant::now();
    let mut parked = connect(ctx, PARKED).await?;
    for (i, c) in parked.iter_mut().enumerate() {
        let owner = format!("s15-p{i}");
        c.push(&[b"LOCK.ACQUIRE", key, owner.as_bytes(), b"BLOCK", b"0"]);
        c.flush().await?;
    }
    wait_for_waiters(admin, PARKED, Duration::from_millis(5)).await?;
    ctx.progress(&format!(
        "S15 {PARKED} waiters parked in {:.1} s",
        t0.elapsed().as_secs_f64()
    ));
    let mut pair: Pair<Join> = Pair::new();
    let mut joiners = connect(ctx, JOINERS).await?;
    let rounds = reps.max(2);
    // Round 0, one per setting, is a warm-up (the first joins after the
    // parking were slower in every setting).
    for round in 0..=rounds {
        for on in order(round) {
            set_detection(admin, on).await?;
            let j = join_round(ctx, admin, &mut joiners, key, 2 * round + usize::from(on)).await?;
            ctx.progress(&format!(
                "S15 {JOINERS} joining {PARKED} parked, detection {}: LOCK.ACQUIRE {:.2} us per call, server CPU {:.2} us per join{}",
                onoff(on),
                j.acquire_us,
                j.cpu_us,
                if round == 0 { " (warm-up)" } else { "" }
            ));
            if round > 0 {
                pair.push(on, j);
            }
            // The joiners leave (their connections close) and new ones
            // are made for the next round.
            joiners.clear();
            wait_for_waiters(admin, PARKED, Duration::from_millis(5)).await?;
            joiners = connect(ctx, JOINERS).await?;
        }
    }
    // Every waiter leaves (its connection closes), then the holder
    // releases the lock, which nobody waits for any more.
    drop(joiners);
    drop(parked);
    wait_for_waiters(admin, 0, Duration::from_millis(5)).await?;
    let r = admin.cmd(&[b"LOCK.RELEASE", key, b"s15-holder"]).await?;
    if r != Reply::Int(0) {
        section.errors.push(format!(
            "LOCK.RELEASE of the parked lock answered {r:?}, not 0"
        ));
    }
    ctx.settle(section).await;
    let ratio = |f: fn(&Join) -> f64| Ratio::of(&pair.values(true, f), &pair.values(false, f));
    let (acq, cpu) = (ratio(|j| j.acquire_us), ratio(|j| j.cpu_us));
    section.line(format!(
        "   joining a long queue: one lock held, {PARKED} waiters parked in LOCK.ACQUIRE key owner BLOCK 0 on their own connections (all seen in INFO lock_waiters); then {JOINERS} more connections each send LOCK.ACQUIRE key owner BLOCK 0, written one after another, until INFO lock shows all {} queued; per join: the server time of LOCK.ACQUIRE (INFO commandstats usec_per_call, reset before each round; a command that blocks is counted when it blocks) and the server main thread's CPU time (/proc/<pid>/schedstat: networking and event loop too, less the INFO polls' own time); the joiners then disconnect (they leave the queue) and new ones connect; {rounds} rounds per setting after one warm-up round each, interleaved (order alternating)",
        PARKED + JOINERS
    ));
    section.line(format!(
        "   {:<9} {:>16} {:>16} {:>19} {:>16}",
        "detection", "acquire us/call", "range", "server CPU us/join", "range"
    ));
    for on in [true, false] {
        let band = |f: fn(&Join) -> f64| {
            let v = pair.values(on, f);
            let r = range(&v).map_or("-".to_string(), |(lo, hi)| format!("{lo:.2} .. {hi:.2}"));
            (median(&v), r)
        };
        let (a, c) = (band(|j| j.acquire_us), band(|j| j.cpu_us));
        section.line(format!(
            "   {:<9} {:>16.2} {:>16} {:>19.2} {:>16}",
            onoff(on),
            a.0,
            a.1,
            c.0,
            c.1
        ));
    }
    section.line(format!(
        "   joining {PARKED}, on / off: LOCK.ACQUIRE us/call {}; server CPU per join {}",
        if acq.median.is_finite() {
            acq.text()
        } else {
            "n/a (this server counts a command that blocks in INFO commandstats only once it is answered)".into()
        },
        cpu.text()
    ));
    Ok(json!({
        "parked": PARKED, "joiners": JOINERS,
        "on_over_off_acquire_usec": acq.json(), "on_over_off_cpu_per_join": cpu.json(),
        "on": pair.on.iter().map(|j| json!({"acquire_usec_per_call": finite(j.acquire_us), "server_cpu_us_per_join": finite(j.cpu_us)})).collect::<Vec<_>>(),
        "off": pair.off.iter().map(|j| json!({"acquire_usec_per_call": finite(j.acquire_us), "server_cpu_us_per_join": finite(j.cpu_us)})).collect::<Vec<_>>(),
    }))
}
