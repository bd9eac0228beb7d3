//! S15: deadlock detection. What the check buys and what it costs.
//!
//! Cycles: groups of 2 (pairs) and 3 (triples) owners; each takes its own
//! lock, then all ask with `BLOCK` for the next one's lock (the last for
//! the first's). With detection on (`lock.deadlock-check-ms 0`) exactly
//! one (the wait that closes the cycle) is answered `DEADLOCK` at once; it
//! releases its lock, the others get theirs one after another and release.
//! Off (-1), the cycle is broken only by the waits' `BLOCK` timeout (50 ms
//! here). With a delay (`lock.deadlock-check-ms 100`), one of them is
//! answered `DEADLOCK` once its wait has lasted that long. A group repeats
//! this as fast as it can; cycles resolved per second and the time until
//! the cycle was broken.
//!
//! Cost where there is no cycle, detection on against off, runs
//! interleaved: a hot lock (16 and 64 clients on one key, the module
//! protocol of S2), uncontended cycles (64 clients on random keys of
//! 100,000, as S1), and waiters joining the queue of a lock 10,000 others
//! already wait for (server time per join). `--s15-baseline` adds the
//! first two on a second server with a module built without the feature:
//! "off" still keeps the registry's owner index, "before" has none.

use std::io;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::task::JoinHandle;
use tokio::time::timeout_at;

use crate::conn::{Conn, Reply};
use crate::load::{LoadResult, Proto};
use crate::report::{finite, ms, rate, Bar, Section, INTERFERENCE_PCT, RETRIES};
use crate::server::CpuMeter;
use crate::stats::{self, median, paired_ratio, range, ratios, spread_pct, Lat};
use crate::{info_field, Ctx};

/// `BLOCK` of the waits that close cycles with detection off: the cycle
/// is broken when they time out.
pub const OFF_BLOCK_MS: u64 = 50;
/// `BLOCK` of the same waits with detection on: long enough that a cycle
/// not detected shows as a stalled round (an error).
const ON_BLOCK_MS: u64 = 10_000;
/// Lease of every hold in the cycles (none outlives its round).
const LEASE_MS: &[u8] = b"30000";
/// The delay of the delayed check measured beside the check at each wait.
const DELAY_MS: i64 = 100;
/// Waiters parked on one lock for the join cost.
pub const PARKED: usize = 10_000;
/// Waiters joining that queue per measurement.
pub const JOINERS: usize = 1_000;
/// The hot lock's client counts.
const HOT_CLIENTS: [usize; 2] = [16, 64];
/// Uncontended cycles: clients and keys (as S1).
const UNCONTENDED_CLIENTS: usize = 64;
const UNCONTENDED_KEYS: usize = 100_000;

/// Groups of `size` owners, `groups` of them at once.
#[derive(Clone, Copy, Debug)]
struct Shape {
    size: usize,
    groups: usize,
}

impl Shape {
    fn name(&self) -> &'static str {
        if self.size == 2 {
            "pairs"
        } else {
            "triples"
        }
    }
}

const SHAPES: [Shape; 4] = [
    Shape { size: 2, groups: 1 },
    Shape { size: 3, groups: 1 },
    Shape {
        size: 2,
        groups: 16,
    },
    Shape {
        size: 3,
        groups: 16,
    },
];

fn err(msg: String) -> io::Error {
    io::Error::other(msg)
}

fn onoff(on: bool) -> &'static str {
    if on {
        "on"
    } else {
        "off"
    }
}

/// Detection on (checked at each wait, `lock.deadlock-check-ms 0`) or off
/// (-1).
async fn set_detection(admin: &mut Conn, on: bool) -> io::Result<()> {
    set_check_ms(admin, if on { 0 } else { -1 }).await
}

async fn set_check_ms(admin: &mut Conn, ms: i64) -> io::Result<()> {
    let ms = ms.to_string();
    admin
        .ok(&["CONFIG", "SET", "lock.deadlock-check-ms", &ms])
        .await
        .map(|_| ())
}

async fn deadlocks_counted(admin: &mut Conn) -> io::Result<i64> {
    info_field(admin, "lock", "lock_deadlocks")
        .await?
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| err("INFO lock has no lock_deadlocks".into()))
}

async fn lock_waiters(admin: &mut Conn) -> io::Result<usize> {
    info_field(admin, "lock", "lock_waiters")
        .await?
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| err("INFO lock has no lock_waiters".into()))
}

