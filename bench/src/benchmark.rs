//! S1b (server-bound acquire throughput) and S6 (no tax on the rest of Redis):
//! redis-benchmark, pinned to the generator's core, against our servers.

use std::io;
use std::process::{Command, Stdio};
use std::time::Instant;

use serde_json::{json, Value};

use crate::conn::{Conn, Reply};
use crate::report::{finite, rate, Bar, Section, INTERFERENCE_PCT, RETRIES};
use crate::server::{tie_to_parent, CpuMeter, CpuUse, Server};
use crate::stats::{median, paired_ratio, spread_pct};
use crate::{Ctx, Opts};

/// One redis-benchmark result: requests/s of its (first) test, and the CPU
/// use of the server, redis-benchmark and other processes meanwhile.
struct Measured {
    rps: f64,
    cpu: CpuUse,
}

/// `redis_benchmark`, measured again (up to RETRIES times) when other
/// processes were busy meanwhile; discarded runs go to the section.
fn benchmark_run(
    opts: &Opts,
    server: &Server,
    requests: u64,
    random: u64,
    tail: &[&str],
    section: &mut Section,
) -> io::Result<Measured> {
    let mut attempt = 0;
    loop {
        let meter = CpuMeter::start(server.pid());
        let rows = redis_benchmark(opts, server.port, requests, random, tail)?;
        let cpu = meter.stop();
        let m = Measured {
            rps: rows[0].1,
            cpu,
        };
        if cpu.others > INTERFERENCE_PCT && attempt < RETRIES {
            section
                .discarded
                .push(json!({"command": tail.join(" "), "ops_per_s": m.rps,
                "server_cpu_pct": cpu.server, "benchmark_cpu_pct": cpu.generator,
                "others_cpu_pct": cpu.others}));
            let waited = crate::server::wait_for_quiet(server.pid(), INTERFERENCE_PCT);
            eprintln!(
                "  redis-benchmark {}: other processes used {:.0}% of a core: waited {:.1} s for quiet, measuring again",
                tail.join(" "),
                cpu.others,
                waited.as_secs_f64()
            );
            attempt += 1;
            continue;
        }
        if cpu.others > INTERFERENCE_PCT {
            section.disturbed_kept += 1;
        }
        return Ok(m);
    }
}

/// Runs redis-benchmark with `-c 50 -P 16 -n N -r R --csv` and `tail` (either
/// `-t tests` or a custom command); returns (test name, requests/s).
fn redis_benchmark(
    opts: &Opts,
    port: u16,
    requests: u64,
    random: u64,
    tail: &[&str],
) -> io::Result<Vec<(String, f64)>> {
    let mut cmd = Command::new(&opts.redis_benchmark);
    cmd.args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(["-c", "50", "-P", "16"])
        .args(["-n", &requests.to_string()])
        .args(["-r", &random.to_string(), "--csv"])
        .args(tail)
        .stdin(Stdio::null());
    tie_to_parent(&mut cmd, opts.pinning.generator);
    let out = cmd
        .output()
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", opts.redis_benchmark)))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "redis-benchmark {} failed ({}): {}{}",
            tail.join(" "),
            out.status,
            stdout,
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    let mut rows = Vec::new();
    for line in stdout.lines() {
        let fields: Vec<&str> = line.trim().trim_matches('"').split("\",\"").collect();
        if fields.len() < 2 || fields[0] == "test" {
            continue;
        }
        if let Ok(rps) = fields[1].parse::<f64>() {
            rows.push((fields[0].to_string(), rps));
        }
    }
    if rows.is_empty() {
        return Err(io::Error::other(format!(
            "redis-benchmark {} printed no result: {stdout}",
            tail.join(" ")
        )));
    }
    Ok(rows)
}

async fn flushall(conn: &mut Conn) -> io::Result<()> {
    conn.ok(&["FLUSHALL", "SYNC"]).await?;
    Ok(())
}

