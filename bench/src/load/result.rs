//! What a run measured: [`LoadResult`] (rate, waits, fairness, failed
//! tries, CPU, the server's command stats, violations and errors), with a
//! read-write run's figures by kind ([`RwStats`]) and a multi-lock run's
//! ([`MultiStats`]).

use serde_json::{json, Value};

use super::spec::KeyOrder;
use crate::stats::Lat;

/// A multi-lock run's own figures (measured window).
#[derive(Clone, Debug)]
pub struct MultiStats {
    pub keys_per_lock: usize,
    pub order: KeyOrder,
    /// Acquire calls that answered a grant: one per key for redisson (its
    /// acquire script), one per multi-lock for the module (`LOCK.MACQUIRE`).
    pub grant_calls: u64,
    /// Multi-lock attempts that used up their wait and started over:
    /// redisson `tryLock`s that gave up (the keys taken unlocked), module
    /// `LOCK.MACQUIRE` BLOCK timeouts.
    pub gave_up: u64,
}

impl MultiStats {
    pub fn json(&self) -> Value {
        json!({
            "keys_per_lock": self.keys_per_lock, "order": self.order.name(),
            "grant_calls": self.grant_calls, "gave_up": self.gave_up,
        })
    }
}

/// A read-write run's own figures.
#[derive(Clone, Debug, Default)]
pub struct RwStats {
    pub reads: u64,
    pub writes: u64,
    /// Waits of reads and of writes (open waits at the end included).
    pub read_lat: Lat,
    pub write_lat: Lat,
    /// Readers holding the key at a read grant (the new one included):
    /// highest and mean over the window's read grants.
    pub max_readers: u64,
    pub mean_readers: f64,
    /// Grants that overlapped a writer (a writer beside anyone, a reader
    /// beside a writer) and critical sections that saw another writer's
    /// data, over the whole run; must be 0.
    pub violations: u64,
}

impl RwStats {
    pub fn json(&self) -> Value {
        json!({
            "reads": self.reads, "writes": self.writes,
            "read_wait": self.read_lat.json(), "write_wait": self.write_lat.json(),
            "max_readers_at_once": self.max_readers,
            "mean_readers_at_read_grant": self.mean_readers,
            "overlap_violations": self.violations,
        })
    }
}

#[derive(Clone, Debug)]
pub struct LoadResult {
    pub proto: String,
    pub clients: usize,
    pub keys: usize,
    pub processes: usize,
    pub measured_s: f64,
    pub acquisitions: u64,
    pub rate: f64,
    pub lat: Lat,
    pub jain: f64,
    pub per_client: Vec<u64>,
    /// Waits still open when the window closed (counted in `lat` with their
    /// length so far).
    pub open_waits: u64,
    /// Failed tries (PTTL answers, SET NX nil) in the window.
    pub failed_tries: u64,
    /// BLOCK timeouts (module and blpop nil answers).
    pub timeouts: u64,
    pub violations: Vec<String>,
    pub errors: Vec<String>,
    pub server_cpu: f64,
    pub generator_cpu: f64,
    pub others_cpu: f64,
    /// INFO commandstats of the run (warm-up and drain included):
    /// (command, calls, µs per call).
    pub commandstats: Vec<(String, u64, f64)>,
    /// Read-write runs only.
    pub rw: Option<RwStats>,
    /// Multi-lock runs only.
    pub multi: Option<MultiStats>,
    /// Semaphore runs: the permits.
    pub permits: Option<usize>,
}

impl LoadResult {
    /// Acquire calls in the window (lock commands or scripts, granted or
    /// not; the module's BLOCK timeouts not counted).
    pub fn lock_calls(&self) -> u64 {
        self.multi
            .as_ref()
            .map_or(self.acquisitions, |m| m.grant_calls)
            + self.failed_tries
    }

    pub fn json(&self) -> Value {
        json!({
            "protocol": self.proto, "clients": self.clients, "keys": self.keys,
            "processes": self.processes, "measured_s": self.measured_s,
            "acquisitions": self.acquisitions, "rate_per_s": self.rate,
            "wait": self.lat.json(), "jain": self.jain,
            "open_waits_at_end": self.open_waits, "failed_tries": self.failed_tries,
            "block_timeouts": self.timeouts, "violations": self.violations,
            "errors": self.errors, "server_cpu_pct": self.server_cpu,
            "generator_cpu_pct": self.generator_cpu, "others_cpu_pct": self.others_cpu,
            "per_client_acquisitions": self.per_client,
            "commandstats": self.commandstats.iter().map(|(c, n, us)| json!({"command": c, "calls": n, "usec_per_call": us})).collect::<Vec<_>>(),
            "read_write": self.rw.as_ref().map(RwStats::json),
            "multi_lock": self.multi.as_ref().map(MultiStats::json),
            "semaphore_permits": self.permits,
        })
    }
}
