//! One measured run of one S16 cell on one system ([`Run`]): the load cells
//! (hot lock, uncontended, read-write: warm-up, measured window, waits still
//! open counted) and the election (hand-overs after a few not counted), the
//! holder flags, reader/writer counts and leader slot checked at every
//! grant; the clients connected and closed.

use std::cell::{Cell, RefCell};
use std::io;
use std::rc::Rc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::{json, Value};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout_at};

use super::cells::{Kind, READ_FRACTION};
use super::clients::Client;
use super::servers::Target;
use super::system::System;
use lock_bench::report::{self, Findings};
use lock_bench::server::{CpuMeter, CpuUse};
use lock_bench::stats::{self, Lat};

/// Hand-overs of the election before the measured ones (not counted), and
/// how long a leader leads before it resigns (the others settle in their
/// waits meanwhile).
const HANDOVERS_WARM: usize = 4;
pub(super) const LEAD_FOR: Duration = Duration::from_millis(5);

#[derive(Clone, Copy, PartialEq)]
enum Phase {
    Warmup,
    Measure,
    Drain,
}

struct Shared {
    phase: Cell<Phase>,
    hist: RefCell<Histogram<u64>>,
    counts: Vec<Cell<u64>>,
    /// When each client's acquire (or campaign) was sent, while it waits.
    wait_start: Vec<Cell<Option<Instant>>>,
    /// Holder flag per key.
    held: Vec<Cell<bool>>,
    /// Read-write: readers holding now, a writer holding now.
    readers: Cell<u32>,
    writer: Cell<bool>,
    reads: Cell<u64>,
    writes: Cell<u64>,
    /// Election: who leads, when the last leader sent its resign, hand-overs
    /// seen, and the signal that enough were measured.
    leader: Cell<Option<usize>>,
    resigned_at: Cell<Option<Instant>>,
    handovers: Cell<usize>,
    wanted: usize,
    done: Notify,
    samples_us: RefCell<Vec<u64>>,
    violations: Findings,
    errors: Findings,
}

impl Shared {
    fn new(clients: usize, keys: usize, wanted: usize) -> Shared {
        Shared {
            phase: Cell::new(Phase::Warmup),
            hist: RefCell::new(stats::histogram()),
            counts: (0..clients).map(|_| Cell::new(0)).collect(),
            wait_start: (0..clients).map(|_| Cell::new(None)).collect(),
            held: (0..keys).map(|_| Cell::new(false)).collect(),
            readers: Cell::new(0),
            writer: Cell::new(false),
            reads: Cell::new(0),
            writes: Cell::new(0),
            leader: Cell::new(None),
            resigned_at: Cell::new(None),
            handovers: Cell::new(0),
            wanted,
            done: Notify::new(),
            samples_us: RefCell::new(Vec::new()),
            violations: Findings::default(),
            errors: Findings::default(),
        }
    }
}

/// One measured run of one cell on one system.
pub(super) struct Run {
    pub(super) rate: f64,
    pub(super) lat: Lat,
    pub(super) acquisitions: u64,
    pub(super) measured_s: f64,
    pub(super) open_waits: usize,
    pub(super) jain: f64,
    pub(super) reads: u64,
    pub(super) writes: u64,
    pub(super) cpu: CpuUse,
    pub(super) samples_us: Vec<u64>,
    pub(super) violations: Vec<String>,
    pub(super) errors: Vec<String>,
}

impl Run {
    pub(super) fn json(&self, system: System, kind: Kind, rep: usize) -> Value {
        json!({
            "system": system.name(), "cell": kind.name(), "clients": kind.clients(), "rep": rep,
            "rate": report::finite(self.rate), "acquisitions": self.acquisitions,
            "measured_s": self.measured_s, "wait": self.lat.json(), "open_waits": self.open_waits,
            "jain": report::finite(self.jain), "reads": self.reads, "writes": self.writes,
            "server_cpu_pct": self.cpu.server, "generator_cpu_pct": self.cpu.generator,
            "others_cpu_pct": self.cpu.others, "handover_samples_us": self.samples_us,
            "violations": self.violations, "errors": self.errors,
        })
    }
}

async fn connect_all(t: &Target, n: usize, run: u64) -> io::Result<Vec<Client>> {
    let mut clients = Vec::with_capacity(n);
    for i in 0..n {
        clients.push(Client::connect(t.system, &t.addr, format!("s16-{run}-c{i}")).await?);
    }
    Ok(clients)
}