/// Polls `INFO lock` until `lock_waiters` is `n` (20 s at most).
async fn wait_for_waiters(admin: &mut Conn, n: usize, pause: Duration) -> io::Result<()> {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let got = lock_waiters(admin).await?;
        if got == n {
            return Ok(());
        }
        if Instant::now() > until {
            return Err(err(format!(
                "lock_waiters is {got} after 20 s, expected {n}"
            )));
        }
        tokio::time::sleep(pause).await;
    }
}

/// One owner of a group: it holds `first` and asks for `next`.
struct Member {
    conn: Conn,
    owner: Vec<u8>,
    first: Vec<u8>,
    next: Vec<u8>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// Answered `DEADLOCK`: it closed the cycle.
    Deadlock,
    /// Handed the next lock.
    Granted,
    /// `BLOCK` ran out (nil).
    TimedOut,
}

/// A member back from its wait: how it ended, when the wait was sent and
/// when it was answered.
type Waited = (Member, Outcome, Instant, Instant);

/// A member's wait for the next lock, then its releases: every hold it
/// has goes. Returns when the wait was sent and answered.
async fn wait_next(mut m: Member, block: Vec<u8>) -> io::Result<Waited> {
    m.conn.push(&[
        b"LOCK.ACQUIRE",
        &m.next,
        &m.owner,
        b"PX",
        LEASE_MS,
        b"BLOCK",
        &block,
    ]);
    let sent = Instant::now();
    m.conn.flush().await?;
    let r = m.conn.read().await?;
    let answered = Instant::now();
    let outcome = match &r {
        Reply::Int(1) => Outcome::Granted,
        Reply::Nil => Outcome::TimedOut,
        Reply::ServerError(e) if e.code() == "DEADLOCK" => Outcome::Deadlock,
        other => {
            return Err(err(format!(
                "LOCK.ACQUIRE of the next lock answered {other:?}"
            )))
        }
    };
    if outcome == Outcome::Granted {
        m.conn.push(&[b"LOCK.RELEASE", &m.next, &m.owner]);
    }
    m.conn.push(&[b"LOCK.RELEASE", &m.first, &m.owner]);
    m.conn.flush().await?;
    let releases = if outcome == Outcome::Granted { 2 } else { 1 };
    for _ in 0..releases {
        let r = m.conn.read().await?;
        if r != Reply::Int(0) {
            return Err(err(format!("LOCK.RELEASE answered {r:?}, not 0")));
        }
    }
    Ok((m, outcome, sent, answered))
}

/// What one group saw over a run.
struct Tally {
    /// Rounds ended inside the measured window.
    rounds: u64,
    /// Time until the cycle was broken, µs, rounds of the window.
    broken: hdrhistogram::Histogram<u64>,
    /// Over every round (warm-up too): DEADLOCK replies, grants, timeouts.
    victims: u64,
    granted: u64,
    timeouts: u64,
    /// Rounds in the window whose outcome was not the one expected.
    wrong: Vec<String>,
}

