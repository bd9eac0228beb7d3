//! The real Redisson client as a protocol (`redisson`, S2, S12 and S13): the
//! load driver of interop/redisson (`lock.redisson.bench.LoadDriver`, Java,
//! built with Maven and run by `interop/redisson/load-driver.sh`), started
//! once per benchmark in a JVM pinned to the generator's core. Each run is one line to its stdin; it answers
//! `measuring` and `measured` at the edges of its window (the server's CPU,
//! the JVM's as the generator's, is read there) and `result <json>`.
//!
//! Offers: [`RedissonClient::start`], [`RedissonClient::run`] (a hot lock or
//! semaphore run as a [`LoadResult`]), [`RedissonClient::latch`].

use std::io::{self, BufRead, BufReader, Lines, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use serde_json::Value;

use crate::load::{LoadResult, LoadSpec, Proto};
use crate::server::{tie_to_parent, CpuMeter, CpuUse};
use crate::stats::Lat;

/// The Redisson the bench drives: the newest of the 4.x line (the suite
/// in interop/redisson tests 3.52.0 as well).
pub const REDISSON_VERSION: &str = "4.7.0";

/// The driver's warm-up before a run's own (`--warmup`): the JVM compiles
/// Redisson's hot paths during the first seconds of load.
pub const JIT_WARMUP_MS: u64 = 2000;

pub struct RedissonClient {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    pid: u32,
    /// A first run of each kind not yet made (its warm-up is JIT_WARMUP_MS).
    cold: Vec<&'static str>,
}

/// A latch round as the driver measured it: ms from the count-down call.
pub struct LatchRound {
    pub all: f64,
    pub median: f64,
    pub first: f64,
    pub countdown_reply: f64,
    pub released: u64,
    pub server_cpu_ms: f64,
    pub errors: Vec<String>,
}

impl RedissonClient {
    /// Starts the driver (`interop/redisson/load-driver.sh`: builds it with
    /// Maven, then runs it in a JVM) on `core`. Err says why not (no Java or
    /// Maven, a build that failed: the script's errors are on stderr, and
    /// its first answer never comes): the rows are then left out.
    pub fn start(workspace: &Path, core: Option<usize>) -> Result<RedissonClient, String> {
        let script = workspace.join("interop/redisson/load-driver.sh");
        let mut cmd = Command::new(&script);
        cmd.env("REDISSON_VERSION", REDISSON_VERSION)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        tie_to_parent(&mut cmd, core);
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("{}: {e}", script.display()))?;
        let pid = child.id();
        let stdin = child.stdin.take().ok_or("the driver's stdin")?;
        let stdout = child.stdout.take().ok_or("the driver's stdout")?;
        Ok(RedissonClient {
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
            pid,
            cold: vec!["hot-lock", "semaphore", "latch"],
        })
    }

    fn send(&mut self, line: &str) -> io::Result<()> {
        writeln!(self.stdin, "{line}")?;
        self.stdin.flush()
    }

    fn next_line(&mut self) -> io::Result<String> {
        match self.lines.next() {
            Some(line) => line,
            None => Err(io::Error::other("the Redisson load driver exited")),
        }
    }

    /// Reads lines until `result <json>` (or `error ...`), calling `mark`
    /// on each other line (`measuring`, `measured`, `counting-down`).
    fn answer(&mut self, mut mark: impl FnMut(&str)) -> io::Result<Value> {
        loop {
            let line = self.next_line()?;
            if let Some(json) = line.strip_prefix("result ") {
                return serde_json::from_str(json)
                    .map_err(|e| io::Error::other(format!("the driver's result: {e}: {json}")));
            }
            if let Some(error) = line.strip_prefix("error ") {
                return Err(io::Error::other(format!("Redisson load driver: {error}")));
            }
            mark(&line);
        }
    }

    fn warmup_ms(&mut self, kind: &'static str, warmup_ms: u64) -> u64 {
        if let Some(i) = self.cold.iter().position(|k| *k == kind) {
            self.cold.remove(i);
            warmup_ms.max(JIT_WARMUP_MS)
        } else {
            warmup_ms
        }
    }

    /// One throughput run of `spec` (a hot lock, or a semaphore): its
    /// clients as threads in Redisson instances of
    /// `spec.threads_per_process`. Returns the run and its grants over every
    /// phase (warm-up and drain too), for [`failed_tries`].
    pub fn run(
        &mut self,
        port: u16,
        server_pid: Option<u32>,
        spec: &LoadSpec,
    ) -> io::Result<(LoadResult, u64)> {
        let permits = spec.semaphore;
        let kind = if permits.is_some() {
            "semaphore"
        } else {
            "hot-lock"
        };
        let warmup_ms = self.warmup_ms(kind, spec.warmup.as_millis() as u64);
        self.send(&format!(
            "{kind} port={port} key={} clients={} per-process={} permits={} warmup-ms={warmup_ms} measure-ms={} lease-ms={}",
            spec.prefix,
            spec.clients,
            spec.threads_per_process,
            permits.unwrap_or(1),
            spec.measure.as_millis(),
            spec.lease_ms,
        ))?;
        let pid = Some(self.pid);
        let mut meter = None;
        let mut cpu = None;
        let v = self.answer(|line| match line {
            "measuring" => meter = Some(CpuMeter::start_for(server_pid, pid)),
            "measured" => cpu = meter.as_ref().map(CpuMeter::stop),
            _ => {}
        })?;
        let cpu = cpu.unwrap_or(CpuUse {
            server: f64::NAN,
            generator: f64::NAN,
            others: f64::NAN,
        });
        let grants = v["grants_all_phases"].as_u64().unwrap_or(0);
        Ok((load_result(&v, spec.clients, cpu, permits), grants))
    }

    /// One latch round: `waiters` threads in `await()`, one `countDown()`.
    pub fn latch(
        &mut self,
        port: u16,
        server_pid: Option<u32>,
        key: &str,
        waiters: usize,
        per_process: usize,
    ) -> io::Result<LatchRound> {
        self.cold.retain(|k| *k != "latch");
        self.send(&format!(
            "latch port={port} key={key} waiters={waiters} per-process={per_process}"
        ))?;
        let mut cpu0 = f64::NAN;
        let v = self.answer(|line| {
            if line == "counting-down" {
                cpu0 = crate::server::on_cpu_ms(server_pid);
            }
        })?;
        let server_cpu_ms = crate::server::on_cpu_ms(server_pid) - cpu0;
        let f = |path: &[&str]| {
            path.iter()
                .try_fold(&v, |v, k| v.get(k))
                .and_then(Value::as_f64)
                .unwrap_or(f64::NAN)
        };
        Ok(LatchRound {
            all: f(&["released_ms", "max"]),
            median: f(&["released_ms", "p50"]),
            first: f(&["released_ms", "min"]),
            countdown_reply: f(&["count_down_ms"]),
            released: f(&["released"]) as u64,
            server_cpu_ms,
            errors: strings(&v["errors"]),
        })
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }
}

