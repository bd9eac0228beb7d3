//! Atomic multi-locks: LOCK.MACQUIRE takes all its keys or none, a caller
//! that waits holds none of them and keeps its place in every key's queue,
//! callers naming keys in any order never deadlock, and LOCK.MRELEASE
//! releases all or none.

use crate::common;
use common::*;

use std::thread;

fn macquire(con: &mut Connection, keys: &[&str], owner: &str, opts: &[&str]) -> Value {
    let n = keys.len().to_string();
    let mut args = vec!["LOCK.MACQUIRE", n.as_str()];
    args.extend_from_slice(keys);
    args.push(owner);
    args.extend_from_slice(opts);
    q(con, &args)
}

fn mrelease(con: &mut Connection, keys: &[&str], owner: &str) -> Value {
    let n = keys.len().to_string();
    let mut args = vec!["LOCK.MRELEASE", n.as_str()];
    args.extend_from_slice(keys);
    args.push(owner);
    q(con, &args)
}

fn ints(values: &[i64]) -> Value {
    Value::Array(values.iter().map(|n| Value::Int(*n)).collect())
}

/// Sends a blocking command on a new client and waits until `key` has
/// `nth` waiters.
fn queued(server: &Server, con: &mut Connection, args: &[&str], key: &str, nth: i64) -> Connection {
    let mut w = server.client();
    send(&mut w, args);
    wait_for_waiters(con, key, nth);
    w
}

/// The integers of an array reply (tokens or hold counts, one per key).
fn int_array(v: Value) -> Vec<i64> {
    match v {
        Value::Array(items) => items
            .into_iter()
            .map(|item| match item {
                Value::Int(n) => n,
                other => panic!("expected an integer, got {other:?}"),
            })
            .collect(),
        other => panic!("expected an array, got {other:?}"),
    }
}

fn owner_of(con: &mut Connection, key: &str) -> Option<String> {
    lock_field(con, key, "owner")
}

#[test]
fn takes_all_keys_or_none() {
    let server = Server::start();
    let mut con = server.client();
    assert_eq!(
        macquire(&mut con, &["a", "b", "c"], "o", &["PX", "60000"]),
        ints(&[1, 1, 1])
    );
    // Re-entry counts per key.
    assert_eq!(macquire(&mut con, &["b", "a"], "o", &[]), ints(&[2, 2]));
    for key in ["a", "b", "c"] {
        assert_eq!(owner_of(&mut con, key).as_deref(), Some("o"));
    }
    // One busy key: nothing is taken.
    assert_eq!(macquire(&mut con, &["x", "c"], "p", &[]), Value::Nil);
    assert!(!exists(&mut con, "x"));
    assert_eq!(owner_of(&mut con, "c").as_deref(), Some("o"));

    // Release is all or none as well.
    let e = err(&mut con, &["LOCK.MRELEASE", "2", "a", "x", "o"]);
    assert_eq!(e, "NOTOWNER the owner holds no hold on this lock");
    assert_eq!(lock_field(&mut con, "a", "holds").as_deref(), Some("2"));
    assert_eq!(mrelease(&mut con, &["a", "b"], "o"), ints(&[1, 1]));
    assert_eq!(mrelease(&mut con, &["a", "b", "c"], "o"), ints(&[0, 0, 0]));
    assert_eq!(q::<i64>(&mut con, &["DBSIZE"]), 0);

    // FENCE: a token per key, each from the key's own counter (fresh
    // counters start at the clock floor).
    let before = token_floor(&mut con);
    let ab = int_array(macquire(&mut con, &["a", "b"], "o", &["FENCE"]));
    let after = token_floor(&mut con);
    assert_eq!(ab.len(), 2, "{ab:?}");
    assert_token_between(ab[0], before, after, 0, "a");
    assert_token_between(ab[1], before, after, 0, "b");
    mrelease(&mut con, &["a", "b"], "o");
    let before = token_floor(&mut con);
    let bc = int_array(macquire(&mut con, &["b", "c"], "o", &["FENCE"]));
    assert_eq!(bc.len(), 2, "{bc:?}");
    assert!(bc[0] > ab[1], "b's next token {} after {}", bc[0], ab[1]);
    assert_token_between(bc[1], before, token_floor(&mut con), 0, "c");
    // A key's counter alone decides its token: b's counter set ahead of
    // the clock goes on by one, c's from the clock.
    let ahead: i64 = 9_000_000_000_000_000;
    let _: () = q(
        &mut con,
        &["SET", "redisson_lock_token:{b}", &ahead.to_string()],
    );
    let bc2 = int_array(macquire(&mut con, &["b", "c"], "o", &["FENCE"]));
    assert_eq!(bc2[0], ahead + 1);
    assert!(bc2[1] > bc[1] && bc2[1] < ahead, "c: {bc2:?} after {bc:?}");
}

