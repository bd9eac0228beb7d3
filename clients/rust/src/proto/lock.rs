//! The lock commands (`LOCK.ACQUIRE` / `RACQUIRE` / `WACQUIRE` / `MACQUIRE`, `LOCK.CANCEL`,
//! `LOCK.RELEASE` / `MRELEASE`, `LOCK.RENEW`) and the acquire's reply.

use std::time::Duration;

use redis::Value;

use super::common::{millis, renewal, Binding, Unexpected, Wait};

/// Which lock: exclusive (`LOCK.ACQUIRE`, or `LOCK.MACQUIRE` for several keys), or the read
/// or write side of a read-write lock (`LOCK.RACQUIRE`, `LOCK.WACQUIRE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Exclusive,
    Read,
    Write,
}

/// One acquire command.
#[derive(Clone, Debug)]
pub struct Acquire<'a> {
    pub keys: &'a [String],
    pub owner: &'a str,
    pub kind: Kind,
    pub lease: Duration,
    pub wait: Wait,
    pub fence: bool,
    pub binding: Binding<'a>,
}

impl Acquire<'_> {
    /// `LOCK.ACQUIRE key owner PX lease [BLOCK ms] [FENCE] [KEEPALIVE | SESSION token]`, or
    /// `LOCK.RACQUIRE` / `LOCK.WACQUIRE`, or `LOCK.MACQUIRE n k1 .. kn owner ...` for several
    /// keys (exclusive only).
    pub fn args(&self) -> Vec<String> {
        let mut args: Vec<String> = Vec::with_capacity(self.keys.len() + 10);
        if self.keys.len() > 1 {
            args.push("LOCK.MACQUIRE".into());
            args.push(self.keys.len().to_string());
        } else {
            args.push(
                match self.kind {
                    Kind::Exclusive => "LOCK.ACQUIRE",
                    Kind::Read => "LOCK.RACQUIRE",
                    Kind::Write => "LOCK.WACQUIRE",
                }
                .into(),
            );
        }
        args.extend(self.keys.iter().cloned());
        args.push(self.owner.into());
        args.push("PX".into());
        args.push(millis(self.lease).to_string());
        self.wait.push(&mut args);
        if self.fence {
            args.push("FENCE".into());
        }
        self.binding.push(&mut args);
        args
    }
}

/// What ends the owner's waits, after a cancelled one: `LOCK.CANCEL key owner` (a multi-lock
/// waiter leaves every key's queue through its first key). Once it has answered, no grant can
/// reach the owner any more.
pub fn cancel(keys: &[String], owner: &str) -> Vec<String> {
    vec![
        "LOCK.CANCEL".to_string(),
        keys.first().cloned().unwrap_or_default(),
        owner.into(),
    ]
}

/// What drops one hold: `LOCK.RELEASE key owner [READ|WRITE]`, or `LOCK.MRELEASE n k1 .. kn
/// owner` for several keys.
pub fn release(keys: &[String], owner: &str, kind: Kind) -> Vec<String> {
    if keys.len() > 1 {
        let mut args = vec!["LOCK.MRELEASE".to_string(), keys.len().to_string()];
        args.extend(keys.iter().cloned());
        args.push(owner.into());
        return args;
    }
    let mut args = vec![
        "LOCK.RELEASE".to_string(),
        keys.first().cloned().unwrap_or_default(),
        owner.into(),
    ];
    match kind {
        Kind::Exclusive => {}
        Kind::Read => args.push("READ".into()),
        Kind::Write => args.push("WRITE".into()),
    }
    args
}

/// `LOCK.RENEW key owner PX lease [KEEPALIVE | SESSION token]`: a new lease, and with a
/// binding, a re-attach of the owner's holds.
pub fn renew(key: &str, owner: &str, lease: Duration, binding: Binding<'_>) -> Vec<String> {
    renewal("LOCK.RENEW", key, owner, lease, binding)
}

/// An acquire's reply: `Some(tokens)` (hold counts without `FENCE`; one per key for
/// `LOCK.MACQUIRE`), `None` if not acquired (nil); `Err` for anything else.
pub fn acquired(v: &Value) -> Result<Option<Vec<i64>>, Unexpected> {
    match v {
        Value::Nil => Ok(None),
        Value::Int(i) => Ok(Some(vec![*i])),
        Value::Array(items) => items
            .iter()
            .map(|i| match i {
                Value::Int(n) => Ok(*n),
                _ => Err(Unexpected),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
        _ => Err(Unexpected),
    }
}
