//! Deadlock detection under faults (issue 26): the server never answers a
//! false `DEADLOCK`, and every `DEADLOCK` it answers names a cycle that was
//! there.
//!
//! Clients (threads, each with its own connection and owner id) take two or
//! three locks at a time out of six (exclusive locks, read-write locks taken
//! with `LOCK.RACQUIRE`/`WACQUIRE`, `LOCK.MACQUIRE` of several exclusive
//! ones, a semaphore of one permit), with `BLOCK`, short leases or
//! `KEEPALIVE`, while a fault thread force-releases (`LOCK.FORCERELEASE`),
//! deletes (`DEL`) and kills clients' connections (`CLIENT KILL`), and the
//! clients themselves walk away from holds (closing their connection), give
//! up mid-wait (closing it while blocked), hold past their lease (stopping
//! their `LOCK.RENEW`s) and renew. Every call is logged with the client's
//! monotonic time when it was sent and when its reply came (one process:
//! the times of all threads compare).
//!
//! 1. Ordered phase: every client takes its locks in one global key order
//!    (two of the exclusive locks only ever together, with
//!    `LOCK.MACQUIRE`, as one place of the order: see [`ORDER`]). No cycle
//!    of waits can form, so no call may be answered `DEADLOCK` and
//!    `INFO lock` must show `lock_deadlocks:0`; every client must have got
//!    all its locks at least once.
//! 2. Random-order phase: the same clients take two locks (or one, then a
//!    `LOCK.MACQUIRE` of two) in random order, so real cycles form. Beside
//!    them, three clients run rounds that make a cycle certain: each takes
//!    its hold, all meet at a barrier, then all ask for the next one's lock
//!    with `BLOCK` (cycles of two exclusive locks, of two across databases,
//!    through a reader and a writer of a read-write lock, and a ring of
//!    three through a read hold, the semaphore and a `LOCK.MACQUIRE`):
//!    exactly one of each round must be answered `DEADLOCK` (the last to
//!    queue), the others granted once it lets go. Every `DEADLOCK` reply
//!    is parsed and checked against the logs: the steps chain into a cycle
//!    starting with the caller, which asked for the first step's lock; for
//!    every step, its lock's named holder held it at some moment of the
//!    call (it asked for it before the reply came, and it was neither
//!    released nor past its lease before the call was sent), or, for a step
//!    "behind" a multi-lock caller (a server that names such edges), that
//!    caller waited with that key; and for every step but the caller's,
//!    its owner had a `BLOCK` call for that lock sent before the caller's
//!    reply and answered after the caller's call was sent. The `DEADLOCK`
//!    replies add up to the rise of `lock_deadlocks`, give or take the
//!    blocking calls whose reply was lost with their connection.
//!
//! Throughout, no two owners hold an exclusive lock, a write hold or the
//! semaphore's permit at once (holds placed in time as tests/chaos.rs does:
//! from the grant's reply to the earliest of the release's send, the lease's
//! lower bound and a revocation). A replica follows the master from the
//! first second on: it never counts a deadlock, and refuses a blocking acquire that would
//! close a cycle on the master with `READONLY`, where the master answers
//! `DEADLOCK`. At the end every lock is free and nobody waits.
//!
//! `make test` runs each phase for 1.5 s; `LOCK_DEADLOCK_CHAOS_SECS` (per
//! phase), `LOCK_DEADLOCK_CHAOS_CLIENTS` and `LOCK_DEADLOCK_CHAOS_SEED`
//! tune it (`cargo test --release --test integration deadlock_chaos:: -- --nocapture`
//! prints the totals).

use crate::common;
use common::*;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The server's clock counts whole milliseconds: lease bounds are widened
/// by this much each way.
const SLACK: Duration = Duration::from_millis(5);
/// The lease of a KEEPALIVE hold (above the 704 ms the server can keep
/// alive at hz 10).
const KEEPALIVE_LEASE_MS: u64 = 800;
/// Lease and BLOCK time of the cycle rounds: never reached.
const ROUND_MS: u64 = 10_000;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Exclusive,
    ReadWrite,
    Semaphore,
}

/// The locks of both phases, in the ordered phase's global order.
const KEYS: [(&str, Kind); 6] = [
    ("dl:0", Kind::Exclusive),
    ("dl:1", Kind::ReadWrite),
    ("dl:2", Kind::Exclusive),
    ("dl:3", Kind::Semaphore),
    ("dl:4", Kind::ReadWrite),
    ("dl:5", Kind::Exclusive),
];

/// The ordered phase's global order, over `KEYS`: each place one lock, but
/// one place for two exclusive locks only ever taken together with
/// `LOCK.MACQUIRE`. A multi-lock caller keeps the free keys it waits on for
/// itself (nobody overtakes it), so it takes its keys, in effect, in no
/// order: a lock of its set taken alone by another could close a cycle
/// (which a server that follows that edge, "behind", rightly refuses).
const ORDER: [&[usize]; 5] = [&[0], &[1], &[2, 5], &[3], &[4]];

/// A lock: its database and key.
#[derive(Clone, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
struct LockRef {
    db: i64,
    key: String,
}

