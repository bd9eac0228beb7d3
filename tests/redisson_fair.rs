//! Redisson's fair lock (RFairLock) on a name, with our own scripts and a
//! client that runs them as Redisson does (tests/common/fair.rs; protocol in
//! shared/notes/redisson-fairlock.md).
//!
//! First pure Redisson semantics (no module caller): FIFO, the release waking
//! the next one on its own channel, pruning, acquireFailed, nothing left
//! behind. Then fair clients and the module's callers in one FIFO order
//! (issue 28).
//!
//! Each fair caller gets a 60 s lease and waits at most 10-20 s: a caller
//! that is not woken would sleep out the lease, which shows as a failure
//! (never as a slow pass).

use crate::common;
use common::fair::*;
use common::redis_cli::Cli;
use common::*;

use std::thread::{self, JoinHandle};
use std::time::Duration;

const OWNER_A: &str = "8743c9c0-0795-4907-87fd-6c719a6b4586:1";
const OWNER_B: &str = "8743c9c0-0795-4907-87fd-6c719a6b4586:57";
const OWNER_C: &str = "0e5a2f61-3c1d-4a8b-9f0e-2b7d6c4e1a90:1";

/// How long a fair caller of the issue-28 tests waits before giving up.
const FAIR_WAIT: Duration = Duration::from_secs(10);

/// `lock()` on a thread of its own; the handle gives back the client and how
/// its wait went.
fn spawn_lock(server: &Server, name: &str, owner: &str) -> JoinHandle<(FairClient, Wakes)> {
    let mut c = FairClient::new(server, name, owner);
    thread::spawn(move || {
        let w = c.lock();
        (c, w)
    })
}

/// `tryLock(FAIR_WAIT)` on a thread of its own.
fn spawn_try_lock(
    server: &Server,
    name: &str,
    owner: &str,
) -> JoinHandle<(FairClient, Option<Wakes>)> {
    let mut c = FairClient::new(server, name, owner);
    thread::spawn(move || {
        let w = c.try_lock(FAIR_WAIT);
        (c, w)
    })
}

/// `module-x` holds `res` through the module; B's tryLock then queues behind
/// it (returned running).
fn fair_b_behind_module_x(
    server: &Server,
    con: &mut Connection,
) -> JoinHandle<(FairClient, Option<Wakes>)> {
    acquire(con, "res", "module-x", &["PX", "60000"]);
    let b = spawn_try_lock(server, "res", OWNER_B);
    wait_queued(con, "res", OWNER_B);
    b
}

/// Joins B's tryLock started by [`spawn_try_lock`]: it must have been woken
/// by a message (no ttl slept out) and hold `res` once.
fn served_by_a_message(
    con: &mut Connection,
    b: JoinHandle<(FairClient, Option<Wakes>)>,
    gave_up: &str,
) -> FairClient {
    let (b, wakes) = b.join().expect("B's tryLock");
    let wakes = wakes.unwrap_or_else(|| panic!("B gave up: {gave_up}"));
    assert_eq!(wakes.timeouts, 0, "B slept out a ttl: {wakes:?}");
    assert_eq!(holds(con, "res", OWNER_B), Some(1));
    b
}

/// Waits until `owner` is queued on `name` and listens on its own channel.
fn wait_queued(con: &mut Connection, name: &str, owner: &str) {
    let (qk, ch) = (queue_key(name), own_channel(name, owner));
    wait_until(&format!("{owner} queued and subscribed"), || {
        let pos: Option<i64> = q(con, &["LPOS", &qk, owner]);
        let numsub: (String, i64) = q(con, &["PUBSUB", "NUMSUB", &ch]);
        pos.is_some() && numsub.1 == 1
    });
}

