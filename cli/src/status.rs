//! `redis-lock status`: holder, holds, lease left, token and queue of each
//! lock, as text or JSON (LOCK.INFO's fields, plus `queue` from
//! LOCK.WAITERS).

use serde_json::json;

use crate::commands;
use crate::conn::Conn;
use crate::duration::human_ms;
use crate::exit::Failure;
use crate::reply::{self, Fields};
use crate::words;

pub struct LockStatus {
    pub name: String,
    /// `LOCK.INFO`; `None` when the lock is free.
    pub info: Option<Fields>,
    /// `LOCK.WAITERS name COUNT 0`; `None` when the server has no such command.
    pub queue: Option<Vec<Fields>>,
}

pub fn fetch(conn: &mut Conn, names: &[String]) -> Result<Vec<LockStatus>, Failure> {
    let mut out = Vec::with_capacity(names.len());
    let mut waiters_supported = true;
    for name in names {
        let cmd = commands::info(name);
        let v = conn
            .call(&cmd)
            .map_err(|e| words::command_failure(conn.info(), &cmd, &e))?;
        let info = Fields::parse(&v);
        let queue = if waiters_supported {
            let cmd = commands::waiters(name);
            match conn.call(&cmd) {
                Ok(v) => Some(reply::entries(&v)),
                Err(e) if crate::exit::is_unusable(&e) => {
                    return Err(words::command_failure(conn.info(), &cmd, &e))
                }
                Err(_) => {
                    waiters_supported = false;
                    None
                }
            }
        } else {
            None
        };
        out.push(LockStatus {
            name: name.clone(),
            info,
            queue,
        });
    }
    Ok(out)
}

/// `{"name": {LOCK.INFO's fields..., "queue": [{LOCK.WAITERS entry}, ...]}}`;
/// a free lock has no LOCK.INFO fields.
pub fn json(locks: &[LockStatus]) -> serde_json::Value {
    let mut all = serde_json::Map::new();
    for l in locks {
        let mut obj = l.info.as_ref().map(Fields::to_json).unwrap_or_default();
        if let Some(q) = &l.queue {
            obj.insert(
                "queue".into(),
                serde_json::Value::Array(
                    q.iter()
                        .map(|w| serde_json::Value::Object(w.to_json()))
                        .collect(),
                ),
            );
        }
        all.insert(l.name.clone(), serde_json::Value::Object(obj));
    }
    json!(all)
}