async fn dbsize(conn: &mut Conn) -> io::Result<i64> {
    match conn.ok(&["DBSIZE"]).await? {
        Reply::Int(n) => Ok(n),
        other => Err(io::Error::other(format!("DBSIZE answered {other:?}"))),
    }
}

pub async fn s1b(ctx: &Ctx) -> io::Result<Section> {
    let opts = &ctx.opts;
    let n = opts.bench_requests;
    let reps = opts.reps(crate::options::REPS_S1B);
    let mut section = Section::new(
        "S1b",
        "server-bound acquires: redis-benchmark -c 50 -P 16, keys k:__rand_int__ of 10^9 (practically never repeating)",
    );
    let variants: Vec<(&str, Vec<String>)> = vec![
        (
            "module LOCK.ACQUIRE",
            ["LOCK.ACQUIRE", "k:__rand_int__", "o", "PX", "30000"]
                .map(String::from)
                .to_vec(),
        ),
        (
            "SET NX PX",
            ["SET", "k:__rand_int__", "o", "NX", "PX", "30000"]
                .map(String::from)
                .to_vec(),
        ),
        (
            "redisson acquire script",
            vec![
                "EVALSHA".into(),
                ctx.scripts.acquire.clone(),
                "1".into(),
                "k:__rand_int__".into(),
                "30000".into(),
                "o".into(),
            ],
        ),
        // The cost of a read hold's own lease key: a first read hold
        // writes the hash and that key, a first write hold the hash alone.
        (
            "module LOCK.WACQUIRE",
            ["LOCK.WACQUIRE", "k:__rand_int__", "o", "PX", "30000"]
                .map(String::from)
                .to_vec(),
        ),
        (
            "module LOCK.RACQUIRE",
            ["LOCK.RACQUIRE", "k:__rand_int__", "o", "PX", "30000"]
                .map(String::from)
                .to_vec(),
        ),
    ];
    let mut conn = Conn::connect(&ctx.addr).await?;
    let mut runs: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
    for _ in 0..reps {
        for (i, (name, args)) in variants.iter().enumerate() {
            flushall(&mut conn).await?;
            let tail: Vec<&str> = args.iter().map(String::as_str).collect();
            let m = benchmark_run(opts, &ctx.server, n, 1_000_000_000, &tail, &mut section)?;
            let rps = m.rps;
            // redis-benchmark does not look at replies: every command must
            // have created its key.
            let keys = dbsize(&mut conn).await?;
            if (keys as f64) < 0.99 * n as f64 {
                section.errors.push(format!(
                    "{name}: only {keys} keys after {n} commands (error replies?)"
                ));
            }
            ctx.progress(&format!(
                "S1b {name}: {}/s (server {:.0}%, redis-benchmark {:.0}%, others {:.0}%)",
                rate(rps),
                m.cpu.server,
                m.cpu.generator,
                m.cpu.others
            ));
            runs[i].push(rps);
        }
    }
    flushall(&mut conn).await?;
    let med: Vec<f64> = runs.iter().map(|r| median(r)).collect();
    section.line(format!(
        "each figure: median of {reps} redis-benchmark runs of {n} requests (FLUSHALL before each), variants interleaved; ratios = median of the ratios within each repetition"
    ));
    for (i, (name, _)) in variants.iter().enumerate() {
        section.line(format!(
            "{:<26} {:>11} ops/s  spread {:>3.0}%  runs: {}",
            name,
            rate(med[i]),
            spread_pct(&runs[i]),
            runs[i]
                .iter()
                .map(|r| rate(*r))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    section.bars.push(Bar::paired(
        "module acquires/s vs SET NX PX",
        &runs[0],
        &runs[1],
        0.8,
    ));
    section.bars.push(Bar::paired(
        "module acquires/s vs redisson acquire script",
        &runs[0],
        &runs[2],
        2.0,
    ));
    section.line(format!(
        "a read hold's lease key: LOCK.RACQUIRE (hash + lease key) at {:.2}x the rate of LOCK.WACQUIRE (hash only)",
        paired_ratio(&runs[4], &runs[3])
    ));
    section.json = json!({
        "requests": n, "reps": reps, "clients": 50, "pipeline": 16,
        "variants": variants.iter().enumerate().map(|(i, (name, args))| json!({
            "name": name, "command": args.join(" "), "median_ops_per_s": finite(med[i]), "runs": runs[i],
        })).collect::<Vec<Value>>(),
    });
    Ok(section)
}

pub async fn s6(opts: &Opts, started: Instant) -> io::Result<Section> {
    let mut section = Section::new(
        "S6",
        "no tax on the rest of Redis: redis-benchmark -c 50 -P 16 -r 1000000, module loaded (no locks in use) vs not loaded",
    );
    let with = crate::server::start(&Ctx::server_spec(opts, true), "s6-module")?;
    let without = crate::server::start(&Ctx::server_spec(opts, false), "s6-plain")?;
    let tests: [(&str, &[&str]); 5] = [
        ("SET", &["-t", "set"]),
        ("GET", &["-t", "get"]),
        ("HSET", &["-t", "hset"]),
        ("LPUSH", &["-t", "lpush"]),
        (
            "SET k:__rand_int__ v PX 60000",
            &["SET", "k:__rand_int__", "v", "PX", "60000"],
        ),
    ];
    let reps = opts.reps(crate::options::REPS_S6);
    let n = opts.s6_requests;
    // runs[server][test]
    let mut runs = vec![vec![Vec::<f64>::new(); tests.len()]; 2];
    for rep in 0..reps {
        // Each repetition starts from empty keyspaces and runs the tests in
        // the same order on both servers (GET reads what SET wrote), the
        // servers taking turns test by test.
        for server in [&with, &without] {
            flushall(&mut Conn::connect(&server.addr()).await?).await?;
        }
        for (t, (name, tail)) in tests.iter().enumerate() {
            let order: [usize; 2] = if (rep + t) % 2 == 0 { [0, 1] } else { [1, 0] };
            for s in order {
                let server = if s == 0 { &with } else { &without };
                let m = benchmark_run(opts, server, n, 1_000_000, tail, &mut section)?;
                eprintln!(
                    "[{:>6.1}s] S6 {name} {}: {}/s (server {:.0}%, redis-benchmark {:.0}%, others {:.0}%)",
                    started.elapsed().as_secs_f64(),
                    if s == 0 { "with module" } else { "without module" },
                    rate(m.rps),
                    m.cpu.server,
                    m.cpu.generator,
                    m.cpu.others
                );
                runs[s][t].push(m.rps);
            }
        }
    }
    section.line(format!(
        "each figure: median of {reps} redis-benchmark runs of {n} requests per test; the servers take turns test by test (ABBA); ratio = median of the ratios within each repetition"
    ));
    section.line(format!(
        "{:<30} {:>12} {:>7} {:>12} {:>7} {:>7}",
        "test", "with module", "spread", "without", "spread", "ratio"
    ));
    let mut rows_json = Vec::new();
    for (t, (name, _)) in tests.iter().enumerate() {
        let a = median(&runs[0][t]);
        let b = median(&runs[1][t]);
        let bar = Bar::paired(
            format!("{name} with module vs without"),
            &runs[0][t],
            &runs[1][t],
            0.95,
        );
        section.line(format!(
            "{:<30} {:>12} {:>6.0}% {:>12} {:>6.0}% {:>6.3}x",
            name,
            rate(a),
            spread_pct(&runs[0][t]),
            rate(b),
            spread_pct(&runs[1][t]),
            bar.measured
        ));
        section.bars.push(bar);
        rows_json.push(
            json!({"test": name, "with_module": {"median": finite(a), "runs": runs[0][t]},
            "without_module": {"median": finite(b), "runs": runs[1][t]}}),
        );
    }
    section.json = json!({"requests": n, "clients": 50, "pipeline": 16,
        "random_keyspace": 1_000_000, "reps": reps, "tests": rows_json});
    Ok(section)
}
