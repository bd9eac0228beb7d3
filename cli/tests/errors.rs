//! Exit codes by cause, and messages in redis-lock's own words, against
//! real servers: one with a password, ACL users without a permission, a
//! database it does not have, one without the module, a listener that is
//! not Redis, nothing listening.

#[path = "../../tests/common/mod.rs"]
mod common;
mod util;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::Output;
use std::thread;

use common::{lock_info, q, raw, Config, Server};
use util::{cli, output, path, scratch};

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `redis-lock -u URL ARGS`: its exit code and its one line on stderr,
/// checked to be redis-lock's format.
fn failing(server: &Server, url: &str, args: &[&str]) -> (i32, String) {
    let mut all = vec!["-u", url];
    all.extend(args);
    let out = output(server, &all);
    let err = stderr(&out);
    assert_one_line(&err, args);
    (out.status.code().unwrap_or(-1), err)
}

/// One line, `redis-lock: ...`, without the redis crate's or the OS's
/// wording.
fn assert_one_line(err: &str, what: &[&str]) {
    assert_eq!(err.lines().count(), 1, "{what:?}: {err:?}");
    assert!(err.starts_with("redis-lock: "), "{what:?}: {err:?}");
    for leak in [
        "ResponseError",
        "WRONGTYPE:",
        "NoPerm",
        "NOPERM",
        "(os error",
        " - Io",
        "Parse error",
        "AuthenticationFailed",
        "error:",
    ] {
        assert!(!err.contains(leak), "{what:?}: {leak} in {err:?}");
    }
}

/// Every subcommand that talks to the server, each with `url`: its code
/// and message must be `want` and contain `says`.
fn every_subcommand(server: &Server, url: &str, want: i32, says: &str) {
    every_subcommand_but_top(server, url, want, says);
    let (code, err) = failing(server, url, &["top", "--once"]);
    assert_eq!(code, want, "top: {err}");
    assert!(err.contains(says) || want == 78, "top: {err}");
}

