//! One S17 run: a server of the scenario ([`Target`], the fair scripts
//! loaded), the clients of a cell connected in alternating kinds, warm-up,
//! measured window, drain; what the run measured ([`Run`], by kind
//! [`KindRun`]); the lock, its queue and timeout set checked gone after it.

use std::cell::{Cell, RefCell};
use std::io;
use std::rc::Rc;
use std::time::{Duration, Instant};

use lock_rules::keys::{fair_queue_key, fair_timeout_key, fair_waiter_channel, notify_channel};
use serde_json::{json, Value};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout_at};

use super::cells::{CellSpec, Kind};
use super::clients::{module_client, FairClient, FAIR_ACQUIRE, FAIR_ACQUIRE_FAILED, FAIR_RELEASE};
use super::shared::{KindStats, Names, Shared};
use crate::conn::{Conn, Reply, ReplyExt};
use crate::load::owner_id;
use crate::report::{finite, Findings};
use crate::server::{CpuMeter, Server};
use crate::stats::{self, jain, Lat};
use crate::{Ctx, Opts};

/// How long waiters may take to be served after the window closes.
pub(super) const DRAIN: Duration = Duration::from_secs(15);

/// One kind's figures in one run.
#[derive(Clone, Debug)]
pub(super) struct KindRun {
    pub(super) clients: usize,
    pub(super) grants: u64,
    pub(super) rate: f64,
    /// Of all grants in the window.
    pub(super) share: f64,
    pub(super) lat: Lat,
    pub(super) jain: f64,
    pub(super) evals: u64,
    pub(super) zero_ttls: u64,
    pub(super) msg_wakes: u64,
    pub(super) ttl_wakes: u64,
    pub(super) stuck: u64,
}

impl KindRun {
    pub(super) fn evals_per_grant(&self) -> f64 {
        if self.grants == 0 {
            f64::NAN
        } else {
            self.evals as f64 / self.grants as f64
        }
    }

    pub(super) fn json(&self) -> Value {
        json!({
            "clients": self.clients, "grants": self.grants, "rate_per_s": self.rate,
            "share": finite(self.share), "wait": self.lat.json(), "jain": self.jain,
            "acquire_scripts": self.evals, "ttl_0_or_less": self.zero_ttls,
            "message_wakes": self.msg_wakes, "ttl_wakes": self.ttl_wakes,
            "still_waiting_after_drain": self.stuck,
        })
    }
}

#[derive(Clone, Debug)]
pub(super) struct Run {
    pub(super) cell: &'static str,
    pub(super) measured_s: f64,
    pub(super) grants: u64,
    pub(super) rate: f64,
    pub(super) lat: Lat,
    pub(super) jain: f64,
    pub(super) kinds: [Option<KindRun>; 2],
    pub(super) open_waits: u64,
    pub(super) server_cpu: f64,
    pub(super) generator_cpu: f64,
    pub(super) others_cpu: f64,
    /// INFO commandstats (command, calls, µs per call).
    pub(super) commandstats: Vec<(String, u64, f64)>,
    pub(super) violations: Vec<String>,
    pub(super) errors: Vec<String>,
}

impl Run {
    pub(super) fn json(&self) -> Value {
        json!({
            "cell": self.cell, "measured_s": self.measured_s, "grants": self.grants,
            "rate_per_s": self.rate, "wait": self.lat.json(), "jain": self.jain,
            "module": self.kinds[0].as_ref().map(KindRun::json),
            "fair": self.kinds[1].as_ref().map(KindRun::json),
            "open_waits_at_end": self.open_waits, "server_cpu_pct": self.server_cpu,
            "generator_cpu_pct": self.generator_cpu, "others_cpu_pct": self.others_cpu,
            "commandstats": self.commandstats.iter().map(|(c, n, us)| json!({"command": c, "calls": n, "usec_per_call": us})).collect::<Vec<_>>(),
            "violations": self.violations, "errors": self.errors,
        })
    }
}

/// A server of this scenario, with the fair scripts loaded.
pub(super) struct Target {
    pub(super) server: Server,
    pub(super) addr: String,
    pub(super) with_module: bool,
    pub(super) shas: [Vec<u8>; 3],
}

