//! Count-down latches (LATCH.*): 1,000 callers blocked in LATCH.AWAIT all
//! answered 0 by the count-down that opens the latch (LATCH.COUNTDOWN, or
//! Redisson's count-down script); a latch that ends without opening answers
//! its waiters GONE (its expiry, heard by the module's own timer; DEL;
//! FLUSHALL); a BLOCK time that runs out answers nil; LATCH.INFO; keys of
//! other types; a replica that refuses writes and waits.

use crate::common;
use common::*;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;

fn int(v: Value) -> i64 {
    match v {
        Value::Int(n) => n,
        other => panic!("expected an integer, got {other:?}"),
    }
}

/// LATCH.INFO as (count, ttl, waiters); `None` when the latch is open.
fn latch_info(con: &mut Connection, key: &str) -> Option<(i64, i64, i64)> {
    match q::<Value>(con, &["LATCH.INFO", key]) {
        Value::Nil => None,
        Value::Array(items) => {
            let fields: Vec<(String, i64)> = items
                .chunks(2)
                .map(|kv| (text(&kv[0]), int(kv[1].clone())))
                .collect();
            let names: Vec<&str> = fields.iter().map(|(k, _)| k.as_str()).collect();
            assert_eq!(names, ["count", "ttl", "waiters"], "LATCH.INFO {key}");
            Some((fields[0].1, fields[1].1, fields[2].1))
        }
        other => panic!("LATCH.INFO {key}: {other:?}"),
    }
}

/// Callers awaiting `key` (0 when the latch is open or missing).
fn awaiting(con: &mut Connection, key: &str) -> i64 {
    latch_info(con, key).map_or(0, |(_, _, waiters)| waiters)
}

/// Sends `LATCH.AWAIT key BLOCK ms` on a new connection and waits until it
/// is the `nth` caller awaiting `key`.
fn await_on(server: &Server, con: &mut Connection, key: &str, block: &str, nth: i64) -> Connection {
    let mut waiter = server.client();
    send(&mut waiter, &["LATCH.AWAIT", key, "BLOCK", block]);
    wait_until(&format!("{nth} awaiting {key}"), || {
        awaiting(con, key) == nth
    });
    waiter
}

fn gone(waiter: &mut Connection) -> String {
    recv_error(waiter)
}

/// 1,000 connections blocked in LATCH.AWAIT on one latch: the count-down to
/// 1 answers nobody, the one to zero answers every one of them 0, and the
/// latch is gone (open).
#[test]
fn a_thousand_waiters_are_all_answered_by_the_count_down_to_zero() {
    const N: usize = 1000;
    let server = Server::start();
    let mut con = server.client();
    assert_eq!(q::<i64>(&mut con, &["LATCH.INIT", "batch", "2"]), 1);
    let request = b"*4\r\n$11\r\nLATCH.AWAIT\r\n$5\r\nbatch\r\n$5\r\nBLOCK\r\n$1\r\n0\r\n";
    let mut waiters: Vec<BufReader<TcpStream>> = (0..N)
        .map(|_| {
            let mut stream = TcpStream::connect(server.addr()).expect("connect");
            stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
            stream.write_all(request).expect("send LATCH.AWAIT");
            BufReader::new(stream)
        })
        .collect();
    wait_until("1000 awaiting the latch", || {
        awaiting(&mut con, "batch") == N as i64
    });
    assert_eq!(q::<i64>(&mut con, &["LATCH.COUNTDOWN", "batch"]), 1);
    assert_eq!(latch_info(&mut con, "batch"), Some((1, -1, N as i64)));

    let opened = server.stat("latches_opened");
    assert_eq!(q::<i64>(&mut con, &["LATCH.COUNTDOWN", "batch"]), 0);
    for (i, waiter) in waiters.iter_mut().enumerate() {
        let mut line = String::new();
        waiter.read_line(&mut line).expect("a waiter's answer");
        assert_eq!(line, ":0\r\n", "waiter {i}");
    }
    assert_eq!(latch_info(&mut con, "batch"), None);
    assert!(!exists(&mut con, "batch"));
    assert_eq!(server.stat("latches_opened"), opened + 1);
    assert_eq!(q::<i64>(&mut con, &["LATCH.AWAIT", "batch"]), 0);
}

