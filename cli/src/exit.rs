//! Exit codes (sysexits(3) where one fits) and the failures that lead to them.

use std::fmt;

/// The lock was not acquired (busy with `-n`, or `--wait` ran out); `-E`
/// changes it, as flock(1)'s `-E`. Also `release` / `force-release` when a
/// name had nothing to release.
pub const CONFLICT: u8 = 1;
/// Bad arguments (EX_USAGE).
pub const USAGE: u8 = 64;
/// The server could not be reached, the connection was lost, or the server
/// is not ready to serve (loading, cluster down) (EX_UNAVAILABLE).
pub const UNAVAILABLE: u8 = 69;
/// Something failed inside redis-lock itself (EX_SOFTWARE).
pub const SOFTWARE: u8 = 70;
/// The lock was lost while the command ran (EX_TEMPFAIL: try again).
pub const LOST: u8 = 75;
/// The server answered an error redis-lock has no other code for (the key
/// holds something else, a read-write lock taken as exclusive...), or the
/// peer does not speak the Redis protocol at all (EX_PROTOCOL).
pub const SERVER_ERROR: u8 = 76;
/// The server refused us: a wrong user name or password, a password
/// required, an ACL without the permission, a database it does not have
/// (EX_NOPERM).
pub const REFUSED: u8 = 77;
/// The server does not have the lock module loaded (EX_CONFIG).
pub const NO_MODULE: u8 = 78;
/// The server refused the wait with `DEADLOCK`: it would close a cycle of
/// waits (or a read-write upgrade would wait for its own read holds). Not
/// acquired, the command not run. sysexits(3) has no code for it (its
/// EX_TEMPFAIL, 75, already means a lost lock): the one right after its
/// last, so that redis-lock's own failures stay one block (64-79) that
/// commands seldom use themselves.
pub const DEADLOCK: u8 = 79;
/// The command was found but could not be run (as shells answer).
pub const CANNOT_EXECUTE: u8 = 126;
/// The command was not found (as shells answer).
pub const NOT_FOUND: u8 = 127;

/// Why redis-lock stops without a status of the child to pass on. The
/// message is redis-lock's own words, one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    Usage(String),
    Unreachable(String),
    Refused(String),
    Server(String),
    NoModule(String),
    Deadlock(String),
    Internal(String),
    /// Exit with this code, after having said why (or with nothing to say).
    Code(u8),
}

impl Failure {
    pub fn code(&self) -> u8 {
        match self {
            Failure::Usage(_) => USAGE,
            Failure::Unreachable(_) => UNAVAILABLE,
            Failure::Refused(_) => REFUSED,
            Failure::Server(_) => SERVER_ERROR,
            Failure::NoModule(_) => NO_MODULE,
            Failure::Deadlock(_) => DEADLOCK,
            Failure::Internal(_) => SOFTWARE,
            Failure::Code(code) => *code,
        }
    }

    /// The message, if there is one to print.
    pub fn message(&self) -> Option<&str> {
        match self {
            Failure::Usage(m)
            | Failure::Unreachable(m)
            | Failure::Refused(m)
            | Failure::Server(m)
            | Failure::NoModule(m)
            | Failure::Deadlock(m)
            | Failure::Internal(m) => Some(m),
            Failure::Code(_) => None,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.message() {
            Some(m) => f.write_str(m),
            None => write!(f, "exit {}", self.code()),
        }
    }
}

// Whether a redis error means the connection is gone or the server did not answer in time
// (`is_connection_error`), or that the connection cannot be used any more (`is_unusable`:
// gone, or out of step): the client library's classification.
pub use redis_lock_client::{is_connection_error, is_unusable};

/// The exit status a shell would give for a child that exited with `code`
/// or was killed by `signal`: the code, or 128 + the signal number.
pub fn child_status(code: Option<i32>, signal: Option<i32>) -> u8 {
    match (code, signal) {
        (Some(c), _) => (c & 0xff) as u8,
        (None, Some(s)) => (128 + (s & 0x7f)) as u8,
        (None, None) => SOFTWARE,
    }
}

/// The status of a command that could not be started: 127 when it does not
/// exist, 126 when it exists but cannot be run.
pub fn spawn_status(e: &std::io::Error) -> u8 {
    if e.kind() == std::io::ErrorKind::NotFound {
        NOT_FOUND
    } else {
        CANNOT_EXECUTE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn child_statuses_as_a_shell() {
        assert_eq!(child_status(Some(0), None), 0);
        assert_eq!(child_status(Some(7), None), 7);
        assert_eq!(child_status(Some(255), None), 255);
        assert_eq!(child_status(None, Some(libc::SIGTERM)), 143);
        assert_eq!(child_status(None, Some(libc::SIGKILL)), 137);
        assert_eq!(child_status(None, Some(libc::SIGINT)), 130);
        assert_eq!(child_status(None, None), SOFTWARE);
    }

    #[test]
    fn spawn_errors() {
        let nf = std::io::Error::from(std::io::ErrorKind::NotFound);
        let pd = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        assert_eq!(spawn_status(&nf), 127);
        assert_eq!(spawn_status(&pd), 126);
    }

    #[test]
    fn failure_codes_are_distinct() {
        let codes = [
            CONFLICT,
            USAGE,
            UNAVAILABLE,
            SOFTWARE,
            LOST,
            SERVER_ERROR,
            REFUSED,
            NO_MODULE,
            DEADLOCK,
            CANNOT_EXECUTE,
            NOT_FOUND,
        ];
        for (i, a) in codes.iter().enumerate() {
            for b in &codes[i + 1..] {
                assert_ne!(a, b);
            }
        }
        assert_eq!(Failure::Usage("x".into()).code(), 64);
        assert_eq!(Failure::Unreachable("x".into()).code(), 69);
        assert_eq!(Failure::Server("x".into()).code(), 76);
        assert_eq!(Failure::Refused("x".into()).code(), 77);
        assert_eq!(Failure::NoModule("x".into()).code(), 78);
        assert_eq!(Failure::Deadlock("x".into()).code(), 79);
        assert_eq!(Failure::Code(42).code(), 42);
        assert_eq!(Failure::Code(42).message(), None);
    }

    #[test]
    fn connection_errors() {
        let io = redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(is_connection_error(&io));
        assert!(is_unusable(&io));
        let reply = redis::make_extension_error("WRONGTYPE".into(), Some("x".into()));
        assert!(!is_connection_error(&reply));
        assert!(!is_unusable(&reply));
    }
}
