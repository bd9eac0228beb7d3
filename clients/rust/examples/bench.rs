//! Benchmark of the library against the same commands sent bare through the `redis` crate,
//! and against Redisson's lock protocol (its acquire script, pub/sub wait, release script),
//! on a redis-server with the module that it starts itself. See bench.sh.
//!
//! Env: REDIS_SERVER (default redis-server), LOCK_MODULE (the module, release build),
//! BENCH_SECONDS (per measurement, default 3), BENCH_OUT (or `--out FILE`): where the
//! markdown table is saved as well.

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ProtocolVersion, PushKind, Value};
use redis_lock_client::{Options, Session, Wait};
use tokio::sync::Semaphore;

/// Redisson's RLock acquire (the repo's scripts/redisson-acquire.lua, as bench/ runs it).
const REDISSON_ACQUIRE: &str = include_str!("../../../scripts/redisson-acquire.lua");
/// Redisson's RLock release (scripts/redisson-release.lua).
const REDISSON_RELEASE: &str = include_str!("../../../scripts/redisson-release.lua");
const LEASE_MS: u64 = 30_000;

struct Server(Child, u16);

impl Server {
    fn start() -> Server {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let binary = std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        let module = std::env::var("LOCK_MODULE").expect("LOCK_MODULE: the module to load");
        let child = Command::new(&binary)
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
            ])
            .args(["--appendonly", "no", "--loadmodule", &module])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the server");
        let server = Server(child, port);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "{binary} did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.1)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[derive(Default)]
struct Stats {
    count: AtomicU64,
    waits: Mutex<Vec<u64>>,
}

struct Row {
    what: String,
    rate: f64,
    p50: f64,
    p99: f64,
}

fn row(what: &str, stats: &Stats, elapsed: Duration) -> Row {
    let mut w = stats.waits.lock().unwrap();
    w.sort_unstable();
    let pct = |p: f64| {
        if w.is_empty() {
            0.0
        } else {
            w[((w.len() - 1) as f64 * p) as usize] as f64 / 1000.0
        }
    };
    Row {
        what: what.into(),
        rate: stats.count.load(Ordering::Relaxed) as f64 / elapsed.as_secs_f64(),
        p50: pct(0.5),
        p99: pct(0.99),
    }
}

fn args(a: &[&str]) -> redis::Cmd {
    let mut c = redis::Cmd::new();
    for x in a {
        c.arg(*x);
    }
    c
}

async fn conn(client: &redis::Client) -> MultiplexedConnection {
    client
        .get_multiplexed_async_connection_with_config(
            &AsyncConnectionConfig::new().set_response_timeout(None),
        )
        .await
        .expect("connect")
}

/// Runs `clients` loops of `cycle` for `secs` after a warm-up; counts cycles and records
/// each acquire's wait (µs) while measuring.
async fn measure<F, Fut>(what: &str, clients: usize, secs: Duration, cycle: F) -> Row
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Duration> + Send,
{
    let stats = Arc::new(Stats::default());
    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let cycle = Arc::new(cycle);
    let mut tasks = Vec::new();
    for id in 0..clients {
        let (stats, measuring, stop, cycle) = (
            stats.clone(),
            measuring.clone(),
            stop.clone(),
            cycle.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut local = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let wait = cycle(id).await;
                if measuring.load(Ordering::Relaxed) {
                    stats.count.fetch_add(1, Ordering::Relaxed);
                    local.push(wait.as_micros() as u64);
                }
            }
            stats.waits.lock().unwrap().extend(local);
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    measuring.store(true, Ordering::Relaxed);
    let t0 = Instant::now();
    tokio::time::sleep(secs).await;
    measuring.store(false, Ordering::Relaxed);
    let elapsed = t0.elapsed();
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("client task");
    }
    let r = row(what, &stats, elapsed);
    eprintln!(
        "{}: {:.0}/s p50 {:.3} ms p99 {:.3} ms",
        r.what, r.rate, r.p50, r.p99
    );
    r
}

async fn library(
    session: &Arc<Session>,
    what: &str,
    key: &str,
    clients: usize,
    secs: Duration,
) -> Row {
    let (s, key) = (session.clone(), key.to_string());
    measure(what, clients, secs, move |_| {
        let (s, key) = (s.clone(), key.clone());
        async move {
            let t = Instant::now();
            let hold = s
                .lock(key)
                .acquire(Wait::For(Duration::from_secs(30)))
                .await
                .expect("acquire");
            let waited = t.elapsed();
            hold.release().await.expect("release");
            waited
        }
    })
    .await
}

