//! What every command and reply of the protocol shares: how long a command waits
//! ([`Wait`], `BLOCK`), what keeps a hold alive ([`Binding`]), milliseconds, the command
//! itself ([`cmd`]), reading integer and map replies, the unknown-command test, and a key's
//! cluster slot.

use std::time::Duration;

use redis::Value;

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

    /// Appends `BLOCK ms` for a wait, nothing for none (every waiting command ends so or
    /// takes it before its last flags).
    pub(super) fn push(self, args: &mut Vec<String>) {
        if let Some(ms) = self.block_ms() {
            args.push("BLOCK".into());
            args.push(ms.to_string());
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

/// `<command> key owner PX lease [KEEPALIVE | SESSION token]`: a renewal (`LOCK.RENEW`,
/// `SEM.RENEW`), the same words for a lock's owner and a semaphore's.
pub(super) fn renewal(
    command: &str,
    key: &str,
    owner: &str,
    lease: Duration,
    binding: Binding<'_>,
) -> Vec<String> {
    let mut args = vec![
        command.to_string(),
        key.into(),
        owner.into(),
        "PX".into(),
        millis(lease).to_string(),
    ];
    binding.push(&mut args);
    args
}

impl Binding<'_> {
    pub(super) fn push(self, args: &mut Vec<String>) {
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

/// An integer reply (`SEM.INIT`, `SEM.RELEASE`, `SEM.RENEW`, `SEM.ADD`, `LATCH.INIT`,
/// `LATCH.COUNTDOWN`).
pub fn integer(v: &Value) -> Result<i64, Unexpected> {
    match v {
        Value::Int(i) => Ok(*i),
        _ => Err(Unexpected),
    }
}

/// A field of a map reply (RESP3) or of a flat field, value, ... array (RESP2): `SEM.INFO`,
/// `LATCH.INFO` and their nested maps.
pub fn field<'a>(v: &'a Value, name: &str) -> Option<&'a Value> {
    let is = |k: &Value| match k {
        Value::BulkString(b) => b == name.as_bytes(),
        Value::SimpleString(s) => s == name,
        _ => false,
    };
    match v {
        Value::Map(pairs) => pairs.iter().find(|(k, _)| is(k)).map(|(_, v)| v),
        Value::Array(items) if items.len() % 2 == 0 => {
            items.chunks(2).find(|p| is(&p[0])).map(|p| &p[1])
        }
        Value::Attribute { data, .. } => field(data, name),
        _ => None,
    }
}

/// An integer field of a map reply.
pub fn int_field(v: &Value, name: &str) -> Option<i64> {
    match field(v, name)? {
        Value::Int(i) => Some(*i),
        _ => None,
    }
}
