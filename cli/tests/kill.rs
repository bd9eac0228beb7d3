//! `redis-lock run` killed with SIGKILL at every stage (waiting in the
//! queue, holding while the command runs, after a re-attach, releasing),
//! for an exclusive lock, a write hold, a read hold and several names: a
//! second run's command never starts while a process of the first one's
//! command still runs.
//!
//! How "still runs" is seen: the first command takes flock(1) on a file of
//! its own through descriptor 9, which every process it starts inherits;
//! the second command's first act is `flock -n` on that file, which fails
//! while any of those processes lives. The kernel answers, at the instant
//! the second command starts.

#[path = "../../tests/common/mod.rs"]
mod common;
mod util;

use std::fs;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use common::{q, raw, wait_for_waiters, wait_until, waiters, Server, Value};
use util::{path, read, scratch, wait_file, Runner};

/// The lease of the runs: a dead runner's lock ends this long after its
/// connection closed, at most.
const LEASE: &str = "1s";
const LEASE_MS: u64 = 1000;

/// One kind of run: what the first run (A) takes, what the second (B)
/// takes that conflicts with it, and what the test holds to keep A waiting.
struct Case {
    tag: &'static str,
    /// Options and names of A (before `--`).
    a: Vec<String>,
    /// Options and names of B.
    b: Vec<String>,
    /// A's keys.
    keys: Vec<String>,
    /// The key B waits on.
    contested: String,
    /// What the test sends to keep A waiting, and to let it go.
    block: Vec<String>,
    unblock: Vec<String>,
}

fn words(line: &str) -> Vec<String> {
    line.split_whitespace().map(String::from).collect()
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            tag: "exclusive",
            a: words("job"),
            b: words("job"),
            keys: words("job"),
            contested: "job".into(),
            block: words("LOCK.ACQUIRE job T PX 60000"),
            unblock: words("LOCK.RELEASE job T"),
        },
        Case {
            tag: "write",
            a: words("--write cfgw"),
            b: words("--read cfgw"),
            keys: words("cfgw"),
            contested: "cfgw".into(),
            block: words("LOCK.RACQUIRE cfgw T PX 60000"),
            unblock: words("LOCK.RELEASE cfgw T READ"),
        },
        Case {
            tag: "read",
            a: words("--read cfgr"),
            b: words("--write cfgr"),
            keys: words("cfgr"),
            contested: "cfgr".into(),
            block: words("LOCK.WACQUIRE cfgr T PX 60000"),
            unblock: words("LOCK.RELEASE cfgr T WRITE"),
        },
        Case {
            tag: "multi",
            a: words("ma mb"),
            b: words("mb mc"),
            keys: words("ma mb"),
            contested: "mb".into(),
            block: words("LOCK.ACQUIRE mb T PX 60000"),
            unblock: words("LOCK.RELEASE mb T"),
        },
    ]
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// `run --lease 1s --owner OWNER OPTS NAMES -- sh -c SCRIPT`.
fn start(s: &Server, owner: &str, opts: &[String], script: &str) -> Runner {
    let mut args = vec!["run", "-q", "--lease", LEASE, "--owner", owner];
    args.extend(strs(opts));
    args.extend(["--", "sh", "-c", script]);
    Runner::start(s, &args)
}

/// LOCK.INFO as (field, value) pairs, nested maps kept as values.
fn info(con: &mut redis::Connection, key: &str) -> Vec<(String, Value)> {
    match raw(con, &["LOCK.INFO", key]).expect("LOCK.INFO") {
        Value::Array(items) => items
            .chunks(2)
            .map(|kv| (common::text(&kv[0]), kv[1].clone()))
            .collect(),
        _ => Vec::new(),
    }
}

fn get<'a>(info: &'a [(String, Value)], name: &str) -> Option<&'a Value> {
    info.iter().find(|(k, _)| k == name).map(|(_, v)| v)
}

/// The value of `field` in a nested map value.
fn in_map(map: Option<&Value>, field: &str) -> Option<Value> {
    match map {
        Some(Value::Array(items)) => items
            .chunks(2)
            .find(|kv| common::text(&kv[0]) == field)
            .map(|kv| kv[1].clone()),
        _ => None,
    }
}

/// Whether `owner` holds `key` (as its owner, writer or a reader).
fn held_by(con: &mut redis::Connection, key: &str, owner: &str) -> bool {
    let i = info(con, key);
    let is = |f: &str| get(&i, f).is_some_and(|v| common::text(v) == owner);
    is("owner") || is("writer") || in_map(get(&i, "readers"), owner).is_some()
}

