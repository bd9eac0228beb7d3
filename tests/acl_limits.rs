//! ACL users and server limits: key patterns on the lock and its fencing
//! token key, callers without a user (master link, AOF), `maxclients` filled
//! by waiters, `maxmemory` with `noeviction`, leases past their deadline but
//! not yet expired, 1 MB owners, durations near i64::MAX.

use crate::common;
use common::commands::{self, Cmd};
use common::*;

use std::fs::{self, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread;

/// The module's refusal of a fencing token key outside the user's patterns.
fn token_noperm(token_key: &str) -> String {
    format!("NOPERM this user has no permissions to access the fencing token key '{token_key}'")
}

// ---------------------------------------------------------------- helpers

fn acl_setuser(con: &mut Connection, user: &str, rules: &[&str]) {
    let mut args = vec!["ACL", "SETUSER", user];
    args.extend_from_slice(rules);
    let _: () = q(con, &args);
}

/// A connection authenticated as `user` (password `pw`).
fn user_client(server: &Server, user: &str) -> Connection {
    let url = format!("redis://{user}:pw@127.0.0.1:{}/", server.port);
    let con = redis::Client::open(url)
        .expect("client")
        .get_connection_with_timeout(std::time::Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("connect as {user}: {e}"));
    con.set_read_timeout(Some(PATIENCE)).expect("read timeout");
    con
}

/// `app`: `~app:*`, `+lock.acquire +lock.release` and nothing else.
fn create_app_user(admin: &mut Connection) {
    acl_setuser(
        admin,
        "app",
        &["on", ">pw", "~app:*", "+lock.acquire", "+lock.release"],
    );
}

/// Redis refuses a command or a declared key (the lock) outside the user's
/// rules before the module runs, in its own words (which changed in 7.4):
/// the error code, and what ACL LOG recorded as refused (`reason` is `key`
/// or `command`, `object` the key or the command).
fn assert_refused_by_acl(
    con: &mut Connection,
    admin: &mut Connection,
    args: &[&str],
    reason: &str,
    object: &str,
) {
    assert_eq!(err_code(con, args), "NOPERM", "{args:?}");
    let entry = newest_acl_log(admin);
    assert_eq!(field(&entry, "reason").as_deref(), Some(reason), "{args:?}");
    assert_eq!(field(&entry, "object").as_deref(), Some(object), "{args:?}");
}

/// The newest ACL LOG entry as (field, text) pairs.
fn newest_acl_log(con: &mut Connection) -> Vec<(String, String)> {
    match q::<Value>(con, &["ACL", "LOG", "1"]) {
        Value::Array(entries) => match entries.first() {
            Some(Value::Array(kv)) => kv.chunks(2).map(|p| (text(&p[0]), text(&p[1]))).collect(),
            other => panic!("ACL LOG entry: {other:?}"),
        },
        other => panic!("ACL LOG: {other:?}"),
    }
}

/// Every key with its type, value dump and expiry: "nothing was written".
fn snapshot(con: &mut Connection) -> Vec<(String, Value, i64)> {
    let mut keys: Vec<String> = q(con, &["KEYS", "*"]);
    keys.sort();
    keys.into_iter()
        .map(|k| {
            let dump: Value = q(con, &["DUMP", &k]);
            let at: i64 = q(con, &["PEXPIRETIME", &k]);
            (k, dump, at)
        })
        .collect()
}

fn token(con: &mut Connection, token_key: &str) -> Option<String> {
    q(con, &["GET", token_key])
}

fn used_memory(con: &mut Connection) -> i64 {
    info_field(con, "memory", "used_memory")
}

/// A numeric INFO field read on `con` (no new connection).
fn info_field(con: &mut Connection, section: &str, name: &str) -> i64 {
    let info: String = q(con, &["INFO", section]);
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("INFO {section} has no {name}"))
}

fn int(v: Value) -> i64 {
    match v {
        Value::Int(n) => n,
        other => panic!("expected an integer reply, got {other:?}"),
    }
}

// ---------------------------------------------------------------- ACL

#[test]
fn restricted_user_locks_its_keys_and_nothing_else() {
    let server = Server::start();
    let mut admin = server.client();
    create_app_user(&mut admin);
    let mut app = user_client(&server, "app");

    assert_eq!(q::<i64>(&mut app, &["LOCK.ACQUIRE", "app:x", "w1"]), 1);
    assert_eq!(q::<i64>(&mut app, &["LOCK.ACQUIRE", "app:x", "w1"]), 2);
    assert_eq!(
        lock_field(&mut admin, "app:x", "holds").as_deref(),
        Some("2")
    );
    assert_eq!(q::<i64>(&mut app, &["LOCK.RELEASE", "app:x", "w1"]), 1);
    assert_eq!(q::<i64>(&mut app, &["LOCK.RELEASE", "app:x", "w1"]), 0);
    assert!(!exists(&mut admin, "app:x"));

    // The lock key is declared: Redis refuses it before the module runs.
    assert_eq!(q::<i64>(&mut admin, &["LOCK.ACQUIRE", "other:x", "a"]), 1);
    let before = snapshot(&mut admin);
    for (args, key) in [
        (&["LOCK.ACQUIRE", "other:x", "w1"][..], "other:x"),
        (&["LOCK.ACQUIRE", "other:y", "w1", "BLOCK", "0"], "other:y"),
        (&["LOCK.RELEASE", "other:x", "a"], "other:x"),
    ] {
        assert_refused_by_acl(&mut app, &mut admin, args, "key", key);
    }
    assert_eq!(snapshot(&mut admin), before);
    let entry = newest_acl_log(&mut admin);
    assert_eq!(field(&entry, "context").as_deref(), Some("toplevel"));
    assert_eq!(field(&entry, "username").as_deref(), Some("app"));

    // Commands not granted by name are refused as such.
    for (args, name) in [
        (&["LOCK.INFO", "app:x"][..], "lock.info"),
        (&["LOCK.RENEW", "app:x", "w1"], "lock.renew"),
        (&["LOCK.FORCERELEASE", "app:x"], "lock.forcerelease"),
    ] {
        assert_refused_by_acl(&mut app, &mut admin, args, "command", name);
    }
}

/// The access to its lock key(s) a command needs: its key spec (RW ACCESS
/// UPDATE: read and write; RW DELETE: write; RO ACCESS: read), or no key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyAccess {
    ReadWrite,
    Write,
    Read,
    Keyless,
}

/// How the ACL tests call a command: on a fresh data set, `setup` (run by
/// an admin) then `call` succeeds for a user allowed the command and the
/// keys `app:*`, `{app:*` (read holds' lease keys, semaphores' permit
/// sets `{app:s}:timeout`, leader records `{app:e}:leader`) and, for
/// ELECT.CAMPAIGN, `redisson_lock_token:{app:*`; `key` is the first
/// lock key it names, and `category_read` whether it is in `@read` (else
/// `@write`) where module commands have categories.
struct AclCase {
    setup: &'static [&'static [&'static str]],
    call: &'static [&'static str],
    access: KeyAccess,
    category_read: bool,
}