impl Target {
    pub(super) async fn start(opts: &Opts, with_module: bool) -> io::Result<Target> {
        let tag = if with_module { "S17" } else { "S17-plain" };
        let server = crate::server::start(&Ctx::server_spec(opts, with_module), tag)?;
        let addr = server.addr();
        let mut c = Conn::connect(&addr).await?;
        let mut shas: [Vec<u8>; 3] = Default::default();
        for (i, script) in [FAIR_ACQUIRE, FAIR_RELEASE, FAIR_ACQUIRE_FAILED]
            .iter()
            .enumerate()
        {
            shas[i] = c.ok(&["SCRIPT", "LOAD", script]).await?.text().into_bytes();
        }
        Ok(Target {
            server,
            addr,
            with_module,
            shas,
        })
    }
}

/// The lock, its queue and its timeout set are gone, and (with the module)
/// no caller is left queued; polled for 3 s.
async fn check_clean(t: &Target, names: &Names, done: i64) -> io::Result<Option<String>> {
    let mut c = Conn::connect(&t.addr).await?;
    let data = c.cmd(&[b"GET", &names.data]).await?;
    c.cmd(&[b"DEL", &names.data]).await?;
    if done > 0 && data.int() != Some(done) {
        return Ok(Some(format!(
            "the guarded counter is {data:?} after {done} critical sections"
        )));
    }
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let left = c
            .cmd(&[b"EXISTS", &names.lock, &names.queue, &names.timeouts])
            .await?;
        let waiters = if t.with_module {
            crate::info_field(&mut c, "lock", "lock_waiters").await?
        } else {
            Some("0".into())
        };
        if left == Reply::Int(0) && waiters.as_deref() == Some("0") {
            return Ok(None);
        }
        if Instant::now() > deadline {
            return Ok(Some(format!(
                "after the run: {left:?} of the lock, its queue and its timeout set left, lock_waiters {}",
                waiters.unwrap_or_else(|| "missing".into())
            )));
        }
        sleep(Duration::from_millis(5)).await;
    }
}

