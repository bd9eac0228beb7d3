//! Closed-loop lock clients for the throughput scenarios (S1, S2, S5), one
//! tokio task per client on a current_thread runtime, and the protocols:
//!
//! - module:   `LOCK.ACQUIRE key owner PX lease BLOCK wait` / `LOCK.RELEASE key owner`
//! - module-keepalive: the same with `KEEPALIVE` (the server renews the lease
//!   while the connection lives)
//! - module-fence: the same with `FENCE` (the answer is the lock's fencing
//!   token, which must be above the key's previous one; the server writes
//!   the token key `redisson_lock_token:{key}` on every acquire)
//! - redisson: acquire script by EVALSHA; on a PTTL answer the client's process
//!   subscribes to `redisson_lock__channel:{key}` (once per process and lock) and
//!   the client retries when one message is handed to it or the PTTL passes;
//!   release script (HINCRBY -1, DEL + PUBLISH at 0)
//! - spin:     `SET key owner NX PX lease`, retried after a fixed sleep;
//!   compare-and-delete script to release
//! - raw:      `SET key owner NX PX lease` retried at once / `DEL key`
//! - blpop:    S2's reference, not a lock: the key is a list holding one
//!   token (`DEL` + `RPUSH` before the run); `BLPOP key wait` / `RPUSH key
//!   token`, Redis's own hand-off between blocked clients, no module involved
//!
//! With `LoadSpec::read_fraction` set (S7), module and redisson take a
//! read-write lock instead: each cycle is a read with that probability (a
//! seeded RNG per client), else a write. module: `LOCK.RACQUIRE` /
//! `LOCK.WACQUIRE key owner PX lease BLOCK wait`, `LOCK.RELEASE`; redisson:
//! the RReadWriteLock scripts by EVALSHA, waiting on
//! `redisson_rwlock:{key}` (a write release publishes 1, which wakes every
//! waiting thread of a process; the last read release publishes 0, which
//! wakes one). The critical section is one round trip: a read `GET`s the
//! key's data, a write `INCR`s it.
//!
//! With `LoadSpec::multi` set (S8), module and redisson take several keys at
//! once: each cycle picks distinct keys at random (named in that random order
//! or sorted). module: `LOCK.MACQUIRE n key.. owner PX lease BLOCK wait`
//! (retried on nil), `LOCK.MRELEASE n key.. owner`; redisson:
//! `RedissonMultiLock.lock()`, i.e. `tryLock` with a wait of 1.5 s per key,
//! called again whenever it gives up: the keys one by one in the caller's
//! order, each with `RLock.tryLock` for the wait left (the acquire script and
//! the pub/sub waits above), the keys taken so far unlocked when the time is
//! up; the releases of all keys sent together. The critical section is one
//! round trip that `INCR`s every key's data (pipelined).
//!
//! Every grant is checked against a holder flag per key (set when the grant
//! arrives, cleared before the release is sent; for read-write locks an
//! atomic count of the readers and writers holding the key) and every reply
//! against what the protocol must answer; either failing is reported and
//! fails the run. Where the critical section touches the guarded data (S7,
//! S8), the server's answers are checked against the writes completed too.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::io;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use lock_rules::keys::{notify_channel, read_lease_prefix, rw_notify_channel, tagged_name};
use serde_json::{json, Value};
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;
use tokio::time::{sleep, timeout_at};

use crate::conn::{Conn, Reply, ReplyExt};
use crate::server::CpuMeter;
use crate::stats::{self, jain, Lat};

/// Redisson's acquire (RLock `tryLockInnerAsync`, as described in
/// redisson-protocol.md), the same script the interop tests run: KEYS[1]
/// lock, ARGV[1] lease ms, ARGV[2] owner. Nil = acquired, otherwise the
/// lock's PTTL.
pub const REDISSON_ACQUIRE: &str = include_str!("../../scripts/redisson-acquire.lua");

/// Redisson's release: KEYS[1] lock, KEYS[2] channel, ARGV[1] message,
/// ARGV[2] lease ms, ARGV[3] owner. Nil = not the owner, 0 = holds remain,
/// 1 = released (deleted and published).
pub const REDISSON_RELEASE: &str = include_str!("../../scripts/redisson-release.lua");

/// Redisson's RReadWriteLock read acquire: KEYS[1] lock, KEYS[2]
/// `{lock}:<owner>:rwlock_timeout`; ARGV[1] lease ms, ARGV[2] owner,
/// ARGV[3] `<owner>:write`. Nil = acquired, otherwise the lock's PTTL.
pub const REDISSON_READ_ACQUIRE: &str = include_str!("../../scripts/redisson-read-acquire.lua");

/// Read release: KEYS[1] lock, KEYS[2] `redisson_rwlock:{lock}`, KEYS[3]
/// `{lock}:<owner>:rwlock_timeout`, KEYS[4] `{lock}`; ARGV[1] message (0),
/// ARGV[2] owner. Nil = no read hold, 0 = the lock stays, 1 = deleted (and
/// published).
pub const REDISSON_READ_RELEASE: &str = include_str!("../../scripts/redisson-read-release.lua");

/// Write acquire: KEYS[1] lock; ARGV[1] lease ms, ARGV[2] `<owner>:write`.
/// Nil = acquired, otherwise the lock's PTTL.
pub const REDISSON_WRITE_ACQUIRE: &str = include_str!("../../scripts/redisson-write-acquire.lua");

/// Write release: KEYS[1] lock, KEYS[2] `redisson_rwlock:{lock}`; ARGV[1]
/// message (1), ARGV[2] lease ms, ARGV[3] `<owner>:write`. Nil = not the
/// writer, 0 = write holds remain, 1 = the write lock ended.
pub const REDISSON_WRITE_RELEASE: &str = include_str!("../../scripts/redisson-write-release.lua");

/// Redisson's `RPermitExpirableSemaphore` try-acquire script, the exact text
/// of `tryAcquireAsync(List<String> ids, long timeoutDate)` in
/// `RedissonPermitExpirableSemaphore.java` (Redisson HEAD 6686397,
/// 2026-08-21; the Java string pieces joined as they are): KEYS[1] the
/// semaphore, KEYS[2] `{name}:timeout`, KEYS[3] `redisson_sc:{name}`;
/// ARGV[1] permits, ARGV[2] the lease's end (unix ms), ARGV[3] now (unix
/// ms), ARGV[4] Redisson's "never" (922337203685477), ARGV[5] the publish
/// command, ARGV[6..] one 16-byte id per permit. `OK` = acquired; `:<ms>`
/// = the unix ms at which the first held permit's lease ends; nil = none
/// available and none with a lease.
pub const REDISSON_SEM_ACQUIRE: &str = concat!(
    "local expiredIds = redis.call('zrangebyscore', KEYS[2], 0, ARGV[3], 'limit', 0, ARGV[1]); ",
    "if #expiredIds > 0 then ",
    "redis.call('zrem', KEYS[2], unpack(expiredIds)); ",
    "local value = redis.call('incrby', KEYS[1], #expiredIds); ",
    "if tonumber(value) > 0 then ",
    "redis.call(ARGV[5], KEYS[3], value); ",
    "end;",
    "end; ",
    "local value = redis.call('get', KEYS[1]); ",
    "if (value ~= false and tonumber(value) >= tonumber(ARGV[1])) then ",
    "redis.call('decrby', KEYS[1], ARGV[1]); ",
    "for i = 6, #ARGV, 1 do ",
    "redis.call('zadd', KEYS[2], ARGV[2], ARGV[i]); ",
    "end; ",
    "local ttl = redis.call('pttl', KEYS[1]); ",
    "if ttl > 0 then ",
    "redis.call('pexpire', KEYS[2], ttl); ",
    "end; ",
    "return 'OK'; ",
    "end; ",
    "local v = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES'); ",
    "if v[1] ~= nil and v[2] ~= ARGV[4] then ",
    "return ':' .. tostring(v[2]); ",
    "end ",
    "return nil;",
);

/// Redisson's `RPermitExpirableSemaphore.release(id)`: the exact script of
/// `tryReleaseAsync(String permitId)` (same file and commit): KEYS[1] the
/// semaphore, KEYS[2] `redisson_sc:{name}`, KEYS[3] `{name}:timeout`;
/// ARGV[1] the permit's id, ARGV[2] permits (1), ARGV[3] now (unix ms),
/// ARGV[4] the publish command. 1 = released in time (`release` throws on
/// 0); publishes the available count after every release.
pub const REDISSON_SEM_RELEASE: &str = concat!(
    "local expire = redis.call('zscore', KEYS[3], ARGV[1]);",
    "local removed = redis.call('zrem', KEYS[3], ARGV[1]);",
    "if tonumber(removed) ~= 1 then ",
    "return 0;",
    "end;",
    "local value = redis.call('incrby', KEYS[1], ARGV[2]); ",
    "redis.call(ARGV[4], KEYS[2], value); ",
    "if tonumber(expire) <= tonumber(ARGV[3]) then ",
    "return 0;",
    "end;",
    "return 1;",
);

