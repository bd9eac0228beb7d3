//! Benchmark of the library against the same commands sent bare through the `redis` crate,
//! and against Redisson itself (its Java client, through interop/redisson's load driver), on
//! a redis-server with the module that it starts itself. See bench.sh.
//!
//! Env: REDIS_SERVER (default redis-server), LOCK_MODULE (the module, release build),
//! BENCH_SECONDS (per measurement, default 3), BENCH_OUT (or `--out FILE`): where the
//! markdown table is saved as well.

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Value};
use redis_lock_client::{Options, Session, Wait};

const LEASE_MS: u64 = 30_000;

/// The server, with the module at `LOCK_MODULE` (the workspace's server harness).
fn start_server() -> lock_harness::Server {
    let module = std::env::var_os("LOCK_MODULE").expect("LOCK_MODULE: the module to load");
    let launch = lock_harness::Launch {
        module: Some((module.into(), Vec::new())),
        ..lock_harness::Launch::new(lock_harness::server_binary()).arg("appendonly", "no")
    };
    lock_harness::Server::start(launch, lock_harness::fresh_dir("lock-client-bench"))
        .unwrap_or_else(|e| panic!("{e}"))
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

/// Redisson itself, 4.7.0 in a JVM: `interop/redisson/load-driver.sh` (built with Maven at its
/// start, then one run per line on its stdin; see its `LoadDriver`), `RLock.lock(30 s)` /
/// `unlock()` on one hot lock from `clients` threads, in Redisson instances of 4 threads (each
/// its own id, connections and subscriptions, as a process has). None when it cannot run (no
/// Java or Maven): the row is left out.
struct Redisson {
    child: Child,
    stdin: std::process::ChildStdin,
    lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
    /// Its first run warms the JVM up longer (its JIT).
    warm: bool,
}

impl Redisson {
    fn start() -> Option<Redisson> {
        let script = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../interop/redisson/load-driver.sh"
        );
        let mut child = Command::new(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| eprintln!("Redisson rows left out: {script}: {e}"))
            .ok()?;
        let stdin = child.stdin.take()?;
        let stdout = child.stdout.take()?;
        Some(Redisson {
            child,
            stdin,
            lines: std::io::BufRead::lines(std::io::BufReader::new(stdout)),
            warm: false,
        })
    }

    fn hot_lock(
        &mut self,
        what: &str,
        port: u16,
        key: &str,
        clients: usize,
        secs: Duration,
    ) -> Option<Row> {
        use std::io::Write;
        let warmup_ms = if self.warm { 300 } else { 2000 };
        self.warm = true;
        writeln!(
            self.stdin,
            "hot-lock port={port} key={key} clients={clients} per-process=4 warmup-ms={warmup_ms} measure-ms={} lease-ms={LEASE_MS}",
            secs.as_millis()
        )
        .ok()?;
        self.stdin.flush().ok()?;
        for line in self.lines.by_ref() {
            let line = line.ok()?;
            if let Some(json) = line.strip_prefix("result ") {
                let v: serde_json::Value = serde_json::from_str(json).ok()?;
                let f = |path: &[&str]| {
                    path.iter()
                        .try_fold(&v, |v, k| v.get(k))
                        .and_then(|v| v.as_f64())
                };
                return Some(Row {
                    what: what.to_string(),
                    rate: f(&["rate_per_s"])?,
                    p50: f(&["wait_ms", "p50"])?,
                    p99: f(&["wait_ms", "p99"])?,
                });
            }
            if let Some(error) = line.strip_prefix("error ") {
                eprintln!("Redisson load driver: {error}");
                return None;
            }
        }
        eprintln!("the Redisson load driver exited");
        None
    }
}

impl Drop for Redisson {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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
    let server = start_server();
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
        let mut redisson = Redisson::start();
        for n in [1, 16, 64] {
            c.push(library(&session, &format!("library, {n} clients"), &format!("cmp{n}"), n, secs).await);
            if let Some(row) = redisson.as_mut().and_then(|r| {
                r.hot_lock(&format!("Redisson 4.7.0 (the Java client), {n} clients"), server.port, &format!("rcmp{n}"), n, secs)
            }) {
                c.push(row);
            }
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
        s.push_str(&table("(c) one hot lock: library vs Redisson", &c, true));
        s.push_str(
            "\nRedisson: its Java client, `RLock.lock(30 s)` / `unlock()`, in a JVM of its own \
             (interop/redisson/load-driver.sh), its threads in Redisson instances of 4 (each its own \
             id, connections and subscriptions, as a process has); each row after a warm-up (2 s for \
             the first: the JVM's JIT).\n",
        );
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
