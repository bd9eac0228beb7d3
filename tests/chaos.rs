//! History checker under faults. Many clients run random LOCK.* operations
//! against one master (AOF on, one replica) while a fault thread injects
//! force-releases, FLUSHALL, client kills, DEBUG RELOAD, BGREWRITEAOF,
//! CLIENT PAUSE WRITE windows, default-lease changes, restarts from the AOF
//! (after SHUTDOWN or `kill -9`) and promotions of the replica after WAIT,
//! and clients sometimes drop
//! their connection mid-wait. Every operation is recorded
//! with its client-side send and receive times; afterwards the whole
//! history is checked:
//!
//! - mutual exclusion: no two owners' holds overlap in real time;
//! - fencing tokens strictly increase in grant order (FLUSHALL included);
//! - FIFO: no blocked waiter is overtaken by a caller that queued after it;
//! - liveness: within one lease of the end every lock is free, nobody
//!   waits, and the module can be unloaded;
//! - the replica and an AOF reload end with the master's `DEBUG DIGEST`.
//!
//! A hold counts from the grant's reply to the earliest of: the release
//! request, a lower bound of its lease deadline, and a revocation
//! (FORCERELEASE, FLUSHALL) sent while it was held. A KEEPALIVE hold lasts
//! at least while its connection did: until its release, or its owner
//! dropping the connection, or the first fault that may have ended the
//! connection or the binding (a kill of that client, a restart, a
//! promotion), whichever came first, or its lease bound if later. The lease deadline is
//! at least `send + lease` (the server starts the lease after the request
//! was sent). A grant after waiting started its lease later, when it was
//! written; that moment is not taken from the reply's arrival (a reply can
//! be delayed: an AOF fsync, a fork, a busy machine), but asked of the
//! server right after the reply: whether the hold is still the owner's and
//! its time left, which puts the deadline at least at `ask + time left`.
//!
//! Clients take exclusive locks (LOCK.ACQUIRE, with re-entry and renewal;
//! some with KEEPALIVE, held past their lease, walked away from by closing
//! the connection),
//! read and write holds of read-write locks (LOCK.RACQUIRE / WACQUIRE:
//! read holds may overlap each other, nothing else may; with downgrades,
//! upgrades and releases naming READ or WRITE), and pairs of
//! exclusive locks at once (LOCK.MACQUIRE / MRELEASE, in either order).
//!
//! Beside them, semaphore clients loop on semaphores of [`SEM_PERMITS`]
//! permits: `SEM.ACQUIRE key owner PERMITS 1|2` with the same random
//! options (PX, KEEPALIVE, BLOCK, FENCE, giving up mid-wait), hold, maybe
//! `SEM.RENEW`, then `SEM.RELEASE` (sometimes one permit first, then the
//! rest) or walk away. A hold of `n` permits is placed in time as a lock
//! hold is (its lease end asked of `SEM.INFO`'s `ttl`), and the checks
//! are the same but for exclusion: at no moment do the holds of a
//! semaphore add up to more than its permits. `SEM.INFO`, asked after every
//! grant, must always show the semaphore whole (`permits` = N); a FLUSHALL
//! is sent in one MULTI with `SEM.INIT` (so the semaphore is never missing)
//! and revokes every permit held. At the end, within one lease, every
//! semaphore shows N available, no holder and no waiter, and N permits can
//! be taken at once.
//!
//! `make test` runs it for a few seconds; `make chaos` for minutes
//! (`LOCK_CHAOS_SECS`, `LOCK_CHAOS_CLIENTS`, `LOCK_CHAOS_KEYS`,
//! `LOCK_CHAOS_RW_KEYS`, `LOCK_CHAOS_SEM_KEYS`, `LOCK_CHAOS_SEM_CLIENTS`,
//! `LOCK_CHAOS_SEED`) and prints the totals.

use crate::common;
use crate::common::semaphore;
use common::dataset::{aof_matches, replica_matches};
use common::*;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use redis::{Connection, Value};

/// `lock.default-lease-ms` values the fault thread switches between; the
/// smallest bounds a hold taken without PX.
const DEFAULT_LEASES: [u64; 3] = [200, 300, 400];
const MAX_LEASE_MS: u64 = 400;
/// The least lease of a KEEPALIVE hold: above the shortest the server keeps
/// alive (704 ms at hz 10, `INFO lock` keepalive_min_lease_ms). It is
/// renewed at half its lease, so a renewal may be half of it late before
/// the hold lapses: here 360 ms, more than any fault stalls the server for
/// (a DEBUG RELOAD of this data, a fork, a write pause of at most 80 ms). A
/// stall longer than that ends a hold whose connection lives, as it ends
/// any lease.
const MIN_KEEPALIVE_LEASE_MS: u64 = 720;
const MAX_KEEPALIVE_LEASE_MS: u64 = 1000;
/// The permits of each semaphore; its clients ask for 1 or 2 at a time.
const SEM_PERMITS: i64 = 3;

/// The longest lease a hold whose leases are at least `min_lease` gets: a
/// KEEPALIVE hold's range is its own.
fn max_lease(min_lease: u64) -> u64 {
    if min_lease >= MIN_KEEPALIVE_LEASE_MS {
        MAX_KEEPALIVE_LEASE_MS
    } else {
        MAX_LEASE_MS
    }
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Int(i64),
    /// LOCK.MACQUIRE / LOCK.MRELEASE: a reply per key.
    Ints(Vec<i64>),
    Nil,
    /// `OK` and other status replies (faults).
    Status(String),
    Error(String),
    /// The connection broke before the reply: the server may or may not
    /// have run the command.
    Unknown,
}

fn outcome(r: redis::RedisResult<Value>) -> Outcome {
    match r {
        Ok(Value::Int(n)) => Outcome::Int(n),
        Ok(v @ Value::Array(_)) if ints_of(&v).is_some() => {
            Outcome::Ints(ints_of(&v).unwrap_or_default())
        }
        Ok(Value::Nil) => Outcome::Nil,
        Ok(Value::Okay) => Outcome::Status("OK".into()),
        Ok(Value::SimpleString(s)) => Outcome::Status(s),
        Ok(v) => Outcome::Error(format!("unexpected reply {v:?}")),
        Err(e) if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() => {
            Outcome::Unknown
        }
        Err(e) => Outcome::Error(error_line(&e)),
    }
}

/// Errors that say the command did nothing: Redis refuses commands while
/// it loads the AOF after a restart, a demoted master refuses writes
/// (READONLY) and answers its blocked callers UNBLOCKED.
fn refused(error: &str) -> bool {
    ["LOADING", "READONLY", "UNBLOCKED"]
        .iter()
        .any(|code| error.starts_with(code))
}

/// After these the connection is useless: the server closes it after an
/// UNBLOCKED, and a READONLY server is no longer the master.
fn moved_on(error: &str) -> bool {
    error.starts_with("READONLY") || error.starts_with("UNBLOCKED")
}

/// A hold as its owner knew it.
#[derive(Debug, Clone)]
struct Hold {
    key: usize,
    owner: usize,
    /// The grant's reply.
    start: Duration,
    /// No later than this the owner stopped relying on the lock.
    end: Duration,
    token: Option<i64>,
    /// The server wrote the grant between these two times (see [`Granted`]).
    granted: (Duration, Duration),
    /// The hold was seen to be the owner's at this time, after its reply.
    confirmed: Option<Duration>,
    /// A read hold of a read-write lock: it may overlap other read holds.
    read: bool,
    /// A KEEPALIVE hold.
    kept: Option<Kept>,
    /// The permits of a semaphore hold; 0 for a lock's.
    permits: i64,
}

/// A hold the server keeps alive while the connection of the client that
/// took it lives ([`apply_keepalive`]).
#[derive(Debug, Clone, Copy)]
struct Kept {
    client: usize,
    /// The hold was not released, and its owner had not dropped that
    /// connection, before this (the release's send, the drop).
    until: Duration,
}

/// A grant as the client can place it in time. The server wrote it between
/// the request's send and its reply's arrival, and the server's answer to a
/// question asked right after the reply can narrow that: the hold's time
/// left (PTTL) puts its lease end at least at the moment of asking plus
/// that, and, for a lease of known length, the grant at that end minus the
/// lease (give or take the server clock's millisecond). No bound here
/// depends on how long a reply took to arrive.
#[derive(Debug, Clone, Copy)]
struct Granted {
    at: (Duration, Duration),
    /// The lease ends no earlier than this.
    lease_end: Duration,
    /// When the hold was seen to be the owner's; `None`: not asked, or not
    /// the owner's any more (the hold then counts as empty).
    confirmed: Option<Duration>,
}

/// What a LOCK.RENEW did to the owner's holds' lease bounds.
enum Renewal {
    None,
    /// Every live hold's lease was replaced (it may be shorter than
    /// before); the reply came at `recv`.
    Replaced {
        at: Duration,
        recv: Duration,
    },
    /// Perhaps renewed, perhaps shortened.
    AtMost(Duration),
}

impl Renewal {
    /// The new bound of the owner's only hold: a renewal proves it live.
    fn apply(&self, bound: Duration) -> Duration {
        match *self {
            Renewal::None => bound,
            Renewal::Replaced { at, .. } => at,
            Renewal::AtMost(at) => bound.min(at),
        }
    }

    /// The new bound of one of several holds: a renewal proves only that
    /// one of them was live, so a hold whose bound passed before the
    /// reply may have ended and was not renewed.
    fn apply_one_of(&self, bound: Duration) -> Duration {
        match *self {
            Renewal::Replaced { at, recv } if bound < recv => bound.min(at),
            _ => self.apply(bound),
        }
    }
}