impl Drop for RedissonClient {
    fn drop(&mut self) {
        let _ = self.send("quit");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Acquire scripts that did not grant, in the measured window, estimated
/// from the whole run's scripts (`INFO commandstats` `eval` + `evalsha`):
/// each grant of the run (`grants`, every phase) sent one unlock script, the
/// rest were acquire scripts; their share per grant scales the window's
/// grants. The client itself does not say how often it retried.
pub fn failed_tries(r: &LoadResult, grants: u64) -> u64 {
    let scripts: u64 = r
        .commandstats
        .iter()
        .filter(|(c, _, _)| c == "eval" || c == "evalsha")
        .map(|(_, calls, _)| calls)
        .sum();
    if grants == 0 || scripts < 2 * grants {
        return 0;
    }
    let acquire_scripts_per_grant = (scripts - grants) as f64 / grants as f64;
    ((acquire_scripts_per_grant - 1.0) * r.acquisitions as f64).round() as u64
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// The driver's result as one of the bench's runs.
fn load_result(v: &Value, clients: usize, cpu: CpuUse, permits: Option<usize>) -> LoadResult {
    let num = |k: &str| v.get(k).and_then(Value::as_f64).unwrap_or(f64::NAN);
    let wait = |k: &str| {
        v["wait_ms"]
            .get(k)
            .and_then(Value::as_f64)
            .unwrap_or(f64::NAN)
    };
    let per_client: Vec<u64> = v["per_client"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default();
    let violations = v["violations"].as_u64().unwrap_or(0);
    LoadResult {
        proto: Proto::RedissonClient.name(),
        clients,
        keys: 1,
        processes: num("processes") as usize,
        measured_s: num("measured_s"),
        acquisitions: num("acquisitions") as u64,
        rate: num("rate_per_s"),
        lat: Lat {
            n: v["wait_ms"]["count"].as_u64().unwrap_or(0),
            p50: wait("p50"),
            p99: wait("p99"),
            p999: wait("p999"),
            max: wait("max"),
        },
        jain: num("jain"),
        per_client,
        open_waits: num("open_waits") as u64,
        // Counted from the server's commandstats by the caller, if at all.
        failed_tries: 0,
        timeouts: 0,
        violations: (0..violations.min(1))
            .map(|_| format!("{violations} grants beside another holder (Redisson client)"))
            .collect(),
        errors: strings(&v["errors"]),
        server_cpu: cpu.server,
        generator_cpu: cpu.generator,
        others_cpu: cpu.others,
        commandstats: Vec::new(),
        rw: None,
        multi: None,
        permits,
    }
}