/// A latch with an expiry: its waiters are answered GONE when it expires,
/// by the module's timer at the expiry (Redis's own expiry is switched off
/// here: only that timer can tell them), long before their BLOCK time.
#[test]
fn an_expiring_latch_answers_its_waiters_gone_at_its_expiry() {
    let server = Server::start();
    let mut con = server.client();
    let _: () = q(&mut con, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]);
    assert_eq!(
        q::<i64>(&mut con, &["LATCH.INIT", "l", "3", "PX", "800"]),
        1
    );
    let at = pexpiretime(&mut con, "l");
    let mut a = await_on(&server, &mut con, "l", "0", 1);
    let mut b = await_on(&server, &mut con, "l", "60000", 2);
    assert_eq!(gone(&mut a), "GONE the latch expired before reaching zero");
    assert_eq!(gone(&mut b), "GONE the latch expired before reaching zero");
    let time: Vec<i64> = q(&mut con, &["TIME"]);
    let now = time[0] * 1000 + time[1] / 1000;
    assert!(now >= at, "answered at {now}, before the expiry at {at}");
    assert!(!exists(&mut con, "l"));
    assert_eq!(server.stat("waiters"), 0);
    // The connections are usable again.
    assert_eq!(q::<i64>(&mut a, &["LATCH.AWAIT", "l"]), 0);
}

/// A TTL set on a latch after callers began to wait (`PEXPIRE`) gets the
/// module's timer too: they are answered GONE at that expiry (Redis's own
/// expiry is switched off here), not at their BLOCK time.
#[test]
fn an_expiry_set_while_callers_wait_answers_them_gone_at_it() {
    let server = Server::start();
    let mut con = server.client();
    let _: () = q(&mut con, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]);
    assert_eq!(q::<i64>(&mut con, &["LATCH.INIT", "m", "3"]), 1);
    let mut waiter = await_on(&server, &mut con, "m", "60000", 1);
    assert_eq!(q::<i64>(&mut con, &["PEXPIRE", "m", "300"]), 1);
    let at = pexpiretime(&mut con, "m");
    assert_eq!(
        gone(&mut waiter),
        "GONE the latch expired before reaching zero"
    );
    let time: Vec<i64> = q(&mut con, &["TIME"]);
    let now = time[0] * 1000 + time[1] / 1000;
    assert!(now >= at, "answered at {now}, before the expiry at {at}");
    assert!(!exists(&mut con, "m"));
}

/// A latch deleted (DEL, UNLINK, FLUSHALL) or overwritten with something
/// that is not a count answers its waiters GONE; one counted down by hand
/// (SET to a smaller count) keeps them.
#[test]
fn a_deleted_or_flushed_latch_answers_its_waiters_gone() {
    let server = Server::start();
    let mut con = server.client();
    let deleted = "GONE the latch was deleted before reaching zero";
    for (i, how) in [&["DEL"][..], &["UNLINK"], &["SET", "abc"]]
        .iter()
        .enumerate()
    {
        let key = format!("l{i}");
        assert_eq!(q::<i64>(&mut con, &["LATCH.INIT", &key, "2"]), 1);
        let mut waiter = await_on(&server, &mut con, &key, "0", 1);
        let mut args = vec![how[0], key.as_str()];
        args.extend_from_slice(&how[1..]);
        let _: Value = q(&mut con, &args);
        assert_eq!(gone(&mut waiter), deleted, "{args:?}");
    }

    assert_eq!(q::<i64>(&mut con, &["LATCH.INIT", "a", "2"]), 1);
    assert_eq!(
        q::<i64>(&mut con, &["LATCH.INIT", "b", "5", "PX", "60000"]),
        1
    );
    let mut on_a = await_on(&server, &mut con, "a", "0", 1);
    let mut on_b = await_on(&server, &mut con, "b", "0", 1);
    let _: () = q(&mut con, &["SET", "b", "4", "KEEPTTL"]);
    assert_eq!(
        latch_info(&mut con, "b").map(|(c, _, w)| (c, w)),
        Some((4, 1))
    );
    let _: () = q(&mut con, &["FLUSHALL"]);
    assert_eq!(gone(&mut on_a), deleted);
    assert_eq!(gone(&mut on_b), deleted);
    assert_eq!(server.stat("waiters"), 0);
}

