//! S9 (keepalive-renewals): what the server's KEEPALIVE renewals cost it.
//! 1,000 idle connections hold 100 locks each (100,000 holds) taken with
//! `KEEPALIVE PX 30000`: the server renews every hold every 15 s (half its
//! lease), by itself. Its CPU time is measured over whole renewal
//! periods, against the same server holding the same locks without
//! KEEPALIVE (a lease that outlasts the measurement), and the renewals
//! counted by `INFO lock`. Every hold must still be held at the end. For
//! reference, the same holds renewed the Redisson way: each connection
//! runs Redisson's watchdog script for its holds every 10 s.

use std::cell::Cell;
use std::io;
use std::rc::Rc;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::conn::{Conn, Reply, ReplyExt};
use crate::report::{Bar, Section};
use crate::server::cpu_seconds;
use crate::stats::median;
use crate::{info_field, Ctx};

const CONNECTIONS: usize = 1000;
const LOCKS_PER_CONNECTION: usize = 100;
const LEASE_MS: u64 = 30_000;
/// A renewal at every half of the lease.
const PERIOD: Duration = Duration::from_secs(15);
/// Redisson's watchdog renews at every third of its lease.
const REDISSON_PERIOD: Duration = Duration::from_secs(10);

/// Redisson's watchdog renewal (`RedissonBaseLock.renewExpirationAsync`):
/// KEYS[1] the lock, ARGV[1] the lease, ARGV[2] the owner.
const REDISSON_RENEW: &str = "if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then \
redis.call('pexpire', KEYS[1], ARGV[1]); return 1; end; return 0;";

/// Takes `LOCKS_PER_CONNECTION` locks on each connection, pipelined:
/// `LOCK.ACQUIRE <prefix>:<conn>:<i> owner PX lease [KEEPALIVE]`.
async fn hold_all(conns: &mut [Conn], prefix: &str, lease: u64, keepalive: bool) -> io::Result<()> {
    let lease = lease.to_string();
    for (c, conn) in conns.iter_mut().enumerate() {
        let owner = format!("bench-{c}");
        for i in 0..LOCKS_PER_CONNECTION {
            let key = format!("{prefix}:{c}:{i}");
            let mut args: Vec<&[u8]> = vec![
                b"LOCK.ACQUIRE",
                key.as_bytes(),
                owner.as_bytes(),
                b"PX",
                lease.as_bytes(),
            ];
            if keepalive {
                args.push(b"KEEPALIVE");
            }
            conn.push(&args);
        }
        conn.flush().await?;
        for _ in 0..LOCKS_PER_CONNECTION {
            match conn.read().await? {
                Reply::Int(1) => {}
                other => return Err(io::Error::other(format!("LOCK.ACQUIRE answered {other:?}"))),
            }
        }
    }
    Ok(())
}

async fn lock_stat(ctx: &Ctx, name: &str) -> io::Result<i64> {
    let mut c = Conn::connect(&ctx.addr).await?;
    let v = info_field(&mut c, "lock", name).await?;
    v.and_then(|v| v.parse().ok())
        .ok_or_else(|| io::Error::other(format!("INFO lock has no {name}")))
}

async fn keys(ctx: &Ctx) -> io::Result<i64> {
    let mut c = Conn::connect(&ctx.addr).await?;
    c.ok(&["DBSIZE"])
        .await?
        .int()
        .ok_or_else(|| io::Error::other("DBSIZE: not an integer"))
}

/// The server's CPU use over `window`, in % of one core.
async fn server_cpu(ctx: &Ctx, window: Duration) -> f64 {
    let start = Instant::now();
    let before = cpu_seconds(ctx.server_pid);
    tokio::time::sleep(window).await;
    let used = cpu_seconds(ctx.server_pid) - before;
    100.0 * used / start.elapsed().as_secs_f64()
}