/// Waits for the client tasks (15 s at most), then closes the clients they
/// hand back. Returns how many did not finish.
async fn finish(tasks: Vec<JoinHandle<Option<Client>>>, sh: &Shared) -> usize {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let mut stuck = 0;
    let mut back = Vec::new();
    for mut t in tasks {
        match timeout_at(deadline, &mut t).await {
            Ok(Ok(Some(c))) => back.push(c),
            Ok(_) => {}
            Err(_) => {
                stuck += 1;
                t.abort();
            }
        }
    }
    for c in back {
        if let Err(e) = c.close().await {
            sh.errors.note(format!("closing a client: {e}"));
        }
    }
    stuck
}

/// Hot lock, uncontended or read-write: `warmup`, then a measured window of
/// `measure`; every client then finishes its cycle and stops.
pub(super) async fn run_load(
    t: &Target,
    kind: Kind,
    run: u64,
    warmup: Duration,
    measure: Duration,
) -> io::Result<Run> {
    let n = kind.clients();
    let keys = if matches!(kind, Kind::Uncontended(_)) {
        n
    } else {
        1
    };
    let clients = connect_all(t, n, run).await?;
    let sh = Rc::new(Shared::new(n, keys, 0));
    let mut tasks = Vec::with_capacity(n);
    for (i, mut c) in clients.into_iter().enumerate() {
        let sh = sh.clone();
        let key = if keys == 1 { 0 } else { i };
        let name = format!("s16-{run}-k{key}");
        let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ (run << 20) ^ (i as u64 + 1);
        tasks.push(tokio::task::spawn_local(async move {
            loop {
                if sh.phase.get() == Phase::Drain {
                    break;
                }
                let write = match kind {
                    Kind::ReadWrite(_) => {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        (rng >> 11) as f64 / (1u64 << 53) as f64 >= READ_FRACTION
                    }
                    _ => true,
                };
                let t0 = Instant::now();
                sh.wait_start[i].set(Some(t0));
                let r = match kind {
                    Kind::ReadWrite(_) if write => c.write_lock(&name).await,
                    Kind::ReadWrite(_) => c.read_lock(&name).await,
                    _ => c.lock(&name).await,
                };
                sh.wait_start[i].set(None);
                if let Err(e) = r {
                    sh.errors.note(format!("client {i} acquire of {name}: {e}"));
                    return None;
                }
                let waited = t0.elapsed();
                let measuring = sh.phase.get() == Phase::Measure;
                if measuring {
                    stats::record(&mut sh.hist.borrow_mut(), waited.as_micros() as u64);
                    sh.counts[i].set(sh.counts[i].get() + 1);
                }
                match kind {
                    Kind::ReadWrite(_) if write => {
                        if sh.writer.get() || sh.readers.get() > 0 {
                            sh.violations.note(format!(
                                "client {i} granted the write hold of {name} while {} reader(s) and {} writer hold it",
                                sh.readers.get(),
                                u8::from(sh.writer.get())
                            ));
                        }
                        sh.writer.set(true);
                        if measuring {
                            sh.writes.set(sh.writes.get() + 1);
                        }
                    }
                    Kind::ReadWrite(_) => {
                        if sh.writer.get() {
                            sh.violations.note(format!(
                                "client {i} granted a read hold of {name} while a writer holds it"
                            ));
                        }
                        sh.readers.set(sh.readers.get() + 1);
                        if measuring {
                            sh.reads.set(sh.reads.get() + 1);
                        }
                    }
                    _ => {
                        if sh.held[key].replace(true) {
                            sh.violations.note(format!(
                                "client {i} granted {name} while another client holds it"
                            ));
                        }
                    }
                }
                // Cleared just before the release is sent (the release
                // itself may hand the lock on).
                match kind {
                    Kind::ReadWrite(_) if write => sh.writer.set(false),
                    Kind::ReadWrite(_) => sh.readers.set(sh.readers.get() - 1),
                    _ => sh.held[key].set(false),
                }
                if let Err(e) = c.unlock().await {
                    sh.errors.note(format!("client {i} release of {name}: {e}"));
                    return None;
                }
            }
            Some(c)
        }));
    }
    sleep(warmup).await;
    let cpu = CpuMeter::start(t.pid);
    let t_start = Instant::now();
    sh.phase.set(Phase::Measure);
    sleep(measure).await;
    sh.phase.set(Phase::Drain);
    let t_end = Instant::now();
    let cpu = cpu.stop();
    // Waits still open count with their length so far.
    let mut open_waits = 0;
    for ws in &sh.wait_start {
        if let Some(t0) = ws.get() {
            open_waits += 1;
            stats::record(&mut sh.hist.borrow_mut(), (t_end - t0).as_micros() as u64);
        }
    }
    let stuck = finish(tasks, &sh).await;
    if stuck > 0 {
        sh.errors.note(format!(
            "{stuck} of {n} {} clients did not finish within 15 s after the run",
            t.system.name()
        ));
    }
    let per_client: Vec<u64> = sh.counts.iter().map(Cell::get).collect();
    let acquisitions: u64 = per_client.iter().sum();
    let measured_s = (t_end - t_start).as_secs_f64();
    let lat = Lat::of(&sh.hist.borrow());
    let run = Run {
        rate: acquisitions as f64 / measured_s,
        lat,
        acquisitions,
        measured_s,
        open_waits,
        jain: stats::jain(&per_client),
        reads: sh.reads.get(),
        writes: sh.writes.get(),
        cpu,
        samples_us: Vec::new(),
        violations: sh.violations.list(),
        errors: sh.errors.list(),
    };
    Ok(run)
}

