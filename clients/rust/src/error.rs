//! Typed errors, classified from the server's reply by its leading code word.

use std::fmt;

use crate::proto::Lost;

/// What went wrong with a lock, semaphore or latch operation.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// Held by another owner: not acquired at once (`Wait::No`) or within the wait.
    Busy,
    /// The owner holds no hold on this lock (`NOTOWNER`): released already, or its lease ran out.
    NotOwner,
    /// `EXPIRED`: the owner's permits' lease ended before a release or renewal (they are back
    /// in the semaphore's available count).
    Expired,
    /// `GONE`: the latch expired or was deleted before reaching zero (the detail says which).
    Gone(String),
    /// `DEADLOCK`: the server refused a wait that could never end: it would close a cycle of
    /// waits (the message names each step: owner, key, next owner; see [`crate::Lock::acquire_as`]),
    /// or a reader asked for the write lock while other readers hold it. The caller was not
    /// queued and keeps what it held: release, then take the locks again in one fixed order.
    Deadlock(String),
    /// The hold was lost (see [`Lost`]) before the operation.
    Lost(Lost),
    /// The server could not be reached, the connection broke or timed out, or the server
    /// is not serving (loading, failing over, a replica, cluster down). The operation may
    /// be tried again.
    Unavailable(redis::RedisError),
    /// The server does not know the `LOCK.*` commands: load the module with
    /// `--loadmodule /path/to/liblock.so` (or `loadmodule` in redis.conf).
    ModuleNotLoaded(String),
    /// The server refused who the client is or what it may do: `WRONGPASS` (a wrong user or
    /// password), `NOAUTH` (a password is needed), `NOPERM` (an ACL user without the right
    /// to run a command or touch a key), or the redis crate's
    /// [`redis::ErrorKind::AuthenticationFailed`]. Never retried: fix the credentials or the
    /// user's ACL.
    Auth(redis::RedisError),
    /// The lease asked for (a session's [`crate::Options::lease`], a lock's, a semaphore's
    /// or an election's) is shorter than the server can keep alive: its
    /// `keepalive_min_lease_ms` (`INFO lock`; about 700 ms at the default `hz 10`, less at a
    /// higher `hz`). Refused before anything is sent.
    LeaseTooShort {
        /// The lease asked for, in ms.
        lease_ms: u64,
        /// The server's shortest lease, in ms.
        min_lease_ms: u64,
    },
    /// The session was closed.
    Closed,
    /// Any other error (`WRONGTYPE`, `NOPERM`, a syntax error, ...).
    Other(redis::RedisError),
}

pub type Result<T> = std::result::Result<T, Error>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Busy => f.write_str("the lock is busy: held by another owner"),
            Error::NotOwner => {
                f.write_str("not the owner: the hold was released or its lease ran out")
            }
            Error::Expired => f.write_str("expired: the permits' lease ended before this call"),
            Error::Gone(m) => write!(f, "gone: {m}"),
            Error::Deadlock(m) => write!(f, "deadlock: {m}"),
            Error::Lost(l) => write!(f, "the lock was lost: {l}"),
            Error::Unavailable(e) => write!(f, "the server is unavailable: {e}"),
            Error::ModuleNotLoaded(m) => write!(
                f,
                "the lock module is not loaded on the server ({m}): start the server with \
                 --loadmodule /path/to/liblock.so"
            ),
            Error::Auth(e) => write!(
                f,
                "the server refused the credentials or the permission: {e} (check the user, \
                 the password and its ACL)"
            ),
            Error::LeaseTooShort {
                lease_ms,
                min_lease_ms,
            } => write!(
                f,
                "lease {lease_ms} ms is below this server's minimum of {min_lease_ms} ms \
                 (keepalive_min_lease_ms; raise the lease or the server's hz)"
            ),
            Error::Closed => f.write_str("the session is closed"),
            Error::Other(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Unavailable(e) | Error::Auth(e) | Error::Other(e) => Some(e),
            _ => None,
        }
    }
}

/// Whether a redis error means the connection is gone, was refused or did not answer in
/// time (as opposed to an answer from the server).
pub fn is_connection_error(e: &redis::RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || e.kind() == redis::ErrorKind::Io
}