/// Scripts the server has run (`cmdstat_eval` calls).
fn scripts_run(server: &Server) -> i64 {
    server
        .info_field("commandstats", "cmdstat_eval")
        .and_then(|stats| {
            stats
                .split(',')
                .find_map(|kv| kv.strip_prefix("calls="))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

/// The server's clock (TIME) in unix ms, the clock deadlines are pruned by.
fn server_now_ms(con: &mut Connection) -> i64 {
    let (secs, micros): (String, String) = q(con, &["TIME"]);
    secs.parse::<i64>().expect("secs") * 1000 + micros.parse::<i64>().expect("us") / 1000
}

fn queue(con: &mut Connection, name: &str) -> Vec<String> {
    q(con, &["LRANGE", &queue_key(name), "0", "-1"])
}

fn deadline_of(con: &mut Connection, name: &str, owner: &str) -> Option<i64> {
    q(con, &["ZSCORE", &timeout_key(name), owner])
}

fn holds(con: &mut Connection, name: &str, owner: &str) -> Option<i64> {
    q(con, &["HGET", name, owner])
}

fn dbsize(con: &mut Connection) -> i64 {
    q(con, &["DBSIZE"])
}

// ---- Redisson semantics, no module caller ------------------------------

/// Three fair callers are served in arrival order, each woken by the
/// previous one's unlock on its own channel (not by the 60 s lease running
/// out), and the queue's keys are gone at the end.
#[test]
fn fair_clients_are_served_in_order_and_woken_by_the_release() {
    let server = Server::start();
    let mut con = server.client();
    let mut a = FairClient::new(&server, "res", OWNER_A);
    assert_eq!(a.lock().attempts, 1, "a free lock is taken at once");

    let b = spawn_lock(&server, "res", OWNER_B);
    wait_queued(&mut con, "res", OWNER_B);
    let c = spawn_lock(&server, "res", OWNER_C);
    wait_queued(&mut con, "res", OWNER_C);
    assert_eq!(queue(&mut con, "res"), [OWNER_B, OWNER_C]);
    // Each is due one wait (300 s) after the one before it.
    let due_b = deadline_of(&mut con, "res", OWNER_B).expect("B's deadline");
    let due_c = deadline_of(&mut con, "res", OWNER_C).expect("C's deadline");
    assert_eq!(due_c - due_b, DEFAULT_WAIT_MS);

    assert_eq!(a.unlock(), Value::Int(1));
    let (mut b, wakes_b) = b.join().expect("B's lock()");
    assert_eq!(wakes_b.timeouts, 0, "B slept out a ttl: {wakes_b:?}");
    assert_eq!(holds(&mut con, "res", OWNER_B), Some(1));
    // B's turn taken: C is first and due one wait earlier.
    assert_eq!(queue(&mut con, "res"), [OWNER_C]);
    assert_eq!(deadline_of(&mut con, "res", OWNER_C), Some(due_b));
    assert!(!c.is_finished(), "C got in while B held the lock");

    assert_eq!(b.unlock(), Value::Int(1));
    let (mut c, wakes_c) = c.join().expect("C's lock()");
    assert_eq!(wakes_c.timeouts, 0, "C slept out a ttl: {wakes_c:?}");
    assert_eq!(holds(&mut con, "res", OWNER_C), Some(1));
    assert_eq!(c.unlock(), Value::Int(1));
    assert_eq!(dbsize(&mut con), 0, "keys left behind");
}

/// acquireFailed takes a caller out of the queue and moves the one behind it
/// up by that caller's wait; tryLock without a wait never queues nor jumps
/// the queue.
#[test]
fn a_caller_that_gives_up_leaves_the_queue_and_the_next_moves_up() {
    let server = Server::start();
    let mut con = server.client();
    let mut a = FairClient::new(&server, "res", OWNER_A);
    a.lock();
    // B queues once and stops asking (the first half of a tryLock(1 s)).
    assert!(try_acquire(&mut con, "res", OWNER_B, 60_000, 1_000).is_some());
    let c = spawn_lock(&server, "res", OWNER_C);
    wait_queued(&mut con, "res", OWNER_C);
    let due_c = deadline_of(&mut con, "res", OWNER_C).expect("C's deadline");

    acquire_failed(&mut con, "res", OWNER_B, 1_000);
    assert_eq!(queue(&mut con, "res"), [OWNER_C]);
    assert_eq!(deadline_of(&mut con, "res", OWNER_B), None);
    assert_eq!(deadline_of(&mut con, "res", OWNER_C), Some(due_c - 1_000));

    assert_eq!(a.unlock(), Value::Int(1));
    // Free now, but C is first: a newcomer's tryLock() fails and queues nothing.
    assert!(!try_acquire_once(&mut con, "res", OWNER_B, 60_000));
    let (mut c, wakes) = c.join().expect("C's lock()");
    assert_eq!(wakes.timeouts, 0, "C slept out a ttl: {wakes:?}");
    assert_eq!(c.unlock(), Value::Int(1));
    assert_eq!(dbsize(&mut con), 0, "keys left behind");
}

/// A first in the queue that stopped asking is dropped once its deadline
/// passes, by the next caller's script; that caller then takes the lock.
#[test]
fn a_stale_first_in_the_queue_is_pruned() {
    let server = Server::start();
    let mut con = server.client();
    let mut a = FairClient::new(&server, "res", OWNER_A);
    a.lease_ms = 300;
    a.lock();
    // B queues with a 1 ms wait and is never heard of again: due 1 ms after
    // A's lease ends.
    assert!(try_acquire(&mut con, "res", OWNER_B, 60_000, 1).is_some());
    let (mut c, wakes) = spawn_lock(&server, "res", OWNER_C)
        .join()
        .expect("C's lock()");
    assert!(wakes.attempts >= 2, "{wakes:?}");
    assert_eq!(holds(&mut con, "res", OWNER_C), Some(1));
    assert_eq!(queue(&mut con, "res"), Vec::<String>::new());
    assert_eq!(c.unlock(), Value::Int(1));
    assert_eq!(dbsize(&mut con), 0, "keys left behind");
}

// ---- Fair clients and the module's callers in one order ---------------

/// LOCK.RELEASE of the last hold wakes the first fair waiter on its own
/// channel, which then takes the lock (without, it would sleep out its
/// ttl).
#[test]
fn lock_release_wakes_a_waiting_fair_client() {
    let server = Server::start();
    let mut con = server.client();
    let b = fair_b_behind_module_x(&server, &mut con);

    let _: Value = q(&mut con, &["LOCK.RELEASE", "res", "module-x"]);
    let mut b = served_by_a_message(&mut con, b, "never woken by LOCK.RELEASE");
    assert_eq!(b.unlock(), Value::Int(1));
    assert_eq!(dbsize(&mut con), 0, "keys left behind");
}

/// A fair client queued before a LOCK.ACQUIRE BLOCK caller is served first;
/// its unlock then hands the lock to the module's waiter.
#[test]
fn fair_client_queued_first_goes_before_a_later_module_waiter() {
    let server = Server::start();
    let mut con = server.client();
    let b = fair_b_behind_module_x(&server, &mut con);
    let mut w = module_waiter(&server, &mut con, "res", "module-w", "60000", "10000");

    let _: Value = q(&mut con, &["LOCK.RELEASE", "res", "module-x"]);
    let mut b = served_by_a_message(&mut con, b, "the module's waiter went first");
    assert_eq!(
        waiters(&mut con, "res"),
        1,
        "the module's waiter still waits"
    );

    assert_eq!(b.unlock(), Value::Int(1));
    assert_served(&mut con, &mut w, "res", "module-w");
    let _: Value = q(&mut con, &["LOCK.RELEASE", "res", "module-w"]);
    assert_eq!(dbsize(&mut con), 0, "keys left behind");
}

/// A LOCK.ACQUIRE BLOCK caller queued before a fair client is served first;
/// its LOCK.RELEASE then wakes the fair client, which takes the lock.
#[test]
fn module_waiter_queued_first_goes_before_a_later_fair_client() {
    let server = Server::start();
    let mut con = server.client();
    acquire(&mut con, "res", "module-x", &["PX", "60000"]);
    let mut w = module_waiter(&server, &mut con, "res", "module-w", "60000", "10000");
    let b = spawn_try_lock(&server, "res", OWNER_B);
    wait_queued(&mut con, "res", OWNER_B);

    let _: Value = q(&mut con, &["LOCK.RELEASE", "res", "module-x"]);
    assert_served(&mut con, &mut w, "res", "module-w");

    let _: Value = q(&mut con, &["LOCK.RELEASE", "res", "module-w"]);
    let mut b = served_by_a_message(&mut con, b, "never woken by LOCK.RELEASE");
    assert_eq!(b.unlock(), Value::Int(1));
    assert_eq!(dbsize(&mut con), 0, "keys left behind");
}

/// A lock freed for the first fair waiter is not free for anyone else until
/// that waiter takes it (or is pruned): LOCK.ACQUIRE without BLOCK fails as
/// Redisson's own tryLock() does.
#[test]
fn a_lock_left_to_the_first_fair_waiter_is_not_taken_by_lock_acquire() {
    let server = Server::start();
    let mut con = server.client();
    acquire(&mut con, "res", "module-x", &["PX", "60000"]);
    // B queued (a minute's wait), not retrying by itself.
    assert!(try_acquire(&mut con, "res", OWNER_B, 60_000, 60_000).is_some());
    let _: Value = q(&mut con, &["LOCK.RELEASE", "res", "module-x"]);

    assert!(!try_acquire_once(&mut con, "res", OWNER_C, 60_000));
    assert_eq!(
        acquire(&mut con, "res", "module-y", &["PX", "60000"]),
        Value::Nil,
        "LOCK.ACQUIRE jumped the fair queue"
    );
    assert_eq!(try_acquire(&mut con, "res", OWNER_B, 60_000, 60_000), None);
    assert_eq!(release(&mut con, "res", OWNER_B, 60_000), Value::Int(1));
    assert_eq!(dbsize(&mut con), 0, "keys left behind");
}

/// A fair waiter that died while first in the queue (its deadline passed)
/// is pruned by the module when the module's holder's lease ends, and
/// nothing is left behind even though no other client comes.
#[test]
fn a_dead_fair_waiter_is_pruned_after_a_module_lease_ends() {
    let server = Server::start();
    let mut con = server.client();
    acquire(&mut con, "res", "module-x", &["PX", "300"]);
    // Due 1 ms after the lease ends; never asks again.
    assert!(try_acquire(&mut con, "res", OWNER_B, 60_000, 1).is_some());
    wait_until("the queue pruned and every key gone", || {
        dbsize(&mut con) == 0
    });
}

/// A fair waiter the lock is kept for that gives up (Redisson's
/// acquireFailed: LREM of its entry) lets the module's waiter queued behind
/// it have the lock at once, not at the fair waiter's deadline a minute on.
#[test]
fn a_fair_waiter_that_gives_up_lets_the_module_waiter_behind_it_go() {
    let server = Server::start();
    let mut con = server.client();
    acquire(&mut con, "res", "module-x", &["PX", "60000"]);
    // B queued with a minute's wait, not retrying by itself.
    assert!(try_acquire(&mut con, "res", OWNER_B, 60_000, 60_000).is_some());
    let mut w = module_waiter(&server, &mut con, "res", "module-w", "60000", "20000");
    let _: Value = q(&mut con, &["LOCK.RELEASE", "res", "module-x"]);
    let queued: Vec<Value> = q(&mut con, &["LOCK.WAITERS", "res"]);
    assert_eq!(queued.len(), 1, "kept for B, W still waits");
    assert_eq!(q::<i64>(&mut con, &["EXISTS", "res"]), 0);

    acquire_failed(&mut con, "res", OWNER_B, 60_000);
    assert_served(&mut con, &mut w, "res", "module-w");
    let _: Value = q(&mut con, &["LOCK.RELEASE", "res", "module-w"]);
    assert_eq!(dbsize(&mut con), 0, "keys left behind");
}

/// A fair waiter the lock is kept for that never comes (killed while it
/// waited) is dropped at its deadline, by the server's clock, and the
/// module's waiter behind it served; not before that deadline.
#[test]
fn a_dead_fair_waiter_keeps_the_lock_until_its_deadline_only() {
    let server = Server::start();
    let mut con = server.client();
    acquire(&mut con, "res", "module-x", &["PX", "600"]);
    // Due 600 + 300 ms from now: the lock's PTTL plus its wait.
    assert!(try_acquire(&mut con, "res", OWNER_B, 60_000, 300).is_some());
    let due = deadline_of(&mut con, "res", OWNER_B).expect("B's deadline");
    let mut w = module_waiter(&server, &mut con, "res", "module-w", "60000", "20000");
    let _: Value = q(&mut con, &["LOCK.RELEASE", "res", "module-x"]);

    assert_eq!(recv(&mut w).expect("module waiter's reply"), Value::Int(1));
    let granted_at = server_now_ms(&mut con);
    assert!(
        granted_at >= due,
        "granted at {granted_at}, B was due at {due}"
    );
    assert_eq!(queue(&mut con, "res"), Vec::<String>::new());
    assert_eq!(deadline_of(&mut con, "res", OWNER_B), None);
    let _: Value = q(&mut con, &["LOCK.RELEASE", "res", "module-w"]);
    assert_eq!(dbsize(&mut con), 0, "keys left behind");
}

/// A Redisson unlock (its script: DEL, and `0` to the fair queue's head)
/// hands the lock to a module waiter queued before that head: the head,
/// woken, finds the lock held and waits on; the module waiter's release
/// then wakes it.
#[test]
fn a_redisson_unlock_serves_the_module_waiter_queued_before_the_next_fair_client() {
    let server = Server::start();
    let mut con = server.client();
    let mut a = FairClient::new(&server, "res", OWNER_A);
    a.lock();
    let mut w = module_waiter(&server, &mut con, "res", "module-w", "60000", "20000");
    let before = scripts_run(&server);
    let b = spawn_try_lock(&server, "res", OWNER_B);
    // B's two attempts (queued, then again once subscribed) are in: from
    // now on B only asks when woken. (An attempt of B's read in the same
    // event-loop pass as A's unlock, before the hand-off that follows it,
    // would find the lock free; see docs/semantics.md.)
    wait_until("B's attempts", || scripts_run(&server) >= before + 2);
    wait_queued(&mut con, "res", OWNER_B);

    assert_eq!(a.unlock(), Value::Int(1));
    assert_served(&mut con, &mut w, "res", "module-w");
    assert_eq!(queue(&mut con, "res"), [OWNER_B], "B still waits");

    let _: Value = q(&mut con, &["LOCK.RELEASE", "res", "module-w"]);
    let (mut b, wakes) = b.join().expect("B's tryLock");
    let wakes = wakes.expect("B gave up");
    assert_eq!(wakes.timeouts, 0, "B slept out a ttl: {wakes:?}");
    assert_eq!(b.unlock(), Value::Int(1));
    assert_eq!(dbsize(&mut con), 0, "keys left behind");
}

// ---- Processes killed (kill -9) ----------------------------------------

/// A module holder whose process is killed (its `KEEPALIVE` renewals stop,
/// its lease runs out) hands the lock on in order: to the fair client
/// queued first, then to the module waiter queued after it. Never two
/// holders: the fair client gets nothing while the dead holder's lease
/// lasts.
#[test]
fn a_killed_module_holder_hands_the_lock_on_in_order() {
    let server = Server::start();
    let mut con = server.client();
    let mut holder = Cli::local(&server);
    holder.run("LOCK.ACQUIRE res module-dead PX 1000 KEEPALIVE");
    wait_until("module-dead holds res", || {
        lock_field(&mut con, "res", "owner").as_deref() == Some("module-dead")
    });
    let b = spawn_try_lock(&server, "res", OWNER_B);
    wait_queued(&mut con, "res", OWNER_B);
    let mut w = module_waiter(&server, &mut con, "res", "module-w", "60000", "20000");

    // Renewed while its process lives, past its first lease: B waits on.
    let first_end: i64 = q(&mut con, &["PEXPIRETIME", "res"]);
    wait_until("a renewal of module-dead's lease", || {
        q::<i64>(&mut con, &["PEXPIRETIME", "res"]) > first_end + 500
    });
    assert_eq!(
        lock_field(&mut con, "res", "owner").as_deref(),
        Some("module-dead")
    );
    assert!(!b.is_finished(), "B got in while module-dead held the lock");

    holder.kill();
    let (mut b, wakes) = b.join().expect("B's tryLock");
    wakes.expect("B gave up");
    assert_eq!(holds(&mut con, "res", OWNER_B), Some(1));
    assert_eq!(b.unlock(), Value::Int(1));
    assert_served(&mut con, &mut w, "res", "module-w");
    let _: Value = q(&mut con, &["LOCK.RELEASE", "res", "module-w"]);
    assert_eq!(dbsize(&mut con), 0, "keys left behind");
}

/// A fair client whose process is killed while it waits, first in the fair
/// queue, keeps a freed lock only until its deadline: then it is dropped
/// (its list and deadline entries with it) and the module waiter behind it
/// is served.
#[test]
fn a_killed_fair_waiter_keeps_the_lock_until_its_deadline_only() {
    let server = Server::start();
    let mut con = server.client();
    acquire(&mut con, "res", "module-x", &["PX", "1000"]);
    let sha: String = q(&mut con, &["SCRIPT", "LOAD", ACQUIRE]);
    let mut b = Cli::local(&server);
    // Queued with a 500 ms wait, due the lock's PTTL plus 500 ms from now,
    // and listening on its own channel, as Redisson's lock() does.
    b.run(&format!(
        "EVALSHA {sha} 3 res {} {} 60000 {OWNER_B} 500 {} ttl",
        queue_key("res"),
        timeout_key("res"),
        common::fair::now_ms()
    ));
    b.run(&format!("SUBSCRIBE {}", own_channel("res", OWNER_B)));
    wait_queued(&mut con, "res", OWNER_B);
    let due = deadline_of(&mut con, "res", OWNER_B).expect("B's deadline");
    let mut w = module_waiter(&server, &mut con, "res", "module-w", "60000", "20000");

    b.kill();
    let _: Value = q(&mut con, &["LOCK.RELEASE", "res", "module-x"]);
    assert_eq!(
        acquire(&mut con, "res", "module-y", &["PX", "1000"]),
        Value::Nil,
        "the lock kept for B was taken"
    );
    assert_served(&mut con, &mut w, "res", "module-w");
    let granted_at = server_now_ms(&mut con);
    assert!(
        granted_at >= due,
        "granted at {granted_at}, B was due at {due}"
    );
    assert_eq!(queue(&mut con, "res"), Vec::<String>::new());
    assert_eq!(deadline_of(&mut con, "res", OWNER_B), None);
    let _: Value = q(&mut con, &["LOCK.RELEASE", "res", "module-w"]);
    assert_eq!(dbsize(&mut con), 0, "keys left behind");
}

/// A lock the module found without a fair queue is known to have none only
/// until a key may have become one. `res` is acquired with every event
/// heard (a wait on another lock came first), so found without a queue;
/// B's queue entry is then made by a plain RPUSH, by RENAME, COPY or
/// RESTORE of another list, or by MOVE from another db, and a module caller
/// waits after it: the release keeps the lock for B, who goes first.
#[test]
fn a_fair_queue_made_after_the_lock_was_seen_without_one_goes_first() {
    for how in ["rpush", "rename", "copy", "restore", "move"] {
        let server = Server::start();
        let mut con = server.client();
        acquire(&mut con, "other", "module-a", &["PX", "60000"]);
        let waited = acquire(
            &mut con,
            "other",
            "module-b",
            &["PX", "60000", "BLOCK", "1"],
        );
        assert_eq!(waited, Value::Nil, "{how}");
        acquire(&mut con, "res", "module-x", &["PX", "60000"]);

        let (qk, tk) = (queue_key("res"), timeout_key("res"));
        let due = (server_now_ms(&mut con) + 60_000).to_string();
        let _: i64 = q(&mut con, &["ZADD", &tk, &due, OWNER_B]);
        match how {
            "rpush" => {
                let _: i64 = q(&mut con, &["RPUSH", &qk, OWNER_B]);
            }
            "rename" | "copy" | "restore" => {
                let _: i64 = q(&mut con, &["RPUSH", "elsewhere", OWNER_B]);
                match how {
                    "rename" => q::<()>(&mut con, &["RENAME", "elsewhere", &qk]),
                    "copy" => {
                        let _: i64 = q(&mut con, &["COPY", "elsewhere", &qk]);
                        let _: i64 = q(&mut con, &["DEL", "elsewhere"]);
                    }
                    _ => {
                        let dump: Vec<u8> = q(&mut con, &["DUMP", "elsewhere"]);
                        let _: i64 = q(&mut con, &["DEL", "elsewhere"]);
                        let _: () = redis::cmd("RESTORE")
                            .arg(&qk)
                            .arg(0)
                            .arg(dump)
                            .query(&mut con)
                            .expect("RESTORE");
                    }
                }
            }
            _ => {
                let mut db1 = server.client();
                let _: () = q(&mut db1, &["SELECT", "1"]);
                let _: i64 = q(&mut db1, &["RPUSH", &qk, OWNER_B]);
                let _: i64 = q(&mut db1, &["MOVE", &qk, "0"]);
            }
        }
        assert_eq!(queue(&mut con, "res"), vec![OWNER_B.to_string()], "{how}");
        let mut w = module_waiter(&server, &mut con, "res", "module-w", "60000", "10000");

        let _: Value = q(&mut con, &["LOCK.RELEASE", "res", "module-x"]);
        let held: i64 = q(&mut con, &["EXISTS", "res"]);
        assert_eq!(held, 0, "{how}: module-w went before B");
        assert_eq!(
            try_acquire(&mut con, "res", OWNER_B, 60_000, 60_000),
            None,
            "{how}"
        );
        assert_eq!(waiters(&mut con, "res"), 1, "{how}: module-w still waits");
        assert_eq!(
            release(&mut con, "res", OWNER_B, 60_000),
            Value::Int(1),
            "{how}"
        );
        assert_served(&mut con, &mut w, "res", "module-w");
        let _: Value = q(&mut con, &["LOCK.RELEASE", "res", "module-w"]);
        let _: Value = q(&mut con, &["LOCK.RELEASE", "other", "module-a"]);
        assert_eq!(dbsize(&mut con), 0, "{how}: keys left behind");
    }
}