/// A LOCK.ACQUIRE ... BLOCK as its caller saw it.
#[derive(Debug, Clone)]
struct Wait {
    key: usize,
    client: usize,
    /// When the request started to be written, and when it was written
    /// (in the server's socket: the server reads requests in that order).
    send: Duration,
    sent: Duration,
    /// The server ended the wait between these times: a grant when it was
    /// written, a BLOCK timeout no earlier than `send + BLOCK`.
    ended: (Duration, Duration),
    granted: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum FaultKind {
    ForceRelease,
    FlushAll,
    ClientKill,
    DebugReload,
    RewriteAof,
    PauseWrites,
    DefaultLease,
    /// SHUTDOWN (the AOF is fsynced on every write) and start again on the
    /// same port: every client is disconnected, every lock must survive.
    Restart,
    /// The same with `kill -9` instead of SHUTDOWN: what was acknowledged
    /// is in the AOF, which the server loads again.
    Kill,
    /// A planned failover: writes paused, WAIT until the replica has them,
    /// `REPLICAOF NO ONE` on the replica, clients sent to it, the old
    /// master made its replica. Locks and tokens must carry over.
    Promote,
}

#[derive(Debug, Clone)]
struct Fault {
    kind: FaultKind,
    /// The key for a force-release, if it removed a lock.
    key: Option<usize>,
    removed: bool,
    /// The client whose connection a kill was aimed at.
    victim: Option<usize>,
    send: Duration,
    recv: Duration,
}

/// One request as sent and answered.
#[derive(Debug, Clone)]
struct Op {
    send: Duration,
    recv: Duration,
    args: Vec<String>,
    outcome: Outcome,
}

#[derive(Default)]
struct History {
    ops: Vec<Op>,
    holds: Vec<Hold>,
    waits: Vec<Wait>,
    faults: Vec<Fault>,
    operations: u64,
    /// Callers that dropped their connection mid-wait.
    gave_up: u64,
    /// Replies no rule allows (reported as violations).
    anomalies: Vec<String>,
    /// Read holds taken by a writer, write holds by a lone reader, and
    /// write requests refused to a reader beside other readers.
    downgrades: u64,
    upgrades: u64,
    upgrades_refused: u64,
}

struct Shared {
    epoch: Instant,
    stop: AtomicBool,
    history: Mutex<History>,
    /// Exclusive locks first, then `rw_keys` read-write locks, then
    /// `sem_keys` semaphores.
    keys: Vec<String>,
    rw_keys: usize,
    sem_keys: usize,
    /// Clients `0..lock_clients` take locks, the others semaphores.
    lock_clients: usize,
    /// The master's address, which clients (re)connect to.
    master_addr: Mutex<String>,
}

impl Shared {
    fn now(&self) -> Duration {
        self.epoch.elapsed()
    }
}

fn lock_key(i: usize) -> String {
    format!("chaos:{i}")
}

fn rw_key(i: usize) -> String {
    format!("chaos:rw:{i}")
}

fn sem_key(i: usize) -> String {
    format!("chaos:sem:{i}")
}

fn connect(server_addr: &str) -> Option<Connection> {
    let client = redis::Client::open(format!("redis://{server_addr}/")).ok()?;
    let con = client
        .get_connection_with_timeout(Duration::from_secs(5))
        .ok()?;
    con.set_read_timeout(Some(PATIENCE)).ok()?;
    Some(con)
}

/// Sends a command and reads its reply: the time it was written (in the
/// server's socket) and what came back.
fn call(con: &mut Connection, args: &[String], shared: &Shared) -> (Duration, Outcome) {
    let mut cmd = redis::cmd(&args[0]);
    for a in &args[1..] {
        cmd.arg(a.as_str());
    }
    let written = con.send_packed_command(&cmd.get_packed_command());
    let sent = shared.now();
    if written.is_err() {
        return (sent, Outcome::Unknown);
    }
    let reply = match con.recv_response() {
        Ok(Value::ServerError(e)) => Err(e.into()),
        other => other,
    };
    (sent, outcome(reply))
}

struct Client<'s> {
    id: usize,
    /// Bumped when the client walks away from a hold: like a process that
    /// crashed and came back, it has a new owner id (otherwise its next
    /// acquire of that key would be a re-entry).
    generation: usize,
    seed: u64,
    con: Option<Connection>,
    /// When the last request was written.
    last_sent: Duration,
    /// When the client first dropped its connection since its latest
    /// acquire: its KEEPALIVE holds were no longer renewed from then on.
    dropped: Option<Duration>,
    rng: Rng,
    shared: &'s Shared,
}

impl Client<'_> {
    fn conn(&mut self) -> Option<&mut Connection> {
        if self.con.is_none() {
            let addr = self.shared.master_addr.lock().ok()?.clone();
            let Some(mut con) = connect(&addr) else {
                // The server is restarting: do not spin.
                thread::sleep(Duration::from_millis(10));
                return None;
            };
            // Named, so that a kill can be aimed at this client's current
            // connection (see `named_clients`).
            let _: () = redis::cmd("CLIENT")
                .arg("SETNAME")
                .arg(client_name(self.id))
                .query(&mut con)
                .ok()?;
            self.con = Some(con);
        }
        self.con.as_mut()
    }

    /// Sends `args`, returning (send time, reply time, outcome).
    fn op(&mut self, args: &[String]) -> (Duration, Duration, Outcome) {
        self.op_or_give_up(args, None)
    }

    /// [`Self::op`], but with `patience` the client stops reading after
    /// that long and drops the connection, as a client whose own timeout
    /// fires mid-wait does.
    fn op_or_give_up(
        &mut self,
        args: &[String],
        patience: Option<Duration>,
    ) -> (Duration, Duration, Outcome) {
        let shared = self.shared;
        // The send time is taken once connected: a client that has to
        // reconnect first (after giving up mid-wait, a kill, a restart)
        // sends its request only after the connection and CLIENT ID are
        // done, which takes tens of ms while the server is busy. Counted
        // from before, a later caller on an open connection seemed to
        // overtake it (seen as FIFO violations in 300 s runs).
        let (send, result) = match self.conn() {
            Some(con) => {
                let send = shared.now();
                let result = match patience {
                    Some(t) if con.set_read_timeout(Some(t)).is_err() => (send, Outcome::Unknown),
                    Some(_) => {
                        let result = call(con, args, shared);
                        if con.set_read_timeout(Some(PATIENCE)).is_err() {
                            self.drop_connection();
                        }
                        result
                    }
                    None => call(con, args, shared),
                };
                self.last_sent = result.0;
                (send, result.1)
            }
            None => (shared.now(), Outcome::Unknown),
        };
        let recv = shared.now();
        match &result {
            // Whatever it held or was granted may still be held: like a
            // process that lost its connection and restarted, go on as a
            // new owner.
            Outcome::Unknown => {
                self.drop_connection();
                self.generation += 1;
            }
            // Nothing ran; the next request goes to the current master.
            Outcome::Error(e) if moved_on(e) => self.drop_connection(),
            _ => {}
        }
        if let Ok(mut h) = shared.history.lock() {
            h.operations += 1;
            if patience.is_some() && result == Outcome::Unknown {
                h.gave_up += 1;
            }
            h.ops.push(Op {
                send,
                recv,
                args: args.to_vec(),
                outcome: result.clone(),
            });
        }
        (send, recv, result)
    }

    /// Closes the connection (if open): the server ends the KEEPALIVE
    /// bindings made on it.
    fn drop_connection(&mut self) {
        if self.con.take().is_some() && self.dropped.is_none() {
            self.dropped = Some(self.shared.now());
        }
    }

    /// Walks away from what it holds, like a process that crashed and came
    /// back with a new owner id; from KEEPALIVE holds by closing the
    /// connection, so that their leases run out.
    fn walk_away(&mut self, kept: bool) {
        self.generation += 1;
        if kept {
            self.drop_connection();
        }
    }

    /// How long a KEEPALIVE hold released (or walked away from) at `end`
    /// was surely renewed: until then, unless the connection went before.
    fn keep_until(&self, hold: &mut Hold, end: Duration) {
        if let Some(kept) = &mut hold.kept {
            kept.until = self.dropped.map_or(end, |d| d.min(end));
        }
    }

    /// Holds the lock for a while: a KEEPALIVE hold often past its lease.
    fn critical_section(&mut self, lease_ms: u64, kept: bool) {
        let ms = if kept {
            self.rng.range(lease_ms / 3, lease_ms * 2)
        } else {
            self.rng.below(lease_ms / 3)
        };
        thread::sleep(Duration::from_millis(ms));
    }

    fn owner(&self) -> String {
        format!("{:08x}-chaos:{}:{}", self.seed, self.id, self.generation)
    }

    /// Identifies the owner (client and generation) in the checker.
    fn owner_no(&self) -> usize {
        self.id * 1_000_000 + self.generation
    }

    fn anomaly(&self, what: String) {
        if let Ok(mut h) = self.shared.history.lock() {
            h.anomalies.push(what);
        }
    }

    fn run(mut self) {
        let min_default = *DEFAULT_LEASES.iter().min().unwrap_or(&200);
        let locks = self.shared.keys.len() - self.shared.sem_keys;
        let exclusive = locks - self.shared.rw_keys;
        if self.id >= self.shared.lock_clients {
            while !self.shared.stop.load(Ordering::Relaxed) {
                let key = locks + self.rng.below(self.shared.sem_keys as u64) as usize;
                self.semaphore_op(key, min_default);
            }
            return;
        }
        while !self.shared.stop.load(Ordering::Relaxed) {
            let key = self.rng.below(locks as u64) as usize;
            if key >= exclusive {
                self.read_write_op(key, min_default);
                continue;
            }
            if exclusive >= 2 && self.rng.one_in(6) {
                self.multi_op(exclusive, min_default);
                continue;
            }
            let name = self.shared.keys[key].clone();
            let Some((mut hold, lease_ms)) =
                self.acquire_hold(key, "LOCK.ACQUIRE", false, min_default)
            else {
                continue;
            };
            let mut bound = hold.end;
            let mut holds = 1;
            let kept = hold.kept.is_some();
            let min_lease = if kept { MIN_KEEPALIVE_LEASE_MS } else { 150 };
            // Re-entry: one more hold and a fresh lease (which KEEPALIVE
            // then renews).
            if self.rng.one_in(8) {
                let again = self.rng.range(min_lease, max_lease(min_lease));
                let args = vec![
                    "LOCK.ACQUIRE".to_string(),
                    name.clone(),
                    self.owner(),
                    "PX".into(),
                    again.to_string(),
                ];
                match self.op(&args) {
                    // A re-entry replaces the lease (it may shorten it).
                    (s, _, Outcome::Int(2)) => {
                        holds += 1;
                        bound = s + Duration::from_millis(again);
                    }
                    // The lease had run out: the first hold ended before
                    // this fresh one, which is not kept alive.
                    (s, r, Outcome::Int(1)) => {
                        hold.end = bound.min(s);
                        self.keep_until(&mut hold, s);
                        if let Ok(mut h) = self.shared.history.lock() {
                            h.holds.push(hold.clone());
                        }
                        hold.start = r;
                        hold.granted = (s, r);
                        hold.confirmed = None;
                        hold.token = None;
                        hold.kept = None;
                        bound = s + Duration::from_millis(again);
                    }
                    // Perhaps it ran, and perhaps it shortened the lease.
                    (s, _, Outcome::Unknown) => {
                        bound = bound.min(s + Duration::from_millis(again));
                    }
                    (_, _, other) => {
                        // The lease may have run out, or been revoked, and
                        // someone else may hold it now.
                        let did_nothing = matches!(&other, Outcome::Error(e) if refused(e));
                        if other != Outcome::Nil && !did_nothing {
                            self.anomaly(format!("re-entry {args:?} answered {other:?}"));
                        }
                    }
                }
            }
            let kept = hold.kept.is_some();
            self.critical_section(lease_ms, kept);
            bound = self
                .maybe_renew("LOCK.RENEW", &name, min_lease)
                .apply(bound);
            hold.end = bound;
            // Sometimes the owner walks away and lets the lease end it.
            let mut until = self.shared.now();
            if self.rng.one_in(10) {
                self.walk_away(kept);
            } else {
                let args = vec!["LOCK.RELEASE".to_string(), name.clone(), self.owner()];
                for _ in 0..holds {
                    let (s, _, got) = self.op(&args);
                    until = s;
                    match got {
                        Outcome::Int(n) if n > 0 => continue,
                        Outcome::Int(_) | Outcome::Unknown => {}
                        Outcome::Error(e) if e.starts_with("NOTOWNER") => {}
                        // The release did not run: walk away and let the
                        // lease end the hold.
                        Outcome::Error(e) if refused(&e) => self.walk_away(kept),
                        other => self.anomaly(format!("{args:?} answered {other:?}")),
                    }
                    hold.end = hold.end.min(s);
                    break;
                }
            }
            self.keep_until(&mut hold, until);
            if let Ok(mut h) = self.shared.history.lock() {
                h.holds.push(hold);
            }
        }
    }
}

/// An acquire's options, drawn at random.
struct AcquireOptions {
    /// `[PX lease] [BLOCK ms] [FENCE] [KEEPALIVE]`.
    args: Vec<String>,
    lease: Option<u64>,
    block: Option<u64>,
    fence: bool,
    keepalive: bool,
    /// How long the caller waits before giving up mid-wait (sometimes).
    patience: Option<Duration>,
}