/// The library's commands, bare: `LOCK.ACQUIRE k o PX 30000 BLOCK 30000 FENCE SESSION t`
/// and `LOCK.RELEASE k o`, each client on a connection of its own (a `BLOCK` holds it).
async fn bare(
    client: &redis::Client,
    what: &str,
    key: &str,
    clients: usize,
    secs: Duration,
) -> Row {
    // A session connection named `bench`, as the library's.
    let mut named = conn(client).await;
    let _: () = args(&["LOCK.SESSION", "bench"])
        .query_async(&mut named)
        .await
        .expect("LOCK.SESSION");
    let mut cons = Vec::new();
    for _ in 0..clients {
        cons.push(Arc::new(tokio::sync::Mutex::new(conn(client).await)));
    }
    let cons = Arc::new(cons);
    let key = key.to_string();
    let r = measure(what, clients, secs, move |id| {
        let (cons, key) = (cons.clone(), key.clone());
        async move {
            let mut c = cons[id].lock().await;
            let owner = format!("bench:{id}");
            let t = Instant::now();
            let v: Value = args(&[
                "LOCK.ACQUIRE",
                &key,
                &owner,
                "PX",
                "30000",
                "BLOCK",
                "30000",
                "FENCE",
                "SESSION",
                "bench",
            ])
            .query_async(&mut *c)
            .await
            .expect("acquire");
            assert!(matches!(v, Value::Int(_)), "{v:?}");
            let waited = t.elapsed();
            let _: i64 = args(&["LOCK.RELEASE", &key, &owner])
                .query_async(&mut *c)
                .await
                .expect("release");
            waited
        }
    })
    .await;
    drop(named);
    r
}

/// Redisson's protocol: the acquire script (nil: acquired; else the lock's PTTL); a busy
/// lock is waited for on `redisson_lock__channel:{key}` (one subscription for the process,
/// each message lets one waiter try again, as Redisson's semaphore does) or for the PTTL;
/// the release script publishes on the channel.
async fn redisson(
    client: &redis::Client,
    what: &str,
    key: &str,
    clients: usize,
    secs: Duration,
) -> Row {
    let mut c = conn(client).await;
    let acquire = redis::Script::new(REDISSON_ACQUIRE);
    let release = redis::Script::new(REDISSON_RELEASE);
    acquire
        .prepare_invoke()
        .load_async(&mut c)
        .await
        .expect("load");
    release
        .prepare_invoke()
        .load_async(&mut c)
        .await
        .expect("load");
    let channel = format!("redisson_lock__channel:{{{key}}}");
    let permits = Arc::new(Semaphore::new(0));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let info = client.get_connection_info().clone();
    let info = info.clone().set_redis_settings(
        info.redis_settings()
            .clone()
            .set_protocol(ProtocolVersion::RESP3),
    );
    let mut sub = redis::Client::open(info)
        .unwrap()
        .get_multiplexed_async_connection_with_config(
            &AsyncConnectionConfig::new().set_push_sender(tx),
        )
        .await
        .expect("subscriber");
    sub.subscribe(&channel).await.expect("subscribe");
    let p = permits.clone();
    let listener = tokio::spawn(async move {
        while let Some(m) = rx.recv().await {
            if m.kind == PushKind::Message {
                p.add_permits(1);
            }
        }
    });
    let shared = Arc::new((c, acquire, release, key.to_string(), channel));
    let r = measure(what, clients, secs, move |id| {
        let (shared, permits) = (shared.clone(), permits.clone());
        async move {
            let (c, acquire, release, key, channel) = &*shared;
            let mut c = c.clone();
            let owner = format!("uuid-bench:{id}");
            let t = Instant::now();
            loop {
                let ttl: Option<i64> = acquire
                    .key(key)
                    .arg(LEASE_MS)
                    .arg(&owner)
                    .invoke_async(&mut c)
                    .await
                    .expect("acquire");
                let Some(ttl) = ttl else { break };
                let wait = Duration::from_millis(ttl.max(1) as u64);
                if let Ok(Ok(p)) = tokio::time::timeout(wait, permits.acquire()).await {
                    p.forget();
                }
            }
            let waited = t.elapsed();
            let _: Option<i64> = release
                .key(key)
                .key(channel)
                .arg(0)
                .arg(LEASE_MS)
                .arg(&owner)
                .invoke_async(&mut c)
                .await
                .expect("release");
            waited
        }
    })
    .await;
    listener.abort();
    r
}