impl AclCase {
    fn of(cmd: Cmd) -> AclCase {
        use KeyAccess::*;
        const HELD: &[&[&str]] = &[&["LOCK.ACQUIRE", "app:x", "o"]];
        const SEM: &[&[&str]] = &[&["SEM.INIT", "app:s", "3"]];
        const SEM_HELD: &[&[&str]] = &[&["SEM.INIT", "app:s", "3"], &["SEM.ACQUIRE", "app:s", "o"]];
        const LATCH: &[&[&str]] = &[&["LATCH.INIT", "app:l", "2"]];
        const LED: &[&[&str]] = &[&["ELECT.CAMPAIGN", "app:e", "c", "KEEPALIVE"]];
        type Calls = &'static [&'static [&'static str]];
        let (setup, call, access, category_read): (Calls, &'static [&'static str], _, _) = match cmd
        {
            Cmd::Acquire => (&[][..], &["LOCK.ACQUIRE", "app:x", "o"], ReadWrite, false),
            Cmd::RAcquire => (&[], &["LOCK.RACQUIRE", "app:rw", "o"], ReadWrite, false),
            Cmd::WAcquire => (&[], &["LOCK.WACQUIRE", "app:rw", "o"], ReadWrite, false),
            Cmd::MAcquire => (
                &[],
                &["LOCK.MACQUIRE", "2", "app:a", "app:b", "o"],
                ReadWrite,
                false,
            ),
            Cmd::MRelease => (
                &[&["LOCK.MACQUIRE", "2", "app:a", "app:b", "o"]],
                &["LOCK.MRELEASE", "2", "app:a", "app:b", "o"],
                Write,
                false,
            ),
            Cmd::Release => (HELD, &["LOCK.RELEASE", "app:x", "o"], Write, false),
            Cmd::Renew => (HELD, &["LOCK.RENEW", "app:x", "o"], ReadWrite, false),
            Cmd::ForceRelease => (HELD, &["LOCK.FORCERELEASE", "app:x"], Write, false),
            Cmd::Info => (HELD, &["LOCK.INFO", "app:x"], Read, true),
            Cmd::Waiters => (HELD, &["LOCK.WAITERS", "app:x"], Read, true),
            Cmd::Queues => (&[], &["LOCK.QUEUES"], Keyless, true),
            Cmd::Session => (&[], &["LOCK.SESSION", "s1"], Keyless, false),
            Cmd::Cancel => (&[], &["LOCK.CANCEL", "app:x", "o"], ReadWrite, false),
            Cmd::SemInit => (&[], &["SEM.INIT", "app:s", "3"], ReadWrite, false),
            Cmd::SemAcquire => (SEM, &["SEM.ACQUIRE", "app:s", "o"], ReadWrite, false),
            Cmd::SemRelease => (SEM_HELD, &["SEM.RELEASE", "app:s", "o"], ReadWrite, false),
            Cmd::SemRenew => (SEM_HELD, &["SEM.RENEW", "app:s", "o"], ReadWrite, false),
            Cmd::SemAdd => (&[], &["SEM.ADD", "app:s", "2"], ReadWrite, false),
            Cmd::SemTake => (SEM, &["SEM.TAKE", "app:s"], ReadWrite, false),
            Cmd::SemGive => (&[], &["SEM.GIVE", "app:s"], ReadWrite, false),
            Cmd::SemInfo => (SEM_HELD, &["SEM.INFO", "app:s"], Read, true),
            Cmd::LatchInit => (&[], &["LATCH.INIT", "app:l", "2"], ReadWrite, false),
            Cmd::LatchCountDown => (LATCH, &["LATCH.COUNTDOWN", "app:l"], ReadWrite, false),
            Cmd::LatchAwait => (LATCH, &["LATCH.AWAIT", "app:l"], Read, true),
            Cmd::LatchInfo => (LATCH, &["LATCH.INFO", "app:l"], Read, true),
            Cmd::ElectCampaign => (
                &[],
                &["ELECT.CAMPAIGN", "app:e", "c", "KEEPALIVE"],
                ReadWrite,
                false,
            ),
            Cmd::ElectResign => (LED, &["ELECT.RESIGN", "app:e", "c"], ReadWrite, false),
            Cmd::ElectProclaim => (
                LED,
                &["ELECT.PROCLAIM", "app:e", "c", "v"],
                ReadWrite,
                false,
            ),
            Cmd::ElectLeader => (LED, &["ELECT.LEADER", "app:e"], Read, true),
            Cmd::ElectObserve => (LED, &["ELECT.OBSERVE", "app:e"], Read, true),
        };
        AclCase {
            setup,
            call,
            access,
            category_read,
        }
    }

    /// The first lock key of the call.
    fn key(&self) -> &'static str {
        match self.call {
            [_, numkeys, key, ..] if numkeys.parse::<u32>().is_ok() => key,
            [_, key, ..] => key,
            _ => "",
        }
    }

    /// A fresh data set with `setup` done, by `admin`.
    fn prepare(&self, admin: &mut Connection) {
        let _: () = q(admin, &["FLUSHALL"]);
        for args in self.setup {
            let _: Value = q(admin, args);
        }
    }
}

/// Every command the server registers, each with its [`AclCase`].
fn every_command(con: &mut Connection) -> Vec<Cmd> {
    commands::known(&commands::registered(con), "the ACL tests")
        .unwrap_or_else(|missing| panic!("the ACL tests do not cover every command:\n{missing}"))
}

#[test]
fn lock_key_access_each_command_needs() {
    let server = Server::start();
    let mut admin = server.client();
    acl_setuser(
        &mut admin,
        "r",
        &["on", ">pw", "%R~app:*", "%R~{app:*", "+@all"],
    );
    acl_setuser(
        &mut admin,
        "w",
        &["on", ">pw", "%W~app:*", "%W~{app:*", "+@all"],
    );
    let mut r = user_client(&server, "r");
    let mut w = user_client(&server, "w");
    for cmd in every_command(&mut admin) {
        let case = AclCase::of(cmd);
        let (reads, writes) = match case.access {
            KeyAccess::ReadWrite => (false, false),
            KeyAccess::Write => (false, true),
            KeyAccess::Read => (true, false),
            KeyAccess::Keyless => (true, true),
        };
        for (con, allowed, user) in [(&mut r, reads, "r"), (&mut w, writes, "w")] {
            case.prepare(&mut admin);
            // A session token belongs to one user: each names its own.
            let token = format!("session-of-{user}");
            let call: Vec<&str> = match cmd {
                Cmd::Session => vec!["LOCK.SESSION", &token],
                _ => case.call.to_vec(),
            };
            if allowed {
                if let Err(e) = raw(con, &call) {
                    panic!("{call:?}: {}", error_line(&e));
                }
            } else {
                let before = snapshot(&mut admin);
                assert_refused_by_acl(con, &mut admin, case.call, "key", case.key());
                assert_eq!(snapshot(&mut admin), before, "{:?}", case.call);
            }
        }
    }
}

