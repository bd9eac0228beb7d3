//! `lock-bench-peers --s14-candidate k8s ...`: client-go's `LeaderElector`
//! (k8s.io/client-go/tools/leaderelection) with `ReleaseOnCancel`, its
//! resource lock a JSON record in a Redis string (Get, Create and a
//! compare-and-set Update on the record's resourceVersion, in plain
//! commands), its timings client-go's.

use std::io;
use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::process::{catch_sigterm, say, unix_ms, TERM};
use lock_bench::conn::{self, Reply};

/// A Redis connection with timeouts (a request that gets no answer in
/// time fails and the connection is dropped; the next request reconnects).
struct Redis {
    addr: String,
    timeout: Duration,
    conn: Option<redis::Connection>,
}

impl Redis {
    fn cmd(&mut self, args: &[&[u8]]) -> io::Result<Reply> {
        let r = self.try_cmd(args);
        if r.is_err() {
            self.conn = None;
        }
        r
    }

    fn try_cmd(&mut self, args: &[&[u8]]) -> io::Result<Reply> {
        if self.conn.is_none() {
            self.conn = Some(conn::blocking(&self.addr, self.timeout)?);
        }
        let c = self.conn.as_mut().expect("connected");
        let mut cmd = redis::Cmd::new();
        for a in args {
            cmd.arg(*a);
        }
        // An error reply is an Err.
        cmd.query(c).map_err(io::Error::other)
    }
}

/// client-go's `LeaderElectionRecord`, with the object's resourceVersion.
#[derive(Clone, Debug, Default, PartialEq)]
struct Record {
    version: u64,
    holder: String,
    lease_s: u64,
    acquire_ms: u128,
    renew_ms: u128,
    transitions: u64,
}

impl Record {
    fn encode(&self) -> Vec<u8> {
        json!({"resourceVersion": self.version, "holderIdentity": self.holder,
               "leaseDurationSeconds": self.lease_s, "acquireTime": self.acquire_ms as u64,
               "renewTime": self.renew_ms as u64, "leaderTransitions": self.transitions})
        .to_string()
        .into_bytes()
    }

    fn decode(raw: &[u8]) -> io::Result<Record> {
        let v: Value = serde_json::from_slice(raw).map_err(io::Error::other)?;
        let n = |k: &str| v.get(k).and_then(Value::as_u64).unwrap_or(0);
        Ok(Record {
            version: n("resourceVersion"),
            holder: v
                .get("holderIdentity")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            lease_s: n("leaseDurationSeconds"),
            acquire_ms: u128::from(n("acquireTime")),
            renew_ms: u128::from(n("renewTime")),
            transitions: n("leaderTransitions"),
        })
    }
}

/// client-go's `LeaderElector` (k8s.io/client-go/tools/leaderelection),
/// its resource lock a Redis string holding the record: Get = `GET`,
/// Create = `SET NX`, Update = compare-and-set on the resourceVersion of
/// the object last read or written (`WATCH`, `GET`, `MULTI`, `SET`, `EXEC`).
struct Elector {
    redis: Redis,
    key: String,
    id: String,
    lease: Duration,
    /// The resource version this elector last read or wrote (the object
    /// client-go's lock keeps for Update).
    known: Option<u64>,
    observed: Record,
    observed_raw: Vec<u8>,
    observed_time: Instant,
}

impl Elector {
    fn is_leader(&self) -> bool {
        self.observed.holder == self.id
    }

    fn lease_valid(&self, now: Instant) -> bool {
        self.observed_time + Duration::from_secs(self.observed.lease_s) > now
    }

    fn set_observed(&mut self, r: Record) {
        self.observed = r;
        self.observed_time = Instant::now();
    }

    fn get(&mut self) -> io::Result<Option<(Record, Vec<u8>)>> {
        match self.redis.cmd(&[b"GET", self.key.as_bytes()])? {
            Reply::BulkString(raw) => {
                let r = Record::decode(&raw)?;
                self.known = Some(r.version);
                Ok(Some((r, raw)))
            }
            _ => Ok(None),
        }
    }

