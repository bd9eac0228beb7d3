//! `redis-lock leader`: who leads an election (`ELECT.LEADER`), and with `--watch` every
//! change after it (`ELECT.OBSERVE` from the term last seen, again on a new connection when
//! the server stops serving).

use std::thread;
use std::time::Duration;

use redis_lock_client::proto::{self, Leader, Wait};
use serde_json::json;

use crate::args::LeaderArgs;
use crate::conn::{self, Conn};
use crate::exit::{self, Failure};
use crate::words;

/// One line for a leader: `CANDIDATE TERM [VALUE]`, `(none)`; or its JSON object.
pub fn leader_line(leader: Option<&Leader>, json: bool) -> String {
    let leading = leader.filter(|l| l.candidate.is_some() && l.term != 0);
    if json {
        let v = match leading {
            Some(l) => json!({
                "candidate": l.candidate,
                "term": l.term,
                "value": l.value,
                "ttl_ms": l.ttl,
            }),
            None => json!({"candidate": null, "term": 0, "value": null, "ttl_ms": -1}),
        };
        return v.to_string();
    }
    match leading {
        Some(l) => {
            let mut line = format!("{} {}", l.candidate.as_deref().unwrap_or_default(), l.term);
            if let Some(v) = &l.value {
                line.push(' ');
                line.push_str(v);
            }
            line
        }
        None => "(none)".into(),
    }
}

fn read_leader(
    conn: &mut Conn,
    args: &[String],
    patience: Option<Duration>,
) -> Result<Option<Leader>, Failure> {
    let v = conn
        .call_waiting(args, patience)
        .map_err(|e| words::command_failure(conn.info(), args, &e))?;
    proto::leader(&v).map_err(|_| {
        Failure::Server(format!(
            "{} answered {} with something other than a leader",
            conn::describe(conn.info()),
            args[0]
        ))
    })
}

pub fn leader(url: &str, args: LeaderArgs) -> Result<u8, Failure> {
    let target = conn::target(url).map_err(Failure::Usage)?;
    let mut conn = Conn::connect(&target).map_err(|e| words::connect_failure(&target, &e))?;
    let now = read_leader(
        &mut conn,
        &proto::elect_leader(&args.name),
        Some(conn::REPLY_TIMEOUT),
    )?;
    println!("{}", leader_line(now.as_ref(), args.json));
    if !args.watch {
        return Ok(if now.is_some() { 0 } else { exit::CONFLICT });
    }
    let mut term = now.map_or(0, |l| l.term);
    let mut broken = false;
    loop {
        let cmd = proto::elect_observe(&args.name, term, Wait::Forever);
        let e = match conn.call_waiting(&cmd, None) {
            Ok(v) => {
                broken = false;
                match proto::leader(&v) {
                    Ok(Some(l)) => {
                        println!("{}", leader_line(Some(&l), args.json));
                        term = l.term;
                    }
                    Ok(None) => {}
                    Err(_) => {
                        return Err(Failure::Server(format!(
                            "{} answered ELECT.OBSERVE with something other than a leader",
                            conn::describe(conn.info())
                        )))
                    }
                }
                continue;
            }
            Err(e) => e,
        };
        // Gone, or not serving now (a master that became a replica answers UNBLOCKED,
        // loading, cluster down): again, on a new connection.
        let again = exit::is_unusable(&e)
            || matches!(
                e.code(),
                Some("UNBLOCKED" | "LOADING" | "MASTERDOWN" | "CLUSTERDOWN" | "TRYAGAIN" | "BUSY")
            );
        if !again {
            return Err(words::command_failure(conn.info(), &cmd, &e));
        }
        if !broken {
            eprintln!(
                "redis-lock: {}: trying again",
                words::reason(conn.info(), &cmd, &e)
            );
            broken = true;
        }
        thread::sleep(conn::RECONNECT_DELAY);
        if let Ok(c) = Conn::connect(&target) {
            conn = c;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leader_lines() {
        let l = Leader {
            candidate: Some("node a".into()),
            term: 42,
            value: Some("10.0.0.5:80".into()),
            ttl: 900,
        };
        assert_eq!(leader_line(Some(&l), false), "node a 42 10.0.0.5:80");
        assert_eq!(
            leader_line(Some(&l), true),
            r#"{"candidate":"node a","term":42,"value":"10.0.0.5:80","ttl_ms":900}"#
        );
        let bare = Leader {
            value: None,
            ..l.clone()
        };
        assert_eq!(leader_line(Some(&bare), false), "node a 42");
        let nobody = Leader {
            candidate: None,
            term: 0,
            value: None,
            ttl: -1,
        };
        for n in [None, Some(&nobody)] {
            assert_eq!(leader_line(n, false), "(none)");
            assert_eq!(
                leader_line(n, true),
                r#"{"candidate":null,"term":0,"value":null,"ttl_ms":-1}"#
            );
        }
    }
}