/// What the server lets a module do with ACL categories: set its commands'
/// (Redis 7.2+, every Valkey) and add its own (Redis 7.4+, Valkey 8+). The
/// module finds out by the calls the server offers; the test, which cannot,
/// by the version the server reports (Valkey reports `valkey_version` and an
/// older `redis_version`).
fn acl_category_support(con: &mut Connection) -> (bool, bool) {
    let info: String = q(con, &["INFO", "server"]);
    let version = |name: &str| -> Option<(u32, u32)> {
        let v = info
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))?;
        let mut parts = v.trim().split('.').map(|n| n.parse().ok());
        Some((parts.next()??, parts.next()??))
    };
    match (version("valkey_version"), version("redis_version")) {
        (Some(_), _) => (true, true),
        (None, Some(redis)) => (redis >= (7, 2), redis >= (7, 4)),
        (None, None) => panic!("INFO server reports no version"),
    }
}

#[test]
fn acl_categories_grant_the_lock_commands() {
    let server = Server::start();
    let mut admin = server.client();
    let (categories, lock_category) = acl_category_support(&mut admin);

    // `+@lock`: every LOCK.* command, and nothing else.
    // `{app:*`: read holds' lease keys; the token key: ELECT.CAMPAIGN's.
    let plus_lock = [
        "ACL",
        "SETUSER",
        "app",
        "on",
        ">pw",
        "~app:*",
        "~{app:*",
        "~redisson_lock_token:{app:*",
        "+@lock",
    ];
    if lock_category {
        let _: () = q(&mut admin, &plus_lock);
        let mut app = user_client(&server, "app");
        for cmd in every_command(&mut admin) {
            let case = AclCase::of(cmd);
            case.prepare(&mut admin);
            if let Err(e) = raw(&mut app, case.call) {
                panic!("{:?}: {}", case.call, error_line(&e));
            }
        }
        assert_refused_by_acl(&mut app, &mut admin, &["GET", "app:x"], "command", "get");
        acl_setuser(&mut admin, "app", &["-@lock"]);
        let info = ["LOCK.INFO", "app:x"];
        assert_refused_by_acl(&mut app, &mut admin, &info, "command", "lock.info");
    } else {
        // No such category: the server refuses the rule.
        assert_eq!(err_code(&mut admin, &plus_lock), "ERR");
    }

    // The server's own categories: LOCK.INFO, LOCK.WAITERS and LOCK.QUEUES
    // read, every other writes.
    let keys = [
        "on",
        ">pw",
        "~app:*",
        "~{app:*",
        "~redisson_lock_token:{app:*",
    ];
    acl_setuser(&mut admin, "writer", &[&keys[..], &["+@write"]].concat());
    acl_setuser(&mut admin, "reader", &[&keys[..], &["+@read"]].concat());
    let mut writer = user_client(&server, "writer");
    let mut reader = user_client(&server, "reader");
    for cmd in every_command(&mut admin) {
        let case = AclCase::of(cmd);
        let reads = case.category_read;
        // 7.0 gives module commands no category: grant them by name.
        for (con, granted) in [
            (&mut writer, categories && !reads),
            (&mut reader, categories && reads),
        ] {
            case.prepare(&mut admin);
            if granted {
                if let Err(e) = raw(con, case.call) {
                    panic!("{:?}: {}", case.call, error_line(&e));
                }
            } else {
                assert_eq!(err_code(con, case.call), "NOPERM", "{:?}", case.call);
            }
        }
    }
}

#[test]
fn fence_needs_read_and_write_access_to_the_token_key() {
    let server = Server::start();
    let mut admin = server.client();
    create_app_user(&mut admin);
    let mut app = user_client(&server, "app");

    // Refused before anything is written: no lock, no token.
    for (lock, token_key) in [
        ("app:x", "redisson_lock_token:{app:x}"),
        // A lock with its own hash tag keeps it: still outside `~app:*`.
        ("app:{x}", "redisson_lock_token:app:{x}"),
    ] {
        assert_eq!(
            err(&mut app, &["LOCK.ACQUIRE", lock, "w1", "FENCE"]),
            token_noperm(token_key)
        );
        assert_eq!(snapshot(&mut admin), Vec::new(), "{lock}");
        let entry = newest_acl_log(&mut admin);
        assert_eq!(field(&entry, "reason").as_deref(), Some("key"));
        assert_eq!(field(&entry, "context").as_deref(), Some("module"));
        assert_eq!(field(&entry, "object").as_deref(), Some(token_key));
        assert_eq!(field(&entry, "username").as_deref(), Some("app"));
    }

    // A FENCE re-entry is refused too, and leaves the hold count alone.
    assert_eq!(q::<i64>(&mut app, &["LOCK.ACQUIRE", "app:x", "w1"]), 1);
    assert_eq!(
        err(&mut app, &["LOCK.ACQUIRE", "app:x", "w1", "FENCE"]),
        token_noperm("redisson_lock_token:{app:x}")
    );
    assert_eq!(
        hgetall(&mut admin, "app:x"),
        vec![("w1".into(), "1".into())]
    );

    // A caller that would wait is refused at once, not queued.
    assert_eq!(q::<i64>(&mut admin, &["LOCK.ACQUIRE", "app:y", "admin"]), 1);
    assert_eq!(
        err(
            &mut app,
            &["LOCK.ACQUIRE", "app:y", "w1", "BLOCK", "0", "FENCE"]
        ),
        token_noperm("redisson_lock_token:{app:y}")
    );
    assert_eq!(waiters(&mut admin, "app:y"), 0);

    // Read or write alone is not enough: FENCE reads the counter and
    // writes the next token (as SET).
    for pattern in ["%R~redisson_lock_token:*", "%W~redisson_lock_token:*"] {
        acl_setuser(&mut admin, "app", &["resetkeys", "~app:*", pattern]);
        assert_eq!(
            err(&mut app, &["LOCK.ACQUIRE", "app:z", "w1", "FENCE"]),
            token_noperm("redisson_lock_token:{app:z}"),
            "{pattern}"
        );
        assert!(!exists(&mut admin, "app:z"), "{pattern}");
    }
    for pattern in ["%RW~redisson_lock_token:*", "~redisson_lock_token:*"] {
        acl_setuser(&mut admin, "app", &["resetkeys", "~app:*", pattern]);
        let _: () = q(&mut admin, &["DEL", "redisson_lock_token:{app:z}"]);
        let before = token_floor(&mut admin);
        let t1: i64 = q(&mut app, &["LOCK.ACQUIRE", "app:z", "w1", "FENCE"]);
        assert_token_between(t1, before, token_floor(&mut admin), 0, pattern);
        assert_eq!(hgetall(&mut admin, "app:z"), [("w1".into(), "1".into())]);
        let t2: i64 = q(&mut app, &["LOCK.ACQUIRE", "app:z", "w1", "FENCE"]);
        assert!(t2 > t1, "{pattern}: a re-entry takes a new token");
        assert_eq!(
            token(&mut admin, "redisson_lock_token:{app:z}"),
            Some(t2.to_string())
        );
        assert_eq!(q::<i64>(&mut app, &["LOCK.RELEASE", "app:z", "w1"]), 1);
        assert_eq!(q::<i64>(&mut app, &["LOCK.RELEASE", "app:z", "w1"]), 0);
    }
    // Patterns are matched against the derived name as it is.
    acl_setuser(
        &mut admin,
        "app",
        &["resetkeys", "~app:*", "~redisson_lock_token:app:*"],
    );
    let t: i64 = q(&mut app, &["LOCK.ACQUIRE", "app:{x}", "w1", "FENCE"]);
    assert_eq!(
        token(&mut admin, "redisson_lock_token:app:{x}"),
        Some(t.to_string())
    );
    assert_eq!(
        err(&mut app, &["LOCK.ACQUIRE", "app:w", "w1", "FENCE"]),
        token_noperm("redisson_lock_token:{app:w}")
    );
}

