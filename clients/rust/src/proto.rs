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
    /// The connection keeping it was silent for longer than the lease: no more renewals,
    /// the hold ends with its lease (`idle`, elections).
    Idle,
    /// The key's cluster slot is no longer served by that node.
    Moved,
    /// A re-attach after a reconnect or failover was answered `NOTOWNER`.
    NotOwner,
    /// The session connection was down for longer than the lease: the hold may have ended.
    SessionDown,
    /// A leadership: the session connection broke (the server may hand over a lease later).
    ConnectionLost,
    /// A leadership: the server became a replica (`demoted`).
    Demoted,
    /// A leadership: no round trip on the session connection confirmed it in time (the
    /// local deadline, last successful PING sent + lease/2, passed).
    Deadline,
    /// A reason word this library does not know (a newer module).
    Other(String),
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reason::Forced => f.write_str("force-released (LOCK.FORCERELEASE)"),
            Reason::Gone => f.write_str("gone: the owner no longer holds it"),
            Reason::MaxHold => f.write_str("held longer than lock.keepalive-max-hold-ms"),
            Reason::Idle => f.write_str("its connection was silent for longer than the lease"),
            Reason::Moved => f.write_str("its cluster slot moved to another node"),
            Reason::NotOwner => f.write_str("no longer held when re-attached"),
            Reason::SessionDown => {
                f.write_str("the session connection was down longer than the lease")
            }
            Reason::ConnectionLost => f.write_str("the session connection broke"),
            Reason::Demoted => f.write_str("the server became a replica"),
            Reason::Deadline => {
                f.write_str("no round trip on the session connection confirmed it in time")
            }
            Reason::Other(w) => write!(f, "{w}"),
        }
    }
}