/// Redisson's `RedissonPermitExpirableSemaphore.nonExpirableTimeout`.
pub const REDISSON_NEVER: &[u8] = b"922337203685477";

/// Compare-and-delete (redis-py's Lock release): 1 = deleted.
pub const COMPARE_AND_DELETE: &str = "\
if redis.call('get', KEYS[1]) == ARGV[1] then \
return redis.call('del', KEYS[1]); \
end; \
return 0;";

#[derive(Clone, Debug)]
pub struct Scripts {
    pub acquire: String,
    pub release: String,
    pub cad: String,
    pub read_acquire: String,
    pub read_release: String,
    pub write_acquire: String,
    pub write_release: String,
    pub sem_acquire: String,
    pub sem_release: String,
}

impl Scripts {
    pub async fn load(conn: &mut Conn) -> io::Result<Scripts> {
        Ok(Scripts {
            acquire: conn.ok(&["SCRIPT", "LOAD", REDISSON_ACQUIRE]).await?.text(),
            release: conn.ok(&["SCRIPT", "LOAD", REDISSON_RELEASE]).await?.text(),
            cad: conn
                .ok(&["SCRIPT", "LOAD", COMPARE_AND_DELETE])
                .await?
                .text(),
            read_acquire: conn
                .ok(&["SCRIPT", "LOAD", REDISSON_READ_ACQUIRE])
                .await?
                .text(),
            read_release: conn
                .ok(&["SCRIPT", "LOAD", REDISSON_READ_RELEASE])
                .await?
                .text(),
            write_acquire: conn
                .ok(&["SCRIPT", "LOAD", REDISSON_WRITE_ACQUIRE])
                .await?
                .text(),
            write_release: conn
                .ok(&["SCRIPT", "LOAD", REDISSON_WRITE_RELEASE])
                .await?
                .text(),
            sem_acquire: conn
                .ok(&["SCRIPT", "LOAD", REDISSON_SEM_ACQUIRE])
                .await?
                .text(),
            sem_release: conn
                .ok(&["SCRIPT", "LOAD", REDISSON_SEM_RELEASE])
                .await?
                .text(),
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    Module,
    /// The module's commands with KEEPALIVE.
    ModuleKeepalive,
    /// The module's commands with FENCE (exclusive, one key per cycle).
    ModuleFence,
    /// Redisson's protocol emulated by this generator (our copies of its
    /// scripts, its wait loop): `redisson-emu`.
    Redisson,
    /// The real Redisson client (Java), driven by interop/redisson's load
    /// driver (`redisson_client.rs`): `redisson`. S2, S12 and S13.
    RedissonClient,
    /// Retry sleep in ms.
    Spin(u64),
    Raw,
    /// Redis's native blocked-client hand-off: BLPOP / RPUSH of one token.
    Blpop,
}

impl Proto {
    /// The module's commands, with or without KEEPALIVE or FENCE.
    pub fn is_module(&self) -> bool {
        matches!(
            self,
            Proto::Module | Proto::ModuleKeepalive | Proto::ModuleFence
        )
    }

    /// The acquire options after `PX lease BLOCK wait`.
    fn acquire_flags(&self) -> &'static [&'static [u8]] {
        match self {
            Proto::ModuleKeepalive => &[b"KEEPALIVE"],
            Proto::ModuleFence => &[b"FENCE"],
            _ => &[],
        }
    }

    pub fn name(&self) -> String {
        match self {
            Proto::Module => "module".into(),
            Proto::ModuleKeepalive => "module-keepalive".into(),
            Proto::ModuleFence => "module-fence".into(),
            Proto::Redisson => "redisson-emu".into(),
            Proto::RedissonClient => "redisson".into(),
            Proto::Spin(ms) => format!("spin-{ms}ms"),
            Proto::Raw => "raw".into(),
            Proto::Blpop => "blpop".into(),
        }
    }
}

/// The one element of a `blpop` key's list.
pub const BLPOP_TOKEN: &[u8] = b"token";

/// BLPOP's timeout (seconds, decimals allowed since Redis 6) for a BLOCK
/// wait in ms: 10000 -> "10", 500 -> "0.5", 0 -> "0" (forever, as BLOCK 0).
pub fn blpop_timeout(block_ms: u64) -> String {
    let (s, ms) = (block_ms / 1000, block_ms % 1000);
    if ms == 0 {
        s.to_string()
    } else {
        format!("{s}.{ms:03}").trim_end_matches('0').to_string()
    }
}

/// Owner id in Redisson's `<uuid>:<thread>` form: one uuid-like id per
/// simulated process.
pub fn owner_id(process: usize, thread: usize) -> Vec<u8> {
    format!(
        "8743c9c0-0795-4907-87fd-{:012x}:{}",
        0x6c71_9a6b_0000u64 + process as u64,
        thread + 1
    )
    .into_bytes()
}

#[derive(Clone, Debug)]
pub struct LoadSpec {
    pub proto: Proto,
    pub clients: usize,
    pub keys: usize,
    /// Redisson: client threads per simulated process.
    pub threads_per_process: usize,
    pub warmup: Duration,
    pub measure: Duration,
    pub lease_ms: u64,
    pub block_ms: u64,
    /// Key prefix, unique per run.
    pub prefix: String,
    pub seed: u64,
    /// Read-write lock (module and redisson only): the probability that a
    /// cycle is a read; None = the exclusive lock.
    pub read_fraction: Option<f64>,
    /// Multi-lock (module and redisson only): each cycle takes several keys
    /// at once; None = one key per cycle.
    pub multi: Option<MultiSpec>,
    /// Semaphore of this many permits (module, redisson, blpop): each cycle
    /// takes one permit; None = a lock.
    pub semaphore: Option<usize>,
}

/// How a multi-lock caller names its keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyOrder {
    /// In the random order they were drawn in.
    Random,
    /// In one global order (the key's index), the same for every caller.
    Sorted,
}

impl KeyOrder {
    pub fn name(&self) -> &'static str {
        match self {
            KeyOrder::Random => "random",
            KeyOrder::Sorted => "sorted",
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub struct MultiSpec {
    /// Distinct keys taken per cycle.
    pub keys_per_lock: usize,
    pub order: KeyOrder,
}

/// `RedissonMultiLock.lock()` calls `tryLock` with a wait of this much per
/// lock, again and again until it returns true.
pub const REDISSON_MULTI_WAIT_PER_KEY: Duration = Duration::from_millis(1500);

/// The wait of each of `RedissonMultiLock.lock()`'s `tryLock` calls.
pub fn redisson_multi_wait(keys_per_lock: usize) -> Duration {
    REDISSON_MULTI_WAIT_PER_KEY * keys_per_lock as u32
}

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

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Warmup,
    Measure,
    Drain,
}

/// What a cycle takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Exclusive,
    Read,
    Write,
}

/// `Rw::active`: one reader, one writer.
const READER: u64 = 1;
const WRITER: u64 = 1 << 32;

/// A read-write run's state.
struct Rw {
    read_fraction: f64,
    /// Per key: readers holding it (low 32 bits) and writers (high 32 bits),
    /// added to when a grant arrives and taken from before the release is
    /// sent.
    active: Vec<AtomicU64>,
    read_hist: RefCell<Histogram<u64>>,
    write_hist: RefCell<Histogram<u64>>,
    reads: Cell<u64>,
    writes: Cell<u64>,
    /// Sum and highest of the readers holding at read grants.
    readers_sum: Cell<u64>,
    readers_max: Cell<u64>,
    violations: Cell<u64>,
}

/// Per key: the data the lock guards (`<key>:data`, a counter INCRed by
/// every write hold) and the writes completed so far.
struct Guarded {
    keys: Vec<Vec<u8>>,
    written: Vec<Cell<i64>>,
}

/// A multi-lock run's state.
struct Multi {
    spec: MultiSpec,
    grant_calls: Cell<u64>,
    gave_up: Cell<u64>,
}

/// The first 20 messages of one kind (errors, violations) a run noted.
#[derive(Default)]
pub struct Findings(RefCell<Vec<String>>);

impl Findings {
    pub fn note(&self, msg: String) {
        let mut noted = self.0.borrow_mut();
        if noted.len() < 20 {
            noted.push(msg);
        }
    }