/// A group's loop: round after round until `end`; rounds ending after
/// `from` count.
async fn group_loop(
    mut members: Vec<Member>,
    on: bool,
    from: Instant,
    end: Instant,
) -> io::Result<Tally> {
    let block = if on { ON_BLOCK_MS } else { OFF_BLOCK_MS }
        .to_string()
        .into_bytes();
    let mut t = Tally {
        rounds: 0,
        broken: stats::histogram(),
        victims: 0,
        granted: 0,
        timeouts: 0,
        wrong: Vec::new(),
    };
    while Instant::now() < end {
        // Every member takes its own lock (free: the last round released
        // everything before it ended).
        for m in members.iter_mut() {
            m.conn
                .push(&[b"LOCK.ACQUIRE", &m.first, &m.owner, b"PX", LEASE_MS]);
            m.conn.flush().await?;
        }
        for m in members.iter_mut() {
            let r = m.conn.read().await?;
            if r != Reply::Int(1) {
                return Err(err(format!(
                    "LOCK.ACQUIRE of a free lock answered {r:?}, not 1"
                )));
            }
        }
        // Then all wait for the next one's, at once.
        let tasks: Vec<JoinHandle<io::Result<Waited>>> = members
            .drain(..)
            .map(|m| tokio::task::spawn_local(wait_next(m, block.clone())))
            .collect();
        let until = tokio::time::Instant::now() + Duration::from_secs(20);
        let mut done = Vec::with_capacity(tasks.len());
        for task in tasks {
            match timeout_at(until, task).await {
                Ok(Ok(r)) => done.push(r?),
                Ok(Err(e)) => return Err(err(format!("a member's task: {e}"))),
                Err(_) => {
                    return Err(err(
                        "a member's wait was not answered within 20 s: a cycle was not broken"
                            .into(),
                    ))
                }
            }
        }
        let ended = Instant::now();
        let count = |o: Outcome| done.iter().filter(|d| d.1 == o).count() as u64;
        let (victims, granted, timeouts) = (
            count(Outcome::Deadlock),
            count(Outcome::Granted),
            count(Outcome::TimedOut),
        );
        t.victims += victims;
        t.granted += granted;
        t.timeouts += timeouts;
        let last_sent = done.iter().map(|d| d.2).max().unwrap_or(ended);
        // On: the victim's own wait to its DEADLOCK. Off: the last wait
        // sent to the first timeout.
        let broken = if on {
            done.iter()
                .find(|d| d.1 == Outcome::Deadlock)
                .map(|d| d.3.saturating_duration_since(d.2))
        } else {
            done.iter()
                .filter(|d| d.1 == Outcome::TimedOut)
                .map(|d| d.3.saturating_duration_since(last_sent))
                .min()
        };
        let expected = if on {
            victims == 1 && timeouts == 0
        } else {
            victims == 0 && timeouts >= 1
        };
        if ended >= from {
            t.rounds += 1;
            if let Some(b) = broken {
                stats::record(&mut t.broken, b.as_micros() as u64);
            }
            if !expected && t.wrong.len() < 5 {
                t.wrong.push(format!(
                    "detection {}: a round of {} ended with {victims} DEADLOCK, {granted} granted, {timeouts} timed out",
                    onoff(on),
                    done.len()
                ));
            }
        }
        members = done.into_iter().map(|d| d.0).collect();
    }
    Ok(t)
}

/// One run of a shape with detection on or off.
#[derive(Clone, Debug)]
struct CycleRun {
    rounds: u64,
    rate: f64,
    broken: Lat,
    victims: u64,
    granted: u64,
    timeouts: u64,
    /// lock_deadlocks of INFO lock went up by this much during the run.
    counted: i64,
    server_cpu: f64,
    others_cpu: f64,
}

impl CycleRun {
    fn json(&self) -> Value {
        json!({"rounds": self.rounds, "cycles_per_s": finite(self.rate),
               "broken_after": self.broken.json(), "deadlock_replies": self.victims,
               "granted": self.granted, "timed_out": self.timeouts,
               "lock_deadlocks_delta": self.counted,
               "server_cpu_pct": finite(self.server_cpu), "others_cpu_pct": finite(self.others_cpu)})
    }
}

