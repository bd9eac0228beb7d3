//! A run's clients connected ([`Harness`]: the keys named, the run's shared
//! state made, a semaphore or blpop list set up, each Redisson process's
//! pub/sub connection started) and a whole closed-loop measurement
//! ([`run_load`]: warm-up, measured window, drain; waits still open at the
//! end counted with their length so far; a semaphore checked after).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::io;
use std::rc::Rc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use lock_rules::keys::{notify_channel, rw_notify_channel};
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout_at};

use super::client::Client;
use super::process::{pubsub_task, Process};
use super::result::{LoadResult, MultiStats, RwStats};
use super::scripts::Scripts;
use super::semaphore::{check_semaphore, init_semaphore, sem_channel, sem_timeout_key};
use super::shared::{Guarded, Mode, Multi, Phase, Rw, Shared};
use super::spec::{blpop_timeout, owner_id, LoadSpec, Proto, BLPOP_TOKEN};
use crate::conn::{unexpected, Conn, Reply};
use crate::report::Findings;
use crate::server::CpuMeter;
use crate::stats::{self, jain, Lat};

/// Connected clients (and, for Redisson, their processes' pub/sub
/// connections) for one run; not yet started.
pub struct Harness {
    shared: Rc<Shared>,
    processes: Vec<Rc<Process>>,
    sub_tasks: Vec<JoinHandle<()>>,
    pub clients: Vec<Client>,
}