#[test]
fn argument_errors() {
    let server = Server::start();
    let mut con = server.client();
    let cases: &[(&[&str], &str)] = &[
        (
            &["LOCK.MACQUIRE", "1", "k"],
            "ERR wrong number of arguments for 'lock.macquire' command",
        ),
        (
            &["LOCK.MACQUIRE", "0", "k", "o"],
            "ERR numkeys should be a positive integer, got '0'",
        ),
        (
            &["LOCK.MACQUIRE", "x", "k", "o"],
            "ERR numkeys should be a positive integer, got 'x'",
        ),
        (
            &["LOCK.MACQUIRE", "4", "a", "b", "o"],
            "ERR numkeys is 4 but only 3 arguments follow it: 4 keys and then the owner are needed",
        ),
        (
            &["LOCK.MACQUIRE", "2", "a", "b"],
            "ERR the owner is missing: numkeys is 2 and the 2 arguments after it are the keys; the owner follows them",
        ),
        (
            &["LOCK.MRELEASE", "3", "a", "b", "o"],
            "ERR the owner is missing: numkeys is 3 and the 3 arguments after it are the keys; the owner follows them",
        ),
        (
            &["LOCK.MRELEASE", "9223372036854775807", "a", "o"],
            "ERR numkeys is 9223372036854775807 but only 2 arguments follow it: 9223372036854775807 keys and then the owner are needed",
        ),
        (
            &["LOCK.MACQUIRE", "2", "a", "a", "o"],
            "ERR key 'a' is named more than once",
        ),
        (
            &["LOCK.MACQUIRE", "1", "a", "o", "PX"],
            "ERR syntax error: PX needs a value",
        ),
        (
            &["LOCK.MACQUIRE", "1", "a", "", "PX", "5"],
            "ERR owner must not be empty",
        ),
        (
            &["LOCK.MRELEASE", "1", "a", "o", "x"],
            "ERR wrong number of arguments for 'lock.mrelease' command",
        ),
    ];
    for (args, want) in cases {
        assert_eq!(err(&mut con, args), *want, "{args:?}");
    }
    let _: () = q(&mut con, &["SET", "s", "v"]);
    assert!(err(&mut con, &["LOCK.MACQUIRE", "2", "a", "s", "o"]).starts_with("WRONGTYPE"));
    let _: i64 = q(&mut con, &["LOCK.RACQUIRE", "rw", "o"]);
    assert!(err(
        &mut con,
        &["LOCK.MACQUIRE", "2", "a", "rw", "o", "BLOCK", "0"]
    )
    .starts_with("WRONGTYPE key holds a read-write lock"));
    assert!(err(&mut con, &["LOCK.MRELEASE", "1", "rw", "o"])
        .starts_with("WRONGTYPE key holds a read-write lock"));
    assert_eq!(
        q::<Vec<String>>(&mut con, &["KEYS", "a"]),
        Vec::<String>::new()
    );
    // COMMAND GETKEYS sees the keys through the numkeys key spec.
    let keys: Vec<String> = q(
        &mut con,
        &[
            "COMMAND",
            "GETKEYS",
            "LOCK.MACQUIRE",
            "2",
            "k1",
            "k2",
            "o",
            "PX",
            "5",
        ],
    );
    assert_eq!(keys, ["k1", "k2"]);
    let keys: Vec<String> = q(
        &mut con,
        &["COMMAND", "GETKEYS", "LOCK.MRELEASE", "1", "k1", "o"],
    );
    assert_eq!(keys, ["k1"]);
}