    fn create(&mut self, mut r: Record) -> io::Result<Record> {
        r.version = 1;
        match self
            .redis
            .cmd(&[b"SET", self.key.as_bytes(), &r.encode(), b"NX"])?
        {
            Reply::Okay => {
                self.known = Some(1);
                Ok(r)
            }
            _ => Err(io::Error::other("conflict (exists)")),
        }
    }

    fn update(&mut self, mut r: Record) -> io::Result<Record> {
        let known = self
            .known
            .ok_or_else(|| io::Error::other("update before get"))?;
        let key = self.key.clone();
        self.redis.cmd(&[b"WATCH", key.as_bytes()])?;
        let current = match self.redis.cmd(&[b"GET", key.as_bytes()])? {
            Reply::BulkString(raw) => Record::decode(&raw)?.version,
            _ => 0,
        };
        if current != known {
            self.redis.cmd(&[b"UNWATCH"])?;
            return Err(io::Error::other("conflict (resourceVersion)"));
        }
        r.version = known + 1;
        self.redis.cmd(&[b"MULTI"])?;
        self.redis.cmd(&[b"SET", key.as_bytes(), &r.encode()])?;
        match self.redis.cmd(&[b"EXEC"])? {
            Reply::Array(_) => {
                self.known = Some(r.version);
                Ok(r)
            }
            _ => Err(io::Error::other("conflict (EXEC)")),
        }
    }

    /// `tryAcquireOrRenew`.
    fn try_acquire_or_renew(&mut self) -> bool {
        let now = Instant::now();
        let mut rec = Record {
            holder: self.id.clone(),
            lease_s: self.lease.as_secs(),
            acquire_ms: unix_ms(),
            renew_ms: unix_ms(),
            ..Record::default()
        };
        // 1. Fast path: the leader updates optimistically.
        if self.is_leader() && self.lease_valid(now) {
            rec.acquire_ms = self.observed.acquire_ms;
            rec.transitions = self.observed.transitions;
            if let Ok(r) = self.update(rec.clone()) {
                self.set_observed(r);
                return true;
            }
        }
        // 2. Get or create.
        let (old, raw) = match self.get() {
            Err(_) => return false,
            Ok(None) => {
                return match self.create(rec) {
                    Ok(r) => {
                        self.set_observed(r);
                        true
                    }
                    Err(_) => false,
                }
            }
            Ok(Some(x)) => x,
        };
        // 3. Observe a change of the record; someone else's valid lease wins.
        if raw != self.observed_raw {
            self.set_observed(old.clone());
            self.observed_raw = raw;
        }
        if !old.holder.is_empty() && self.lease_valid(now) && !self.is_leader() {
            return false;
        }
        // 4. Take over or renew.
        if self.is_leader() {
            rec.acquire_ms = old.acquire_ms;
            rec.transitions = old.transitions;
        } else {
            rec.transitions = old.transitions + 1;
        }
        match self.update(rec) {
            Ok(r) => {
                self.set_observed(r);
                true
            }
            Err(_) => false,
        }
    }

    /// `release` (ReleaseOnCancel): an empty holder with a 1 s lease.
    fn release(&mut self) -> bool {
        if !self.is_leader() {
            return true;
        }
        let rec = Record {
            holder: String::new(),
            lease_s: 1,
            acquire_ms: unix_ms(),
            renew_ms: unix_ms(),
            transitions: self.observed.transitions,
            ..Record::default()
        };
        match self.update(rec) {
            Ok(r) => {
                self.set_observed(r);
                true
            }
            Err(_) => false,
        }
    }
}