    pub fn list(&self) -> Vec<String> {
        self.0.borrow().clone()
    }
}

struct Shared {
    proto: Proto,
    phase: Cell<Phase>,
    stopping: Cell<bool>,
    stop: Notify,
    keys: Vec<Vec<u8>>,
    channels: Vec<Vec<u8>>,
    channel_index: HashMap<Vec<u8>, usize>,
    holders: Vec<Cell<u32>>,
    hist: RefCell<Histogram<u64>>,
    counts: Vec<Cell<u64>>,
    wait_start: Vec<Cell<Option<(Instant, Mode)>>>,
    violations: Findings,
    errors: Findings,
    failed_tries: Cell<u64>,
    timeouts: Cell<u64>,
    lease: Vec<u8>,
    lease_ms: u64,
    block: Vec<u8>,
    /// `block` in seconds (BLPOP's timeout), e.g. "10" or "0.5".
    block_secs: Vec<u8>,
    scripts: Scripts,
    rw: Option<Rw>,
    multi: Option<Multi>,
    /// Read-write and multi-lock runs.
    data: Option<Guarded>,
    /// module-fence runs: per key, the last fencing token granted (0 =
    /// none yet).
    tokens: Vec<Cell<i64>>,
    /// Semaphore runs: the permits (`holders` then counts the clients
    /// holding one).
    sem: Option<usize>,
    /// Semaphore runs: each key's `{name}:timeout` (Redisson's sorted set
    /// of held permits).
    sem_timeouts: Vec<Vec<u8>>,
}

impl Shared {
    fn measuring(&self) -> bool {
        self.phase.get() == Phase::Measure
    }

    fn failed_try(&self) {
        self.count(&self.failed_tries);
    }

    /// Adds one to a counter of the measured window.
    fn count(&self, c: &Cell<u64>) {
        if self.measuring() {
            c.set(c.get() + 1);
        }
    }

    /// The keys' names, for messages.
    fn names(&self, ks: &[usize]) -> String {
        ks.iter()
            .map(|&k| String::from_utf8_lossy(&self.keys[k]))
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// A subscription of one process to one lock's channel.
#[derive(Default)]
struct Chan {
    /// 0 none, 1 SUBSCRIBE sent, 2 confirmed.
    state: Cell<u8>,
    ready: Notify,
    /// Message `0` wakes one waiting thread of the process (a message that
    /// finds none waiting is kept as one permit, like Redisson's semaphore);
    /// `1` (a read-write lock's write release) wakes every thread waiting
    /// then and keeps nothing (`release(getQueueLength())`).
    wake: Notify,
}

/// What a process asks of its pub/sub connection.
enum SubReq {
    Subscribe(usize),
    Unsubscribe(usize),
}

/// A Redisson process's subscription to a semaphore's channel while some of
/// its threads wait (`PublishSubscribe`'s entry, `RedissonLockEntry`):
/// made by the first thread that waits, dropped (and unsubscribed) when the
/// last one is done.
struct SemEntry {
    /// Threads of the process that subscribed and have not unsubscribed
    /// (`entry.acquired()`).
    acquired: Cell<usize>,
    /// The entry's latch: a message with the available count `v` releases
    /// `min(acquired, v)` permits of it (`SemaphorePubSub.onMessage`); a
    /// waiting thread takes one, a permit nobody takes stays.
    latch: tokio::sync::Semaphore,
    /// The server confirmed the SUBSCRIBE.
    ready: Cell<bool>,
    ready_notify: Notify,
}

/// A simulated Redisson client process: one pub/sub connection shared by its
/// threads.
struct Process {
    sub_tx: mpsc::UnboundedSender<SubReq>,
    chans: RefCell<HashMap<usize, Rc<Chan>>>,
    /// Semaphore runs: the live entry per key.
    sem: RefCell<HashMap<usize, Rc<SemEntry>>>,
    /// Semaphore runs: per key, the entries whose SUBSCRIBE is not yet
    /// confirmed, in the order sent.
    sem_pending: RefCell<HashMap<usize, std::collections::VecDeque<Rc<SemEntry>>>>,
}

impl Process {
    /// `PublishSubscribe.subscribe`: joins the process's entry for `key`, or
    /// makes one and subscribes; waits until the subscription is confirmed.
    async fn sem_subscribe(&self, key: usize) -> io::Result<Rc<SemEntry>> {
        let existing = self.sem.borrow().get(&key).cloned();
        let entry = match existing {
            Some(e) => {
                e.acquired.set(e.acquired.get() + 1);
                e
            }
            None => {
                let e = Rc::new(SemEntry {
                    acquired: Cell::new(1),
                    latch: tokio::sync::Semaphore::new(0),
                    ready: Cell::new(false),
                    ready_notify: Notify::new(),
                });
                self.sem.borrow_mut().insert(key, e.clone());
                self.sem_pending
                    .borrow_mut()
                    .entry(key)
                    .or_default()
                    .push_back(e.clone());
                self.sub_tx
                    .send(SubReq::Subscribe(key))
                    .map_err(|_| io::Error::other("pub/sub connection closed"))?;
                e
            }
        };
        while !entry.ready.get() {
            entry.ready_notify.notified().await;
        }
        Ok(entry)
    }

    /// `PublishSubscribe.unsubscribe`: leaves the entry; the last thread
    /// out drops it and unsubscribes the connection. (Redisson waits for
    /// the UNSUBSCRIBE's answer before a new SUBSCRIBE of the channel; here
    /// a SUBSCRIBE right after is pipelined behind it.)
    fn sem_unsubscribe(&self, key: usize, entry: &Rc<SemEntry>) {
        let left = entry.acquired.get().saturating_sub(1);
        entry.acquired.set(left);
        if left == 0 {
            let mut map = self.sem.borrow_mut();
            if map.get(&key).is_some_and(|e| Rc::ptr_eq(e, entry)) {
                map.remove(&key);
                let _ = self.sub_tx.send(SubReq::Unsubscribe(key));
            }
        }
    }

    fn chan(&self, key: usize) -> Rc<Chan> {
        self.chans.borrow_mut().entry(key).or_default().clone()
    }

    /// Subscribes this process to `key`'s channel if no thread did yet, and
    /// waits until the subscription is confirmed.
    async fn subscribe(&self, key: usize) -> io::Result<Rc<Chan>> {
        let chan = self.chan(key);
        if chan.state.get() == 0 {
            chan.state.set(1);
            self.sub_tx
                .send(SubReq::Subscribe(key))
                .map_err(|_| io::Error::other("pub/sub connection closed"))?;
        }
        while chan.state.get() != 2 {
            chan.ready.notified().await;
        }
        Ok(chan)
    }
}

async fn pubsub_task(
    mut conn: Conn,
    mut rx: mpsc::UnboundedReceiver<SubReq>,
    process: Rc<Process>,
    shared: Rc<Shared>,
) {
    if let Err(e) = pubsub_loop(&mut conn, &mut rx, &process, &shared).await {
        if !shared.stopping.get() {
            shared
                .errors
                .note(format!("redisson pub/sub connection: {e}"));
        }
    }
}

async fn pubsub_loop(
    conn: &mut Conn,
    rx: &mut mpsc::UnboundedReceiver<SubReq>,
    process: &Process,
    shared: &Shared,
) -> io::Result<()> {
    loop {
        tokio::select! {
            biased;
            reply = conn.read() => {
                let reply = reply?;
                let Reply::Array(items) = &reply else {
                    return Err(io::Error::other(format!("unexpected pub/sub reply {reply:?}")));
                };
                match items.as_slice() {
                    [Reply::BulkString(kind), Reply::BulkString(ch), payload] => {
                        let Some(&key) = shared.channel_index.get(ch) else {
                            continue;
                        };
                        if shared.sem.is_some() {
                            sem_pubsub_reply(process, key, kind, payload)?;
                            continue;
                        }
                        let chan = process.chan(key);
                        if kind == b"message" {
                            if *payload == Reply::BulkString(b"1".to_vec()) {
                                chan.wake.notify_waiters();
                            } else {
                                chan.wake.notify_one();
                            }
                        } else if kind == b"subscribe" {
                            chan.state.set(2);
                            chan.ready.notify_waiters();
                        }
                    }
                    _ => return Err(io::Error::other(format!("unexpected pub/sub reply {reply:?}"))),
                }
            }
            req = rx.recv() => match req {
                Some(SubReq::Subscribe(key)) => {
                    conn.push(&[b"SUBSCRIBE", &shared.channels[key]]);
                    conn.flush().await?;
                }
                Some(SubReq::Unsubscribe(key)) => {
                    conn.push(&[b"UNSUBSCRIBE", &shared.channels[key]]);
                    conn.flush().await?;
                }
                None => return Ok(()),
            },
        }
    }
}

/// A semaphore channel's message or (un)subscribe confirmation for a
/// process: a message `v` (the available count) releases `min(acquired, v)`
/// permits of the live entry's latch; a subscribe confirmation makes the
/// oldest pending entry ready.
fn sem_pubsub_reply(process: &Process, key: usize, kind: &[u8], payload: &Reply) -> io::Result<()> {
    match kind {
        b"message" => {
            let v = payload
                .int()
                .ok_or_else(|| unexpected("a semaphore channel's message", payload))?;
            if let Some(e) = process.sem.borrow().get(&key) {
                let n = e.acquired.get().min(v.max(0) as usize);
                e.latch.add_permits(n);
            }
        }
        b"subscribe" => {
            let e = process
                .sem_pending
                .borrow_mut()
                .get_mut(&key)
                .and_then(|q| q.pop_front());
            if let Some(e) = e {
                e.ready.set(true);
                e.ready_notify.notify_waiters();
            }
        }
        _ => {}
    }
    Ok(())
}

enum Outcome {
    Granted,
    Stopped,
    /// A bounded wait (Redisson's `tryLock`, the module's BLOCK) ran out.
    TimedOut,
}

/// The wall clock in unix ms (Redisson's `System.currentTimeMillis()`).
fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn expired(deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|d| Instant::now() >= d)
}

pub struct Client {
    id: usize,
    pub conn: Conn,
    owner: Vec<u8>,
    /// `<owner>:write`: the write hold's field of a Redisson read-write lock.
    owner_write: Vec<u8>,
    process: Option<Rc<Process>>,
    shared: Rc<Shared>,
    /// Redisson semaphore runs: the id of the permit asked for or held (16
    /// bytes, a new one per acquire, as Redisson's `generateId`) and the
    /// generator of those ids.
    permit: Vec<u8>,
    permit_ids: stats::Rng,
}

fn unexpected(what: &str, r: &Reply) -> io::Error {
    io::Error::other(format!("{what} answered {r:?}"))
}

/// The keys of a cycle among `n`: one at random, or for a multi-lock
/// `keys_per_lock` distinct ones in the order drawn (every ordered choice
/// alike), sorted for `KeyOrder::Sorted`.
fn pick_keys(rng: &mut stats::Rng, n: usize, multi: Option<&MultiSpec>, ks: &mut Vec<usize>) {
    ks.clear();
    match multi {
        None => ks.push(if n == 1 { 0 } else { rng.below(n) }),
        Some(m) => {
            while ks.len() < m.keys_per_lock {
                let k = rng.below(n);
                if !ks.contains(&k) {
                    ks.push(k);
                }
            }
            if m.order == KeyOrder::Sorted {
                ks.sort_unstable();
            }
        }
    }
}

/// `name numkeys key.. owner` of the module's multi-lock commands.
fn multi_args<'a>(
    name: &'a [u8],
    numkeys: &'a [u8],
    keys: &'a [Vec<u8>],
    ks: &[usize],
    owner: &'a [u8],
) -> Vec<&'a [u8]> {
    let mut args = vec![name, numkeys];
    args.extend(ks.iter().map(|&k| keys[k].as_slice()));
    args.push(owner);
    args
}

