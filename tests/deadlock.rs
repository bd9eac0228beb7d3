//! Deadlock detection with real clients: a wait that would close a cycle of
//! waits (over exclusive, read-write, multi-lock and semaphore edges, in one
//! database or across several) is answered DEADLOCK naming the cycle, at
//! once, and is not queued; the others in the cycle keep waiting and are
//! served in their turn once the refused caller lets go; a chain without a
//! cycle, or a wait that already ended, is no deadlock; LOCK.WAITERS shows
//! whom each waiter waits for; INFO counts what was found; the setting
//! turns it off.

use crate::common;
use common::*;

fn wait_queued(con: &mut Connection, key: &str, n: usize) {
    wait_until(&format!("{n} queued on {key}"), || queued(con, key) == n);
}

/// Sends `args` (a wait) on a new client once, and waits until `key` has
/// `nth` callers queued.
fn waiting(
    server: &Server,
    con: &mut Connection,
    args: &[&str],
    key: &str,
    nth: usize,
) -> Connection {
    let mut w = server.client();
    send(&mut w, args);
    wait_queued(con, key, nth);
    w
}

/// The `(owner, key, next owner)` steps a DEADLOCK error names, in order.
fn cycle_of(error: &str) -> Vec<(String, String, String)> {
    assert!(error.starts_with("DEADLOCK "), "not a DEADLOCK: {error}");
    let (_, steps) = error.split_once(": ").expect("a cycle after ': '");
    steps
        .split(", ")
        .map(|step| {
            let quoted: Vec<&str> = step.split('\'').skip(1).step_by(2).collect();
            match quoted[..] {
                [owner, key, next] => (owner.into(), key.into(), next.into()),
                _ => panic!("cannot read step {step:?} of {error}"),
            }
        })
        .collect()
}

fn step(owner: &str, key: &str, next: &str) -> (String, String, String) {
    (owner.into(), key.into(), next.into())
}

fn deadlocks(server: &Server) -> i64 {
    server.stat("deadlocks")
}

/// LOCK.WAITERS `key`: each waiter's owner and whom it waits for.
fn waits_for(con: &mut Connection, key: &str) -> Vec<(String, Vec<String>)> {
    let Value::Array(waiters) = q(con, &["LOCK.WAITERS", key]) else {
        panic!("LOCK.WAITERS {key} is not an array");
    };
    waiters
        .iter()
        .map(|w| {
            let Value::Array(fields) = w else {
                panic!("a waiter is not a map: {w:?}")
            };
            let get = |name: &str| {
                fields
                    .chunks(2)
                    .find(|kv| text(&kv[0]) == name)
                    .map(|kv| kv[1].clone())
                    .unwrap_or_else(|| panic!("no {name} in {fields:?}"))
            };
            let owners = match get("waits_for") {
                Value::Array(owners) => owners.iter().map(text).collect(),
                other => panic!("waits_for is {other:?}"),
            };
            (text(&get("owner")), owners)
        })
        .collect()
}

#[test]
fn two_callers_one_answered_deadlock_the_other_served() {
    let server = Server::start();
    let mut con = server.client();
    let mut a = holding(&server, "x", "a");
    let mut b = holding(&server, "y", "b");
    let before = deadlocks(&server);

    // a waits for y, held by b: no cycle yet.
    send(
        &mut a,
        &["LOCK.ACQUIRE", "y", "a", "PX", "60000", "BLOCK", "0"],
    );
    wait_queued(&mut con, "y", 1);
    assert_eq!(waits_for(&mut con, "y"), [("a".into(), vec!["b".into()])]);

    // b waiting for x would close it: refused at once, not queued, and
    // b keeps y.
    let e = err(
        &mut b,
        &["LOCK.ACQUIRE", "x", "b", "PX", "60000", "BLOCK", "0"],
    );
    assert_eq!(cycle_of(&e), [step("b", "x", "a"), step("a", "y", "b")]);
    assert_eq!(deadlocks(&server), before + 1);
    assert_eq!(queued(&mut con, "x"), 0);
    assert_eq!(lock_field(&mut con, "y", "owner").as_deref(), Some("b"));
    // Without BLOCK nobody waits, so nothing is refused: busy, nil.
    assert_eq!(acquire(&mut b, "x", "b", &[]), Value::Nil);

    // The victim lets go; the other is served in its turn.
    assert_eq!(q::<i64>(&mut b, &["LOCK.RELEASE", "y", "b"]), 0);
    assert_eq!(recv(&mut a).unwrap(), Value::Int(1));
    assert_eq!(lock_field(&mut con, "y", "owner").as_deref(), Some("a"));
    assert_eq!(deadlocks(&server), before + 1);
}