impl Client<'_> {
    fn acquire_options(&mut self) -> AcquireOptions {
        let keepalive = self.rng.one_in(5);
        let lease = if keepalive {
            Some(
                self.rng
                    .range(MIN_KEEPALIVE_LEASE_MS, MAX_KEEPALIVE_LEASE_MS),
            )
        } else {
            (!self.rng.one_in(5)).then(|| self.rng.range(150, MAX_LEASE_MS))
        };
        let block = (!self.rng.one_in(4)).then(|| self.rng.range(10, 250));
        let fence = self.rng.one_in(3);
        let mut args = Vec::new();
        if let Some(ms) = lease {
            args.extend(["PX".into(), ms.to_string()]);
        }
        if let Some(ms) = block {
            args.extend(["BLOCK".into(), ms.to_string()]);
        }
        if fence {
            args.push("FENCE".into());
        }
        if keepalive {
            args.push("KEEPALIVE".into());
        }
        let patience = block
            .filter(|_| self.rng.one_in(10))
            .map(|ms| Duration::from_millis(self.rng.range(1, ms)));
        AcquireOptions {
            args,
            lease,
            block,
            fence,
            keepalive,
            patience,
        }
    }

    /// Sends `command key owner` with random options; on a grant, the hold
    /// it starts (ending at its lease bound) and the lease.
    fn acquire_hold(
        &mut self,
        key: usize,
        command: &str,
        read: bool,
        min_default: u64,
    ) -> Option<(Hold, u64)> {
        let AcquireOptions {
            args: options,
            lease,
            block,
            fence,
            keepalive,
            patience,
        } = self.acquire_options();
        let mut args = vec![
            command.to_string(),
            self.shared.keys[key].clone(),
            self.owner(),
        ];
        args.extend(options);
        self.dropped = None;
        let (send, recv, got) = self.op_or_give_up(&args, patience);
        let sent = self.last_sent;
        let reply = match got {
            Outcome::Int(n) => n,
            Outcome::Nil => {
                if let Some(ms) = block {
                    let ended = (send + Duration::from_millis(ms), recv);
                    self.record_wait(key, (send, sent), ended, false);
                }
                return None;
            }
            Outcome::Unknown => return None,
            Outcome::Error(e) if refused(&e) => return None,
            other => {
                self.anomaly(format!("{args:?} answered {other:?}"));
                return None;
            }
        };
        if !fence && reply != 1 {
            self.anomaly(format!("{args:?} granted with hold count {reply}"));
        }
        let lease_ms = lease.unwrap_or(min_default);
        let name = self.shared.keys[key].clone();
        let owner = self.owner();
        // The key whose TTL is this hold's lease: a waiting writer held
        // nothing before, so the hash's time left is its write hold's; a
        // reader's first hold has its own lease key.
        let (field, ttl_key) = if command == "LOCK.WACQUIRE" {
            (format!("{owner}:write"), name.clone())
        } else if read {
            (
                owner.clone(),
                format!("{{{name}}}:{owner}:rwlock_timeout:1"),
            )
        } else {
            (owner.clone(), name.clone())
        };
        let granted = self.ask_grant(send, recv, lease, lease_ms, &[(&name, &field, &ttl_key)]);
        if block.is_some() {
            self.record_wait(key, (send, sent), granted.at, true);
        }
        Some((
            self.hold(key, recv, &granted, fence.then_some(reply), read, keepalive),
            lease_ms,
        ))
    }

    fn hold(
        &self,
        key: usize,
        recv: Duration,
        g: &Granted,
        token: Option<i64>,
        read: bool,
        keepalive: bool,
    ) -> Hold {
        Hold {
            key,
            owner: self.owner_no(),
            start: recv,
            end: g.lease_end,
            token,
            granted: g.at,
            confirmed: g.confirmed,
            read,
            kept: keepalive.then_some(Kept {
                client: self.id,
                until: recv,
            }),
            permits: 0,
        }
    }

    /// Places a grant in time (see [`Granted`]): the request was sent at
    /// `send` and answered at `recv`. Right after the reply the server is
    /// asked, in one MULTI, whether each `(hash, field, key whose TTL is the
    /// hold's lease)` is still the owner's and its time left. `lease`: the
    /// PX asked for, if any (the default lease may change during the run);
    /// `lease_floor_ms` the least it can be.
    fn ask_grant(
        &mut self,
        send: Duration,
        recv: Duration,
        lease: Option<u64>,
        lease_floor_ms: u64,
        holds: &[(&str, &str, &str)],
    ) -> Granted {
        let ms = Duration::from_millis;
        let unconfirmed = Granted {
            at: (send, recv),
            // Nothing proves it lived past its reply: it counts as empty.
            lease_end: recv,
            confirmed: None,
        };
        let shared = self.shared;
        let Some(con) = self.con.as_mut() else {
            return unconfirmed;
        };
        let mut pipe = redis::pipe();
        pipe.atomic();
        for (hash, field, ttl_key) in holds {
            pipe.cmd("HEXISTS").arg(*hash).arg(*field);
            pipe.cmd("PTTL").arg(*ttl_key);
        }
        let ask = shared.now();
        let answers: Vec<i64> = match pipe.query(con) {
            Ok(answers) => answers,
            Err(_) => {
                self.drop_connection();
                return unconfirmed;
            }
        };
        let answered = shared.now();
        let mut left: Vec<u64> = Vec::new();
        for pair in answers.chunks(2) {
            match *pair {
                [1, ttl] if ttl >= 0 => left.push(ttl as u64),
                _ => return unconfirmed,
            }
        }
        let (Some(&least), Some(&most)) = (left.iter().min(), left.iter().max()) else {
            return unconfirmed;
        };
        // The server read its clock (in whole ms) between `ask` and
        // `answered`, and set each deadline at the grant's clock + lease.
        let lease_end = (ask + ms(least))
            .saturating_sub(ms(1))
            .max(send + ms(lease_floor_ms));
        let at = match lease {
            Some(l) => {
                let lo = (ask + ms(least)).saturating_sub(ms(l + 1)).max(send);
                let hi = (answered + ms(most) + ms(1))
                    .saturating_sub(ms(l))
                    .min(recv);
                if lo <= hi {
                    (lo, hi)
                } else {
                    (send, recv)
                }
            }
            None => (send, recv),
        };
        Granted {
            at,
            lease_end,
            confirmed: Some(ask),
        }
    }

    /// Sometimes renews the lease of every hold the owner has on `name`
    /// with one of at least `min_lease` ms (`command`: LOCK.RENEW or
    /// SEM.RENEW).
    fn maybe_renew(&mut self, command: &str, name: &str, min_lease: u64) -> Renewal {
        if !self.rng.one_in(5) {
            return Renewal::None;
        }
        let renewal = self.rng.range(min_lease, max_lease(min_lease));
        let args = vec![
            command.to_string(),
            name.to_string(),
            self.owner(),
            "PX".into(),
            renewal.to_string(),
        ];
        match self.op(&args) {
            (s, recv, Outcome::Int(_)) => Renewal::Replaced {
                at: s + Duration::from_millis(renewal),
                recv,
            },
            (s, _, Outcome::Unknown) => Renewal::AtMost(s + Duration::from_millis(renewal)),
            (_, _, Outcome::Error(e)) if e.starts_with("NOTOWNER") || refused(&e) => Renewal::None,
            // The permits' lease had ended: they went back.
            (_, _, Outcome::Error(e)) if command == "SEM.RENEW" && e.starts_with("EXPIRED") => {
                Renewal::None
            }
            (_, _, other) => {
                self.anomaly(format!("{args:?} answered {other:?}"));
                Renewal::None
            }
        }
    }

    fn record_wait(
        &self,
        key: usize,
        (send, sent): (Duration, Duration),
        ended: (Duration, Duration),
        granted: bool,
    ) {
        if let Ok(mut h) = self.shared.history.lock() {
            h.waits.push(Wait {
                key,
                client: self.id,
                send,
                sent,
                ended,
                granted,
            });
        }
    }

    /// A read or write hold of a read-write lock: acquire, sometimes take
    /// the other kind too (a writer's read hold, kept after its write
    /// release: a downgrade; or a lone reader's upgrade), maybe renew,
    /// release (or walk away).
    fn read_write_op(&mut self, key: usize, min_default: u64) {
        let name = self.shared.keys[key].clone();
        let write = self.rng.one_in(4);
        let command = if write {
            "LOCK.WACQUIRE"
        } else {
            "LOCK.RACQUIRE"
        };
        let Some((first, lease_ms)) = self.acquire_hold(key, command, !write, min_default) else {
            return;
        };
        let kept = first.kept.is_some();
        let min_lease = if kept { MIN_KEEPALIVE_LEASE_MS } else { 150 };
        let mut holds = vec![first];
        if self.rng.one_in(3) {
            // The owner's binding covers its holds of both kinds, but only
            // if the first one still stood when the second was granted:
            // one taken after a force-release or a FLUSHALL is a fresh hold
            // and is not kept alive. The client cannot tell which, so the
            // second hold counts by its lease alone.
            holds.extend(self.other_kind_hold(key, write, min_lease));
        }
        self.critical_section(lease_ms, kept);
        let renewal = self.maybe_renew("LOCK.RENEW", &name, min_lease);
        let sole = holds.len() == 1;
        for hold in &mut holds {
            hold.end = if sole {
                renewal.apply(hold.end)
            } else {
                renewal.apply_one_of(hold.end)
            };
        }
        // When each hold was released, if it was.
        let mut released = vec![None; holds.len()];
        if self.rng.one_in(10) {
            self.walk_away(kept);
        } else {
            // With both kinds held the release must name one; the write
            // hold goes first more often (a downgrade), and the read hold
            // lives on for a while.
            if holds.len() == 2 && self.rng.one_in(3) {
                holds.swap(0, 1);
            }
            let named = holds.len() == 2 || self.rng.one_in(2);
            for (i, hold) in holds.iter_mut().enumerate() {
                if i > 0 {
                    thread::sleep(Duration::from_millis(self.rng.below(lease_ms / 3)));
                }
                let mut args = vec!["LOCK.RELEASE".to_string(), name.clone(), self.owner()];
                if named {
                    args.push(if hold.read { "READ" } else { "WRITE" }.into());
                }
                let (s, _, got) = self.op(&args);
                hold.end = hold.end.min(s);
                released[i] = Some(s);
                match got {
                    Outcome::Int(0) => continue,
                    Outcome::Error(e) if e.starts_with("NOTOWNER") => continue,
                    Outcome::Unknown => {}
                    Outcome::Error(e) if refused(&e) => self.walk_away(kept),
                    other => self.anomaly(format!("{args:?} answered {other:?}")),
                }
                // The connection or the master changed: walk away from the
                // rest and let the leases end it.
                break;
            }
        }
        let now = self.shared.now();
        for (hold, at) in holds.iter_mut().zip(released) {
            self.keep_until(hold, at.unwrap_or(now));
        }
        if let Ok(mut h) = self.shared.history.lock() {
            h.holds.extend(holds);
        }
    }

    /// The owner of a `write` (or read) hold on `key` asks for a hold of
    /// the other kind, never waiting: a writer is always let in; a reader
    /// only when it is the only holder, else it is refused with DEADLOCK.
    /// Either may find its first hold's lease over and be treated as any
    /// caller.
    fn other_kind_hold(&mut self, key: usize, write: bool, min_lease: u64) -> Option<Hold> {
        let lease = self.rng.range(min_lease, max_lease(min_lease));
        let fence = self.rng.one_in(3);
        let command = if write {
            "LOCK.RACQUIRE"
        } else {
            "LOCK.WACQUIRE"
        };
        let mut args = vec![
            command.to_string(),
            self.shared.keys[key].clone(),
            self.owner(),
            "PX".into(),
            lease.to_string(),
        ];
        if fence {
            args.push("FENCE".into());
        }
        let (send, recv, got) = self.op(&args);
        let reply = match got {
            Outcome::Int(n) => n,
            Outcome::Nil | Outcome::Unknown => return None,
            Outcome::Error(e) if refused(&e) => return None,
            Outcome::Error(e) if !write && e.starts_with("DEADLOCK") => {
                if let Ok(mut h) = self.shared.history.lock() {
                    h.upgrades_refused += 1;
                }
                return None;
            }
            other => {
                self.anomaly(format!("{args:?} answered {other:?}"));
                return None;
            }
        };
        if !fence && reply != 1 {
            self.anomaly(format!("{args:?} granted with hold count {reply}"));
        }
        if let Ok(mut h) = self.shared.history.lock() {
            if write {
                h.downgrades += 1;
            } else {
                h.upgrades += 1;
            }
        }
        let granted = if write {
            // A writer's first read hold has its own lease key.
            let name = self.shared.keys[key].clone();
            let owner = self.owner();
            let lease_key = format!("{{{name}}}:{owner}:rwlock_timeout:1");
            self.ask_grant(
                send,
                recv,
                Some(lease),
                lease,
                &[(&name, &owner, &lease_key)],
            )
        } else {
            // An upgrade: the hash's time left may be the reader's own read
            // holds', not the write hold's. Only send and reply place it.
            Granted {
                at: (send, recv),
                lease_end: send + Duration::from_millis(lease),
                confirmed: None,
            }
        };
        Some(self.hold(key, recv, &granted, fence.then_some(reply), write, false))
    }

    /// Two exclusive locks taken together with LOCK.MACQUIRE (in either
    /// order) and released together with LOCK.MRELEASE.
    fn multi_op(&mut self, exclusive: usize, min_default: u64) {
        let first = self.rng.below(exclusive as u64) as usize;
        let second = (first + 1 + self.rng.below(exclusive as u64 - 1) as usize) % exclusive;
        let keys = [first, second];
        let names: Vec<String> = keys.iter().map(|&k| self.shared.keys[k].clone()).collect();
        let AcquireOptions {
            args: options,
            lease,
            block,
            fence,
            keepalive,
            patience,
        } = self.acquire_options();
        let mut args = vec!["LOCK.MACQUIRE".to_string(), "2".into()];
        args.extend(names.iter().cloned());
        args.push(self.owner());
        args.extend(options);
        self.dropped = None;
        let (send, recv, got) = self.op_or_give_up(&args, patience);
        let sent = self.last_sent;
        if let (Some(ms), Outcome::Nil) = (block, &got) {
            for key in keys {
                let ended = (send + Duration::from_millis(ms), recv);
                self.record_wait(key, (send, sent), ended, false);
            }
        }
        let replies = match got {
            Outcome::Ints(v) if v.len() == 2 => v,
            Outcome::Nil | Outcome::Unknown => return,
            Outcome::Error(e) if refused(&e) => return,
            other => return self.anomaly(format!("{args:?} answered {other:?}")),
        };
        if !fence && replies != [1, 1] {
            self.anomaly(format!("{args:?} granted with hold counts {replies:?}"));
        }
        let lease_ms = lease.unwrap_or(min_default);
        let owner = self.owner();
        let holds: Vec<(&str, &str, &str)> = names
            .iter()
            .map(|name| (name.as_str(), owner.as_str(), name.as_str()))
            .collect();
        let granted = self.ask_grant(send, recv, lease, lease_ms, &holds);
        if block.is_some() {
            for key in keys {
                self.record_wait(key, (send, sent), granted.at, true);
            }
        }
        self.critical_section(lease_ms, keepalive);
        let mut end = granted.lease_end;
        let mut until = self.shared.now();
        if self.rng.one_in(10) {
            self.walk_away(keepalive);
        } else {
            let mut args = vec!["LOCK.MRELEASE".to_string(), "2".into()];
            args.extend(names.iter().cloned());
            args.push(self.owner());
            let (s, _, got) = self.op(&args);
            until = s;
            match got {
                Outcome::Ints(v) if v == [0, 0] => end = end.min(s),
                Outcome::Unknown => end = end.min(s),
                // One lease ran out: all or none, so the other key stays
                // held until its own lease ends. Walk away from it (the
                // owner's next acquire of it would be a re-entry).
                Outcome::Error(e) if e.starts_with("NOTOWNER") => self.walk_away(keepalive),
                Outcome::Error(e) if refused(&e) => self.walk_away(keepalive),
                other => self.anomaly(format!("{args:?} answered {other:?}")),
            }
        }
        let holds: Vec<Hold> = keys
            .into_iter()
            .enumerate()
            .map(|(i, key)| {
                let mut hold = self.hold(
                    key,
                    recv,
                    &Granted {
                        lease_end: end,
                        ..granted
                    },
                    fence.then_some(replies[i]),
                    false,
                    keepalive,
                );
                self.keep_until(&mut hold, until);
                hold
            })
            .collect();
        if let Ok(mut h) = self.shared.history.lock() {
            h.holds.extend(holds);
        }
    }
}