/// An array of `n` integers, each `v` (a multi-lock command's answer).
fn all_ints(r: &Reply, n: usize, v: i64) -> bool {
    matches!(r, Reply::Array(items) if items.len() == n && items.iter().all(|i| *i == Reply::Int(v)))
}

impl Client {
    /// Acquires the run's first key with the protocol's waiting strategy
    /// (true = granted, false = stopped).
    pub async fn acquire_first(&mut self) -> io::Result<bool> {
        Ok(matches!(
            self.acquire(0, Mode::Exclusive).await?,
            Outcome::Granted
        ))
    }

    async fn acquire(&mut self, k: usize, mode: Mode) -> io::Result<Outcome> {
        let sh = self.shared.clone();
        let key = &sh.keys[k];
        if sh.sem.is_some() {
            return self.acquire_permit(k).await;
        }
        match sh.proto {
            Proto::Module | Proto::ModuleKeepalive | Proto::ModuleFence => loop {
                let name: &str = match mode {
                    Mode::Exclusive => "LOCK.ACQUIRE",
                    Mode::Read => "LOCK.RACQUIRE",
                    Mode::Write => "LOCK.WACQUIRE",
                };
                let mut args: Vec<&[u8]> = vec![
                    name.as_bytes(),
                    key,
                    &self.owner,
                    b"PX",
                    &sh.lease,
                    b"BLOCK",
                    &sh.block,
                ];
                args.extend(sh.proto.acquire_flags());
                let r = self.conn.cmd(&args).await?;
                match r {
                    Reply::Int(t) if sh.proto == Proto::ModuleFence && t > 0 => {
                        self.granted_token(k, t);
                        return Ok(Outcome::Granted);
                    }
                    Reply::Int(1) if sh.proto != Proto::ModuleFence => return Ok(Outcome::Granted),
                    Reply::Nil => {
                        sh.timeouts.set(sh.timeouts.get() + 1);
                        if sh.stopping.get() {
                            return Ok(Outcome::Stopped);
                        }
                    }
                    other => return Err(unexpected(name, &other)),
                }
            },
            Proto::Redisson => self.redisson_lock(k, mode, None).await,
            Proto::RedissonClient => Err(io::Error::other(
                "the real Redisson client runs in its own driver, not as a generator task",
            )),
            Proto::Blpop => loop {
                let r = self.conn.cmd(&[b"BLPOP", key, &sh.block_secs]).await?;
                match r {
                    Reply::Array(items)
                        if items.len() == 2
                            && items[0] == Reply::BulkString(key.clone())
                            && items[1] == Reply::BulkString(BLPOP_TOKEN.to_vec()) =>
                    {
                        return Ok(Outcome::Granted)
                    }
                    Reply::Nil => {
                        sh.timeouts.set(sh.timeouts.get() + 1);
                        if sh.stopping.get() {
                            return Ok(Outcome::Stopped);
                        }
                    }
                    other => return Err(unexpected("BLPOP", &other)),
                }
            },
            // Raw retries at once; spin sleeps between tries.
            Proto::Spin(_) | Proto::Raw => loop {
                let r = self
                    .conn
                    .cmd(&[b"SET", key, &self.owner, b"NX", b"PX", &sh.lease])
                    .await?;
                match r {
                    Reply::Okay => return Ok(Outcome::Granted),
                    Reply::Nil => {}
                    other => return Err(unexpected("SET NX PX", &other)),
                }
                sh.failed_try();
                if sh.stopping.get() {
                    return Ok(Outcome::Stopped);
                }
                if let Proto::Spin(ms) = sh.proto {
                    tokio::select! {
                        _ = sleep(Duration::from_millis(ms)) => {}
                        _ = sh.stop.notified() => {}
                    }
                    if sh.stopping.get() {
                        return Ok(Outcome::Stopped);
                    }
                }
            },
        }
    }

    /// One permit of semaphore `k`: `SEM.ACQUIRE key owner PX lease BLOCK
    /// wait` (1 = granted, nil = BLOCK timeout, sent again), Redisson's
    /// `RPermitExpirableSemaphore.acquire(leaseTime)`, or `BLPOP key wait`
    /// of one of the list's tokens.
    async fn acquire_permit(&mut self, k: usize) -> io::Result<Outcome> {
        let sh = self.shared.clone();
        let key = &sh.keys[k];
        match sh.proto {
            Proto::Module => loop {
                let r = self
                    .conn
                    .cmd(&[
                        b"SEM.ACQUIRE",
                        key,
                        &self.owner,
                        b"PX",
                        &sh.lease,
                        b"BLOCK",
                        &sh.block,
                    ])
                    .await?;
                match r {
                    Reply::Int(1) => return Ok(Outcome::Granted),
                    Reply::Nil => {
                        sh.timeouts.set(sh.timeouts.get() + 1);
                        if sh.stopping.get() {
                            return Ok(Outcome::Stopped);
                        }
                    }
                    other => return Err(unexpected("SEM.ACQUIRE", &other)),
                }
            },
            Proto::Redisson => self.redisson_sem_acquire(k).await,
            Proto::Blpop => loop {
                let r = self.conn.cmd(&[b"BLPOP", key, &sh.block_secs]).await?;
                match r {
                    Reply::Array(items)
                        if items.len() == 2
                            && items[0] == Reply::BulkString(key.clone())
                            && items[1] == Reply::BulkString(BLPOP_TOKEN.to_vec()) =>
                    {
                        return Ok(Outcome::Granted)
                    }
                    Reply::Nil => {
                        sh.timeouts.set(sh.timeouts.get() + 1);
                        if sh.stopping.get() {
                            return Ok(Outcome::Stopped);
                        }
                    }
                    other => return Err(unexpected("BLPOP", &other)),
                }
            },
            other => Err(io::Error::other(format!(
                "{} has no semaphore",
                other.name()
            ))),
        }
    }

