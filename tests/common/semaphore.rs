//! `SEM.INFO` read as a struct, for the tests that check semaphores under
//! faults (tests/chaos.rs, tests/semaphore_failover.rs). Included by path
//! (`#[path = "common/semaphore.rs"] mod semaphore;`) beside `mod common`.

#![allow(dead_code)]

use redis::{Connection, Value};

/// One owner's permits, as `SEM.INFO` lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub owner: String,
    pub permits: i64,
    /// Ms left of its lease (-1: none).
    pub ttl: i64,
    /// The connection keeping them renewed, when they are kept alive.
    pub keepalive_client: Option<i64>,
}

/// `SEM.INFO key`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SemInfo {
    pub permits: i64,
    pub available: i64,
    pub holders: Vec<Holder>,
    pub waiters: i64,
}

impl SemInfo {
    pub fn holder(&self, owner: &str) -> Option<&Holder> {
        self.holders.iter().find(|h| h.owner == owner)
    }

    /// Permits held by owners.
    pub fn held(&self) -> i64 {
        self.holders.iter().map(|h| h.permits).sum()
    }

    /// `n` permits in all, all available, no holder, nobody waiting.
    pub fn is_whole_and_free(&self, n: i64) -> bool {
        self.permits == n && self.available == n && self.holders.is_empty() && self.waiters == 0
    }
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

/// Field/value pairs of a RESP2 flat array or a RESP3 map.
fn pairs(v: &Value) -> Option<Vec<(String, &Value)>> {
    match v {
        Value::Array(items) if items.len() % 2 == 0 => items
            .chunks(2)
            .map(|kv| Some((text(&kv[0])?, &kv[1])))
            .collect(),
        Value::Map(items) => items.iter().map(|(k, v)| Some((text(k)?, v))).collect(),
        _ => None,
    }
}

fn int(fields: &[(String, &Value)], name: &str) -> Option<i64> {
    fields
        .iter()
        .find(|(k, _)| k == name)
        .and_then(|(_, v)| match v {
            Value::Int(n) => Some(*n),
            _ => None,
        })
}

/// Parses a `SEM.INFO` reply: `Ok(None)` for nil, `Err` for anything that
/// is not the documented shape.
pub fn parse(v: &Value) -> Result<Option<SemInfo>, String> {
    if *v == Value::Nil {
        return Ok(None);
    }
    let bad = || format!("SEM.INFO replied {v:?}");
    let fields = pairs(v).ok_or_else(bad)?;
    let holders = match fields.iter().find(|(k, _)| k == "holders") {
        Some((_, Value::Array(list))) => list
            .iter()
            .map(|h| {
                let f = pairs(h)?;
                let owner = f
                    .iter()
                    .find(|(k, _)| k == "owner")
                    .and_then(|(_, v)| text(v))?;
                Some(Holder {
                    owner,
                    permits: int(&f, "permits")?,
                    ttl: int(&f, "ttl")?,
                    keepalive_client: int(&f, "keepalive_client"),
                })
            })
            .collect::<Option<Vec<_>>>()
            .ok_or_else(bad)?,
        _ => return Err(bad()),
    };
    Ok(Some(SemInfo {
        permits: int(&fields, "permits").ok_or_else(bad)?,
        available: int(&fields, "available").ok_or_else(bad)?,
        holders,
        waiters: int(&fields, "waiters").ok_or_else(bad)?,
    }))
}

/// `SEM.INFO key` on `con`; `Err` on an error reply or a broken connection.
pub fn sem_info(con: &mut Connection, key: &str) -> Result<Option<SemInfo>, String> {
    let v: Value = redis::cmd("SEM.INFO")
        .arg(key)
        .query(con)
        .map_err(|e| e.to_string())?;
    parse(&v)
}
