//! Errors in redis-lock's own words: every failure that comes from the
//! server or the connection becomes one line and one exit code, by its
//! cause: unreachable (69), refused (77: login, ACL, database), the module
//! not loaded (78), or another error reply / not a Redis server (76).
//! Error replies are told apart by their code (the first word) and the
//! shape of their text, not one server's exact wording.

use std::error::Error as _;
use std::io;

use redis::{ConnectionInfo, ErrorKind, RedisError};

use crate::conn::{self, ConnectError};
use crate::duration::spec;
use crate::exit::{self, Failure};

/// Who we talk to, for messages.
struct Peer {
    server: String,
    user: String,
}

impl Peer {
    fn of(info: &ConnectionInfo) -> Peer {
        Peer {
            server: conn::describe(info),
            user: info
                .redis_settings()
                .username()
                .unwrap_or("default")
                .to_string(),
        }
    }
}

/// A connection that could not be made (or whose database was refused).
pub fn connect_failure(info: &ConnectionInfo, e: &ConnectError) -> Failure {
    let peer = Peer::of(info);
    match e {
        ConnectError::Select(db, e) => select_failure(&peer, *db, e),
        ConnectError::Connect(e) => {
            if exit::is_connection_error(e) {
                return Failure::Unreachable(format!(
                    "cannot connect to {}: {}",
                    peer.server,
                    io_reason(e)
                ));
            }
            // The handshake (HELLO, AUTH): a refusal, in words when it is
            // one of the login's.
            match (e.code(), e.detail()) {
                (Some(code @ ("NOAUTH" | "WRONGPASS" | "NOPERM")), detail) => reply(
                    &peer,
                    &["HELLO".to_string()],
                    code,
                    detail.unwrap_or_default(),
                )
                .unwrap_or_else(|| wrong_login(&peer)),
                // HELLO unknown: a server older than RESP3.
                (Some(code), Some(detail)) if is_unknown_command(code, detail) => {
                    resp3_unknown(&peer)
                }
                (Some(code), detail) if e.kind() != ErrorKind::AuthenticationFailed => {
                    Failure::Refused(format!(
                        "{} refused the connection{}",
                        peer.server,
                        answered(code, detail.unwrap_or_default())
                    ))
                }
                _ => other(&peer, &[], e),
            }
        }
    }
}

/// A command that failed: `args` is what was sent.
pub fn command_failure(info: &ConnectionInfo, args: &[String], e: &RedisError) -> Failure {
    let peer = Peer::of(info);
    if exit::is_connection_error(e) {
        return Failure::Unreachable(lost(&peer, e));
    }
    if let Some(code) = e.code() {
        let detail = e.detail().unwrap_or_default();
        if let Some(f) = reply(&peer, args, code, detail) {
            return f;
        }
        return Failure::Server(format!(
            "{} failed on {}{}",
            command_line(args),
            peer.server,
            answered(code, detail)
        ));
    }
    other(&peer, args, e)
}

/// The words of a failure, for a message that goes on (the lock could not
/// be confirmed, not released...).
pub fn reason(info: &ConnectionInfo, args: &[String], e: &RedisError) -> String {
    command_failure(info, args, e).to_string()
}

fn lost(peer: &Peer, e: &RedisError) -> String {
    if e.is_timeout() {
        format!("{} did not answer in time", peer.server)
    } else {
        format!("lost the connection to {}: {}", peer.server, io_reason(e))
    }
}

/// What is left: not Redis, a refused login, or a client-side error.
fn other(peer: &Peer, args: &[String], e: &RedisError) -> Failure {
    match e.kind() {
        ErrorKind::Parse => Failure::Server(format!(
            "{} does not answer in the Redis protocol: is it a Redis or Valkey server?",
            peer.server
        )),
        ErrorKind::AuthenticationFailed => wrong_login(peer),
        ErrorKind::RESP3NotSupported => resp3_unknown(peer),
        _ => Failure::Internal(format!(
            "{}{}: {}",
            command_line(args),
            if args.is_empty() { "connecting" } else { "" },
            first_line(&e.to_string())
        )),
    }
}