/// A semaphore's permit set `{key}:timeout` is not among the keys a SEM.*
/// command declares: the module checks that the caller may write it, and
/// refuses every SEM.* write (a caller that would wait too) before anything
/// is written or queued.
#[test]
fn semaphores_need_write_access_to_the_permit_key() {
    let server = Server::start();
    let mut admin = server.client();
    acl_setuser(&mut admin, "app", &["on", ">pw", "~app:*", "+@all"]);
    let mut app = user_client(&server, "app");
    let _: i64 = q(&mut admin, &["SEM.INIT", "app:s", "1"]);
    let _: i64 = q(&mut admin, &["SEM.ACQUIRE", "app:s", "o"]);
    let before = snapshot(&mut admin);
    let refused =
        "NOPERM this user has no permissions to access the semaphore permit key '{app:s}:timeout'";
    for args in [
        &["SEM.ACQUIRE", "app:s", "w"][..],
        &["SEM.ACQUIRE", "app:s", "w", "BLOCK", "0"],
        &["SEM.TAKE", "app:s", "BLOCK", "0"],
        &["SEM.RELEASE", "app:s", "o"],
        &["SEM.RENEW", "app:s", "o"],
        &["SEM.GIVE", "app:s"],
        &["SEM.ADD", "app:s", "1"],
        &["SEM.INIT", "app:s", "5"],
    ] {
        assert_eq!(err(&mut app, args), refused, "{args:?}");
        let entry = newest_acl_log(&mut admin);
        assert_eq!(field(&entry, "context").as_deref(), Some("module"));
        assert_eq!(
            field(&entry, "object").as_deref(),
            Some("{app:s}:timeout"),
            "{args:?}"
        );
    }
    assert_eq!(snapshot(&mut admin), before);
    assert_eq!(waiters(&mut admin, "app:s"), 0);
    assert_eq!(server.stat("waiters"), 0);

    // Allowed the permit set, the same user gives the permit back.
    acl_setuser(&mut admin, "app", &["~{app:*"]);
    assert_eq!(q::<i64>(&mut app, &["SEM.RELEASE", "app:s", "o"]), 0);
    assert_eq!(q::<i64>(&mut app, &["SEM.ACQUIRE", "app:s", "w"]), 1);
}

/// An election's leader record `{key}:leader` and its counter
/// `redisson_lock_token:{key}` are not among the keys an ELECT.* command
/// declares: the module checks that the caller may write the record
/// (CAMPAIGN, RESIGN, PROCLAIM) and the counter (CAMPAIGN, always fenced),
/// or read the record (LEADER, OBSERVE), and refuses with NOPERM before
/// anything is written, queued or answered.
#[test]
fn elections_need_access_to_the_leader_record_and_the_token_key() {
    let server = Server::start();
    let mut admin = server.client();
    let term: i64 = q(
        &mut admin,
        &[
            "ELECT.CAMPAIGN",
            "app:e",
            "lead",
            "VALUE",
            "v1",
            "KEEPALIVE",
        ],
    );
    assert!(term > 0, "term {term}");
    let writes: [&[&str]; 6] = [
        &["ELECT.CAMPAIGN", "app:e", "c", "KEEPALIVE"],
        &["ELECT.CAMPAIGN", "app:e", "c", "KEEPALIVE", "BLOCK", "0"],
        &[
            "ELECT.CAMPAIGN",
            "app:e",
            "lead",
            "VALUE",
            "v2",
            "KEEPALIVE",
        ],
        &["ELECT.CAMPAIGN", "app:f", "c", "KEEPALIVE"],
        &["ELECT.RESIGN", "app:e", "lead"],
        &["ELECT.PROCLAIM", "app:e", "lead", "v2"],
    ];
    let reads: [&[&str]; 3] = [
        &["ELECT.LEADER", "app:e"],
        &["ELECT.OBSERVE", "app:e"],
        &["ELECT.OBSERVE", "app:e", "TERM", "0", "BLOCK", "0"],
    ];
    // The record of `args`' election, as the ACL log names it.
    let record = |args: &[&str]| format!("{{{}}}:leader", args[1]);
    let refused = |app: &mut Connection, admin: &mut Connection, args: &[&str], object: &str| {
        assert_eq!(err_code(app, args), "NOPERM", "{args:?}");
        let entry = newest_acl_log(admin);
        assert_eq!(
            field(&entry, "context").as_deref(),
            Some("module"),
            "{args:?}"
        );
        assert_eq!(field(&entry, "reason").as_deref(), Some("key"), "{args:?}");
        assert_eq!(field(&entry, "object").as_deref(), Some(object), "{args:?}");
    };
    let before = snapshot(&mut admin);

    // Allowed the election and its counter, not the record: every ELECT.*
    // call is refused.
    acl_setuser(
        &mut admin,
        "app",
        &[
            "on",
            ">pw",
            "~app:*",
            "~redisson_lock_token:{app:*",
            "+@all",
        ],
    );
    let mut app = user_client(&server, "app");
    for args in writes.iter().chain(&reads) {
        refused(&mut app, &mut admin, args, &record(args));
    }
    assert_eq!(snapshot(&mut admin), before);
    assert_eq!(waiters(&mut admin, "app:e"), 0);

    // Allowed to read the record: LEADER and OBSERVE answer; the writes
    // are still refused.
    acl_setuser(&mut admin, "app", &["%R~{app:*"]);
    for args in writes {
        refused(&mut app, &mut admin, args, &record(args));
    }
    for args in &reads[..2] {
        let reply: Value = q(&mut app, args);
        let items = match &reply {
            Value::Array(items) => items,
            other => panic!("{args:?}: {other:?}"),
        };
        assert_eq!(items.get(1).map(text).as_deref(), Some("lead"), "{args:?}");
        assert_eq!(items.get(3), Some(&Value::Int(term)), "{args:?}");
    }
    assert_eq!(snapshot(&mut admin), before);
    assert_eq!(server.stat("election_observers"), 0);

    // Allowed the record, not the counter: a campaign is refused (a
    // re-attach too); the leader's RESIGN and PROCLAIM write no token.
    acl_setuser(&mut admin, "app", &["resetkeys", "~app:*", "~{app:*"]);
    for args in &writes[..4] {
        refused(
            &mut app,
            &mut admin,
            args,
            &format!("redisson_lock_token:{{{}}}", args[1]),
        );
    }
    assert_eq!(snapshot(&mut admin), before);
    assert_eq!(waiters(&mut admin, "app:e"), 0);
    assert_eq!(
        q::<i64>(&mut app, &["ELECT.PROCLAIM", "app:e", "lead", "v2"]),
        term
    );
    assert_eq!(
        hgetall(&mut admin, "{app:e}:leader"),
        [
            ("candidate".into(), "lead".into()),
            ("term".into(), term.to_string()),
            ("value".into(), "v2".into())
        ]
    );
    assert_eq!(q::<i64>(&mut app, &["ELECT.RESIGN", "app:e", "lead"]), 1);
    assert!(!exists(&mut admin, "app:e"));
    assert!(!exists(&mut admin, "{app:e}:leader"));

    // Allowed both: the user campaigns.
    acl_setuser(&mut admin, "app", &["~redisson_lock_token:{app:*"]);
    let next: i64 = q(&mut app, &["ELECT.CAMPAIGN", "app:e", "c", "KEEPALIVE"]);
    assert!(next > term, "term {next} after {term}");
}

