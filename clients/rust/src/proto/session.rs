//! The session's commands (`LOCK.SESSION`, its channel) and the loss messages sent on
//! that channel ([`Message`], [`Lost`], [`Reason`]).

/// `LOCK.SESSION token`.
pub fn session(token: &str) -> Vec<String> {
    vec!["LOCK.SESSION".into(), token.into()]
}

/// The channel of a session's loss messages: `__lock__:session:<token>`.
pub fn channel(token: &str) -> String {
    format!("__lock__:session:{token}")
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
