//! What the report says before its sections: the machine (cores, CPU,
//! kernel, load average), the server and module, the pinning, the runs'
//! repetitions and lengths, the command line, and the CPU probe of the
//! server's and the generator's cores.
//!
//! Offers: [`command_output`] (a binary's version line).

use std::fs;

use serde_json::json;

use crate::options::{
    Opts, REPS_S1, REPS_S10, REPS_S11, REPS_S12, REPS_S13, REPS_S15, REPS_S15_CYCLES, REPS_S16,
    REPS_S1B, REPS_S2, REPS_S3, REPS_S4_MEMORY, REPS_S4_RELEASE, REPS_S5, REPS_S6, REPS_S7,
    REPS_S8, REPS_S9,
};
use crate::{server, stats};

/// `YYYY-MM-DD HH:MM:SS UTC` for a unix time.
pub(crate) fn utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn first_line(path: &str, prefix: &str) -> Option<String> {
    fs::read_to_string(path).ok().and_then(|s| {
        s.lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
    })
}

/// The trimmed stdout of `cmd arg` (a version), or why it could not run.
pub fn command_output(cmd: &str, arg: &str) -> String {
    std::process::Command::new(cmd)
        .arg(arg)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|e| format!("({cmd}: {e})"))
}

fn command_line() -> String {
    std::env::args()
        .map(|a| {
            if a.is_empty() || a.contains(|c: char| c.is_whitespace() || c == '\'') {
                format!("'{}'", a.replace('\'', "'\\''"))
            } else {
                a
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

pub(crate) struct Header {
    pub(crate) text: String,
    pub(crate) json: serde_json::Value,
}

pub(crate) fn header(opts: &Opts, date: &str, load_before: &str) -> Header {
    let cores = server::online_cores();
    let cpu = first_line("/proc/cpuinfo", "model name").unwrap_or_else(|| "unknown".into());
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    let redis = command_output(&opts.redis_server, "--version");
    let text = format!(
        "lock-bench: the lock module vs Redisson (its client and its protocol), spin locks and raw SET NX\n\
         date:     {date}\n\
         command:  {}\n\
         machine:  {cores} cores, {cpu}, Linux {kernel}, load average at start {load_before}\n\
         server:   {redis}\n\
         module:   {}\n\
         pinning:  {}\n\
         runs:     every figure is the median of repeated runs (S1 {}, S1b {}, S2 {}, S3 {}, S4 {}/{}, S5 {}, S6 {}, S7 {}, S8 {}, S9 {}, S10 {}, S11 {}, S12 {}, S13 {}, S14 {}, S15 {}/{}, S16 {}; all runs in latest.json); \
         throughput runs {:.1} s measured after {:.1} s warm-up{}\n\
         clients:  one tokio current_thread runtime (one core), a task per client, RESP2 over TCP_NODELAY sockets (commands packed by the redis crate, replies parsed by redis-protocol);\n          \
         redisson-emu: Redisson's protocol simulated as processes of {} threads (one pub/sub connection per process); redisson: the real client in a JVM\n          \
         (interop/redisson's load driver); spin retries after 10 ms / 100 ms\n",
        command_line(),
        opts.module.display(),
        opts.pinning.describe(),
        opts.reps(REPS_S1),
        opts.reps(REPS_S1B),
        opts.reps(REPS_S2),
        opts.reps(REPS_S3),
        opts.reps(REPS_S4_MEMORY),
        opts.reps(REPS_S4_RELEASE),
        opts.reps(REPS_S5),
        opts.reps(REPS_S6),
        opts.reps(REPS_S7),
        opts.reps(REPS_S8),
        opts.reps(REPS_S9),
        opts.reps(REPS_S10),
        opts.reps(REPS_S11),
        opts.reps(REPS_S12),
        opts.reps(REPS_S13),
        match opts.reps_given {
            Some(n) => n.to_string(),
            None if opts.quick => "1 per fast cell".to_string(),
            None => "5 per cell, fewer for slow cells".to_string(),
        },
        opts.reps(REPS_S15),
        opts.reps(REPS_S15_CYCLES),
        opts.reps(REPS_S16),
        opts.measure.as_secs_f64(),
        opts.warmup.as_secs_f64(),
        if opts.quick { " (--quick)" } else { "" },
        opts.threads_per_process,
    );
    let json = json!({
        "date": date, "command": command_line(), "cores": cores, "cpu": cpu,
        "kernel": kernel, "redis_server": redis, "module": opts.module.display().to_string(),
        "pinning": opts.pinning.describe(), "reps_given": opts.reps_given,
        "measure_s": opts.measure.as_secs_f64(), "warmup_s": opts.warmup.as_secs_f64(),
        "quick": opts.quick, "threads_per_process": opts.threads_per_process,
        "load_average_at_start": load_before,
    });
    Header { text, json }
}

/// The CPU probe on the server's and the generator's cores, as text and JSON.
pub(crate) fn probe(opts: &Opts) -> (String, serde_json::Value) {
    let mut text = Vec::new();
    let mut js = serde_json::Map::new();
    for (name, core) in [
        ("server core", opts.pinning.server),
        ("generator core", opts.pinning.generator),
    ] {
        let v = server::cpu_probe(core, 8);
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(0.0, f64::max);
        text.push(format!(
            "{name} {:.0} ms median [{lo:.0} .. {hi:.0}]",
            stats::median(&v)
        ));
        js.insert(name.replace(' ', "_"), json!(v));
    }
    (
        format!(
            "same fixed work timed 8 times per core: {} (slowest/fastest shows the machine's own noise)",
            text.join(", ")
        ),
        serde_json::Value::Object(js),
    )
}

pub(crate) fn loadavg() -> String {
    fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}