/// The id of the connection that keeps `owner`'s hold of `key` alive.
fn bound(con: &mut redis::Connection, key: &str, owner: &str) -> Option<i64> {
    let i = info(con, key);
    let v = match get(&i, "keepalive_client") {
        Some(v) => Some(v.clone()),
        None => in_map(get(&i, "keepalive_clients"), owner),
    };
    match v {
        Some(Value::Int(id)) => Some(id),
        _ => None,
    }
}

/// Whether process `pid` runs (exists and is not a zombie).
fn alive(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        // `pid (comm) S ...`: the state follows the last ')'.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

fn pid_in(file: &Path) -> i32 {
    wait_file(file);
    let mut pid = 0;
    wait_until("a pid in the file", || {
        pid = read(file).trim().parse().unwrap_or(0);
        pid > 0
    });
    pid
}

/// The files of one case.
struct Files {
    tree: PathBuf,
    started: PathBuf,
    go: PathBuf,
    pid: PathBuf,
    b_mark: PathBuf,
}

impl Files {
    fn new(dir: &Path, tag: &str) -> Files {
        let f = |name: &str| dir.join(format!("{tag}-{name}"));
        Files {
            tree: f("tree"),
            started: f("started"),
            go: f("go"),
            pid: f("pid"),
            b_mark: f("b"),
        }
    }

    /// A's command: takes the tree lock on descriptor 9, leaves a process
    /// running in the background (with `background`) until `go` exists,
    /// writes its pid, says it started; then runs until killed or `go` (a loop,
    /// or `exec sleep` as one process without `background`).
    fn a_script(&self, background: bool) -> String {
        // Not the test's output: a process left behind by a failed test
        // must not hold its pipes open.
        let mut s = format!(
            "exec >/dev/null 2>&1 9>{}; flock -x 9 || exit 99; ",
            path(&self.tree)
        );
        if background {
            s.push_str(&format!(
                "( while [ ! -e {go} ]; do sleep 0.02; done ) & ",
                go = path(&self.go)
            ));
        }
        s.push_str(&format!(
            "echo $$ > {pid}; touch {started}; ",
            pid = path(&self.pid),
            started = path(&self.started)
        ));
        if background {
            s.push_str(&format!(
                "while [ ! -e {go} ]; do sleep 0.02; done",
                go = path(&self.go)
            ));
        } else {
            s.push_str("exec sleep 60");
        }
        s
    }

    /// B's command: whether any process of A's command still runs, at the
    /// instant B's command starts.
    fn b_script(&self) -> String {
        format!(
            "if flock -n -x {tree} true; then echo clear; else echo OVERLAP; fi > {mark}",
            tree = path(&self.tree),
            mark = path(&self.b_mark)
        )
    }
}

impl Drop for Files {
    /// Whatever happened, A's background process ends.
    fn drop(&mut self) {
        let _ = fs::write(&self.go, "");
    }
}

/// After A's runner was killed: A's command (its own process) is killed
/// with it; B, started now, waits; with `hold_for`, A's lock is seen held
/// that long (well past a lease) while a process of A's command runs; then
/// `go` lets A's last process end, and B's command must find A's tree
/// gone when it starts.
fn after_the_kill(s: &Server, case: &Case, f: &Files, a_owner: &str, hold_for: Duration) {
    let a_pid = pid_in(&f.pid);
    wait_until(
        &format!("{}: A's command killed with its runner", case.tag),
        || !alive(a_pid),
    );
    let killed = Instant::now();
    let mut con = s.client();
    let mut b = start(s, &format!("B-{}", case.tag), &case.b, &f.b_script());
    if !hold_for.is_zero() {
        wait_for_waiters(&mut con, &case.contested, 1);
    }
    while killed.elapsed() < hold_for {
        for key in &case.keys {
            assert!(
                held_by(&mut con, key, a_owner),
                "{}: {key} no longer held by A {:?} after its runner was killed: {:?}",
                case.tag,
                killed.elapsed(),
                info(&mut con, key)
            );
        }
        assert!(!f.b_mark.exists(), "{}: B ran", case.tag);
        thread::sleep(Duration::from_millis(50));
    }
    fs::write(&f.go, "").expect("go");
    assert_eq!(b.wait_code(), 0, "{}", case.tag);
    assert_eq!(read(&f.b_mark).trim(), "clear", "{}", case.tag);
    for key in &case.keys {
        assert!(!held_by(&mut con, key, a_owner), "{}", case.tag);
    }
}

/// Runs `scenario` for every case at once, each on its own keys of `s`.
fn every_case(s: &Server, scenario: impl Fn(&Server, &Case, &Files) + Sync) {
    let dir = scratch();
    let all = cases();
    thread::scope(|scope| {
        let handles: Vec<_> = all
            .iter()
            .map(|case| {
                let files = Files::new(&dir, case.tag);
                let scenario = &scenario;
                scope.spawn(move || scenario(s, case, &files))
            })
            .collect();
        let failed: Vec<String> = handles
            .into_iter()
            .zip(&all)
            .filter_map(|(h, case)| h.join().err().map(|_| case.tag.to_string()))
            .collect();
        assert!(failed.is_empty(), "failed: {failed:?}");
    });
}

#[test]
fn killed_while_waiting_the_command_never_runs() {
    let s = Server::start();
    every_case(&s, |s, case, f| {
        let mut con = s.client();
        q::<Value>(&mut con, &strs(&case.block));
        let a_ran = f.started.clone();
        let mut a = start(
            s,
            &format!("A-{}", case.tag),
            &case.a,
            &format!("touch {}", path(&a_ran)),
        );
        wait_for_waiters(&mut con, &case.contested, 1);
        a.signal(libc::SIGKILL);
        assert_eq!(a.wait_code(), 137);
        wait_until("the server to drop A's wait", || {
            waiters(&mut con, &case.contested) == 0
        });
        // B waits for the test's hold, or shares it (a reader).
        let b_ran = f.b_mark.clone();
        let mut b = start(
            s,
            &format!("B-{}", case.tag),
            &case.b,
            &format!("touch {}", path(&b_ran)),
        );
        q::<Value>(&mut con, &strs(&case.unblock));
        assert_eq!(b.wait_code(), 0, "{}", case.tag);
        assert!(b_ran.exists(), "{}", case.tag);
        assert!(!a_ran.exists(), "{}: A's command ran", case.tag);
        for key in &case.keys {
            assert!(info(&mut con, key).is_empty(), "{}: {key} left", case.tag);
        }
    });
}

/// The heart of it: SIGKILL to the runner while its command runs. The
/// command dies with it (parent-death signal), a process it started keeps
/// the holder connection (inherited) and with it the lock, past many
/// leases, until it exits.
#[test]
fn killed_while_holding_the_lock_outlives_the_commands_processes() {
    let s = Server::start();
    every_case(&s, |s, case, f| {
        let owner = format!("A-{}", case.tag);
        let mut a = start(s, &owner, &case.a, &f.a_script(true));
        wait_file(&f.started);
        a.signal(libc::SIGKILL);
        assert_eq!(a.wait_code(), 137);
        after_the_kill(s, case, f, &owner, Duration::from_millis(LEASE_MS * 5 / 2));
    });
}

/// The holder connection broke (CLIENT KILL) and the runner re-attached
/// the hold to a new connection, which the command does not have: a runner
/// killed now takes its command with it (the command is one process here;
/// see docs/cli.md for processes it starts).
#[test]
fn killed_after_a_reattach_the_command_dies_with_it() {
    let s = Server::start();
    every_case(&s, |s, case, f| {
        let owner = format!("A-{}", case.tag);
        let mut a = start(s, &owner, &case.a, &f.a_script(false));
        wait_file(&f.started);
        let mut con = s.client();
        let first = bound(&mut con, &case.keys[0], &owner).expect("bound");
        let killed: i64 = q(&mut con, &["CLIENT", "KILL", "ID", &first.to_string()]);
        assert_eq!(killed, 1);
        wait_until("a new binding", || {
            case.keys
                .iter()
                .all(|k| bound(&mut con, k, &owner).is_some_and(|id| id != first))
        });
        a.signal(libc::SIGKILL);
        assert_eq!(a.wait_code(), 137);
        after_the_kill(s, case, f, &owner, Duration::ZERO);
    });
}

/// A binding taken over by another connection (`LOCK.RENEW ... KEEPALIVE`
/// sent by the test as the owner) is re-attached by the runner on its own
/// connection, the one the command inherited, not a new one: killing the
/// runner afterwards still leaves the lock to the command's processes.
#[test]
fn a_reattach_keeps_the_inherited_connection_while_it_works() {
    let s = Server::start();
    every_case(&s, |s, case, f| {
        let owner = format!("A-{}", case.tag);
        let mut a = start(s, &owner, &case.a, &f.a_script(true));
        wait_file(&f.started);
        let mut con = s.client();
        let first = bound(&mut con, &case.keys[0], &owner).expect("bound");
        let mut other = s.client();
        let other_id = common::client_id(&mut other);
        for key in &case.keys {
            q::<Value>(
                &mut other,
                &["LOCK.RENEW", key, &owner, "PX", "1000", "KEEPALIVE"],
            );
            assert_eq!(bound(&mut con, key, &owner), Some(other_id));
        }
        wait_until(&format!("{}: re-attached by the runner", case.tag), || {
            case.keys
                .iter()
                .all(|k| bound(&mut con, k, &owner).is_some_and(|id| id != other_id))
        });
        for key in &case.keys {
            assert_eq!(
                bound(&mut con, key, &owner),
                Some(first),
                "{}: {key} re-attached on another connection than the command's",
                case.tag
            );
        }
        drop(other);
        a.signal(libc::SIGKILL);
        assert_eq!(a.wait_code(), 137);
        after_the_kill(s, case, f, &owner, Duration::from_millis(LEASE_MS * 5 / 2));
    });
}

/// SIGKILL while the runner releases (the release held back by CLIENT
/// PAUSE WRITE): the hold ends a lease later and the next run gets it.
#[test]
fn killed_while_releasing_the_next_run_gets_the_lock() {
    let s = Server::start();
    let mut admin = s.client();
    let dir = scratch();
    let all = cases();
    let mut runs = Vec::new();
    for case in &all {
        let f = Files::new(&dir, case.tag);
        let owner = format!("A-{}", case.tag);
        let script = format!(
            "exec >/dev/null 2>&1 9>{tree}; flock -x 9; touch {started}; \
             while [ ! -e {go} ]; do sleep 0.02; done",
            tree = path(&f.tree),
            started = path(&f.started),
            go = path(&f.go)
        );
        let a = start(&s, &owner, &case.a, &script);
        wait_file(&f.started);
        runs.push((f, owner, a));
    }
    q::<()>(&mut admin, &["CLIENT", "PAUSE", "60000", "WRITE"]);
    for (f, _, _) in &runs {
        fs::write(&f.go, "").expect("go");
    }
    wait_until("every runner releasing (held back)", || {
        let list: String = q(&mut admin, &["CLIENT", "LIST"]);
        list.lines()
            .filter(|l| {
                l.contains(" flags=b ")
                    && (l.contains(" cmd=lock.release ") || l.contains(" cmd=lock.mrelease "))
            })
            .count()
            == all.len()
    });
    for (_, _, a) in runs.iter_mut() {
        a.signal(libc::SIGKILL);
        assert_eq!(a.wait_code(), 137);
    }
    q::<()>(&mut admin, &["CLIENT", "UNPAUSE"]);
    every_case(&s, |s, case, _| {
        let (f, owner, _) = runs
            .iter()
            .find(|(_, o, _)| o.ends_with(case.tag))
            .expect("its run");
        let mut b = start(s, &format!("B-{}", case.tag), &case.b, &f.b_script());
        assert_eq!(b.wait_code(), 0, "{}", case.tag);
        assert_eq!(read(&f.b_mark).trim(), "clear", "{}", case.tag);
        let mut con = s.client();
        for key in &case.keys {
            assert!(!held_by(&mut con, key, owner), "{}", case.tag);
        }
    });
}

/// The command inherits the holder connection and nothing else of
/// redis-lock's: LOCK_FD names the one socket it has.
#[test]
fn the_command_inherits_the_holder_connection_only() {
    let s = Server::start();
    let dir = scratch();
    let out = dir.join("fds");
    let script = format!(
        "echo \"fd $LOCK_FD\" > {o}; for f in /proc/$$/fd/*; do \
         echo \"$(basename $f) $(readlink $f)\"; done >> {o}",
        o = path(&out)
    );
    let mut r = Runner::start(
        &s,
        &["run", "--owner", "me", "job", "--", "sh", "-c", &script],
    );
    assert_eq!(r.wait_code(), 0);
    let text = read(&out);
    let lock_fd = text
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("fd "))
        .unwrap_or_default()
        .to_string();
    assert!(lock_fd.parse::<i32>().is_ok(), "LOCK_FD: {text}");
    let sockets: Vec<&str> = text
        .lines()
        .skip(1)
        .filter(|l| l.contains("socket:"))
        .collect();
    assert_eq!(sockets.len(), 1, "{text}");
    assert!(sockets[0].starts_with(&format!("{lock_fd} ")), "{text}");
}