#[test]
fn default_user_is_unaffected() {
    let server = Server::start();
    let mut con = server.client();
    create_app_user(&mut con);
    let mut last = 0;
    for key in ["app:x", "other:x", "app:{x}"] {
        let before = token_floor(&mut con);
        let t: i64 = q(
            &mut con,
            &["LOCK.ACQUIRE", key, "o", "PX", "10000", "FENCE"],
        );
        assert_token_between(t, before, token_floor(&mut con), 0, key);
        assert_eq!(lock_field(&mut con, key, "token"), Some(t.to_string()));
        if key == "other:x" {
            last = t;
        }
        assert_eq!(
            q::<i64>(&mut con, &["LOCK.RENEW", key, "o", "PX", "20000"]),
            20000
        );
        assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", key, "o"]), 0);
    }
    // In a transaction and in a script (a client that is not a connection).
    let _: () = q(&mut con, &["MULTI"]);
    send(&mut con, &["LOCK.ACQUIRE", "other:x", "o", "FENCE"]);
    assert_eq!(text(&recv(&mut con).expect("QUEUED")), "QUEUED");
    send(&mut con, &["EXEC"]);
    let in_exec = match recv(&mut con).expect("EXEC") {
        Value::Array(replies) if replies.len() == 1 => int(replies[0].clone()),
        other => panic!("EXEC replied {other:?}"),
    };
    assert!(in_exec > last, "token {in_exec} in EXEC after {last}");
    let script = "return redis.call('lock.acquire', KEYS[1], ARGV[1], 'FENCE')";
    let in_script: i64 = q(&mut con, &["EVAL", script, "1", "other:x", "o"]);
    assert!(
        in_script > in_exec,
        "a re-entry in a script, with a new token: {in_script} after {in_exec}"
    );
}

#[test]
fn restricted_user_in_transactions_and_scripts() {
    let server = Server::start();
    let mut admin = server.client();
    // No +ping either: the module's "is there a user" question gets an ACL
    // refusal, which still proves a user.
    acl_setuser(
        &mut admin,
        "scripted",
        &[
            "on",
            ">pw",
            "~app:*",
            "+lock.acquire",
            "+eval",
            "+multi",
            "+exec",
        ],
    );
    let mut s = user_client(&server, "scripted");
    let refused = token_noperm("redisson_lock_token:{app:x}");

    let _: () = q(&mut s, &["MULTI"]);
    send(&mut s, &["LOCK.ACQUIRE", "app:x", "w", "FENCE"]);
    assert_eq!(text(&recv(&mut s).expect("QUEUED")), "QUEUED");
    send(&mut s, &["LOCK.ACQUIRE", "app:y", "w"]);
    assert_eq!(text(&recv(&mut s).expect("QUEUED")), "QUEUED");
    send(&mut s, &["EXEC"]);
    match recv(&mut s).expect("EXEC") {
        Value::Array(replies) => {
            match &replies[0] {
                Value::ServerError(e) => {
                    assert_eq!(
                        format!("{} {}", e.code(), e.details().unwrap_or("")),
                        refused
                    )
                }
                other => panic!("FENCE in EXEC replied {other:?}"),
            }
            assert_eq!(replies[1], Value::Int(1));
        }
        other => panic!("EXEC replied {other:?}"),
    }
    assert!(!exists(&mut admin, "app:x"));
    assert!(!exists(&mut admin, "redisson_lock_token:{app:x}"));

    // A script runs as its caller's user.
    let script = "return redis.call('lock.acquire', KEYS[1], ARGV[1], 'FENCE')";
    let e = err(&mut s, &["EVAL", script, "1", "app:x", "w"]);
    assert!(e.starts_with(&refused), "{e}");
    assert_eq!(snapshot(&mut admin).len(), 1, "only app:y");
    let entry = newest_acl_log(&mut admin);
    assert_eq!(field(&entry, "context").as_deref(), Some("module"));
    assert_eq!(
        field(&entry, "object").as_deref(),
        Some("redisson_lock_token:{app:x}")
    );
    assert_eq!(field(&entry, "username").as_deref(), Some("scripted"));

    acl_setuser(&mut admin, "scripted", &["~redisson_lock_token:{app:*"]);
    let before = token_floor(&mut admin);
    let t: i64 = q(&mut s, &["EVAL", script, "1", "app:x", "w"]);
    assert_token_between(t, before, token_floor(&mut admin), 0, "script");
    assert_eq!(
        token(&mut admin, "redisson_lock_token:{app:x}"),
        Some(t.to_string())
    );
}

#[test]
fn a_queued_fence_caller_was_checked_when_it_called() {
    let server = Server::start();
    let mut admin = server.client();
    acl_setuser(
        &mut admin,
        "app",
        &[
            "on",
            ">pw",
            "~app:*",
            "~redisson_lock_token:{app:*",
            "+lock.acquire",
            "+lock.release",
        ],
    );
    assert_eq!(q::<i64>(&mut admin, &["LOCK.ACQUIRE", "app:x", "a"]), 1);
    let mut w = user_client(&server, "app");
    send(
        &mut w,
        &["LOCK.ACQUIRE", "app:x", "w", "BLOCK", "0", "FENCE"],
    );
    wait_for_waiters(&mut admin, "app:x", 1);
    // Its access to the token key is withdrawn while it waits: the grant,
    // written by the releasing caller, still takes its token.
    acl_setuser(&mut admin, "app", &["resetkeys", "~app:*"]);
    let before = token_floor(&mut admin);
    assert_eq!(q::<i64>(&mut admin, &["LOCK.RELEASE", "app:x", "a"]), 0);
    let granted = int(recv(&mut w).expect("grant"));
    assert_token_between(granted, before, token_floor(&mut admin), 0, "grant");
    assert_eq!(
        lock_field(&mut admin, "app:x", "owner").as_deref(),
        Some("w")
    );
    assert_eq!(
        token(&mut admin, "redisson_lock_token:{app:x}"),
        Some(granted.to_string())
    );
    // Its next FENCE call is checked again.
    assert_eq!(
        err(&mut w, &["LOCK.ACQUIRE", "app:x", "w", "FENCE"]),
        token_noperm("redisson_lock_token:{app:x}")
    );
}

