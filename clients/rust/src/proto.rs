//! The module's protocol without I/O: the `LOCK.*` commands the library sends, their
//! replies, and the loss messages of a session's channel. Public so that tools built on
//! other connection handling (the `redis-lock` CLI) send exactly what the library sends.

use std::time::Duration;

use redis::Value;

/// Which lock: exclusive (`LOCK.ACQUIRE`, or `LOCK.MACQUIRE` for several keys), or the read
/// or write side of a read-write lock (`LOCK.RACQUIRE`, `LOCK.WACQUIRE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Exclusive,
    Read,
    Write,
}

/// How long an acquire waits in the server's first-come-first-served queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// No `BLOCK`: a busy lock answers at once ([`crate::Error::Busy`]).
    No,
    /// `BLOCK ms` (a zero duration is [`Wait::No`]).
    For(Duration),
    /// `BLOCK 0`: until granted (or the future is dropped).
    Forever,
}

impl Wait {
    /// [`Wait::For`], except a zero duration, which does not wait ([`Wait::No`]).
    pub fn from_duration(d: Duration) -> Wait {
        if d.is_zero() {
            Wait::No
        } else {
            Wait::For(d)
        }
    }

    /// The `BLOCK` argument, if any.
    pub fn block_ms(self) -> Option<u64> {
        match self {
            Wait::No => None,
            Wait::For(d) if d.is_zero() => None,
            Wait::For(d) => Some(millis(d)),
            Wait::Forever => Some(0),
        }
    }
}

/// Whole milliseconds of `d`, at least 1 for a non-zero duration (`PX 0` is refused and
/// `BLOCK 0` waits forever).
pub fn millis(d: Duration) -> u64 {
    let ms = d.as_millis();
    if ms == 0 && !d.is_zero() {
        1
    } else {
        u64::try_from(ms).unwrap_or(u64::MAX)
    }
}

/// How a hold is kept alive by the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Binding<'a> {
    /// Not at all: the lease runs out unless renewed.
    None,
    /// `KEEPALIVE`: while the connection that sends the command lives.
    Keepalive,
    /// `SESSION token`: while the session connection named `token` lives.
    Session(&'a str),
}

impl Binding<'_> {
    fn push(self, args: &mut Vec<String>) {
        match self {
            Binding::None => {}
            Binding::Keepalive => args.push("KEEPALIVE".into()),
            Binding::Session(token) => {
                args.push("SESSION".into());
                args.push(token.into());
            }
        }
    }
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
        if let Some(ms) = self.wait.block_ms() {
            args.push("BLOCK".into());
            args.push(ms.to_string());
        }
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
    let mut args = vec![
        "LOCK.RENEW".to_string(),
        key.into(),
        owner.into(),
        "PX".into(),
        millis(lease).to_string(),
    ];
    binding.push(&mut args);
    args
}

/// `LOCK.SESSION token`.
pub fn session(token: &str) -> Vec<String> {
    vec!["LOCK.SESSION".into(), token.into()]
}

/// The channel of a session's loss messages: `__lock__:session:<token>`.
pub fn channel(token: &str) -> String {
    format!("__lock__:session:{token}")
}

/// A command from its arguments.
pub fn cmd(args: &[String]) -> redis::Cmd {
    let mut cmd = redis::Cmd::new();
    for a in args {
        cmd.arg(a.as_bytes());
    }
    cmd
}

/// A reply that is not what the command answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unexpected;

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

/// Why the server ended or stopped renewing a hold bound to a session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    /// `LOCK.FORCERELEASE` removed the lock.
    Forced,
    /// A renewal found the owner no longer holds it (deleted, flushed, overwritten, or its
    /// lease ran out on a stalled server).
    Gone,
    /// `lock.keepalive-max-hold-ms` passed: no more renewals, the hold ends with its lease.
    MaxHold,
    /// The key's cluster slot is no longer served by that node.
    Moved,
    /// A re-attach after a reconnect or failover was answered `NOTOWNER`.
    NotOwner,
    /// The session connection was down for longer than the lease: the hold may have ended.
    SessionDown,
    /// A reason word this library does not know (a newer module).
    Other(String),
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reason::Forced => f.write_str("force-released (LOCK.FORCERELEASE)"),
            Reason::Gone => f.write_str("gone: the owner no longer holds it"),
            Reason::MaxHold => f.write_str("held longer than lock.keepalive-max-hold-ms"),
            Reason::Moved => f.write_str("its cluster slot moved to another node"),
            Reason::NotOwner => f.write_str("no longer held when re-attached"),
            Reason::SessionDown => {
                f.write_str("the session connection was down longer than the lease")
            }
            Reason::Other(w) => write!(f, "{w}"),
        }
    }
}

/// A hold that was lost: its key, its owner and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lost {
    pub key: String,
    pub owner: String,
    pub reason: Reason,
}

impl std::fmt::Display for Lost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (owner {}): {}", self.key, self.owner, self.reason)
    }
}

