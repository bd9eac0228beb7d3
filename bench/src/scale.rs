//! S4: scale. (a) `used_memory` per held lock: 1M locks written with
//! LOCK.ACQUIRE vs the same layout written by the Redisson acquire script.
//! (b) LOCK.RELEASE round trip with 10k callers queued on the key vs with 1.

use std::io;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::sync::mpsc;
use tokio::time::timeout;

use crate::conn::{Conn, Reply, ReplyExt};
use crate::report::{finite, ms, rate, ratio, Bar, Section, INTERFERENCE_PCT, RETRIES};
use crate::server::{wait_for_quiet, CpuMeter};
use crate::stats::{median, percentile};
use crate::{info_field, Ctx};

const OWNERS: usize = 16;

async fn used_memory(addr: &str) -> io::Result<i64> {
    let mut c = Conn::connect(addr).await?;
    info_field(&mut c, "memory", "used_memory")
        .await?
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| io::Error::other("INFO memory has no used_memory"))
}

/// Writes `n` locks `mem:<i>` (owners in Redisson's form, 16 of them),
/// pipelined 1000 at a time, each checked.
async fn write_locks(ctx: &Ctx, n: u64, module: bool) -> io::Result<()> {
    let mut conn = Conn::connect(&ctx.addr).await?;
    let owners: Vec<String> = (0..OWNERS)
        .map(|t| format!("8743c9c0-0795-4907-87fd-6c719a6b4586:{}", t + 1))
        .collect();
    let lease = "600000";
    let mut i = 0u64;
    while i < n {
        let batch = (n - i).min(1000);
        for j in i..i + batch {
            let key = format!("mem:{j}");
            let owner = owners[(j % OWNERS as u64) as usize].as_bytes();
            if module {
                conn.push(&[
                    b"LOCK.ACQUIRE",
                    key.as_bytes(),
                    owner,
                    b"PX",
                    lease.as_bytes(),
                ]);
            } else {
                conn.push(&[
                    b"EVALSHA",
                    ctx.scripts.acquire.as_bytes(),
                    b"1",
                    key.as_bytes(),
                    lease.as_bytes(),
                    owner,
                ]);
            }
        }
        conn.flush().await?;
        for _ in 0..batch {
            let r = conn.read().await?;
            let ok = if module {
                r == Reply::Int(1)
            } else {
                r == Reply::Nil
            };
            if !ok {
                return Err(io::Error::other(format!(
                    "writing lock {i}.. with {}: answered {r:?}",
                    if module {
                        "LOCK.ACQUIRE"
                    } else {
                        "the redisson script"
                    }
                )));
            }
        }
        i += batch;
    }
    Ok(())
}

/// Bytes of used_memory per lock for one layout.
async fn memory_run(ctx: &Ctx, n: u64, module: bool) -> io::Result<f64> {
    let mut c = Conn::connect(&ctx.addr).await?;
    c.ok(&["FLUSHALL", "SYNC"]).await?;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = used_memory(&ctx.addr).await?;
    write_locks(ctx, n, module).await?;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let after = used_memory(&ctx.addr).await?;
    let keys = c.ok(&["DBSIZE"]).await?.int().unwrap_or(-1);
    if keys != n as i64 {
        return Err(io::Error::other(format!(
            "DBSIZE is {keys} after writing {n} locks"
        )));
    }
    c.ok(&["FLUSHALL", "SYNC"]).await?;
    Ok((after - before) as f64 / n as f64)
}

/// A caller whose `LOCK.ACQUIRE ... BLOCK 0` was answered.
type Granted = (usize, Conn, io::Result<Reply>);

fn queue(
    tx: &mpsc::UnboundedSender<Granted>,
    who: usize,
    mut conn: Conn,
) -> tokio::task::JoinHandle<()> {
    let tx = tx.clone();
    tokio::task::spawn_local(async move {
        let r = conn.read().await;
        let _ = tx.send((who, conn, r));
    })
}

struct ReleaseRun {
    waiters: usize,
    /// Server-side µs per LOCK.RELEASE call (INFO commandstats).
    server_us: f64,
    /// Release round trips, µs.
    rtt_us: Vec<f64>,
    queued_seen: i64,
    queued_at_end: i64,
    violations: Vec<String>,
}