/// Whether a connection that gave this error cannot be used any more: it is gone, or what
/// came on it could not be read as Redis replies.
pub fn is_unusable(e: &redis::RedisError) -> bool {
    is_connection_error(e) || e.kind() == redis::ErrorKind::Parse
}

/// Whether an error reply says the command is unknown (`ERR unknown command 'LOCK.ACQUIRE'`):
/// the module is not loaded. The code word is `ERR`, so the detail is read too.
pub fn is_unknown_command(e: &redis::RedisError) -> bool {
    crate::proto::is_unknown_command(e.code().unwrap_or_default(), e.detail().unwrap_or_default())
}

/// Whether the server refused the client's identity or permissions (`WRONGPASS`, `NOAUTH`,
/// `NOPERM`, or a failed `AUTH` / `HELLO AUTH` in the redis crate's words): retrying cannot
/// help.
pub fn is_auth_error(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("WRONGPASS" | "NOAUTH" | "NOPERM"))
}

/// Error codes of a server that is not serving now, but may again (or another will).
const UNAVAILABLE_CODES: &[&str] = &[
    "LOADING",
    "CLUSTERDOWN",
    "MASTERDOWN",
    "READONLY",
    "UNBLOCKED",
    "TRYAGAIN",
    "BUSY",
];

/// A reply of `what` (a command's name) that is none of the shapes it may take: shared by
/// the objects, which read their own commands' replies.
#[cfg(feature = "session")]
pub(crate) fn unexpected(what: &str, v: &redis::Value) -> Error {
    Error::Other(redis::RedisError::from((
        redis::ErrorKind::Parse,
        "unexpected reply",
        format!("{what}: {v:?}"),
    )))
}

impl From<redis::RedisError> for Error {
    fn from(e: redis::RedisError) -> Error {
        if is_auth_error(&e) {
            return Error::Auth(e);
        }
        if is_unusable(&e) {
            return Error::Unavailable(e);
        }
        match e.code() {
            Some("NOTOWNER") => Error::NotOwner,
            Some("EXPIRED") => Error::Expired,
            Some("GONE") => Error::Gone(e.detail().unwrap_or_default().to_string()),
            Some("DEADLOCK") => Error::Deadlock(e.detail().unwrap_or_default().to_string()),
            Some(code) if UNAVAILABLE_CODES.contains(&code) => Error::Unavailable(e),
            _ if is_unknown_command(&e) => {
                Error::ModuleNotLoaded(e.detail().unwrap_or_default().to_string())
            }
            _ => Error::Other(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(code: &str, detail: &str) -> redis::RedisError {
        redis::make_extension_error(code.into(), Some(detail.into()))
    }

    #[test]
    fn by_code_word() {
        assert!(matches!(
            Error::from(reply("NOTOWNER", "the owner holds no hold on this lock")),
            Error::NotOwner
        ));
        assert!(matches!(
            Error::from(reply("DEADLOCK", "x")),
            Error::Deadlock(_)
        ));
        assert!(matches!(
            Error::from(reply("EXPIRED", "the owner's permits' lease ended")),
            Error::Expired
        ));
        assert!(matches!(
            Error::from(reply("GONE", "the latch expired before reaching zero")),
            Error::Gone(m) if m.starts_with("the latch expired")
        ));
        assert!(matches!(
            Error::from(reply("LOADING", "x")),
            Error::Unavailable(_)
        ));
        assert!(matches!(
            Error::from(reply("WRONGTYPE", "x")),
            Error::Other(_)
        ));
        let io = redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(matches!(Error::from(io), Error::Unavailable(_)));
        for code in ["WRONGPASS", "NOAUTH", "NOPERM"] {
            assert!(
                matches!(Error::from(reply(code, "x")), Error::Auth(_)),
                "{code}"
            );
        }
        let failed = redis::RedisError::from((
            redis::ErrorKind::AuthenticationFailed,
            "Password authentication failed",
        ));
        assert!(matches!(Error::from(failed), Error::Auth(_)));
    }

    #[test]
    fn a_lease_too_short_is_told_in_the_leases_words() {
        let text = Error::LeaseTooShort {
            lease_ms: 300,
            min_lease_ms: 704,
        }
        .to_string();
        assert!(
            text.contains("lease 300 ms") && text.contains("minimum of 704 ms"),
            "{text}"
        );
        assert!(!text.contains("KEEPALIVE"), "{text}");
    }
}