fn resp3_unknown(peer: &Peer) -> Failure {
    Failure::Server(format!(
        "{} does not speak RESP3: leave protocol=resp3 out of the URL",
        peer.server
    ))
}

fn wrong_login(peer: &Peer) -> Failure {
    Failure::Refused(format!(
        "{} refused the login of user {}: wrong user name or password (or the user is disabled)",
        peer.server, peer.user
    ))
}

fn select_failure(peer: &Peer, db: i64, e: &RedisError) -> Failure {
    if exit::is_connection_error(e) {
        return Failure::Unreachable(lost(peer, e));
    }
    let detail = e.detail().unwrap_or_default().to_ascii_lowercase();
    match e.code() {
        Some("NOPERM") | Some("NOAUTH") | Some("WRONGPASS") => reply(
            peer,
            &["SELECT".to_string(), db.to_string()],
            e.code().unwrap_or_default(),
            e.detail().unwrap_or_default(),
        )
        .unwrap_or_else(|| wrong_login(peer)),
        _ if detail.contains("range") => Failure::Refused(format!(
            "{} has no database {db} (the /{db} of the URL): it has fewer databases",
            peer.server
        )),
        _ if detail.contains("cluster") => Failure::Refused(format!(
            "{} is a cluster node: it has database 0 only, leave /{db} out of the URL",
            peer.server
        )),
        code => Failure::Refused(format!(
            "{} refused database {db}{}",
            peer.server,
            answered(code.unwrap_or("ERR"), e.detail().unwrap_or_default())
        )),
    }
}

/// The lock names in a LOCK.* command's arguments.
fn names(args: &[String]) -> Vec<&str> {
    let Some(cmd) = args.first() else {
        return Vec::new();
    };
    let cmd = cmd.to_ascii_uppercase();
    if cmd == "LOCK.MACQUIRE" || cmd == "LOCK.MRELEASE" {
        let n: usize = args.get(1).and_then(|n| n.parse().ok()).unwrap_or(0);
        return args.iter().skip(2).take(n).map(String::as_str).collect();
    }
    if (cmd.starts_with("LOCK.") || cmd.starts_with("SEM.") || cmd.starts_with("ELECT."))
        && cmd != "LOCK.QUEUES"
    {
        return args.get(1).map(String::as_str).into_iter().collect();
    }
    Vec::new()
}

/// The owner in a LOCK.* command's arguments (after the names).
fn owner(args: &[String]) -> Option<&str> {
    let cmd = args.first()?.to_ascii_uppercase();
    let at = if cmd == "LOCK.MACQUIRE" || cmd == "LOCK.MRELEASE" {
        2 + names(args).len()
    } else {
        2
    };
    args.get(at).map(String::as_str)
}

/// The `PX` lease in ms, as sent.
fn lease_ms(args: &[String]) -> Option<u64> {
    let at = args.iter().position(|a| a.eq_ignore_ascii_case("PX"))?;
    args.get(at + 1)?.parse().ok()
}

/// `LOCK.ACQUIRE job` (the command and its names), for messages.
fn command_line(args: &[String]) -> String {
    let mut words = vec![args.first().map(String::as_str).unwrap_or_default()];
    words.extend(names(args));
    words.join(" ").trim().to_string()
}

/// `: the server answered "CODE detail"`: the last resort, for an error
/// redis-lock has no words of its own for.
fn answered(code: &str, detail: &str) -> String {
    format!(
        ": the server answered \"{}\"",
        first_line(format!("{code} {detail}").trim())
    )
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or_default().trim().to_string()
}

