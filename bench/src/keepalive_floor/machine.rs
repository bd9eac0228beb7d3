//! What the machine did during a run: each core's busy and stolen time
//! (`/proc/stat`), a thread's CPU time, the time the server waited for a
//! CPU (`/proc/<pid>/schedstat`), and how late a thread sleeping 1 ms on
//! each core woke up ([`WakeProbes`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::server::{online_cores, pin_self};

/// Jiffies of one core (`/proc/stat`'s `cpuN` line): busy (user, nice,
/// system, irq, softirq), stolen (by the hypervisor, for other guests) and
/// in all.
#[derive(Clone, Copy)]
pub(super) struct CoreTimes {
    pub(super) busy: u64,
    pub(super) steal: u64,
    pub(super) total: u64,
}

pub(super) fn core_times() -> Vec<CoreTimes> {
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
pub(super) fn core_use(before: &[CoreTimes], after: &[CoreTimes]) -> Vec<(f64, f64)> {
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
pub(super) fn thread_cpu_seconds() -> f64 {
    // SAFETY: clock_gettime writes into the timespec it is given.
    unsafe {
        let mut ts: libc::timespec = std::mem::zeroed();
        if libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) != 0 {
            return 0.0;
        }
        ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
    }
}

/// The time `pid`'s main thread has spent waiting for a CPU while
/// runnable, in ms (`/proc/<pid>/schedstat`).
pub(super) fn run_delay_ms(pid: Option<u32>) -> f64 {
    let Some(pid) = pid else { return f64::NAN };
    std::fs::read_to_string(format!("/proc/{pid}/schedstat"))
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<f64>().ok())
        .map_or(f64::NAN, |ns| ns / 1e6)
}

/// A wake-up delay this long (ms) is listed with when it happened.
pub(super) const LONG_WAKE_MS: f64 = 50.0;

/// One thread per core (pinned to it when the hogs are) that sleeps 1 ms
/// again and again: how long a task waking up on that core, as the server
/// does for its timer, waited for the CPU at worst.
pub(super) struct WakeProbes {
    stop: Arc<AtomicBool>,
    threads: Vec<thread::JoinHandle<Wakes>>,
}

/// What one wake probe saw: the longest it overslept (ms) and when (s
/// since it started), and every oversleep of `LONG_WAKE_MS` or more.
#[derive(Default)]
pub(super) struct Wakes {
    pub(super) worst_ms: f64,
    pub(super) worst_at_s: f64,
    pub(super) long: Vec<(f64, f64)>,
}

impl WakeProbes {
    pub(super) fn start(pin: bool) -> WakeProbes {
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

    pub(super) fn stop(self) -> Vec<Wakes> {
        self.stop.store(true, Ordering::Relaxed);
        self.threads
            .into_iter()
            .map(|t| t.join().unwrap_or_default())
            .collect()
    }
}