/// Semaphore clients.
impl Client<'_> {
    /// One round on semaphore `key`: `SEM.ACQUIRE ... PERMITS n` with
    /// random options, hold, maybe renew, release (sometimes one permit
    /// first) or walk away.
    fn semaphore_op(&mut self, key: usize, min_default: u64) {
        let name = self.shared.keys[key].clone();
        let n: i64 = if self.rng.one_in(3) { 2 } else { 1 };
        let AcquireOptions {
            args: options,
            lease,
            block,
            fence,
            keepalive,
            patience,
        } = self.acquire_options();
        let mut args = vec![
            "SEM.ACQUIRE".to_string(),
            name.clone(),
            self.owner(),
            "PERMITS".into(),
            n.to_string(),
        ];
        args.extend(options);
        self.dropped = None;
        let (send, recv, got) = self.op_or_give_up(&args, patience);
        let sent = self.last_sent;
        let reply = match got {
            Outcome::Int(r) => r,
            Outcome::Nil => {
                if let Some(ms) = block {
                    let ended = (send + Duration::from_millis(ms), recv);
                    self.record_wait(key, (send, sent), ended, false);
                }
                return;
            }
            Outcome::Unknown => return,
            Outcome::Error(e) if refused(&e) => return,
            other => return self.anomaly(format!("{args:?} answered {other:?}")),
        };
        // A fresh owner (every round has its own) holds what it asked for.
        if !fence && reply != n {
            self.anomaly(format!("{args:?} granted with {reply} permits held"));
        }
        let lease_ms = lease.unwrap_or(min_default);
        let owner = self.owner();
        let granted = self.ask_permits(send, recv, lease, lease_ms, &name, &owner, n, keepalive);
        if block.is_some() {
            self.record_wait(key, (send, sent), granted.at, true);
        }
        let mut hold = self.hold(
            key,
            recv,
            &granted,
            fence.then_some(reply),
            false,
            keepalive,
        );
        hold.permits = n;
        self.critical_section(lease_ms, keepalive);
        let min_lease = if keepalive {
            MIN_KEEPALIVE_LEASE_MS
        } else {
            150
        };
        hold.end = self
            .maybe_renew("SEM.RENEW", &name, min_lease)
            .apply(hold.end);
        let mut holds = vec![hold];
        // When each hold was released, if it was.
        let mut released = vec![None; 2];
        if self.rng.one_in(10) {
            self.walk_away(keepalive);
        } else {
            // Sometimes one permit of two first: the hold splits in two.
            if n == 2 && self.rng.one_in(3) {
                let mut first = holds[0].clone();
                first.permits = 1;
                holds[0].permits = 1;
                holds.insert(0, first);
            }
            for (i, hold) in holds.iter_mut().enumerate() {
                if i > 0 {
                    thread::sleep(Duration::from_millis(self.rng.below(lease_ms / 3)));
                }
                let mut args = vec!["SEM.RELEASE".to_string(), name.clone(), self.owner()];
                let left = if i == 0 && n == 2 && hold.permits == 1 {
                    args.extend(["PERMITS".into(), "1".into()]);
                    1
                } else {
                    0
                };
                let (s, _, got) = self.op(&args);
                hold.end = hold.end.min(s);
                released[i] = Some(s);
                match got {
                    Outcome::Int(k) if k == left => continue,
                    Outcome::Unknown => {}
                    // The lease ended: the permits went back (EXPIRED
                    // gives them back now), the rest with them.
                    Outcome::Error(e) if e.starts_with("NOTOWNER") || e.starts_with("EXPIRED") => {}
                    Outcome::Error(e) if refused(&e) => self.walk_away(keepalive),
                    other => self.anomaly(format!("{args:?} answered {other:?}")),
                }
                // The rest ends by its lease (or its KEEPALIVE binding).
                break;
            }
        }
        let now = self.shared.now();
        for (hold, at) in holds.iter_mut().zip(released) {
            self.keep_until(hold, at.unwrap_or(now));
        }
        if let Ok(mut h) = self.shared.history.lock() {
            h.holds.extend(holds);
        }
    }

    /// [`Self::ask_grant`] for a semaphore: `SEM.INFO` right after the
    /// reply says whether `owner` holds its `n` permits and their time left
    /// (`ttl`). Also checks that the semaphore is whole: `permits` is
    /// always [`SEM_PERMITS`], no permit is lost or made up.
    #[allow(clippy::too_many_arguments)]
    fn ask_permits(
        &mut self,
        send: Duration,
        recv: Duration,
        lease: Option<u64>,
        lease_floor_ms: u64,
        name: &str,
        owner: &str,
        n: i64,
        keepalive: bool,
    ) -> Granted {
        let ms = Duration::from_millis;
        let unconfirmed = Granted {
            at: (send, recv),
            lease_end: recv,
            confirmed: None,
        };
        let shared = self.shared;
        let Some(con) = self.con.as_mut() else {
            return unconfirmed;
        };
        let ask = shared.now();
        let info = match semaphore::sem_info(con, name) {
            Ok(info) => info,
            Err(e) => {
                if !refused(&e) {
                    self.drop_connection();
                }
                return unconfirmed;
            }
        };
        let answered = shared.now();
        let Some(info) = info else {
            self.anomaly(format!("SEM.INFO {name}: the semaphore is missing"));
            return unconfirmed;
        };
        if info.permits != SEM_PERMITS || info.available < 0 || info.held() > SEM_PERMITS {
            self.anomaly(format!(
                "SEM.INFO {name}: {SEM_PERMITS} permits expected, shows {info:?}"
            ));
        }
        let ttl = match info.holder(owner) {
            Some(h) if h.permits == n && h.ttl >= 0 => h.ttl as u64,
            _ => return unconfirmed,
        };
        let lease_end = (ask + ms(ttl))
            .saturating_sub(ms(1))
            .max(send + ms(lease_floor_ms));
        // A KEEPALIVE renewal may have come before the question: its time
        // left says nothing of when the grant was written.
        let at = match lease.filter(|_| !keepalive) {
            Some(l) => {
                let lo = (ask + ms(ttl)).saturating_sub(ms(l + 1)).max(send);
                let hi = (answered + ms(ttl) + ms(1)).saturating_sub(ms(l)).min(recv);
                if lo <= hi {
                    (lo, hi)
                } else {
                    (send, recv)
                }
            }
            None => (send, recv),
        };
        Granted {
            at,
            lease_end,
            confirmed: Some(ask),
        }
    }
}