async fn cycle_run(
    ctx: &Ctx,
    section: &mut Section,
    admin: &mut Conn,
    shape: Shape,
    check_ms: i64,
    run: usize,
    (warmup, measure): (Duration, Duration),
) -> io::Result<CycleRun> {
    // Detection on: at each wait (0) or after a delay; off: -1.
    let on = check_ms >= 0;
    set_check_ms(admin, check_ms).await?;
    let counted0 = deadlocks_counted(admin).await?;
    let mut groups = Vec::with_capacity(shape.groups);
    for g in 0..shape.groups {
        let mut members = Vec::with_capacity(shape.size);
        for i in 0..shape.size {
            let key = |j: usize| format!("s15-c{run}-g{g}-k{j}").into_bytes();
            members.push(Member {
                conn: Conn::connect(&ctx.addr).await?,
                owner: format!("s15-c{run}-g{g}-o{i}").into_bytes(),
                first: key(i),
                next: key((i + 1) % shape.size),
            });
        }
        groups.push(members);
    }
    let from = Instant::now() + warmup;
    let end = from + measure;
    let tasks: Vec<JoinHandle<io::Result<Tally>>> = groups
        .into_iter()
        .map(|m| tokio::task::spawn_local(group_loop(m, on, from, end)))
        .collect();
    tokio::time::sleep_until(from.into()).await;
    let meter = CpuMeter::start(ctx.server_pid);
    tokio::time::sleep_until(end.into()).await;
    let cpu = meter.stop();
    let mut tallies = Vec::new();
    let mut first_err = None;
    for t in tasks {
        match t.await {
            Ok(Ok(t)) => tallies.push(t),
            Ok(Err(e)) => {
                first_err.get_or_insert(e);
            }
            Err(e) => {
                first_err.get_or_insert(err(format!("group task: {e}")));
            }
        }
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    // The window: from `from` until the last group's last round ended
    // (each finishes the round it is in at `end`).
    let window = Instant::now().saturating_duration_since(from).as_secs_f64();
    let mut broken = stats::histogram();
    let mut r = CycleRun {
        rounds: 0,
        rate: 0.0,
        broken: Lat::default(),
        victims: 0,
        granted: 0,
        timeouts: 0,
        counted: deadlocks_counted(admin).await? - counted0,
        server_cpu: cpu.server,
        others_cpu: cpu.others,
    };
    for t in &tallies {
        r.rounds += t.rounds;
        r.victims += t.victims;
        r.granted += t.granted;
        r.timeouts += t.timeouts;
        broken
            .add(&t.broken)
            .map_err(|e| err(format!("histogram: {e}")))?;
        section.errors.extend(t.wrong.iter().cloned());
    }
    r.rate = r.rounds as f64 / window.max(1e-9);
    r.broken = Lat::of(&broken);
    if r.counted != r.victims as i64 {
        section.errors.push(format!(
            "{} x{} detection {}: {} DEADLOCK replies but lock_deadlocks went up by {}",
            shape.name(),
            shape.groups,
            onoff(on),
            r.victims,
            r.counted
        ));
    }
    ctx.settle(section).await;
    ctx.progress(&format!(
        "S15 {} x{} detection {}: {}/s cycles, broken after p50 {} ms p99 {} ms; {} DEADLOCK, {} granted, {} timed out (server {:.0}%, others {:.0}%)",
        shape.name(),
        shape.groups,
        onoff(on),
        rate(r.rate),
        ms(r.broken.p50),
        ms(r.broken.p99),
        r.victims,
        r.granted,
        r.timeouts,
        r.server_cpu,
        r.others_cpu
    ));
    Ok(r)
}

/// The runs of one comparison, detection on and off, one pair per
/// repetition.
struct Pair<T> {
    on: Vec<T>,
    off: Vec<T>,
}

impl<T> Pair<T> {
    fn new() -> Pair<T> {
        Pair {
            on: Vec::new(),
            off: Vec::new(),
        }
    }

    fn push(&mut self, on: bool, v: T) {
        if on {
            self.on.push(v);
        } else {
            self.off.push(v);
        }
    }

    fn values(&self, on: bool, f: impl Fn(&T) -> f64) -> Vec<f64> {
        if on { &self.on } else { &self.off }
            .iter()
            .map(f)
            .collect()
    }
}

/// Repetition `rep` runs detection on first when even, off first when odd.
fn order(rep: usize) -> [bool; 2] {
    if rep.is_multiple_of(2) {
        [true, false]
    } else {
        [false, true]
    }
}

/// The ratio on/off of `f` over the repetitions: median, range, and
/// whether 1.0 lies within that range ("within noise").
struct Ratio {
    median: f64,
    range: Option<(f64, f64)>,
}

impl Ratio {
    fn of(on: &[f64], off: &[f64]) -> Ratio {
        let r = ratios(on, off);
        Ratio {
            median: paired_ratio(on, off),
            range: range(&r),
        }
    }

    fn verdict(&self) -> &'static str {
        match self.range {
            Some((lo, hi)) if lo <= 1.0 && 1.0 <= hi => "within noise",
            Some(_) => "OUTSIDE the noise band",
            None => "one repetition: no noise band",
        }
    }

    fn text(&self) -> String {
        match self.range {
            Some((lo, hi)) => format!(
                "{:.3}x [{lo:.3} .. {hi:.3}] {}",
                self.median,
                self.verdict()
            ),
            None => format!("{:.3}x ({})", self.median, self.verdict()),
        }
    }

    fn json(&self) -> Value {
        json!({"median": finite(self.median),
               "range": self.range.map(|(lo, hi)| json!([finite(lo), finite(hi)])),
               "verdict": self.verdict()})
    }
}

/// A cost cell: its load, and runs with detection on, off, and on the
/// baseline module.
struct Cell {
    clients: usize,
    keys: usize,
    pair: Pair<LoadResult>,
    baseline: Vec<LoadResult>,
}

/// One run of a cost cell's load on `ctx`'s server.
async fn measure(ctx: &Ctx, section: &mut Section, cell: &Cell) -> io::Result<LoadResult> {
    crate::throughput::measure(
        ctx,
        section,
        Proto::Module,
        cell.clients,
        cell.keys,
        &|_| {},
    )
    .await
}

/// The server's CPU time per acquisition in a run, µs (its process's
/// user + system time over the measured window, /proc/<pid>/stat: time
/// the server was kept off its core by other processes does not count).
fn cpu_per_acq(r: &LoadResult) -> f64 {
    r.server_cpu * 1e4 / r.rate
}