/// BLOCK's time runs out: nil, the latch untouched. Without BLOCK a closed
/// latch answers nil at once, an open or missing one 0.
#[test]
fn await_answers_nil_when_its_block_time_runs_out() {
    let server = Server::start();
    let mut con = server.client();
    assert_eq!(q::<i64>(&mut con, &["LATCH.AWAIT", "l"]), 0);
    assert_eq!(q::<i64>(&mut con, &["LATCH.INIT", "l", "2"]), 1);
    assert_eq!(raw(&mut con, &["LATCH.AWAIT", "l"]), Ok(Value::Nil));
    assert_eq!(
        raw(&mut con, &["LATCH.AWAIT", "l", "BLOCK", "100"]),
        Ok(Value::Nil)
    );
    assert_eq!(latch_info(&mut con, "l"), Some((2, -1, 0)));
    // Inside MULTI BLOCK is ignored.
    let _: () = q(&mut con, &["MULTI"]);
    let _: String = q(&mut con, &["LATCH.AWAIT", "l", "BLOCK", "0"]);
    assert_eq!(q::<Vec<Value>>(&mut con, &["EXEC"]), vec![Value::Nil]);
    assert_eq!(server.stat("waiters"), 0);
}

/// Redisson's count-down script (DECR, DEL at zero, PUBLISH) opens the
/// latch for LATCH.AWAIT callers as LATCH.COUNTDOWN does: they are answered
/// 0, not GONE, though the key is deleted.
#[test]
fn redissons_count_down_script_answers_the_waiters_0() {
    const COUNT_DOWN: &str = "local v = redis.call('decr', KEYS[1]); \
        if v <= 0 then redis.call('del', KEYS[1]) end; \
        if v == 0 then redis.call(ARGV[2], KEYS[2], ARGV[1]) end;";
    let server = Server::start();
    let mut con = server.client();
    assert_eq!(q::<i64>(&mut con, &["LATCH.INIT", "job", "2"]), 1);
    let mut a = await_on(&server, &mut con, "job", "0", 1);
    let mut b = await_on(&server, &mut con, "job", "60000", 2);
    let channel = "redisson_countdownlatch__channel__{job}";
    let script = ["EVAL", COUNT_DOWN, "2", "job", channel, "0", "publish"];
    let _: Value = q(&mut con, &script);
    assert_eq!(latch_info(&mut con, "job"), Some((1, -1, 2)));
    let _: Value = q(&mut con, &script);
    assert_eq!(int(recv(&mut a).expect("a's answer")), 0);
    assert_eq!(int(recv(&mut b).expect("b's answer")), 0);
    assert!(!exists(&mut con, "job"));
    assert_eq!(server.stat("waiters"), 0);
}

