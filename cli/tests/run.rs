//! `redis-lock run` against a real server with the module: mutual exclusion,
//! exit codes, signals, a lost lock, fencing tokens, KEEPALIVE and
//! re-attaching after the holder's connection is killed.

#[path = "../../tests/common/mod.rs"]
mod common;
mod util;

use std::fs;
use std::time::{Duration, Instant};

use common::{field, lock_info, q, raw, wait_for_waiters, wait_until, waiters, Server};
use util::{code, held_until, output, path, read, scratch, wait_file, Runner};

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn owner_of(con: &mut redis::Connection, key: &str) -> Option<String> {
    field(&lock_info(con, key), "owner")
}

#[test]
fn two_runners_take_turns() {
    let s = Server::start();
    let dir = scratch();
    let log = dir.join("log");
    let script = |id: &str| {
        format!(
            "echo start {id} >> {f}; sleep 0.3; echo end {id} >> {f}",
            f = path(&log)
        )
    };
    let (a, b) = (script("A"), script("B"));
    let mut ra = Runner::start(&s, &["run", "job", "--", "sh", "-c", &a]);
    let mut rb = Runner::start(&s, &["run", "job", "--", "sh", "-c", &b]);
    assert_eq!(ra.wait_code(), 0);
    assert_eq!(rb.wait_code(), 0);
    let lines: Vec<String> = read(&log).lines().map(String::from).collect();
    assert_eq!(lines.len(), 4, "{lines:?}");
    for pair in lines.chunks(2) {
        let id = pair[0].strip_prefix("start ").expect("a start first");
        assert_eq!(pair[1], format!("end {id}"), "interleaved: {lines:?}");
    }
    assert_ne!(lines[0], lines[2]);
    assert!(lock_info(&mut s.client(), "job").is_empty());
}

