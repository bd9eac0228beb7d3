//! What keeps the machine busy during a run: one spinning thread per core,
//! pinned to it ([`Hogs`]), and the load connections cycling
//! `LOCK.ACQUIRE` + `LOCK.RELEASE` on keys of their own, pipelined.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;

use super::holds::key;
use super::machine::thread_cpu_seconds;
use crate::conn::{Conn, Reply};
use crate::server::{online_cores, pin_self, spin};

/// Connections running acquire + release cycles beside the holds.
pub(super) const LOAD_CONNECTIONS: usize = 8;
/// Keys each load connection cycles through (its own: no contention).
pub(super) const LOAD_KEYS: usize = 1000;
pub(super) const LOAD_LEASE_MS: &str = "30000";
/// Acquire + release cycles each load connection sends per round trip.
pub(super) const PIPELINE: usize = 64;

/// One spinning thread per core, each pinned to its core when the machine
/// has two or more (the server's core included). Each keeps its CPU time so
/// far (ns) where [`Hogs::cpu_seconds`] reads it.
pub(super) struct Hogs {
    stop: Arc<AtomicBool>,
    cpu_ns: Vec<Arc<AtomicU64>>,
    threads: Vec<thread::JoinHandle<()>>,
}

impl Hogs {
    pub(super) fn start(pin: bool) -> Hogs {
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
    pub(super) fn cpu_seconds(&self) -> Vec<f64> {
        self.cpu_ns
            .iter()
            .map(|c| c.load(Ordering::Relaxed) as f64 / 1e9)
            .collect()
    }

    pub(super) fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// What the load connections did.
#[derive(Default)]
pub(super) struct Load {
    pub(super) cycles: u64,
    pub(super) errors: Vec<String>,
}

/// Runs `PIPELINE` acquire + release cycles per round trip on keys of its
/// own (all the acquires, then all the releases) until `stop`.
pub(super) async fn cycle_locks(
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
