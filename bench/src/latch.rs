//! S13: a count-down latch releasing 1,000 waiters at once. The module:
//! 1,000 connections blocked in `LATCH.AWAIT key BLOCK 0`, one
//! `LATCH.COUNTDOWN key` to zero, timed from sending it until the last
//! waiter's reply arrived. Redisson's `RCountDownLatch` as a reference: 1,000
//! waiters each in `await()` (its own pub/sub connection subscribed to
//! `redisson_countdownlatch__channel__{key}` and its own command
//! connection), released by Redisson's count-down script publishing `0`;
//! a waiter is done when its `getCount()` after the message answers 0.

use std::io;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::task::JoinHandle;
use tokio::time::timeout_at;

use crate::conn::{Conn, Reply, ReplyExt};
use crate::load::Proto;
use crate::report::{finite, ms, Section};
use crate::stats::{median, percentile, range};
use crate::Ctx;

/// Waiters released by one count-down.
pub const WAITERS: usize = 1000;

/// Redisson's `RCountDownLatch.countDownAsync()` script, the exact text of
/// `RedissonCountDownLatch.java` (Redisson HEAD 6686397, 2026-08-21):
/// KEYS[1] the latch, KEYS[2] its channel; ARGV[1] the message (0), ARGV[2]
/// the publish command.
pub const REDISSON_COUNT_DOWN: &str = concat!(
    "local v = redis.call('decr', KEYS[1]);",
    "if v <= 0 then redis.call('del', KEYS[1]) end;",
    "if v == 0 then redis.call(ARGV[2], KEYS[2], ARGV[1]) end;",
);

/// Redisson's `trySetCount` script (same file): KEYS[1] the latch, KEYS[2]
/// its channel; ARGV[1] the message (1), ARGV[2] the count, ARGV[3] the
/// publish command. 1 = set.
pub const REDISSON_TRY_SET_COUNT: &str = concat!(
    "if redis.call('exists', KEYS[1]) == 0 then ",
    "redis.call('set', KEYS[1], ARGV[2]); ",
    "redis.call(ARGV[3], KEYS[2], ARGV[1]); ",
    "return 1 ",
    "else ",
    "return 0 ",
    "end",
);

/// Where Redisson's latch waiters listen: `redisson_countdownlatch__channel__{key}`.
pub fn latch_channel(key: &[u8]) -> Vec<u8> {
    [b"redisson_countdownlatch__channel__{".as_slice(), key, b"}"].concat()
}

/// One round: times from sending the count-down, in ms.
#[derive(Clone, Debug)]
struct Round {
    /// Until the last waiter was done (the figure).
    all: f64,
    /// Until half of the waiters were done, and the first.
    median: f64,
    first: f64,
    /// Until the count-down's own reply arrived.
    countdown_reply: f64,
    /// Redisson: until the last waiter's message arrived (before its GET).
    all_messages: Option<f64>,
    /// CPU time of the server's main thread from just before the
    /// count-down was sent until the last waiter was done, ms
    /// (`/proc/<pid>/schedstat`, ns resolution).
    server_cpu: f64,
}

impl Round {
    fn of(
        t0: Instant,
        countdown: Instant,
        done: &[Instant],
        messages: Option<&[Instant]>,
        server_cpu: f64,
    ) -> Round {
        let since = |t: &Instant| t.saturating_duration_since(t0).as_secs_f64() * 1000.0;
        let v: Vec<f64> = done.iter().map(since).collect();
        Round {
            all: v.iter().copied().fold(0.0, f64::max),
            median: percentile(&v, 50.0),
            first: v.iter().copied().fold(f64::INFINITY, f64::min),
            countdown_reply: since(&countdown),
            all_messages: messages.map(|m| m.iter().map(since).fold(0.0, f64::max)),
            server_cpu,
        }
    }

    fn json(&self) -> Value {
        json!({"all_done_ms": self.all, "median_done_ms": self.median,
               "first_done_ms": self.first, "countdown_reply_ms": self.countdown_reply,
               "all_messages_ms": self.all_messages, "server_cpu_ms": finite(self.server_cpu)})
    }
}

