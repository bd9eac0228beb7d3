//! `redis-lock run --semaphore NAME:N` against a real server with the module:
//! at most N commands run at once, the next one starts when one ends, a
//! killed runner's permit comes back, a run given up while waiting leaves no
//! waiter, another total is warned about.

#[path = "../../tests/common/mod.rs"]
mod common;
mod util;

use common::{raw, wait_until, Server, Value};
use redis_lock_client::proto::{int_field, sem_holders, SemHolder};
use util::{held_until, output, path, scratch, wait_file, Runner};

fn sem_info(con: &mut redis::Connection, key: &str) -> Value {
    raw(con, &["SEM.INFO", key]).expect("SEM.INFO")
}

fn holders(con: &mut redis::Connection, key: &str) -> Vec<SemHolder> {
    sem_holders(&sem_info(con, key))
}

fn available(con: &mut redis::Connection, key: &str) -> Option<i64> {
    int_field(&sem_info(con, key), "available")
}

fn sem_waiters(con: &mut redis::Connection, key: &str) -> i64 {
    int_field(&sem_info(con, key), "waiters").unwrap_or(0)
}

#[test]
fn two_permits_three_runs_the_third_waits_for_one_to_end() {
    let s = Server::start();
    let mut con = s.client();
    let dir = scratch();
    let started: Vec<_> = (0..3).map(|i| dir.join(format!("started-{i}"))).collect();
    let go: Vec<_> = (0..3).map(|i| dir.join(format!("go-{i}"))).collect();
    let run = |i: usize| {
        let script = held_until(&started[i], &go[i]);
        let owner = format!("run-{i}");
        Runner::start(
            &s,
            &[
                "run",
                "-q",
                "--semaphore",
                "pool:2",
                "--owner",
                &owner,
                "--",
                "sh",
                "-c",
                &script,
            ],
        )
    };
    let mut r0 = run(0);
    let mut r1 = run(1);
    wait_file(&started[0]);
    wait_file(&started[1]);
    let mut r2 = run(2);
    wait_until("the third run queued", || {
        sem_waiters(&mut con, "pool") == 1
    });
    // Queued with both permits held: its command cannot have started.
    assert!(!started[2].exists());
    assert_eq!(available(&mut con, "pool"), Some(0));
    let held = holders(&mut con, "pool");
    let owners: Vec<&str> = held.iter().map(|h| h.owner.as_str()).collect();
    assert_eq!(owners, ["run-0", "run-1"]);
    assert!(
        held.iter().all(|h| h.keepalive_client.is_some()),
        "KEEPALIVE: {held:?}"
    );

    std::fs::write(&go[1], "").expect("go");
    assert_eq!(r1.wait_code(), 0);
    wait_file(&started[2]);
    let owners: Vec<String> = holders(&mut con, "pool")
        .into_iter()
        .map(|h| h.owner)
        .collect();
    assert_eq!(owners, ["run-0", "run-2"]);
    assert!(!r0.exited(), "the first run still runs");

    std::fs::write(&go[0], "").expect("go");
    std::fs::write(&go[2], "").expect("go");
    assert_eq!(r0.wait_code(), 0);
    assert_eq!(r2.wait_code(), 0);
    assert_eq!(available(&mut con, "pool"), Some(2));
    assert!(holders(&mut con, "pool").is_empty());

    // The total is set once: another N is warned about, and the run goes on.
    let out = output(&s, &["run", "--semaphore", "pool:3", "--", "true"]);
    assert_eq!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("has 2 permits, not 3"), "{err}");
    assert_eq!(
        int_field(&sem_info(&mut con, "pool"), "permits"),
        Some(2),
        "unchanged"
    );
}

#[test]
fn full_semaphore_exit_codes_and_a_run_given_up_while_waiting() {
    let s = Server::start();
    let mut con = s.client();
    assert_eq!(
        raw(&mut con, &["SEM.INIT", "one", "1"]).expect("SEM.INIT"),
        Value::Int(1)
    );
    assert_eq!(
        raw(&mut con, &["SEM.ACQUIRE", "one", "other", "PX", "60000"]).expect("SEM.ACQUIRE"),
        Value::Int(1)
    );
    let out = output(
        &s,
        &["run", "-n", "-E", "9", "--semaphore", "one:1", "--", "true"],
    );
    assert_eq!(out.status.code(), Some(9));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("one: all 1 permits are held"), "{err}");
    // A run that was never given the permit leaves no waiter and no permit
    // when SIGTERM ends its wait.
    let mut waiting = Runner::start(
        &s,
        &[
            "run",
            "-q",
            "--semaphore",
            "one:1",
            "--owner",
            "quitter",
            "--",
            "true",
        ],
    );
    wait_until("the run queued", || sem_waiters(&mut con, "one") == 1);
    waiting.signal(libc::SIGTERM);
    assert_eq!(waiting.wait_code(), 128 + libc::SIGTERM);
    assert_eq!(sem_waiters(&mut con, "one"), 0);
    let owners: Vec<String> = holders(&mut con, "one")
        .into_iter()
        .map(|h| h.owner)
        .collect();
    assert_eq!(owners, ["other"]);
}

#[test]
fn a_killed_runners_permit_comes_back() {
    let s = Server::start();
    let mut con = s.client();
    let dir = scratch();
    let (a_started, b_started) = (dir.join("a"), dir.join("b"));
    let a_script = format!("touch {}; exec sleep 30", path(&a_started));
    let mut a = Runner::start(
        &s,
        &[
            "run",
            "-q",
            "--lease",
            "1s",
            "--owner",
            "A",
            "--semaphore",
            "k:1",
            "--",
            "sh",
            "-c",
            &a_script,
        ],
    );
    wait_file(&a_started);
    let b_script = format!("touch {}", path(&b_started));
    let mut b = Runner::start(
        &s,
        &[
            "run",
            "-q",
            "--lease",
            "1s",
            "--owner",
            "B",
            "--semaphore",
            "k:1",
            "--",
            "sh",
            "-c",
            &b_script,
        ],
    );
    wait_until("B queued", || sem_waiters(&mut con, "k") == 1);
    assert!(!b_started.exists());
    a.signal(libc::SIGKILL);
    assert_eq!(a.wait_code(), 128 + libc::SIGKILL);
    // The kernel kills A's command with it, the holder connection closes, the
    // permit lives out its lease and goes to B.
    wait_file(&b_started);
    assert_eq!(b.wait_code(), 0);
    assert!(holders(&mut con, "k").is_empty());
    assert_eq!(available(&mut con, "k"), Some(1));
}