impl Harness {
    pub async fn new(addr: &str, spec: &LoadSpec, scripts: &Scripts) -> io::Result<Harness> {
        // A multi-lock's keys share one hash tag, so that they would also
        // be in one slot of a cluster (LOCK.MACQUIRE's rule there).
        let keys: Vec<Vec<u8>> = (0..spec.keys)
            .map(|i| match spec.multi {
                Some(_) => format!("{{{}}}:{i}", spec.prefix).into_bytes(),
                None => format!("{}:{i}", spec.prefix).into_bytes(),
            })
            .collect();
        if let Some(permits) = spec.semaphore {
            if spec.read_fraction.is_some() || spec.multi.is_some() || permits == 0 {
                return Err(io::Error::other(format!(
                    "a semaphore of {permits} permits with a read-write or multi-lock is not simulated"
                )));
            }
            if !matches!(spec.proto, Proto::Module | Proto::Redisson | Proto::Blpop) {
                return Err(io::Error::other(format!(
                    "{} has no semaphore",
                    spec.proto.name()
                )));
            }
        }
        let kind = match (spec.read_fraction, spec.multi) {
            (Some(_), Some(_)) => {
                return Err(io::Error::other("a read-write multi-lock is not simulated"))
            }
            (Some(_), None) => Some("read-write lock"),
            (None, Some(_)) => Some("multi-lock"),
            (None, None) => None,
        };
        if let Some(kind) = kind {
            // Concurrent readers' tokens reach the generator in any order,
            // and a multi-lock answers one token per key: module-fence is
            // the exclusive lock's cycle only.
            if (!spec.proto.is_module() && spec.proto != Proto::Redisson)
                || spec.proto == Proto::ModuleFence
            {
                return Err(io::Error::other(format!(
                    "{} has no {kind}",
                    spec.proto.name()
                )));
            }
        }
        if let Some(m) = spec.multi {
            if m.keys_per_lock == 0 || m.keys_per_lock > spec.keys {
                return Err(io::Error::other(format!(
                    "a multi-lock of {} of {} keys",
                    m.keys_per_lock, spec.keys
                )));
            }
        }
        let channels: Vec<Vec<u8>> = keys
            .iter()
            .map(|k| {
                if spec.semaphore.is_some() {
                    sem_channel(k)
                } else if spec.read_fraction.is_some() {
                    rw_notify_channel(k)
                } else {
                    notify_channel(k)
                }
            })
            .collect();
        let channel_index = if spec.proto == Proto::Redisson {
            channels
                .iter()
                .enumerate()
                .map(|(i, c)| (c.clone(), i))
                .collect()
        } else {
            HashMap::new()
        };
        let data = kind.map(|_| Guarded {
            keys: keys
                .iter()
                .map(|k| [k.as_slice(), b":data"].concat())
                .collect(),
            written: (0..spec.keys).map(|_| Cell::new(0)).collect(),
        });
        let sem_timeouts = keys.iter().map(|k| sem_timeout_key(k)).collect();
        let shared = Rc::new(Shared {
            proto: spec.proto,
            phase: Cell::new(Phase::Warmup),
            stopping: Cell::new(false),
            stop: Notify::new(),
            holders: (0..spec.keys).map(|_| Cell::new(0)).collect(),
            keys,
            channels,
            channel_index,
            hist: RefCell::new(stats::histogram()),
            counts: (0..spec.clients).map(|_| Cell::new(0)).collect(),
            wait_start: (0..spec.clients).map(|_| Cell::new(None)).collect(),
            violations: Findings::default(),
            errors: Findings::default(),
            failed_tries: Cell::new(0),
            timeouts: Cell::new(0),
            lease: spec.lease_ms.to_string().into_bytes(),
            lease_ms: spec.lease_ms,
            block: spec.block_ms.to_string().into_bytes(),
            block_secs: blpop_timeout(spec.block_ms).into_bytes(),
            scripts: scripts.clone(),
            rw: spec.read_fraction.map(|read_fraction| Rw {
                read_fraction,
                active: (0..spec.keys).map(|_| AtomicU64::new(0)).collect(),
                read_hist: RefCell::new(stats::histogram()),
                write_hist: RefCell::new(stats::histogram()),
                reads: Cell::new(0),
                writes: Cell::new(0),
                readers_sum: Cell::new(0),
                readers_max: Cell::new(0),
                violations: Cell::new(0),
            }),
            multi: spec.multi.map(|spec| Multi {
                spec,
                grant_calls: Cell::new(0),
                gave_up: Cell::new(0),
            }),
            data,
            tokens: if spec.proto == Proto::ModuleFence {
                (0..spec.keys).map(|_| Cell::new(0)).collect()
            } else {
                Vec::new()
            },
            sem: spec.semaphore,
            sem_timeouts,
        });

        if let Some(permits) = spec.semaphore {
            let mut admin = Conn::connect(addr).await?;
            for key in &shared.keys {
                init_semaphore(&mut admin, spec.proto, key, permits).await?;
            }
        } else if spec.proto == Proto::Blpop {
            // Exactly one token per key.
            let mut admin = Conn::connect(addr).await?;
            for key in &shared.keys {
                admin.cmd(&[b"DEL", key]).await?;
                let r = admin.cmd(&[b"RPUSH", key, BLPOP_TOKEN]).await?;
                if r != Reply::Int(1) {
                    return Err(unexpected("RPUSH of the blpop token", &r));
                }
            }
        }

        let tpp = spec.threads_per_process.max(1);
        let nproc = if spec.proto == Proto::Redisson {
            spec.clients.div_ceil(tpp)
        } else {
            0
        };
        let mut processes = Vec::new();
        let mut sub_tasks: Vec<JoinHandle<()>> = Vec::new();
        for _ in 0..nproc {
            let conn = Conn::connect(addr).await?;
            let (tx, rx) = mpsc::unbounded_channel();
            let p = Rc::new(Process {
                sub_tx: tx,
                chans: RefCell::new(HashMap::new()),
                sem: RefCell::new(HashMap::new()),
                sem_pending: RefCell::new(HashMap::new()),
            });
            sub_tasks.push(tokio::task::spawn_local(pubsub_task(
                conn,
                rx,
                p.clone(),
                shared.clone(),
            )));
            processes.push(p);
        }

        let mut clients = Vec::with_capacity(spec.clients);
        for id in 0..spec.clients {
            let (p, t) = (id / tpp, id % tpp);
            let owner = if spec.proto == Proto::Redisson {
                owner_id(p, t)
            } else {
                owner_id(id, 0)
            };
            let mut owner_write = owner.clone();
            owner_write.extend_from_slice(b":write");
            clients.push(Client {
                id,
                conn: Conn::connect(addr).await?,
                owner,
                owner_write,
                process: processes.get(p).cloned(),
                shared: shared.clone(),
                permit: Vec::new(),
                permit_ids: stats::Rng::new(spec.seed.wrapping_mul(7919).wrapping_add(id as u64)),
            });
        }
        Ok(Harness {
            shared,
            processes,
            sub_tasks,
            clients,
        })
    }

    pub fn processes(&self) -> usize {
        self.processes.len()
    }

    pub fn errors(&self) -> Vec<String> {
        self.shared.errors.list()
    }