/// LATCH.INIT sets once (with an optional expiry); LATCH.COUNTDOWN keeps the
/// TTL, counts a missing latch as open without writing; LATCH.INFO shows
/// count, ttl and waiters; keys of other types are refused.
#[test]
fn latch_info_init_and_countdown_show_and_keep_what_they_should() {
    let server = Server::start();
    let mut con = server.client();
    assert_eq!(latch_info(&mut con, "l"), None);
    assert_eq!(q::<i64>(&mut con, &["LATCH.COUNTDOWN", "l"]), 0);
    assert!(!exists(&mut con, "l"));
    assert_eq!(
        q::<i64>(&mut con, &["LATCH.INIT", "l", "5", "PX", "60000"]),
        1
    );
    assert_eq!(q::<i64>(&mut con, &["LATCH.INIT", "l", "9"]), 0);
    let (count, ttl, waiters) = latch_info(&mut con, "l").expect("a closed latch");
    assert_eq!((count, waiters), (5, 0));
    assert_in(ttl, 50_000, 60_000, "ttl");
    let mut waiter = await_on(&server, &mut con, "l", "0", 1);
    assert_eq!(q::<i64>(&mut con, &["LATCH.COUNTDOWN", "l", "3"]), 2);
    let (count, ttl, waiters) = latch_info(&mut con, "l").expect("a closed latch");
    assert_eq!((count, waiters), (2, 1));
    assert_in(ttl, 50_000, 60_000, "ttl kept");
    assert_eq!(q::<String>(&mut con, &["GET", "l"]), "2");
    // Past zero: open.
    assert_eq!(q::<i64>(&mut con, &["LATCH.COUNTDOWN", "l", "10"]), 0);
    assert_eq!(int(recv(&mut waiter).expect("the waiter's answer")), 0);
    assert_eq!(latch_info(&mut con, "l"), None);

    for (args, code) in [
        (&["LATCH.INIT", "m", "0"][..], "ERR"),
        (&["LATCH.INIT", "m", "9007199254740993"], "ERR"),
        (&["LATCH.INIT", "m", "1", "PX", "0"], "ERR"),
        (&["LATCH.COUNTDOWN", "m", "0"], "ERR"),
        (&["LATCH.COUNTDOWN", "m", "1", "2"], "ERR"),
        (&["LATCH.AWAIT", "m", "BLOCK", "-1"], "ERR"),
        (&["LATCH.AWAIT", "m", "TIMEOUT", "1"], "ERR"),
    ] {
        assert_eq!(err_code(&mut con, args), code, "{args:?}");
    }
    assert_eq!(
        q::<i64>(&mut con, &["LATCH.INIT", "m", "9007199254740992"]),
        1
    );

    let _: i64 = q(&mut con, &["RPUSH", "list", "x"]);
    let _: () = q(&mut con, &["SET", "text", "abc"]);
    for key in ["list", "text"] {
        for args in [
            &["LATCH.COUNTDOWN", key][..],
            &["LATCH.AWAIT", key],
            &["LATCH.AWAIT", key, "BLOCK", "0"],
            &["LATCH.INFO", key],
        ] {
            assert_eq!(err_code(&mut con, args), "WRONGTYPE", "{args:?}");
        }
        // LATCH.INIT finds the key there: nothing set.
        assert_eq!(q::<i64>(&mut con, &["LATCH.INIT", key, "3"]), 0);
    }
    assert_eq!(
        err(&mut con, &["LATCH.AWAIT", "text"]),
        "WRONGTYPE key holds a string that is not a latch's count"
    );
    assert_eq!(q::<String>(&mut con, &["GET", "text"]), "abc");
    assert_eq!(server.stat("waiters"), 0);
}

/// A replica refuses LATCH.INIT, LATCH.COUNTDOWN and waiting; it answers
/// LATCH.INFO and LATCH.AWAIT without BLOCK from what its master sent.
#[test]
fn a_replica_refuses_writes_and_waiting_but_answers_reads() {
    let master = Server::start();
    let replica = master.start_replica(Config::default());
    let mut con = master.client();
    assert_eq!(
        q::<i64>(&mut con, &["LATCH.INIT", "l", "2", "PX", "60000"]),
        1
    );
    wait_until("the replica in sync", || master.replica_caught_up(&replica));
    let mut r = replica.client();
    let (count, ttl, waiters) = latch_info(&mut r, "l").expect("the replica's latch");
    assert_eq!((count, waiters), (2, 0));
    assert_in(ttl, 50_000, 60_000, "the replica's ttl");
    assert_eq!(pexpiretime(&mut r, "l"), pexpiretime(&mut con, "l"));
    assert_eq!(raw(&mut r, &["LATCH.AWAIT", "l"]), Ok(Value::Nil));
    for args in [
        &["LATCH.INIT", "m", "1"][..],
        &["LATCH.COUNTDOWN", "l"],
        &["LATCH.AWAIT", "l", "BLOCK", "0"],
    ] {
        assert_eq!(err_code(&mut r, args), "READONLY", "{args:?}");
    }
    assert_eq!(awaiting(&mut r, "l"), 0);
    assert_eq!(q::<i64>(&mut con, &["LATCH.COUNTDOWN", "l", "2"]), 0);
    wait_until("the replica in sync", || master.replica_caught_up(&replica));
    assert_eq!(q::<i64>(&mut r, &["LATCH.AWAIT", "l", "BLOCK", "0"]), 0);
    assert_eq!(latch_info(&mut r, "l"), None);
}