// ------------------------------------------------- callers without a user

/// Reads one command (a RESP array of bulk strings) sent by a replica.
fn read_command(r: &mut impl BufRead) -> Option<Vec<String>> {
    let mut line = String::new();
    if r.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let n: usize = line.trim_end().strip_prefix('*')?.parse().ok()?;
    let mut args = Vec::with_capacity(n);
    for _ in 0..n {
        let mut len = String::new();
        r.read_line(&mut len).ok()?;
        let len: usize = len.trim_end().strip_prefix('$')?.parse().ok()?;
        let mut buf = vec![0; len + 2];
        r.read_exact(&mut buf).ok()?;
        buf.truncate(len);
        args.push(String::from_utf8_lossy(&buf).into_owned());
    }
    Some(args)
}

fn resp(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
    }
    out
}

/// A master that answers a replica's handshake with an empty data set,
/// then, once `go` says so, sends `stream`, and keeps the link open until
/// the replica goes.
fn fake_master(listener: TcpListener, go: mpsc::Receiver<()>, stream: Vec<u8>) {
    let Ok((socket, _)) = listener.accept() else {
        return;
    };
    let mut out = socket.try_clone().expect("clone socket");
    let mut input = BufReader::new(socket);
    while let Some(args) = read_command(&mut input) {
        let name = args
            .first()
            .map(|a| a.to_ascii_uppercase())
            .unwrap_or_default();
        let reply: &[u8] = match name.as_str() {
            "PING" => b"+PONG\r\n",
            "REPLCONF" => b"+OK\r\n",
            "PSYNC" | "SYNC" => {
                // RDB version 10 (7.0), no data, checksum 0 (not checked).
                let mut rdb = b"REDIS0010\xff".to_vec();
                rdb.extend_from_slice(&[0; 8]);
                let mut sync = format!(
                    "+FULLRESYNC {} 0\r\n${}\r\n",
                    "0123456789abcdef0123456789abcdef01234567",
                    rdb.len()
                )
                .into_bytes();
                sync.extend_from_slice(&rdb);
                if out.write_all(&sync).is_err()
                    || go.recv().is_err()
                    || out.write_all(&stream).is_err()
                {
                    return;
                }
                // From here on the replica only sends REPLCONF ACK.
                while read_command(&mut input).is_some() {}
                return;
            }
            _ => b"-ERR unexpected\r\n",
        };
        if out.write_all(reply).is_err() {
            return;
        }
    }
}

#[test]
fn commands_from_the_master_link_run_without_a_user_check_and_do_not_crash() {
    // The master link has no ACL user (RM_GetCurrentUserName would read a
    // NULL user), nor has a script it runs. This module never sends LOCK.*
    // to replicas; another master could.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port().to_string();
    let script = "return redis.call('lock.acquire', KEYS[1], 'o', 'FENCE')";
    let mut stream = resp(&["SELECT", "0"]);
    stream.extend(resp(&["LOCK.ACQUIRE", "app:x", "o", "FENCE"]));
    stream.extend(resp(&["EVAL", script, "1", "app:y"]));
    stream.extend(resp(&["SET", "marker", "done"]));
    let (go, wait) = mpsc::channel();
    let master = thread::spawn(move || fake_master(listener, wait, stream));

    let mut config = Config::default();
    config
        .args
        .extend(["--replicaof".into(), "127.0.0.1".into(), port]);
    let replica = config.start();
    let mut con = replica.client();
    // Also with a restricted default user: the master link is not it.
    acl_setuser(&mut con, "default", &["resetkeys", "~marker"]);
    wait_until("in sync with the master", || {
        replica
            .info_field("replication", "master_link_status")
            .as_deref()
            == Some("up")
    });
    go.send(()).expect("go");
    wait_until("the stream is applied", || {
        q::<Option<String>>(&mut con, &["GET", "marker"]).as_deref() == Some("done")
    });
    assert_eq!(q::<String>(&mut con, &["PING"]), "PONG");
    // Both ran past the ACL check into the module's replica refusal.
    let log = replica.log();
    for command in ["lock.acquire", "eval"] {
        let line = log
            .lines()
            .find(|l| l.contains(&format!("after processing the command '{command}'")))
            .unwrap_or_else(|| panic!("no error reply to the master for {command}:\n{log}"));
        assert!(
            line.contains("READONLY lock commands cannot run on a replica"),
            "{line}"
        );
    }
    drop(con);
    drop(replica);
    master.join().expect("fake master");
}