#[test]
fn a_waiting_multi_lock_holds_nothing_and_is_granted_all_at_once() {
    let server = Server::start();
    let mut con = server.client();
    acquire(&mut con, "b", "holder", &["PX", "60000"]);
    let mut m = queued(
        &server,
        &mut con,
        &[
            "LOCK.MACQUIRE",
            "2",
            "a",
            "b",
            "m",
            "PX",
            "60000",
            "BLOCK",
            "0",
        ],
        "b",
        1,
    );
    // a is free but not taken while m waits for b...
    assert!(!exists(&mut con, "a"));
    // ...and kept for m: a later caller of a queues behind it.
    assert_eq!(acquire(&mut con, "a", "late", &[]), Value::Nil);
    let mut late = queued(
        &server,
        &mut con,
        &["LOCK.ACQUIRE", "a", "late", "BLOCK", "0"],
        "b",
        1,
    );
    // b's release hands m both keys in one step.
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "b", "holder"]), 0);
    assert_eq!(owner_of(&mut con, "a").as_deref(), Some("m"));
    assert_eq!(owner_of(&mut con, "b").as_deref(), Some("m"));
    assert_eq!(recv(&mut m).unwrap(), ints(&[1, 1]));
    assert_eq!(waiters(&mut con, "a"), 1);
    assert_eq!(mrelease(&mut con, &["a", "b"], "m"), ints(&[0, 0]));
    assert_eq!(recv(&mut late).unwrap(), Value::Int(1));
}

#[test]
fn a_multi_lock_waiter_is_not_overtaken_on_any_of_its_keys() {
    let server = Server::start();
    let mut con = server.client();
    acquire(&mut con, "a", "h1", &["PX", "60000"]);
    acquire(&mut con, "b", "h2", &["PX", "60000"]);
    let mut m = queued(
        &server,
        &mut con,
        &["LOCK.MACQUIRE", "2", "a", "b", "m", "BLOCK", "0"],
        "a",
        1,
    );
    let mut s = queued(
        &server,
        &mut con,
        &["LOCK.ACQUIRE", "a", "s", "BLOCK", "0"],
        "a",
        2,
    );
    // a frees first: m keeps it (it waits for b), s behind it waits too.
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "a", "h1"]), 0);
    assert!(!exists(&mut con, "a"));
    assert_eq!(waiters(&mut con, "b"), 1);
    assert_eq!(acquire(&mut con, "a", "s", &[]), Value::Nil);
    // Its BLOCK-less retry neither: and a multi-lock asking for a alone.
    assert_eq!(macquire(&mut con, &["a"], "x", &[]), Value::Nil);
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "b", "h2"]), 0);
    assert_eq!(recv(&mut m).unwrap(), ints(&[1, 1]));
    assert_eq!(mrelease(&mut con, &["b", "a"], "m"), ints(&[0, 0]));
    assert_eq!(recv(&mut s).unwrap(), Value::Int(1));
}

#[test]
fn a_multi_lock_waiter_that_leaves_lets_the_next_caller_in() {
    let server = Server::start();
    let mut con = server.client();
    acquire(&mut con, "b", "holder", &["PX", "60000"]);
    // Gives up after 100 ms, first in line on a free key.
    let mut m = queued(
        &server,
        &mut con,
        &["LOCK.MACQUIRE", "2", "a", "b", "m", "BLOCK", "100"],
        "b",
        1,
    );
    let mut s = queued(
        &server,
        &mut con,
        &["LOCK.ACQUIRE", "a", "s", "BLOCK", "0"],
        "b",
        1,
    );
    assert_eq!(recv(&mut m).unwrap(), Value::Nil);
    assert_eq!(recv(&mut s).unwrap(), Value::Int(1));
    assert_eq!(waiters(&mut con, "b"), 0);
    // A disconnect does the same.
    let m2 = queued(
        &server,
        &mut con,
        &["LOCK.MACQUIRE", "2", "c", "b", "m2", "BLOCK", "0"],
        "b",
        1,
    );
    let mut s2 = queued(
        &server,
        &mut con,
        &["LOCK.ACQUIRE", "c", "s2", "BLOCK", "0"],
        "b",
        1,
    );
    drop(m2);
    assert_eq!(recv(&mut s2).unwrap(), Value::Int(1));
    assert_eq!(waiters(&mut con, "b"), 0);
    assert_eq!(server.stat("waiters"), 0);
}