pub async fn s9(ctx: &Ctx) -> io::Result<Section> {
    let periods = ctx.opts.reps(crate::options::REPS_S9);
    let holds = (CONNECTIONS * LOCKS_PER_CONNECTION) as i64;
    let mut section = Section::new(
        "S9",
        format!(
            "KEEPALIVE renewals: {CONNECTIONS} idle connections holding {LOCKS_PER_CONNECTION} locks each ({holds} holds), lease {} s, renewed every {} s by the server",
            LEASE_MS / 1000,
            PERIOD.as_secs()
        ),
    );
    let mut conns = Vec::with_capacity(CONNECTIONS);
    for _ in 0..CONNECTIONS {
        conns.push(Conn::connect(&ctx.addr).await?);
    }

    // The same holds without KEEPALIVE, on a lease that outlasts the
    // window: the server's cost of merely having them and the connections.
    ctx.progress("S9 plain holds: taking them");
    hold_all(&mut conns, "s9-plain", 600_000, false).await?;
    let plain = server_cpu(ctx, PERIOD).await;
    ctx.progress(&format!("S9 plain holds: server {plain:.2}% of a core"));
    Conn::connect(&ctx.addr).await?.ok(&["FLUSHALL"]).await?;

    ctx.progress("S9 KEEPALIVE holds: taking them");
    hold_all(&mut conns, "s9-kept", LEASE_MS, true).await?;
    let kept = lock_stat(ctx, "lock_keepalive_holds").await?;
    if kept != holds {
        section
            .errors
            .push(format!("{kept} holds kept alive after taking {holds}"));
    }
    // Measure from the first renewals on: every later window of one period
    // holds one renewal of every hold.
    let first = lock_stat(ctx, "lock_keepalive_renewals").await?;
    let deadline = Instant::now() + PERIOD * 2;
    while lock_stat(ctx, "lock_keepalive_renewals").await? == first && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut cpu = Vec::with_capacity(periods);
    let mut renewals = Vec::with_capacity(periods);
    for _ in 0..periods {
        let before = lock_stat(ctx, "lock_keepalive_renewals").await?;
        let pct = server_cpu(ctx, PERIOD).await;
        let renewed = lock_stat(ctx, "lock_keepalive_renewals").await? - before;
        ctx.progress(&format!(
            "S9 KEEPALIVE holds: server {pct:.2}% of a core, {renewed} renewals in {} s",
            PERIOD.as_secs()
        ));
        cpu.push(pct);
        renewals.push(renewed as f64);
    }
    let still_held = keys(ctx).await?;
    if still_held != holds {
        section.violations.push(format!(
            "{still_held} locks held after the renewals, {holds} taken with KEEPALIVE"
        ));
    }
    drop(conns);

    // Redisson's way: the clients renew the same holds with its script.
    let watchdog = redisson_watchdog(ctx, periods).await?;
    let watchdog_median = median(&watchdog);

    let cpu_median = median(&cpu);
    let renewals_median = median(&renewals);
    // The renewals' own cost: what the server spent beyond holding the
    // same locks without them.
    let us_per_renewal =
        (cpu_median - plain).max(0.0) / 100.0 * PERIOD.as_secs_f64() * 1e6 / renewals_median;
    section.line(format!(
        "each figure: one window of {} s (a renewal period); KEEPALIVE: median of {periods} consecutive windows",
        PERIOD.as_secs()
    ));
    section.line(format!(
        "server CPU, % of one core: plain holds {plain:.2}%, KEEPALIVE holds {cpu_median:.2}% (windows {})",
        cpu.iter()
            .map(|c| format!("{c:.2}"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    section.line(format!(
        "renewals per window: {renewals_median:.0} (one per hold: {holds}); {us_per_renewal:.2} us of server time per renewal beyond plain holds"
    ));
    section.line(format!(
        "locks still held at the end: {still_held} of {holds}"
    ));
    section.line(format!(
        "for reference, the same holds renewed by Redisson's watchdog script from the clients every {} s: server {watchdog_median:.2}% of a core (windows {}): {:.1}x KEEPALIVE's",
        REDISSON_PERIOD.as_secs(),
        watchdog
            .iter()
            .map(|c| format!("{c:.2}"))
            .collect::<Vec<_>>()
            .join(", "),
        watchdog_median / cpu_median
    ));
    section.bars.push(
        Bar::at_most_pct(
            "server CPU renewing 100k KEEPALIVE holds (30 s lease)",
            cpu_median,
            2.0,
        )
        .with_range(&cpu),
    );
    section.json = json!({
        "connections": CONNECTIONS, "holds": holds, "lease_ms": LEASE_MS,
        "period_s": PERIOD.as_secs(), "plain_cpu_pct": plain, "keepalive_cpu_pct": cpu,
        "renewals": renewals, "us_per_renewal": us_per_renewal, "still_held": still_held,
        "redisson_watchdog_cpu_pct": watchdog,
    });
    Ok(section)
}

/// The same holds (plain, 30 s lease), each connection renewing its own
/// with Redisson's watchdog script every period, spread over the period
/// as Redisson's per-lock timers are: the server's CPU use per window.
async fn redisson_watchdog(ctx: &Ctx, periods: usize) -> io::Result<Vec<f64>> {
    Conn::connect(&ctx.addr).await?.ok(&["FLUSHALL"]).await?;
    let sha = Conn::connect(&ctx.addr)
        .await?
        .ok(&["SCRIPT", "LOAD", REDISSON_RENEW])
        .await?
        .text();
    let mut conns = Vec::with_capacity(CONNECTIONS);
    for _ in 0..CONNECTIONS {
        conns.push(Conn::connect(&ctx.addr).await?);
    }
    ctx.progress("S9 Redisson watchdog: taking the holds");
    hold_all(&mut conns, "s9-redisson", LEASE_MS, false).await?;
    let stop = Rc::new(Cell::new(false));
    let failed = Rc::new(Cell::new(0u64));
    let lease = LEASE_MS.to_string();
    let mut tasks = Vec::with_capacity(CONNECTIONS);
    for (c, mut conn) in conns.into_iter().enumerate() {
        let (stop, failed, sha, lease) = (stop.clone(), failed.clone(), sha.clone(), lease.clone());
        let offset = REDISSON_PERIOD * c as u32 / CONNECTIONS as u32;
        tasks.push(tokio::task::spawn_local(async move {
            let owner = format!("bench-{c}");
            let mut next = tokio::time::Instant::now() + offset;
            while !stop.get() {
                tokio::time::sleep_until(next).await;
                next += REDISSON_PERIOD;
                for i in 0..LOCKS_PER_CONNECTION {
                    let key = format!("s9-redisson:{c}:{i}");
                    conn.push(&[
                        b"EVALSHA",
                        sha.as_bytes(),
                        b"1",
                        key.as_bytes(),
                        lease.as_bytes(),
                        owner.as_bytes(),
                    ]);
                }
                if conn.flush().await.is_err() {
                    failed.set(failed.get() + 1);
                    return;
                }
                for _ in 0..LOCKS_PER_CONNECTION {
                    match conn.read().await {
                        Ok(Reply::Int(1)) => {}
                        _ => failed.set(failed.get() + 1),
                    }
                }
            }
        }));
    }
    // One period for every connection's timer to have fired once.
    tokio::time::sleep(REDISSON_PERIOD).await;
    let mut cpu = Vec::with_capacity(periods);
    for _ in 0..periods {
        let pct = server_cpu(ctx, REDISSON_PERIOD).await;
        ctx.progress(&format!("S9 Redisson watchdog: server {pct:.2}% of a core"));
        cpu.push(pct);
    }
    stop.set(true);
    for task in tasks {
        task.abort();
    }
    if failed.get() > 0 {
        return Err(io::Error::other(format!(
            "{} Redisson renewals failed",
            failed.get()
        )));
    }
    Ok(cpu)
}
