//! The processes S14 starts besides `redis-lock elect` and `etcdctl elect`:
//! `lock-bench-peers --s14-candidate etcd ...` (an election candidate on etcd's
//! v3 election service through `etcd-client`, gRPC, with a lease of its own
//! TTL), `lock-bench-peers --s14-candidate k8s ...` (client-go's leaderelection
//! loop against a record in Redis, plain commands) and `lock-bench-peers
//! --s14-child PID` (the command `redis-lock elect` runs while leading).
//! Each candidate prints `leading` on stdout the moment it leads, `lost ...`
//! on stderr when it stops believing it leads for any reason but its own
//! exit, `resigned` on stderr after a clean exit (SIGTERM). One process
//! each; plain std code but for the etcd candidate, which runs `etcd-client`
//! on a current-thread tokio runtime of its own.

use std::future::Future;
use std::io::{self, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use etcd_client::{Client, LeaseKeepAliveStream, LeaseKeeper, ResignOptions};
use serde_json::{json, Value};

use lock_bench::conn::{self, Reply};

static TERM: AtomicBool = AtomicBool::new(false);

extern "C" fn on_term(_: libc::c_int) {
    TERM.store(true, Ordering::SeqCst);
}

fn catch_sigterm() {
    // SAFETY: the handler only stores to an atomic (async-signal-safe).
    unsafe {
        libc::signal(
            libc::SIGTERM,
            on_term as extern "C" fn(libc::c_int) as libc::sighandler_t,
        );
    }
}

fn unix_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

fn say(line: &str) {
    let mut out = io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Entry point of the hidden subcommands; `args` after the flag.
pub fn main(flag: &str, args: &[String]) -> i32 {
    let r = match flag {
        "--s14-child" => child(args),
        "--s14-probe" => probe(args),
        "--s14-candidate" => match args.first().map(String::as_str) {
            Some("etcd") => etcd_candidate(&args[1..]),
            Some("k8s") => k8s_candidate(&args[1..]),
            _ => Err(io::Error::other("--s14-candidate etcd|k8s ...")),
        },
        _ => Err(io::Error::other("unknown subcommand")),
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            eprintln!("lock-bench-peers {flag}: {e}");
            1
        }
    }
}

/// The command run while leading: prints `started <pid>` and stays until
/// SIGTERM/SIGKILL or until the benchmark (pid `args[0]`) is gone, so that
/// nothing outlives a benchmark killed without cleaning up.
fn child(args: &[String]) -> io::Result<i32> {
    let bench: libc::pid_t = args
        .first()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| io::Error::other("--s14-child BENCH_PID"))?;
    say(&format!("started {} at {}", std::process::id(), unix_ms()));
    // SAFETY: kill with signal 0 only checks that the process exists.
    while unsafe { libc::kill(bench, 0) } == 0 {
        thread::sleep(Duration::from_millis(100));
    }
    Ok(0)
}

/// `--s14-probe ADDR`: exits 0 once a TCP connection to ADDR succeeds
/// (within 10 s), 1 otherwise: run in the network namespace after a cut is
/// healed, so that the next sample's leader does not meet a neighbour
/// entry the cut left failed ("no route to host").
fn probe(args: &[String]) -> io::Result<i32> {
    let addr: SocketAddr = args
        .first()
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| io::Error::other("--s14-probe IP:PORT"))?;
    let end = Instant::now() + Duration::from_secs(10);
    while Instant::now() < end {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok() {
            return Ok(0);
        }
        thread::sleep(Duration::from_millis(50));
    }
    Ok(1)
}

// ------------------------------------------------------------ etcd, gRPC

fn etcd_err(what: &str, e: etcd_client::Error) -> io::Error {
    io::Error::other(format!("{what}: {e}"))
}

/// `f` bounded by `limit` (the tonic channel under `etcd-client` connects
/// lazily and waits for the endpoint to be ready: a request to an
/// unreachable node would otherwise wait for ever).
async fn within<T>(
    what: &str,
    limit: Duration,
    f: impl Future<Output = Result<T, etcd_client::Error>>,
) -> io::Result<T> {
    match tokio::time::timeout(limit, f).await {
        Ok(r) => r.map_err(|e| etcd_err(what, e)),
        Err(_) => Err(io::Error::other(format!("{what}: no answer in {limit:?}"))),
    }
}