#[test]
fn aof_replay_is_not_checked_against_the_default_user() {
    // The default user may lock `app:*` and only read token keys.
    let config = Config::default().aof();
    let mut config = config;
    config.args.extend(
        [
            "--user",
            "default",
            "on",
            "nopass",
            "~app:*",
            "%R~redisson_lock_token:*",
            "+@all",
        ]
        .map(String::from),
    );
    let mut server = config.start();
    let mut con = server.client();
    assert_eq!(
        err(&mut con, &["LOCK.ACQUIRE", "app:x", "o", "FENCE"]),
        token_noperm("redisson_lock_token:{app:x}")
    );
    // An AOF written by something else than this module (which logs native
    // commands only) holds a LOCK.ACQUIRE ... FENCE.
    let aof_dir = server.dir.join("appendonlydir");
    let incr = fs::read_dir(&aof_dir)
        .expect("appendonlydir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.to_string_lossy().ends_with(".incr.aof"))
        .expect("incr AOF file");
    let mut file = OpenOptions::new()
        .append(true)
        .open(&incr)
        .expect("open AOF");
    file.write_all(&resp(&["SELECT", "0"])).expect("write AOF");
    file.write_all(&resp(&[
        "LOCK.ACQUIRE",
        "app:x",
        "o",
        "PX",
        "600000",
        "FENCE",
    ]))
    .expect("write AOF");
    drop(file);
    // The replayed grant takes its token from the clock at the reload.
    let before = token_floor(&mut con);
    drop(con);
    server.restart();
    let mut con = server.client();
    assert_eq!(lock_field(&mut con, "app:x", "owner").as_deref(), Some("o"));
    let t: i64 = q(&mut con, &["GET", "redisson_lock_token:{app:x}"]);
    assert_token_between(t, before, token_floor(&mut con), 0, "replayed");
}

// ---------------------------------------------------------------- limits

#[test]
fn maxclients_reached_by_waiters() {
    const MAX: usize = 20;
    let server = Config::default()
        .arg("maxclients", &MAX.to_string())
        .start();
    let mut con = server.client();
    wait_until("only this client is connected", || {
        info_field(&mut con, "clients", "connected_clients") == 1
    });
    assert_eq!(q::<i64>(&mut con, &["LOCK.ACQUIRE", "k", "holder"]), 1);
    let mut queued: Vec<(String, Connection)> = (1..MAX)
        .map(|i| {
            let owner = format!("w{i}");
            let w = queue_waiter(&server, &mut con, "k", &owner, &["BLOCK", "0"], i as i64);
            (owner, w)
        })
        .collect();
    assert_eq!(
        info_field(&mut con, "clients", "connected_clients"),
        MAX as i64
    );

    // Redis refuses the next connection itself: an error, then it closes
    // the connection (read_to_end returns).
    let mut refused = Vec::new();
    TcpStream::connect(server.addr())
        .expect("tcp connect")
        .read_to_end(&mut refused)
        .expect("read refusal");
    assert!(
        refused.starts_with(b"-ERR "),
        "{}",
        String::from_utf8_lossy(&refused)
    );
    assert!(info_field(&mut con, "stats", "rejected_connections") >= 1);

    // Releases and hand-offs go on among the connected clients.
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "k", "holder"]), 0);
    for (owner, w) in queued.iter_mut().take(3) {
        assert_eq!(int(recv(w).expect("grant")), 1, "{owner}");
        assert_eq!(lock_field(&mut con, "k", "owner").as_ref(), Some(&*owner));
        assert_eq!(q::<i64>(w, &["LOCK.RELEASE", "k", owner]), 0);
    }
    let (next, _) = &queued[3];
    wait_until("w4 holds the lock", || {
        lock_field(&mut con, "k", "owner").as_ref() == Some(next)
    });
    assert_eq!(waiters(&mut con, "k"), (MAX - 5) as i64);

    // Once waiters leave, connections are accepted again.
    drop(queued);
    wait_until("waiters gone", || waiters(&mut con, "k") == 0);
    let mut fresh = server.client();
    assert_eq!(q::<i64>(&mut fresh, &["LOCK.FORCERELEASE", "k"]), 1);
    assert_eq!(q::<i64>(&mut fresh, &["LOCK.ACQUIRE", "k", "fresh"]), 1);
}

#[test]
fn maxmemory_noeviction_refuses_acquire_but_not_release() {
    let server = Config::default()
        .arg("maxmemory-policy", "noeviction")
        .start();
    let mut con = server.client();
    assert_eq!(
        q::<i64>(&mut con, &["LOCK.ACQUIRE", "held", "a", "PX", "60000"]),
        1
    );
    let first: i64 = q(&mut con, &["LOCK.ACQUIRE", "queued", "a", "FENCE"]);
    let mut w: Connection = queue_waiter(
        &server,
        &mut con,
        "queued",
        "w",
        &["BLOCK", "0", "FENCE"],
        1,
    );
    // Any memory in use is over the limit now.
    let _: () = q(&mut con, &["CONFIG", "SET", "maxmemory", "1"]);
    assert!(used_memory(&mut con) > 1);

    let before = snapshot(&mut con);
    for args in [
        &["LOCK.ACQUIRE", "new", "o"][..],
        &["LOCK.ACQUIRE", "new", "o", "FENCE"],
        &["LOCK.ACQUIRE", "held", "a"],
        &["LOCK.ACQUIRE", "held", "b", "BLOCK", "0"],
    ] {
        assert_eq!(err_code(&mut con, args), "OOM", "{args:?}");
    }
    assert_eq!(snapshot(&mut con), before);
    assert_eq!(waiters(&mut con, "held"), 0);

    // Renew, release, forced release and the hand-off they make still work.
    assert_eq!(
        q::<i64>(&mut con, &["LOCK.RENEW", "held", "a", "PX", "30000"]),
        30000
    );
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "held", "a"]), 0);
    assert!(!exists(&mut con, "held"));
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "queued", "a"]), 0);
    let granted = int(recv(&mut w).expect("grant"));
    assert!(
        granted > first,
        "the waiter's token {granted} after {first}"
    );
    assert_eq!(
        lock_field(&mut con, "queued", "owner").as_deref(),
        Some("w")
    );
    assert_eq!(q::<i64>(&mut con, &["LOCK.FORCERELEASE", "queued"]), 1);
    assert!(!exists(&mut con, "queued"));

    let _: () = q(&mut con, &["CONFIG", "SET", "maxmemory", "0"]);
    assert_eq!(q::<i64>(&mut con, &["LOCK.ACQUIRE", "new", "o"]), 1);
}

#[test]
fn leases_past_their_deadline_but_still_stored_are_over() {
    let server = Server::start();
    let mut con = server.client();
    let _: () = q(&mut con, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]);
    let keys = [
        "acq", "same", "rel", "renew", "info", "force", "fence", "wait",
    ];
    let mut first = 0;
    for key in keys {
        let mut args = vec!["LOCK.ACQUIRE", key, "old", "PX", "50"];
        if key == "fence" {
            args.push("FENCE");
            first = q::<i64>(&mut con, &args);
        } else {
            assert_eq!(q::<i64>(&mut con, &args), 1, "{key}");
        }
    }
    // Each deadline is at most 50 ms after this (same clock as the server).
    let taken = now_ms();
    wait_until("every lease is past its deadline", || now_ms() > taken + 60);
    // Still stored (nothing touched them), counted by DBSIZE without expiring.
    assert_eq!(
        q::<i64>(&mut con, &["DBSIZE"]),
        keys.len() as i64 + 1,
        "the locks and a token key"
    );

    assert_eq!(
        q::<i64>(&mut con, &["LOCK.ACQUIRE", "acq", "new", "PX", "10000"]),
        1
    );
    assert_eq!(hgetall(&mut con, "acq"), vec![("new".into(), "1".into())]);
    assert_eq!(
        q::<i64>(&mut con, &["LOCK.ACQUIRE", "same", "old"]),
        1,
        "a new hold, not a re-entry"
    );
    assert_eq!(
        err(&mut con, &["LOCK.RELEASE", "rel", "old"]),
        "NOTOWNER the owner holds no hold on this lock"
    );
    assert_eq!(
        err(&mut con, &["LOCK.RENEW", "renew", "old", "PX", "10000"]),
        "NOTOWNER the owner holds no hold on this lock"
    );
    assert_eq!(
        raw(&mut con, &["LOCK.INFO", "info"]).expect("info"),
        Value::Nil
    );
    assert_eq!(q::<i64>(&mut con, &["LOCK.FORCERELEASE", "force"]), 0);
    // The token key outlives the lease it fenced (lock.token-ttl-ms).
    let next: i64 = q(&mut con, &["LOCK.ACQUIRE", "fence", "new", "FENCE"]);
    assert!(next > first, "token {next} after {first}");
    assert!(
        pttl(&mut con, "redisson_lock_token:{fence}") > 3_000_000,
        "the token key is kept about an hour"
    );
    let mut w = server.client();
    assert_eq!(
        q::<i64>(&mut w, &["LOCK.ACQUIRE", "wait", "w", "BLOCK", "0"]),
        1
    );
    for key in ["rel", "renew", "info", "force"] {
        assert!(!exists(&mut con, key), "{key}");
    }
}

