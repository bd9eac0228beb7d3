//! `--compare-models`: the same workloads driven by (a) tokio tasks on one
//! current_thread runtime and (b) one blocking OS thread per client, both on
//! the generator's core, to choose the client model.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::load::{ping_rate, run_load, Proto};
use crate::report::{ms, rate};
use redis::ConnectionLike;

use crate::conn::{self, command, Reply};
use crate::server::{CpuMeter, Server};
use crate::stats::{self, Lat, Rng};
use crate::{Ctx, Opts};

struct Row {
    what: String,
    model: &'static str,
    rate: f64,
    p99: f64,
    server_cpu: f64,
    generator_cpu: f64,
    others_cpu: f64,
}

fn ping_thread(addr: &str, warmup: Duration, measure: Duration) -> io::Result<f64> {
    let mut c = conn::blocking(addr, Duration::from_secs(30))?;
    let ping = command(&[b"PING"]);
    let end_warm = Instant::now() + warmup;
    while Instant::now() < end_warm {
        c.req_packed_command(&ping).map_err(io::Error::other)?;
    }
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < measure {
        c.req_packed_command(&ping).map_err(io::Error::other)?;
        n += 1;
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}

/// `clients` threads, each looping acquire/release on random keys of `keys`
/// (`module` = LOCK.ACQUIRE BLOCK / LOCK.RELEASE, else SET NX PX / DEL).
fn threads_load(
    addr: &str,
    server_pid: Option<u32>,
    clients: usize,
    keys: usize,
    module: bool,
    warmup: Duration,
    measure: Duration,
) -> io::Result<Row> {
    let measuring = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let holders: Arc<Vec<AtomicU32>> = Arc::new((0..keys).map(|_| AtomicU32::new(0)).collect());
    let hist = Arc::new(Mutex::new(stats::histogram()));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut handles = Vec::new();
    for id in 0..clients {
        let mut conn = conn::blocking(addr, Duration::from_secs(30))?;
        let (measuring, stop, count, holders, hist, failures) = (
            measuring.clone(),
            stop.clone(),
            count.clone(),
            holders.clone(),
            hist.clone(),
            failures.clone(),
        );
        handles.push(thread::spawn(move || {
            let mut rng = Rng::new(id as u64);
            let owner = format!("t{id}");
            let mut local = stats::histogram();
            let result: io::Result<()> = (|| {
                while !stop.load(Ordering::Relaxed) {
                    let k = if keys == 1 { 0 } else { rng.below(keys) };
                    let key = format!("cmp:{k}");
                    let acq = if module {
                        command(&[
                            b"LOCK.ACQUIRE",
                            key.as_bytes(),
                            owner.as_bytes(),
                            b"PX",
                            b"30000",
                            b"BLOCK",
                            b"10000",
                        ])
                    } else {
                        command(&[
                            b"SET",
                            key.as_bytes(),
                            owner.as_bytes(),
                            b"NX",
                            b"PX",
                            b"30000",
                        ])
                    };
                    let t0 = Instant::now();
                    loop {
                        let r = conn.req_packed_command(&acq).map_err(io::Error::other)?;
                        match r {
                            Reply::Int(1) if module => break,
                            Reply::Okay if !module => break,
                            Reply::Nil => continue,
                            other => return Err(io::Error::other(format!("acquire: {other:?}"))),
                        }
                    }
                    if holders[k].swap(id as u32 + 1, Ordering::SeqCst) != 0 {
                        return Err(io::Error::other(format!(
                            "{key}: mutual exclusion violated"
                        )));
                    }
                    if measuring.load(Ordering::Relaxed) {
                        count.fetch_add(1, Ordering::Relaxed);
                        stats::record(&mut local, t0.elapsed().as_micros() as u64);
                    }
                    holders[k].store(0, Ordering::SeqCst);
                    let rel = if module {
                        command(&[b"LOCK.RELEASE", key.as_bytes(), owner.as_bytes()])
                    } else {
                        command(&[b"DEL", key.as_bytes()])
                    };
                    let want = if module { 0 } else { 1 };
                    let r = conn.req_packed_command(&rel).map_err(io::Error::other)?;
                    if r != Reply::Int(want) {
                        return Err(io::Error::other(format!("release: {r:?}")));
                    }
                }
                Ok(())
            })();
            if let Err(e) = result {
                if let Ok(mut f) = failures.lock() {
                    f.push(e.to_string());
                }
            }
            if let Ok(mut h) = hist.lock() {
                let _ = h.add(&local);
            }
        }));
    }
    thread::sleep(warmup);
    let cpu = CpuMeter::start(server_pid);
    let start = Instant::now();
    measuring.store(true, Ordering::SeqCst);
    thread::sleep(measure);
    measuring.store(false, Ordering::SeqCst);
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = cpu.stop();
    stop.store(true, Ordering::SeqCst);
    for h in handles {
        let _ = h.join();
    }
    if let Ok(f) = failures.lock() {
        if let Some(e) = f.first() {
            return Err(io::Error::other(format!("thread client: {e}")));
        }
    }
    let p99 = hist.lock().map(|h| Lat::of(&h).p99).unwrap_or(f64::NAN);
    Ok(Row {
        what: String::new(),
        model: "threads",
        rate: count.load(Ordering::SeqCst) as f64 / elapsed,
        p99,
        server_cpu: cpu.server,
        generator_cpu: cpu.generator,
        others_cpu: cpu.others,
    })
}

pub async fn run(opts: &Opts) -> io::Result<()> {
    let started = Instant::now();
    let ctx = Ctx::new(opts, "compare", started).await?;
    let _keep: &Server = &ctx.server;
    let (w, m) = (opts.warmup, opts.measure);
    let mut rows: Vec<Row> = Vec::new();
    for rep in 0..opts.reps(3) {
        eprintln!("rep {}", rep + 1);
        let cpu = CpuMeter::start(ctx.server_pid);
        let p = ping_rate(&ctx.addr, w, m).await?;
        let c = cpu.stop();
        rows.push(Row {
            what: "ping, 1 client".into(),
            model: "tokio",
            rate: p,
            p99: f64::NAN,
            server_cpu: c.server,
            generator_cpu: c.generator,
            others_cpu: c.others,
        });
        let cpu = CpuMeter::start(ctx.server_pid);
        let p = ping_thread(&ctx.addr, w, m)?;
        let c = cpu.stop();
        rows.push(Row {
            what: "ping, 1 client".into(),
            model: "threads",
            rate: p,
            p99: f64::NAN,
            server_cpu: c.server,
            generator_cpu: c.generator,
            others_cpu: c.others,
        });
        for (what, proto, clients, keys) in [
            (
                "raw SET NX/DEL, 64 clients, 100k keys",
                Proto::Raw,
                64,
                100_000,
            ),
            ("module, 64 clients, 1 hot key", Proto::Module, 64, 1),
            ("module, 256 clients, 1 hot key", Proto::Module, 256, 1),
            ("module, 64 clients, 100k keys", Proto::Module, 64, 100_000),
        ] {
            let spec = ctx.spec(proto, clients, keys);
            let r = run_load(&ctx.addr, ctx.server_pid, &spec, &ctx.scripts).await?;
            if !r.errors.is_empty() || !r.violations.is_empty() {
                return Err(io::Error::other(format!(
                    "{what}: {:?} {:?}",
                    r.errors, r.violations
                )));
            }
            rows.push(Row {
                what: what.into(),
                model: "tokio",
                rate: r.rate,
                p99: r.lat.p99,
                server_cpu: r.server_cpu,
                generator_cpu: r.generator_cpu,
                others_cpu: r.others_cpu,
            });
            let mut t = threads_load(
                &ctx.addr,
                ctx.server_pid,
                clients,
                keys,
                proto == Proto::Module,
                w,
                m,
            )?;
            t.what = what.into();
            rows.push(t);
        }
    }
    println!(
        "client models, {} reps of {:.1} s (median):",
        opts.reps(3),
        m.as_secs_f64()
    );
    println!(
        "{:<42} {:<8} {:>10} {:>9} {:>8} {:>8} {:>8}",
        "workload", "model", "ops/s", "p99 ms", "srv cpu", "gen cpu", "others"
    );
    let mut seen: Vec<(String, &str)> = Vec::new();
    for r in &rows {
        if seen.iter().any(|(w, m)| *w == r.what && *m == r.model) {
            continue;
        }
        seen.push((r.what.clone(), r.model));
        let same: Vec<&Row> = rows
            .iter()
            .filter(|x| x.what == r.what && x.model == r.model)
            .collect();
        let med =
            |f: fn(&Row) -> f64| stats::median(&same.iter().map(|x| f(x)).collect::<Vec<_>>());
        println!(
            "{:<42} {:<8} {:>10} {:>9} {:>7.0}% {:>7.0}% {:>7.0}%",
            r.what,
            r.model,
            rate(med(|x| x.rate)),
            ms(med(|x| x.p99)),
            med(|x| x.server_cpu),
            med(|x| x.generator_cpu),
            med(|x| x.others_cpu)
        );
    }
    Ok(())
}