fn plural(n: i64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Who holds a lock, in words.
fn holders(info: &Fields) -> String {
    match info.text("mode").as_deref() {
        Some("write") => format!(
            "write-held by {} ({})",
            info.text("writer").unwrap_or_else(|| "?".into()),
            plural(
                info.int("write_holds").unwrap_or(0),
                "write hold",
                "write holds"
            )
        ),
        Some(mode) => {
            let readers = info.map("readers").unwrap_or_default();
            let list: Vec<String> = readers
                .0
                .iter()
                .map(|(owner, n)| format!("{owner} ({})", reply::int(n).unwrap_or(0)))
                .collect();
            format!(
                "{mode}-held by {}",
                if list.is_empty() {
                    "nobody".into()
                } else {
                    list.join(", ")
                }
            )
        }
        None => format!(
            "held by {} ({})",
            info.text("owner").unwrap_or_else(|| "?".into()),
            plural(info.int("holds").unwrap_or(0), "hold", "holds")
        ),
    }
}

fn queue_table(queue: &[Fields]) -> String {
    // WAITS FOR: the owners each waiter waits for (a module with deadlock detection says).
    let waits_for = queue.iter().any(|w| w.get("waits_for").is_some());
    let mut rows = vec![vec![
        "#".to_string(),
        "OWNER".into(),
        "KIND".into(),
        "WAITED".into(),
        "LEASE".into(),
        "GIVES UP IN".into(),
        "OPTIONS".into(),
    ]];
    if waits_for {
        rows[0].push("WAITS FOR".into());
    }
    for (i, w) in queue.iter().enumerate() {
        let mut opts = Vec::new();
        if w.int("keepalive") == Some(1) {
            opts.push("keepalive");
        }
        if w.int("fence") == Some(1) {
            opts.push("fence");
        }
        let mut row = vec![
            (i + 1).to_string(),
            w.text("owner").unwrap_or_default(),
            w.text("kind").unwrap_or_default(),
            w.int("waited").map_or("-".into(), human_ms),
            w.int("lease").map_or("-".into(), human_ms),
            match w.int("timeout") {
                Some(-1) => "never".into(),
                Some(t) => human_ms(t),
                None => "-".into(),
            },
            opts.join(" "),
        ];
        if waits_for {
            let owners: Vec<String> = w
                .get("waits_for")
                .map(reply::items)
                .unwrap_or_default()
                .iter()
                .filter_map(reply::text)
                .collect();
            row.push(if owners.is_empty() {
                "-".into()
            } else {
                owners.join(", ")
            });
        }
        rows.push(row);
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    rows.iter()
        .map(|r| {
            let cells: Vec<String> = r
                .iter()
                .zip(&widths)
                .map(|(cell, w)| format!("{cell:<w$}"))
                .collect();
            format!("    {}", cells.join("  ").trim_end())
        })
        .collect::<Vec<_>>()
        .join("\n")
}

pub fn text(locks: &[LockStatus]) -> String {
    let mut out = String::new();
    for l in locks {
        let mut line = format!("{}: ", l.name);
        match &l.info {
            None => line.push_str("free"),
            Some(info) => {
                line.push_str(&holders(info));
                match info.int("ttl") {
                    Some(-1) => line.push_str(", no lease"),
                    Some(ttl) => line.push_str(&format!(", lease {} left", human_ms(ttl))),
                    None => {}
                }
                if let Some(t) = info.int("token") {
                    line.push_str(&format!(", token {t}"));
                }
                if let Some(c) = info.int("keepalive_client") {
                    line.push_str(&format!(", kept alive by client {c}"));
                }
                if let Some(m) = info.map("keepalive_clients") {
                    let list: Vec<String> =
                        m.0.iter()
                            .map(|(o, c)| format!("{o} by client {}", reply::int(c).unwrap_or(0)))
                            .collect();
                    line.push_str(&format!(", kept alive: {}", list.join(", ")));
                }
            }
        }
        let count = l
            .queue
            .as_ref()
            .map(|q| q.len() as i64)
            .or_else(|| l.info.as_ref().and_then(|i| i.int("waiters")))
            .unwrap_or(0);
        line.push_str(&format!(", {} waiting", count));
        out.push_str(&line);
        out.push('\n');
        if let Some(q) = l.queue.as_ref().filter(|q| !q.is_empty()) {
            out.push_str(&queue_table(q));
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reply::tests::{bulk, flat};
    use redis::Value;

    fn fields(v: Value) -> Fields {
        Fields::parse(&v).expect("fields")
    }

    fn sample() -> Vec<LockStatus> {
        vec![
            LockStatus {
                name: "job".into(),
                info: Some(fields(flat(&[
                    ("owner", bulk("web-1:812:0a")),
                    ("holds", Value::Int(1)),
                    ("ttl", Value::Int(29_200)),
                    ("waiters", Value::Int(1)),
                    ("token", Value::Int(1795587852864000)),
                    ("keepalive_client", Value::Int(14)),
                ]))),
                queue: Some(vec![fields(flat(&[
                    ("owner", bulk("worker-b")),
                    ("kind", bulk("exclusive")),
                    ("waited", Value::Int(1200)),
                    ("lease", Value::Int(30_000)),
                    ("keepalive", Value::Int(1)),
                    ("fence", Value::Int(0)),
                    ("timeout", Value::Int(-1)),
                    (
                        "waits_for",
                        Value::Array(vec![bulk("web-1:812:0a"), bulk("web-2:77:1b")]),
                    ),
                ]))]),
            },
            LockStatus {
                name: "report".into(),
                info: Some(fields(flat(&[
                    ("mode", bulk("read")),
                    (
                        "readers",
                        flat(&[("r1", Value::Int(1)), ("r2", Value::Int(2))]),
                    ),
                    ("ttl", Value::Int(900)),
                    ("waiters", Value::Int(0)),
                ]))),
                queue: None,
            },
            LockStatus {
                name: "idle".into(),
                info: None,
                queue: Some(vec![]),
            },
        ]
    }

    #[test]
    fn as_text() {
        let t = text(&sample());
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines[0],
            "job: held by web-1:812:0a (1 hold), lease 29.2 s left, token 1795587852864000, \
             kept alive by client 14, 1 waiting"
        );
        assert_eq!(
            lines[1],
            "    #  OWNER     KIND       WAITED  LEASE   GIVES UP IN  OPTIONS    WAITS FOR"
        );
        assert_eq!(
            lines[2],
            "    1  worker-b  exclusive  1.2 s   30.0 s  never        keepalive  \
             web-1:812:0a, web-2:77:1b"
        );
        assert_eq!(
            lines[3],
            "report: read-held by r1 (1), r2 (2), lease 900 ms left, 0 waiting"
        );
        assert_eq!(lines[4], "idle: free, 0 waiting");
    }

    #[test]
    fn as_json() {
        let j = json(&sample());
        assert_eq!(j["job"]["owner"], "web-1:812:0a");
        assert_eq!(j["job"]["token"], 1795587852864000i64);
        assert_eq!(j["job"]["queue"][0]["owner"], "worker-b");
        assert_eq!(j["job"]["queue"][0]["timeout"], -1);
        // A list of owners, not a RESP2 map (two entries would read as one pair).
        assert_eq!(
            j["job"]["queue"][0]["waits_for"],
            json!(["web-1:812:0a", "web-2:77:1b"])
        );
        assert_eq!(j["report"]["readers"]["r2"], 2);
        assert!(j["report"].get("queue").is_none());
        assert_eq!(j["idle"], json!({"queue": []}));
    }
}