#[test]
fn callers_naming_keys_in_opposite_orders_never_deadlock() {
    let server = Server::start();
    const ROUNDS: usize = 100;
    let run = |keys: [&'static str; 3], owner: &'static str| {
        let mut con = server.client();
        thread::spawn(move || {
            for round in 0..ROUNDS {
                let me = format!("{owner}-{round}");
                let got = macquire(&mut con, &keys, &me, &["PX", "10000", "BLOCK", "0"]);
                assert_eq!(got, ints(&[1, 1, 1]), "{me}");
                // Nobody else holds any of them meanwhile.
                for key in keys {
                    assert_eq!(
                        lock_field(&mut con, key, "owner").as_deref(),
                        Some(me.as_str())
                    );
                }
                assert_eq!(mrelease(&mut con, &keys, &me), ints(&[0, 0, 0]));
            }
        })
    };
    let threads = [
        run(["x", "y", "z"], "fwd"),
        run(["z", "y", "x"], "rev"),
        run(["y", "z", "x"], "mid"),
    ];
    for t in threads {
        t.join().expect("a caller failed");
    }
    let mut con = server.client();
    assert_eq!(q::<i64>(&mut con, &["DBSIZE"]), 0);
    assert_eq!(server.stat("waiters"), 0);
    assert_eq!(server.stat("acquired"), 3 * ROUNDS as i64 * 3);
}

#[test]
fn replicas_end_with_the_masters_data() {
    let master = Config::default()
        .arg("repl-diskless-sync-delay", "0")
        .start();
    let replica = master.start_replica(Config::default().without_module());
    let mut con = master.client();
    let first = int_array(macquire(
        &mut con,
        &["a", "b"],
        "o",
        &["PX", "60000", "FENCE"],
    ));
    let mut m = queued(
        &master,
        &mut con,
        &[
            "LOCK.MACQUIRE",
            "2",
            "b",
            "c",
            "m",
            "PX",
            "60000",
            "BLOCK",
            "0",
            "FENCE",
        ],
        "b",
        1,
    );
    let before = token_floor(&mut con);
    mrelease(&mut con, &["a", "b"], "o");
    // b's next token; c's first.
    let granted = int_array(recv(&mut m).unwrap());
    assert_eq!(granted.len(), 2, "{granted:?}");
    assert!(granted[0] > first[1], "b: {granted:?} after {first:?}");
    assert_token_between(granted[1], before, token_floor(&mut con), 0, "c");
    let _: i64 = q(&mut con, &["PUBLISH", "sync", "x"]);
    assert_eq!(q::<i64>(&mut con, &["WAIT", "1", "5000"]), 1);
    let digest = |s: &Server| q::<String>(&mut s.client(), &["DEBUG", "DIGEST"]);
    assert_eq!(digest(&replica), digest(&master));
}

#[test]
fn each_waiting_caller_is_granted_under_its_own_owner() {
    // o2's group is second on a, behind o1's group, whose owner already
    // holds a: o2 must not be served with o1's request.
    let server = Server::start();
    let mut con = server.client();
    acquire(&mut con, "a", "o1", &["PX", "60000"]);
    acquire(&mut con, "c", "z", &["PX", "60000"]);
    acquire(&mut con, "b", "y", &["PX", "60000"]);
    let _g1 = queued(
        &server,
        &mut con,
        &["LOCK.MACQUIRE", "2", "a", "c", "o1", "BLOCK", "0"],
        "c",
        1,
    );
    let mut g2 = queued(
        &server,
        &mut con,
        &["LOCK.MACQUIRE", "2", "a", "b", "o2", "BLOCK", "0"],
        "b",
        1,
    );
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "b", "y"]), 0);
    // o2 is behind o1 on a: it waits, and a stays o1's alone.
    assert_eq!(waiters(&mut con, "a"), 2);
    assert_eq!(
        hgetall(&mut con, "a"),
        vec![("o1".to_string(), "1".to_string())]
    );
    assert!(!exists(&mut con, "b"));
    // o1 gets a and c once c is free; then o2 once o1 lets a go.
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "c", "z"]), 0);
    assert_eq!(owner_of(&mut con, "c").as_deref(), Some("o1"));
    assert_eq!(mrelease(&mut con, &["a", "c"], "o1"), ints(&[1, 0]));
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "a", "o1"]), 0);
    assert_eq!(recv(&mut g2).unwrap(), ints(&[1, 1]));
    assert_eq!(owner_of(&mut con, "a").as_deref(), Some("o2"));
    assert_eq!(owner_of(&mut con, "b").as_deref(), Some("o2"));
}