    /// Redisson's `RPermitExpirableSemaphore.acquire(leaseTime, unit)`: the
    /// try-acquire script with a new permit id; if it answers anything but
    /// `OK`, subscribe (the process's entry for the channel, see
    /// `SemEntry`) and loop: the script again; `OK` ends it, nil waits for a
    /// permit of the entry's latch, `:<ms>` waits for one at most until that
    /// unix ms (a held permit's lease end); the thread leaves the entry at
    /// the end.
    async fn redisson_sem_acquire(&mut self, k: usize) -> io::Result<Outcome> {
        let sh = self.shared.clone();
        let key = &sh.keys[k];
        self.permit = {
            let (a, b) = (self.permit_ids.next_u64(), self.permit_ids.next_u64());
            [a.to_le_bytes(), b.to_le_bytes()].concat()
        };
        let process = self
            .process
            .clone()
            .ok_or_else(|| io::Error::other("redisson client without process"))?;
        let mut entry: Option<Rc<SemEntry>> = None;
        let outcome = loop {
            let now = unix_ms();
            let (now_s, end_s) = (now.to_string(), (now + sh.lease_ms).to_string());
            let r = self
                .conn
                .cmd(&[
                    b"EVALSHA",
                    sh.scripts.sem_acquire.as_bytes(),
                    b"3",
                    key,
                    &sh.sem_timeouts[k],
                    &sh.channels[k],
                    b"1",
                    end_s.as_bytes(),
                    now_s.as_bytes(),
                    REDISSON_NEVER,
                    b"publish",
                    &self.permit,
                ])
                .await;
            let nearest = match r {
                Ok(Reply::BulkString(b)) if b == b"OK" => break Ok(Outcome::Granted),
                Ok(Reply::Nil) => None,
                Ok(Reply::BulkString(b)) if b.first() == Some(&b':') => {
                    match std::str::from_utf8(&b[1..])
                        .ok()
                        .and_then(|t| t.parse::<f64>().ok())
                    {
                        Some(at) => Some(at as u64),
                        None => {
                            break Err(unexpected(
                                "redisson semaphore acquire script",
                                &Reply::BulkString(b),
                            ))
                        }
                    }
                }
                Ok(other) => break Err(unexpected("redisson semaphore acquire script", &other)),
                Err(e) => break Err(e),
            };
            sh.failed_try();
            if sh.stopping.get() {
                break Ok(Outcome::Stopped);
            }
            match &entry {
                // First failure: subscribe, then try again at once.
                None => match process.sem_subscribe(k).await {
                    Ok(e) => entry = Some(e),
                    Err(e) => break Err(e),
                },
                Some(e) => {
                    let wait = match nearest {
                        Some(at) => Duration::from_millis(at.saturating_sub(unix_ms())),
                        None => Duration::from_secs(3600),
                    };
                    tokio::select! {
                        p = e.latch.acquire() => {
                            if let Ok(p) = p {
                                p.forget();
                            }
                        }
                        _ = sleep(wait) => {}
                        _ = sh.stop.notified() => {}
                    }
                    if sh.stopping.get() {
                        break Ok(Outcome::Stopped);
                    }
                }
            }
        };
        if let Some(e) = &entry {
            process.sem_unsubscribe(k, e);
        }
        outcome
    }

    /// Gives back the permit of semaphore `k` (of `permits`):
    /// `SEM.RELEASE key owner` (must answer 0: none held now), Redisson's
    /// release script (must answer 1), or `RPUSH key token` (the list's
    /// length: 1 to `permits`).
    async fn release_permit(&mut self, k: usize, permits: usize) -> io::Result<()> {
        let sh = self.shared.clone();
        let key = &sh.keys[k];
        let (what, r, ok) = match sh.proto {
            Proto::Module => {
                let r = self.conn.cmd(&[b"SEM.RELEASE", key, &self.owner]).await?;
                let ok = r == Reply::Int(0);
                ("SEM.RELEASE", r, ok)
            }
            Proto::Redisson => {
                let now = unix_ms().to_string();
                let r = self
                    .conn
                    .cmd(&[
                        b"EVALSHA",
                        sh.scripts.sem_release.as_bytes(),
                        b"3",
                        key,
                        &sh.channels[k],
                        &sh.sem_timeouts[k],
                        &self.permit,
                        b"1",
                        now.as_bytes(),
                        b"publish",
                    ])
                    .await?;
                let ok = r == Reply::Int(1);
                ("redisson semaphore release script", r, ok)
            }
            _ => {
                let r = self.conn.cmd(&[b"RPUSH", key, BLPOP_TOKEN]).await?;
                let ok = matches!(r, Reply::Int(n) if n >= 1 && n as usize <= permits);
                ("RPUSH", r, ok)
            }
        };
        if !ok {
            return Err(unexpected(what, &r));
        }
        Ok(())
    }

    /// Redisson's `RLock.lock()` (no deadline) or `tryLock(wait)` (until
    /// `deadline`): the acquire script; on a PTTL answer the process
    /// subscribes to the lock's channel and the thread tries again, then
    /// waits for a message handed to it or the PTTL (at most until the
    /// deadline) between tries. Past the deadline after a failed try or a
    /// wait: `TimedOut`.
    async fn redisson_lock(
        &mut self,
        k: usize,
        mode: Mode,
        deadline: Option<Instant>,
    ) -> io::Result<Outcome> {
        let sh = self.shared.clone();
        let key = &sh.keys[k];
        let mut chan: Option<Rc<Chan>> = None;
        let lease_prefix = match mode {
            Mode::Read => read_lease_prefix(key, &self.owner),
            _ => Vec::new(),
        };
        loop {
            let (what, r) = match mode {
                Mode::Read => (
                    "redisson read acquire script",
                    self.conn
                        .cmd(&[
                            b"EVALSHA",
                            sh.scripts.read_acquire.as_bytes(),
                            b"2",
                            key,
                            &lease_prefix,
                            &sh.lease,
                            &self.owner,
                            &self.owner_write,
                        ])
                        .await?,
                ),
                // One key, the lease and the hold's field in the hash.
                Mode::Exclusive | Mode::Write => {
                    let (what, sha, field) = if mode == Mode::Write {
                        (
                            "redisson write acquire script",
                            &sh.scripts.write_acquire,
                            &self.owner_write,
                        )
                    } else {
                        ("redisson acquire script", &sh.scripts.acquire, &self.owner)
                    };
                    let r = self
                        .conn
                        .cmd(&[b"EVALSHA", sha.as_bytes(), b"1", key, &sh.lease, field])
                        .await?;
                    (what, r)
                }
            };
            let pttl = match r {
                Reply::Nil => return Ok(Outcome::Granted),
                Reply::Int(t) => t,
                other => return Err(unexpected(what, &other)),
            };
            sh.failed_try();
            if sh.stopping.get() {
                return Ok(Outcome::Stopped);
            }
            if expired(deadline) {
                return Ok(Outcome::TimedOut);
            }
            match &chan {
                // First failure: subscribe, then try again at once
                // (a release may have been published before the
                // subscription was in place).
                None => {
                    let process = self
                        .process
                        .clone()
                        .ok_or_else(|| io::Error::other("redisson client without process"))?;
                    chan = Some(process.subscribe(k).await?);
                }
                Some(c) => {
                    let mut wait = if pttl >= 0 {
                        Duration::from_millis(pttl as u64)
                    } else {
                        Duration::from_secs(3600)
                    };
                    if let Some(d) = deadline {
                        wait = wait.min(d.saturating_duration_since(Instant::now()));
                    }
                    tokio::select! {
                        _ = c.wake.notified() => {}
                        _ = sleep(wait) => {}
                        _ = sh.stop.notified() => {}
                    }
                }
            }
            if sh.stopping.get() {
                return Ok(Outcome::Stopped);
            }
            if expired(deadline) {
                return Ok(Outcome::TimedOut);
            }
        }
    }

