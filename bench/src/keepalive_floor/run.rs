//! One S11 run: the holds taken at the floor lease with `KEEPALIVE`, kept
//! under the busy machine while the watchers sample them, then checked
//! (every key still held by its owner, kept alive by its connection) and
//! told: holds lost, the closest call, the load, the waits for a CPU.

use std::cell::RefCell;
use std::io;
use std::rc::Rc;
use std::time::{Duration, Instant};

use serde_json::json;

use super::busy::{cycle_locks, Hogs, Load, LOAD_CONNECTIONS};
use super::holds::{
    key, lock_stat, owner, owner_and_client, CONNECTIONS, HOLDS, LOCKS_PER_CONNECTION,
};
use super::machine::{
    core_times, core_use, run_delay_ms, thread_cpu_seconds, WakeProbes, LONG_WAKE_MS,
};
use super::watch::{poll_info, sweep, Polls, Sweeps};
use crate::conn::{Conn, Reply, ReplyExt};
use crate::report::rate;
use crate::server::{cpu_seconds, online_cores};
use crate::stats::percentile;
use crate::Ctx;

/// One run: the holds taken at the floor, kept `hold` under the load, checked.
pub(super) struct Run {
    pub(super) renewals: i64,
    pub(super) lost: usize,
    pub(super) json: serde_json::Value,
    pub(super) lines: Vec<String>,
    pub(super) errors: Vec<String>,
    pub(super) min_ttl: Option<i64>,
}