#[test]
fn a_waiting_caller_whose_key_became_another_type_is_answered() {
    let server = Server::start();
    let mut con = server.client();
    acquire(&mut con, "a", "x", &["PX", "60000"]);
    let mut g = queued(
        &server,
        &mut con,
        &["LOCK.MACQUIRE", "2", "a", "b", "o", "BLOCK", "0"],
        "a",
        1,
    );
    let _: () = q(&mut con, &["SET", "b", "foo"]);
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "a", "x"]), 0);
    let e = recv_error(&mut g);
    assert!(e.starts_with("WRONGTYPE"), "{e}");
    // a is usable again.
    assert_eq!(acquire(&mut con, "a", "q", &[]), Value::Int(1));
}

/// A multi-lock caller whose fencing token cannot be issued on one of its
/// keys is told so at once, as a single-key caller is, whether its keys are
/// free or busy: it is not queued to be refused at its turn. A key that is
/// a read-write lock is refused at once too, behind a busy key or not.
#[test]
fn a_caller_that_can_never_have_its_keys_is_refused_at_once_even_when_they_are_busy() {
    let server = Server::start();
    let mut con = server.client();
    let _: () = q(&mut con, &["SET", "redisson_lock_token:{b}", "abc"]);
    let want = "ERR fencing token key holds a value that is not an integer or out of range";
    for busy in [false, true] {
        if busy {
            acquire(&mut con, "a", "x", &["PX", "60000"]);
        }
        for opts in [&["FENCE"][..], &["FENCE", "BLOCK", "0"]] {
            let mut args = vec!["LOCK.MACQUIRE", "2", "a", "b", "o"];
            args.extend(opts);
            assert_eq!(err(&mut con, &args), want, "busy {busy}: {args:?}");
            assert_eq!(waiters(&mut con, "a"), 0);
            assert!(!exists(&mut con, "b"));
        }
    }
    let _: i64 = q(&mut con, &["LOCK.RACQUIRE", "rw", "r", "PX", "60000"]);
    assert_eq!(
        err(
            &mut con,
            &["LOCK.MACQUIRE", "2", "a", "rw", "o", "BLOCK", "0"]
        ),
        "WRONGTYPE key holds a read-write lock: use LOCK.RACQUIRE or LOCK.WACQUIRE"
    );
    assert_eq!(waiters(&mut con, "a"), 0);
    assert_eq!(owner_of(&mut con, "a").as_deref(), Some("x"));
}

#[test]
fn a_waiting_caller_is_served_when_a_key_is_handed_to_its_own_owner() {
    let server = Server::start();
    let mut con = server.client();
    acquire(&mut con, "b", "x", &["PX", "60000"]);
    let mut w = queued(
        &server,
        &mut con,
        &["LOCK.ACQUIRE", "b", "o", "BLOCK", "0"],
        "b",
        1,
    );
    let mut g = queued(
        &server,
        &mut con,
        &["LOCK.MACQUIRE", "2", "a", "b", "o", "BLOCK", "0"],
        "b",
        2,
    );
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "b", "x"]), 0);
    assert_eq!(recv(&mut w).unwrap(), Value::Int(1));
    // b is o's now: the multi-lock caller re-enters it and takes a.
    assert_eq!(recv(&mut g).unwrap(), ints(&[1, 2]));
    assert_eq!(lock_field(&mut con, "b", "holds").as_deref(), Some("2"));
}