#[test]
fn busy_lock_gives_the_conflict_code() {
    let s = Server::start();
    let mut con = s.client();
    assert_eq!(
        q::<i64>(&mut con, &["LOCK.ACQUIRE", "job", "other", "PX", "30000"]),
        1
    );
    let out = output(&s, &["run", "-n", "job", "--", "true"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("busy"));
    assert_eq!(
        code(&s, &["run", "-n", "-E", "42", "job", "--", "true"]),
        42
    );
    assert_eq!(
        code(&s, &["run", "-q", "-n", "-E", "42", "job", "--", "true"]),
        42
    );
    let t0 = Instant::now();
    assert_eq!(
        code(&s, &["run", "--wait", "200ms", "job", "--", "true"]),
        1
    );
    let took = t0.elapsed();
    assert!(took >= Duration::from_millis(200), "{took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(
        code(
            &s,
            &["run", "--wait", "200ms", "-E", "9", "job", "--", "true"]
        ),
        9
    );
    assert_eq!(owner_of(&mut con, "job").as_deref(), Some("other"));
}

/// A run of `outer` (with `opts`) whose command, once `go<n>` exists in
/// `dir`, runs `inner` as the same owner (`--owner "$LOCK_OWNER"`: one owner
/// holding `outer` and waiting for `inner`), touching `ran<n>`; `held<n>`
/// once it holds `outer`, the inner run's stderr in `err<n>`.
fn chain_args(
    dir: &std::path::Path,
    opts: &[&str],
    outer: &str,
    inner: &str,
    n: &str,
) -> Vec<String> {
    let f = |name: &str| path(&dir.join(format!("{name}{n}")));
    let script = format!(
        "touch {held}; while [ ! -e {go} ]; do sleep 0.01; done; \
         exec {bin} run -q --owner \"$LOCK_OWNER\" {inner} -- touch {ran} 2> {err}",
        held = f("held"),
        go = f("go"),
        bin = util::BIN,
        ran = f("ran"),
        err = f("err"),
    );
    let mut args = vec!["run", "-q"];
    args.extend_from_slice(opts);
    args.extend(["--", "sh", "-c", &script]);
    args.insert(2 + opts.len(), outer);
    args.into_iter().map(String::from).collect()
}

#[test]
fn nested_runs_in_opposite_orders_the_second_wait_is_refused_with_deadlock() {
    // Two runs, each holding one lock and running an inner run of the other lock as the
    // same owner (--owner "$LOCK_OWNER": the server sees one owner holding one lock and
    // waiting for the other). Chain 1 waits for B first; chain 2's wait for A would close
    // the cycle: refused at once, exit 79, its command not run, B released when chain 2
    // ends, and chain 1's inner run served then.
    let s = Server::start();
    let mut con = s.client();
    let dir = scratch();
    let f = |name: &str| dir.join(name);
    let mut one = Runner::start(&s, &strs(&chain_args(&dir, &[], "A", "B", "1")));
    let mut two = Runner::start(&s, &strs(&chain_args(&dir, &[], "B", "A", "2")));
    wait_file(&f("held1"));
    wait_file(&f("held2"));
    fs::write(f("go1"), "").unwrap();
    wait_for_waiters(&mut con, "B", 1);
    fs::write(f("go2"), "").unwrap();
    assert_eq!(two.wait_code(), 79, "{}", read(&f("err2")));
    let err = read(&f("err2"));
    assert_eq!(err.lines().count(), 1, "{err:?}");
    assert!(
        err.starts_with("redis-lock: not waiting for A: "),
        "{err:?}"
    );
    assert!(err.contains("'A'") && err.contains("'B'"), "{err:?}");
    assert!(!f("ran2").exists(), "the refused run ran its command");
    assert_eq!(one.wait_code(), 0, "{}", read(&f("err1")));
    assert!(f("ran1").exists());
    assert_eq!(read(&f("err1")), "");
    assert!(lock_info(&mut con, "A").is_empty() && lock_info(&mut con, "B").is_empty());
}

#[test]
fn a_chain_killed_while_it_waits_closes_no_cycle_and_holds_its_lock_to_its_lease() {
    // Chain 1 holds A and waits for B as the same owner; kill -9 of its runner (its
    // command, the inner run, dies with it) ends that wait. Chain 2, holding B, then
    // waits for A: no DEADLOCK (nobody waits for B any more), A stays chain 1's until
    // its lease ends (no second holder meanwhile), then chain 2 is served.
    let s = Server::start();
    let mut con = s.client();
    let dir = scratch();
    let f = |name: &str| dir.join(name);
    // A 3 s lease: at least 1.5 s of it is left at the kill (renewed at
    // half), time enough for chain 2 to queue before it ends.
    let lease = ["--lease", "3s"];
    let one = Runner::start(&s, &strs(&chain_args(&dir, &lease, "A", "B", "1")));
    let mut two = Runner::start(&s, &strs(&chain_args(&dir, &lease, "B", "A", "2")));
    wait_file(&f("held1"));
    wait_file(&f("held2"));
    let first = owner_of(&mut con, "A").expect("chain 1 holds A");
    fs::write(f("go1"), "").unwrap();
    wait_for_waiters(&mut con, "B", 1);
    one.signal(libc::SIGKILL);
    // Its inner run died with it: its wait for B is gone.
    wait_for_waiters(&mut con, "B", 0);
    fs::write(f("go2"), "").unwrap();
    // Queued, not refused; A still the dead chain's, not handed over early.
    wait_for_waiters(&mut con, "A", 1);
    assert_eq!(owner_of(&mut con, "A").as_deref(), Some(first.as_str()));
    assert_eq!(s.stat("deadlocks"), 0);
    assert_eq!(two.wait_code(), 0, "{}", read(&f("err2")));
    assert!(f("ran2").exists());
    assert!(!f("ran1").exists(), "the killed chain's inner command ran");
    assert_eq!(s.stat("deadlocks"), 0);
    assert!(lock_info(&mut con, "A").is_empty() && lock_info(&mut con, "B").is_empty());
}

#[test]
fn the_commands_status_passes_through() {
    let s = Server::start();
    assert_eq!(code(&s, &["run", "job", "--", "true"]), 0);
    assert_eq!(code(&s, &["run", "job", "--", "sh", "-c", "exit 7"]), 7);
    assert_eq!(
        code(&s, &["run", "job", "--", "sh", "-c", "kill -9 $$"]),
        137
    );
    assert_eq!(
        code(&s, &["run", "job", "--", "sh", "-c", "kill -TERM $$"]),
        143
    );
    assert_eq!(code(&s, &["run", "job", "--", "/nonexistent/cmd"]), 127);
    assert_eq!(code(&s, &["run", "job", "--", "/"]), 126);
    assert!(lock_info(&mut s.client(), "job").is_empty());
}

#[test]
fn usage_and_unreachable_codes() {
    let s = Server::start();
    assert_eq!(code(&s, &["run", "job"]), 64);
    assert_eq!(code(&s, &["run", "--lease", "0", "job", "--", "true"]), 64);
    assert_eq!(code(&s, &["run", "--read", "a", "b", "--", "true"]), 64);
    let free = common::free_port().to_string();
    let url = format!("redis://127.0.0.1:{free}");
    assert_eq!(code(&s, &["-u", &url, "run", "job", "--", "true"]), 69);
    // A server without the module: 78 (EX_CONFIG).
    let plain = common::Config::default().without_module().start();
    assert_eq!(code(&plain, &["run", "job", "--", "true"]), 78);
}

#[test]
fn sigterm_reaches_the_command_and_the_lock_is_released() {
    let s = Server::start();
    let dir = scratch();
    let (started, marker) = (dir.join("started"), dir.join("term"));
    let script = format!(
        "trap 'echo term > {m}; exit 3' TERM; touch {s}; while :; do sleep 0.02; done",
        m = path(&marker),
        s = path(&started)
    );
    let mut r = Runner::start(&s, &["run", "job", "--", "sh", "-c", &script]);
    wait_file(&started);
    assert!(owner_of(&mut s.client(), "job").is_some());
    r.signal(libc::SIGTERM);
    assert_eq!(r.wait_code(), 3);
    assert_eq!(read(&marker).trim(), "term");
    assert!(lock_info(&mut s.client(), "job").is_empty());
}

#[test]
fn a_signal_while_waiting_leaves_the_queue() {
    let s = Server::start();
    let mut con = s.client();
    q::<i64>(&mut con, &["LOCK.ACQUIRE", "job", "other", "PX", "30000"]);
    let mut r = Runner::start(&s, &["run", "job", "--", "true"]);
    wait_for_waiters(&mut con, "job", 1);
    r.signal(libc::SIGINT);
    assert_eq!(r.wait_code(), 130);
    wait_until("the waiter to leave", || waiters(&mut con, "job") == 0);
    assert_eq!(owner_of(&mut con, "job").as_deref(), Some("other"));
}

#[test]
fn force_release_ends_the_command_with_the_lost_code() {
    let s = Server::start();
    let dir = scratch();
    let (started, marker) = (dir.join("started"), dir.join("term"));
    let script = format!(
        "trap 'echo term > {m}; exit 0' TERM; touch {s}; while :; do sleep 0.02; done",
        m = path(&marker),
        s = path(&started)
    );
    let mut r = Runner::start(&s, &["run", "job", "--", "sh", "-c", &script]);
    wait_file(&started);
    let t0 = Instant::now();
    assert_eq!(q::<i64>(&mut s.client(), &["LOCK.FORCERELEASE", "job"]), 1);
    assert_eq!(r.wait_code(), 75);
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    assert_eq!(read(&marker).trim(), "term");
}

#[test]
fn a_command_that_ignores_sigterm_is_killed_after_the_grace() {
    let s = Server::start();
    let dir = scratch();
    let (started, marker) = (dir.join("started"), dir.join("term"));
    let script = format!(
        "trap 'echo term >> {m}' TERM; touch {s}; while :; do sleep 0.02; done",
        m = path(&marker),
        s = path(&started)
    );
    let args = ["run", "--grace", "300ms", "job", "--", "sh", "-c", &script];
    let mut r = Runner::start(&s, &args);
    wait_file(&started);
    q::<i64>(&mut s.client(), &["LOCK.FORCERELEASE", "job"]);
    wait_file(&marker);
    assert_eq!(r.wait_code(), 75);
    // --on-lost kill: no SIGTERM first.
    let started2 = dir.join("started2");
    let script = format!(
        "trap 'echo term2 >> {m}' TERM; touch {s}; while :; do sleep 0.02; done",
        m = path(&marker),
        s = path(&started2)
    );
    let mut r = Runner::start(
        &s,
        &["run", "--on-lost", "kill", "job", "--", "sh", "-c", &script],
    );
    wait_file(&started2);
    q::<i64>(&mut s.client(), &["LOCK.FORCERELEASE", "job"]);
    assert_eq!(r.wait_code(), 75);
    assert_eq!(read(&marker).trim(), "term");
}

#[test]
fn tokens_grow_from_run_to_run_and_the_environment_is_set() {
    let s = Server::start();
    let dir = scratch();
    let mut tokens = Vec::new();
    for i in 0..3 {
        let f = dir.join(format!("env{i}"));
        let script = format!("echo \"$LOCK_TOKEN|$LOCK_NAME|$LOCK_OWNER\" > {}", path(&f));
        let args = [
            "run", "--fence", "--owner", "me:1", "job", "--", "sh", "-c", &script,
        ];
        assert_eq!(code(&s, &args), 0);
        let text = read(&f);
        let parts: Vec<&str> = text.trim().split('|').collect();
        assert_eq!(parts[1..], ["job", "me:1"], "{text}");
        tokens.push(parts[0].parse::<i64>().expect("a token"));
    }
    assert!(tokens.windows(2).all(|w| w[1] > w[0]), "{tokens:?}");
    // Without --fence there is no LOCK_TOKEN; several names are joined.
    let f = dir.join("plain");
    let script = format!("echo \"${{LOCK_TOKEN-none}}|$LOCK_NAME\" > {}", path(&f));
    assert_eq!(code(&s, &["run", "a", "b", "--", "sh", "-c", &script]), 0);
    assert_eq!(read(&f).trim(), "none|a b");
    let f = dir.join("multi");
    let script = format!("echo \"$LOCK_TOKEN\" > {}", path(&f));
    assert_eq!(
        code(&s, &["run", "--fence", "a", "b", "--", "sh", "-c", &script]),
        0
    );
    assert_eq!(read(&f).split_whitespace().count(), 2);
}

#[test]
fn keepalive_holds_the_lock_past_its_lease() {
    let s = Server::start();
    let dir = scratch();
    let (started, done) = (dir.join("started"), dir.join("done"));
    let script = format!("touch {}; sleep 2; touch {}", path(&started), path(&done));
    let args = [
        "run", "--lease", "800ms", "--owner", "keeper", "job", "--", "sh", "-c", &script,
    ];
    let mut r = Runner::start(&s, &args);
    wait_file(&started);
    let t0 = Instant::now();
    let mut con = s.client();
    let mut longest = Duration::ZERO;
    while !done.exists() {
        let info = lock_info(&mut con, "job");
        if done.exists() {
            break;
        }
        assert_eq!(field(&info, "owner").as_deref(), Some("keeper"), "{info:?}");
        longest = t0.elapsed();
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        longest > Duration::from_millis(1600),
        "held for {longest:?} only"
    );
    assert_eq!(r.wait_code(), 0);
    assert!(lock_info(&mut con, "job").is_empty());
}

#[test]
fn a_killed_holder_connection_is_reattached() {
    let s = Server::start();
    let dir = scratch();
    let (started, go) = (dir.join("started"), dir.join("go"));
    let script = held_until(&started, &go);
    let args = [
        "run", "--lease", "1s", "--owner", "keeper", "job", "--", "sh", "-c", &script,
    ];
    let mut r = Runner::start(&s, &args);
    wait_file(&started);
    let mut con = s.client();
    let first = field(&lock_info(&mut con, "job"), "keepalive_client").expect("bound");
    let killed: i64 = q(&mut con, &["CLIENT", "KILL", "ID", &first]);
    assert_eq!(killed, 1);
    let t0 = Instant::now();
    wait_until("a new binding", || {
        field(&lock_info(&mut con, "job"), "keepalive_client").is_some_and(|c| c != first)
    });
    // Two leases later it is still held, and by the runner.
    while t0.elapsed() < Duration::from_millis(2000) {
        let info = lock_info(&mut con, "job");
        assert_eq!(field(&info, "owner").as_deref(), Some("keeper"), "{info:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    fs::write(&go, "").expect("go");
    assert_eq!(r.wait_code(), 0);
    assert!(lock_info(&mut con, "job").is_empty());
}

#[test]
fn several_names_are_taken_at_once() {
    let s = Server::start();
    let dir = scratch();
    let (started, go) = (dir.join("started"), dir.join("go"));
    let script = held_until(&started, &go);
    let mut r = Runner::start(
        &s,
        &["run", "--owner", "m", "a", "b", "--", "sh", "-c", &script],
    );
    wait_file(&started);
    let mut con = s.client();
    assert_eq!(owner_of(&mut con, "a").as_deref(), Some("m"));
    assert_eq!(owner_of(&mut con, "b").as_deref(), Some("m"));
    assert_eq!(code(&s, &["run", "-n", "b", "c", "--", "true"]), 1);
    assert!(lock_info(&mut con, "c").is_empty(), "all or none");
    fs::write(&go, "").expect("go");
    assert_eq!(r.wait_code(), 0);
    assert!(lock_info(&mut con, "a").is_empty());
    assert!(lock_info(&mut con, "b").is_empty());
}

#[test]
fn readers_share_a_writer_waits() {
    let s = Server::start();
    let dir = scratch();
    let go = dir.join("go");
    let reader = |i: usize| {
        let started = dir.join(format!("r{i}"));
        let script = held_until(&started, &go);
        (
            started,
            Runner::start(&s, &["run", "--read", "cfg", "--", "sh", "-c", &script]),
        )
    };
    let (s1, mut r1) = reader(1);
    let (s2, mut r2) = reader(2);
    wait_file(&s1);
    wait_file(&s2);
    let info = lock_info(&mut s.client(), "cfg");
    assert_eq!(field(&info, "mode").as_deref(), Some("read"), "{info:?}");
    assert_eq!(code(&s, &["run", "--write", "-n", "cfg", "--", "true"]), 1);
    fs::write(&go, "").expect("go");
    assert_eq!(r1.wait_code(), 0);
    assert_eq!(r2.wait_code(), 0);
    assert_eq!(code(&s, &["run", "--write", "-n", "cfg", "--", "true"]), 0);
    assert!(lock_info(&mut s.client(), "cfg").is_empty());
}

#[test]
fn release_and_force_release() {
    let s = Server::start();
    let mut con = s.client();
    q::<i64>(&mut con, &["LOCK.ACQUIRE", "job", "o1", "PX", "30000"]);
    q::<i64>(&mut con, &["LOCK.ACQUIRE", "job", "o1", "PX", "30000"]);
    let out = output(&s, &["release", "--owner", "o1", "job"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "job: 1 hold left\n");
    let out = util::cli(&s, &["release", "job"])
        .env("LOCK_OWNER", "o1")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "job: released\n");
    assert_eq!(code(&s, &["release", "--owner", "o1", "job"]), 1);
    assert_eq!(code(&s, &["release", "job"]), 64, "no owner");
    q::<i64>(&mut con, &["LOCK.ACQUIRE", "job", "o2", "PX", "30000"]);
    assert_eq!(code(&s, &["force-release", "job"]), 0);
    assert!(lock_info(&mut con, "job").is_empty());
    assert_eq!(code(&s, &["force-release", "job"]), 1);
    raw(&mut con, &["SET", "str", "x"]).expect("SET");
    assert_eq!(code(&s, &["force-release", "str"]), 76);
}