/// Sleeps `d`, waking early on SIGTERM; true if SIGTERM came.
fn sleep_or_term(d: Duration) -> bool {
    let end = Instant::now() + d;
    while Instant::now() < end {
        if TERM.load(Ordering::SeqCst) {
            return true;
        }
        thread::sleep(Duration::from_millis(5).min(end - Instant::now()));
    }
    TERM.load(Ordering::SeqCst)
}

/// A random factor in [0, 1) (xorshift seeded from the clock and pid).
fn unit_random(state: &mut u64) -> f64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    (*state >> 11) as f64 / (1u64 << 53) as f64
}

/// `--s14-candidate k8s ADDR KEY ID LEASE_MS RENEW_DEADLINE_MS RETRY_MS`:
/// client-go's `LeaderElector.Run` with `ReleaseOnCancel`: acquire =
/// `wait.JitterUntil(tryAcquireOrRenew, RetryPeriod, 1.2, sliding)` until
/// it succeeds; then renew = `wait.Until(PollImmediateUntil(RetryPeriod,
/// tryAcquireOrRenew, RenewDeadline), RetryPeriod)`: a round that has not
/// renewed within RenewDeadline ends the leadership (`lost`, exit 75);
/// SIGTERM cancels the context: release, `resigned`, exit 0.
pub(super) fn k8s_candidate(args: &[String]) -> io::Result<i32> {
    let [addr, key, id, lease, renew, retry] = args else {
        return Err(io::Error::other(
            "k8s ADDR KEY ID LEASE_MS RENEW_DEADLINE_MS RETRY_MS",
        ));
    };
    let ms = |s: &String| {
        s.parse::<u64>()
            .map(Duration::from_millis)
            .map_err(|_| io::Error::other(format!("not ms: {s}")))
    };
    let (lease, renew, retry) = (ms(lease)?, ms(renew)?, ms(retry)?);
    catch_sigterm();
    let mut rng = (unix_ms() as u64) ^ (u64::from(std::process::id()) << 32) | 1;
    let mut el = Elector {
        // A request is bounded by the retry period (client-go's requests by
        // the renew context's deadline and the HTTP client's timeout).
        redis: Redis {
            addr: addr.clone(),
            timeout: retry,
            conn: None,
        },
        key: key.clone(),
        id: id.clone(),
        lease,
        known: None,
        observed: Record::default(),
        observed_raw: Vec::new(),
        observed_time: Instant::now(),
    };
    // acquire
    let mut said_waiting = false;
    loop {
        if el.try_acquire_or_renew() {
            break;
        }
        if !said_waiting {
            eprintln!("waiting");
            said_waiting = true;
        }
        let jittered = retry.mul_f64(1.0 + 1.2 * unit_random(&mut rng));
        if sleep_or_term(jittered) {
            return Ok(0);
        }
    }
    say(&format!("leading {id} at {}", unix_ms()));
    // renew
    loop {
        let deadline = Instant::now() + renew;
        let mut renewed = false;
        loop {
            if TERM.load(Ordering::SeqCst) {
                break;
            }
            if el.try_acquire_or_renew() {
                renewed = true;
                break;
            }
            let next = Instant::now() + retry;
            if next >= deadline {
                sleep_or_term(deadline.saturating_duration_since(Instant::now()));
                break;
            }
            if sleep_or_term(retry) {
                break;
            }
        }
        if TERM.load(Ordering::SeqCst) {
            el.release();
            eprintln!("resigned at {}", unix_ms());
            return Ok(0);
        }
        if !renewed {
            eprintln!(
                "lost at {} (not renewed within the renew deadline)",
                unix_ms()
            );
            el.release();
            return Ok(75);
        }
        if sleep_or_term(retry) {
            el.release();
            eprintln!("resigned at {}", unix_ms());
            return Ok(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trips() {
        let r = Record {
            version: 3,
            holder: "a".into(),
            lease_s: 15,
            acquire_ms: 1,
            renew_ms: 2,
            transitions: 4,
        };
        assert_eq!(Record::decode(&r.encode()).unwrap(), r);
    }
}