#[test]
fn three_callers_in_a_ring_across_databases() {
    let server = Server::start();
    let mut con = server.client();
    let mut a = holding(&server, "x", "a");
    let mut b = holding(&server, "y", "b");
    let mut c = server.client();
    // c's lock is in database 1.
    let _: () = q(&mut c, &["SELECT", "1"]);
    acquire(&mut c, "z", "c", &["PX", "60000"]);

    send(&mut a, &["LOCK.ACQUIRE", "y", "a", "BLOCK", "0"]);
    wait_queued(&mut con, "y", 1);
    let _: () = q(&mut b, &["SELECT", "1"]);
    send(&mut b, &["LOCK.ACQUIRE", "z", "b", "BLOCK", "0"]);
    let mut db1 = server.client();
    let _: () = q(&mut db1, &["SELECT", "1"]);
    wait_queued(&mut db1, "z", 1);

    let _: () = q(&mut c, &["SELECT", "0"]);
    let e = err(&mut c, &["LOCK.ACQUIRE", "x", "c", "BLOCK", "0"]);
    assert_eq!(
        cycle_of(&e),
        [
            step("c", "x", "a"),
            step("a", "y", "b"),
            step("b", "z", "c")
        ]
    );
    assert!(
        e.contains("'z' (db 1)"),
        "the key of another db is marked: {e}"
    );
    // The two others still wait, in their queues.
    assert_eq!(queued(&mut con, "y"), 1);
    assert_eq!(queued(&mut db1, "z"), 1);
    assert_eq!(queued(&mut con, "x"), 0);

    // c lets go of z: b gets it, releases y, a gets y.
    let _: () = q(&mut c, &["SELECT", "1"]);
    assert_eq!(q::<i64>(&mut c, &["LOCK.RELEASE", "z", "c"]), 0);
    assert_eq!(recv(&mut b).unwrap(), Value::Int(1));
    let _: () = q(&mut b, &["SELECT", "0"]);
    assert_eq!(q::<i64>(&mut b, &["LOCK.RELEASE", "y", "b"]), 0);
    assert_eq!(recv(&mut a).unwrap(), Value::Int(1));
}

