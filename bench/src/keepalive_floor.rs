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

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::io;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::conn::{Conn, Reply, ReplyExt};
use crate::report::{rate, Bar, Section};
use crate::server::{cpu_seconds, online_cores, pin_self, spin};
use crate::stats::percentile;
use crate::{info_field, Ctx};

const CONNECTIONS: usize = 10;
const LOCKS_PER_CONNECTION: usize = 100;
const HOLDS: usize = CONNECTIONS * LOCKS_PER_CONNECTION;
/// How long the holds are kept.
const HOLD: Duration = Duration::from_secs(30);
const HOLD_QUICK: Duration = Duration::from_secs(5);
/// Connections running acquire + release cycles beside the holds.
const LOAD_CONNECTIONS: usize = 8;
/// Keys each load connection cycles through (its own: no contention).
const LOAD_KEYS: usize = 1000;
const LOAD_LEASE_MS: &str = "30000";
/// Acquire + release cycles each load connection sends per round trip.
const PIPELINE: usize = 64;
/// How often `INFO lock` is polled for ended bindings.
const POLL: Duration = Duration::from_millis(250);
/// What the module answers to a lease below the floor.
const REFUSAL: &str = "ERR KEEPALIVE needs a lease of at least";

fn key(prefix: &str, c: usize, i: usize) -> String {
    format!("{prefix}:{c}:{i}")
}

fn owner(c: usize) -> String {
    format!("holder-{c}")
}

async fn lock_stat(c: &mut Conn, name: &str) -> io::Result<i64> {
    info_field(c, "lock", name)
        .await?
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| io::Error::other(format!("INFO lock has no {name}")))
}

/// Jiffies of one core (`/proc/stat`'s `cpuN` line): busy (user, nice,
/// system, irq, softirq), stolen (by the hypervisor, for other guests) and
/// in all.
#[derive(Clone, Copy)]
struct CoreTimes {
    busy: u64,
    steal: u64,
    total: u64,
}

fn core_times() -> Vec<CoreTimes> {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    stat.lines()
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .map(|l| {
            let f: Vec<u64> = l
                .split_whitespace()
                .skip(1)
                .filter_map(|x| x.parse().ok())
                .collect();
            let at = |i: usize| f.get(i).copied().unwrap_or(0);
            CoreTimes {
                busy: at(0) + at(1) + at(2) + at(5) + at(6),
                steal: at(7),
                total: (0..8).map(at).sum(),
            }
        })
        .collect()
}

/// Each core's busy and stolen time between two `core_times()`, in % of
/// the time.
fn core_use(before: &[CoreTimes], after: &[CoreTimes]) -> Vec<(f64, f64)> {
    before
        .iter()
        .zip(after)
        .map(|(b, a)| {
            let total = a.total.saturating_sub(b.total).max(1) as f64;
            (
                100.0 * a.busy.saturating_sub(b.busy) as f64 / total,
                100.0 * a.steal.saturating_sub(b.steal) as f64 / total,
            )
        })
        .collect()
}

/// CPU time of the calling thread, in seconds.
fn thread_cpu_seconds() -> f64 {
    // SAFETY: clock_gettime writes into the timespec it is given.
    unsafe {
        let mut ts: libc::timespec = std::mem::zeroed();
        if libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) != 0 {
            return 0.0;
        }
        ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
    }
}

/// One spinning thread per core, each pinned to its core when the machine
/// has two or more (the server's core included). Each keeps its CPU time so
/// far (ns) where [`Hogs::cpu_seconds`] reads it.
struct Hogs {
    stop: Arc<AtomicBool>,
    cpu_ns: Vec<Arc<AtomicU64>>,
    threads: Vec<thread::JoinHandle<()>>,
}