    async fn release(&mut self, k: usize, mode: Mode) -> io::Result<()> {
        let sh = self.shared.clone();
        let key = &sh.keys[k];
        if let Some(permits) = sh.sem {
            return self.release_permit(k, permits).await;
        }
        let (what, r, want): (&str, Reply, &[i64]) = match (sh.proto, mode) {
            (Proto::Module | Proto::ModuleKeepalive | Proto::ModuleFence, _) => (
                "LOCK.RELEASE",
                self.conn.cmd(&[b"LOCK.RELEASE", key, &self.owner]).await?,
                &[0],
            ),
            (Proto::Redisson, Mode::Exclusive) => return self.redisson_unlock(&[k]).await,
            // 0 while other readers hold the lock, 1 when the last one left.
            (Proto::Redisson, Mode::Read) => (
                "redisson read release script",
                self.conn
                    .cmd(&[
                        b"EVALSHA",
                        sh.scripts.read_release.as_bytes(),
                        b"4",
                        key,
                        &sh.channels[k],
                        &read_lease_prefix(key, &self.owner),
                        &tagged_name(key),
                        b"0",
                        &self.owner,
                    ])
                    .await?,
                &[0, 1],
            ),
            (Proto::Redisson, Mode::Write) => (
                "redisson write release script",
                self.conn
                    .cmd(&[
                        b"EVALSHA",
                        sh.scripts.write_release.as_bytes(),
                        b"2",
                        key,
                        &sh.channels[k],
                        b"1",
                        &sh.lease,
                        &self.owner_write,
                    ])
                    .await?,
                &[1],
            ),
            (Proto::Spin(_), _) => (
                "compare-and-delete script",
                self.conn
                    .cmd(&[
                        b"EVALSHA",
                        sh.scripts.cad.as_bytes(),
                        b"1",
                        key,
                        &self.owner,
                    ])
                    .await?,
                &[1],
            ),
            (Proto::Raw, _) => ("DEL", self.conn.cmd(&[b"DEL", key]).await?, &[1]),
            // The holder popped the only token, so the list is empty: 1 even
            // when RPUSH serves a blocked BLPOP at once.
            (Proto::Blpop, _) => (
                "RPUSH",
                self.conn.cmd(&[b"RPUSH", key, BLPOP_TOKEN]).await?,
                &[1],
            ),
            (Proto::RedissonClient, _) => {
                return Err(io::Error::other(
                    "the real Redisson client runs in its own driver, not as a generator task",
                ))
            }
        };
        if !matches!(r, Reply::Int(n) if want.contains(&n)) {
            return Err(unexpected(what, &r));
        }
        Ok(())
    }

    /// Redisson's unlock of these exclusive locks, sent together as
    /// `RedissonMultiLock.unlock()` does (every `unlockAsync` first, then
    /// wait for all); each must answer 1 (released: deleted and published).
    /// Also the unlock of the keys taken when a `tryLock` gives up
    /// (`unlockInner`: the same in older Redisson, one after another in
    /// newer; at most once per wait of seconds, so it makes no difference).
    async fn redisson_unlock(&mut self, ks: &[usize]) -> io::Result<()> {
        let sh = self.shared.clone();
        for &k in ks {
            self.conn.push(&[
                b"EVALSHA",
                sh.scripts.release.as_bytes(),
                b"2",
                &sh.keys[k],
                &sh.channels[k],
                b"0",
                &sh.lease,
                &self.owner,
            ]);
        }
        self.conn.flush().await?;
        for _ in ks {
            let r = self.conn.read().await?;
            if r != Reply::Int(1) {
                return Err(unexpected("redisson release script", &r));
            }
        }
        Ok(())
    }

    /// A multi-lock on the keys `ks`, in that order, taken with the
    /// protocol's waiting strategy until granted (or stopped): the module's
    /// `LOCK.MACQUIRE` again after a BLOCK timeout, Redisson's
    /// `RedissonMultiLock.lock()`: `tryLock` with a wait of 1.5 s per key
    /// again after each one that gave up.
    async fn acquire_multi(&mut self, multi: &Multi, ks: &[usize]) -> io::Result<Outcome> {
        let sh = self.shared.clone();
        loop {
            let got = if sh.proto.is_module() {
                self.macquire(multi, ks).await?
            } else {
                self.redisson_try_multi(multi, ks).await?
            };
            if !matches!(got, Outcome::TimedOut) {
                return Ok(got);
            }
            sh.count(&multi.gave_up);
            if sh.stopping.get() {
                return Ok(Outcome::Stopped);
            }
        }
    }

    /// `LOCK.MACQUIRE n key.. owner PX lease BLOCK wait`: every key's hold
    /// count (1) when granted, nil when the BLOCK time ran out.
    async fn macquire(&mut self, multi: &Multi, ks: &[usize]) -> io::Result<Outcome> {
        let sh = self.shared.clone();
        let n = ks.len().to_string();
        let mut args = multi_args(b"LOCK.MACQUIRE", n.as_bytes(), &sh.keys, ks, &self.owner);
        args.extend([b"PX".as_slice(), &sh.lease, b"BLOCK", &sh.block]);
        args.extend(sh.proto.acquire_flags());
        let r = self.conn.cmd(&args).await?;
        if r == Reply::Nil {
            sh.timeouts.set(sh.timeouts.get() + 1);
            return Ok(Outcome::TimedOut);
        }
        if !all_ints(&r, ks.len(), 1) {
            return Err(unexpected("LOCK.MACQUIRE", &r));
        }
        sh.count(&multi.grant_calls);
        Ok(Outcome::Granted)
    }

    /// `RedissonMultiLock.tryLock(wait)` (lease left to the watchdog): the
    /// locks one by one in the caller's order, each with `RLock.tryLock`
    /// for the wait time left; time up after any step (the last grant too)
    /// unlocks what is taken and gives up. (Redisson also starts over from
    /// the first lock when one is not acquired, but a lock's `tryLock` for
    /// the time left fails only once that time is up, so it then gives up.)
    async fn redisson_try_multi(&mut self, multi: &Multi, ks: &[usize]) -> io::Result<Outcome> {
        let sh = self.shared.clone();
        let deadline = Instant::now() + redisson_multi_wait(multi.spec.keys_per_lock);
        for (i, &k) in ks.iter().enumerate() {
            let taken = match self
                .redisson_lock(k, Mode::Exclusive, Some(deadline))
                .await?
            {
                Outcome::Granted => {
                    sh.count(&multi.grant_calls);
                    i + 1
                }
                Outcome::Stopped => return Ok(Outcome::Stopped),
                Outcome::TimedOut => i,
            };
            if expired(Some(deadline)) {
                self.redisson_unlock(&ks[..taken]).await?;
                return Ok(Outcome::TimedOut);
            }
        }
        Ok(Outcome::Granted)
    }

    /// Releases a multi-lock: `LOCK.MRELEASE n key.. owner` (every key's
    /// holds left: 0), or Redisson's unlock of every key, sent together.
    async fn release_multi(&mut self, ks: &[usize]) -> io::Result<()> {
        if !self.shared.proto.is_module() {
            return self.redisson_unlock(ks).await;
        }
        let sh = self.shared.clone();
        let n = ks.len().to_string();
        let args = multi_args(b"LOCK.MRELEASE", n.as_bytes(), &sh.keys, ks, &self.owner);
        let r = self.conn.cmd(&args).await?;
        if !all_ints(&r, ks.len(), 0) {
            return Err(unexpected("LOCK.MRELEASE", &r));
        }
        Ok(())
    }

    /// The multi-lock critical section: one round trip that `INCR`s the data
    /// of every key held (pipelined); each must answer the next number.
    async fn critical_multi(&mut self, data: &Guarded, ks: &[usize]) -> io::Result<()> {
        for &k in ks {
            self.conn.push(&[b"INCR", &data.keys[k]]);
        }
        self.conn.flush().await?;
        for &k in ks {
            let r = self.conn.read().await?;
            let seen = r.int().ok_or_else(|| unexpected("INCR", &r))?;
            self.check_data(data, k, "INCR", seen, true);
        }
        Ok(())
    }

    /// Checks what a critical section saw of key `k`'s data: a read
    /// (`write` false) exactly the writes completed so far, a write the
    /// next number. False (and a violation recorded) otherwise.
    fn check_data(&self, data: &Guarded, k: usize, what: &str, seen: i64, write: bool) -> bool {
        let sh = &self.shared;
        let written = &data.written[k];
        let want = written.get() + i64::from(write);
        let ok = seen == want;
        if !ok {
            sh.violations.note(format!(
                "{}: {} of {}'s data by client {} saw {seen}, {} write(s) had completed",
                sh.proto.name(),
                what,
                String::from_utf8_lossy(&sh.keys[k]),
                self.id,
                written.get()
            ));
        }
        if write {
            written.set(seen);
        }
        ok
    }