#[test]
fn read_write_multi_lock_and_semaphore_edges() {
    let server = Server::start();
    let mut con = server.client();
    let start = deadlocks(&server);

    // A writer waits for every reader: r2 waits for m, held by w.
    let mut r1 = server.client();
    let mut r2 = server.client();
    let mut w = holding(&server, "m", "w");
    assert_eq!(
        q::<i64>(&mut r1, &["LOCK.RACQUIRE", "rw", "r1", "PX", "60000"]),
        1
    );
    assert_eq!(
        q::<i64>(&mut r2, &["LOCK.RACQUIRE", "rw", "r2", "PX", "60000"]),
        1
    );
    let mut r2_waits = waiting(
        &server,
        &mut con,
        &["LOCK.ACQUIRE", "m", "r2", "BLOCK", "0"],
        "m",
        1,
    );
    let e = err(&mut w, &["LOCK.WACQUIRE", "rw", "w", "BLOCK", "0"]);
    assert_eq!(cycle_of(&e), [step("w", "rw", "r2"), step("r2", "m", "w")]);
    // A reader is no cycle: readers share (r1 waits for nothing).
    assert_eq!(
        q::<i64>(&mut w, &["LOCK.RACQUIRE", "rw", "w", "PX", "60000"]),
        1
    );
    assert_eq!(q::<i64>(&mut w, &["LOCK.RELEASE", "m", "w"]), 0);
    assert_eq!(recv(&mut r2_waits).unwrap(), Value::Int(1));

    // A multi-lock caller waits for the holders of each of its keys.
    let mut a = holding(&server, "k1", "a");
    let mut c = holding(&server, "k3", "c");
    let mut a_waits = waiting(
        &server,
        &mut con,
        &["LOCK.ACQUIRE", "k3", "a", "BLOCK", "0"],
        "k3",
        1,
    );
    let e = err(
        &mut c,
        &["LOCK.MACQUIRE", "2", "k2", "k1", "c", "BLOCK", "0"],
    );
    assert_eq!(cycle_of(&e), [step("c", "k1", "a"), step("a", "k3", "c")]);
    // Nothing of the refused multi-lock caller stays: k2 free, no queue.
    assert!(!exists(&mut con, "k2"));
    assert_eq!(queued(&mut con, "k1") + queued(&mut con, "k2"), 0);
    // And a queued multi-lock caller is an edge to each of its keys.
    let mut m_waits = waiting(
        &server,
        &mut con,
        &["LOCK.MACQUIRE", "2", "k1", "k9", "m", "BLOCK", "0"],
        "k1",
        1,
    );
    for key in ["k1", "k9"] {
        assert_eq!(waits_for(&mut con, key), [("m".into(), vec!["a".into()])]);
    }
    assert_eq!(q::<i64>(&mut c, &["LOCK.RELEASE", "k3", "c"]), 0);
    assert_eq!(recv(&mut a_waits).unwrap(), Value::Int(1));
    assert_eq!(q::<i64>(&mut a, &["LOCK.RELEASE", "k1", "a"]), 0);
    assert!(matches!(recv(&mut m_waits).unwrap(), Value::Array(_)));

    // Behind a multi-lock caller first in line, a caller waits for it even
    // while the lock is free (kept for it until its other keys are).
    let mut x = holding(&server, "kx", "x");
    let mut m2_waits = waiting(
        &server,
        &mut con,
        &["LOCK.MACQUIRE", "2", "free", "kx", "m2", "BLOCK", "0"],
        "free",
        1,
    );
    assert!(!exists(&mut con, "free"));
    let e = err(&mut x, &["LOCK.ACQUIRE", "free", "x", "BLOCK", "0"]);
    assert_eq!(
        cycle_of(&e),
        [step("x", "free", "m2"), step("m2", "kx", "x")]
    );
    assert!(e.contains("'x' waits for 'free' behind 'm2'"), "{e}");
    assert_eq!(q::<i64>(&mut x, &["LOCK.RELEASE", "kx", "x"]), 0);
    assert!(matches!(recv(&mut m2_waits).unwrap(), Value::Array(_)));

    // A semaphore whose permits one owner holds leads to that owner.
    let mut p = server.client();
    let mut s = holding(&server, "l", "s");
    let _: Value = q(&mut con, &["SEM.INIT", "sem", "1"]);
    let _: Value = q(&mut p, &["SEM.ACQUIRE", "sem", "p", "PX", "60000"]);
    let mut p_waits = waiting(
        &server,
        &mut con,
        &["LOCK.ACQUIRE", "l", "p", "BLOCK", "0"],
        "l",
        1,
    );
    let e = err(&mut s, &["SEM.ACQUIRE", "sem", "s", "BLOCK", "0"]);
    assert_eq!(cycle_of(&e), [step("s", "sem", "p"), step("p", "l", "s")]);
    assert_eq!(queued(&mut con, "sem"), 0);
    // With two holders either may free a permit: no deadlock, s waits.
    let _: Value = q(&mut con, &["SEM.ADD", "sem", "1"]);
    let _: Value = q(&mut con, &["SEM.ACQUIRE", "sem", "p2", "PX", "60000"]);
    let mut s_waits = waiting(
        &server,
        &mut con,
        &["SEM.ACQUIRE", "sem", "s", "BLOCK", "0"],
        "sem",
        1,
    );
    // Every permit holder, in the set's order (by lease end).
    let mut shown = waits_for(&mut con, "sem");
    shown[0].1.sort();
    assert_eq!(shown, [("s".into(), vec!["p".into(), "p2".into()])]);
    let _: Value = q(&mut con, &["SEM.RELEASE", "sem", "p2"]);
    assert!(matches!(recv(&mut s_waits).unwrap(), Value::Int(_)));
    assert_eq!(q::<i64>(&mut s, &["LOCK.RELEASE", "l", "s"]), 0);
    assert_eq!(recv(&mut p_waits).unwrap(), Value::Int(1));

    assert_eq!(deadlocks(&server), start + 4);
}

#[test]
fn no_cycle_no_deadlock_and_the_setting_turns_it_off() {
    let server = Server::start();
    let mut con = server.client();
    let mut a = holding(&server, "x", "a");
    let mut b = holding(&server, "y", "b");
    holding(&server, "z", "c");

    // A chain, not a ring: a waits for y (b), b for z (c).
    let mut a_waits = waiting(
        &server,
        &mut con,
        &["LOCK.ACQUIRE", "y", "a", "BLOCK", "0"],
        "y",
        1,
    );
    let mut b_waits = waiting(
        &server,
        &mut con,
        &["LOCK.ACQUIRE", "z", "b", "BLOCK", "0"],
        "z",
        1,
    );
    // A third party joining x's queue closes nothing either.
    let mut d_waits = waiting(
        &server,
        &mut con,
        &["LOCK.ACQUIRE", "x", "d", "BLOCK", "0"],
        "x",
        1,
    );
    assert_eq!(deadlocks(&server), 0);

    // A wait that ended is no edge: b leaves z's queue, then c waiting
    // for y (held by b) closes no cycle.
    let _: Value = q(&mut con, &["LOCK.CANCEL", "z", "b"]);
    assert_eq!(recv(&mut b_waits).unwrap(), Value::Nil);
    let mut c_waits = waiting(
        &server,
        &mut con,
        &["LOCK.ACQUIRE", "y", "c", "BLOCK", "0"],
        "y",
        2,
    );
    assert_eq!(deadlocks(&server), 0);

    // Off: a real cycle (b waits for x... held by a, who waits for y held
    // by b) is queued, and only its BLOCK time ends it.
    let _: () = q(&mut con, &["CONFIG", "SET", "lock.deadlock-check-ms", "-1"]);
    assert_eq!(acquire(&mut b, "x", "b", &["BLOCK", "50"]), Value::Nil);
    assert_eq!(deadlocks(&server), 0);
    let _: () = q(&mut con, &["CONFIG", "SET", "lock.deadlock-check-ms", "0"]);
    assert!(err(&mut b, &["LOCK.ACQUIRE", "x", "b", "BLOCK", "0"]).starts_with("DEADLOCK "));
    assert_eq!(deadlocks(&server), 1);

    // Everyone is served once the holders let go, in queue order.
    assert_eq!(q::<i64>(&mut a, &["LOCK.RELEASE", "x", "a"]), 0);
    assert_eq!(recv(&mut d_waits).unwrap(), Value::Int(1));
    assert_eq!(q::<i64>(&mut b, &["LOCK.RELEASE", "y", "b"]), 0);
    assert_eq!(recv(&mut a_waits).unwrap(), Value::Int(1));
    assert_eq!(q::<i64>(&mut a, &["LOCK.RELEASE", "y", "a"]), 0);
    assert_eq!(recv(&mut c_waits).unwrap(), Value::Int(1));
}