/// `--s14-candidate etcd ADDR NAME PROPOSAL TTL_S`: grants a lease of
/// TTL_S, keeps it alive every TTL/3 (its own task, from the start: a
/// waiting candidate's key lives on the lease too), campaigns (`Campaign`
/// answers once this candidate leads), prints `leading`. On SIGTERM it
/// resigns (`Resign`). A lease whose keep-alives fail for TTL (as clientv3's
/// session sees it) or that the server reports gone (TTL 0) ends its
/// leadership: `lost`, exit 75. `etcd-client` is async: one current-thread
/// runtime runs the campaign, the keep-alive task and the 5 ms checks.
fn etcd_candidate(args: &[String]) -> io::Result<i32> {
    let [addr, name, proposal, ttl] = args else {
        return Err(io::Error::other("etcd ADDR NAME PROPOSAL TTL_S"));
    };
    let ttl: u64 = ttl.parse().map_err(|_| io::Error::other("TTL_S"))?;
    catch_sigterm();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(etcd_elect(addr, name, proposal, ttl))
}

/// The etcd candidate proper, on its runtime.
async fn etcd_elect(addr: &str, name: &str, proposal: &str, ttl: u64) -> io::Result<i32> {
    // Each request but the campaign is bounded by the TTL.
    let short = Duration::from_secs(ttl.max(1));
    let mut client = crate::etcd::connect(addr).await?;
    let grant = within("lease grant", short, client.lease_grant(ttl as i64, None)).await?;
    let lease = grant.id();
    let started = Instant::now();
    // Milliseconds since `started` of the last keep-alive sent that the
    // server answered with a live lease; u64::MAX: the lease is gone.
    let last_ok = Arc::new(AtomicU64::new(0));
    tokio::spawn(keep_alive(
        client.clone(),
        lease,
        ttl,
        started,
        last_ok.clone(),
    ));
    let mut won = client
        .campaign(name, proposal, lease)
        .await
        .map_err(|e| etcd_err("campaign", e))?;
    let leader = won
        .take_leader()
        .ok_or_else(|| io::Error::other("campaign: answered no leader key"))?;
    say(&format!("leading {proposal} at {}", unix_ms()));
    loop {
        if TERM.load(Ordering::SeqCst) {
            let resign = client.resign(Some(ResignOptions::new().with_leader(leader)));
            within("resign", short, resign).await?;
            eprintln!("resigned at {}", unix_ms());
            return Ok(0);
        }
        let ok = last_ok.load(Ordering::SeqCst);
        let now = started.elapsed().as_millis() as u64;
        if ok == u64::MAX || now > ok + ttl * 1000 {
            eprintln!(
                "lost at {} ({})",
                unix_ms(),
                if ok == u64::MAX {
                    "lease gone"
                } else {
                    "no keep-alive answered for the TTL"
                }
            );
            return Ok(75);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The keep-alive loop: a keep-alive every TTL/3 from the last one sent,
/// each bounded by the TTL, over one `LeaseKeepAlive` stream. A stream
/// that fails or leaves a keep-alive unanswered is dropped (a late answer
/// on it would be taken for the next one's) and the next round opens a new
/// one, as clientv3 does.
async fn keep_alive(
    mut client: Client,
    lease: i64,
    ttl: u64,
    started: Instant,
    last_ok: Arc<AtomicU64>,
) {
    let short = Duration::from_secs(ttl.max(1));
    let period = Duration::from_millis(ttl * 1000 / 3);
    let mut stream = None;
    loop {
        let sent = started.elapsed().as_millis() as u64;
        match tokio::time::timeout(short, keep_alive_once(&mut client, lease, &mut stream)).await {
            Ok(Ok(true)) => {
                last_ok.fetch_max(sent, Ordering::SeqCst);
            }
            Ok(Ok(false)) => {
                last_ok.store(u64::MAX, Ordering::SeqCst);
                return;
            }
            Ok(Err(_)) | Err(_) => stream = None,
        }
        let spent = Duration::from_millis(started.elapsed().as_millis() as u64 - sent);
        tokio::time::sleep(period.saturating_sub(spent)).await;
    }
}

/// One keep-alive on `stream` (opened first if there is none): true if
/// the server answered that the lease lives, false if it answered TTL 0.
async fn keep_alive_once(
    client: &mut Client,
    lease: i64,
    stream: &mut Option<(LeaseKeeper, LeaseKeepAliveStream)>,
) -> Result<bool, etcd_client::Error> {
    if let Some((keeper, answers)) = stream {
        keeper.keep_alive().await?;
        return match answers.message().await? {
            Some(r) => Ok(r.ttl() > 0),
            None => Err(etcd_client::Error::LeaseKeepAliveError(
                "stream ended".into(),
            )),
        };
    }
    // Opening sends the first keep-alive and reads its answer; a TTL of 0
    // comes back as this error (the only one `LeaseKeepAliveError` can be
    // here: the request channel is fresh).
    match client.lease_keep_alive(lease).await {
        Ok(opened) => {
            *stream = Some(opened);
            Ok(true)
        }
        Err(etcd_client::Error::LeaseKeepAliveError(_)) => Ok(false),
        Err(e) => Err(e),
    }
}

// ------------------------------------------------------ client-go, on Redis

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
fn k8s_candidate(args: &[String]) -> io::Result<i32> {
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