impl Reason {
    /// One word for it: the server's message word (`forced`, `gone`, `idle`, `maxhold`,
    /// `moved`, `demoted`) or the client's own (`notowner`, `session-down`, `connection`,
    /// `deadline`).
    pub fn word(&self) -> &str {
        match self {
            Reason::Forced => "forced",
            Reason::Gone => "gone",
            Reason::MaxHold => "maxhold",
            Reason::Idle => "idle",
            Reason::Moved => "moved",
            Reason::NotOwner => "notowner",
            Reason::SessionDown => "session-down",
            Reason::ConnectionLost => "connection",
            Reason::Demoted => "demoted",
            Reason::Deadline => "deadline",
            Reason::Other(w) => w,
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
        "idle" => Reason::Idle,
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

// ---- Semaphores (SEM.*) and count-down latches (LATCH.*) ----

/// One `SEM.ACQUIRE`: `permits` permits of semaphore `key` for `owner`.
#[derive(Clone, Debug)]
pub struct SemAcquire<'a> {
    pub key: &'a str,
    pub owner: &'a str,
    pub permits: u32,
    pub lease: Duration,
    pub wait: Wait,
    /// `FENCE`: the reply is a fencing token instead of the permits held.
    pub fence: bool,
    pub binding: Binding<'a>,
}

impl SemAcquire<'_> {
    /// `SEM.ACQUIRE key owner [PERMITS n] PX lease [KEEPALIVE | SESSION token] [BLOCK ms]
    /// [FENCE]` (`PERMITS` left out for 1).
    pub fn args(&self) -> Vec<String> {
        let mut args = vec![
            "SEM.ACQUIRE".to_string(),
            self.key.into(),
            self.owner.into(),
        ];
        if self.permits != 1 {
            args.push("PERMITS".into());
            args.push(self.permits.to_string());
        }
        args.push("PX".into());
        args.push(millis(self.lease).to_string());
        self.binding.push(&mut args);
        if let Some(ms) = self.wait.block_ms() {
            args.push("BLOCK".into());
            args.push(ms.to_string());
        }
        if self.fence {
            args.push("FENCE".into());
        }
        args
    }
}

/// `SEM.INIT key permits`: sets the semaphore's permits once (reply 1), else nothing (0).
pub fn sem_init(key: &str, permits: u32) -> Vec<String> {
    vec!["SEM.INIT".into(), key.into(), permits.to_string()]
}

/// `SEM.ADD key delta`: adds (or takes away) permits; the reply is the permits available.
pub fn sem_add(key: &str, delta: i64) -> Vec<String> {
    vec!["SEM.ADD".into(), key.into(), delta.to_string()]
}

/// `SEM.RELEASE key owner [PERMITS n]`: gives back `n` of the owner's permits (all without).
pub fn sem_release(key: &str, owner: &str, permits: Option<u32>) -> Vec<String> {
    let mut args = vec!["SEM.RELEASE".to_string(), key.into(), owner.into()];
    if let Some(n) = permits {
        args.push("PERMITS".into());
        args.push(n.to_string());
    }
    args
}

/// `SEM.RENEW key owner PX lease [KEEPALIVE | SESSION token]`: a new lease on all of the
/// owner's permits, and with a binding, a re-attach.
pub fn sem_renew(key: &str, owner: &str, lease: Duration, binding: Binding<'_>) -> Vec<String> {
    let mut args = vec![
        "SEM.RENEW".to_string(),
        key.into(),
        owner.into(),
        "PX".into(),
        millis(lease).to_string(),
    ];
    binding.push(&mut args);
    args
}

/// `SEM.INFO key`.
pub fn sem_info(key: &str) -> Vec<String> {
    vec!["SEM.INFO".into(), key.into()]
}

/// `LATCH.INIT key count [PX ttl]`: sets the latch if it does not exist (reply 1), else 0.
pub fn latch_init(key: &str, count: u64, ttl: Option<Duration>) -> Vec<String> {
    let mut args = vec!["LATCH.INIT".to_string(), key.into(), count.to_string()];
    if let Some(ttl) = ttl {
        args.push("PX".into());
        args.push(millis(ttl).to_string());
    }
    args
}

/// `LATCH.COUNTDOWN key [n]` (`n` left out for 1): the count left.
pub fn latch_count_down(key: &str, n: u64) -> Vec<String> {
    let mut args = vec!["LATCH.COUNTDOWN".to_string(), key.into()];
    if n != 1 {
        args.push(n.to_string());
    }
    args
}

/// `LATCH.AWAIT key [BLOCK ms]`.
pub fn latch_await(key: &str, wait: Wait) -> Vec<String> {
    let mut args = vec!["LATCH.AWAIT".to_string(), key.into()];
    if let Some(ms) = wait.block_ms() {
        args.push("BLOCK".into());
        args.push(ms.to_string());
    }
    args
}

/// `LATCH.INFO key`.
pub fn latch_info(key: &str) -> Vec<String> {
    vec!["LATCH.INFO".into(), key.into()]
}

/// What an error reply's leading code word says about an owner's permits or a latch (the
/// rest of the reply is wording, not read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// `NOTOWNER`: the owner holds nothing (never held, released, or given to others).
    NotOwner,
    /// `EXPIRED`: the owner's permits' lease ended before this command; they are back in
    /// the available count.
    Expired,
    /// `GONE`: the latch expired or was deleted before reaching zero.
    Gone,
}

impl Refusal {
    /// The refusal of an error code word, if it is one.
    pub fn of(code: &str) -> Option<Refusal> {
        match code {
            "NOTOWNER" => Some(Refusal::NotOwner),
            "EXPIRED" => Some(Refusal::Expired),
            "GONE" => Some(Refusal::Gone),
            _ => None,
        }
    }

    /// Whether the code word of a release's or renewal's error says the owner no longer
    /// holds anything there (`NOTOWNER`, `EXPIRED`): nothing to release, or the hold is lost.
    pub fn not_held(code: Option<&str>) -> bool {
        matches!(
            code.and_then(Refusal::of),
            Some(Refusal::NotOwner | Refusal::Expired)
        )
    }
}

/// An integer reply (`SEM.INIT`, `SEM.RELEASE`, `SEM.RENEW`, `SEM.ADD`, `LATCH.INIT`,
/// `LATCH.COUNTDOWN`).
pub fn integer(v: &Value) -> Result<i64, Unexpected> {
    match v {
        Value::Int(i) => Ok(*i),
        _ => Err(Unexpected),
    }
}

/// `SEM.ACQUIRE`'s reply: `Some(permits held)` (the token with `FENCE`), `None` when not
/// taken (nil).
pub fn sem_acquired(v: &Value) -> Result<Option<i64>, Unexpected> {
    match v {
        Value::Nil => Ok(None),
        Value::Int(i) => Ok(Some(*i)),
        _ => Err(Unexpected),
    }
}

