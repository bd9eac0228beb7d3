//! The benchmark's servers (the workspace's server harness, `lock-harness`:
//! killed by PID when dropped, also on panic or error, and with the
//! benchmark when it dies), CPU pinning, CPU accounting and the
//! file-descriptor limit.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

pub use lock_harness::{find, free_port, set_affinity, tie_to_parent, Server};
use lock_harness::{fresh_dir, Launch};

/// Which core the server and the generator run on (`None`: not pinned).
#[derive(Clone, Copy, Debug)]
pub struct Pinning {
    pub server: Option<usize>,
    pub generator: Option<usize>,
}

impl Pinning {
    pub fn detect() -> Pinning {
        if online_cores() >= 2 {
            Pinning {
                server: Some(0),
                generator: Some(1),
            }
        } else {
            Pinning {
                server: None,
                generator: None,
            }
        }
    }

    pub fn describe(&self) -> String {
        match (self.server, self.generator) {
            (Some(s), Some(g)) => {
                format!("redis-server on core {s}; generator and redis-benchmark on core {g}")
            }
            _ => "not pinned (fewer than 2 cores)".into(),
        }
    }
}

/// Cores online on the machine (not this thread's affinity mask).
pub fn online_cores() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    if n > 0 {
        n as usize
    } else {
        1
    }
}

/// `rounds` of a xorshift from `x`: fixed CPU work, for the CPU probe and
/// the spinning load.
pub fn spin(mut x: u64, rounds: u64) -> u64 {
    for i in 0..rounds {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x = x.wrapping_add(i);
    }
    x
}

/// Pins the calling thread (and the threads it creates later) to `core`.
pub fn pin_self(core: usize) -> io::Result<()> {
    set_affinity(0, core)
}

/// Raises the soft RLIMIT_NOFILE to the hard limit; returns the new limit.
pub fn raise_nofile() -> io::Result<u64> {
    // SAFETY: getrlimit/setrlimit read and write a plain struct.
    unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return Err(io::Error::last_os_error());
        }
        lim.rlim_cur = lim.rlim_max;
        if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(lim.rlim_cur as u64)
    }
}

#[derive(Clone, Debug)]
pub struct ServerSpec {
    pub binary: String,
    /// Absolute path of liblock.so; `None` starts a plain server.
    pub module: Option<PathBuf>,
    pub core: Option<usize>,
    pub extra: Vec<String>,
}

/// Starts a server (`redis-server --port P --bind 127.0.0.1 --save ''
/// --appendonly no ...`) in a directory of its own named after `tag`,
/// pinned to `spec.core` and tied to the benchmark.
pub fn start(spec: &ServerSpec, tag: &str) -> io::Result<Server> {
    let mut args: Vec<String> = ["--appendonly", "no", "--daemonize", "no"]
        .into_iter()
        .map(String::from)
        .collect();
    args.extend(spec.extra.iter().cloned());
    let launch = Launch {
        binary: spec.binary.clone(),
        args,
        module: spec.module.clone().map(|m| (m, Vec::new())),
        netns: None,
        core: spec.core,
        tied: true,
    };
    Server::start(launch, fresh_dir(&format!("lock-bench-{tag}"))).map_err(io::Error::other)
}

/// CPU time (user + system) of a process, in seconds, from /proc.
pub fn cpu_seconds(pid: Option<u32>) -> f64 {
    let path = match pid {
        Some(p) => format!("/proc/{p}/stat"),
        None => "/proc/self/stat".into(),
    };
    let Ok(stat) = fs::read_to_string(path) else {
        return 0.0;
    };
    // Fields after the command name (which is in parentheses and may hold spaces).
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime, stime, cutime, cstime are fields 14-17 of the line, 12-15
    // here: children count once they have been waited for (redis-benchmark).
    let ticks: f64 = f
        .get(11..15)
        .map(|v| v.iter().filter_map(|x| x.parse::<f64>().ok()).sum())
        .unwrap_or(0.0);
    ticks / clock_ticks()
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    if hz > 0.0 {
        hz
    } else {
        100.0
    }
}