/// The election: `n` candidates campaign for one name; the leader leads for
/// `LEAD_FOR`, then resigns and campaigns again (to the back of the line);
/// hand-over = from just before its resign is sent to the return of the
/// next leader's campaign. `HANDOVERS_WARM` hand-overs first, then `wanted`
/// measured.
pub(super) async fn run_election(t: &Target, n: usize, wanted: usize, run: u64) -> io::Result<Run> {
    let clients = connect_all(t, n, run).await?;
    let sh = Rc::new(Shared::new(n, 0, wanted));
    let name = format!("s16-{run}-election");
    let mut tasks = Vec::with_capacity(n);
    for (i, mut c) in clients.into_iter().enumerate() {
        let sh = sh.clone();
        let name = name.clone();
        tasks.push(tokio::task::spawn_local(async move {
            loop {
                if sh.phase.get() == Phase::Drain {
                    break;
                }
                sh.wait_start[i].set(Some(Instant::now()));
                let r = c.campaign(&name).await;
                sh.wait_start[i].set(None);
                if let Err(e) = r {
                    sh.errors.note(format!("candidate {i} campaign: {e}"));
                    sh.done.notify_one();
                    return None;
                }
                let at = Instant::now();
                if let Some(j) = sh.leader.replace(Some(i)) {
                    sh.violations
                        .note(format!("candidate {i} leads while candidate {j} does"));
                }
                if let Some(t0) = sh.resigned_at.take() {
                    let k = sh.handovers.get() + 1;
                    sh.handovers.set(k);
                    if k > HANDOVERS_WARM && k <= HANDOVERS_WARM + sh.wanted {
                        let us = (at - t0).as_micros() as u64;
                        stats::record(&mut sh.hist.borrow_mut(), us);
                        sh.samples_us.borrow_mut().push(us);
                        sh.counts[i].set(sh.counts[i].get() + 1);
                    }
                    if k == HANDOVERS_WARM + sh.wanted {
                        sh.phase.set(Phase::Drain);
                        sh.done.notify_one();
                    }
                }
                sleep(LEAD_FOR).await;
                sh.leader.set(None);
                sh.resigned_at.set(Some(Instant::now()));
                if let Err(e) = c.resign().await {
                    sh.errors.note(format!("candidate {i} resign: {e}"));
                    sh.done.notify_one();
                    return None;
                }
            }
            Some(c)
        }));
    }
    let cpu = CpuMeter::start(t.pid);
    let t_start = Instant::now();
    sh.phase.set(Phase::Measure);
    let limit = Duration::from_secs(60);
    if tokio::time::timeout(limit, sh.done.notified())
        .await
        .is_err()
    {
        sh.errors.note(format!(
            "{} hand-overs of {} not done within {} s",
            HANDOVERS_WARM + wanted,
            t.system.name(),
            limit.as_secs()
        ));
    }
    sh.phase.set(Phase::Drain);
    let t_end = Instant::now();
    let cpu = cpu.stop();
    let stuck = finish(tasks, &sh).await;
    if stuck > 0 {
        sh.errors.note(format!(
            "{stuck} of {n} {} candidates did not finish within 15 s after the run",
            t.system.name()
        ));
    }
    let samples = sh.samples_us.borrow().clone();
    let measured_s = (t_end - t_start).as_secs_f64();
    let per_client: Vec<u64> = sh.counts.iter().map(Cell::get).collect();
    let lat = Lat::of(&sh.hist.borrow());
    let run = Run {
        rate: samples.len() as f64 / measured_s,
        lat,
        acquisitions: samples.len() as u64,
        measured_s,
        open_waits: 0,
        jain: stats::jain(&per_client),
        reads: 0,
        writes: 0,
        cpu,
        samples_us: samples,
        violations: sh.violations.list(),
        errors: sh.errors.list(),
    };
    Ok(run)
}