/// The `waiters` field of `LATCH.INFO key` (RESP2: a flat array), 0 when
/// the latch is missing.
async fn latch_waiters(admin: &mut Conn, key: &[u8]) -> io::Result<i64> {
    let r = admin.cmd(&[b"LATCH.INFO", key]).await?;
    match &r {
        Reply::Nil => Ok(0),
        Reply::Array(items) => Ok(items
            .chunks(2)
            .find(|kv| kv[0] == Reply::BulkString(b"waiters".to_vec()))
            .and_then(|kv| kv.get(1).and_then(ReplyExt::int))
            .unwrap_or(0)),
        other => Err(io::Error::other(format!("LATCH.INFO answered {other:?}"))),
    }
}

fn deadline(secs: u64) -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(secs)
}

fn err(msg: String) -> io::Error {
    io::Error::other(msg)
}

/// Joins the waiters' tasks (each must finish within 20 s).
async fn join_all<T>(tasks: Vec<JoinHandle<io::Result<T>>>, what: &str) -> io::Result<Vec<T>> {
    let until = deadline(20);
    let mut out = Vec::with_capacity(tasks.len());
    let mut first_err = None;
    for t in tasks {
        match timeout_at(until, t).await {
            Ok(Ok(Ok(v))) => out.push(v),
            Ok(Ok(Err(e))) => {
                first_err.get_or_insert(e);
            }
            Ok(Err(e)) => {
                first_err.get_or_insert(err(format!("{what} task: {e}")));
            }
            Err(_) => {
                first_err.get_or_insert(err(format!("{what}: a waiter was not done after 20 s")));
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// The module: `LATCH.INIT key 1`, every connection `LATCH.AWAIT key BLOCK
/// 0` (all seen waiting by `LATCH.INFO`), then `LATCH.COUNTDOWN key`
/// (must answer 0); every waiter must answer 0.
async fn module_round(
    admin: &mut Conn,
    conns: &mut Vec<Conn>,
    key: &[u8],
    server_pid: Option<u32>,
) -> io::Result<Round> {
    let r = admin.cmd(&[b"LATCH.INIT", key, b"1"]).await?;
    if r != Reply::Int(1) {
        return Err(err(format!("LATCH.INIT answered {r:?}")));
    }
    let mut tasks = Vec::with_capacity(conns.len());
    for mut c in conns.drain(..) {
        let key = key.to_vec();
        tasks.push(tokio::task::spawn_local(async move {
            c.push(&[b"LATCH.AWAIT", &key, b"BLOCK", b"0"]);
            c.flush().await?;
            let r = c.read().await?;
            let at = Instant::now();
            if r != Reply::Int(0) {
                return Err(err(format!("LATCH.AWAIT answered {r:?}")));
            }
            Ok((c, at))
        }));
    }
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let n = latch_waiters(admin, key).await?;
        if n == WAITERS as i64 {
            break;
        }
        if Instant::now() > until {
            for t in &tasks {
                t.abort();
            }
            return Err(err(format!(
                "LATCH.INFO shows {n} waiters after {WAITERS} sent LATCH.AWAIT ... BLOCK 0"
            )));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let cpu0 = crate::server::on_cpu_ms(server_pid);
    let t0 = Instant::now();
    let r = admin.cmd(&[b"LATCH.COUNTDOWN", key]).await?;
    let countdown = Instant::now();
    if r != Reply::Int(0) {
        return Err(err(format!("LATCH.COUNTDOWN answered {r:?}")));
    }
    let done = join_all(tasks, "LATCH.AWAIT").await?;
    let cpu = crate::server::on_cpu_ms(server_pid) - cpu0;
    let times: Vec<Instant> = done.iter().map(|(_, at)| *at).collect();
    conns.extend(done.into_iter().map(|(c, _)| c));
    let exists = admin.cmd(&[b"EXISTS", key]).await?;
    if exists != Reply::Int(0) {
        return Err(err(format!(
            "the latch still exists after counting down to zero: EXISTS answered {exists:?}"
        )));
    }
    Ok(Round::of(t0, countdown, &times, None, cpu))
}

/// Reads a pub/sub connection until a reply of `kind` on `channel`.
async fn pubsub_until(sub: &mut Conn, kind: &[u8], channel: &[u8]) -> io::Result<Reply> {
    loop {
        let r = sub.read().await?;
        if let Reply::Array(items) = &r {
            if items.len() == 3
                && items[0] == Reply::BulkString(kind.to_vec())
                && items[1] == Reply::BulkString(channel.to_vec())
            {
                return Ok(items[2].clone());
            }
        }
    }
}

/// Redisson: `trySetCount(1)` by its script; each waiter runs `await()`:
/// `getCount()` (GET, must be 1), subscribe (confirmed), `getCount()` again,
/// then waits for the message `0`, and is done when `getCount()` answers 0
/// (GET: nil); then unsubscribes (not timed). The count-down is Redisson's
/// script.
async fn redisson_round(
    admin: &mut Conn,
    pairs: &mut Vec<(Conn, Conn)>,
    key: &[u8],
    shas: &(String, String),
    server_pid: Option<u32>,
) -> io::Result<Round> {
    let channel = latch_channel(key);
    let r = admin
        .cmd(&[
            b"EVALSHA",
            shas.0.as_bytes(),
            b"2",
            key,
            &channel,
            b"1",
            b"1",
            b"publish",
        ])
        .await?;
    if r != Reply::Int(1) {
        return Err(err(format!("redisson trySetCount script answered {r:?}")));
    }
    let ready = std::rc::Rc::new(tokio::sync::Semaphore::new(0));
    let mut tasks = Vec::with_capacity(pairs.len());
    for (mut sub, mut cmd) in pairs.drain(..) {
        let (key, channel, ready) = (key.to_vec(), channel.clone(), ready.clone());
        tasks.push(tokio::task::spawn_local(async move {
            let one = Reply::BulkString(b"1".to_vec());
            let r = cmd.cmd(&[b"GET", &key]).await?;
            if r != one {
                return Err(err(format!(
                    "getCount (GET) before subscribing answered {r:?}"
                )));
            }
            sub.push(&[b"SUBSCRIBE", &channel]);
            sub.flush().await?;
            pubsub_until(&mut sub, b"subscribe", &channel).await?;
            let r = cmd.cmd(&[b"GET", &key]).await?;
            if r != one {
                return Err(err(format!(
                    "getCount (GET) after subscribing answered {r:?}"
                )));
            }
            ready.add_permits(1);
            let msg = pubsub_until(&mut sub, b"message", &channel).await?;
            let message_at = Instant::now();
            if msg != Reply::BulkString(b"0".to_vec()) {
                return Err(err(format!("the latch's channel said {msg:?}, not 0")));
            }
            let r = cmd.cmd(&[b"GET", &key]).await?;
            let done_at = Instant::now();
            if r != Reply::Nil {
                return Err(err(format!(
                    "getCount (GET) after the message answered {r:?}"
                )));
            }
            Ok((sub, cmd, message_at, done_at))
        }));
    }
    let all_ready = timeout_at(deadline(20), ready.acquire_many(WAITERS as u32)).await;
    if !matches!(all_ready, Ok(Ok(_))) {
        for t in &tasks {
            t.abort();
        }
        return Err(err(format!(
            "{} of {WAITERS} redisson waiters subscribed within 20 s",
            ready.available_permits()
        )));
    }
    // Every waiter's SUBSCRIBE was confirmed on its own connection. (Not
    // `PUBSUB NUMSUB`: Valkey 9.1.2 answers it with a wrong number, e.g.
    // 453215406, once a channel has 1,000 subscribers.)
    let cpu0 = crate::server::on_cpu_ms(server_pid);
    let t0 = Instant::now();
    let r = admin
        .cmd(&[
            b"EVALSHA",
            shas.1.as_bytes(),
            b"2",
            key,
            &channel,
            b"0",
            b"publish",
        ])
        .await?;
    let countdown = Instant::now();
    if r != Reply::Nil {
        return Err(err(format!("redisson countDown script answered {r:?}")));
    }
    let mut done = join_all(tasks, "redisson await").await?;
    let cpu = crate::server::on_cpu_ms(server_pid) - cpu0;
    let messages: Vec<Instant> = done.iter().map(|d| d.2).collect();
    let times: Vec<Instant> = done.iter().map(|d| d.3).collect();
    // Each waiter unsubscribes once done (Redisson's finally), outside
    // the timed window.
    for (sub, _, _, _) in done.iter_mut() {
        sub.push(&[b"UNSUBSCRIBE", &channel]);
        sub.flush().await?;
    }
    for (sub, _, _, _) in done.iter_mut() {
        pubsub_until(sub, b"unsubscribe", &channel).await?;
    }
    pairs.extend(done.into_iter().map(|(s, c, _, _)| (s, c)));
    Ok(Round::of(t0, countdown, &times, Some(&messages), cpu))
}

pub async fn s13(ctx: &Ctx) -> io::Result<Section> {
    let reps = ctx.opts.reps(crate::options::REPS_S13);
    let protos = ctx.protocols(&[Proto::Module, Proto::RedissonClient, Proto::Redisson]);
    let mut section = Section::new(
        "S13",
        format!("a latch releasing {WAITERS} waiters: one count-down to zero, time until every waiter has its answer"),
    );
    let mut admin = Conn::connect(&ctx.addr).await?;
    let shas = (
        admin
            .ok(&["SCRIPT", "LOAD", REDISSON_TRY_SET_COUNT])
            .await?
            .text(),
        admin
            .ok(&["SCRIPT", "LOAD", REDISSON_COUNT_DOWN])
            .await?
            .text(),
    );
    let mut module_conns = Vec::new();
    let mut redisson_pairs = Vec::new();
    for p in &protos {
        for _ in 0..WAITERS {
            match p {
                Proto::Module => module_conns.push(Conn::connect(&ctx.addr).await?),
                // The real client opens its own.
                Proto::RedissonClient => break,
                _ => redisson_pairs.push((
                    Conn::connect(&ctx.addr).await?,
                    Conn::connect(&ctx.addr).await?,
                )),
            }
        }
    }
    admin.ok(&["CONFIG", "RESETSTAT"]).await?;
    let mut rounds: Vec<(Proto, Vec<Round>)> = protos.iter().map(|&p| (p, Vec::new())).collect();
    for rep in 0..reps {
        for (p, runs) in rounds.iter_mut() {
            let key = format!("s13-{}-{rep}", p.name()).into_bytes();
            let round = match p {
                Proto::Module => {
                    module_round(&mut admin, &mut module_conns, &key, ctx.server_pid).await
                }
                Proto::RedissonClient => redisson_client_round(ctx, &key),
                _ => {
                    let pid = ctx.server_pid;
                    redisson_round(&mut admin, &mut redisson_pairs, &key, &shas, pid).await
                }
            };
            let round = match round {
                Ok(r) => r,
                Err(e) => {
                    section
                        .errors
                        .push(format!("{} round {}: {e}", p.name(), rep + 1));
                    // The waiters' connections went with the failed round.
                    return finish(ctx, section, &rounds, &mut admin).await;
                }
            };
            ctx.progress(&format!(
                "S13 {} {WAITERS} waiters: all done {} ms after the count-down was sent (median {} ms, first {} ms, server CPU {} ms{})",
                p.name(),
                ms(round.all),
                ms(round.median),
                ms(round.first),
                ms(round.server_cpu),
                round
                    .all_messages
                    .map_or(String::new(), |m| format!(", last message {} ms", ms(m)))
            ));
            runs.push(round);
            ctx.settle(&mut section).await;
        }
    }
    finish(ctx, section, &rounds, &mut admin).await
}

/// Waiter threads per Redisson instance of the real client's rounds: 1,000
/// waiters in 100 instances.
pub const CLIENT_THREADS_PER_PROCESS: usize = 10;

/// A round of the real Redisson client (interop/redisson's load driver).
fn redisson_client_round(ctx: &Ctx, key: &[u8]) -> io::Result<Round> {
    let key = String::from_utf8_lossy(key).into_owned();
    let (port, pid) = (ctx.port(), ctx.server_pid);
    let r = ctx.with_redisson(|c| c.latch(port, pid, &key, WAITERS, CLIENT_THREADS_PER_PROCESS))?;
    if !r.errors.is_empty() || r.released != WAITERS as u64 {
        return Err(err(format!(
            "the Redisson client released {} of {WAITERS} waiters: {:?}",
            r.released, r.errors
        )));
    }
    Ok(Round {
        all: r.all,
        median: r.median,
        first: r.first,
        countdown_reply: r.countdown_reply,
        all_messages: None,
        server_cpu: r.server_cpu_ms,
    })
}

async fn finish(
    ctx: &Ctx,
    mut section: Section,
    rounds: &[(Proto, Vec<Round>)],
    admin: &mut Conn,
) -> io::Result<Section> {
    let reps = rounds.iter().map(|(_, r)| r.len()).max().unwrap_or(0);
    section.line(format!(
        "each figure: median of {reps} rounds, protocols interleaved; times from sending the count-down; the waiters' connections stay open from round to round, a new latch key per round"
    ));
    section.line(
        "server CPU = time the server's main thread was on a CPU from just before the count-down was sent until the last waiter was done (/proc/<pid>/schedstat); the generator reads every reply on one core, so the times until done include its own work for 1,000 (redisson: 2,000) replies",
    );
    section.line(format!(
        "module: LATCH.INIT key 1, {WAITERS} connections send LATCH.AWAIT key BLOCK 0 (all seen queued by LATCH.INFO), then LATCH.COUNTDOWN key (must answer 0); a waiter is done when its reply (0) arrives"
    ));
    section.line(format!(
        "redisson: the real client, Redisson {}: trySetCount(1), {WAITERS} threads in await() in {} Redisson instances of {CLIENT_THREADS_PER_PROCESS} (one subscription per instance; a message releases every thread of the instance waiting), then countDown() from another instance; a waiter is done when its await() returns (times taken in the JVM, pinned to the generator's core, from just before countDown())",
        crate::redisson_client::REDISSON_VERSION,
        WAITERS / CLIENT_THREADS_PER_PROCESS
    ));
    section.line(format!(
        "redisson-emu (Redisson's protocol by this generator, as 1,000 processes of one thread, which the real client cannot be run as: one JVM each): trySetCount(1) by Redisson's script; {WAITERS} waiters in await(), each with its own pub/sub connection and command connection: GET (1), SUBSCRIBE redisson_countdownlatch__channel__{{key}} (confirmed), GET (1), then wait for the message 0 published by Redisson's countDown script; a waiter is done when its GET after the message answers nil (getCount() = 0); it unsubscribes after the timed window"
    ));
    section.line(format!(
        "{:<12} {:>7} {:>12} {:>17} {:>10} {:>9} {:>14} {:>20}",
        "protocol",
        "waiters",
        "all done ms",
        "range (rounds)",
        "median ms",
        "first ms",
        "server CPU ms",
        "count-down reply ms"
    ));
    let med =
        |runs: &[Round], f: fn(&Round) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>());
    for (p, runs) in rounds {
        if runs.is_empty() {
            continue;
        }
        let all: Vec<f64> = runs.iter().map(|r| r.all).collect();
        let spread = range(&all).map_or("-".to_string(), |(lo, hi)| {
            format!("{}..{}", ms(lo), ms(hi))
        });
        section.line(format!(
            "{:<12} {:>7} {:>12} {:>17} {:>10} {:>9} {:>14} {:>20}",
            p.name(),
            WAITERS,
            ms(median(&all)),
            spread,
            ms(med(runs, |r| r.median)),
            ms(med(runs, |r| r.first)),
            ms(med(runs, |r| r.server_cpu)),
            ms(med(runs, |r| r.countdown_reply)),
        ));
        if let Some(m) = runs
            .iter()
            .map(|r| r.all_messages)
            .collect::<Option<Vec<f64>>>()
        {
            section.line(format!(
                "  {}: the last waiter's message arrived after {} ms (median), its GET answered after the rest",
                p.name(),
                ms(median(&m))
            ));
        }
    }
    let all_of = |p: Proto| {
        rounds
            .iter()
            .find(|(q, _)| *q == p)
            .map(|(_, r)| r.iter().map(|x| x.all).collect::<Vec<f64>>())
            .unwrap_or_default()
    };
    let m = all_of(Proto::Module);
    let mut ratios_json = serde_json::Map::new();
    for p in [Proto::RedissonClient, Proto::Redisson] {
        let r = all_of(p);
        if m.is_empty() || r.is_empty() {
            continue;
        }
        let ratio = crate::stats::paired_ratio(&r, &m);
        section.line(format!(
            "{} / module, time until all {WAITERS} are done: {:.2}x (median of the ratios within each round; information, no bar)",
            p.name(),
            ratio
        ));
        ratios_json.insert(format!("{}_over_module_all_done", p.name()), finite(ratio));
    }
    let cd = crate::load::commandstats(admin).await?;
    if let Some((_, calls, us)) = cd.iter().find(|c| c.0 == "latch.countdown") {
        section.line(format!(
            "server time of LATCH.COUNTDOWN releasing {WAITERS} waiters: {us:.0} us per call ({calls} calls; INFO commandstats)"
        ));
    }
    section.json = json!({
        "waiters": WAITERS,
        "rounds": rounds.iter().map(|(p, r)| json!({
            "protocol": p.name(),
            "median_all_done_ms": finite(median(&r.iter().map(|x| x.all).collect::<Vec<_>>())),
            "runs": r.iter().map(Round::json).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "ratios": ratios_json,
        "commandstats": cd.iter().map(|(c, n, us)| json!({"command": c, "calls": n, "usec_per_call": us})).collect::<Vec<_>>(),
    });
    let _ = ctx;
    Ok(section)
}