/// CPU time the whole machine spent in user and system mode, in seconds.
fn machine_busy_seconds() -> f64 {
    let Ok(stat) = fs::read_to_string("/proc/stat") else {
        return 0.0;
    };
    let Some(line) = stat.lines().next() else {
        return 0.0;
    };
    let ticks: f64 = line
        .split_whitespace()
        .skip(1)
        .take(3)
        .filter_map(|x| x.parse::<f64>().ok())
        .sum();
    ticks / clock_ticks()
}

/// CPU use, in % of one core, over a measured window.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuUse {
    pub server: f64,
    pub generator: f64,
    /// Everything else on the machine (other processes: a sign of
    /// interference).
    pub others: f64,
}

/// CPU use of the server, the generator and the rest of the machine between
/// two points in time.
pub struct CpuMeter {
    server_pid: Option<u32>,
    /// The load's process: this one (None), or a child that generates it
    /// (the real Redisson client's JVM).
    generator_pid: Option<u32>,
    start: Instant,
    server0: f64,
    self0: f64,
    machine0: f64,
}

impl CpuMeter {
    pub fn start(server_pid: Option<u32>) -> CpuMeter {
        CpuMeter::start_for(server_pid, None)
    }

    /// With the load generated by process `generator_pid` (None: this one).
    pub fn start_for(server_pid: Option<u32>, generator_pid: Option<u32>) -> CpuMeter {
        CpuMeter {
            server_pid,
            generator_pid,
            start: Instant::now(),
            server0: cpu_seconds(server_pid),
            self0: cpu_seconds(generator_pid),
            machine0: machine_busy_seconds(),
        }
    }

    pub fn stop(&self) -> CpuUse {
        let dt = self.start.elapsed().as_secs_f64().max(1e-9);
        let server = cpu_seconds(self.server_pid) - self.server0;
        let generator = cpu_seconds(self.generator_pid) - self.self0;
        let machine = machine_busy_seconds() - self.machine0;
        CpuUse {
            server: 100.0 * server / dt,
            generator: 100.0 * generator / dt,
            others: (100.0 * (machine - server - generator) / dt).max(0.0),
        }
    }
}

pub fn absolute(p: &Path) -> PathBuf {
    fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

/// Times a fixed amount of pure CPU work `samples` times on `core`
/// (milliseconds each): on a shared virtual machine the same work takes
/// visibly different times from one moment to the next.
pub fn cpu_probe(core: Option<usize>, samples: usize) -> Vec<f64> {
    let work = move || {
        if let Some(c) = core {
            let _ = set_affinity(0, c);
        }
        let mut out = Vec::with_capacity(samples);
        for _ in 0..samples {
            let t0 = Instant::now();
            std::hint::black_box(spin(0x9e37_79b9_7f4a_7c15, 20_000_000));
            out.push(t0.elapsed().as_secs_f64() * 1000.0);
        }
        out
    };
    thread::spawn(work).join().unwrap_or_default()
}

/// Milliseconds left for waiting on other processes during the whole run.
static QUIET_BUDGET_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(150_000);

/// CPU time of `pid`'s main thread so far, ms (`/proc/<pid>/schedstat`:
/// time on a CPU in ns); NaN when unknown.
pub fn on_cpu_ms(pid: Option<u32>) -> f64 {
    let Some(pid) = pid else { return f64::NAN };
    std::fs::read_to_string(format!("/proc/{pid}/schedstat"))
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(f64::NAN, |ns| ns / 1e6)
}

/// After a run disturbed by other processes: waits until they use less than
/// `pct` % of a core over a 250 ms sample, at most 20 s at a time and 150 s
/// over the whole benchmark. Returns how long it waited.
pub fn wait_for_quiet(server_pid: Option<u32>, pct: f64) -> Duration {
    use std::sync::atomic::Ordering;
    let start = Instant::now();
    let budget = Duration::from_millis(QUIET_BUDGET_MS.load(Ordering::Relaxed));
    let limit = budget.min(Duration::from_secs(20));
    while start.elapsed() < limit {
        let meter = CpuMeter::start(server_pid);
        thread::sleep(Duration::from_millis(250));
        if meter.stop().others < pct {
            break;
        }
    }
    let waited = start.elapsed();
    let left = budget.saturating_sub(waited).as_millis() as u64;
    QUIET_BUDGET_MS.store(left, Ordering::Relaxed);
    waited
}
