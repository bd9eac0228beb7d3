//! Leader election (`ELECT.*`): its commands and replies ([`Leader`]).

use std::time::Duration;

use redis::Value;

use super::common::{field, int_field, millis, Binding, Unexpected, Wait};

/// `ELECT.CAMPAIGN key candidate [VALUE value] PX lease (KEEPALIVE | SESSION token) [BLOCK
/// ms]`: the reply is the term once `candidate` leads, nil if not (yet).
pub fn elect_campaign(
    key: &str,
    candidate: &str,
    value: Option<&str>,
    lease: Duration,
    binding: Binding<'_>,
    wait: Wait,
) -> Vec<String> {
    let mut args = vec!["ELECT.CAMPAIGN".to_string(), key.into(), candidate.into()];
    if let Some(v) = value {
        args.push("VALUE".into());
        args.push(v.into());
    }
    args.push("PX".into());
    args.push(millis(lease).to_string());
    binding.push(&mut args);
    wait.push(&mut args);
    args
}

/// `ELECT.RESIGN key candidate`: 1 if it led, 0 if not; its waits end too.
pub fn elect_resign(key: &str, candidate: &str) -> Vec<String> {
    vec!["ELECT.RESIGN".into(), key.into(), candidate.into()]
}

/// `ELECT.PROCLAIM key candidate value`: the leader's new value; the reply is the term
/// (`NOTOWNER` if `candidate` does not lead).
pub fn elect_proclaim(key: &str, candidate: &str, value: &str) -> Vec<String> {
    vec![
        "ELECT.PROCLAIM".into(),
        key.into(),
        candidate.into(),
        value.into(),
    ]
}

/// `ELECT.LEADER key`.
pub fn elect_leader(key: &str) -> Vec<String> {
    vec!["ELECT.LEADER".into(), key.into()]
}

/// `ELECT.OBSERVE key TERM term [BLOCK ms]`: answered at once if the term now differs from
/// `term`, else when leadership or the leader's value changes (nil when the wait ran out).
pub fn elect_observe(key: &str, term: i64, wait: Wait) -> Vec<String> {
    let mut args = vec![
        "ELECT.OBSERVE".to_string(),
        key.into(),
        "TERM".into(),
        term.to_string(),
    ];
    wait.push(&mut args);
    args
}

/// `ELECT.CAMPAIGN`'s reply: `Some(term)` once leading, `None` when not (nil).
pub fn campaigned(v: &Value) -> Result<Option<i64>, Unexpected> {
    match v {
        Value::Nil => Ok(None),
        Value::Int(i) if *i > 0 => Ok(Some(*i)),
        _ => Err(Unexpected),
    }
}

/// Who leads an election, as `ELECT.LEADER` and `ELECT.OBSERVE` answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leader {
    /// The leading candidate; `None` when nobody leads (an `ELECT.OBSERVE` reply).
    pub candidate: Option<String>,
    /// The term (the leadership's fencing token); 0 when nobody leads.
    pub term: i64,
    /// The leader's value, if it gave one.
    pub value: Option<String>,
    /// Ms until the current lease ends, -1 for none.
    pub ttl: i64,
}

fn text_of(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

/// An `ELECT.LEADER` / `ELECT.OBSERVE` reply: `None` for nil (nobody leads; for
/// `ELECT.OBSERVE`, the wait ran out), else the map (RESP3) or flat array (RESP2).
pub fn leader(v: &Value) -> Result<Option<Leader>, Unexpected> {
    if matches!(v, Value::Nil) {
        return Ok(None);
    }
    let term = int_field(v, "term").ok_or(Unexpected)?;
    Ok(Some(Leader {
        candidate: field(v, "candidate").and_then(text_of),
        term,
        value: field(v, "value").and_then(text_of),
        ttl: int_field(v, "ttl").unwrap_or(-1),
    }))
}
