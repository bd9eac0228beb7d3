//! 1: deadlock cycles. Groups of 2 or 3 owners, each on its own
//! connection, take their own lock, then all wait for the next one's: with
//! detection on exactly one is answered `DEADLOCK`; off, the `BLOCK`
//! timeout breaks the cycle. A group repeats rounds as fast as it can;
//! cycles per second and the time until the cycle was broken, on against
//! off, interleaved, with the bar on 16 pairs.

use std::io;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::task::JoinHandle;
use tokio::time::timeout_at;

use super::detection::{deadlocks_counted, err, set_check_ms};
use super::on_off::{onoff, order, Pair};
use crate::conn::{Conn, Reply};
use crate::report::{finite, ms, rate, Bar, Section, INTERFERENCE_PCT, RETRIES};
use crate::server::CpuMeter;
use crate::stats::{self, median, paired_ratio, spread_pct, Lat};
use crate::Ctx;

/// `BLOCK` of the waits that close cycles with detection off: the cycle
/// is broken when they time out.
pub(super) const OFF_BLOCK_MS: u64 = 50;
/// `BLOCK` of the same waits with detection on: long enough that a cycle
/// not detected shows as a stalled round (an error).
pub(super) const ON_BLOCK_MS: u64 = 10_000;
/// Lease of every hold in the cycles (none outlives its round).
const LEASE_MS: &[u8] = b"30000";

/// Groups of `size` owners, `groups` of them at once.
#[derive(Clone, Copy, Debug)]
pub(super) struct Shape {
    pub(super) size: usize,
    pub(super) groups: usize,
}

impl Shape {
    pub(super) fn name(&self) -> &'static str {
        if self.size == 2 {
            "pairs"
        } else {
            "triples"
        }
    }
}

pub(super) const SHAPES: [Shape; 4] = [
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
pub(super) struct CycleRun {
    pub(super) rounds: u64,
    pub(super) rate: f64,
    pub(super) broken: Lat,
    pub(super) victims: u64,
    pub(super) granted: u64,
    pub(super) timeouts: u64,
    /// lock_deadlocks of INFO lock went up by this much during the run.
    pub(super) counted: i64,
    pub(super) server_cpu: f64,
    pub(super) others_cpu: f64,
}

impl CycleRun {
    pub(super) fn json(&self) -> Value {
        json!({"rounds": self.rounds, "cycles_per_s": finite(self.rate),
               "broken_after": self.broken.json(), "deadlock_replies": self.victims,
               "granted": self.granted, "timed_out": self.timeouts,
               "lock_deadlocks_delta": self.counted,
               "server_cpu_pct": finite(self.server_cpu), "others_cpu_pct": finite(self.others_cpu)})
    }
}

pub(super) async fn cycle_run(
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

/// 1: every shape, detection on and off, `cycle_reps` times (the order
/// alternating); the table, the gains on / off and the bar on 16 pairs.
/// The runs' JSON.
pub(super) async fn measure_on_off(
    ctx: &Ctx,
    section: &mut Section,
    admin: &mut Conn,
    cycle_reps: usize,
    (cw, cm): (Duration, Duration),
) -> io::Result<Vec<Value>> {
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
    Ok(cycle_json)
}