/// A number following "at least" in a text: `at least 1000 ms`.
fn at_least(text: &str) -> Option<u64> {
    let rest = &text[text.find("at least")? + "at least".len()..];
    let digits: String = rest
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// Whether an `ERR` reply says that the command does not exist: `unknown
/// command 'LOCK.ACQUIRE', with args beginning with: ...` (Redis 7,
/// Valkey), `` unknown command `LOCK.ACQUIRE` `` (Redis 6 and before); the
/// client library's rule.
pub use redis_lock_client::proto::is_unknown_command;

/// Whether `cmd` came with the module's version 1.1.0 (an older module
/// does not know it).
fn newer(cmd: &str) -> bool {
    cmd.eq_ignore_ascii_case("LOCK.QUEUES") || cmd.eq_ignore_ascii_case("LOCK.WAITERS")
}

/// Whether `cmd` is a semaphore's (`SEM.*`), which came after 1.1.0.
fn semaphore(cmd: &str) -> bool {
    cmd.get(..4).is_some_and(|p| p.eq_ignore_ascii_case("SEM."))
}

/// Whether `cmd` is an election's (`ELECT.*`), which came with 1.2.0.
fn election(cmd: &str) -> bool {
    cmd.get(..6)
        .is_some_and(|p| p.eq_ignore_ascii_case("ELECT."))
}

/// An error reply in words; `None` when redis-lock has no words for it.
fn reply(peer: &Peer, args: &[String], code: &str, detail: &str) -> Option<Failure> {
    let server = &peer.server;
    let cmd = args.first().map(String::as_str).unwrap_or_default();
    let names = names(args);
    let name = names.join(", ");
    let owner = owner(args).unwrap_or("the owner");
    let lower = detail.to_ascii_lowercase();
    Some(match code {
        "NOAUTH" => Failure::Refused(format!(
            "{server} requires a password: put it in the URL (redis://:PASSWORD@HOST:PORT, \
             or redis://USER:PASSWORD@HOST:PORT)"
        )),
        "WRONGPASS" => wrong_login(peer),
        "NOPERM" => Failure::Refused(if lower.contains("key") && !names.is_empty() {
            format!(
                "the ACL of {server} does not let user {} use the key {name}",
                peer.user
            )
        } else if lower.contains("key") {
            format!(
                "the ACL of {server} does not let user {} use the keys of {cmd}",
                peer.user
            )
        } else {
            format!(
                "the ACL of {server} does not let user {} run {cmd}",
                peer.user
            )
        }),
        "ERR" if is_unknown_command(code, detail) && semaphore(cmd) => Failure::NoModule(format!(
            "{server} does not know {cmd}: the lock module is not loaded there, or too old to \
             have semaphores"
        )),
        "ERR" if is_unknown_command(code, detail) && election(cmd) => Failure::NoModule(format!(
            "{server} does not know {cmd}: the lock module is not loaded there, or older than \
             1.2.0 (elections)"
        )),
        "ERR" if is_unknown_command(code, detail) && newer(cmd) => Failure::NoModule(format!(
            "{server} does not know {cmd}: the lock module is not loaded there, or older than \
             1.1.0"
        )),
        "ERR" if is_unknown_command(code, detail) => Failure::NoModule(format!(
            "the lock module is not loaded on {server} (it does not know {cmd}): load \
             liblock.so with --loadmodule or a loadmodule line in its configuration"
        )),
        "WRONGTYPE" if semaphore(cmd) => Failure::Server(format!(
            "{name} is not a semaphore: the key holds another kind of value"
        )),
        "WRONGTYPE" if election(cmd) => Failure::Server(format!(
            "{name} is not an election: the key holds another kind of value (or a read-write lock)"
        )),
        "NOTOWNER" if election(cmd) => Failure::Server(format!("{owner} does not lead {name}")),
        "WRONGTYPE" => Failure::Server(if lower.contains("read-write lock") {
            format!("{name} is a read-write lock: use --read or --write")
        } else if lower.contains("exclusive lock") {
            format!("{name} is an exclusive lock, not a read-write lock: leave out --read and --write")
        } else if lower.contains("token") {
            format!("the fencing token key of {name} holds another kind of value")
        } else if lower.contains("not a lock") {
            format!("{name} is not a lock: the key holds a hash of another layout")
        } else {
            format!("{name} is not a lock: the key holds another kind of value")
        }),
        "CROSSSLOT" if names.len() > 1 => Failure::Server(format!(
            "{name} hash to different slots of the cluster: give them one {{hash tag}}, \
             as in {{job}}:a {{job}}:b"
        )),
        "CROSSSLOT" => Failure::Server(format!(
            "{name}: the lock's other keys hash to another slot of the cluster: use a name \
             without '{{' or with a non-empty {{hash tag}}"
        )),
        // A cycle of waits (each step named by the server), or a read-write upgrade beside
        // other readers: the server's own words, which name what redis-lock cannot know.
        "DEADLOCK" => Failure::Deadlock(format!(
            "not waiting for {name}: the server refused the wait, it would deadlock: {}",
            first_line(detail)
        )),
        "NOTOWNER" => Failure::Server(format!("{owner} holds no hold of {name}")),
        "READONLY" => Failure::Server(format!(
            "{server} is a replica: point the URL at its master"
        )),
        "LOADING" => Failure::Unreachable(format!(
            "{server} is loading its data set: try again"
        )),
        "CLUSTERDOWN" | "MASTERDOWN" => Failure::Unreachable(format!(
            "{server} cannot serve now (its cluster or master is down): try again"
        )),
        "TRYAGAIN" => Failure::Unreachable(format!(
            "{server} cannot serve {name} now (its hash slot is moving): try again"
        )),
        "BUSY" => Failure::Unreachable(format!("{server} is busy: try again")),
        "ERR" if lower.contains("lease") && lower.contains("keepalive") => {
            let lease = lease_ms(args).map_or_else(|| "the lease".to_string(), spec);
            Failure::Server(match at_least(&lower) {
                Some(min) => format!(
                    "--lease {lease} is too short for {server}: a KEEPALIVE hold needs a lease \
                     of at least {}",
                    spec(min)
                ),
                None => format!(
                    "{server} refused --lease {lease} for a KEEPALIVE hold{}",
                    answered(code, detail)
                ),
            })
        }
        "ERR" if lower.contains("reserved") => Failure::Server(format!(
            "owner {owner} cannot hold a read-write lock: it must not be 'mode' or end with ':write'"
        )),
        "ERR" if lower.contains("read holds") && lower.contains("at most") => {
            Failure::Server(format!(
                "{owner} already has as many read holds of {name} as one owner may take"
            ))
        }
        "ERR" if lower.contains("both read and write") => Failure::Server(format!(
            "{owner} holds both read and write holds of {name}: use --read or --write"
        )),
        _ => return None,
    })
}

/// An I/O failure in words.
fn io_reason(e: &RedisError) -> String {
    let io = e.source().and_then(|s| s.downcast_ref::<io::Error>());
    match io.map(io::Error::kind) {
        Some(io::ErrorKind::ConnectionRefused) => "connection refused".into(),
        Some(io::ErrorKind::NotFound) => "no such socket".into(),
        Some(io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock) => "no answer in time".into(),
        Some(
            io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::UnexpectedEof
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::NotConnected,
        ) => "the connection was closed".into(),
        Some(_) => io.map_or_else(String::new, |e| without_errno(&e.to_string())),
        None => without_errno(&first_line(&e.to_string())),
    }
}

/// `Network is unreachable (os error 101)` -> `network is unreachable`.
fn without_errno(text: &str) -> String {
    let text = match text.rfind(" (os error ") {
        Some(at) if text.ends_with(')') => &text[..at],
        _ => text,
    };
    let mut chars = text.chars();
    match chars.next() {
        Some(c) => c.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer() -> Peer {
        Peer {
            server: "h:1".into(),
            user: "alice".into(),
        }
    }

    fn args(line: &str) -> Vec<String> {
        line.split(' ').map(String::from).collect()
    }

    fn said(code: &str, detail: &str, line: &str) -> Failure {
        reply(&peer(), &args(line), code, detail).unwrap_or(Failure::Code(0))
    }

    #[test]
    fn unknown_command_by_code_and_shape() {
        for detail in [
            "unknown command 'LOCK.ACQUIRE', with args beginning with: 'job' ",
            "unknown command `LOCK.ACQUIRE`, with args beginning with: `job`, ",
            "Unknown command 'lock.info'",
        ] {
            assert!(is_unknown_command("ERR", detail), "{detail}");
            assert!(matches!(
                said("ERR", detail, "LOCK.ACQUIRE job o PX 1"),
                Failure::NoModule(_)
            ));
        }
        assert_eq!(
            said("ERR", "unknown command 'LOCK.QUEUES'", "LOCK.QUEUES COUNT 5").to_string(),
            "h:1 does not know LOCK.QUEUES: the lock module is not loaded there, or older than 1.1.0"
        );
        assert!(!is_unknown_command("ERR", "unknown subcommand 'x'"));
        assert!(!is_unknown_command("NOPERM", "unknown command"));
    }

    #[test]
    fn refusals() {
        assert_eq!(
            said("NOAUTH", "Authentication required.", "LOCK.INFO j").code(),
            77
        );
        assert_eq!(
            said("WRONGPASS", "invalid username-password pair", "HELLO").to_string(),
            "h:1 refused the login of user alice: wrong user name or password (or the user is disabled)"
        );
        assert_eq!(
            said(
                "NOPERM",
                "User alice has no permissions to run the 'lock.acquire' command",
                "LOCK.ACQUIRE job o PX 1"
            )
            .to_string(),
            "the ACL of h:1 does not let user alice run LOCK.ACQUIRE"
        );
        assert_eq!(
            said(
                "NOPERM",
                "No permissions to access a key",
                "LOCK.ACQUIRE job o PX 1"
            )
            .to_string(),
            "the ACL of h:1 does not let user alice use the key job"
        );
    }

    #[test]
    fn error_replies() {
        assert_eq!(
            said(
                "WRONGTYPE",
                "key holds a read-write lock: use LOCK.RACQUIRE or LOCK.WACQUIRE",
                "LOCK.ACQUIRE cfg o PX 1"
            )
            .to_string(),
            "cfg is a read-write lock: use --read or --write"
        );
        assert_eq!(
            said(
                "WRONGTYPE",
                "Operation against a key holding the wrong kind of value",
                "LOCK.INFO s"
            )
            .to_string(),
            "s is not a lock: the key holds another kind of value"
        );
        assert_eq!(
            said(
                "WRONGTYPE",
                "key holds a string that is not a semaphore's permit count",
                "SEM.INIT pool 2"
            )
            .to_string(),
            "pool is not a semaphore: the key holds another kind of value"
        );
        assert_eq!(
            said("ERR", "unknown command 'SEM.INIT'", "SEM.INIT pool 2").to_string(),
            "h:1 does not know SEM.INIT: the lock module is not loaded there, or too old to \
             have semaphores"
        );
        assert_eq!(
            said("CROSSSLOT", "x", "LOCK.MACQUIRE 2 a b o PX 1").code(),
            76
        );
        assert_eq!(said("LOADING", "x", "LOCK.INFO a").code(), 69);
        assert!(reply(&peer(), &args("LOCK.INFO a"), "ERR", "something new").is_none());
    }

    #[test]
    fn a_lease_below_the_servers_floor() {
        assert_eq!(
            said(
                "ERR",
                "KEEPALIVE needs a lease of at least 1000 ms",
                "LOCK.ACQUIRE job o PX 100 BLOCK 0 KEEPALIVE"
            )
            .to_string(),
            "--lease 100ms is too short for h:1: a KEEPALIVE hold needs a lease of at least 1s"
        );
        assert!(said(
            "ERR",
            "KEEPALIVE lease too short",
            "LOCK.ACQUIRE job o PX 100 KEEPALIVE"
        )
        .to_string()
        .starts_with("h:1 refused --lease 100ms for a KEEPALIVE hold"));
    }

    #[test]
    fn arguments() {
        let a = args("LOCK.MACQUIRE 2 a b me PX 300 BLOCK 0");
        assert_eq!(names(&a), ["a", "b"]);
        assert_eq!(owner(&a), Some("me"));
        assert_eq!(lease_ms(&a), Some(300));
        assert_eq!(command_line(&a), "LOCK.MACQUIRE a b");
        assert_eq!(names(&args("LOCK.QUEUES COUNT 5")), Vec::<&str>::new());
        assert_eq!(answered("ERR", "a\nb"), ": the server answered \"ERR a\"");
        assert_eq!(
            without_errno("Network is unreachable (os error 101)"),
            "network is unreachable"
        );
        assert_eq!(at_least("needs at least 250 ms"), Some(250));
    }
}
