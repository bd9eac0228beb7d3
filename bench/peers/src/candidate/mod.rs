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
//!
//! Offers: [`main`]. The parts: `process` (what each of these processes
//! shares: SIGTERM caught, its lines, the clock), `etcd_lease` (the etcd
//! candidate) and `k8s_lease` (client-go's elector on a Redis record).

mod etcd_lease;
mod k8s_lease;
mod process;

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use self::etcd_lease::etcd_candidate;
use self::k8s_lease::k8s_candidate;
use self::process::{say, unix_ms};

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
