//! S3: lease expiry. A holder takes the lock with a short lease and vanishes
//! (never releases, keeps its connection); 16 waiters wait; each waiter that is
//! granted vanishes the same way, so one repetition is a chain of 16 grants.
//! Lateness of a grant = this machine's wall clock (CLOCK_REALTIME, which the
//! server uses too) when the grant arrives, minus the previous holder's
//! absolute deadline (`PEXPIRETIME`, read by that holder right after its
//! grant). A negative lateness means two holders at once: a violation.

use std::io;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::json;
use tokio::sync::mpsc;
use tokio::time::timeout;

use crate::conn::{Conn, Reply, ReplyExt};
use crate::load::{Harness, LoadSpec, Proto};
use crate::report::{ms, Bar, Section, INTERFERENCE_PCT, RETRIES};
use crate::server::{wait_for_quiet, CpuMeter};
use crate::stats::percentile;
use crate::Ctx;

const WAITERS: usize = 16;
const LEASE_MS: u64 = 100;

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

async fn pexpiretime(conn: &mut Conn, key: &str) -> io::Result<i64> {
    match conn.ok(&["PEXPIRETIME", key]).await? {
        Reply::Int(t) if t > 0 => Ok(t),
        other => Err(io::Error::other(format!(
            "PEXPIRETIME {key} right after a grant answered {other:?}"
        ))),
    }
}

/// What one chain gave: lateness of each grant in ms, violations, errors.
#[derive(Default)]
struct Chain {
    lateness_ms: Vec<f64>,
    violations: Vec<String>,
    errors: Vec<String>,
    queued: Option<i64>,
}

/// A grant: (waiter, wall clock at receipt in µs, own deadline in ms).
type Grant = (usize, i64, i64);

async fn follow_chain(
    key: &str,
    deadline0: i64,
    rx: &mut mpsc::UnboundedReceiver<io::Result<Grant>>,
    chain: &mut Chain,
    proto: &str,
) {
    let mut prev = deadline0;
    for n in 0..WAITERS {
        let wait = Duration::from_millis(LEASE_MS * 3 + 2000);
        match timeout(wait, rx.recv()).await {
            Ok(Some(Ok((who, at_us, own_deadline)))) => {
                let late_us = at_us - prev * 1000;
                if late_us < 0 {
                    chain.violations.push(format!(
                        "{proto} S3 {key}: waiter {who} granted {:.3} ms before the previous holder's lease ended",
                        -late_us as f64 / 1000.0
                    ));
                }
                chain.lateness_ms.push(late_us as f64 / 1000.0);
                prev = own_deadline;
            }
            Ok(Some(Err(e))) => {
                chain.errors.push(format!("{proto} S3 {key}: {e}"));
                return;
            }
            Ok(None) => return,
            Err(_) => {
                chain.errors.push(format!(
                    "{proto} S3 {key}: grant {} of {WAITERS} did not come within {} ms of the last",
                    n + 1,
                    wait.as_millis()
                ));
                return;
            }
        }
    }
}