/// `LATCH.AWAIT`'s reply: `true` when the latch is open (0), `false` when not (yet) (nil).
pub fn latch_opened(v: &Value) -> Result<bool, Unexpected> {
    match v {
        Value::Nil => Ok(false),
        Value::Int(0) => Ok(true),
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

/// One holder of a semaphore, as `SEM.INFO` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SemHolder {
    pub owner: String,
    pub permits: i64,
    /// Ms left of its lease, -1 for none.
    pub ttl: i64,
    /// The id of the connection that keeps it alive (`KEEPALIVE` / `SESSION`), if any.
    pub keepalive_client: Option<i64>,
}

/// The holders in a `SEM.INFO` reply (none for nil).
pub fn sem_holders(info: &Value) -> Vec<SemHolder> {
    let list = match field(info, "holders") {
        Some(Value::Array(items)) | Some(Value::Set(items)) => items.as_slice(),
        _ => &[],
    };
    list.iter()
        .filter_map(|h| {
            let owner = match field(h, "owner")? {
                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                Value::SimpleString(s) => s.clone(),
                _ => return None,
            };
            Some(SemHolder {
                owner,
                permits: int_field(h, "permits").unwrap_or(0),
                ttl: int_field(h, "ttl").unwrap_or(-1),
                keepalive_client: int_field(h, "keepalive_client"),
            })
        })
        .collect()
}

// ---- Leader election (ELECT.*) ----

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
    if let Some(ms) = wait.block_ms() {
        args.push("BLOCK".into());
        args.push(ms.to_string());
    }
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
    if let Some(ms) = wait.block_ms() {
        args.push("BLOCK".into());
        args.push(ms.to_string());
    }
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

    #[test]
    fn semaphore_and_latch_commands() {
        let a = SemAcquire {
            key: "pool",
            owner: "h:1:ab",
            permits: 1,
            lease: Duration::from_secs(30),
            wait: Wait::Forever,
            fence: false,
            binding: Binding::Keepalive,
        };
        assert_eq!(
            line(&a.args()),
            "SEM.ACQUIRE pool h:1:ab PX 30000 KEEPALIVE BLOCK 0"
        );
        let b = SemAcquire {
            permits: 3,
            wait: Wait::No,
            fence: true,
            binding: Binding::Session("t"),
            ..a.clone()
        };
        assert_eq!(
            line(&b.args()),
            "SEM.ACQUIRE pool h:1:ab PERMITS 3 PX 30000 SESSION t FENCE"
        );
        assert_eq!(line(&sem_init("pool", 4)), "SEM.INIT pool 4");
        assert_eq!(line(&sem_add("pool", -2)), "SEM.ADD pool -2");
        assert_eq!(line(&sem_release("pool", "o", None)), "SEM.RELEASE pool o");
        assert_eq!(
            line(&sem_release("pool", "o", Some(2))),
            "SEM.RELEASE pool o PERMITS 2"
        );
        assert_eq!(
            line(&sem_renew(
                "pool",
                "o",
                Duration::from_millis(900),
                Binding::Session("t")
            )),
            "SEM.RENEW pool o PX 900 SESSION t"
        );
        assert_eq!(line(&sem_info("pool")), "SEM.INFO pool");
        assert_eq!(line(&latch_init("l", 3, None)), "LATCH.INIT l 3");
        assert_eq!(
            line(&latch_init("l", 3, Some(Duration::from_secs(2)))),
            "LATCH.INIT l 3 PX 2000"
        );
        assert_eq!(line(&latch_count_down("l", 1)), "LATCH.COUNTDOWN l");
        assert_eq!(line(&latch_count_down("l", 4)), "LATCH.COUNTDOWN l 4");
        assert_eq!(line(&latch_await("l", Wait::No)), "LATCH.AWAIT l");
        assert_eq!(
            line(&latch_await("l", Wait::For(Duration::from_millis(250)))),
            "LATCH.AWAIT l BLOCK 250"
        );
        assert_eq!(line(&latch_info("l")), "LATCH.INFO l");
    }

    #[test]
    fn semaphore_and_latch_replies() {
        assert_eq!(Refusal::of("NOTOWNER"), Some(Refusal::NotOwner));
        assert_eq!(Refusal::of("EXPIRED"), Some(Refusal::Expired));
        assert_eq!(Refusal::of("GONE"), Some(Refusal::Gone));
        assert_eq!(Refusal::of("ERR"), None);
        assert!(Refusal::not_held(Some("EXPIRED")) && Refusal::not_held(Some("NOTOWNER")));
        assert!(!Refusal::not_held(Some("GONE")) && !Refusal::not_held(None));
        assert_eq!(sem_acquired(&Value::Nil), Ok(None));
        assert_eq!(sem_acquired(&Value::Int(2)), Ok(Some(2)));
        assert!(sem_acquired(&Value::Okay).is_err());
        assert_eq!(latch_opened(&Value::Int(0)), Ok(true));
        assert_eq!(latch_opened(&Value::Nil), Ok(false));
        assert!(latch_opened(&Value::Int(3)).is_err());
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let holder = Value::Array(vec![
            bulk("owner"),
            bulk("w1"),
            bulk("permits"),
            Value::Int(2),
            bulk("ttl"),
            Value::Int(900),
            bulk("keepalive_client"),
            Value::Int(7),
        ]);
        let resp2 = Value::Array(vec![
            bulk("permits"),
            Value::Int(4),
            bulk("available"),
            Value::Int(2),
            bulk("holders"),
            Value::Array(vec![holder.clone()]),
            bulk("waiters"),
            Value::Int(0),
        ]);
        let resp3 = Value::Map(vec![
            (Value::SimpleString("permits".into()), Value::Int(4)),
            (
                bulk("holders"),
                Value::Array(vec![Value::Map(vec![
                    (bulk("owner"), bulk("w1")),
                    (bulk("permits"), Value::Int(2)),
                    (bulk("ttl"), Value::Int(900)),
                    (bulk("keepalive_client"), Value::Int(7)),
                ])]),
            ),
        ]);
        for v in [resp2, resp3] {
            assert_eq!(int_field(&v, "permits"), Some(4));
            assert_eq!(
                sem_holders(&v),
                vec![SemHolder {
                    owner: "w1".into(),
                    permits: 2,
                    ttl: 900,
                    keepalive_client: Some(7)
                }]
            );
        }
        assert!(sem_holders(&Value::Nil).is_empty());
    }

    #[test]
    fn election_commands_and_replies() {
        let lease = Duration::from_secs(5);
        assert_eq!(
            line(&elect_campaign(
                "sched",
                "a",
                Some("10.0.0.5:80"),
                lease,
                Binding::Session("t"),
                Wait::Forever
            )),
            "ELECT.CAMPAIGN sched a VALUE 10.0.0.5:80 PX 5000 SESSION t BLOCK 0"
        );
        assert_eq!(
            line(&elect_campaign(
                "sched",
                "a",
                None,
                lease,
                Binding::Keepalive,
                Wait::No
            )),
            "ELECT.CAMPAIGN sched a PX 5000 KEEPALIVE"
        );
        assert_eq!(line(&elect_resign("s", "a")), "ELECT.RESIGN s a");
        assert_eq!(line(&elect_proclaim("s", "a", "v")), "ELECT.PROCLAIM s a v");
        assert_eq!(line(&elect_leader("s")), "ELECT.LEADER s");
        assert_eq!(
            line(&elect_observe(
                "s",
                7,
                Wait::For(Duration::from_millis(250))
            )),
            "ELECT.OBSERVE s TERM 7 BLOCK 250"
        );
        assert_eq!(campaigned(&Value::Nil), Ok(None));
        assert_eq!(campaigned(&Value::Int(12)), Ok(Some(12)));
        assert!(campaigned(&Value::Okay).is_err());
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let resp2 = Value::Array(vec![
            bulk("candidate"),
            bulk("a"),
            bulk("term"),
            Value::Int(12),
            bulk("value"),
            Value::Nil,
            bulk("ttl"),
            Value::Int(900),
        ]);
        let resp3 = Value::Map(vec![
            (bulk("candidate"), bulk("a")),
            (bulk("term"), Value::Int(12)),
            (bulk("value"), Value::Nil),
            (bulk("ttl"), Value::Int(900)),
        ]);
        for v in [resp2, resp3] {
            assert_eq!(
                leader(&v),
                Ok(Some(Leader {
                    candidate: Some("a".into()),
                    term: 12,
                    value: None,
                    ttl: 900
                }))
            );
        }
        assert_eq!(leader(&Value::Nil), Ok(None));
        assert!(leader(&Value::Int(3)).is_err());
        assert_eq!(
            message(b"idle 1 a k"),
            Some(Message::Lost {
                reason: Reason::Idle,
                owner: "a".into(),
                key: "k".into()
            })
        );
    }
}