/// The master and its replica; a promotion swaps them.
struct Pair {
    master: Server,
    replica: Server,
}

impl Pair {
    /// A planned failover, as an operator (or Sentinel) runs it: pause
    /// writes, wait until the replica has every write, promote it, point the
    /// clients at it, make the old master its replica, resume. False (and
    /// nothing changed) when the replica does not catch up within 2 s.
    fn promote(&mut self, shared: &Shared) -> bool {
        let mut old = self.master.client();
        let _: () = q(&mut old, &["CLIENT", "PAUSE", "10000", "WRITE"]);
        let deadline = Instant::now() + Duration::from_secs(2);
        while !self.master.replica_caught_up(&self.replica) {
            if Instant::now() > deadline {
                let _: () = q(&mut old, &["CLIENT", "UNPAUSE"]);
                return false;
            }
            thread::sleep(Duration::from_millis(1));
        }
        let _: () = q(&mut self.replica.client(), &["REPLICAOF", "NO", "ONE"]);
        if let Ok(mut addr) = shared.master_addr.lock() {
            *addr = self.replica.addr();
        }
        // Its blocked callers are answered UNBLOCKED; the paused ones READONLY.
        let port = self.replica.port.to_string();
        let _: () = q(&mut old, &["REPLICAOF", "127.0.0.1", &port]);
        let _: () = q(&mut old, &["CLIENT", "UNPAUSE"]);
        std::mem::swap(&mut self.master, &mut self.replica);
        true
    }
}

/// Injects random faults for `run`; every run promotes the replica (by a
/// third of the run), restarts the master (by two thirds) and kills it
/// with SIGKILL and starts it again (by five sixths) at least once.
fn inject_faults(shared: &Shared, servers: &Mutex<Pair>, seed: u64, run: Duration) {
    let mut rng = Rng(seed);
    let mut con = None;
    let mut done_once = (false, false, false);
    while !shared.stop.load(Ordering::Relaxed) {
        thread::sleep(Duration::from_millis(rng.range(40, 200)));
        let now = shared.now();
        let whole_server = if !done_once.0 && now > run / 3 {
            Some(FaultKind::Promote)
        } else if !done_once.1 && now > run * 2 / 3 {
            Some(FaultKind::Restart)
        } else if !done_once.2 && now > run * 5 / 6 {
            Some(FaultKind::Kill)
        } else {
            match rng.below(50) {
                0 => Some(FaultKind::Restart),
                1 => Some(FaultKind::Kill),
                2 | 3 => Some(FaultKind::Promote),
                _ => None,
            }
        };
        if let Some(kind) = whole_server {
            let send = shared.now();
            let mut pair = servers.lock().expect("servers");
            let done = match kind {
                FaultKind::Restart => {
                    pair.master.restart();
                    true
                }
                FaultKind::Kill => {
                    pair.master.kill();
                    pair.master.start_again();
                    true
                }
                _ => pair.promote(shared),
            };
            drop(pair);
            let recv = shared.now();
            con = None;
            if done {
                match kind {
                    FaultKind::Promote => done_once.0 = true,
                    FaultKind::Restart => done_once.1 = true,
                    _ => done_once.2 = true,
                }
                if let Ok(mut h) = shared.history.lock() {
                    h.faults.push(Fault {
                        kind,
                        key: None,
                        removed: false,
                        victim: None,
                        send,
                        recv,
                    });
                }
            }
            continue;
        }
        if con.is_none() {
            let addr = shared.master_addr.lock().map(|a| a.clone());
            con = addr.ok().and_then(|a| connect(&a));
        }
        let Some(c) = con.as_mut() else {
            continue;
        };
        let pick = rng.below(100);
        let mut victim = None;
        let (kind, args, key): (FaultKind, Vec<String>, Option<usize>) = match pick {
            0..=29 => {
                // Locks only: a semaphore is not a lock (WRONGTYPE).
                let k = rng.below((shared.keys.len() - shared.sem_keys) as u64) as usize;
                let args = vec!["LOCK.FORCERELEASE".into(), shared.keys[k].clone()];
                (FaultKind::ForceRelease, args, Some(k))
            }
            30..=34 => (FaultKind::FlushAll, vec!["FLUSHALL".into()], None),
            35..=59 => {
                // Looked up by name on the server that runs the kill: a
                // CLIENT ID remembered from a connection is stale after a
                // restart or a promotion, and may by then be another
                // client's connection on the new master.
                let list: redis::RedisResult<String> = redis::cmd("CLIENT")
                    .arg("LIST")
                    .arg("TYPE")
                    .arg("normal")
                    .query(c);
                let ids = named_clients(&list.unwrap_or_default());
                if ids.is_empty() {
                    continue;
                }
                let (client, id) = ids[rng.below(ids.len() as u64) as usize];
                victim = Some(client);
                let args = vec!["CLIENT".into(), "KILL".into(), "ID".into(), id.to_string()];
                (FaultKind::ClientKill, args, None)
            }
            60..=69 => (
                FaultKind::DebugReload,
                vec!["DEBUG".into(), "RELOAD".into()],
                None,
            ),
            70..=77 => (FaultKind::RewriteAof, vec!["BGREWRITEAOF".into()], None),
            78..=89 => (
                FaultKind::PauseWrites,
                vec![
                    "CLIENT".into(),
                    "PAUSE".into(),
                    rng.range(10, 80).to_string(),
                    "WRITE".into(),
                ],
                None,
            ),
            _ => {
                let ms = DEFAULT_LEASES[rng.below(DEFAULT_LEASES.len() as u64) as usize];
                let args = vec![
                    "CONFIG".into(),
                    "SET".into(),
                    "lock.default-lease-ms".into(),
                    ms.to_string(),
                ];
                (FaultKind::DefaultLease, args, None)
            }
        };
        let send = shared.now();
        let mut cmd = redis::cmd(&args[0]);
        for a in &args[1..] {
            cmd.arg(a.as_str());
        }
        let result: redis::RedisResult<Value> = if kind == FaultKind::FlushAll {
            flush_all(c, shared)
        } else {
            cmd.query(c)
        };
        let recv = shared.now();
        let removed = matches!(result, Ok(Value::Int(1)));
        if let Err(e) = &result {
            // A rewrite already running is not a fault of the module.
            if e.is_io_error() {
                con = None;
            } else if kind != FaultKind::RewriteAof {
                if let Ok(mut h) = shared.history.lock() {
                    h.anomalies.push(format!("fault {args:?} answered {e}"));
                }
            }
        }
        if let Ok(mut h) = shared.history.lock() {
            h.ops.push(Op {
                send,
                recv,
                args: args.clone(),
                outcome: outcome(result.clone()),
            });
            h.faults.push(Fault {
                kind,
                key,
                removed,
                victim,
                send,
                recv,
            });
        }
    }
}

/// FLUSHALL and, in the same MULTI, `SEM.INIT` of every semaphore: the
/// semaphores lose every permit held but are never missing. Replies
/// FLUSHALL's reply.
fn flush_all(con: &mut Connection, shared: &Shared) -> redis::RedisResult<Value> {
    let mut pipe = redis::pipe();
    pipe.atomic().cmd("FLUSHALL");
    for key in &shared.keys[shared.keys.len() - shared.sem_keys..] {
        pipe.cmd("SEM.INIT").arg(key).arg(SEM_PERMITS);
    }
    let replies: Vec<Value> = pipe.query(con)?;
    if replies[1..].iter().any(|r| *r != Value::Int(1)) {
        if let Ok(mut h) = shared.history.lock() {
            h.anomalies.push(format!(
                "SEM.INIT after FLUSHALL, in its MULTI, answered {replies:?}"
            ));
        }
    }
    Ok(replies.into_iter().next().unwrap_or(Value::Nil))
}

/// The connection name of chaos client `i`.
fn client_name(i: usize) -> String {
    format!("chaos-client-{i}")
}

/// The chaos clients in a CLIENT LIST reply: (client, CLIENT ID).
fn named_clients(list: &str) -> Vec<(usize, u64)> {
    list.lines()
        .filter_map(|line| {
            let field = |name: &str| {
                line.split(' ')
                    .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
            };
            let client = field("name")?.strip_prefix("chaos-client-")?.parse().ok()?;
            Some((client, field("id")?.parse().ok()?))
        })
        .collect()
}

/// A stretch this long in which the server answered no lock command (a
/// fork, a reload, a paused or starved server) may have let a KEEPALIVE
/// hold's lease run out while its connection lived: renewals come every
/// half lease, and one due in the stretch comes at its end, perhaps after
/// the deadline. That is the lease doing its job (docs/semantics.md, "What
/// ends a kept hold"). Half the shortest kept lease, less a margin for
/// replies read late by a busy client.
const STALL: Duration = Duration::from_millis(MIN_KEEPALIVE_LEASE_MS / 2 - 50);