    /// A FENCE grant's token: it must be above the key's previous one. The
    /// previous holder's grant was read before its release was sent, and
    /// this grant came after that release, so the order seen here is the
    /// server's.
    fn granted_token(&self, k: usize, token: i64) {
        let sh = &self.shared;
        let last = &sh.tokens[k];
        if token <= last.get() {
            sh.violations.note(format!(
                "{}: {} granted to client {} with token {token}, not above the previous {}",
                sh.proto.name(),
                String::from_utf8_lossy(&sh.keys[k]),
                self.id,
                last.get()
            ));
        }
        last.set(token);
    }

    /// A read-write grant: counts this holder in, checks that no writer
    /// overlaps anyone, and records the figures of its kind.
    fn granted_rw(&self, rw: &Rw, k: usize, mode: Mode, wait_us: u64) {
        let sh = &self.shared;
        let delta = if mode == Mode::Write { WRITER } else { READER };
        let before = rw.active[k].fetch_add(delta, Ordering::SeqCst);
        let (readers, writers) = (before & (WRITER - 1), before >> 32);
        if writers != 0 || (mode == Mode::Write && readers != 0) {
            rw.violations.set(rw.violations.get() + 1);
            sh.violations.note(format!(
                "{}: {} {} granted to client {} while {readers} reader(s) and {writers} writer(s) hold it",
                sh.proto.name(),
                String::from_utf8_lossy(&sh.keys[k]),
                if mode == Mode::Write { "write" } else { "read" },
                self.id,
            ));
        }
        if !sh.measuring() {
            return;
        }
        if mode == Mode::Write {
            rw.writes.set(rw.writes.get() + 1);
            stats::record(&mut rw.write_hist.borrow_mut(), wait_us);
        } else {
            rw.reads.set(rw.reads.get() + 1);
            stats::record(&mut rw.read_hist.borrow_mut(), wait_us);
            let now = readers + 1;
            rw.readers_sum.set(rw.readers_sum.get() + now);
            rw.readers_max.set(rw.readers_max.get().max(now));
        }
    }

    /// The read-write critical section: a reader `GET`s the lock's data key,
    /// a writer `INCR`s it. A reader must see exactly the writes completed
    /// so far, a writer the next number: anything else means a writer ran
    /// beside another holder in the server.
    async fn critical_rw(
        &mut self,
        rw: &Rw,
        data: &Guarded,
        k: usize,
        mode: Mode,
    ) -> io::Result<()> {
        let key = &data.keys[k];
        let (what, r) = if mode == Mode::Write {
            ("INCR", self.conn.cmd(&[b"INCR", key]).await?)
        } else {
            ("GET", self.conn.cmd(&[b"GET", key]).await?)
        };
        let seen = match &r {
            Reply::Nil => 0,
            _ => r.int().ok_or_else(|| unexpected(what, &r))?,
        };
        if !self.check_data(data, k, what, seen, mode == Mode::Write) {
            rw.violations.set(rw.violations.get() + 1);
        }
        Ok(())
    }

    async fn run(mut self, seed: u64) {
        let sh = self.shared.clone();
        let id = self.id;
        let fail = |what: &str, ks: &[usize], e: io::Error| {
            sh.errors.note(format!(
                "{} client {id} {what} {}: {e}",
                sh.proto.name(),
                sh.names(ks)
            ));
        };
        let mut rng = stats::Rng::new(seed);
        let mut ks: Vec<usize> = Vec::new();
        loop {
            if sh.stopping.get() {
                break;
            }
            let mode = match &sh.rw {
                None => Mode::Exclusive,
                Some(rw) if rng.chance(rw.read_fraction) => Mode::Read,
                Some(_) => Mode::Write,
            };
            pick_keys(
                &mut rng,
                sh.keys.len(),
                sh.multi.as_ref().map(|m| &m.spec),
                &mut ks,
            );
            let k = ks[0];
            let t0 = Instant::now();
            sh.wait_start[id].set(Some((t0, mode)));
            let got = match &sh.multi {
                Some(multi) => self.acquire_multi(multi, &ks).await,
                None => self.acquire(k, mode).await,
            };
            sh.wait_start[id].set(None);
            match got {
                Ok(Outcome::Granted) => {}
                Ok(Outcome::Stopped) => break,
                Ok(Outcome::TimedOut) => {
                    fail("acquire", &ks, io::Error::other("gave up"));
                    break;
                }
                Err(e) => {
                    fail("acquire", &ks, e);
                    break;
                }
            }
            let t1 = Instant::now();
            let wait_us = (t1 - t0).as_micros() as u64;
            if let Some(rw) = &sh.rw {
                self.granted_rw(rw, k, mode, wait_us);
            } else if let Some(permits) = sh.sem {
                // Holders of the semaphore seen by the generator (an
                // overlap of holds that reach it, as the lock's flag).
                let holding = &sh.holders[k];
                if holding.get() as usize >= permits {
                    sh.violations.note(format!(
                        "{}: a permit of {} granted to client {id} while {} clients hold its {permits}",
                        sh.proto.name(),
                        String::from_utf8_lossy(&sh.keys[k]),
                        holding.get()
                    ));
                }
                holding.set(holding.get() + 1);
            } else {
                for &k in &ks {
                    let holder = &sh.holders[k];
                    if holder.get() != 0 {
                        sh.violations.note(format!(
                            "{}: {} granted to client {id} (with {}) while client {} holds it",
                            sh.proto.name(),
                            String::from_utf8_lossy(&sh.keys[k]),
                            sh.names(&ks),
                            holder.get() - 1
                        ));
                    }
                    holder.set(id as u32 + 1);
                }
            }
            if sh.measuring() {
                let c = &sh.counts[id];
                c.set(c.get() + 1);
                stats::record(&mut sh.hist.borrow_mut(), wait_us);
            }
            // Exclusive: empty critical section. Read-write and multi-lock:
            // one round trip on the data the lock guards, so that a holder
            // stays counted while other clients' replies are handled (with
            // nothing in between, one task would count itself in and out in
            // one poll and could never see another holder). Cleared before
            // the release is sent: the release itself may hand the lock on.
            let critical = match (&sh.data, &sh.rw) {
                (Some(data), Some(rw)) => self.critical_rw(rw, data, k, mode).await,
                (Some(data), None) => self.critical_multi(data, &ks).await,
                (None, _) => Ok(()),
            };
            if let Err(e) = critical {
                fail("critical section on", &ks, e);
                break;
            }
            match (&sh.rw, mode) {
                (None, _) if sh.sem.is_some() => {
                    sh.holders[k].set(sh.holders[k].get().saturating_sub(1));
                }
                (None, _) => {
                    for &k in &ks {
                        sh.holders[k].set(0);
                    }
                }
                (Some(rw), Mode::Write) => {
                    rw.active[k].fetch_sub(WRITER, Ordering::SeqCst);
                }
                (Some(rw), _) => {
                    rw.active[k].fetch_sub(READER, Ordering::SeqCst);
                }
            }
            let released = if sh.multi.is_some() {
                self.release_multi(&ks).await
            } else {
                self.release(k, mode).await
            };
            if let Err(e) = released {
                fail("release", &ks, e);
                break;
            }
        }
    }
}

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

/// Where Redisson's semaphore clients wait: `redisson_sc:{name}`.
pub fn sem_channel(name: &[u8]) -> Vec<u8> {
    [b"redisson_sc:".as_slice(), &tagged_name(name)].concat()
}

/// A semaphore's held permits, Redisson's `{name}:timeout`.
pub fn sem_timeout_key(name: &[u8]) -> Vec<u8> {
    [tagged_name(name).as_slice(), b":timeout"].concat()
}

/// A fresh semaphore of `permits` for `proto`: `SEM.INIT key permits` (must
/// answer 1), the counter Redisson's `trySetPermits` writes (`SET key
/// permits NX`), or a list of `permits` tokens.
pub async fn init_semaphore(
    admin: &mut Conn,
    proto: Proto,
    key: &[u8],
    permits: usize,
) -> io::Result<()> {
    let n = permits.to_string();
    let timeout = sem_timeout_key(key);
    admin.cmd(&[b"DEL", key, &timeout]).await?;
    let (what, r, ok) = match proto {
        Proto::Module => {
            let r = admin.cmd(&[b"SEM.INIT", key, n.as_bytes()]).await?;
            let ok = r == Reply::Int(1);
            ("SEM.INIT", r, ok)
        }
        Proto::Redisson => {
            let r = admin.cmd(&[b"SET", key, n.as_bytes(), b"NX"]).await?;
            let ok = r == Reply::Okay;
            ("SET NX of the permits", r, ok)
        }
        _ => {
            let mut args: Vec<&[u8]> = vec![b"RPUSH", key];
            args.extend(std::iter::repeat_n(BLPOP_TOKEN, permits));
            let r = admin.cmd(&args).await?;
            let ok = r == Reply::Int(permits as i64);
            ("RPUSH of the tokens", r, ok)
        }
    };
    if !ok {
        return Err(unexpected(what, &r));
    }
    Ok(())
}