async fn lock_waiters(monitor: &mut Conn, key: &str) -> io::Result<i64> {
    let info = monitor.ok(&["LOCK.INFO", key]).await?;
    Ok(match &info {
        Reply::Array(items) => items
            .chunks(2)
            .find(|kv| kv[0] == Reply::BulkString(b"waiters".to_vec()))
            .and_then(|kv| kv[1].int())
            .unwrap_or(0),
        _ => 0,
    })
}

/// One holder, `waiters` callers queued with BLOCK 0; then `releases` times:
/// the owner releases (timed), is queued again at the tail, and the caller
/// handed the lock becomes the owner.
async fn release_run(
    ctx: &Ctx,
    key: &str,
    waiters: usize,
    idle: usize,
    releases: usize,
) -> io::Result<ReleaseRun> {
    // Connections that only say PING once and then sit there: separates what
    // 10k connected clients cost Redis from what 10k queued waiters cost.
    let mut idlers = Vec::with_capacity(idle);
    for _ in 0..idle {
        let mut c = Conn::connect(&ctx.addr).await?;
        c.ok(&["PING"]).await?;
        idlers.push(c);
    }
    let owner_of = |i: usize| format!("w{i}");
    let acquire = |i: usize| {
        crate::conn::command(&[
            b"LOCK.ACQUIRE",
            key.as_bytes(),
            owner_of(i).as_bytes(),
            b"PX",
            b"30000",
            b"BLOCK",
            b"0",
        ])
    };
    let mut monitor = Conn::connect(&ctx.addr).await?;
    let mut owner = Conn::connect(&ctx.addr).await?;
    let mut owner_id = waiters; // the first holder is w<waiters>
    owner.push_raw(&acquire(owner_id));
    owner.flush().await?;
    match owner.read().await? {
        Reply::Int(1) => {}
        other => return Err(io::Error::other(format!("LOCK.ACQUIRE answered {other:?}"))),
    }
    let (tx, mut rx) = mpsc::unbounded_channel::<Granted>();
    let mut tasks = Vec::with_capacity(waiters + releases);
    for i in 0..waiters {
        let mut c = Conn::connect(&ctx.addr).await?;
        c.push_raw(&acquire(i));
        c.flush().await?;
        tasks.push(queue(&tx, i, c));
    }
    let until = Instant::now() + Duration::from_secs(20);
    let mut queued_seen;
    loop {
        queued_seen = lock_waiters(&mut monitor, key).await?;
        if queued_seen >= waiters as i64 || Instant::now() > until {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    if queued_seen != waiters as i64 {
        return Err(io::Error::other(format!(
            "LOCK.INFO {key} shows {queued_seen} waiters after queueing {waiters}"
        )));
    }
    monitor.ok(&["CONFIG", "RESETSTAT"]).await?;
    let mut run = ReleaseRun {
        waiters,
        server_us: f64::NAN,
        rtt_us: Vec::with_capacity(releases),
        queued_seen,
        queued_at_end: 0,
        violations: Vec::new(),
    };
    let warm = 10;
    let release_cmd =
        |i: usize| crate::conn::command(&[b"LOCK.RELEASE", key.as_bytes(), owner_of(i).as_bytes()]);
    for n in 0..warm + releases {
        // Mutual exclusion: while `owner` holds the lock (until its release
        // is sent) no other caller may have been handed it.
        tokio::task::yield_now().await;
        if let Ok((who, _, _)) = rx.try_recv() {
            run.violations.push(format!(
                "S4 {key}: {} was answered while {} holds the lock",
                owner_of(who),
                owner_of(owner_id)
            ));
        }
        let cmd = release_cmd(owner_id);
        let t0 = Instant::now();
        let r = owner.raw(&cmd).await?;
        let dt = t0.elapsed();
        if r != Reply::Int(0) {
            return Err(io::Error::other(format!(
                "LOCK.RELEASE {key} {} answered {r:?}",
                owner_of(owner_id)
            )));
        }
        if n >= warm {
            run.rtt_us.push(dt.as_secs_f64() * 1e6);
        }
        // Back to the tail of the queue.
        owner.push_raw(&acquire(owner_id));
        owner.flush().await?;
        tasks.push(queue(&tx, owner_id, owner));
        let (who, conn, reply) = timeout(Duration::from_secs(10), rx.recv())
            .await
            .map_err(|_| {
                io::Error::other(format!(
                    "no waiter of {key} was handed the lock within 10 s"
                ))
            })?
            .ok_or_else(|| io::Error::other("waiter channel closed"))?;
        match reply? {
            Reply::Int(1) => {}
            other => {
                return Err(io::Error::other(format!(
                    "LOCK.ACQUIRE {key} {} BLOCK 0 answered {other:?}",
                    owner_of(who)
                )))
            }
        }
        owner = conn;
        owner_id = who;
    }
    run.queued_at_end = lock_waiters(&mut monitor, key).await?;
    run.server_us = info_field(&mut monitor, "commandstats", "cmdstat_lock.release")
        .await?
        .and_then(|v| {
            v.split(',')
                .find_map(|kv| kv.strip_prefix("usec_per_call="))
                .and_then(|x| x.parse().ok())
        })
        .unwrap_or(f64::NAN);
    for t in tasks {
        t.abort();
    }
    drop(idlers);
    Ok(run)
}

pub async fn s4(ctx: &Ctx) -> io::Result<Section> {
    let opts = &ctx.opts;
    let n = opts.s4_locks;
    let mut section = Section::new(
        "S4",
        format!(
            "scale: {} held locks (memory); {} callers queued on one key (release latency)",
            rate(n as f64),
            rate(opts.s4_waiters as f64)
        ),
    );
    let mut module_mem = Vec::new();
    let mut redisson_mem = Vec::new();
    let mem_reps = opts.reps(crate::options::REPS_S4_MEMORY);
    let rel_reps = opts.reps(crate::options::REPS_S4_RELEASE);
    for _ in 0..mem_reps {
        let m = memory_run(ctx, n, true).await?;
        let r = memory_run(ctx, n, false).await?;
        ctx.progress(&format!(
            "S4 memory: module {m:.1} B/lock, redisson layout {r:.1} B/lock"
        ));
        module_mem.push(m);
        redisson_mem.push(r);
    }
    let (mm, rm) = (median(&module_mem), median(&redisson_mem));
    section.line(format!(
        "memory: used_memory growth / {} locks (keys mem:<i>, {OWNERS} owners '<uuid>:<n>', lease 600 s), median of {} runs, FLUSHALL before each",
        rate(n as f64),
        mem_reps
    ));
    section.line(format!(
        "  LOCK.ACQUIRE         {mm:>8.1} bytes/lock   runs: {}",
        module_mem
            .iter()
            .map(|x| format!("{x:.1}"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    section.line(format!(
        "  redisson script      {rm:>8.1} bytes/lock   runs: {}",
        redisson_mem
            .iter()
            .map(|x| format!("{x:.1}"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    section.line(format!(
        "  difference           {:>8.1} bytes/lock",
        mm - rm
    ));
    section.bars.push(Bar::at_most_bytes(
        "module bytes/lock minus redisson layout",
        mm - rm,
        16.0,
    ));

    let big = opts.s4_waiters;
    // (waiters, idle connections)
    let variants = [(big, 0), (1, 0), (1, big)];
    let mut runs: Vec<Vec<ReleaseRun>> = variants.iter().map(|_| Vec::new()).collect();
    for rep in 0..rel_reps {
        for (v, &(waiters, idle)) in variants.iter().enumerate() {
            let mut attempt = 0;
            let r = loop {
                let key = format!("s4-hot-{rep}-{waiters}-{idle}-{attempt}");
                let meter = CpuMeter::start(ctx.server_pid);
                let r = release_run(ctx, &key, waiters, idle, opts.s4_releases).await?;
                let others = meter.stop().others;
                section.violations.extend(r.violations.iter().cloned());
                ctx.settle(&mut section).await;
                if others > INTERFERENCE_PCT && attempt < RETRIES {
                    section
                        .discarded
                        .push(json!({"waiters": waiters, "idle": idle,
                        "others_cpu_pct": others, "rtt_us": r.rtt_us}));
                    let waited = wait_for_quiet(ctx.server_pid, INTERFERENCE_PCT);
                    ctx.progress(&format!(
                        "S4 release: other processes used {others:.0}% of a core: waited {:.1} s, measuring again",
                        waited.as_secs_f64()
                    ));
                    attempt += 1;
                    continue;
                }
                if others > INTERFERENCE_PCT {
                    section.disturbed_kept += 1;
                }
                break r;
            };
            ctx.progress(&format!(
                "S4 release with {waiters} waiters, {idle} idle connections: p50 {:.1} us, p99 {:.1} us",
                percentile(&r.rtt_us, 50.0),
                percentile(&r.rtt_us, 99.0)
            ));
            runs[v].push(r);
        }
    }
    let stat = |runs: &[ReleaseRun], p: f64| {
        median(
            &runs
                .iter()
                .map(|r| percentile(&r.rtt_us, p) / 1000.0)
                .collect::<Vec<_>>(),
        )
    };
    let (deep, one, idle) = (&runs[0], &runs[1], &runs[2]);
    let server_us =
        |runs: &[ReleaseRun]| median(&runs.iter().map(|r| r.server_us).collect::<Vec<_>>());
    let (deep50, deep99, one50, one99, idle50, idle99) = (
        stat(deep, 50.0),
        stat(deep, 99.0),
        stat(one, 50.0),
        stat(one, 99.0),
        stat(idle, 50.0),
        stat(idle, 99.0),
    );
    section.line(format!(
        "release: LOCK.RELEASE round trip handing to the queue head; the releaser re-queues at the tail; {} timed releases per run after 10, median of {} runs",
        opts.s4_releases, rel_reps
    ));
    section.line(format!(
        "  {big:>6} waiters:                         p50 {} ms  p99 {} ms  server {:.1} us/call  (LOCK.INFO waiters: {} at start, {} at end)",
        ms(deep50),
        ms(deep99),
        server_us(deep),
        deep.first().map(|r| r.queued_seen).unwrap_or(-1),
        deep.first().map(|r| r.queued_at_end).unwrap_or(-1),
    ));
    section.line(format!(
        "  {:>6} waiter:                          p50 {} ms  p99 {} ms  server {:.1} us/call",
        1,
        ms(one50),
        ms(one99),
        server_us(one)
    ));
    section.line(format!(
        "  {:>6} waiter + {big} idle connections:  p50 {} ms  p99 {} ms  server {:.1} us/call  (info: what {big} clients cost Redis itself)",
        1,
        ms(idle50),
        ms(idle99),
        server_us(idle)
    ));
    section.line("  (server us/call: INFO commandstats usec_per_call of lock.release, the command's own time in the server)");
    section.bars.push(Bar::ratio_at_most(
        format!("release p50 with {big} waiters vs with 1"),
        ratio(deep50, one50),
        1.5,
    ));
    let runs_json = |runs: &[ReleaseRun]| {
        runs.iter()
            .map(|r| {
                json!({"waiters": r.waiters, "queued_seen": r.queued_seen,
                       "server_usec_per_release": finite(r.server_us),
                       "queued_at_end": r.queued_at_end,
                       "p50_ms": percentile(&r.rtt_us, 50.0) / 1000.0,
                       "p99_ms": percentile(&r.rtt_us, 99.0) / 1000.0,
                       "rtt_us": r.rtt_us})
            })
            .collect::<Vec<_>>()
    };
    section.json = json!({
        "memory": {"locks": n, "owners": OWNERS,
            "module_bytes_per_lock": {"median": finite(mm), "runs": module_mem},
            "redisson_bytes_per_lock": {"median": finite(rm), "runs": redisson_mem},
            "difference": finite(mm - rm)},
        "release": {"releases_per_run": opts.s4_releases,
            "deep": {"waiters": big, "p50_ms": finite(deep50), "p99_ms": finite(deep99), "runs": runs_json(deep)},
            "one": {"waiters": 1, "p50_ms": finite(one50), "p99_ms": finite(one99), "runs": runs_json(one)},
            "one_with_idle_connections": {"waiters": 1, "idle_connections": big, "p50_ms": finite(idle50),
                "p99_ms": finite(idle99), "runs": runs_json(idle)},
            "ratio_of_medians": finite(ratio(deep50, one50))},
    });
    Ok(section)
}