    /// Stops the pub/sub connections.
    pub fn close(&mut self) {
        self.shared.stopping.set(true);
        self.shared.stop.notify_waiters();
        for t in self.sub_tasks.drain(..) {
            t.abort();
        }
        self.processes.clear();
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.close();
    }
}

/// Runs one closed-loop measurement: connects `clients` clients, runs them for
/// warm-up + window, then stops them and drains (every waiter ends its wait).
pub async fn run_load(
    addr: &str,
    server_pid: Option<u32>,
    spec: &LoadSpec,
    scripts: &Scripts,
) -> io::Result<LoadResult> {
    let mut harness = Harness::new(addr, spec, scripts).await?;
    let shared = harness.shared.clone();
    let nproc = harness.processes();
    let mut tasks: Vec<JoinHandle<()>> = std::mem::take(&mut harness.clients)
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            tokio::task::spawn_local(c.run(spec.seed.wrapping_mul(1000).wrapping_add(i as u64)))
        })
        .collect();

    sleep(spec.warmup).await;
    let cpu = CpuMeter::start(server_pid);
    let t_start = Instant::now();
    shared.phase.set(Phase::Measure);
    sleep(spec.measure).await;
    shared.phase.set(Phase::Drain);
    let t_end = Instant::now();
    let cpu = cpu.stop();

    let mut open_waits = 0;
    for ws in &shared.wait_start {
        if let Some((t0, mode)) = ws.get() {
            open_waits += 1;
            let us = (t_end - t0).as_micros() as u64;
            stats::record(&mut shared.hist.borrow_mut(), us);
            if let Some(rw) = &shared.rw {
                let h = if mode == Mode::Write {
                    &rw.write_hist
                } else {
                    &rw.read_hist
                };
                stats::record(&mut h.borrow_mut(), us);
            }
        }
    }
    shared.stopping.set(true);
    shared.stop.notify_waiters();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let mut stuck = 0;
    for t in tasks.iter_mut() {
        if timeout_at(deadline, &mut *t).await.is_err() {
            stuck += 1;
        }
    }
    if stuck > 0 {
        shared.errors.note(format!(
            "{stuck} of {} {} clients did not finish within 15 s after the run (stuck waiting?)",
            spec.clients,
            spec.proto.name()
        ));
    }
    for t in tasks.iter() {
        t.abort();
    }
    harness.close();
    if let (Some(permits), 0) = (spec.semaphore, stuck) {
        for key in &shared.keys {
            if let Err(e) = check_semaphore(addr, spec.proto, key, permits).await {
                shared.errors.note(format!(
                    "{} semaphore {} after the run: {e}",
                    spec.proto.name(),
                    String::from_utf8_lossy(key)
                ));
            }
        }
    }

    let measured_s = (t_end - t_start).as_secs_f64();
    let per_client: Vec<u64> = shared.counts.iter().map(|c| c.get()).collect();
    let acquisitions: u64 = per_client.iter().sum();
    let lat = Lat::of(&shared.hist.borrow());
    let result = LoadResult {
        proto: spec.proto.name(),
        clients: spec.clients,
        keys: spec.keys,
        processes: nproc,
        measured_s,
        acquisitions,
        rate: acquisitions as f64 / measured_s,
        lat,
        jain: jain(&per_client),
        per_client,
        open_waits,
        failed_tries: shared.failed_tries.get(),
        timeouts: shared.timeouts.get(),
        violations: shared.violations.list(),
        errors: shared.errors.list(),
        server_cpu: cpu.server,
        generator_cpu: cpu.generator,
        others_cpu: cpu.others,
        commandstats: Vec::new(),
        rw: shared.rw.as_ref().map(|rw| RwStats {
            reads: rw.reads.get(),
            writes: rw.writes.get(),
            read_lat: Lat::of(&rw.read_hist.borrow()),
            write_lat: Lat::of(&rw.write_hist.borrow()),
            max_readers: rw.readers_max.get(),
            mean_readers: if rw.reads.get() == 0 {
                f64::NAN
            } else {
                rw.readers_sum.get() as f64 / rw.reads.get() as f64
            },
            violations: rw.violations.get(),
        }),
        multi: shared.multi.as_ref().map(|m| MultiStats {
            keys_per_lock: m.spec.keys_per_lock,
            order: m.spec.order,
            grant_calls: m.grant_calls.get(),
            gave_up: m.gave_up.get(),
        }),
        permits: spec.semaphore,
    };
    Ok(result)
}