async fn module_chain(ctx: &Ctx, key: &str) -> io::Result<Chain> {
    let mut chain = Chain::default();
    let mut monitor = Conn::connect(&ctx.addr).await?;
    let mut holder = Conn::connect(&ctx.addr).await?;
    let mut waiters = Vec::new();
    for _ in 0..WAITERS {
        waiters.push(Conn::connect(&ctx.addr).await?);
    }
    let lease = LEASE_MS.to_string();
    match holder
        .ok(&["LOCK.ACQUIRE", key, "holder", "PX", &lease])
        .await?
    {
        Reply::Int(1) => {}
        other => return Err(io::Error::other(format!("LOCK.ACQUIRE answered {other:?}"))),
    }
    let deadline0 = pexpiretime(&mut holder, key).await?;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for (i, mut w) in waiters.into_iter().enumerate() {
        let owner = format!("w{i}");
        w.push(&[
            b"LOCK.ACQUIRE",
            key.as_bytes(),
            owner.as_bytes(),
            b"PX",
            lease.as_bytes(),
            b"BLOCK",
            b"10000",
        ]);
        w.flush().await?;
        let tx = tx.clone();
        let key = key.to_string();
        tasks.push(tokio::task::spawn_local(async move {
            let got: io::Result<Grant> = async {
                let r = w.read().await?;
                let at = now_us();
                if r != Reply::Int(1) {
                    return Err(io::Error::other(format!(
                        "LOCK.ACQUIRE {key} {owner} BLOCK answered {r:?}"
                    )));
                }
                let own = pexpiretime(&mut w, &key).await?;
                Ok((i, at, own))
            }
            .await;
            let _ = tx.send(got);
            // Vanish: keep the connection open, never release.
            std::future::pending::<()>().await;
            drop(w);
        }));
    }
    drop(tx);
    // All 16 queued before the holder's lease ends?
    let until = Instant::now() + Duration::from_millis(LEASE_MS / 2);
    loop {
        let info = monitor.ok(&["LOCK.INFO", key]).await?;
        let queued = match &info {
            Reply::Array(items) => items
                .chunks(2)
                .find(|kv| kv[0] == Reply::BulkString(b"waiters".to_vec()))
                .and_then(|kv| kv[1].int()),
            _ => None,
        };
        chain.queued = queued;
        if queued == Some(WAITERS as i64) || Instant::now() > until {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    if chain.queued != Some(WAITERS as i64) {
        chain.errors.push(format!(
            "module S3 {key}: LOCK.INFO shows {:?} waiters, {WAITERS} expected",
            chain.queued
        ));
    }
    follow_chain(key, deadline0, &mut rx, &mut chain, "module").await;
    for t in tasks {
        t.abort();
    }
    drop(holder);
    Ok(chain)
}

async fn redisson_chain(ctx: &Ctx, key_prefix: &str) -> io::Result<Chain> {
    let mut chain = Chain::default();
    // Client 0 is the holder (a process of its own), the other 16 the waiters.
    let spec = LoadSpec {
        proto: Proto::Redisson,
        clients: WAITERS,
        keys: 1,
        threads_per_process: ctx.opts.threads_per_process,
        warmup: Duration::ZERO,
        measure: Duration::ZERO,
        lease_ms: LEASE_MS,
        block_ms: 0,
        prefix: key_prefix.to_string(),
        seed: 0,
        read_fraction: None,
        multi: None,
        semaphore: None,
    };
    let key = format!("{key_prefix}:0");
    let mut harness = Harness::new(&ctx.addr, &spec, &ctx.scripts).await?;
    let mut holder = Conn::connect(&ctx.addr).await?;
    let lease = LEASE_MS.to_string();
    match holder
        .ok(&[
            "EVALSHA",
            &ctx.scripts.acquire,
            "1",
            &key,
            &lease,
            "8743c9c0-0795-4907-87fd-ffffffffffff:1",
        ])
        .await?
    {
        Reply::Nil => {}
        other => {
            return Err(io::Error::other(format!(
                "redisson acquire script answered {other:?}"
            )))
        }
    }
    let deadline0 = pexpiretime(&mut holder, &key).await?;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for (i, mut c) in std::mem::take(&mut harness.clients).into_iter().enumerate() {
        let tx = tx.clone();
        let key = key.clone();
        tasks.push(tokio::task::spawn_local(async move {
            let got: io::Result<Grant> = async {
                if !c.acquire_first().await? {
                    return Err(io::Error::other("stopped before the grant"));
                }
                let at = now_us();
                let own = pexpiretime(&mut c.conn, &key).await?;
                Ok((i, at, own))
            }
            .await;
            let _ = tx.send(got);
            std::future::pending::<()>().await;
            drop(c);
        }));
    }
    drop(tx);
    follow_chain(&key, deadline0, &mut rx, &mut chain, "redisson").await;
    for t in tasks {
        t.abort();
    }
    chain.errors.extend(harness.errors());
    harness.close();
    Ok(chain)
}

pub async fn s3(ctx: &Ctx) -> io::Result<Section> {
    let mut section = Section::new(
        "S3",
        format!(
            "lease expiry: holder vanishes, {WAITERS} waiters, each granted waiter vanishes too (lease {LEASE_MS} ms)"
        ),
    );
    let reps = ctx.opts.reps(crate::options::REPS_S3);
    let mut module = Vec::new();
    let mut redisson = Vec::new();
    for rep in 0..reps {
        let mut attempt = 0;
        let (m, r) = loop {
            let meter = CpuMeter::start(ctx.server_pid);
            let m = module_chain(ctx, &format!("s3-module-{rep}-{attempt}")).await?;
            let r = redisson_chain(ctx, &format!("s3-redisson-{rep}-{attempt}")).await?;
            let others = meter.stop().others;
            // Violations and errors count in every repetition, kept or not.
            for c in [&m, &r] {
                section.violations.extend(c.violations.iter().cloned());
                section.errors.extend(c.errors.iter().cloned());
            }
            if others > INTERFERENCE_PCT && attempt < RETRIES {
                section
                    .discarded
                    .push(json!({"rep": rep, "others_cpu_pct": others,
                    "module_lateness_ms": m.lateness_ms, "redisson_lateness_ms": r.lateness_ms}));
                let waited = wait_for_quiet(ctx.server_pid, INTERFERENCE_PCT);
                ctx.progress(&format!(
                    "S3 rep {rep}: other processes used {others:.0}% of a core: waited {:.1} s, measuring again",
                    waited.as_secs_f64()
                ));
                attempt += 1;
                continue;
            }
            if others > INTERFERENCE_PCT {
                section.disturbed_kept += 1;
            }
            break (m, r);
        };
        ctx.progress(&format!(
            "S3 rep {rep}: module max lateness {} ms, redisson {} ms",
            ms(m.lateness_ms.iter().cloned().fold(f64::NAN, f64::max)),
            ms(r.lateness_ms.iter().cloned().fold(f64::NAN, f64::max)),
        ));
        module.push(m);
        redisson.push(r);
    }
    ctx.settle(&mut section).await;
    section.line(format!(
        "{reps} repetitions x {WAITERS} grants; lateness = wall clock at grant receipt - previous holder's PEXPIRETIME"
    ));
    section.line(format!(
        "{:<10} {:>7} {:>9} {:>9} {:>9} {:>9}",
        "protocol", "grants", "p50 ms", "p99 ms", "max ms", "min ms"
    ));
    let mut stats_json = serde_json::Map::new();
    let mut module_p99 = f64::NAN;
    for (name, chains) in [("module", &module), ("redisson", &redisson)] {
        let all: Vec<f64> = chains
            .iter()
            .flat_map(|c| c.lateness_ms.iter().copied())
            .collect();
        let p50 = percentile(&all, 50.0);
        let p99 = percentile(&all, 99.0);
        let max = all.iter().copied().fold(f64::NAN, f64::max);
        let min = all.iter().copied().fold(f64::NAN, f64::min);
        if name == "module" {
            module_p99 = p99;
        }
        section.line(format!(
            "{:<10} {:>7} {:>9} {:>9} {:>9} {:>9}",
            name,
            all.len(),
            ms(p50),
            ms(p99),
            ms(max),
            ms(min)
        ));
        stats_json.insert(
            name.to_string(),
            json!({
                "grants": all.len(), "p50_ms": p50, "p99_ms": p99, "max_ms": max, "min_ms": min,
                "runs": chains.iter().map(|c| json!({
                    "lateness_ms": c.lateness_ms, "queued_seen": c.queued,
                })).collect::<Vec<_>>(),
            }),
        );
    }
    section.line(
        "redisson waiters learn of the expiry only by sleeping the PTTL they were told (no bar)",
    );
    section.bars.push(Bar::at_most_ms(
        "module grant lateness p99",
        module_p99,
        3.0,
    ));
    section.json = json!({"waiters": WAITERS, "lease_ms": LEASE_MS, "reps": reps,
        "protocols": stats_json});
    Ok(section)
}