/// Rounds of one measurement: mean rate, median of the rounds' percentiles.
fn merge(mut rows: Vec<Row>) -> Row {
    let n = rows.len() as f64;
    let rate = rows.iter().map(|r| r.rate).sum::<f64>() / n;
    rows.sort_by(|x, y| x.p50.total_cmp(&y.p50));
    let p50 = rows[rows.len() / 2].p50;
    rows.sort_by(|x, y| x.p99.total_cmp(&y.p99));
    let p99 = rows[rows.len() / 2].p99;
    Row {
        what: rows[0].what.clone(),
        rate,
        p50,
        p99,
    }
}

fn table(title: &str, rows: &[Row], waits: bool) -> String {
    let mut s = format!("\n### {title}\n\n");
    if waits {
        s.push_str("| what | acquisitions/s | p50 wait ms | p99 wait ms |\n|---|---:|---:|---:|\n");
        for r in rows {
            s.push_str(&format!(
                "| {} | {:.0} | {:.3} | {:.3} |\n",
                r.what, r.rate, r.p50, r.p99
            ));
        }
    } else {
        s.push_str("| what | cycles/s | p50 acquire ms | p99 acquire ms |\n|---|---:|---:|---:|\n");
        for r in rows {
            s.push_str(&format!(
                "| {} | {:.0} | {:.3} | {:.3} |\n",
                r.what, r.rate, r.p50, r.p99
            ));
        }
    }
    s
}

fn main() {
    let mut out = std::env::var("BENCH_OUT").ok();
    let mut argv = std::env::args().skip(1);
    while let Some(a) = argv.next() {
        if a == "--out" {
            out = argv.next();
        }
    }
    let secs = Duration::from_secs(
        std::env::var("BENCH_SECONDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(3),
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let server = Server::start();
    let report = rt.block_on(async {
        let client = redis::Client::open(server.url()).unwrap();
        let session = Arc::new(
            Session::open_with(&client, Options::default().lease(Duration::from_millis(LEASE_MS)))
                .await
                .expect("session"),
        );
        // Library and bare alternate in rounds, so that a machine busy with something else
        // for a while weighs on both.
        let rounds = 3;
        let part = secs / rounds;
        let mut a = vec![Vec::new(), Vec::new()];
        let mut b = vec![Vec::new(), Vec::new()];
        for _ in 0..rounds {
            a[0].push(library(&session, "library (acquire Wait::For + release)", "u1", 1, part).await);
            a[1].push(bare(&client, "bare LOCK.ACQUIRE ... BLOCK FENCE SESSION + LOCK.RELEASE", "u2", 1, part).await);
        }
        for _ in 0..rounds {
            b[0].push(library(&session, "library, 16 tasks", "hot1", 16, part).await);
            b[1].push(bare(&client, "bare commands, 16 connections", "hot2", 16, part).await);
        }
        let a: Vec<Row> = a.into_iter().map(merge).collect();
        let b: Vec<Row> = b.into_iter().map(merge).collect();
        let mut c = Vec::new();
        for n in [1, 16, 64] {
            c.push(library(&session, &format!("library, {n} clients"), &format!("cmp{n}"), n, secs).await);
            c.push(redisson(&client, &format!("Redisson protocol, {n} clients"), &format!("rcmp{n}"), n, secs).await);
        }
        let ratio = |rows: &[Row]| rows[0].rate / rows[1].rate;
        let mut s = String::from("## redis-lock-client benchmark\n");
        s.push_str(&format!(
            "\nServer: {} with the module, one client process (tokio current_thread), {} s per row.\n",
            std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into()),
            secs.as_secs()
        ));
        s.push_str(&table("(a) uncontended acquire + release, one client", &a, false));
        s.push_str(&format!("\nlibrary / bare: {:.2}\n", ratio(&a)));
        s.push_str(&table("(b) one hot lock, 16 clients", &b, true));
        s.push_str(&format!("\nlibrary / bare: {:.2}\n", ratio(&b)));
        s.push_str(&table("(c) one hot lock: library vs Redisson's protocol", &c, true));
        if let Ok(s) = Arc::try_unwrap(session) {
            s.close().await;
        }
        s
    });
    println!("{report}");
    if let Some(path) = out {
        std::fs::write(&path, &report).expect("write --out");
    }
}