pub(super) async fn run_once(opts: &Opts, t: &Target, cell: &CellSpec, n: u64) -> io::Result<Run> {
    let lock = format!("s17-{n}-{}", cell.name).into_bytes();
    let names = Rc::new(Names {
        queue: fair_queue_key(&lock),
        timeouts: fair_timeout_key(&lock),
        channel: notify_channel(&lock),
        latch_prefix: [
            b"redisson_unlock_latch:".as_slice(),
            &lock_rules::keys::tagged_name(&lock),
        ]
        .concat(),
        data: [lock_rules::keys::tagged_name(&lock).as_slice(), b":data"].concat(),
        acquire_sha: t.shas[0].clone(),
        release_sha: t.shas[1].clone(),
        failed_sha: t.shas[2].clone(),
        lock,
    });
    let total = cell.module_clients + cell.fair_clients;
    // Module callers and fair clients alternate, so that neither kind is
    // connected (and starts) first.
    let kind_of: Vec<Kind> = {
        let (mut m, mut f) = (cell.module_clients, cell.fair_clients);
        let mut v = Vec::with_capacity(total);
        while m + f > 0 {
            if m > 0 && (m >= f) {
                v.push(Kind::Module);
                m -= 1;
            } else {
                v.push(Kind::Fair);
                f -= 1;
            }
        }
        v
    };
    let sh = Rc::new(Shared {
        measuring: Cell::new(false),
        stopping: Cell::new(false),
        drain_deadline: Cell::new(None),
        stop: Notify::new(),
        holder: Cell::new(None),
        counts: (0..total).map(|_| Cell::new(0)).collect(),
        wait_start: (0..total).map(|_| Cell::new(None)).collect(),
        kind_of: kind_of.clone(),
        all_hist: RefCell::new(stats::histogram()),
        kinds: [KindStats::new(), KindStats::new()],
        violations: Findings::default(),
        errors: Findings::default(),
        stuck: [Cell::new(0), Cell::new(0)],
        done: Cell::new(0),
    });
    let mut admin = Conn::connect(&t.addr).await?;
    admin.ok(&["CONFIG", "RESETSTAT"]).await?;
    let mut tasks: Vec<JoinHandle<()>> = Vec::with_capacity(total);
    for (id, kind) in kind_of.iter().enumerate() {
        let conn = Conn::connect(&t.addr).await?;
        let sh2 = sh.clone();
        let fut: std::pin::Pin<Box<dyn std::future::Future<Output = io::Result<()>>>> = match kind {
            Kind::Module => Box::pin(module_client(id, sh.clone(), names.clone(), conn)),
            Kind::Fair => {
                let owner = owner_id(id, 0);
                Box::pin(
                    FairClient {
                        id,
                        sh: sh.clone(),
                        channel: fair_waiter_channel(&names.lock, &owner),
                        names: names.clone(),
                        conn,
                        sub: Conn::connect(&t.addr).await?,
                        owner,
                        unlocks: 0,
                    }
                    .run(),
                )
            }
        };
        let kind = *kind;
        tasks.push(tokio::task::spawn_local(async move {
            if let Err(e) = fut.await {
                sh2.errors.note(format!("{} client {id}: {e}", kind.name()));
            }
        }));
    }

    sleep(opts.warmup).await;
    let cpu = CpuMeter::start(t.server.pid());
    let t_start = Instant::now();
    sh.measuring.set(true);
    sleep(opts.measure).await;
    sh.measuring.set(false);
    let t_end = Instant::now();
    let cpu = cpu.stop();
    let mut open_waits = 0;
    for (id, ws) in sh.wait_start.iter().enumerate() {
        if let Some(t0) = ws.get() {
            open_waits += 1;
            let us = (t_end - t0).as_micros() as u64;
            stats::record(&mut sh.kind(id).hist.borrow_mut(), us);
            stats::record(&mut sh.all_hist.borrow_mut(), us);
        }
    }
    sh.drain_deadline
        .set(Some(tokio::time::Instant::now() + DRAIN));
    sh.stopping.set(true);
    sh.stop.notify_waiters();
    let deadline = tokio::time::Instant::now() + DRAIN + Duration::from_secs(5);
    let mut hung = 0;
    for task in tasks.iter_mut() {
        if timeout_at(deadline, &mut *task).await.is_err() {
            hung += 1;
        }
    }
    for task in &tasks {
        task.abort();
    }
    if hung > 0 {
        sh.errors
            .note(format!("{hung} clients did not end after the drain"));
    }
    for kind in [Kind::Module, Kind::Fair] {
        let stuck = sh.stuck[kind.index()].get();
        if stuck > 0 {
            sh.errors.note(format!(
                "{stuck} {} clients still waiting {} s after the window closed (the lock was not handed on to them)",
                kind.name(),
                DRAIN.as_secs()
            ));
        }
    }
    if hung == 0 {
        if let Some(e) = check_clean(t, &names, sh.done.get()).await? {
            sh.errors.note(e);
        }
    }
    let commandstats = crate::load::commandstats(&mut admin).await?;

    let measured_s = (t_end - t_start).as_secs_f64();
    let per_client: Vec<u64> = sh.counts.iter().map(Cell::get).collect();
    let grants: u64 = per_client.iter().sum();
    let kinds = [Kind::Module, Kind::Fair].map(|kind| {
        let clients = cell.clients(kind);
        (clients > 0).then(|| {
            let ks = &sh.kinds[kind.index()];
            let mine: Vec<u64> = per_client
                .iter()
                .zip(&kind_of)
                .filter(|(_, k)| **k == kind)
                .map(|(c, _)| *c)
                .collect();
            KindRun {
                clients,
                grants: ks.grants.get(),
                rate: ks.grants.get() as f64 / measured_s,
                share: if grants == 0 {
                    f64::NAN
                } else {
                    ks.grants.get() as f64 / grants as f64
                },
                lat: Lat::of(&ks.hist.borrow()),
                jain: jain(&mine),
                evals: ks.evals.get(),
                zero_ttls: ks.zero_ttls.get(),
                msg_wakes: ks.msg_wakes.get(),
                ttl_wakes: ks.ttl_wakes.get(),
                stuck: sh.stuck[kind.index()].get(),
            }
        })
    });
    let run = Run {
        cell: cell.name,
        measured_s,
        grants,
        rate: grants as f64 / measured_s,
        lat: Lat::of(&sh.all_hist.borrow()),
        jain: jain(&per_client),
        kinds,
        open_waits,
        server_cpu: cpu.server,
        generator_cpu: cpu.generator,
        others_cpu: cpu.others,
        commandstats,
        violations: sh.violations.list(),
        errors: sh.errors.list(),
    };
    Ok(run)
}