#[test]
fn one_megabyte_owners() {
    let big = "o".repeat(1 << 20);
    let big2 = "p".repeat(1 << 20);
    let server = Server::start();
    let mut admin = server.client();
    let base = used_memory(&mut admin);
    {
        let mut con = server.client();
        assert_eq!(
            q::<i64>(&mut con, &["LOCK.ACQUIRE", "big", &big, "PX", "10000"]),
            1
        );
        assert_eq!(q::<i64>(&mut con, &["LOCK.ACQUIRE", "big", &big]), 2);
        let info = lock_info(&mut con, "big");
        assert!(
            field(&info, "owner") == Some(big.clone()),
            "owner round-trips"
        );
        assert_eq!(field(&info, "holds").as_deref(), Some("2"));
        assert!(hgetall(&mut con, "big") == vec![(big.clone(), "2".to_string())]);
        assert_eq!(
            q::<i64>(&mut con, &["LOCK.RENEW", "big", &big, "PX", "20000"]),
            20000
        );
        assert_eq!(
            raw(&mut con, &["LOCK.ACQUIRE", "big", &big2]).expect("busy"),
            Value::Nil
        );
        assert_eq!(
            err(&mut con, &["LOCK.RELEASE", "big", &big2]),
            "NOTOWNER the owner holds no hold on this lock"
        );
        // Error replies quote at most 64 bytes of what was sent.
        assert_eq!(
            err(&mut con, &["LOCK.ACQUIRE", "big", &big, "PX", &big2]),
            format!(
                "ERR invalid PX '{}...': not an integer or out of range",
                "p".repeat(64)
            )
        );

        let mut w: Connection = queue_waiter(&server, &mut con, "big", &big2, &["BLOCK", "0"], 1);
        assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "big", &big]), 1);
        assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "big", &big]), 0);
        assert_eq!(int(recv(&mut w).expect("grant")), 1);
        assert!(lock_field(&mut con, "big", "owner") == Some(big2.clone()));
        assert_eq!(q::<i64>(&mut w, &["LOCK.RELEASE", "big", &big2]), 0);
        assert!(!exists(&mut con, "big"));
    }
    // With the connections (and their 1 MB query buffers) gone, the memory
    // of both owners is back.
    wait_until("memory back near where it was", || {
        used_memory(&mut admin) < base + 512 * 1024
    });
}

#[test]
fn durations_near_i64_max() {
    let server = Server::start();
    let mut con = server.client();
    let too_large =
        |option: &str, value: &str| format!("ERR invalid {option} '{value}': too large");
    let cases = [
        (
            "BLOCK",
            "9223372036854775807",
            too_large("BLOCK", "9223372036854775807"),
        ),
        (
            "BLOCK",
            "9223372036854775806",
            too_large("BLOCK", "9223372036854775806"),
        ),
        (
            "BLOCK",
            "9007199254740992",
            too_large("BLOCK", "9007199254740992"),
        ),
        (
            "BLOCK",
            "9223372036854775808",
            "ERR invalid BLOCK '9223372036854775808': not an integer or out of range".into(),
        ),
        (
            "BLOCK",
            "-9223372036854775808",
            "ERR invalid BLOCK '-9223372036854775808': must not be negative".into(),
        ),
        (
            "PX",
            "9223372036854775807",
            too_large("PX", "9223372036854775807"),
        ),
        (
            "EX",
            "9223372036854775807",
            too_large("EX", "9223372036854775807"),
        ),
        ("EX", "9007199254741", too_large("EX", "9007199254741")),
    ];
    assert_eq!(q::<i64>(&mut con, &["LOCK.ACQUIRE", "k", "holder"]), 1);
    let before = snapshot(&mut con);
    for (option, value, want) in &cases {
        assert_eq!(
            err(&mut con, &["LOCK.ACQUIRE", "k", "w", option, value]),
            *want
        );
        assert_eq!(
            err(&mut con, &["LOCK.ACQUIRE", "free", "w", option, value]),
            *want
        );
    }
    assert_eq!(snapshot(&mut con), before);
    assert_eq!(waiters(&mut con, "k"), 0);

    // The largest accepted values: 2^53 - 1 ms (about 285,000 years).
    let max = "9007199254740991";
    let mut long: Connection = queue_waiter(
        &server,
        &mut con,
        "k",
        "long",
        &["BLOCK", max, "PX", max, "FENCE"],
        1,
    );
    // A caller queued behind it with a short wait times out first, and the
    // long one is still waiting after that.
    let mut short = server.client();
    assert_eq!(
        raw(&mut short, &["LOCK.ACQUIRE", "k", "short", "BLOCK", "50"]).expect("timeout"),
        Value::Nil
    );
    assert_eq!(waiters(&mut con, "k"), 1);
    let before = token_floor(&mut con);
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "k", "holder"]), 0);
    let granted = int(recv(&mut long).expect("grant"));
    assert_token_between(granted, before, token_floor(&mut con), 0, "first");
    let ttl = pttl(&mut con, "k");
    assert!(
        ttl > 9_007_199_254_740_991 - 600_000,
        "lease of about 2^53 - 1 ms, got {ttl}"
    );
    // The token key is kept until that lease ends.
    let token_ttl = pttl(&mut con, "redisson_lock_token:{k}");
    assert!(
        token_ttl > 9_007_199_254_740_991 - 600_000,
        "token key kept as long as the lease, got {token_ttl}"
    );
    assert_eq!(
        q::<i64>(
            &mut con,
            &["LOCK.ACQUIRE", "ex", "o", "EX", "1000000000000"]
        ),
        1
    );
    assert!(pttl(&mut con, "ex") > 1_000_000_000_000_000 - 600_000);
    assert_eq!(q::<String>(&mut con, &["PING"]), "PONG");
}

/// LOCK.INFO shows the fencing token only to a caller that may read the
/// token key itself.
#[test]
fn info_shows_the_token_only_to_readers_of_the_token_key() {
    let server = Server::start();
    let mut admin = server.client();
    acl_setuser(&mut admin, "reader", &["on", ">pw", "~app:*", "+lock.info"]);
    let t: i64 = q(&mut admin, &["LOCK.ACQUIRE", "app:x", "o", "FENCE"]);
    let mut reader = user_client(&server, "reader");
    let info = lock_info(&mut reader, "app:x");
    assert_eq!(field(&info, "owner").as_deref(), Some("o"));
    assert_eq!(field(&info, "token"), None, "token shown: {info:?}");
    assert_eq!(
        field(&lock_info(&mut admin, "app:x"), "token"),
        Some(t.to_string())
    );
    acl_setuser(&mut admin, "reader", &["%R~redisson_lock_token:*"]);
    let info = lock_info(&mut reader, "app:x");
    assert_eq!(field(&info, "token"), Some(t.to_string()));
}