/// When each stretch of at least [`STALL`] in which the server answered no
/// lock command, or took no writes, began. Silences are the gaps between
/// answers to lock commands (`LOCK.INFO` is left out: it is answered while
/// writes are paused) and the `CLIENT PAUSE ... WRITE` windows, in which
/// renewals wait, each taken as [`PAUSE_GAP`] longer: a renewal may miss a
/// gap that short between two pauses, which then count as one.
fn stalls(ops: &[Op]) -> Vec<Duration> {
    let mut answered: Vec<Duration> = ops
        .iter()
        .filter(|op| op.outcome != Outcome::Unknown)
        .filter(|op| {
            let command = op.args[0].as_str();
            (command.starts_with("LOCK.") || command.starts_with("SEM."))
                && command != "LOCK.INFO"
                && command != "SEM.INFO"
        })
        .map(|op| op.recv)
        .collect();
    answered.sort();
    let gaps = answered
        .windows(2)
        .filter(|w| w[1] - w[0] >= PAUSE_GAP)
        .map(|w| (w[0], w[1]));
    let pauses = ops.iter().filter_map(|op| match op.args.as_slice() {
        [client, pause, ms, write]
            if client == "CLIENT" && pause == "PAUSE" && write == "WRITE" =>
        {
            let ms = ms.parse().ok()?;
            Some((op.send, op.recv + Duration::from_millis(ms) + PAUSE_GAP))
        }
        _ => None,
    });
    let mut silences: Vec<(Duration, Duration)> = gaps.chain(pauses).collect();
    silences.sort();
    let mut merged: Vec<(Duration, Duration)> = Vec::new();
    for (start, end) in silences {
        match merged.last_mut() {
            Some(last) if start < last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    merged
        .into_iter()
        .filter(|(start, end)| *end - *start >= STALL)
        .map(|(start, _)| start)
        .collect()
}

/// How long after a write pause a renewal may still not have been made
/// (see [`stalls`]).
const PAUSE_GAP: Duration = Duration::from_millis(5);

/// Extends every KEEPALIVE hold to when its binding surely still stood: its
/// release or its owner dropping the connection ([`Kept::until`]), or
/// before that the first fault that may have ended the binding (a kill of
/// its client's connection, a restart, a promotion: the new master has no
/// bindings) or the first stall that may have let its lease run out
/// ([`stalls`]). Whatever the server's renewals did is not taken on trust:
/// a renewal missed while the connection lived and the server answered
/// lets the lease end early and the next holder in, which the
/// mutual-exclusion check sees.
fn apply_keepalive(holds: &mut [Hold], faults: &[Fault], stalls: &[Duration]) {
    for h in holds.iter_mut() {
        let Some(kept) = h.kept else {
            continue;
        };
        let cut = faults
            .iter()
            .filter(|f| f.recv >= h.granted.0)
            .filter(|f| match f.kind {
                FaultKind::Restart | FaultKind::Kill | FaultKind::Promote => true,
                FaultKind::ClientKill => f.victim == Some(kept.client),
                _ => false,
            })
            .map(|f| f.send);
        let stalled = stalls.iter().copied().filter(|&at| at >= h.granted.0);
        let cut = cut.chain(stalled).min().unwrap_or(Duration::MAX);
        h.end = h.end.max(kept.until.min(cut));
    }
}

/// Cuts every hold at the revocations that may have ended it: a
/// force-release of its key that removed a lock, or a FLUSHALL, run by the
/// server between its send and its reply. A hold granted before the
/// revocation was sent ends when it was sent. A hold granted after its
/// reply, or seen to be its owner's after its reply (a revocation would
/// have removed it), is untouched. Any other was granted while the
/// revocation was in flight, perhaps before it: it counts as empty.
fn apply_revocations(holds: &mut [Hold], faults: &[Fault]) {
    for f in faults {
        let revokes = |h: &Hold| match f.kind {
            FaultKind::FlushAll => true,
            FaultKind::ForceRelease => f.removed && f.key == Some(h.key),
            _ => false,
        };
        for h in holds.iter_mut().filter(|h| revokes(h)) {
            if h.granted.1 < f.send {
                h.end = h.end.min(f.send);
            } else if h.granted.0 > f.recv || h.confirmed.is_some_and(|at| at > f.recv) {
                // Granted after the revocation ran.
            } else {
                h.end = h.end.min(h.start);
            }
        }
    }
}

fn check_mutual_exclusion(holds: &[Hold], keys: usize) -> Vec<String> {
    let mut violations = Vec::new();
    for key in 0..keys {
        let mut on_key: Vec<&Hold> = holds
            .iter()
            .filter(|h| h.key == key && h.end > h.start)
            .collect();
        on_key.sort_by_key(|h| h.start);
        // Every pair that overlaps in time: read holds may share a key,
        // anything else must be one owner's.
        for (i, h) in on_key.iter().enumerate() {
            for g in on_key[i + 1..].iter().take_while(|g| g.start < h.end) {
                if g.owner != h.owner && !(g.read && h.read) {
                    violations.push(format!(
                        "key {key}: owner {} held [{:?}, {:?}){} while owner {} held [{:?}, {:?}){}",
                        h.owner,
                        h.start,
                        h.end,
                        if h.read { " (read)" } else { "" },
                        g.owner,
                        g.start,
                        g.end,
                        if g.read { " (read)" } else { "" },
                    ));
                }
            }
        }
    }
    violations
}

/// At no moment do the holds of a semaphore add up to more than its
/// `permits` (holds of locks, `permits` 0, are left out). A hold that ends
/// when another starts does not overlap it.
fn check_permits(holds: &[Hold], keys: usize, permits: i64) -> Vec<String> {
    let mut violations = Vec::new();
    for key in 0..keys {
        let mut on_key: Vec<&Hold> = holds
            .iter()
            .filter(|h| h.key == key && h.permits > 0 && h.end > h.start)
            .collect();
        on_key.sort_by_key(|h| h.start);
        // At each start, the holds started before it that have not ended.
        let mut live: Vec<&Hold> = Vec::new();
        for h in on_key {
            live.retain(|g| g.end > h.start);
            live.push(h);
            let held: i64 = live.iter().map(|g| g.permits).sum();
            if held > permits {
                let who: Vec<String> = live
                    .iter()
                    .map(|g| {
                        format!(
                            "owner {} {} [{:?}, {:?})",
                            g.owner, g.permits, g.start, g.end
                        )
                    })
                    .collect();
                violations.push(format!(
                    "key {key}: {held} permits of {permits} held at {:?}: {}",
                    h.start,
                    who.join(", ")
                ));
            }
        }
    }
    violations
}

/// Tokens strictly increase in grant order, across everything the faults
/// do: FLUSHALL and force-releases, reloads, restarts and promotions (a
/// token is above the lock's last one and this server's highest, and at
/// least the master's clock in microseconds). Two grants are in order when
/// one was written before the other could have been (their [`Granted`]
/// times do not overlap); grants whose order is uncertain are not compared.
fn check_tokens(holds: &[Hold], keys: usize) -> Vec<String> {
    let mut violations = Vec::new();
    for key in 0..keys {
        let mut grants: Vec<&Hold> = holds
            .iter()
            .filter(|h| h.key == key && h.token.is_some())
            .collect();
        grants.sort_by_key(|h| h.granted.0);
        for (i, b) in grants.iter().enumerate() {
            for a in &grants[..i] {
                if a.granted.1 < b.granted.0 && a.token >= b.token {
                    violations.push(format!(
                        "key {key}: token {:?} granted in {:?} after token {:?} granted in {:?}",
                        b.token, b.granted, a.token, a.granted
                    ));
                }
            }
        }
    }
    violations
}

/// The earliest reply to any request sent after each moment: requests as
/// (send, reply) times, answered by [`Witnesses::reply_after`].
struct Witnesses {
    /// Send times in order, and the earliest reply among those sent at or
    /// after each.
    sends: Vec<Duration>,
    earliest_reply: Vec<Duration>,
}

impl Witnesses {
    fn new(mut requests: Vec<(Duration, Duration)>) -> Self {
        requests.sort();
        let mut earliest_reply = vec![Duration::MAX; requests.len()];
        let mut earliest = Duration::MAX;
        for (i, (_, recv)) in requests.iter().enumerate().rev() {
            earliest = earliest.min(*recv);
            earliest_reply[i] = earliest;
        }
        Self {
            sends: requests.into_iter().map(|(send, _)| send).collect(),
            earliest_reply,
        }
    }

    /// The earliest reply to a request sent after `t`.
    fn reply_after(&self, t: Duration) -> Duration {
        let i = self.sends.partition_point(|&s| s <= t);
        self.earliest_reply.get(i).copied().unwrap_or(Duration::MAX)
    }
}

/// No blocked waiter A is overtaken by a caller B that queued after it, and
/// B's grant was written before A's wait ended (see [`Wait::ended`]).
///
/// "Queued after it" needs care: the server runs the requests that arrive
/// during one turn of its event loop in the order it finds their sockets
/// ready, which is not always the order they arrived. What orders them is
/// a turn in between: if some request C was sent after A's request was in
/// the server's socket and C's reply came back before B was sent, then A
/// ran in C's turn or before, and B in a later one. Any request of any
/// client can be that witness, if the server answered it (a client that
/// gave up waiting proves nothing about the server). Pairs around a DEBUG RELOAD, a pause, a
/// restart or a promotion are skipped: requests held back then are let in
/// in no set order.
fn check_fifo(waits: &[Wait], requests: &[(Duration, Duration)], faults: &[Fault]) -> Vec<String> {
    let witnesses = Witnesses::new(requests.to_vec());
    let stalls: Vec<(Duration, Duration)> = faults
        .iter()
        .filter(|f| {
            matches!(
                f.kind,
                FaultKind::DebugReload
                    | FaultKind::PauseWrites
                    | FaultKind::Restart
                    | FaultKind::Kill
                    | FaultKind::Promote
            )
        })
        .map(|f| (f.send, f.recv + Duration::from_millis(80)))
        .collect();
    let mut violations = Vec::new();
    for a in waits {
        let a_ran_by = witnesses.reply_after(a.sent);
        for b in waits.iter().filter(|b| {
            b.granted
                && b.key == a.key
                && b.client != a.client
                && a_ran_by < b.send
                && b.ended.1 < a.ended.0
        }) {
            if stalls.iter().any(|&(s, e)| s < b.send && a.send < e) {
                continue;
            }
            violations.push(format!(
                "key {}: client {} (sent {:?}) granted in {:?} while client {} (sent by {:?}, run by {:?}) waited until {:?}",
                a.key, b.client, b.send, b.ended, a.client, a.sent, a_ran_by, a.ended
            ));
        }
    }
    violations
}

#[test]
fn history_under_faults_keeps_every_guarantee() {
    let secs = env_or("LOCK_CHAOS_SECS", 4);
    let clients = env_or("LOCK_CHAOS_CLIENTS", 12) as usize;
    let keys = env_or("LOCK_CHAOS_KEYS", 3) as usize;
    let rw_keys = env_or("LOCK_CHAOS_RW_KEYS", 2) as usize;
    let sem_keys = env_or("LOCK_CHAOS_SEM_KEYS", 1).max(1) as usize;
    let sem_clients = env_or("LOCK_CHAOS_SEM_CLIENTS", (clients as u64 / 3).max(5)) as usize;
    let seed = env_or("LOCK_CHAOS_SEED", 0x5EED_0000 + secs);
    eprintln!(
        "chaos: {secs} s, {clients} clients, {keys} keys, {sem_clients} clients on {sem_keys} \
         semaphores, seed {seed} (LOCK_CHAOS_SEED to replay)"
    );

    // Either may be promoted, so both are configured alike, and the
    // replica is attached at run time: a restart brings a server back as a
    // master.
    let config = Config::default()
        .aof()
        .arg("enable-module-command", "yes")
        .module_arg("default-lease-ms", "300");
    let master = config.clone().start();
    let replica = config.start();
    let port = master.port.to_string();
    let _: () = q(&mut replica.client(), &["REPLICAOF", "127.0.0.1", &port]);
    wait_until("replica link up", || {
        replica
            .info_field("replication", "master_link_status")
            .as_deref()
            == Some("up")
    });
    let sem_names: Vec<String> = (0..sem_keys).map(sem_key).collect();
    for name in &sem_names {
        let set: i64 = q(
            &mut master.client(),
            &["SEM.INIT", name, &SEM_PERMITS.to_string()],
        );
        assert_eq!(set, 1, "SEM.INIT {name}");
    }
    let shared = Arc::new(Shared {
        epoch: Instant::now(),
        stop: AtomicBool::new(false),
        history: Mutex::new(History::default()),
        keys: (0..keys)
            .map(lock_key)
            .chain((0..rw_keys).map(rw_key))
            .chain(sem_names.iter().cloned())
            .collect(),
        rw_keys,
        sem_keys,
        lock_clients: clients,
        master_addr: Mutex::new(master.addr()),
    });
    let servers = Mutex::new(Pair { master, replica });

    thread::scope(|s| {
        for id in 0..clients + sem_clients {
            let shared = &*shared;
            s.spawn(move || {
                Client {
                    id,
                    generation: 0,
                    seed,
                    con: None,
                    last_sent: Duration::ZERO,
                    dropped: None,
                    rng: Rng(seed ^ (id as u64 + 1).wrapping_mul(0xA24B_AED4_963E_E407)),
                    shared,
                }
                .run()
            });
        }
        let shared = &*shared;
        let servers = &servers;
        let run = Duration::from_secs(secs);
        s.spawn(move || inject_faults(shared, servers, seed.rotate_left(17), run));
        thread::sleep(Duration::from_secs(secs));
        shared.stop.store(true, Ordering::Relaxed);
    });

    let Pair { master, replica } = servers.into_inner().expect("servers");
    let mut con = master.client();
    let mut history = std::mem::take(&mut *shared.history.lock().expect("history"));

    // Liveness: no lock outlives its lease, then every lock is free and
    // nobody waits.
    let lock_names = &shared.keys[..shared.keys.len() - sem_keys];
    for key in lock_names {
        let ttl = pttl(&mut con, key);
        assert!(
            ttl <= MAX_KEEPALIVE_LEASE_MS as i64,
            "{key} still held {ttl} ms after every client stopped"
        );
    }
    // No permit outlives its lease either, and none is lost: within one
    // lease every semaphore has all its permits available again, no
    // holder, nobody waiting.
    for key in &sem_names {
        let info = semaphore::sem_info(&mut con, key)
            .expect("SEM.INFO")
            .unwrap_or_else(|| panic!("semaphore {key} missing at the end"));
        assert_eq!(info.permits, SEM_PERMITS, "{key} at the end: {info:?}");
        for holder in &info.holders {
            assert!(
                (0..=MAX_KEEPALIVE_LEASE_MS as i64).contains(&holder.ttl),
                "{key} still held by {holder:?} after every client stopped"
            );
        }
    }
    wait_until("every lock free", || {
        lock_names.iter().all(|k| lock_info(&mut con, k).is_empty())
    });
    wait_until("every semaphore whole and free", || {
        sem_names.iter().all(|k| {
            semaphore::sem_info(&mut con, k)
                .ok()
                .flatten()
                .is_some_and(|info| info.is_whole_and_free(SEM_PERMITS))
        })
    });
    // What SEM.INFO counts as available really is: all the permits can be
    // taken at once, and given back the semaphore is its counter alone.
    for key in &sem_names {
        let all = SEM_PERMITS.to_string();
        let got: Option<i64> = q(
            &mut con,
            &["SEM.ACQUIRE", key, "final", "PERMITS", &all, "PX", "10000"],
        );
        assert_eq!(got, Some(SEM_PERMITS), "{key}: all permits at the end");
        assert_eq!(q::<i64>(&mut con, &["SEM.RELEASE", key, "final"]), 0);
        assert_eq!(q::<String>(&mut con, &["GET", key]), all, "{key}'s counter");
        assert!(
            !exists(&mut con, &format!("{{{key}}}:timeout")),
            "{key}'s permit set left behind"
        );
    }
    assert_eq!(master.stat("waiters"), 0, "waiters left at the end");
    // Every client closed its connection: nothing is kept alive.
    wait_until("no KEEPALIVE binding", || {
        master.stat("keepalive_holds") == 0
    });

    // The checks over the whole history.
    let stalled = stalls(&history.ops);
    apply_keepalive(&mut history.holds, &history.faults, &stalled);
    apply_revocations(&mut history.holds, &history.faults);
    let mut violations = history.anomalies.clone();
    violations.extend(check_mutual_exclusion(&history.holds, keys + rw_keys));
    let all_keys = shared.keys.len();
    violations.extend(check_permits(&history.holds, all_keys, SEM_PERMITS));
    violations.extend(check_tokens(&history.holds, all_keys));
    // Only a reply says the server ran a turn: not a client giving up,
    // nor a restart or a promotion coming back.
    let requests: Vec<(Duration, Duration)> = history
        .ops
        .iter()
        .filter(|o| o.outcome != Outcome::Unknown)
        .map(|o| (o.send, o.recv))
        .collect();
    violations.extend(check_fifo(&history.waits, &requests, &history.faults));

    // The replica and an AOF reload end with the master's data, compared
    // once every lease has ended and the master has deleted its key (see
    // tests/common/dataset.rs for why not by DEBUG DIGEST alone).
    if let Err(diff) = replica_matches(&master, &replica) {
        panic!("the replica's data is not the master's:\n{diff}");
    }
    if let Err(diff) = aof_matches(&master) {
        panic!("AOF reload changed the data:\n{diff}");
    }
    // Nothing of the module is left running, on the master nor on a
    // demoted one: it can be unloaded (Redis refuses while any of its
    // timers is armed).
    for server in [&master, &replica] {
        let mut con = server.client();
        wait_until("MODULE UNLOAD accepted", || {
            raw(&mut con, &["MODULE", "UNLOAD", "lock"]).is_ok()
        });
        assert!(
            !server.log().contains("crashed by signal"),
            "server crashed: {}",
            server.log()
        );
    }

    let mut faults: BTreeMap<String, usize> = BTreeMap::new();
    for f in &history.faults {
        *faults.entry(format!("{:?}", f.kind)).or_default() += 1;
    }
    let granted = history.holds.len();
    let fenced = history.holds.iter().filter(|h| h.token.is_some()).count();
    let kept = history.holds.iter().filter(|h| h.kept.is_some()).count();
    let waited = history.waits.len();
    let sem_start = shared.keys.len() - sem_keys;
    let exclusive = sem_start - rw_keys;
    let sem_holds: Vec<&Hold> = history.holds.iter().filter(|h| h.permits > 0).collect();
    let sem_fenced = sem_holds.iter().filter(|h| h.token.is_some()).count();
    let sem_kept = sem_holds.iter().filter(|h| h.kept.is_some()).count();
    let sem_waited = history.waits.iter().filter(|w| w.key >= sem_start).count();
    let read = history.holds.iter().filter(|h| h.read).count();
    let written = history
        .holds
        .iter()
        .filter(|h| h.key >= exclusive && h.key < sem_start && !h.read)
        .count();
    let count = |command: &str| {
        history
            .ops
            .iter()
            .filter(|o| o.args[0] == command && matches!(o.outcome, Outcome::Ints(_)))
            .count()
    };
    eprintln!(
        "chaos totals: {} operations, {granted} grants ({fenced} fenced, {kept} kept alive; {read} read and {written} write holds, \
         {} multi-lock grants; {} downgrades, {} upgrades, {} upgrades refused), \
         {waited} blocked acquires answered, {} dropped mid-wait; \
         semaphores: {} holds ({sem_fenced} fenced, {sem_kept} kept alive), {sem_waited} blocked acquires answered; \
         {} faults {faults:?}, violations found: {}",
        history.operations,
        count("LOCK.MACQUIRE"),
        history.downgrades,
        history.upgrades,
        history.upgrades_refused,
        history.gave_up,
        sem_holds.len(),
        history.faults.len(),
        violations.len()
    );
    if !violations.is_empty() {
        let log = std::env::temp_dir().join(format!("lock-chaos-{seed}.log"));
        let mut ops = history.ops.clone();
        ops.sort_by_key(|o| o.send);
        let lines: Vec<String> = ops
            .iter()
            .map(|o| format!("{:?} {:?} {:?} {:?}", o.send, o.recv, o.args, o.outcome))
            .collect();
        let _ = std::fs::write(&log, lines.join("\n"));
        eprintln!("history written to {}", log.display());
    }
    assert!(
        violations.is_empty(),
        "{} violations (seed {seed}):\n{}",
        violations.len(),
        violations.join("\n")
    );
    // The run must have exercised what it checks.
    assert!(
        granted > 0 && fenced > 0 && kept > 0 && waited > 0,
        "too little happened"
    );
    assert!(
        !sem_holds.is_empty() && sem_fenced > 0 && sem_waited > 0,
        "too little happened on the semaphores"
    );
    assert!(
        faults.len() >= 4 || secs < 2,
        "too few kinds of faults: {faults:?}"
    );
    assert!(
        ["Promote", "Restart", "Kill"]
            .iter()
            .all(|kind| faults.contains_key(*kind)),
        "no promotion, restart or kill: {faults:?}"
    );
}

/// The checker itself must catch what it is there to catch.
#[test]
fn checker_finds_overlaps_reordered_tokens_and_overtaking() {
    let ms = Duration::from_millis;
    // Granted in the millisecond before its reply.
    let hold = |owner, start, end, token| Hold {
        key: 0,
        owner,
        start: ms(start),
        end: ms(end),
        token,
        granted: (ms(start).saturating_sub(ms(1)), ms(start)),
        confirmed: None,
        read: false,
        kept: None,
        permits: 0,
    };
    let fine = [hold(1, 0, 100, Some(1)), hold(2, 100, 200, Some(2))];
    assert!(check_mutual_exclusion(&fine, 1).is_empty());
    assert!(check_tokens(&fine, 1).is_empty());
    let overlap = [
        hold(1, 0, 100, None),
        hold(1, 10, 50, None),
        hold(2, 90, 200, None),
    ];
    assert_eq!(check_mutual_exclusion(&overlap, 1).len(), 1);
    // Readers share; a writer overlapping any reader of another owner is
    // caught, also one that is not the longest.
    let read = |owner, start, end| Hold {
        read: true,
        ..hold(owner, start, end, None)
    };
    let readers = [read(1, 0, 100), read(2, 10, 300), read(3, 50, 60)];
    assert!(check_mutual_exclusion(&readers, 1).is_empty());
    let writer_among_readers = [read(1, 0, 300), read(2, 10, 100), hold(1, 50, 60, None)];
    assert_eq!(check_mutual_exclusion(&writer_among_readers, 1).len(), 1);
    let backwards = [hold(1, 0, 100, Some(5)), hold(2, 100, 200, Some(5))];
    assert_eq!(check_tokens(&backwards, 1).len(), 1);
    // Tokens are compared by when grants were written, not when their
    // replies arrived: a reply that arrived late is not out of order.
    let late_reply = [
        Hold {
            granted: (ms(0), ms(150)),
            ..hold(1, 150, 300, Some(6))
        },
        hold(2, 100, 200, Some(7)),
    ];
    assert!(check_tokens(&late_reply, 1).is_empty());

    // Semaphore holds of 3 permits: 2 + 1 at once, then 1 + 2 when the
    // first ends, is within; a third owner's permit beside 2 + 1 is not,
    // nor is 2 + 2. Lock holds do not count.
    let permits = |owner, n, start, end| Hold {
        permits: n,
        ..hold(owner, start, end, None)
    };
    let within = [
        permits(1, 2, 0, 100),
        permits(2, 1, 10, 300),
        permits(3, 2, 100, 200),
        hold(4, 0, 300, None),
    ];
    assert!(check_permits(&within, 1, 3).is_empty());
    let one_too_many = [
        permits(1, 2, 0, 100),
        permits(2, 1, 10, 300),
        permits(3, 1, 50, 60),
    ];
    assert_eq!(check_permits(&one_too_many, 1, 3).len(), 1);
    let two_and_two = [permits(1, 2, 0, 100), permits(2, 2, 99, 150)];
    assert_eq!(check_permits(&two_and_two, 1, 3).len(), 1);
    // A hold that ended early (its lease, a revocation) frees its permits
    // for a later one that outlives it.
    let after_long = [
        permits(1, 2, 0, 500),
        permits(2, 1, 10, 20),
        permits(3, 1, 30, 40),
        permits(4, 1, 600, 700),
    ];
    assert!(check_permits(&after_long, 1, 3).is_empty());

    // A force-release during the first hold ends it: no overlap.
    let mut revoked = [hold(1, 0, 300, None), hold(2, 100, 200, None)];
    let force = Fault {
        kind: FaultKind::ForceRelease,
        key: Some(0),
        removed: true,
        victim: None,
        send: ms(90),
        recv: ms(95),
    };
    apply_revocations(&mut revoked, std::slice::from_ref(&force));
    assert!(check_mutual_exclusion(&revoked, 1).is_empty());
    // A hold granted while the force-release was in flight may have been
    // revoked at once: it counts as empty; unless it was seen to be its
    // owner's after the force-release's reply.
    let in_flight = || Hold {
        granted: (ms(92), ms(96)),
        ..hold(2, 96, 300, None)
    };
    let mut maybe_revoked = [in_flight(), hold(3, 150, 250, None)];
    apply_revocations(&mut maybe_revoked, std::slice::from_ref(&force));
    assert!(check_mutual_exclusion(&maybe_revoked, 1).is_empty());
    let mut confirmed = [
        Hold {
            confirmed: Some(ms(97)),
            ..in_flight()
        },
        hold(3, 150, 250, None),
    ];
    apply_revocations(&mut confirmed, std::slice::from_ref(&force));
    assert_eq!(check_mutual_exclusion(&confirmed, 1).len(), 1);
    // Tokens never start again, not even after a FLUSHALL.
    let restarted = [hold(1, 0, 80, Some(7)), hold(2, 100, 200, Some(1))];
    assert_eq!(check_tokens(&restarted, 1).len(), 1);

    // A KEEPALIVE hold whose lease bound ends at 100 lasts while client 1
    // keeps its connection (until 300): another owner's hold at 200 is an
    // overlap. Unless something may have ended the binding before: a kill
    // of client 1, a restart, a promotion; not a kill of another client.
    let kept = || {
        [
            Hold {
                kept: Some(Kept {
                    client: 1,
                    until: ms(300),
                }),
                ..hold(1, 0, 100, None)
            },
            hold(2, 200, 250, None),
        ]
    };
    let kill = |victim| Fault {
        kind: FaultKind::ClientKill,
        victim: Some(victim),
        key: None,
        removed: false,
        ..force
    };
    let mut kept_alive = kept();
    apply_keepalive(&mut kept_alive, &[kill(2)], &[]);
    assert_eq!(check_mutual_exclusion(&kept_alive, 1).len(), 1);
    for cut in [
        kill(1),
        Fault {
            kind: FaultKind::Restart,
            ..kill(0)
        },
        Fault {
            kind: FaultKind::Kill,
            ..kill(0)
        },
        Fault {
            kind: FaultKind::Promote,
            ..kill(0)
        },
    ] {
        let mut ended = kept();
        apply_keepalive(&mut ended, &[cut], &[]);
        assert!(check_mutual_exclusion(&ended, 1).is_empty());
    }
    // A kill before the grant ended an older connection.
    let mut earlier = kept();
    let mut old_kill = kill(1);
    (old_kill.send, old_kill.recv) = (ms(0), ms(0));
    earlier[0].granted = (ms(1), ms(2));
    apply_keepalive(&mut earlier, &[old_kill], &[]);
    assert_eq!(check_mutual_exclusion(&earlier, 1).len(), 1);
    // A stall after the grant may have let the lease run out; one before
    // it did not.
    let mut stalled = kept();
    apply_keepalive(&mut stalled, &[], &[ms(150)]);
    assert!(check_mutual_exclusion(&stalled, 1).is_empty());
    let mut stalled_before = kept();
    stalled_before[0].granted = (ms(1), ms(2));
    apply_keepalive(&mut stalled_before, &[], &[ms(0)]);
    assert_eq!(check_mutual_exclusion(&stalled_before, 1).len(), 1);
    let op = |recv, command: &str| Op {
        send: ms(recv - 1),
        recv: ms(recv),
        args: vec![command.to_string()],
        outcome: Outcome::Int(1),
    };
    let answers = [
        op(10, "LOCK.ACQUIRE"),
        op(20, "LOCK.RELEASE"),
        op(60, "LOCK.INFO"),
        op(20 + STALL.as_millis() as u64, "LOCK.RENEW"),
        op(21 + STALL.as_millis() as u64, "LOCK.ACQUIRE"),
    ];
    // From 20 on nothing but LOCK.INFO was answered for STALL.
    assert_eq!(stalls(&answers), vec![ms(20)]);
    // Write pauses 3 ms apart, a lock command answered in between: one
    // stall; 20 ms apart: none.
    let pause = |send: u64, ms_: u64| Op {
        send: ms(send),
        recv: ms(send),
        args: ["CLIENT", "PAUSE", &ms_.to_string(), "WRITE"]
            .map(String::from)
            .to_vec(),
        outcome: Outcome::Status("OK".into()),
    };
    let half = STALL.as_millis() as u64 / 2 + 1;
    let busy = |t: u64| {
        (0..400u64)
            .step_by(2)
            .map(move |i| op(t + i, "LOCK.ACQUIRE"))
    };
    let mut chained: Vec<Op> = busy(1000).collect();
    chained.extend([pause(1100, half), pause(1103 + half, half)]);
    assert_eq!(stalls(&chained), vec![ms(1100)]);
    let mut apart: Vec<Op> = busy(1000).collect();
    apart.extend([pause(1100, half), pause(1120 + half, half)]);
    assert!(stalls(&apart).is_empty());

    // Written a millisecond after its send; its wait ended in the
    // millisecond before its reply.
    let wait = |client, send, recv, granted| Wait {
        key: 0,
        client,
        send: ms(send),
        sent: ms(send + 1),
        ended: (ms(recv - 1), ms(recv)),
        granted,
    };
    // Some request sent after A was written and answered before B was
    // sent: the server ran A first.
    let between = [(ms(10), ms(20))];
    let overtaken = [wait(1, 0, 500, true), wait(2, 100, 200, true)];
    assert_eq!(check_fifo(&overtaken, &between, &[]).len(), 1);
    // Without one, the server may have found B's request first.
    assert!(check_fifo(&overtaken, &[(ms(10), ms(120))], &[]).is_empty());
    let in_order = [wait(1, 0, 150, true), wait(2, 100, 200, true)];
    assert!(check_fifo(&in_order, &between, &[]).is_empty());
    // A request whose writing ended after the other's began (a slow
    // client) may have reached the server second: not an overtaking.
    let slow_writer = [
        Wait {
            sent: ms(120),
            ..wait(1, 0, 500, true)
        },
        wait(2, 100, 200, true),
    ];
    assert!(check_fifo(&slow_writer, &between, &[]).is_empty());
    // A waiter whose BLOCK time was over before the other's grant was
    // written was not overtaken, however late its nil arrived.
    let timed_out = [
        Wait {
            ended: (ms(150), ms(500)),
            ..wait(1, 0, 500, false)
        },
        wait(2, 100, 200, true),
    ];
    assert!(check_fifo(&timed_out, &between, &[]).is_empty());
}

/// The end-of-run data checks catch a replica or an AOF that differs from
/// the master, and do not report a key that only the replica keeps past
/// its TTL because DEBUG RELOAD dropped it on the master without a DEL
/// (what failed `DEBUG DIGEST` comparisons at random before).
#[test]
fn data_checks_find_a_diverged_replica_or_aof() {
    let master = Config::default().aof().start();
    let replica = master.start_replica(Config::default());
    let mut con = master.client();
    let mut on_replica = replica.client();
    let dbsize = |con: &mut Connection| q::<i64>(con, &["DBSIZE"]);

    // A key expired on the master and dropped by DEBUG RELOAD: the replica
    // keeps it, so the digests differ, but no reader sees it anywhere.
    let _: () = q(&mut con, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]);
    let _: () = q(&mut con, &["SET", "stale", "x", "PX", "1"]);
    assert_eq!(q::<i64>(&mut con, &["WAIT", "1", "20000"]), 1);
    let _: () = q(&mut con, &["DEBUG", "SLEEP", "0.01"]);
    let _: () = q(&mut con, &["DEBUG", "RELOAD"]);
    let _: () = q(&mut con, &["DEBUG", "SET-ACTIVE-EXPIRE", "1"]);
    assert_eq!(q::<i64>(&mut con, &["WAIT", "1", "20000"]), 1);
    assert_eq!(dbsize(&mut on_replica), dbsize(&mut con) + 1);
    // Lock data: fencing tokens outlive the locks, whose leases end.
    acquire(&mut con, "k", "a", &["PX", "100", "FENCE"]);
    let _: i64 = q(
        &mut con,
        &["LOCK.RACQUIRE", "rw", "r", "PX", "100", "FENCE"],
    );
    assert_eq!(replica_matches(&master, &replica), Ok(()));
    let digest = |con: &mut Connection| q::<String>(con, &["DEBUG", "DIGEST"]);
    assert_ne!(digest(&mut on_replica), digest(&mut con));
    assert_eq!(aof_matches(&master), Ok(()));

    // A write made on the replica only, then a value changed there.
    let _: () = q(
        &mut on_replica,
        &["CONFIG", "SET", "replica-read-only", "no"],
    );
    let _: () = q(&mut on_replica, &["SET", "only-on-replica", "1"]);
    assert_eq!(
        replica_matches(&master, &replica),
        Err("only-on-replica: only on the replica".into())
    );
    let _: i64 = q(&mut on_replica, &["DEL", "only-on-replica"]);
    let _: i64 = q(&mut on_replica, &["INCR", "redisson_lock_token:{k}"]);
    assert_eq!(
        replica_matches(&master, &replica),
        Err("redisson_lock_token:{k}: differs on the replica".into())
    );

    // A write the master never made, appended to its AOF.
    let dir = master.dir.join("appendonlydir");
    let manifest = std::fs::read_to_string(dir.join("appendonly.aof.manifest")).expect("manifest");
    // Lines of `name value` pairs: `file <name> seq <n> type i ...`.
    let incr = manifest
        .lines()
        .map(|line| line.split(' ').collect::<Vec<_>>())
        .filter(|words| words.chunks(2).any(|kv| kv == ["type", "i"]))
        .filter_map(|words| words.get(1).map(|name| name.to_string()))
        .next_back()
        .expect("an incremental AOF file");
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(dir.join(incr))
        .expect("open the AOF");
    std::io::Write::write_all(
        &mut file,
        b"*3\r\n$3\r\nSET\r\n$8\r\naof-only\r\n$1\r\n1\r\n",
    )
    .expect("append to the AOF");
    assert_eq!(
        aof_matches(&master),
        Err("aof-only: only on the AOF reload".into())
    );
}

/// A client kill is aimed by connection name on the server that runs it: a
/// CLIENT ID remembered from before a restart names nobody, or somebody
/// else, on the new process (what once cut a KEEPALIVE hold of a client the
/// checker thought untouched).
#[test]
fn kills_find_their_victim_by_name_after_a_restart() {
    let mut server = Config::default().aof().start();
    let name = |con: &mut Connection, i: usize| {
        q::<()>(con, &["CLIENT", "SETNAME", &client_name(i)]);
        q::<u64>(con, &["CLIENT", "ID"])
    };
    let mut before = server.client();
    let before_id = name(&mut before, 3);
    let mut list = server.client();
    let listed = |list: &mut Connection| named_clients(&q::<String>(list, &["CLIENT", "LIST"]));
    assert_eq!(listed(&mut list), vec![(3, before_id)]);

    server.restart();
    let mut after = server.client();
    let after_id = name(&mut after, 5);
    let mut list = server.client();
    assert_eq!(listed(&mut list), vec![(5, after_id)]);
    assert_eq!(
        named_clients("id=7 addr=x name= age=1\nid=x name=chaos-client-2\n"),
        vec![]
    );
}
