//! What the generator reads of the server beside its clients: `INFO
//! commandstats` (µs per call of each command in a run) and one client's
//! sequential PINGs (S2's round-trip floor).

use std::io;
use std::time::{Duration, Instant};

use crate::conn::{unexpected, Conn, Reply, ReplyExt};

/// `INFO commandstats` as (command, calls, µs per call).
pub async fn commandstats(conn: &mut Conn) -> io::Result<Vec<(String, u64, f64)>> {
    let info = conn.ok(&["INFO", "commandstats"]).await?.text();
    let mut out = Vec::new();
    for line in info.lines() {
        let Some((name, rest)) = line
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        let field = |k: &str| {
            rest.split(',')
                .find_map(|kv| kv.strip_prefix(k))
                .and_then(|v| v.parse::<f64>().ok())
        };
        if let (Some(calls), Some(us)) = (field("calls="), field("usec_per_call=")) {
            out.push((name.to_string(), calls as u64, us));
        }
    }
    Ok(out)
}

/// Sequential PINGs from one client: replies per second in the window.
pub async fn ping_rate(addr: &str, warmup: Duration, measure: Duration) -> io::Result<f64> {
    let mut conn = Conn::connect(addr).await?;
    let ping = crate::conn::command(&[b"PING"]);
    let pong = Reply::SimpleString("PONG".into());
    let end_warm = Instant::now() + warmup;
    while Instant::now() < end_warm {
        let r = conn.raw(&ping).await?;
        if r != pong {
            return Err(unexpected("PING", &r));
        }
    }
    let start = Instant::now();
    let end = start + measure;
    let mut n = 0u64;
    loop {
        let r = conn.raw(&ping).await?;
        if r != pong {
            return Err(unexpected("PING", &r));
        }
        n += 1;
        if n.is_multiple_of(64) && Instant::now() >= end {
            break;
        }
    }
    Ok(n as f64 / start.elapsed().as_secs_f64())
}