#[test]
fn with_a_delay_a_wait_is_queued_and_checked_once_it_has_lasted_it() {
    let server = Server::start();
    let mut con = server.client();
    let _: () = q(
        &mut con,
        &["CONFIG", "SET", "lock.deadlock-check-ms", "100"],
    );
    let mut a = holding(&server, "x", "a");
    let mut b = holding(&server, "y", "b");

    // A wait that ends before its check is not checked: no cycle then.
    assert_eq!(acquire(&mut a, "y", "a", &["BLOCK", "20"]), Value::Nil);

    // Both waits are queued; the first of them checked after the cycle
    // closed is taken out of its queue with DEADLOCK.
    send(&mut a, &["LOCK.ACQUIRE", "y", "a", "BLOCK", "0"]);
    wait_queued(&mut con, "y", 1);
    send(&mut b, &["LOCK.ACQUIRE", "x", "b", "BLOCK", "0"]);
    wait_queued(&mut con, "x", 1);
    wait_until("a deadlock found by a delayed check", || {
        deadlocks(&server) == 1
    });
    // The victim left its queue; the other did not.
    let a_left = queued(&mut con, "y") == 0;
    assert_ne!(a_left, queued(&mut con, "x") == 0);
    let (mut victim, mut other, held, owner, next) = if a_left {
        (a, b, "x", "a", "b")
    } else {
        (b, a, "y", "b", "a")
    };
    let e = recv_error(&mut victim);
    let cycle = cycle_of(&e);
    assert_eq!(cycle.len(), 2, "{e}");
    assert_eq!(
        (cycle[0].0.as_str(), cycle[0].2.as_str()),
        (owner, next),
        "{e}"
    );
    // The other waits on, and is served once the victim lets go.
    assert_eq!(q::<i64>(&mut victim, &["LOCK.RELEASE", held, owner]), 0);
    assert_eq!(recv(&mut other).unwrap(), Value::Int(1));
    assert_eq!(deadlocks(&server), 1);
}

#[test]
fn a_semaphore_left_with_one_holder_gives_its_waiter_an_edge_that_is_checked() {
    let server = Server::start();
    let mut con = server.client();
    let _: Value = q(&mut con, &["SEM.INIT", "s", "2"]);
    for owner in ["S", "T"] {
        let _: Value = q(&mut con, &["SEM.ACQUIRE", "s", owner, "PX", "60000"]);
    }
    holding(&server, "L", "X");
    // X waits for both permits: with two other holders either could free
    // one, no edge; S waiting for L (held by X) closes nothing yet.
    let mut x = waiting(
        &server,
        &mut con,
        &["SEM.ACQUIRE", "s", "X", "PERMITS", "2", "BLOCK", "0"],
        "s",
        1,
    );
    let mut s = waiting(
        &server,
        &mut con,
        &["LOCK.ACQUIRE", "L", "S", "BLOCK", "0"],
        "L",
        1,
    );
    assert_eq!(deadlocks(&server), 0);
    // T gives its permit back: X now waits for S alone, who waits for X.
    let _: Value = q(&mut con, &["SEM.RELEASE", "s", "T"]);
    let e = recv_error(&mut x);
    assert_eq!(cycle_of(&e), [step("X", "s", "S"), step("S", "L", "X")]);
    assert_eq!(deadlocks(&server), 1);
    assert_eq!(queued(&mut con, "s"), 0);
    // The victim lets go of L: S is served.
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "L", "X"]), 0);
    assert_eq!(recv(&mut s).unwrap(), Value::Int(1));
}