impl Hogs {
    fn start(pin: bool) -> Hogs {
        let stop = Arc::new(AtomicBool::new(false));
        let cpu_ns: Vec<Arc<AtomicU64>> = (0..online_cores())
            .map(|_| Arc::new(AtomicU64::new(0)))
            .collect();
        let threads = cpu_ns
            .iter()
            .enumerate()
            .map(|(core, cpu)| {
                let (stop, cpu) = (stop.clone(), cpu.clone());
                thread::spawn(move || {
                    if pin {
                        let _ = pin_self(core);
                    }
                    let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ core as u64;
                    while !stop.load(Ordering::Relaxed) {
                        x = std::hint::black_box(spin(x, 100_000));
                        cpu.store((thread_cpu_seconds() * 1e9) as u64, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        Hogs {
            stop,
            cpu_ns,
            threads,
        }
    }

    /// The CPU seconds each has had so far.
    fn cpu_seconds(&self) -> Vec<f64> {
        self.cpu_ns
            .iter()
            .map(|c| c.load(Ordering::Relaxed) as f64 / 1e9)
            .collect()
    }

    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// The time `pid`'s main thread has spent waiting for a CPU while
/// runnable, in ms (`/proc/<pid>/schedstat`).
fn run_delay_ms(pid: Option<u32>) -> f64 {
    let Some(pid) = pid else { return f64::NAN };
    std::fs::read_to_string(format!("/proc/{pid}/schedstat"))
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<f64>().ok())
        .map_or(f64::NAN, |ns| ns / 1e6)
}

/// A wake-up delay this long (ms) is listed with when it happened.
const LONG_WAKE_MS: f64 = 50.0;

/// One thread per core (pinned to it when the hogs are) that sleeps 1 ms
/// again and again: how long a task waking up on that core, as the server
/// does for its timer, waited for the CPU at worst.
struct WakeProbes {
    stop: Arc<AtomicBool>,
    threads: Vec<thread::JoinHandle<Wakes>>,
}

/// What one wake probe saw: the longest it overslept (ms) and when (s
/// since it started), and every oversleep of `LONG_WAKE_MS` or more.
#[derive(Default)]
struct Wakes {
    worst_ms: f64,
    worst_at_s: f64,
    long: Vec<(f64, f64)>,
}

impl WakeProbes {
    fn start(pin: bool) -> WakeProbes {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..online_cores())
            .map(|core| {
                let stop = stop.clone();
                thread::spawn(move || {
                    if pin {
                        let _ = pin_self(core);
                    }
                    let t0 = Instant::now();
                    let mut w = Wakes::default();
                    while !stop.load(Ordering::Relaxed) {
                        let before = Instant::now();
                        thread::sleep(Duration::from_millis(1));
                        let late = before.elapsed().as_secs_f64() * 1000.0 - 1.0;
                        let at = before.duration_since(t0).as_secs_f64();
                        if late > w.worst_ms {
                            (w.worst_ms, w.worst_at_s) = (late, at);
                        }
                        if late >= LONG_WAKE_MS && w.long.len() < 100 {
                            w.long.push((at, late));
                        }
                    }
                    w
                })
            })
            .collect();
        WakeProbes { stop, threads }
    }

    fn stop(self) -> Vec<Wakes> {
        self.stop.store(true, Ordering::Relaxed);
        self.threads
            .into_iter()
            .map(|t| t.join().unwrap_or_default())
            .collect()
    }
}

/// What the sweeps saw.
#[derive(Default)]
struct Sweeps {
    count: u64,
    samples: u64,
    /// The smallest TTL seen, with the key and seconds into the hold.
    min_ttl: Option<(i64, String, f64)>,
    /// Samples taken while a renewal was overdue (TTL below half the lease).
    overdue: u64,
    /// The TTL each observed renewal found left: the previous expiry time
    /// minus the renewal's own time (its new expiry time minus the lease),
    /// both the server's.
    renewal_ttls: Vec<i64>,
    /// Renewals seen that may have been two: the expiry moved by two
    /// [`min_renewal_gap_ms`] or more between sweeps that far apart.
    unresolved: u64,
    /// Keys found gone (PTTL -2), with when first.
    lost: BTreeSet<String>,
    first_lost_s: Option<f64>,
    /// Keys found without a TTL (PTTL -1): never expected.
    no_ttl: BTreeSet<String>,
    /// Longest time between the starts of two sweeps, in ms.
    max_gap_ms: f64,
    error: Option<String>,
}

/// The shortest time between two renewals of a hold with the floor lease
/// `lease_ms`: due half a lease after the last one, a renewal is made up to
/// 50 ms early (`BATCH_MS` in src/keepalive.rs), with the renewals due
/// soon after the one that woke the server.
fn min_renewal_gap_ms(lease_ms: i64) -> i64 {
    lease_ms / 2 - 50
}

/// Sweeps the keys (`PTTL` and `PEXPIRETIME` of each, one pipeline) until
/// `stop`: a key gone is a hold lost; the TTLs sampled give the smallest
/// seen, and each change of a key's expiry time is a renewal, whose new
/// expiry time minus the lease is when it was made: the old expiry time
/// minus that is what the renewal found left, exactly, unless there is
/// room for two renewals (the expiry moved by two `min_renewal_gap_ms` or
/// more, and the sweeps were that far apart).
async fn sweep(
    addr: String,
    keys: Rc<Vec<String>>,
    lease_ms: i64,
    t0: Instant,
    stop: Rc<std::cell::Cell<bool>>,
    out: Rc<RefCell<Sweeps>>,
) {
    let mut conn = match Conn::connect(&addr).await {
        Ok(c) => c,
        Err(e) => {
            out.borrow_mut().error = Some(e.to_string());
            return;
        }
    };
    let mut last: Option<Instant> = None;
    // Each key's expiry time at the last sweep.
    let mut expiry: Vec<Option<i64>> = vec![None; keys.len()];
    while !stop.get() {
        let start = Instant::now();
        for k in keys.iter() {
            conn.push(&[b"PTTL", k.as_bytes()]);
            conn.push(&[b"PEXPIRETIME", k.as_bytes()]);
        }
        if let Err(e) = conn.flush().await {
            out.borrow_mut().error = Some(format!("PTTL sweep: {e}"));
            return;
        }
        let mut replies = Vec::with_capacity(keys.len() * 2);
        for _ in 0..keys.len() * 2 {
            match conn.read().await {
                Ok(r) => replies.push(r),
                Err(e) => {
                    out.borrow_mut().error = Some(format!("PTTL sweep: {e}"));
                    return;
                }
            }
        }
        let at = start.duration_since(t0).as_secs_f64();
        // From the start of the sweep before to the end of this one: the
        // server read both samples of a key within it.
        let window_ms = last.map(|prev| prev.elapsed().as_secs_f64() * 1000.0);
        let mut s = out.borrow_mut();
        s.count += 1;
        if let Some(prev) = last {
            s.max_gap_ms = s
                .max_gap_ms
                .max(start.duration_since(prev).as_secs_f64() * 1000.0);
        }
        last = Some(start);
        for ((n, k), r) in keys.iter().enumerate().zip(replies.chunks(2)) {
            match (&r[0], &r[1]) {
                (Reply::Int(-2), _) | (_, Reply::Int(-2)) => {
                    if s.lost.insert(k.clone()) && s.first_lost_s.is_none() {
                        s.first_lost_s = Some(at);
                    }
                    expiry[n] = None;
                }
                (Reply::Int(-1), _) | (_, Reply::Int(-1)) => {
                    s.no_ttl.insert(k.clone());
                }
                (Reply::Int(ttl), Reply::Int(at_ms)) => {
                    let (ttl, at_ms) = (*ttl, *at_ms);
                    s.samples += 1;
                    if ttl < lease_ms / 2 {
                        s.overdue += 1;
                    }
                    if s.min_ttl.as_ref().is_none_or(|(m, _, _)| ttl < *m) {
                        s.min_ttl = Some((ttl, k.clone(), at));
                    }
                    if let Some(before) = expiry[n].filter(|e| *e != at_ms) {
                        let renewed_at = at_ms - lease_ms;
                        // One renewal since the last sweep, unless the
                        // expiry moved by two gaps or more and the sweeps
                        // were far enough apart for two.
                        let gap = min_renewal_gap_ms(lease_ms);
                        let one =
                            at_ms - before < 2 * gap || window_ms.is_some_and(|w| w < gap as f64);
                        if one {
                            s.renewal_ttls.push(before - renewed_at);
                        } else {
                            s.unresolved += 1;
                        }
                    }
                    expiry[n] = Some(at_ms);
                }
                other => {
                    s.error = Some(format!("PTTL/PEXPIRETIME {k} answered {other:?}"));
                    return;
                }
            }
        }
    }
}

/// What the load connections did.
#[derive(Default)]
struct Load {
    cycles: u64,
    errors: Vec<String>,
}

/// Runs `PIPELINE` acquire + release cycles per round trip on keys of its
/// own (all the acquires, then all the releases) until `stop`.
async fn cycle_locks(
    addr: String,
    c: usize,
    stop: Rc<std::cell::Cell<bool>>,
    out: Rc<RefCell<Load>>,
) {
    let mut conn = match Conn::connect(&addr).await {
        Ok(conn) => conn,
        Err(e) => {
            out.borrow_mut().errors.push(e.to_string());
            return;
        }
    };
    let owner = format!("load-{c}");
    let mut next = 0;
    while !stop.get() {
        let keys: Vec<String> = (0..PIPELINE)
            .map(|j| key("s11-load", c, (next + j) % LOAD_KEYS))
            .collect();
        next += PIPELINE;
        for k in &keys {
            conn.push(&[
                b"LOCK.ACQUIRE",
                k.as_bytes(),
                owner.as_bytes(),
                b"PX",
                LOAD_LEASE_MS.as_bytes(),
            ]);
        }
        for k in &keys {
            conn.push(&[b"LOCK.RELEASE", k.as_bytes(), owner.as_bytes()]);
        }
        if let Err(e) = conn.flush().await {
            out.borrow_mut().errors.push(format!("load: {e}"));
            return;
        }
        for (n, expected) in [(PIPELINE, 1), (PIPELINE, 0)] {
            for _ in 0..n {
                match conn.read().await {
                    Ok(Reply::Int(got)) if got == expected => {}
                    other => {
                        out.borrow_mut().errors.push(format!(
                            "load LOCK.ACQUIRE/RELEASE answered {other:?}, not {expected}"
                        ));
                        return;
                    }
                }
            }
        }
        out.borrow_mut().cycles += PIPELINE as u64;
    }
}

/// What the `INFO lock` polls saw: the most bindings ended since the start
/// and the fewest held, with when the first change was seen.
#[derive(Default)]
struct Polls {
    count: u64,
    ended_max: i64,
    holds_min: Option<i64>,
    first_seen_s: Option<f64>,
    error: Option<String>,
}

async fn poll_info(
    addr: String,
    ended0: i64,
    holds0: i64,
    t0: Instant,
    stop: Rc<std::cell::Cell<bool>>,
    out: Rc<RefCell<Polls>>,
) {
    let mut conn = match Conn::connect(&addr).await {
        Ok(c) => c,
        Err(e) => {
            out.borrow_mut().error = Some(e.to_string());
            return;
        }
    };
    while !stop.get() {
        let read = async {
            let info = conn.ok(&["INFO", "lock"]).await?.text();
            let field = |name: &str| {
                info.lines()
                    .find_map(|l| {
                        l.strip_prefix(name)?
                            .strip_prefix(':')?
                            .trim()
                            .parse::<i64>()
                            .ok()
                    })
                    .ok_or_else(|| io::Error::other(format!("INFO lock has no {name}")))
            };
            Ok::<_, io::Error>((
                field("lock_keepalive_ended")? - ended0,
                field("lock_keepalive_holds")? - holds0,
            ))
        }
        .await;
        {
            let mut p = out.borrow_mut();
            match read {
                Ok((ended, holds)) => {
                    p.count += 1;
                    p.ended_max = p.ended_max.max(ended);
                    p.holds_min = Some(p.holds_min.map_or(holds, |m| m.min(holds)));
                    if (ended > 0 || holds < HOLDS as i64) && p.first_seen_s.is_none() {
                        p.first_seen_s = Some(t0.elapsed().as_secs_f64());
                    }
                }
                Err(e) => {
                    p.error = Some(format!("INFO lock: {e}"));
                    return;
                }
            }
        }
        tokio::time::sleep(POLL).await;
    }
}

/// `LOCK.INFO key` (RESP2's flat array): the owner and the keepalive
/// client, or `None` when the lock is free.
fn owner_and_client(reply: &Reply) -> Option<(String, Option<i64>)> {
    let Reply::Array(items) = reply else {
        return None;
    };
    let field = |name: &str| {
        items
            .chunks(2)
            .find(|kv| kv.first().is_some_and(|k| k.text() == name))
            .and_then(|kv| kv.get(1))
    };
    let owner = field("owner")?.text();
    Some((owner, field("keepalive_client").and_then(ReplyExt::int)))
}

/// One run: the holds taken at the floor, kept `hold` under the load, checked.
struct Run {
    renewals: i64,
    lost: usize,
    json: serde_json::Value,
    lines: Vec<String>,
    errors: Vec<String>,
    min_ttl: Option<i64>,
}

async fn run_once(ctx: &Ctx, rep: usize, floor: i64, hold: Duration) -> io::Result<Run> {
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
