//! What a caller asks for: which lock (exclusive, or a read-write lock's
//! read or write side), for which owner, with which lease, and whether it
//! wants a fencing token. Queue entries carry one.

use std::sync::Arc;

/// A hash field name of the lock's layout, shared by the request, the state
/// and the changes that name it (one allocation per caller instead of one
/// per copy): an owner, or a writer's `<owner>:write` field, or `mode`.
pub type FieldName = Arc<[u8]>;

/// A side of a read-write lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Read,
    Write,
}

impl Side {
    /// The value of the hash's `mode` field for this side.
    pub fn mode(self) -> &'static [u8] {
        match self {
            Self::Read => b"read",
            Self::Write => b"write",
        }
    }
}

/// Which lock a caller asks for: LOCK.ACQUIRE's exclusive lock, a
/// read-write lock's read or write side, or a semaphore's permits
/// (SEM.ACQUIRE; SEM.TAKE's owner-less permits have an empty owner).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockKind {
    Exclusive,
    Read,
    Write,
    Permits(u32),
}

impl LockKind {
    /// The side of a read-write lock; `None` for the exclusive lock.
    pub fn side(self) -> Option<Side> {
        match self {
            Self::Exclusive | Self::Permits(_) => None,
            Self::Read => Some(Side::Read),
            Self::Write => Some(Side::Write),
        }
    }

    /// The permits a semaphore caller asks for; `None` for a lock.
    pub fn permits(self) -> Option<u32> {
        match self {
            Self::Permits(n) => Some(n),
            _ => None,
        }
    }
}

/// Whose connection keeps a KEEPALIVE hold renewed: the connection that
/// sent the command (`KEEPALIVE`; for a caller that waits, its own blocked
/// connection), or whichever connection names the session token when the
/// hold is granted (`SESSION token`, see `LOCK.SESSION`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeepAlive {
    Caller,
    Session(FieldName),
}

/// What one caller asks for, whether it is served at once or queued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub owner: FieldName,
    pub lease_ms: i64,
    pub fence: bool,
    pub kind: LockKind,
    /// KEEPALIVE or SESSION: once granted, the hold is bound to a
    /// connection and renewed by the server while it lives (the rules do not
    /// look at this; the server layer binds the hold when it answers the
    /// caller).
    pub keepalive: Option<KeepAlive>,
    /// An ELECT.CAMPAIGN's: once granted, the candidate leads (the shell
    /// writes its leader record).
    pub campaign: Option<Campaign>,
}

/// What a campaign asks for beside the lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Campaign {
    /// `VALUE`: written to the leader record when the candidate leads.
    pub value: Option<Box<[u8]>>,
}

/// Queue entries carry their request; the Redis layer adds its handles.
pub trait Queued {
    fn request(&self) -> &Request;

    /// Whether this entry is one key of a multi-lock waiter: it is served
    /// with all its keys at once (see [`crate::multilock`]), never by one
    /// key's settle, and nobody behind it is served before it.
    fn in_group(&self) -> bool {
        false
    }

    /// The Redisson fair waiters queued when this entry was: they go before
    /// it (see [`crate::fair`]); everyone queued there later goes after.
    fn fair_ahead(&self) -> &[FieldName] {
        &[]
    }

    /// Keeps in [`Self::fair_ahead`] only the owners `still_queued` says
    /// are: one that left Redisson's queue and queued again came after.
    fn retain_fair_ahead(&mut self, _still_queued: &dyn Fn(&[u8]) -> bool) {}
}

impl Queued for Request {
    fn request(&self) -> &Request {
        self
    }
}

#[cfg(test)]
impl Request {
    /// An exclusive lock's request, for the rules' tests.
    pub(crate) fn exclusive(owner: &str, lease_ms: i64) -> Self {
        Self {
            owner: owner.as_bytes().into(),
            lease_ms,
            fence: false,
            kind: LockKind::Exclusive,
            keepalive: None,
            campaign: None,
        }
    }
}