/// µs per call of `command` in a run's commandstats.
fn usec(r: &LoadResult, command: &str) -> f64 {
    r.commandstats
        .iter()
        .find(|c| c.0 == command)
        .map_or(f64::NAN, |c| c.2)
}

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

pub async fn s15(ctx: &Ctx) -> io::Result<Section> {
    let reps = ctx.opts.reps(crate::options::REPS_S15);
    let cycle_reps = ctx.opts.reps(crate::options::REPS_S15_CYCLES);
    let mut section = Section::new(
        "S15",
        "deadlock detection: cycles broken by the check (on) or by BLOCK timeouts (off); the check's cost where there is no cycle",
    );
    let mut admin = Conn::connect(&ctx.addr).await?;
    let result = run_all(ctx, &mut section, &mut admin, reps, cycle_reps).await;
    // Whatever happened, the server is left as configured by default.
    set_detection(&mut admin, true).await?;
    result?;
    Ok(section)
}

async fn run_all(
    ctx: &Ctx,
    section: &mut Section,
    admin: &mut Conn,
    reps: usize,
    cycle_reps: usize,
) -> io::Result<()> {
    // 1. Cycles. Shorter runs than the cost cells: the rates differ by
    // orders of magnitude.
    let cw = ctx.opts.warmup / 2;
    let cm = ctx.opts.measure / 2;
    let mut cycles: Vec<(Shape, Pair<CycleRun>)> =
        SHAPES.iter().map(|&s| (s, Pair::new())).collect();
    let mut run = 0;
    for rep in 0..cycle_reps {
        for (shape, pair) in cycles.iter_mut() {
            for on in order(rep) {
                // Measured again while other processes disturb it, as
                // every throughput run is.
                let mut attempt = 0;
                let r = loop {
                    run += 1;
                    let r = cycle_run(
                        ctx,
                        section,
                        admin,
                        *shape,
                        if on { 0 } else { -1 },
                        run,
                        (cw, cm),
                    )
                    .await?;
                    if r.others_cpu <= INTERFERENCE_PCT {
                        break r;
                    }
                    if attempt == RETRIES {
                        section.disturbed_kept += 1;
                        break r;
                    }
                    ctx.measure_again(section, r.json());
                    attempt += 1;
                };
                pair.push(on, r);
            }
        }
    }
    section.line(format!(
        "1. cycles: groups of 2 (pairs) or 3 (triples) owners, each on its own connection; every round each takes its own lock (LOCK.ACQUIRE key owner PX 30000, must answer 1), then all send LOCK.ACQUIRE <the next one's key> owner PX 30000 BLOCK ms at once; detection on (BLOCK {ON_BLOCK_MS}): exactly one must be answered DEADLOCK (the wait that closed the cycle), it releases its lock, the others are handed theirs in turn and release both; detection off (BLOCK {OFF_BLOCK_MS}): nobody is answered until the BLOCK runs out (nil), then whoever timed out releases and the rest get theirs; a round ends when every hold is released, the group starts the next at once"
    ));
    section.line(format!(
        "   each figure: median of {cycle_reps} runs of {:.2} s after {:.2} s warm-up, on and off interleaved (order alternating; a run during which other processes used more than {INTERFERENCE_PCT}% of a core is measured again, as in every scenario); broken after = on: from sending the victim's wait to its DEADLOCK reply (detection latency); off: from the last wait sent to the first timeout (nil) reply; lock_deadlocks of INFO lock checked against the DEADLOCK replies",
        cm.as_secs_f64(),
        cw.as_secs_f64()
    ));
    section.line(format!(
        "   {:<8} {:>6} {:>9} {:>11} {:>7} {:>10} {:>10} {:>13} {:>7}",
        "groups",
        "x",
        "detection",
        "cycles/s",
        "spread",
        "broken p50",
        "broken p99",
        "granted/round",
        "server"
    ));
    let mut cycle_json = Vec::new();
    for (shape, pair) in &cycles {
        for on in [true, false] {
            let runs = if on { &pair.on } else { &pair.off };
            let rates = pair.values(on, |r| r.rate);
            let granted = median(&pair.values(on, |r| {
                let rounds = (r.victims + r.granted + r.timeouts) as f64 / shape.size as f64;
                r.granted as f64 / rounds.max(1.0)
            }));
            section.line(format!(
                "   {:<8} {:>6} {:>9} {:>11} {:>6.0}% {:>7} ms {:>7} ms {:>13.2} {:>6.0}%",
                shape.name(),
                shape.groups,
                onoff(on),
                rate(median(&rates)),
                spread_pct(&rates),
                ms(median(&pair.values(on, |r| r.broken.p50))),
                ms(median(&pair.values(on, |r| r.broken.p99))),
                granted,
                median(&pair.values(on, |r| r.server_cpu)),
            ));
            cycle_json.push(json!({
                "size": shape.size, "groups": shape.groups, "detection": onoff(on),
                "block_ms": if on { ON_BLOCK_MS } else { OFF_BLOCK_MS },
                "median_cycles_per_s": finite(median(&rates)),
                "median_broken_p50_ms": finite(median(&pair.values(on, |r| r.broken.p50))),
                "median_broken_p99_ms": finite(median(&pair.values(on, |r| r.broken.p99))),
                "runs": runs.iter().map(CycleRun::json).collect::<Vec<_>>(),
            }));
        }
    }
    let mut gains = Vec::new();
    for (shape, pair) in &cycles {
        let on = pair.values(true, |r| r.rate);
        let off = pair.values(false, |r| r.rate);
        let g = paired_ratio(&on, &off);
        gains.push(format!("{} x{} {:.0}x", shape.name(), shape.groups, g));
        if shape.size == 2 && shape.groups == 16 {
            section.bars.push(Bar::paired(
                "S15 cycles/s, detection on vs off (16 pairs)",
                &on,
                &off,
                10.0,
            ));
        }
    }
    section.line(format!(
        "   cycles/s on / off: {} (median of the ratios within each repetition)",
        gains.join(", ")
    ));

    // 2a and 2c. The hot lock and uncontended cycles, on against off
    // (and against the module without the feature, on its own server,
    // between the two).
    let baseline = match &ctx.opts.s15_baseline {
        Some(module) => {
            let mut opts = ctx.opts.clone();
            opts.module = module.clone();
            Some(Ctx::new(&opts, "S15-baseline", ctx.started).await?)
        }
        None => None,
    };
    let mut cells: Vec<Cell> = HOT_CLIENTS
        .iter()
        .map(|&n| (n, 1))
        .chain(std::iter::once((UNCONTENDED_CLIENTS, UNCONTENDED_KEYS)))
        .map(|(clients, keys)| Cell {
            clients,
            keys,
            pair: Pair::new(),
            baseline: Vec::new(),
        })
        .collect();
    for rep in 0..reps {
        for cell in cells.iter_mut() {
            let [first, second] = order(rep);
            set_detection(admin, first).await?;
            ctx.progress(&format!("S15 detection {}:", onoff(first)));
            let r = measure(ctx, section, cell).await?;
            cell.pair.push(first, r);
            if let Some(b) = &baseline {
                ctx.progress("S15 baseline module (no deadlock detection):");
                let r = measure(b, section, cell).await?;
                cell.baseline.push(r);
            }
            set_detection(admin, second).await?;
            ctx.progress(&format!("S15 detection {}:", onoff(second)));
            let r = measure(ctx, section, cell).await?;
            cell.pair.push(second, r);
        }
    }
    drop(baseline);
    section.line(format!(
        "2. cost where there is no cycle, detection on vs off; each figure: median of {reps} runs of {:.1} s after {:.1} s warm-up, on and off interleaved (order alternating{}); ratio = median of the ratios within each repetition [lowest .. highest]: \"within noise\" when 1.0 lies in that range",
        ctx.opts.measure.as_secs_f64(),
        ctx.opts.warmup.as_secs_f64(),
        match &ctx.opts.s15_baseline {
            Some(m) => format!(
                "; before = the module without deadlock detection ({}) on a second server started the same way, run between the two",
                m.display()
            ),
            None => String::new(),
        }
    ));
    section.line(format!(
        "   hot lock: one key, each client loops LOCK.ACQUIRE key owner PX 30000 BLOCK 10000 -> LOCK.RELEASE (S2's module protocol; every acquire but the holder's waits, so the check runs on nearly every acquire); uncontended: {UNCONTENDED_CLIENTS} clients on random keys of {UNCONTENDED_KEYS} (S1's; waits are rare, the check almost never runs); acquire us, release us = server time per call (INFO commandstats usec_per_call: a mean, so a command held up by the machine weighs in); server us/acq = the server process's CPU time per acquisition (/proc/<pid>/stat over the window: time kept off its core does not count)"
    ));
    section.line(format!(
        "   {:<12} {:>4} {:>9} {:>11} {:>7} {:>9} {:>9} {:>11} {:>11} {:>11} {:>7}",
        "load",
        "cli",
        "detection",
        "acq/s",
        "spread",
        "p50 ms",
        "p99 ms",
        "acquire us",
        "release us",
        "server us/acq",
        "server"
    ));
    let mut cost_json = Vec::new();
    for cell in &cells {
        let what = if cell.keys == 1 {
            "hot lock"
        } else {
            "uncontended"
        };
        let settings: [(&str, &[LoadResult]); 3] = [
            ("on", &cell.pair.on),
            ("off", &cell.pair.off),
            ("before", &cell.baseline),
        ];
        for (name, runs) in settings {
            if runs.is_empty() {
                continue;
            }
            let v = |f: fn(&LoadResult) -> f64| runs.iter().map(f).collect::<Vec<f64>>();
            let rates = v(|r| r.rate);
            section.line(format!(
                "   {:<12} {:>4} {:>9} {:>11} {:>6.0}% {:>9} {:>9} {:>11.2} {:>11.2} {:>11.2} {:>6.0}%",
                what,
                cell.clients,
                name,
                rate(median(&rates)),
                spread_pct(&rates),
                ms(median(&v(|r| r.lat.p50))),
                ms(median(&v(|r| r.lat.p99))),
                median(&v(|r| usec(r, "lock.acquire"))),
                median(&v(|r| usec(r, "lock.release"))),
                median(&v(cpu_per_acq)),
                median(&v(|r| r.server_cpu)),
            ));
        }
        let ratios_vs = |other: &[LoadResult]| {
            let of = |f: fn(&LoadResult) -> f64| {
                Ratio::of(
                    &cell.pair.on.iter().map(f).collect::<Vec<_>>(),
                    &other.iter().map(f).collect::<Vec<_>>(),
                )
            };
            [
                ("acq/s", of(|r| r.rate)),
                ("acquire us", of(|r| usec(r, "lock.acquire"))),
                ("release us", of(|r| usec(r, "lock.release"))),
                ("server us/acq", of(cpu_per_acq)),
            ]
        };
        let mut j = json!({
            "load": what, "clients": cell.clients, "keys": cell.keys,
            "on": cell.pair.on.iter().map(LoadResult::json).collect::<Vec<_>>(),
            "off": cell.pair.off.iter().map(LoadResult::json).collect::<Vec<_>>(),
        });
        let mut compare = vec![("off", ratios_vs(&cell.pair.off))];
        if !cell.baseline.is_empty() {
            compare.push(("before", ratios_vs(&cell.baseline)));
            j["before"] = json!(cell
                .baseline
                .iter()
                .map(LoadResult::json)
                .collect::<Vec<_>>());
        }
        for (other, rs) in compare {
            section.line(format!(
                "   {what} {} cli, on / {other}: {}",
                cell.clients,
                rs.iter()
                    .map(|(n, r)| format!("{n} {}", r.text()))
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
            j[format!("on_over_{other}")] = json!(rs
                .iter()
                .map(|(n, r)| (n.to_string(), r.json()))
                .collect::<serde_json::Map<_, _>>());
        }
        cost_json.push(j);
    }

    // 2b. Joining a queue of 10,000.
    let joins = parked_joins(ctx, section, admin, reps).await?;

    // 3. The check after a delay instead of at each wait.
    let delayed = delayed_check(ctx, section, admin, reps, cycle_reps, (cw, cm)).await?;
    set_detection(admin, true).await?;
    section.json = json!({
        "off_block_ms": OFF_BLOCK_MS, "on_block_ms": ON_BLOCK_MS,
        "cycles": cycle_json, "cost": cost_json, "joins": joins, "delayed": delayed,
    });
    Ok(())
}

/// 3: `lock.deadlock-check-ms DELAY_MS` (PostgreSQL's way): cycles of 1
/// and 16 pairs broken by a delayed check, and the hot lock of 64 clients
/// with the delay against the check at each wait, interleaved.
async fn delayed_check(
    ctx: &Ctx,
    section: &mut Section,
    admin: &mut Conn,
    reps: usize,
    cycle_reps: usize,
    (cw, cm): (Duration, Duration),
) -> io::Result<Value> {
    set_check_ms(admin, DELAY_MS).await?;
    let mut cycle_lines = Vec::new();
    let mut cycle_json = Vec::new();
    for shape in [SHAPES[0], SHAPES[2]] {
        let mut runs = Vec::new();
        for rep in 0..cycle_reps {
            let run = 1000 + rep;
            runs.push(cycle_run(ctx, section, admin, shape, DELAY_MS, run, (cw, cm)).await?);
        }
        let rates: Vec<f64> = runs.iter().map(|r| r.rate).collect();
        let p50 = median(&runs.iter().map(|r| r.broken.p50).collect::<Vec<_>>());
        let p99 = median(&runs.iter().map(|r| r.broken.p99).collect::<Vec<_>>());
        cycle_lines.push(format!(
            "   {:<8} {:>6} {:>11} {:>6.0}% {:>7} ms {:>7} ms",
            shape.name(),
            shape.groups,
            rate(median(&rates)),
            spread_pct(&rates),
            ms(p50),
            ms(p99),
        ));
        cycle_json.push(json!({
            "size": shape.size, "groups": shape.groups, "check_ms": DELAY_MS,
            "median_cycles_per_s": finite(median(&rates)),
            "median_broken_p50_ms": finite(p50), "median_broken_p99_ms": finite(p99),
            "runs": runs.iter().map(CycleRun::json).collect::<Vec<_>>(),
        }));
    }
    // The hot lock: delayed as "on", the check at each wait as "off".
    let mut cell = Cell {
        clients: 64,
        keys: 1,
        pair: Pair::new(),
        baseline: Vec::new(),
    };
    for rep in 0..reps {
        for delayed in order(rep) {
            set_check_ms(admin, if delayed { DELAY_MS } else { 0 }).await?;
            ctx.progress(&format!(
                "S15 lock.deadlock-check-ms {}:",
                if delayed { DELAY_MS } else { 0 }
            ));
            let r = measure(ctx, section, &cell).await?;
            cell.pair.push(delayed, r);
        }
    }
    let of = |f: fn(&LoadResult) -> f64| {
        Ratio::of(
            &cell.pair.on.iter().map(f).collect::<Vec<_>>(),
            &cell.pair.off.iter().map(f).collect::<Vec<_>>(),
        )
    };
    let ratios = [
        ("acq/s", of(|r| r.rate)),
        ("acquire us", of(|r| usec(r, "lock.acquire"))),
        ("server us/acq", of(cpu_per_acq)),
    ];
    section.line(format!(
        "3. the check after a delay (lock.deadlock-check-ms {DELAY_MS}: a caller is queued at once, its wait checked once it has lasted {DELAY_MS} ms) instead of at each wait; cycles as in 1 (BLOCK {ON_BLOCK_MS}: exactly one DEADLOCK per round), {cycle_reps} runs each:"
    ));
    section.line(format!(
        "   {:<8} {:>6} {:>11} {:>7} {:>10} {:>10}",
        "groups", "x", "cycles/s", "spread", "broken p50", "broken p99"
    ));
    for line in cycle_lines {
        section.line(line);
    }
    section.line(format!(
        "   hot lock 64 cli, delayed / at each wait ({reps} runs each, interleaved): {}",
        ratios
            .iter()
            .map(|(n, r)| format!("{n} {}", r.text()))
            .collect::<Vec<_>>()
            .join("; ")
    ));
    Ok(json!({
        "check_ms": DELAY_MS,
        "cycles": cycle_json,
        "hot_lock_64": {
            "delayed": cell.pair.on.iter().map(LoadResult::json).collect::<Vec<_>>(),
            "at_each_wait": cell.pair.off.iter().map(LoadResult::json).collect::<Vec<_>>(),
            "delayed_over_at_each_wait": ratios
                .iter()
                .map(|(n, r)| (n.to_string(), r.json()))
                .collect::<serde_json::Map<_, _>>(),
        },
    }))
}

/// 2b: `PARKED` waiters in `BLOCK 0` on one held lock, then `JOINERS`
/// more join, detection on and off alternately.
async fn parked_joins(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ratio_is_within_noise_when_its_repetitions_straddle_one() {
        let within = Ratio::of(&[1.1, 0.9, 1.0], &[1.0, 1.0, 1.0]);
        assert_eq!(within.verdict(), "within noise");
        assert!((within.median - 1.0).abs() < 1e-12);
        let above = Ratio::of(&[1.2, 1.1, 1.3], &[1.0, 1.0, 1.0]);
        assert_eq!(above.verdict(), "OUTSIDE the noise band");
        assert_eq!(above.range, Some((1.1, 1.3)));
        let one = Ratio::of(&[2.0], &[1.0]);
        assert_eq!(one.verdict(), "one repetition: no noise band");
    }

    #[test]
    fn repetitions_alternate_which_setting_runs_first() {
        assert_eq!(order(0), [true, false]);
        assert_eq!(order(1), [false, true]);
        assert_eq!(order(2), [true, false]);
    }
}