/// A message on a session's channel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// `<reason> <owner-length> <owner> <key>`.
    Lost {
        reason: Reason,
        owner: String,
        key: String,
    },
    /// `demoted`: the server became a replica; every binding on it ended.
    Demoted,
}

/// Parses a loss message; `None` if it is not one.
pub fn message(payload: &[u8]) -> Option<Message> {
    if payload == b"demoted" {
        return Some(Message::Demoted);
    }
    let text = String::from_utf8_lossy(payload);
    let (word, rest) = text.split_once(' ')?;
    let (len, rest) = rest.split_once(' ')?;
    let len: usize = len.parse().ok()?;
    let owner = rest.get(..len)?;
    let key = rest.get(len..)?.strip_prefix(' ')?;
    let reason = match word {
        "forced" => Reason::Forced,
        "gone" => Reason::Gone,
        "maxhold" => Reason::MaxHold,
        "moved" => Reason::Moved,
        other => Reason::Other(other.into()),
    };
    Some(Message::Lost {
        reason,
        owner: owner.into(),
        key: key.into(),
    })
}

/// Whether an error reply (its code word and the rest) says the command does not exist:
/// `ERR unknown command 'LOCK.ACQUIRE', with args beginning with: ...` (Redis 7, Valkey),
/// `` ERR unknown command `LOCK.ACQUIRE` `` (Redis 6 and before): the module is not loaded.
pub fn is_unknown_command(code: &str, detail: &str) -> bool {
    code == "ERR"
        && detail
            .trim_start()
            .to_ascii_lowercase()
            .starts_with("unknown command")
}

/// The cluster hash slot of a key (CRC16/XMODEM of its hash tag or whole name, mod 16384).
pub fn key_slot(key: &[u8]) -> u16 {
    let tagged = match key.iter().position(|&b| b == b'{') {
        Some(open) => match key[open + 1..].iter().position(|&b| b == b'}') {
            Some(0) | None => key,
            Some(len) => &key[open + 1..open + 1 + len],
        },
        None => key,
    };
    let mut crc: u16 = 0;
    for &b in tagged {
        crc ^= (b as u16) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(args: &[String]) -> String {
        args.join(" ")
    }

    #[test]
    fn commands() {
        let keys = vec!["job".to_string()];
        let a = Acquire {
            keys: &keys,
            owner: "t:1",
            kind: Kind::Exclusive,
            lease: Duration::from_secs(30),
            wait: Wait::For(Duration::from_millis(1500)),
            fence: true,
            binding: Binding::Session("t"),
        };
        assert_eq!(
            line(&a.args()),
            "LOCK.ACQUIRE job t:1 PX 30000 BLOCK 1500 FENCE SESSION t"
        );
        let two = vec!["{a}1".to_string(), "{a}2".to_string()];
        let m = Acquire {
            keys: &two,
            wait: Wait::No,
            fence: false,
            binding: Binding::Keepalive,
            ..a.clone()
        };
        assert_eq!(
            line(&m.args()),
            "LOCK.MACQUIRE 2 {a}1 {a}2 t:1 PX 30000 KEEPALIVE"
        );
        assert_eq!(
            line(&release(&two, "o", Kind::Exclusive)),
            "LOCK.MRELEASE 2 {a}1 {a}2 o"
        );
        assert_eq!(
            line(&release(&keys, "o", Kind::Read)),
            "LOCK.RELEASE job o READ"
        );
        assert_eq!(
            line(&renew(
                "job",
                "o",
                Duration::from_millis(900),
                Binding::Session("t")
            )),
            "LOCK.RENEW job o PX 900 SESSION t"
        );
        assert_eq!(Wait::For(Duration::from_micros(10)).block_ms(), Some(1));
        assert_eq!(Wait::from_duration(Duration::ZERO), Wait::No);
        assert_eq!(Wait::Forever.block_ms(), Some(0));
    }

    #[test]
    fn replies() {
        assert_eq!(acquired(&Value::Nil), Ok(None));
        assert_eq!(acquired(&Value::Int(7)), Ok(Some(vec![7])));
        assert_eq!(
            acquired(&Value::Array(vec![Value::Int(1), Value::Int(2)])),
            Ok(Some(vec![1, 2]))
        );
        assert!(acquired(&Value::Okay).is_err());
    }

    #[test]
    fn loss_messages() {
        assert_eq!(message(b"demoted"), Some(Message::Demoted));
        assert_eq!(
            message(b"forced 5 a b:1 my key"),
            Some(Message::Lost {
                reason: Reason::Forced,
                owner: "a b:1".into(),
                key: "my key".into()
            })
        );
        assert!(matches!(
            message(b"newword 1 o k"),
            Some(Message::Lost {
                reason: Reason::Other(_),
                ..
            })
        ));
        assert_eq!(message(b"gone 9 o k"), None);
        assert_eq!(message(b"junk"), None);
    }

    #[test]
    fn slots() {
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"{}x"), key_slot(b"{}x"));
        assert_eq!(key_slot(b"123456789"), 0x31C3);
    }
}