fn every_subcommand_but_top(server: &Server, url: &str, want: i32, says: &str) {
    for args in [
        &["run", "job", "--", "true"][..],
        &["status", "job"],
        &["release", "--owner", "o", "job"],
        &["force-release", "job"],
    ] {
        let (code, err) = failing(server, url, args);
        assert_eq!(code, want, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

#[test]
fn unreachable_is_69() {
    let s = Server::start();
    let url = format!("redis://127.0.0.1:{}", common::free_port());
    every_subcommand(&s, &url, 69, "cannot connect to 127.0.0.1:");
    let (_, err) = failing(&s, &url, &["status", "job"]);
    assert!(err.ends_with(": connection refused\n"), "{err}");
}

#[test]
fn a_lost_connection_while_waiting_is_69() {
    let s = Server::start();
    let mut con = s.client();
    q::<i64>(&mut con, &["LOCK.ACQUIRE", "job", "other", "PX", "30000"]);
    let child = cli(&s, &["run", "--owner", "w", "job", "--", "true"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut r = util::Runner(Some(child));
    common::wait_for_waiters(&mut con, "job", 1);
    q::<i64>(
        &mut con,
        &["CLIENT", "KILL", "USER", "default", "SKIPME", "yes"],
    );
    assert_eq!(r.wait_code(), 69);
    let mut err = String::new();
    if let Some(mut e) = r.0.as_mut().and_then(|c| c.stderr.take()) {
        let _ = e.read_to_string(&mut err);
    }
    assert_one_line(&err, &["run"]);
    assert!(err.contains("lost the connection to 127.0.0.1:"), "{err}");
}

#[test]
fn a_password_is_refused_77() {
    let s = Server::start();
    q::<()>(&mut s.client(), &["CONFIG", "SET", "requirepass", "s3cret"]);
    let addr = s.addr();
    // No password: the server asks for one.
    every_subcommand(
        &s,
        &format!("redis://{addr}"),
        77,
        "requires a password: put it in the URL",
    );
    // A wrong one.
    every_subcommand(
        &s,
        &format!("redis://:wrong@{addr}"),
        77,
        "refused the login of user default: wrong user name or password",
    );
    let (_, err) = failing(&s, &format!("redis://:wrong@{addr}"), &["status", "job"]);
    assert!(
        !err.contains("wrong@"),
        "the password is not printed: {err}"
    );
    // The right one works.
    let out = output(
        &s,
        &["-u", &format!("redis://:s3cret@{addr}"), "status", "job"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn an_acl_refusal_is_77() {
    let s = Server::start();
    let mut admin = s.client();
    q::<()>(
        &mut admin,
        &[
            "ACL",
            "SETUSER",
            "alice",
            "on",
            ">pw",
            "~*",
            "+@all",
            "-lock.acquire",
        ],
    );
    q::<()>(
        &mut admin,
        &["ACL", "SETUSER", "bob", "on", ">pw", "~other*", "+@all"],
    );
    let addr = s.addr();
    let (code, err) = failing(
        &s,
        &format!("redis://alice:pw@{addr}"),
        &["run", "job", "--", "true"],
    );
    assert_eq!(code, 77, "{err}");
    assert_eq!(
        err,
        format!("redis-lock: the ACL of {addr} does not let user alice run LOCK.ACQUIRE\n")
    );
    let (code, err) = failing(
        &s,
        &format!("redis://bob:pw@{addr}"),
        &["run", "job", "--", "true"],
    );
    assert_eq!(code, 77, "{err}");
    assert_eq!(
        err,
        format!("redis-lock: the ACL of {addr} does not let user bob use the key job\n")
    );
    let (code, err) = failing(&s, &format!("redis://bob:pw@{addr}"), &["status", "job"]);
    assert_eq!(code, 77, "{err}");
    // A wrong password for a user.
    let (code, err) = failing(
        &s,
        &format!("redis://alice:nope@{addr}"),
        &["status", "job"],
    );
    assert_eq!(code, 77, "{err}");
    assert!(err.contains("refused the login of user alice"), "{err}");
}

#[test]
fn a_database_the_server_does_not_have_is_77() {
    let s = Server::start();
    let url = format!("redis://{}/99", s.addr());
    every_subcommand(&s, &url, 77, "has no database 99");
    // One it has works.
    let out = output(
        &s,
        &["-u", &format!("redis://{}/3", s.addr()), "status", "job"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
}

#[test]
fn a_server_without_the_module_is_78() {
    let plain = Config::default().without_module().start();
    let url = plain.url();
    every_subcommand(&plain, &url, 78, "the lock module is not loaded on ");
    let (_, err) = failing(&plain, &url, &["run", "job", "--", "true"]);
    assert!(err.contains("(it does not know LOCK.ACQUIRE)"), "{err}");
    let (_, err) = failing(&plain, &url, &["run", "a", "b", "--", "true"]);
    assert!(err.contains("(it does not know LOCK.MACQUIRE)"), "{err}");
    let (_, err) = failing(&plain, &url, &["top", "--once"]);
    assert_eq!(
        err,
        format!(
            "redis-lock: {} does not know LOCK.QUEUES: the lock module is not loaded there, \
             or older than 1.1.0\n",
            plain.addr()
        )
    );
}

#[test]
fn a_peer_that_is_not_redis_is_76() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
            let mut buf = [0u8; 1024];
            let _ = stream.read(&mut buf);
        }
    });
    let s = Server::start();
    every_subcommand(
        &s,
        &format!("redis://127.0.0.1:{port}"),
        76,
        &format!("127.0.0.1:{port} does not answer in the Redis protocol"),
    );
}

#[test]
fn lock_kinds_and_other_keys_in_words() {
    let s = Server::start();
    let mut con = s.client();
    q::<i64>(&mut con, &["LOCK.RACQUIRE", "cfg", "r", "PX", "60000"]);
    q::<i64>(&mut con, &["LOCK.ACQUIRE", "job", "o", "PX", "60000"]);
    q::<i64>(&mut con, &["LOCK.WACQUIRE", "wcfg", "w", "PX", "60000"]);
    raw(&mut con, &["SET", "str", "x"]).expect("SET");
    let url = s.url();
    let cases: [(&[&str], i32, &str); 6] = [
        (
            &["run", "cfg", "--", "true"],
            76,
            "cfg is a read-write lock: use --read or --write",
        ),
        (
            &["run", "--read", "job", "--", "true"],
            76,
            "job is an exclusive lock, not a read-write lock: leave out --read and --write",
        ),
        (
            &["release", "--write", "--owner", "o", "job"],
            76,
            "job is an exclusive lock, not a read-write lock: leave out --read and --write",
        ),
        (
            &["run", "str", "--", "true"],
            76,
            "str is not a lock: the key holds another kind of value",
        ),
        (
            &["force-release", "str"],
            76,
            "str is not a lock: the key holds another kind of value",
        ),
        (
            &["status", "str"],
            76,
            "str is not a lock: the key holds another kind of value",
        ),
    ];
    for (args, want, says) in cases {
        let (code, err) = failing(&s, &url, args);
        assert_eq!(code, want, "{args:?}: {err}");
        assert_eq!(err, format!("redis-lock: {says}\n"), "{args:?}");
    }
    // release --read of a write hold: the owner holds the write lock.
    let out = output(&s, &["release", "--read", "--owner", "w", "wcfg"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stdout(&out),
        "wcfg: not held by w as a reader: w holds the write lock (release it with --write)\n"
    );
    let out = output(&s, &["release", "--write", "--owner", "r", "cfg"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stdout(&out),
        "cfg: not held by r as the writer: r holds a read hold (release it with --read)\n"
    );
}

#[test]
fn usage_messages() {
    let s = Server::start();
    let out = output(&s, &["run", "job"]);
    assert_eq!(out.status.code(), Some(64));
    assert_eq!(
        stderr(&out),
        "redis-lock: the command to run follows --: \
         redis-lock run [OPTIONS] NAME... -- COMMAND [ARGS...]\n"
    );
    let out = output(&s, &["run", "job", "make", "all"]);
    assert_eq!(out.status.code(), Some(64));
    assert!(stderr(&out).contains("the command to run follows --"));
    let out = output(&s, &["release", "job"]);
    assert_eq!(out.status.code(), Some(64));
    let err = stderr(&out);
    assert_one_line(&err, &["release"]);
    assert!(
        err.contains("--owner") && err.contains("LOCK_OWNER"),
        "{err}"
    );
    for args in [
        &["run", "--lease", "0", "job", "--", "true"][..],
        &["run", "--read", "a", "b", "--", "true"],
        &["run", "--wait", "soon", "job", "--", "true"],
        &["status"],
        &["nonsense"],
    ] {
        let out = output(&s, args);
        assert_eq!(out.status.code(), Some(64), "{args:?}");
        assert_one_line(&stderr(&out), args);
    }
}

#[test]
fn busy_and_release_counts_in_words() {
    let s = Server::start();
    let mut con = s.client();
    q::<i64>(&mut con, &["LOCK.ACQUIRE", "job", "other", "PX", "60000"]);
    q::<i64>(&mut con, &["LOCK.ACQUIRE", "b", "other", "PX", "60000"]);
    let out = output(&s, &["run", "--wait", "1", "job", "--", "true"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        "redis-lock: job is busy: waited 1s, not acquired\n"
    );
    let out = output(&s, &["run", "-n", "job", "--", "true"]);
    assert_eq!(stderr(&out), "redis-lock: job is busy: not acquired\n");
    let out = output(&s, &["run", "-w", "200ms", "a", "b", "--", "true"]);
    assert_eq!(
        stderr(&out),
        "redis-lock: a, b: not all free: waited 200ms, none acquired\n"
    );
    q::<i64>(&mut con, &["LOCK.ACQUIRE", "job", "other", "PX", "60000"]);
    q::<i64>(&mut con, &["LOCK.ACQUIRE", "job", "other", "PX", "60000"]);
    let out = output(&s, &["release", "--owner", "other", "job"]);
    assert_eq!(stdout(&out), "job: 2 holds left\n");
    let out = output(&s, &["release", "--owner", "other", "job"]);
    assert_eq!(stdout(&out), "job: 1 hold left\n");
}

/// A lease shorter than the server keeps alive (704 ms at hz 10) is refused
/// by the server before anything is held, and said in redis-lock's words;
/// the command does not run.
#[test]
fn a_lease_too_short_to_keep_alive_is_said_and_nothing_runs() {
    let s = Server::start();
    let dir = scratch();
    let ran = dir.join("ran");
    let script = format!("touch {}", path(&ran));
    let out = output(
        &s,
        &["run", "--lease", "300ms", "job", "--", "sh", "-c", &script],
    );
    assert_eq!(out.status.code(), Some(76));
    let err = stderr(&out);
    assert!(
        err.starts_with("redis-lock: --lease 300ms is too short for ")
            && err.ends_with(": a KEEPALIVE hold needs a lease of at least 704ms\n"),
        "{err}"
    );
    assert_one_line(&err, &["300ms", "704ms"]);
    assert!(!ran.exists(), "the command ran");
    assert!(lock_info(&mut s.client(), "job").is_empty());
}

#[test]
fn top_once_and_help() {
    let s = Server::start();
    let out = output(&s, &["top", "--once"]);
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    assert!(text.starts_with("redis-lock top  "), "{text}");
    assert!(!text.contains("Ctrl-C"), "{text}");
    for args in [
        &["--help"][..],
        &["run", "--help"],
        &["status", "--help"],
        &["top", "--help"],
        &["release", "--help"],
        &["force-release", "--help"],
    ] {
        let out = output(&s, args);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        let help = stdout(&out);
        assert!(help.contains("Examples:\n"), "{args:?}: {help}");
        assert!(help.contains("\n  redis-lock "), "{args:?}: {help}");
        assert!(!help.contains("docs/"), "{args:?}: {help}");
    }
    let help = stdout(&output(&s, &["run", "--help"]));
    for code in ["69", "75", "76", "77", "78"] {
        assert!(help.contains(&format!("\n  {code} ")), "{code}: {help}");
    }
    assert!(help.contains("LOCK_FD"), "{help}");
}