fn lock(db: i64, key: &str) -> LockRef {
    LockRef {
        db,
        key: key.into(),
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    Exclusive,
    Read,
    Write,
    /// One permit of a one-permit semaphore.
    Permit,
}

/// One acquire: one lock, or (`LOCK.MACQUIRE`) several exclusive ones.
#[derive(Clone, Debug)]
struct Ask {
    mode: Mode,
    locks: Vec<LockRef>,
}

impl Ask {
    fn one(mode: Mode, lock: LockRef) -> Ask {
        Ask {
            mode,
            locks: vec![lock],
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Reply {
    Int(i64),
    /// LOCK.MACQUIRE / LOCK.MRELEASE.
    Ints(Vec<i64>),
    Nil,
    Status(String),
    /// `CODE detail`.
    Error(String),
    /// The connection broke before the reply (a `CLIENT KILL`): the server
    /// may or may not have run the call; it ended it before closing.
    Lost,
    /// The client closed its connection while waiting for the reply: the
    /// server ended the call when it saw that, some time later.
    GaveUp,
}

impl Reply {
    fn granted(&self) -> bool {
        matches!(self, Reply::Int(_) | Reply::Ints(_))
    }

    fn deadlock(&self) -> Option<&str> {
        match self {
            Reply::Error(e) if e.starts_with("DEADLOCK") => Some(e),
            _ => None,
        }
    }

    fn unknown(&self) -> bool {
        matches!(self, Reply::Lost | Reply::GaveUp)
    }
}

/// An acquire as its caller saw it.
#[derive(Clone, Debug)]
struct Call {
    phase: u8,
    owner: String,
    args: Vec<String>,
    locks: Vec<LockRef>,
    block: bool,
    /// Before the request was written.
    send: Duration,
    /// After its reply (or the broken connection) was read; `None` when the
    /// client gave up: the call may have lasted any time after.
    recv: Option<Duration>,
    reply: Reply,
}

/// A hold of one lock, as its owner knew it, or (reply unknown) may have
/// had it.
#[derive(Clone, Debug)]
struct Hold {
    owner: String,
    lock: LockRef,
    mode: Mode,
    /// The acquire's send: the grant came later.
    send: Duration,
    /// The grant's reply; `None`: its reply was lost, the owner never
    /// relied on it.
    start: Option<Duration>,
    /// The lease ends no earlier than this (`send + lease`, or a renewal's
    /// send + lease).
    lease_lo: Duration,
    /// The lease ends no later than this (the reply + lease: the server set
    /// it before replying); `None`: no bound (KEEPALIVE, or unknown).
    lease_hi: Option<Duration>,
    /// The owner stopped relying on the hold here (the release's send, the
    /// connection closed, a failed renewal).
    let_go: Option<Duration>,
    /// The server had ended the hold by this time (a release's or a failed
    /// renewal's reply).
    released: Option<Duration>,
}

impl Hold {
    /// The time the owner relied on the hold, before revocations.
    fn claimed(&self) -> Option<(Duration, Duration)> {
        let start = self.start?;
        let end = self
            .let_go
            .map_or(self.lease_lo, |at| at.min(self.lease_lo));
        Some((start, end))
    }

    /// The latest the hold may have lasted; `None`: no bound.
    fn latest_end(&self) -> Option<Duration> {
        match (self.released, self.lease_hi) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether it may have been held at some moment of `[from, to]`.
    fn maybe_held_during(&self, from: Duration, to: Duration) -> bool {
        self.send < to && self.latest_end().is_none_or(|end| end > from)
    }
}

/// A fault as the fault thread sent it.
#[derive(Clone, Debug)]
struct Fault {
    what: String,
    /// The lock it revoked, if it removed one (FORCERELEASE, DEL).
    revoked: Option<LockRef>,
    send: Duration,
    recv: Duration,
}

#[derive(Default)]
struct Log {
    calls: Vec<Call>,
    holds: Vec<Hold>,
    faults: Vec<Fault>,
    /// Replies no rule allows.
    anomalies: Vec<String>,
    /// Cycle rounds: (round, role, the reply to its wait).
    rounds: Vec<(u64, usize, Reply)>,
    ops: u64,
    renewals: u64,
    walked_away: u64,
    gave_up: u64,
    overstayed: u64,
}

impl Log {
    fn absorb(&mut self, other: Log) {
        self.calls.extend(other.calls);
        self.holds.extend(other.holds);
        self.faults.extend(other.faults);
        self.anomalies.extend(other.anomalies);
        self.rounds.extend(other.rounds);
        self.ops += other.ops;
        self.renewals += other.renewals;
        self.walked_away += other.walked_away;
        self.gave_up += other.gave_up;
        self.overstayed += other.overstayed;
    }
}

struct Shared {
    epoch: Instant,
    addr: String,
    stop: AtomicBool,
    /// The CLIENT ID of each fault-prone client's connection (0: none).
    ids: Vec<AtomicI64>,
    /// Each such client's operations that got all their locks, this phase.
    done: Vec<AtomicU64>,
    /// Cycle rounds finished.
    rounds: AtomicU64,
}

impl Shared {
    fn now(&self) -> Duration {
        self.epoch.elapsed()
    }

    fn connect(&self) -> Option<Connection> {
        let client = redis::Client::open(format!("redis://{}/", self.addr)).ok()?;
        let con = client
            .get_connection_with_timeout(Duration::from_secs(5))
            .ok()?;
        con.set_read_timeout(Some(PATIENCE)).ok()?;
        Some(con)
    }
}

/// A lock taken, to release.
struct Held {
    ask: Ask,
    /// Its holds' places in the log.
    holds: Vec<usize>,
}

struct Client<'s> {
    name: String,
    /// Bumped whenever the client loses its connection: like a process that
    /// came back, it is a new owner (its old holds are left to their
    /// leases).
    gen: u64,
    /// Its place in `Shared::ids` if faults may kill its connection.
    slot: Option<usize>,
    con: Option<Connection>,
    db: i64,
    phase: u8,
    rng: Rng,
    held: Vec<Held>,
    shared: &'s Shared,
    log: Log,
}

impl<'s> Client<'s> {
    fn new(name: String, slot: Option<usize>, phase: u8, seed: u64, shared: &'s Shared) -> Self {
        Client {
            name,
            gen: 0,
            slot,
            con: None,
            db: 0,
            phase,
            rng: Rng(seed),
            held: Vec::new(),
            shared,
            log: Log::default(),
        }
    }

    fn owner(&self) -> String {
        format!("{}.{}.{}", self.name, self.phase, self.gen)
    }

    fn anomaly(&mut self, what: String) {
        self.log.anomalies.push(format!("{}: {what}", self.owner()));
    }

    fn connection(&mut self) -> Option<&mut Connection> {
        if self.con.is_none() {
            let mut con = self.shared.connect()?;
            if let Some(slot) = self.slot {
                let id: i64 = redis::cmd("CLIENT").arg("ID").query(&mut con).ok()?;
                self.shared.ids[slot].store(id, Ordering::Relaxed);
            }
            self.con = Some(con);
            self.db = 0;
        }
        self.con.as_mut()
    }

    /// The connection is gone (killed, or closed by the client): the holds
    /// it had are left to their leases, and the client is a new owner.
    fn lost(&mut self) {
        self.con = None;
        self.db = 0;
        if let Some(slot) = self.slot {
            self.shared.ids[slot].store(0, Ordering::Relaxed);
        }
        let now = self.shared.now();
        for held in std::mem::take(&mut self.held) {
            for i in held.holds {
                let hold = &mut self.log.holds[i];
                hold.let_go = Some(hold.let_go.map_or(now, |at| at.min(now)));
            }
        }
        self.gen += 1;
    }

    /// Sends `args` and reads the reply (for at most `give_up`, then closes
    /// the connection). Returns the send time, the reply's (`None` after
    /// giving up) and the reply.
    fn exec(
        &mut self,
        args: &[String],
        give_up: Option<Duration>,
    ) -> (Duration, Option<Duration>, Reply) {
        let shared = self.shared;
        let mut cmd = redis::cmd(&args[0]);
        for a in &args[1..] {
            cmd.arg(a.as_str());
        }
        let Some(con) = self.connection() else {
            let at = shared.now();
            self.lost();
            return (at, Some(at), Reply::Lost);
        };
        let send = shared.now();
        if con.send_packed_command(&cmd.get_packed_command()).is_err() {
            let at = shared.now();
            self.lost();
            return (send, Some(at), Reply::Lost);
        }
        if let Some(t) = give_up {
            let _ = con.set_read_timeout(Some(t));
        }
        let reply = con.recv_response();
        let recv = shared.now();
        let reply = match reply {
            Ok(Value::Int(n)) => Reply::Int(n),
            Ok(v @ Value::Array(_)) if ints_of(&v).is_some() => {
                Reply::Ints(ints_of(&v).unwrap_or_default())
            }
            Ok(Value::Nil) => Reply::Nil,
            Ok(Value::Okay) => Reply::Status("OK".into()),
            Ok(Value::SimpleString(s)) => Reply::Status(s),
            Ok(Value::ServerError(e)) => Reply::Error(match e.details() {
                Some(detail) => format!("{} {detail}", e.code()),
                None => e.code().to_string(),
            }),
            Ok(other) => Reply::Error(format!("unexpected reply {other:?}")),
            Err(e) if e.is_timeout() => {
                self.lost();
                return (send, None, Reply::GaveUp);
            }
            Err(e) if e.is_io_error() || e.is_connection_dropped() => {
                self.lost();
                return (send, Some(recv), Reply::Lost);
            }
            Err(e) => Reply::Error(error_line(&e)),
        };
        if give_up.is_some() {
            if let Some(con) = self.con.as_mut() {
                let _ = con.set_read_timeout(Some(PATIENCE));
            }
        }
        (send, Some(recv), reply)
    }

    fn select(&mut self, db: i64) -> bool {
        if self.db == db {
            return true;
        }
        let (_, _, reply) = self.exec(&["SELECT".into(), db.to_string()], None);
        match reply {
            Reply::Status(_) => {
                self.db = db;
                true
            }
            Reply::Lost | Reply::GaveUp => false,
            other => {
                self.anomaly(format!("SELECT {db}: {other:?}"));
                false
            }
        }
    }

    /// Asks for `ask` with a lease (`KEEPALIVE` or not), waiting `block`
    /// ms if given; logs the call and the holds it gave (or may have).
    fn acquire(
        &mut self,
        ask: &Ask,
        lease: u64,
        keepalive: bool,
        block: Option<u64>,
        give_up: Option<Duration>,
    ) -> Reply {
        if !self.select(ask.locks[0].db) {
            return Reply::Lost;
        }
        let owner = self.owner();
        let key = ask.locks[0].key.clone();
        let mut args: Vec<String> = match ask.mode {
            Mode::Exclusive if ask.locks.len() > 1 => {
                let mut args = vec!["LOCK.MACQUIRE".to_string(), ask.locks.len().to_string()];
                args.extend(ask.locks.iter().map(|l| l.key.clone()));
                args.push(owner.clone());
                args
            }
            Mode::Exclusive => vec!["LOCK.ACQUIRE".into(), key, owner.clone()],
            Mode::Read => vec!["LOCK.RACQUIRE".into(), key, owner.clone()],
            Mode::Write => vec!["LOCK.WACQUIRE".into(), key, owner.clone()],
            Mode::Permit => vec![
                "SEM.ACQUIRE".into(),
                key,
                owner.clone(),
                "PERMITS".into(),
                "1".into(),
            ],
        };
        args.extend(["PX".to_string(), lease.to_string()]);
        if keepalive {
            args.push("KEEPALIVE".into());
        }
        if let Some(ms) = block {
            args.extend(["BLOCK".to_string(), ms.to_string()]);
        }
        let (send, recv, reply) = self.exec(&args, give_up);
        let lease = Duration::from_millis(lease);
        let granted = reply.granted();
        if granted || reply.unknown() {
            let mut holds = Vec::new();
            for lock in &ask.locks {
                holds.push(self.log.holds.len());
                self.log.holds.push(Hold {
                    owner: owner.clone(),
                    lock: lock.clone(),
                    mode: ask.mode,
                    send,
                    start: if granted { recv } else { None },
                    lease_lo: (send + lease).saturating_sub(SLACK),
                    lease_hi: match recv {
                        Some(at) if granted && !keepalive => Some(at + lease + SLACK),
                        _ => None,
                    },
                    let_go: None,
                    released: None,
                });
            }
            if granted {
                self.held.push(Held {
                    ask: ask.clone(),
                    holds,
                });
            }
        }
        match &reply {
            Reply::GaveUp => self.log.gave_up += 1,
            Reply::Int(n) if *n != 1 => self.anomaly(format!("{args:?} granted {n} holds")),
            Reply::Ints(ns) if ns.iter().any(|n| *n != 1) => {
                self.anomaly(format!("{args:?} granted {ns:?} holds"))
            }
            Reply::Int(_) | Reply::Ints(_) | Reply::Lost => {}
            Reply::Nil if block.is_some() => {}
            Reply::Error(e) if e.starts_with("DEADLOCK") && block.is_some() => {}
            other => self.anomaly(format!("{args:?} answered {other:?}")),
        }
        self.log.calls.push(Call {
            phase: self.phase,
            owner,
            args,
            locks: ask.locks.clone(),
            block: block.is_some(),
            send,
            recv,
            reply: reply.clone(),
        });
        reply
    }

    /// Sends a release of `holds` (its reply ends them); whether it
    /// released them (or found them gone).
    fn release_with(&mut self, args: Vec<String>, holds: &[usize]) -> bool {
        let now = self.shared.now();
        for &i in holds {
            let hold = &mut self.log.holds[i];
            hold.let_go = Some(hold.let_go.map_or(now, |at| at.min(now)));
        }
        let (_, recv, reply) = self.exec(&args, None);
        let done = match &reply {
            Reply::Int(0) => true,
            Reply::Ints(ns) if ns.iter().all(|n| *n == 0) => true,
            // Its lease ran out, or a fault revoked it (not in a cycle
            // round: nothing ends those holds but their release).
            Reply::Error(e)
                if (e.starts_with("NOTOWNER") || e.starts_with("EXPIRED"))
                    && self.slot.is_some() =>
            {
                holds.len() == 1
            }
            Reply::Lost | Reply::GaveUp => return false,
            other => {
                self.anomaly(format!("{args:?} answered {other:?}"));
                false
            }
        };
        if done {
            for &i in holds {
                self.log.holds[i].released = recv;
            }
        }
        done
    }

    /// Releases everything held, the last taken first.
    fn release_all(&mut self) {
        while let Some(held) = self.held.pop() {
            let owner = self.owner();
            let db = held.ask.locks[0].db;
            if !self.select(db) {
                for i in held.holds {
                    let now = self.shared.now();
                    let hold = &mut self.log.holds[i];
                    hold.let_go = Some(hold.let_go.map_or(now, |at| at.min(now)));
                }
                return;
            }
            let keys: Vec<String> = held.ask.locks.iter().map(|l| l.key.clone()).collect();
            if keys.len() > 1 {
                let mut args = vec!["LOCK.MRELEASE".to_string(), keys.len().to_string()];
                args.extend(keys.iter().cloned());
                args.push(owner.clone());
                if self.release_with(args, &held.holds) || self.con.is_none() {
                    continue;
                }
                // One of them was gone (revoked, or past its lease): MRELEASE
                // released none; each of the others is released on its own.
                for (key, &i) in keys.iter().zip(&held.holds) {
                    let args = vec!["LOCK.RELEASE".into(), key.clone(), owner.clone()];
                    self.release_with(args, &[i]);
                    if self.con.is_none() {
                        break;
                    }
                }
            } else {
                let command = if held.ask.mode == Mode::Permit {
                    "SEM.RELEASE"
                } else {
                    "LOCK.RELEASE"
                };
                let args = vec![command.into(), keys[0].clone(), owner];
                self.release_with(args, &held.holds);
            }
        }
    }

    /// LOCK.RENEW of the single exclusive lock `held[at]` (not kept alive).
    fn renew(&mut self, at: usize, lease: u64) {
        let i = self.held[at].holds[0];
        let args = vec![
            "LOCK.RENEW".into(),
            self.log.holds[i].lock.key.clone(),
            self.owner(),
            "PX".into(),
            lease.to_string(),
        ];
        let (send, recv, reply) = self.exec(&args, None);
        let lease = Duration::from_millis(lease);
        let hold = &mut self.log.holds[i];
        match reply {
            Reply::Int(_) => {
                // The lease was replaced (from when the server ran it).
                hold.lease_lo = (send + lease).saturating_sub(SLACK);
                hold.lease_hi = recv.map(|at| at + lease + SLACK);
                self.log.renewals += 1;
            }
            Reply::Error(e) if e.starts_with("NOTOWNER") => {
                hold.let_go = Some(hold.let_go.map_or(send, |at| at.min(send)));
                hold.released = recv;
            }
            // Perhaps renewed: no bound on its end any more.
            Reply::Lost | Reply::GaveUp => {
                self.log.holds[i].lease_hi = None;
            }
            other => self.anomaly(format!("{args:?} answered {other:?}")),
        }
    }

    /// A random lock of `KEYS` for one acquire, in a random mode.
    fn ask_for(&mut self, i: usize) -> Ask {
        let (key, kind) = KEYS[i];
        let mode = match kind {
            Kind::Exclusive => Mode::Exclusive,
            Kind::ReadWrite if self.rng.one_in(2) => Mode::Read,
            Kind::ReadWrite => Mode::Write,
            Kind::Semaphore => Mode::Permit,
        };
        Ask::one(mode, lock(0, key))
    }

    /// What one operation asks for, in order.
    fn plan(&mut self) -> Vec<Ask> {
        let mut order: Vec<usize> = (0..KEYS.len()).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, self.rng.below(i as u64 + 1) as usize);
        }
        if self.phase == 1 {
            // Two or three places of the global order, in its order.
            let mut places: Vec<usize> = (0..ORDER.len()).collect();
            for i in (1..places.len()).rev() {
                places.swap(i, self.rng.below(i as u64 + 1) as usize);
            }
            let mut places = places[..2 + self.rng.below(2) as usize].to_vec();
            places.sort_unstable();
            places
                .into_iter()
                .map(|place| match *ORDER[place] {
                    [i, j] => {
                        // The pair, named in either order.
                        let (a, b) = if self.rng.one_in(2) { (i, j) } else { (j, i) };
                        Ask {
                            mode: Mode::Exclusive,
                            locks: vec![lock(0, KEYS[a].0), lock(0, KEYS[b].0)],
                        }
                    }
                    [i] => self.ask_for(i),
                    _ => unreachable!("a place is one lock or the pair"),
                })
                .collect()
        } else if self.rng.one_in(3) {
            // One lock, then two exclusive others at once, named in a random
            // order.
            let first = self.ask_for(order[0]);
            let multi: Vec<LockRef> = order[1..]
                .iter()
                .filter(|&&i| KEYS[i].1 == Kind::Exclusive)
                .take(2)
                .map(|&i| lock(0, KEYS[i].0))
                .collect();
            vec![
                first,
                Ask {
                    mode: Mode::Exclusive,
                    locks: multi,
                },
            ]
        } else {
            vec![self.ask_for(order[0]), self.ask_for(order[1])]
        }
    }

    /// One operation: take every lock of a plan (stopping at the first
    /// refusal), hold them a little, release them (or walk away). Whether
    /// it got them all.
    fn op(&mut self) -> bool {
        let asks = self.plan();
        let keepalive = self.rng.one_in(4);
        let lease = if keepalive {
            KEEPALIVE_LEASE_MS
        } else {
            self.rng.range(100, 400)
        };
        self.log.ops += 1;
        for ask in &asks {
            let block = self.rng.range(20, 300);
            let give_up = self
                .rng
                .one_in(40)
                .then(|| Duration::from_millis(self.rng.range(1, 20)));
            match self.acquire(ask, lease, keepalive, Some(block), give_up) {
                Reply::Int(_) | Reply::Ints(_) => {}
                // The connection is gone, and what it held with it.
                Reply::Lost | Reply::GaveUp => return false,
                // Timed out, DEADLOCK (it keeps what it has), anything else.
                _ => {
                    self.release_all();
                    return false;
                }
            }
        }
        thread::sleep(Duration::from_millis(self.rng.below(6)));
        if !keepalive && self.rng.one_in(4) {
            if let Some(at) = self
                .held
                .iter()
                .position(|h| h.ask.mode == Mode::Exclusive && h.ask.locks.len() == 1)
            {
                for _ in 0..self.rng.range(1, 2) {
                    thread::sleep(Duration::from_millis(lease / 3));
                    self.renew(at, lease);
                    if self.con.is_none() {
                        return true;
                    }
                }
            }
        }
        if !keepalive && self.rng.one_in(25) {
            // Stops renewing: its leases run out while it still "holds".
            self.log.overstayed += 1;
            thread::sleep(Duration::from_millis(lease + 20));
        }
        if self.rng.one_in(25) {
            // Walks away: closes its connection mid-hold.
            self.log.walked_away += 1;
            self.lost();
            return true;
        }
        self.release_all();
        true
    }
}

/// A fault-prone client of a phase, until told to stop.
fn run_client(i: usize, phase: u8, seed: u64, shared: &Shared) -> Log {
    let seed = seed ^ (i as u64 + 1).wrapping_mul(0xA24B_AED4_963E_E407) ^ u64::from(phase);
    let mut client = Client::new(format!("c{i}"), Some(i), phase, seed, shared);
    while !shared.stop.load(Ordering::Relaxed) {
        if client.op() {
            shared.done[i].fetch_add(1, Ordering::Relaxed);
        }
    }
    client.release_all();
    client.lost();
    client.log
}

/// Force-releases and deletes the locks (not the semaphore: a deleted
/// counter is a semaphore without permits) and kills clients' connections.
fn inject_faults(seed: u64, shared: &Shared) -> Log {
    let mut rng = Rng(seed);
    let mut log = Log::default();
    let mut con = shared.connect().expect("fault connection");
    let locks: Vec<&str> = KEYS
        .iter()
        .filter(|(_, kind)| *kind != Kind::Semaphore)
        .map(|(key, _)| *key)
        .collect();
    while !shared.stop.load(Ordering::Relaxed) {
        thread::sleep(Duration::from_millis(rng.range(15, 45)));
        let key = *rng.pick(&locks);
        let args: Vec<String> = match rng.below(3) {
            0 => vec!["LOCK.FORCERELEASE".into(), key.into()],
            1 => vec!["DEL".into(), key.into()],
            _ => {
                let id = rng.pick(&shared.ids).load(Ordering::Relaxed);
                if id == 0 {
                    continue;
                }
                vec!["CLIENT".into(), "KILL".into(), "ID".into(), id.to_string()]
            }
        };
        let mut cmd = redis::cmd(&args[0]);
        for a in &args[1..] {
            cmd.arg(a.as_str());
        }
        let send = shared.now();
        let reply: redis::RedisResult<Value> = cmd.query(&mut con);
        let recv = shared.now();
        let revoked = match (&reply, args[0].as_str()) {
            (Ok(Value::Int(n)), "LOCK.FORCERELEASE" | "DEL") if *n > 0 => Some(lock(0, key)),
            (Ok(Value::Int(_)), _) | (Ok(Value::Okay), _) => None,
            // The client was already gone.
            (Err(e), "CLIENT") if e.code() == Some("ERR") => None,
            (other, _) => {
                log.anomalies
                    .push(format!("fault {args:?} answered {other:?}"));
                None
            }
        };
        log.faults.push(Fault {
            what: args.join(" "),
            revoked,
            send,
            recv,
        });
    }
    log
}

/// A cycle round's script for `role`: the holds it takes before the
/// barrier, and the acquire it waits with after it. Each variant's waits
/// close one cycle (of `cycle_len(variant)`), whoever queues last.
fn script(variant: u64, role: usize) -> (Vec<Ask>, Option<Ask>) {
    let (x, y, z) = (lock(0, "dlp:x"), lock(0, "dlp:y"), lock(0, "dlp:z"));
    let (y1, rw, sem) = (lock(1, "dlp:y"), lock(0, "dlp:rw"), lock(0, "dlp:sem"));
    let ex = |l: &LockRef| Ask::one(Mode::Exclusive, l.clone());
    match (variant, role) {
        // Two exclusive locks.
        (0, 0) => (vec![ex(&x)], Some(ex(&y))),
        (0, 1) => (vec![ex(&y)], Some(ex(&x))),
        // Two exclusive locks in two databases.
        (1, 0) => (vec![ex(&x)], Some(ex(&y1))),
        (1, 1) => (vec![ex(&y1)], Some(ex(&x))),
        // A ring of three: a writer waiting for a reader, the reader for
        // the semaphore's holder, the holder (LOCK.MACQUIRE) for the writer.
        (2, 0) => (vec![ex(&x)], Some(Ask::one(Mode::Write, rw))),
        (2, 1) => (
            vec![Ask::one(Mode::Read, rw)],
            Some(Ask::one(Mode::Permit, sem)),
        ),
        (2, 2) => (
            vec![Ask::one(Mode::Permit, sem)],
            Some(Ask {
                mode: Mode::Exclusive,
                locks: vec![z, x],
            }),
        ),
        // A reader waiting for a writer that waits for it.
        (3, 0) => (vec![Ask::one(Mode::Write, rw)], Some(ex(&x))),
        (3, 1) => (vec![ex(&x)], Some(Ask::one(Mode::Read, rw))),
        _ => (Vec::new(), None),
    }
}

const VARIANTS: u64 = 4;
const ROLES: usize = 3;

fn cycle_len(variant: u64) -> usize {
    if variant == 2 {
        3
    } else {
        2
    }
}

/// One member of the cycle rounds, until told to stop (all members agree
/// on the last round).
fn run_round_member(
    role: usize,
    seed: u64,
    shared: &Shared,
    barrier: &Barrier,
    go_on: &AtomicBool,
) -> Log {
    let mut client = Client::new(format!("p{role}"), None, 2, seed, shared);
    let mut round = 0u64;
    loop {
        if barrier.wait().is_leader() {
            go_on.store(!shared.stop.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        barrier.wait();
        if !go_on.load(Ordering::Relaxed) {
            break;
        }
        client.gen = round * 1000;
        let (holds, wait) = script(round % VARIANTS, role);
        let mut ready = true;
        for ask in &holds {
            let reply = client.acquire(ask, ROUND_MS, false, None, None);
            ready &= reply.granted();
        }
        barrier.wait();
        if let Some(ask) = wait.filter(|_| ready) {
            let reply = client.acquire(&ask, ROUND_MS, false, Some(ROUND_MS), None);
            client.log.rounds.push((round, role, reply));
        }
        client.release_all();
        if role == 0 {
            shared.rounds.fetch_add(1, Ordering::Relaxed);
        }
        round += 1;
    }
    client.lost();
    client.log
}

/// Runs a phase's clients (and, in phase 2, the cycle rounds) with the
/// fault thread for `ms`, and until every client got all its locks at
/// least once and every round variant ran.
fn run_phase(shared: &Shared, phase: u8, ms: u64, seed: u64) -> Log {
    for done in &shared.done {
        done.store(0, Ordering::Relaxed);
    }
    shared.stop.store(false, Ordering::Relaxed);
    let clients = shared.done.len();
    let barrier = Barrier::new(ROLES);
    let go_on = AtomicBool::new(true);
    let started = Instant::now();
    let mut log = Log::default();
    let mut waited_for = String::new();
    thread::scope(|s| {
        let mut handles = Vec::new();
        for i in 0..clients {
            handles.push(s.spawn(move || run_client(i, phase, seed, shared)));
        }
        handles
            .push(s.spawn(move || inject_faults(seed.rotate_left(17) ^ u64::from(phase), shared)));
        if phase == 2 {
            for role in 0..ROLES {
                let (barrier, go_on) = (&barrier, &go_on);
                handles.push(s.spawn(move || {
                    run_round_member(role, seed ^ role as u64, shared, barrier, go_on)
                }));
            }
        }
        let deadline = started + Duration::from_millis(ms) + PATIENCE;
        loop {
            let lagging: Vec<usize> = (0..clients)
                .filter(|&i| shared.done[i].load(Ordering::Relaxed) == 0)
                .collect();
            let rounds = shared.rounds.load(Ordering::Relaxed);
            let rounds_short = phase == 2 && rounds < VARIANTS;
            if started.elapsed() >= Duration::from_millis(ms) && lagging.is_empty() && !rounds_short
            {
                break;
            }
            if Instant::now() > deadline {
                waited_for = format!(
                    "phase {phase}: clients {lagging:?} never got all their locks, {rounds} rounds"
                );
                break;
            }
            thread::sleep(Duration::from_millis(10));
        }
        shared.stop.store(true, Ordering::Relaxed);
        for handle in handles {
            log.absorb(handle.join().expect("a client thread panicked"));
        }
    });
    assert!(waited_for.is_empty(), "{waited_for}");
    log
}

/// A DEADLOCK reply's step: `owner` waits for `lock` held by `next`, or
/// (`behind`) queued on it behind `next`, a multi-lock caller first in line.
#[derive(Clone, Debug, PartialEq)]
struct Step {
    owner: String,
    lock: LockRef,
    next: String,
    behind: bool,
}

/// Parses `DEADLOCK this wait would close a cycle of N: 'o1' waits for 'k1'
/// [(db D)] held by 'o2', ...` (or `behind 'o2'`); `db` is the caller's
/// database (a step in another names its own). Returns N and the steps
/// named.
fn parse_cycle(line: &str, db: i64) -> Result<(usize, Vec<Step>), String> {
    let rest = line
        .strip_prefix("DEADLOCK this wait would close a cycle of ")
        .ok_or("no cycle in it")?;
    let (n, mut rest) = rest.split_once(": ").ok_or("no ': '")?;
    let n: usize = n.parse().map_err(|_| format!("cycle length {n:?}"))?;
    let quoted = |s: &str| -> Result<(String, usize), String> {
        let s = s.strip_prefix('\'').ok_or("a name without quotes")?;
        let end = s.find('\'').ok_or("an unterminated name")?;
        Ok((s[..end].to_string(), end + 2))
    };
    let mut steps = Vec::new();
    loop {
        let (owner, used) = quoted(rest)?;
        rest = rest[used..]
            .strip_prefix(" waits for ")
            .ok_or("no ' waits for '")?;
        let (key, used) = quoted(rest)?;
        rest = &rest[used..];
        let mut step_db = db;
        if let Some(after) = rest.strip_prefix(" (db ") {
            let (d, after) = after.split_once(')').ok_or("an unterminated db")?;
            step_db = d.parse().map_err(|_| format!("db {d:?}"))?;
            rest = after;
        }
        let behind = rest.starts_with(" behind ");
        rest = rest
            .strip_prefix(" held by ")
            .or_else(|| rest.strip_prefix(" behind "))
            .ok_or("no ' held by ' or ' behind '")?;
        let (next, used) = quoted(rest)?;
        rest = &rest[used..];
        steps.push(Step {
            owner,
            lock: lock(step_db, &key),
            next,
            behind,
        });
        match rest.strip_prefix(", ") {
            Some(more) if more.starts_with('\'') => rest = more,
            Some(more) if more.starts_with("and ") => break,
            None if rest.is_empty() => break,
            _ => return Err(format!("unexpected {rest:?}")),
        }
    }
    Ok((n, steps))
}

/// Whether `owner` had a `BLOCK` call for `wanted` that may have waited at
/// some moment of `[from, to]` (sent before `to`, answered after `from`).
fn waited_during(
    calls_of: &HashMap<&str, Vec<&Call>>,
    owner: &str,
    wanted: &LockRef,
    from: Duration,
    to: Duration,
) -> Result<(), String> {
    let calls = calls_of.get(owner).map_or(&[][..], |c| &c[..]);
    let waited = calls.iter().any(|c| {
        c.block && c.locks.contains(wanted) && c.send < to && c.recv.is_none_or(|r| r > from)
    });
    if waited {
        return Ok(());
    }
    let calls: Vec<String> = calls
        .iter()
        .filter(|c| c.locks.contains(wanted))
        .map(|c| {
            format!(
                "{} at [{:?}, {:?}]: {:?}",
                c.args.join(" "),
                c.send,
                c.recv,
                c.reply
            )
        })
        .collect();
    Err(format!(
        "{owner} did not wait for {wanted:?} during the call: its calls for it {calls:?}"
    ))
}

/// Checks one DEADLOCK reply against the logs; `Err` says what it named
/// that was not there.
fn check_cycle(
    victim: &Call,
    calls_of: &HashMap<&str, Vec<&Call>>,
    holds_of: &HashMap<&str, Vec<&Hold>>,
) -> Result<usize, String> {
    let line = victim.reply.deadlock().expect("a DEADLOCK reply");
    let (from, to) = (victim.send, victim.recv.expect("a reply came"));
    let (n, steps) = parse_cycle(line, victim.locks[0].db)?;
    if steps.len() != n {
        return Err(format!("{} steps named of a cycle of {n}", steps.len()));
    }
    let mut owners: Vec<&str> = steps.iter().map(|s| s.owner.as_str()).collect();
    owners.sort_unstable();
    owners.dedup();
    if owners.len() != n || n < 2 {
        return Err("the cycle's owners are not distinct".into());
    }
    if steps[0].owner != victim.owner || !victim.locks.contains(&steps[0].lock) {
        return Err(format!(
            "its first step is not the caller's wait: {:?}",
            steps[0]
        ));
    }
    for (i, step) in steps.iter().enumerate() {
        let Step {
            owner,
            lock: wanted,
            next,
            behind,
        } = step;
        if *next != steps[(i + 1) % n].owner {
            return Err(format!(
                "step {i} leads to {next}, not to the next step's owner"
            ));
        }
        if *behind {
            // `next` is a multi-lock caller waiting on `wanted` too.
            waited_during(calls_of, next, wanted, from, to)
                .map_err(|why| format!("step {i} is behind no waiter: {why}"))?;
        } else {
            let holds = holds_of.get(next.as_str()).map_or(&[][..], |h| &h[..]);
            let held = holds
                .iter()
                .any(|h| h.lock == *wanted && h.maybe_held_during(from, to));
            if !held {
                let holds: Vec<&&Hold> = holds.iter().filter(|h| h.lock == *wanted).collect();
                return Err(format!(
                    "{next} did not hold {wanted:?} during the call: its holds of it {holds:?}"
                ));
            }
        }
        if i > 0 {
            waited_during(calls_of, owner, wanted, from, to)?;
        }
    }
    Ok(n)
}

/// No two owners held a lock at once, but readers of a read-write lock.
/// A revocation (FORCERELEASE, DEL that removed the lock) ends the holds
/// granted before it was sent; one granted while it was in flight counts
/// as empty.
fn check_exclusion(holds: &[Hold], faults: &[Fault]) -> Vec<String> {
    // Each lock's revocations in the order sent (one fault thread: also
    // the order answered).
    let mut revocations: HashMap<&LockRef, Vec<&Fault>> = HashMap::new();
    for fault in faults {
        if let Some(lock) = &fault.revoked {
            revocations.entry(lock).or_default().push(fault);
        }
    }
    let mut by_lock: HashMap<&LockRef, Vec<(Duration, Duration, &Hold)>> = HashMap::new();
    for hold in holds {
        let Some((start, mut end)) = hold.claimed() else {
            continue;
        };
        let revoked = revocations.get(&hold.lock).map_or(&[][..], |v| &v[..]);
        // Those answered before the acquire was sent ran before the grant.
        let first = revoked.partition_point(|f| f.recv < hold.send);
        for fault in &revoked[first..] {
            if start < fault.send {
                end = end.min(fault.send);
                break;
            }
            end = start;
        }
        if end > start {
            by_lock
                .entry(&hold.lock)
                .or_default()
                .push((start, end, hold));
        }
    }
    let mut violations = Vec::new();
    for (lock, mut spans) in by_lock {
        spans.sort_by_key(|(start, _, _)| *start);
        for (i, (start, end, h)) in spans.iter().enumerate() {
            for (s2, e2, g) in spans[i + 1..].iter().take_while(|(s, _, _)| s < end) {
                let both_read = h.mode == Mode::Read && g.mode == Mode::Read;
                if g.owner != h.owner && !both_read {
                    violations.push(format!(
                        "{lock:?}: {} ({:?}) held [{start:?}, {end:?}) while {} ({:?}) held [{s2:?}, {e2:?})",
                        h.owner, h.mode, g.owner, g.mode
                    ));
                }
            }
        }
    }
    violations
}

fn deadlocks(server: &Server) -> i64 {
    server.stat("deadlocks")
}

/// Every lock of the test free, its semaphores whole, nobody waiting.
fn all_free(con: &mut Connection) -> bool {
    let mut locks: Vec<LockRef> = KEYS
        .iter()
        .filter(|(_, kind)| *kind != Kind::Semaphore)
        .map(|(key, _)| lock(0, key))
        .collect();
    locks.extend(
        ["dlp:x", "dlp:y", "dlp:z", "dlp:rw"]
            .iter()
            .map(|k| lock(0, k)),
    );
    locks.push(lock(1, "dlp:y"));
    for db in [1, 0] {
        let _: () = q(con, &["SELECT", &db.to_string()]);
        let queues: Vec<Value> = q(con, &["LOCK.QUEUES", "COUNT", "0"]);
        if !queues.is_empty() {
            return false;
        }
        for l in locks.iter().filter(|l| l.db == db) {
            if q::<i64>(con, &["EXISTS", &l.key]) != 0 {
                return false;
            }
        }
    }
    ["dl:3", "dlp:sem"].iter().all(|sem| {
        let info: Vec<Value> = q(con, &["SEM.INFO", sem]);
        let field = |name: &str| {
            info.chunks(2)
                .find(|kv| text(&kv[0]) == name)
                .map(|kv| kv[1].clone())
        };
        field("available") == Some(Value::Int(1))
            && field("waiters") == Some(Value::Int(0))
            && matches!(field("holders"), Some(Value::Array(h)) if h.is_empty())
    })
}

#[test]
fn deadlock_replies_name_real_cycles_and_only_those_under_faults() {
    let secs = env_or("LOCK_DEADLOCK_CHAOS_SECS", 0);
    let clients = env_or("LOCK_DEADLOCK_CHAOS_CLIENTS", 12) as usize;
    let seed = env_or("LOCK_DEADLOCK_CHAOS_SEED", 0xDEAD_10C0 + secs);
    // 1.5 s per phase unless told otherwise.
    let phase_ms = if secs == 0 { 1500 } else { secs * 1000 };
    eprintln!(
        "deadlock chaos: {phase_ms} ms per phase, {clients} clients, seed {seed} \
         (LOCK_DEADLOCK_CHAOS_SEED to replay the choices)"
    );
    let started = Instant::now();
    let master = Server::start();
    // The replica syncs while the ordered phase runs (its link comes up at
    // its first replication cron, up to a second after it starts).
    let mut replica_config = Config::default();
    replica_config.args.extend([
        "--replicaof".to_string(),
        master.host().to_string(),
        master.port.to_string(),
    ]);
    let replica = replica_config.start();
    let mut con = master.client();
    for sem in ["dl:3", "dlp:sem"] {
        assert_eq!(
            q::<i64>(&mut con, &["SEM.INIT", sem, "1"]),
            1,
            "SEM.INIT {sem}"
        );
    }
    let shared = Shared {
        epoch: Instant::now(),
        addr: master.addr(),
        stop: AtomicBool::new(false),
        ids: (0..clients).map(|_| AtomicI64::new(0)).collect(),
        done: (0..clients).map(|_| AtomicU64::new(0)).collect(),
        rounds: AtomicU64::new(0),
    };

    // 1. One global order: no cycle, no DEADLOCK.
    let mut marks = vec![("start", started.elapsed())];
    let mut log = run_phase(&shared, 1, phase_ms, seed);
    marks.push(("ordered", started.elapsed()));
    let ordered_deadlocks: Vec<&Call> = log
        .calls
        .iter()
        .filter(|c| c.reply.deadlock().is_some())
        .collect();
    assert!(
        ordered_deadlocks.is_empty(),
        "DEADLOCK though every client took its locks in one order: {ordered_deadlocks:#?}"
    );
    assert_eq!(
        deadlocks(&master),
        0,
        "lock_deadlocks after the ordered phase"
    );
    let ordered_ops = log.ops;

    // 2. Random order: cycles, each DEADLOCK checked against the logs.
    log.absorb(run_phase(&shared, 2, phase_ms, seed));
    marks.push(("random", started.elapsed()));
    let counted = deadlocks(&master);
    assert!(log.anomalies.is_empty(), "anomalies: {:#?}", log.anomalies);

    let mut calls_of: HashMap<&str, Vec<&Call>> = HashMap::new();
    for call in &log.calls {
        calls_of.entry(call.owner.as_str()).or_default().push(call);
    }
    let mut holds_of: HashMap<&str, Vec<&Hold>> = HashMap::new();
    for hold in &log.holds {
        holds_of.entry(hold.owner.as_str()).or_default().push(hold);
    }
    let mut replied = 0i64;
    // Replies naming a step behind a multi-lock caller.
    let mut behind = 0u64;
    let mut lengths: HashMap<usize, u64> = HashMap::new();
    let mut false_cycles = Vec::new();
    for victim in log.calls.iter().filter(|c| c.reply.deadlock().is_some()) {
        replied += 1;
        behind += u64::from(
            victim
                .reply
                .deadlock()
                .is_some_and(|l| l.contains(" behind '")),
        );
        match check_cycle(victim, &calls_of, &holds_of) {
            Ok(n) => *lengths.entry(n).or_default() += 1,
            Err(why) => false_cycles.push(format!(
                "{} at [{:?}, {:?}] answered {:?}: {why}",
                victim.args.join(" "),
                victim.send,
                victim.recv,
                victim.reply
            )),
        }
    }
    assert!(
        false_cycles.is_empty(),
        "{} DEADLOCK replies naming what was not there (the first 10):\n{}",
        false_cycles.len(),
        false_cycles[..false_cycles.len().min(10)].join("\n")
    );

    // Each cycle round: exactly one DEADLOCK (of its cycle's length), the
    // others granted.
    let mut rounds: HashMap<u64, Vec<(usize, &Reply)>> = HashMap::new();
    for (round, role, reply) in &log.rounds {
        rounds.entry(*round).or_default().push((*role, reply));
    }
    assert!(rounds.len() as u64 >= VARIANTS, "{} rounds", rounds.len());
    let mut faults: HashMap<&str, u64> = HashMap::new();
    for fault in &log.faults {
        let kind = fault.what.split(' ').next().unwrap_or_default();
        *faults.entry(kind).or_default() += 1;
    }
    for (round, replies) in &rounds {
        let variant = round % VARIANTS;
        let refused: Vec<&str> = replies.iter().filter_map(|(_, r)| r.deadlock()).collect();
        let granted = replies.iter().filter(|(_, r)| r.granted()).count();
        assert!(
            refused.len() == 1 && granted + 1 == cycle_len(variant),
            "round {round} (variant {variant}): {replies:?}"
        );
        let (n, _) = parse_cycle(refused[0], 0).expect("checked above");
        assert_eq!(n, cycle_len(variant), "round {round}: {}", refused[0]);
    }
    assert!(replied >= rounds.len() as i64);

    // The counter: every DEADLOCK answered, and perhaps those whose reply
    // was lost with a killed connection.
    let unknown = log
        .calls
        .iter()
        .filter(|c| c.phase == 2 && c.block && c.reply.unknown())
        .count() as i64;
    assert!(
        counted >= replied && counted <= replied + unknown,
        "lock_deadlocks {counted}, {replied} DEADLOCK replies, {unknown} blocking calls \
         without a reply"
    );

    let violations = check_exclusion(&log.holds, &log.faults);
    assert!(
        violations.is_empty(),
        "{} times two holders at once (the first 10):\n{}",
        violations.len(),
        violations[..violations.len().min(10)].join("\n")
    );

    // Nothing left behind: within a lease every lock is free, nobody waits.
    marks.push(("checked", started.elapsed()));
    wait_until("every lock free and no waiter", || all_free(&mut con));
    marks.push(("free", started.elapsed()));

    // 3. The replica: never a deadlock of its own; a wait that would close
    // a cycle on the master is refused there as a write (READONLY).
    wait_until("the replica caught up", || {
        master.replica_caught_up(&replica)
    });
    assert_eq!(deadlocks(&replica), 0, "lock_deadlocks on the replica");
    let mut a = master.client();
    let mut b = master.client();
    let _: () = q(&mut con, &["SELECT", "0"]);
    assert_eq!(
        q::<i64>(&mut a, &["LOCK.ACQUIRE", "dlr:x", "rA", "PX", "60000"]),
        1
    );
    assert_eq!(
        q::<i64>(&mut a, &["LOCK.WACQUIRE", "dlr:rw", "rA", "PX", "60000"]),
        1
    );
    assert_eq!(q::<i64>(&mut a, &["SEM.INIT", "dlr:sem", "1"]), 1);
    assert_eq!(
        q::<i64>(&mut a, &["SEM.ACQUIRE", "dlr:sem", "rA", "PX", "60000"]),
        1
    );
    assert_eq!(
        q::<i64>(&mut b, &["LOCK.ACQUIRE", "dlr:y", "rB", "PX", "60000"]),
        1
    );
    send(&mut a, &["LOCK.ACQUIRE", "dlr:y", "rA", "BLOCK", "0"]);
    wait_for_waiters(&mut con, "dlr:y", 1);
    wait_until("the replica caught up", || {
        master.replica_caught_up(&replica)
    });
    let closing: [&[&str]; 5] = [
        &["LOCK.ACQUIRE", "dlr:x", "rB", "BLOCK", "0"],
        &["LOCK.RACQUIRE", "dlr:rw", "rB", "BLOCK", "0"],
        &["LOCK.WACQUIRE", "dlr:rw", "rB", "BLOCK", "0"],
        &["LOCK.MACQUIRE", "2", "dlr:z", "dlr:x", "rB", "BLOCK", "0"],
        &["SEM.ACQUIRE", "dlr:sem", "rB", "BLOCK", "0"],
    ];
    let mut rcon = replica.client();
    for args in closing {
        assert_eq!(
            err_code(&mut rcon, args),
            "READONLY",
            "{args:?} on the replica"
        );
    }
    assert_eq!(deadlocks(&replica), 0, "lock_deadlocks on the replica");
    assert_eq!(
        q::<Vec<Value>>(&mut rcon, &["LOCK.QUEUES"]),
        Vec::<Value>::new()
    );
    // The same calls on the master close the cycle.
    for args in closing {
        let e = err(&mut b, args);
        let (n, steps) = parse_cycle(&e, 0).unwrap_or_else(|why| panic!("{e}: {why}"));
        assert_eq!(n, 2, "{e}");
        assert_eq!(steps[0].owner, "rB", "{e}");
        assert_eq!(
            steps[1],
            Step {
                owner: "rA".into(),
                lock: lock(0, "dlr:y"),
                next: "rB".into(),
                behind: false
            },
            "{e}"
        );
    }
    assert_eq!(deadlocks(&master), counted + closing.len() as i64);
    assert_eq!(q::<i64>(&mut b, &["LOCK.RELEASE", "dlr:y", "rB"]), 0);
    assert_eq!(int_reply(recv(&mut a), "rA's wait for dlr:y"), 1);
    wait_until("the replica caught up", || {
        master.replica_caught_up(&replica)
    });
    assert_eq!(deadlocks(&replica), 0, "lock_deadlocks on the replica");

    let mut outcomes: HashMap<(u8, &str), u64> = HashMap::new();
    for call in log
        .calls
        .iter()
        .filter(|c| c.block && !c.owner.starts_with('p'))
    {
        let what = match &call.reply {
            r if r.granted() => "granted",
            Reply::Nil => "timed out",
            r if r.deadlock().is_some() => "DEADLOCK",
            Reply::Lost => "lost",
            _ => "gave up",
        };
        *outcomes.entry((call.phase, what)).or_default() += 1;
    }
    let mut outcomes: Vec<_> = outcomes.into_iter().collect();
    outcomes.sort();
    eprintln!("deadlock chaos: blocking calls by (phase, outcome): {outcomes:?}");
    eprintln!(
        "deadlock chaos: {ordered_ops} ordered and {} random-order operations \
         ({} renewals, {} overstayed leases, {} walked away, {} gave up mid-wait), \
         faults {faults:?}, {} cycle rounds; {replied} DEADLOCK replies checked \
         (cycle lengths {lengths:?}, {behind} with a step behind a multi-lock caller), lock_deadlocks {counted}, {unknown} blocking \
         calls without a reply; {:.1} s ({marks:?})",
        log.ops - ordered_ops,
        log.renewals,
        log.overstayed,
        log.walked_away,
        log.gave_up,
        rounds.len(),
        started.elapsed().as_secs_f64()
    );
}

/// The check of a DEADLOCK reply against the logs refuses what was not
/// there: a holder that had let go, a waiter already answered, steps that
/// do not chain, a lock the caller did not ask for, another database.
#[test]
fn the_cycle_check_refuses_a_cycle_that_was_not_there() {
    let ms = Duration::from_millis;
    let call = |owner: &str, l: LockRef, send: u64, recv: u64, reply: Reply| Call {
        phase: 2,
        owner: owner.into(),
        args: vec![owner.into(), l.key.clone()],
        locks: vec![l],
        block: true,
        send: ms(send),
        recv: Some(ms(recv)),
        reply,
    };
    let hold = |owner: &str, l: LockRef, released: u64| Hold {
        owner: owner.into(),
        lock: l,
        mode: Mode::Exclusive,
        send: ms(0),
        start: Some(ms(1)),
        lease_lo: ms(1000),
        lease_hi: Some(ms(1001)),
        let_go: Some(ms(released)),
        released: Some(ms(released)),
    };
    let check = |calls: &[Call], holds: &[Hold], victim: &Call| {
        let mut calls_of: HashMap<&str, Vec<&Call>> = HashMap::new();
        for c in calls {
            calls_of.entry(c.owner.as_str()).or_default().push(c);
        }
        let mut holds_of: HashMap<&str, Vec<&Hold>> = HashMap::new();
        for h in holds {
            holds_of.entry(h.owner.as_str()).or_default().push(h);
        }
        check_cycle(victim, &calls_of, &holds_of)
    };
    let (x, y, y1) = (lock(0, "x"), lock(0, "y"), lock(1, "y"));
    let deadlock =
        |text: &str| Reply::Error(format!("DEADLOCK this wait would close a cycle of {text}"));
    // a holds x, b holds y; a waits for y over [10, 50]; b asks for x over
    // [20, 21] and is refused.
    let named = deadlock("2: 'b' waits for 'x' held by 'a', 'a' waits for 'y' held by 'b'");
    let victim = call("b", x.clone(), 20, 21, named.clone());
    let a_waits = call("a", y.clone(), 10, 50, Reply::Int(1));
    let holds = [hold("a", x.clone(), 100), hold("b", y.clone(), 100)];
    assert_eq!(
        check(std::slice::from_ref(&a_waits), &holds, &victim),
        Ok(2)
    );
    // a's wait was answered before b asked.
    let answered = call("a", y.clone(), 10, 15, Reply::Nil);
    assert!(check(&[answered], &holds, &victim).is_err());
    // a had released x before b asked.
    let released = [hold("a", x.clone(), 19), hold("b", y.clone(), 100)];
    assert!(check(std::slice::from_ref(&a_waits), &released, &victim).is_err());
    // b asked for y, not x.
    let other = call("b", y.clone(), 20, 21, named);
    assert!(check(std::slice::from_ref(&a_waits), &holds, &other).is_err());
    // Steps that do not chain, an owner twice, a cycle cut short.
    for text in [
        "2: 'b' waits for 'x' held by 'a', 'a' waits for 'y' held by 'c'",
        "2: 'b' waits for 'x' held by 'b', 'b' waits for 'y' held by 'b'",
        "3: 'b' waits for 'x' held by 'a', 'a' waits for 'y' held by 'b'",
        "2: 'b' waits for 'x' held by 'a', and 1 more",
    ] {
        let victim = call("b", x.clone(), 20, 21, deadlock(text));
        assert!(
            check(std::slice::from_ref(&a_waits), &holds, &victim).is_err(),
            "{text}"
        );
    }
    // Another database: named as such, and only matching that one.
    let across = deadlock("2: 'b' waits for 'x' held by 'a', 'a' waits for 'y' (db 1) held by 'b'");
    let victim = call("b", x.clone(), 20, 21, across);
    assert!(check(&[a_waits], &holds, &victim).is_err());
    let a_waits_1 = call("a", y1.clone(), 10, 50, Reply::Int(1));
    let holds_1 = [hold("a", x.clone(), 100), hold("b", y1, 100)];
    assert_eq!(check(&[a_waits_1], &holds_1, &victim), Ok(2));
    // A step behind a multi-lock caller: it waited with that key.
    let z = lock(0, "z");
    let behind = deadlock(
        "3: 'c' waits for 'x' held by 'a', 'a' waits for 'y' behind 'b', 'b' waits for 'z' held by 'c'",
    );
    let victim = call("c", x.clone(), 20, 21, behind);
    let multi = |recv: u64| Call {
        locks: vec![y.clone(), z.clone()],
        ..call("b", y.clone(), 5, recv, Reply::Nil)
    };
    let holds = [hold("a", x, 100), hold("c", z.clone(), 100)];
    let a_waits = call("a", y.clone(), 10, 50, Reply::Int(1));
    assert_eq!(check(&[a_waits.clone(), multi(60)], &holds, &victim), Ok(3));
    // ... not if its wait had ended before the call.
    assert!(check(&[a_waits, multi(15)], &holds, &victim).is_err());
}