pub(super) async fn run_once(ctx: &Ctx, rep: usize, floor: i64, hold: Duration) -> io::Result<Run> {
    let mut errors = Vec::new();
    let prefix = format!("s11-hold-{rep}");
    let lease = floor.to_string();
    let mut admin = Conn::connect(&ctx.addr).await?;
    let holds0 = lock_stat(&mut admin, "lock_keepalive_holds").await?;

    // The holds: 10 connections, 100 locks each, pipelined.
    let mut holders = Vec::with_capacity(CONNECTIONS);
    let mut client_ids = Vec::with_capacity(CONNECTIONS);
    let mut keys = Vec::with_capacity(HOLDS);
    for c in 0..CONNECTIONS {
        let mut conn = Conn::connect(&ctx.addr).await?;
        let id = conn
            .ok(&["CLIENT", "ID"])
            .await?
            .int()
            .ok_or_else(|| io::Error::other("CLIENT ID: not an integer"))?;
        let who = owner(c);
        for i in 0..LOCKS_PER_CONNECTION {
            let k = key(&prefix, c, i);
            conn.push(&[
                b"LOCK.ACQUIRE",
                k.as_bytes(),
                who.as_bytes(),
                b"PX",
                lease.as_bytes(),
                b"KEEPALIVE",
            ]);
            keys.push(k);
        }
        conn.flush().await?;
        for i in 0..LOCKS_PER_CONNECTION {
            match conn.read().await? {
                Reply::Int(1) => {}
                other => {
                    return Err(io::Error::other(format!(
                        "LOCK.ACQUIRE {} {who} PX {lease} KEEPALIVE answered {other:?}",
                        key(&prefix, c, i)
                    )))
                }
            }
        }
        holders.push(conn);
        client_ids.push(id);
    }
    let bound = lock_stat(&mut admin, "lock_keepalive_holds").await? - holds0;
    if bound != HOLDS as i64 {
        errors.push(format!("{bound} holds kept alive after taking {HOLDS}"));
    }

    // The busy machine, then the watchers.
    let pin = ctx.opts.pinning.server.is_some();
    let hogs = Hogs::start(pin);
    let stop = Rc::new(std::cell::Cell::new(false));
    let load = Rc::new(RefCell::new(Load::default()));
    let mut tasks = Vec::new();
    for c in 0..LOAD_CONNECTIONS {
        tasks.push(tokio::task::spawn_local(cycle_locks(
            ctx.addr.clone(),
            c,
            stop.clone(),
            load.clone(),
        )));
    }
    let ended0 = lock_stat(&mut admin, "lock_keepalive_ended").await?;
    let renewals0 = lock_stat(&mut admin, "lock_keepalive_renewals").await?;
    let t0 = Instant::now();
    let server0 = cpu_seconds(ctx.server_pid);
    let generator0 = thread_cpu_seconds();
    let process0 = cpu_seconds(None);
    let delay0 = run_delay_ms(ctx.server_pid);
    let probes = WakeProbes::start(pin);
    let hogs0 = hogs.cpu_seconds();
    let cores0 = core_times();
    let sweeps = Rc::new(RefCell::new(Sweeps::default()));
    tasks.push(tokio::task::spawn_local(sweep(
        ctx.addr.clone(),
        Rc::new(keys.clone()),
        floor,
        t0,
        stop.clone(),
        sweeps.clone(),
    )));
    let polls = Rc::new(RefCell::new(Polls::default()));
    tasks.push(tokio::task::spawn_local(poll_info(
        ctx.addr.clone(),
        ended0,
        holds0,
        t0,
        stop.clone(),
        polls.clone(),
    )));
    ctx.progress(&format!(
        "S11 run {}: {HOLDS} KEEPALIVE holds at PX {floor}, kept {} s beside {} CPU hogs and {LOAD_CONNECTIONS} load connections",
        rep + 1,
        hold.as_secs(),
        online_cores()
    ));
    tokio::time::sleep(hold).await;

    let renewals = lock_stat(&mut admin, "lock_keepalive_renewals").await? - renewals0;
    let ended = lock_stat(&mut admin, "lock_keepalive_ended").await? - ended0;
    let still_bound = lock_stat(&mut admin, "lock_keepalive_holds").await? - holds0;
    let elapsed = t0.elapsed().as_secs_f64();
    let server_cpu = 100.0 * (cpu_seconds(ctx.server_pid) - server0) / elapsed;
    let cores = core_use(&cores0, &core_times());
    let busy: Vec<f64> = cores.iter().map(|c| c.0).collect();
    let hog_pct: Vec<f64> = hogs
        .cpu_seconds()
        .iter()
        .zip(&hogs0)
        .map(|(s, s0)| 100.0 * (s - s0) / elapsed)
        .collect();
    // The generator is this thread (a current_thread runtime).
    let generator_cpu = 100.0 * (thread_cpu_seconds() - generator0) / elapsed;
    let process_cpu = 100.0 * (cpu_seconds(None) - process0) / elapsed;
    let server_waited = run_delay_ms(ctx.server_pid) - delay0;
    let wakes = probes.stop();
    // Everything else on the machine: other people's processes.
    let others_cpu = (busy.iter().sum::<f64>() - server_cpu - process_cpu).max(0.0);
    stop.set(true);
    for t in tasks {
        let _ = t.await;
    }
    hogs.stop();

    // Every key still held by its owner, kept alive by its connection.
    for k in &keys {
        admin.push(&[b"LOCK.INFO", k.as_bytes()]);
    }
    admin.flush().await?;
    let mut lost_at_end = Vec::new();
    for (n, k) in keys.iter().enumerate() {
        let c = n / LOCKS_PER_CONNECTION;
        let reply = admin.read().await?;
        match owner_and_client(&reply) {
            Some((who, Some(id))) if who == owner(c) && id == client_ids[c] => {}
            got => lost_at_end.push(format!("{k}: {got:?}")),
        }
    }
    // Their bindings end with the connections: wait for that, so that a
    // next run starts from none of them.
    drop(holders);
    let deadline = Instant::now() + Duration::from_secs(5);
    while lock_stat(&mut admin, "lock_keepalive_holds").await? > holds0 && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let sweeps = sweeps.take();
    let polls = polls.take();
    let load = load.take();
    for e in [&sweeps.error, &polls.error].into_iter().flatten() {
        errors.push(e.clone());
    }
    errors.extend(load.errors.iter().take(3).cloned());
    if !sweeps.no_ttl.is_empty() {
        errors.push(format!(
            "{} held keys without a TTL (PTTL -1), e.g. {:?}",
            sweeps.no_ttl.len(),
            sweeps.no_ttl.first()
        ));
    }
    let lost = lost_at_end
        .len()
        .max(sweeps.lost.len())
        .max(usize::try_from(ended).unwrap_or(0));
    if lost > 0 || ended != 0 || still_bound != HOLDS as i64 {
        errors.push(format!(
            "KEEPALIVE holds lost at the floor lease ({floor} ms), run {}: {} of {HOLDS} not held by their owner at the end (e.g. {:?}), {} found gone by PTTL during the run (first after {:.1} s), lock_keepalive_ended +{ended}, lock_keepalive_holds {still_bound}",
            rep + 1,
            lost_at_end.len(),
            lost_at_end.first(),
            sweeps.lost.len(),
            sweeps.first_lost_s.unwrap_or(f64::NAN),
        ));
    }
    // A renewal sees less left than any sample before it.
    let min_ttl = sweeps
        .min_ttl
        .as_ref()
        .map(|(t, _, _)| *t)
        .into_iter()
        .chain(sweeps.renewal_ttls.iter().copied())
        .min();
    let cycles_per_s = load.cycles as f64 / elapsed;
    let busy_text = cores
        .iter()
        .enumerate()
        .map(|(i, (b, st))| format!("core {i} {b:.1}% busy ({st:.1}% stolen)"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut lines = vec![format!(
        "run {}: {HOLDS} holds at PX {floor} KEEPALIVE for {elapsed:.1} s: lost {lost} (at the end {}, by PTTL during the run {}, lock_keepalive_ended +{ended}, fewest bindings seen {}); {renewals} renewals ({:.0} per hold, one per {:.0} ms)",
        rep + 1,
        lost_at_end.len(),
        sweeps.lost.len(),
        polls.holds_min.unwrap_or(still_bound),
        renewals as f64 / HOLDS as f64,
        elapsed * 1000.0 * HOLDS as f64 / renewals.max(1) as f64,
    )];
    let at_renewal: Vec<f64> = sweeps.renewal_ttls.iter().map(|t| *t as f64).collect();
    let renewal_min = sweeps.renewal_ttls.iter().copied().min();
    lines.push(match renewal_min {
        Some(least) => format!(
            "  closest call: a renewal found {least} ms of the {floor} ms lease left ({} ms late: due at {} left); left at renewal p50 {:.0} ms, p1 {:.0}, p0.1 {:.0}, over {} renewals seen from one expiry time to the next ({} not resolved: sweeps too far apart)",
            (floor / 2 - least).max(0),
            floor / 2,
            percentile(&at_renewal, 50.0),
            percentile(&at_renewal, 1.0),
            percentile(&at_renewal, 0.1),
            at_renewal.len(),
            sweeps.unresolved,
        ),
        None => "  closest call: no renewal seen between two sweeps".into(),
    });
    lines.push(match &sweeps.min_ttl {
        Some((ttl, k, at)) => format!(
            "  sampled: min PTTL {ttl} ms ({k}, {at:.1} s in); {} of {} samples taken while a renewal was overdue; {} sweeps of the {HOLDS} keys, at most {:.1} ms apart",
            sweeps.overdue,
            sweeps.samples,
            sweeps.count,
            sweeps.max_gap_ms,
        ),
        None => "  sampled: no TTL".into(),
    });
    lines.push(format!(
        "  load: {busy_text}; server {server_cpu:.1}% of a core, generator {generator_cpu:.1}%, hogs {}, other processes {others_cpu:.1}%; {LOAD_CONNECTIONS} connections {} acquire+release cycles/s",
        hog_pct
            .iter()
            .map(|p| format!("{p:.1}%"))
            .collect::<Vec<_>>()
            .join(" + "),
        rate(cycles_per_s),
    ));
    lines.push(format!(
        "  waits for a CPU: the server {server_waited:.0} ms in all ({:.1}% of the run); longest wake-up delay of a 1 ms sleeper {}",
        100.0 * server_waited / (elapsed * 1000.0),
        wakes
            .iter()
            .enumerate()
            .map(|(i, w)| format!(
                "core {i} {:.1} ms ({:.1} s in; {} of {LONG_WAKE_MS:.0} ms or more{})",
                w.worst_ms,
                w.worst_at_s,
                w.long.len(),
                if w.long.is_empty() {
                    String::new()
                } else {
                    format!(
                        ": {}",
                        w.long
                            .iter()
                            .take(8)
                            .map(|(at, ms)| format!("{ms:.0} ms at {at:.1} s"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                }
            ))
            .collect::<Vec<_>>()
            .join(", "),
    ));
    let json = json!({
        "lease_ms": floor, "holds": HOLDS, "seconds": elapsed, "renewals": renewals,
        "lost": lost, "lost_at_end": lost_at_end.len(), "lost_by_pttl": sweeps.lost.len(),
        "first_lost_by_pttl_s": sweeps.first_lost_s, "keepalive_ended": ended,
        "fewest_bindings_seen": polls.holds_min,
        "info_polls": polls.count, "lost_first_seen_by_info_s": polls.first_seen_s,
        "min_ttl_ms": min_ttl, "min_ttl_at_renewal_ms": renewal_min,
        "ttl_at_renewal_p50_ms": percentile(&at_renewal, 50.0),
        "ttl_at_renewal_p1_ms": percentile(&at_renewal, 1.0),
        "ttl_at_renewal_p01_ms": percentile(&at_renewal, 0.1),
        "renewals_observed": at_renewal.len(), "renewals_unresolved": sweeps.unresolved,
        "min_pttl_sampled_ms": sweeps.min_ttl.as_ref().map(|(t, _, _)| *t),
        "min_pttl_key": sweeps.min_ttl.as_ref().map(|(_, k, _)| k.clone()),
        "min_pttl_at_s": sweeps.min_ttl.as_ref().map(|(_, _, at)| *at),
        "pttl_sweeps": sweeps.count, "pttl_samples": sweeps.samples,
        "pttl_samples_overdue": sweeps.overdue, "pttl_max_gap_ms": sweeps.max_gap_ms,
        "server_cpu_pct": server_cpu, "generator_cpu_pct": generator_cpu,
        "hog_cpu_pct": hog_pct, "core_busy_pct": busy, "others_cpu_pct": others_cpu,
        "server_run_delay_ms": server_waited,
        "core_stolen_pct": cores.iter().map(|c| c.1).collect::<Vec<_>>(),
        "wake_delay_max_ms": wakes.iter().map(|w| w.worst_ms).collect::<Vec<_>>(),
        "wake_delay_max_at_s": wakes.iter().map(|w| w.worst_at_s).collect::<Vec<_>>(),
        "wake_delays_long_at_s_ms": wakes.iter().map(|w| w.long.clone()).collect::<Vec<_>>(),
        "load_connections": LOAD_CONNECTIONS, "load_cycles": load.cycles,
        "load_cycles_per_s": cycles_per_s,
    });
    ctx.progress(&format!(
        "S11 run {}: lost {lost}, {renewals} renewals, min TTL left {} ms of {floor}, server {server_cpu:.1}% of a core, {busy_text}",
        rep + 1,
        min_ttl.map_or("n/a".into(), |t| t.to_string())
    ));
    Ok(Run {
        renewals,
        lost,
        json,
        lines,
        errors,
        min_ttl,
    })
}