/// After a semaphore run (every client done): every permit is back. The
/// counter is `permits` and no held permit is left in `{name}:timeout`
/// (module and redisson share that layout), or the list holds `permits`
/// tokens.
pub async fn check_semaphore(
    addr: &str,
    proto: Proto,
    key: &[u8],
    permits: usize,
) -> io::Result<()> {
    let mut c = Conn::connect(addr).await?;
    if proto == Proto::Blpop {
        let r = c.cmd(&[b"LLEN", key]).await?;
        if r != Reply::Int(permits as i64) {
            return Err(unexpected(&format!("LLEN (want {permits})"), &r));
        }
        return Ok(());
    }
    let r = c.cmd(&[b"GET", key]).await?;
    if r.int() != Some(permits as i64) {
        return Err(unexpected(&format!("GET (want {permits})"), &r));
    }
    let r = c.cmd(&[b"EXISTS", &sem_timeout_key(key)]).await?;
    if r != Reply::Int(0) {
        return Err(unexpected(
            "EXISTS of the held permits' sorted set (want 0)",
            &r,
        ));
    }
    Ok(())
}

/// `INFO commandstats` as (command, calls, µs per call).
pub async fn commandstats(conn: &mut Conn) -> io::Result<Vec<(String, u64, f64)>> {
    let info = conn.ok(&["INFO", "commandstats"]).await?.text();
    let mut out = Vec::new();
    for line in info.lines() {
        let Some((name, rest)) = line
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        let field = |k: &str| {
            rest.split(',')
                .find_map(|kv| kv.strip_prefix(k))
                .and_then(|v| v.parse::<f64>().ok())
        };
        if let (Some(calls), Some(us)) = (field("calls="), field("usec_per_call=")) {
            out.push((name.to_string(), calls as u64, us));
        }
    }
    Ok(out)
}

/// Sequential PINGs from one client: replies per second in the window.
pub async fn ping_rate(addr: &str, warmup: Duration, measure: Duration) -> io::Result<f64> {
    let mut conn = Conn::connect(addr).await?;
    let ping = crate::conn::command(&[b"PING"]);
    let pong = Reply::SimpleString("PONG".into());
    let end_warm = Instant::now() + warmup;
    while Instant::now() < end_warm {
        let r = conn.raw(&ping).await?;
        if r != pong {
            return Err(unexpected("PING", &r));
        }
    }
    let start = Instant::now();
    let end = start + measure;
    let mut n = 0u64;
    loop {
        let r = conn.raw(&ping).await?;
        if r != pong {
            return Err(unexpected("PING", &r));
        }
        n += 1;
        if n.is_multiple_of(64) && Instant::now() >= end {
            break;
        }
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multi_lock_keys_are_distinct_and_ordered_as_asked() {
        let mut rng = stats::Rng::new(3);
        let mut ks = Vec::new();
        let mut unsorted = 0;
        for order in [KeyOrder::Random, KeyOrder::Sorted] {
            let m = MultiSpec {
                keys_per_lock: 3,
                order,
            };
            for _ in 0..1000 {
                pick_keys(&mut rng, 8, Some(&m), &mut ks);
                assert_eq!(ks.len(), 3);
                assert!(ks.iter().all(|&k| k < 8));
                assert!(ks[0] != ks[1] && ks[0] != ks[2] && ks[1] != ks[2], "{ks:?}");
                let sorted = ks.windows(2).all(|w| w[0] < w[1]);
                match order {
                    KeyOrder::Sorted => assert!(sorted, "{ks:?}"),
                    KeyOrder::Random => unsorted += usize::from(!sorted),
                }
            }
        }
        // 5 of the 6 orders of 3 keys are not ascending.
        assert!((780..880).contains(&unsorted), "{unsorted}");
        pick_keys(&mut rng, 1, None, &mut ks);
        assert_eq!(ks, [0]);
    }

    #[test]
    fn multi_lock_answers() {
        let ones = Reply::Array(vec![Reply::Int(1); 3]);
        assert!(all_ints(&ones, 3, 1));
        assert!(!all_ints(&ones, 2, 1));
        assert!(!all_ints(&ones, 3, 0));
        assert!(!all_ints(&Reply::Nil, 3, 1));
    }

    /// The scripts as `scripts/redisson-*.lua` keep them (Redisson's Java
    /// string literals one per line below the comments; joined without the
    /// newlines they are the script): the same bytes as these constants.
    #[test]
    fn redisson_scripts_match_the_extracted_ones() {
        fn joined(file: &str) -> String {
            file.split('\n').filter(|l| !l.starts_with("--")).collect()
        }
        let pairs = [
            (
                REDISSON_SEM_ACQUIRE,
                include_str!("../../scripts/redisson-sem-expirable-try-acquire.lua"),
            ),
            (
                REDISSON_SEM_RELEASE,
                include_str!("../../scripts/redisson-sem-expirable-try-release.lua"),
            ),
            (
                crate::latch::REDISSON_COUNT_DOWN,
                include_str!("../../scripts/redisson-latch-count-down.lua"),
            ),
            (
                crate::latch::REDISSON_TRY_SET_COUNT,
                include_str!("../../scripts/redisson-latch-try-set-count.lua"),
            ),
        ];
        for (ours, file) in pairs {
            assert_eq!(ours, joined(file));
        }
    }

    #[test]
    fn semaphore_keys_are_redissons() {
        assert_eq!(sem_channel(b"pool"), b"redisson_sc:{pool}");
        assert_eq!(sem_timeout_key(b"pool"), b"{pool}:timeout");
        assert_eq!(sem_channel(b"{a}b"), b"redisson_sc:{a}b");
        assert_eq!(sem_timeout_key(b"{a}b"), b"{a}b:timeout");
        assert_eq!(
            crate::latch::latch_channel(b"gate"),
            b"redisson_countdownlatch__channel__{gate}"
        );
    }

    /// `SemaphorePubSub.onMessage`: a message `v` releases min(threads
    /// subscribed, v) permits of the process's latch; a subscribe
    /// confirmation readies the oldest entry waiting for one.
    #[test]
    fn semaphore_message_wakes_at_most_the_subscribed_threads() {
        let (tx, _rx) = mpsc::unbounded_channel();
        let p = Process {
            sub_tx: tx,
            chans: RefCell::new(HashMap::new()),
            sem: RefCell::new(HashMap::new()),
            sem_pending: RefCell::new(HashMap::new()),
        };
        let e = Rc::new(SemEntry {
            acquired: Cell::new(3),
            latch: tokio::sync::Semaphore::new(0),
            ready: Cell::new(false),
            ready_notify: Notify::new(),
        });
        p.sem.borrow_mut().insert(0, e.clone());
        p.sem_pending
            .borrow_mut()
            .entry(0)
            .or_default()
            .push_back(e.clone());
        sem_pubsub_reply(&p, 0, b"subscribe", &Reply::Int(1)).unwrap();
        assert!(e.ready.get());
        sem_pubsub_reply(&p, 0, b"message", &Reply::BulkString(b"2".to_vec())).unwrap();
        assert_eq!(e.latch.available_permits(), 2);
        sem_pubsub_reply(&p, 0, b"message", &Reply::BulkString(b"10".to_vec())).unwrap();
        assert_eq!(e.latch.available_permits(), 5);
        // No entry for the key: nobody of the process waits, nothing kept.
        sem_pubsub_reply(&p, 1, b"message", &Reply::BulkString(b"4".to_vec())).unwrap();
        assert!(sem_pubsub_reply(&p, 0, b"message", &Reply::BulkString(b"x".to_vec())).is_err());
    }

    #[test]
    fn blpop_timeout_is_block_in_seconds() {
        assert_eq!(blpop_timeout(10_000), "10");
        assert_eq!(blpop_timeout(500), "0.5");
        assert_eq!(blpop_timeout(1_250), "1.25");
        assert_eq!(blpop_timeout(7), "0.007");
        assert_eq!(blpop_timeout(0), "0");
    }
}
