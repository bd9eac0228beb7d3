//! Deadlock detection's edge cases, each once a bug found in review: a
//! multi-lock caller's own key is no wait (neither for it nor for those
//! who wait for it); a caller behind a multi-lock caller queued ahead, first
//! in line or not, waits for it; lowering `lock.deadlock-check-ms` holds no
//! later check back; an ended reader lease is no edge and the caller keeps
//! its database; the owner index forgets every ended multi-lock wait.
//! `search_cost_*` is ignored: it prints how long one wait's check takes in
//! a costly graph (run with `-- --ignored --nocapture`; no timed assertion).

use crate::common;
use common::*;

use std::time::{Duration, Instant};

fn deadlocks(server: &Server) -> i64 {
    server.stat("deadlocks")
}

fn set_delay(con: &mut Connection, ms: &str) {
    let _: () = q(con, &["CONFIG", "SET", "lock.deadlock-check-ms", ms]);
}

/// C, holding k1, takes k1 (a re-entry) and k3 as one multi-lock caller.
const C_TAKES_K1_K3: [&str; 9] = [
    "LOCK.MACQUIRE",
    "2",
    "k1",
    "k3",
    "C",
    "PX",
    "60000",
    "BLOCK",
    "0",
];

/// g2 waits for k1 and k2 as one multi-lock caller, first in line on k1.
fn queue_g2(g2: &mut Connection, con: &mut Connection) {
    let args = [
        "LOCK.MACQUIRE",
        "2",
        "k1",
        "k2",
        "g2",
        "PX",
        "60000",
        "BLOCK",
        "0",
    ];
    send(g2, &args);
    wait_until("g2 queued on k1", || queued(con, "k1") == 1);
}

/// Polls `cond` for at most `ms`; whether it came true.
fn within(ms: u64, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_millis(ms);
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The reply of a blocked caller if it came within `ms`.
fn reply_within(con: &mut Connection, ms: u64) -> Option<redis::RedisResult<Value>> {
    con.set_read_timeout(Some(Duration::from_millis(ms)))
        .unwrap();
    let r = recv(con);
    con.set_read_timeout(None).unwrap();
    match r {
        Err(e) if e.is_timeout() => None,
        r => Some(r),
    }
}

/// Once a bug: a false DEADLOCK. C holds k1 and LOCK.MACQUIREs k1
/// and k3 (k3 held by z, who waits for nothing). On k1 it is a re-entry
/// ("already the caller's: one more hold, whoever waits"), so the
/// multi-lock caller g2 first in line on k1 does not hold it back; yet the
/// search gives C a 'behind' edge to g2 (successors() adds
/// first_in_line(k1) whatever the waiter holds), and g2 waits for k1 held
/// by C: "'C' waits for 'k1' behind 'g2', 'g2' waits for 'k1' held by
/// 'C'". With detection off, C is served as soon as z releases k3.
#[test]
fn a_multi_lock_callers_own_key_is_no_wait_behind_the_first_in_line() {
    let server = Server::start();
    let mut con = server.client();
    let mut c = holding(&server, "k1", "C");
    let mut z = holding(&server, "k3", "z");
    let mut g2 = server.client();
    queue_g2(&mut g2, &mut con);
    let before = deadlocks(&server);
    send(&mut c, &C_TAKES_K1_K3);
    wait_until("C queued on k3, or refused", || {
        queued(&mut con, "k3") == 1 || deadlocks(&server) > before
    });
    if deadlocks(&server) > before {
        panic!(
            "false DEADLOCK: {:?}",
            reply_within(&mut c, 1000).map(|r| r.map_err(|e| error_line(&e)))
        );
    }
    // z lets go of k3: C has both (k1 a re-entry), g2 waits on.
    assert_eq!(q::<i64>(&mut z, &["LOCK.RELEASE", "k3", "z"]), 0);
    assert_eq!(
        recv(&mut c).unwrap(),
        Value::Array(vec![Value::Int(2), Value::Int(1)])
    );
}

/// Once a bug: the same false 'behind' edge, met by a third caller.
/// C holds k1 and w; g2 (LOCK.MACQUIRE k1 k2) waits for k1; C's own
/// LOCK.MACQUIRE k1 k3 waits only for k3 (held by z, who waits for
/// nothing; queued with detection off, since its own check fails as
/// above). q holds k2 and now waits for w: the search goes w -> C -> k1
/// "behind g2" -> k2 held by q, and q is refused, although C is served
/// once z lets go of k3, and then releases w.
#[test]
fn a_false_behind_edge_refuses_a_third_callers_wait() {
    let server = Server::start();
    let mut con = server.client();
    let mut c = holding(&server, "k1", "C");
    let mut z = holding(&server, "k3", "z");
    let mut g2 = server.client();
    let mut q_ = holding(&server, "k2", "q");
    acquire(&mut c, "w", "C", &["PX", "60000"]);
    queue_g2(&mut g2, &mut con);
    set_delay(&mut con, "-1");
    send(&mut c, &C_TAKES_K1_K3);
    wait_until("C queued on k3", || queued(&mut con, "k3") == 1);
    set_delay(&mut con, "0");
    let before = deadlocks(&server);
    let reply = raw(
        &mut q_,
        &["LOCK.ACQUIRE", "w", "q", "PX", "60000", "BLOCK", "20"],
    )
    .map_err(|e| error_line(&e));
    // C was never stuck: z lets go of k3, C has k1 (a re-entry) and k3.
    assert_eq!(q::<i64>(&mut z, &["LOCK.RELEASE", "k3", "z"]), 0);
    assert_eq!(
        recv(&mut c).unwrap(),
        Value::Array(vec![Value::Int(2), Value::Int(1)])
    );
    assert_eq!(reply, Ok(Value::Nil), "q's wait for w");
    assert_eq!(deadlocks(&server), before);
}

/// Once a bug: a missed cycle, never found. Queue of l: a (one key),
/// g (LOCK.MACQUIRE l k), then o, who holds k. o is behind g on l just as
/// much as if g were first, but only a multi-lock caller *first* in line
/// is an edge, so o's check finds nothing. Once h and a are done, l stays
/// free for g, g waits for k held by o, o waits behind g: both wait until
/// their BLOCK or lease ends, and LOCK.WAITERS itself shows g waits_for o,
/// o waits_for g. The docs' "only a new wait can close a cycle" does not
/// hold: here a hand-off (a served, then gone) closes it. Expected: one of
/// o, g answered DEADLOCK (at o's wait, or when g reaches the head).
#[test]
fn a_multi_lock_caller_ahead_but_not_first_in_line_is_waited_for() {
    let server = Server::start();
    let mut con = server.client();
    let mut h = holding(&server, "l", "h");
    let mut o = holding(&server, "k", "o");
    let mut a = server.client();
    let mut g = server.client();
    send(
        &mut a,
        &["LOCK.ACQUIRE", "l", "a", "PX", "60000", "BLOCK", "0"],
    );
    wait_until("a queued", || queued(&mut con, "l") == 1);
    send(
        &mut g,
        &[
            "LOCK.MACQUIRE",
            "2",
            "l",
            "k",
            "g",
            "PX",
            "60000",
            "BLOCK",
            "0",
        ],
    );
    wait_until("g queued", || queued(&mut con, "l") == 2);
    let before = deadlocks(&server);
    send(
        &mut o,
        &["LOCK.ACQUIRE", "l", "o", "PX", "60000", "BLOCK", "0"],
    );
    wait_until("o queued or refused", || {
        queued(&mut con, "l") == 3 || deadlocks(&server) > before
    });
    if deadlocks(&server) == before {
        // h, then a, let go: l is kept for g.
        assert_eq!(q::<i64>(&mut h, &["LOCK.RELEASE", "l", "h"]), 0);
        assert_eq!(recv(&mut a).unwrap(), Value::Int(1));
        assert_eq!(q::<i64>(&mut a, &["LOCK.RELEASE", "l", "a"]), 0);
    }
    let found = within(2000, || deadlocks(&server) > before);
    assert!(
        found,
        "o and g wait for each other and nobody is told: l waiters {:?}",
        raw(&mut con, &["LOCK.WAITERS", "l"])
    );
    let o_reply = reply_within(&mut o, 200);
    let g_reply = reply_within(&mut g, 200);
    let victim = match (&o_reply, &g_reply) {
        (Some(Ok(Value::ServerError(e))), None) | (None, Some(Ok(Value::ServerError(e)))) => {
            e.code().to_string()
        }
        other => panic!("one of o, g answered DEADLOCK, not {other:?}"),
    };
    assert_eq!(victim, "DEADLOCK");
}

/// Once a bug: checks held back by a stale entry. The delayed checks
/// are one FIFO list (src/deadlocks.rs `Delayed::queue`), taken only while
/// its front is due, with the timer at the front's due time. A wait
/// queued under `lock.deadlock-check-ms 60000` that ended after 10 ms
/// stays at the front for 60 s; once the setting is lowered to 100, a
/// cycle is not found until then (up to a day with the maximum).
#[test]
fn lowering_the_delay_does_not_hold_back_later_checks() {
    let server = Server::start();
    let mut con = server.client();
    set_delay(&mut con, "60000");
    acquire(&mut con, "busy", "holder", &["PX", "60000"]);
    assert_eq!(
        acquire(&mut con, "busy", "t", &["PX", "1000", "BLOCK", "10"]),
        Value::Nil
    );
    set_delay(&mut con, "100");
    let mut a = holding(&server, "x", "a");
    let mut b = holding(&server, "y", "b");
    send(
        &mut a,
        &["LOCK.ACQUIRE", "y", "a", "PX", "60000", "BLOCK", "0"],
    );
    wait_until("a queued", || queued(&mut con, "y") == 1);
    send(
        &mut b,
        &["LOCK.ACQUIRE", "x", "b", "PX", "60000", "BLOCK", "0"],
    );
    wait_until("b queued", || queued(&mut con, "x") == 1);
    // 100 ms delay: found well within 3 s (the stale entry is due in 60 s).
    assert!(
        within(3000, || deadlocks(&server) == 1),
        "a cycle of 2 not found 3 s after it closed, with lock.deadlock-check-ms 100"
    );
}

/// A reader whose lease ran out (its key kept alive by another
/// reader) is no holder, so a writer behind it is not refused for its
/// wait; and a check that reads a lock of another database leaves the
/// caller in its own, with DEADLOCK or without.
#[test]
fn ended_reader_leases_are_no_edge_and_the_callers_database_is_kept() {
    let server = Server::start();
    let mut con = server.client();
    let mut r1 = server.client();
    let mut r2 = server.client();
    let mut w = holding(&server, "x", "w");
    assert_eq!(
        q::<i64>(&mut r1, &["LOCK.RACQUIRE", "rw", "r1", "PX", "150"]),
        1
    );
    let read_granted = Instant::now();
    assert_eq!(
        q::<i64>(&mut r2, &["LOCK.RACQUIRE", "rw", "r2", "PX", "60000"]),
        1
    );
    send(
        &mut r1,
        &["LOCK.ACQUIRE", "x", "r1", "PX", "60000", "BLOCK", "0"],
    );
    wait_until("r1 queued", || queued(&mut con, "x") == 1);
    // r1's lease (150 ms) is over; r2's keeps the key.
    wait_until("r1's read lease over", || {
        read_granted.elapsed() > Duration::from_millis(200)
    });
    assert!(exists(&mut con, "rw"));
    let before = deadlocks(&server);
    assert_eq!(
        raw(
            &mut w,
            &["LOCK.WACQUIRE", "rw", "w", "PX", "60000", "BLOCK", "50"]
        )
        .unwrap(),
        Value::Nil
    );
    assert_eq!(deadlocks(&server), before);

    // Across databases: b (in db 1) closes a cycle through q in db 0.
    let mut a1 = server.client();
    let mut a0 = server.client();
    holding(&server, "q", "B");
    let mut b1 = server.client();
    let _: () = q(&mut a1, &["SELECT", "1"]);
    let _: () = q(&mut b1, &["SELECT", "1"]);
    acquire(&mut a1, "p", "A", &["PX", "60000"]);
    send(
        &mut a0,
        &["LOCK.ACQUIRE", "q", "A", "PX", "60000", "BLOCK", "0"],
    );
    wait_until("A queued on q", || queued(&mut con, "q") == 1);
    let e = err(
        &mut b1,
        &["LOCK.ACQUIRE", "p", "B", "PX", "60000", "BLOCK", "0"],
    );
    assert!(e.starts_with("DEADLOCK "), "{e}");
    let _: () = q(&mut b1, &["SET", "after-deadlock", "1"]);
    // No cycle, the same read of db 0: e waits and times out in db 1.
    let mut e1 = server.client();
    let _: () = q(&mut e1, &["SELECT", "1"]);
    assert_eq!(
        raw(
            &mut e1,
            &["LOCK.ACQUIRE", "p", "E", "PX", "60000", "BLOCK", "20"]
        )
        .unwrap(),
        Value::Nil
    );
    let _: () = q(&mut e1, &["SET", "after-wait", "1"]);
    let _: () = q(&mut con, &["SELECT", "1"]);
    assert_eq!(
        q::<i64>(&mut con, &["EXISTS", "after-deadlock", "after-wait"]),
        2
    );
}

/// However a multi-lock caller's wait ends (LOCK.CANCEL of its
/// second key, CLIENT UNBLOCK, CLIENT KILL, a delayed check's DEADLOCK),
/// nothing of it is left in the owner index: a later wait that would
/// close a cycle through that stale entry is not refused.
#[test]
fn the_owner_index_forgets_every_ended_multi_lock_wait() {
    let server = Server::start();
    let mut con = server.client();
    type End = fn(&Server, &mut Connection, i64);
    let ends: [(&str, End); 4] = [
        ("LOCK.CANCEL of its second key", |_, con, _| {
            assert_eq!(q::<i64>(con, &["LOCK.CANCEL", "z", "A"]), 1);
        }),
        ("CLIENT UNBLOCK", |_, con, a_id| {
            let id = a_id.to_string();
            assert_eq!(q::<i64>(con, &["CLIENT", "UNBLOCK", &id]), 1);
        }),
        ("CLIENT KILL", |_, con, a_id| {
            assert_eq!(client_id_of_blocked(con), a_id.to_string());
            let id = a_id.to_string();
            assert_eq!(q::<i64>(con, &["CLIENT", "KILL", "ID", &id]), 1);
        }),
        ("a delayed check's DEADLOCK", |server, con, _| {
            // b waits for x (held by A): A, checked first, is the victim.
            let mut b = server.client();
            send(
                &mut b,
                &["LOCK.ACQUIRE", "x", "B", "PX", "60000", "BLOCK", "300"],
            );
            wait_until("a victim", || queued(con, "y") == 0);
        }),
    ];
    for (how, end) in ends {
        let _: () = q(&mut con, &["FLUSHALL"]);
        let delayed = how.contains("delayed");
        set_delay(&mut con, if delayed { "50" } else { "0" });
        let mut a = server.client();
        let mut b = holding(&server, "y", "B");
        let a_id = client_id(&mut a);
        acquire(&mut a, "x", "A", &["PX", "60000"]);
        send(
            &mut a,
            &[
                "LOCK.MACQUIRE",
                "2",
                "y",
                "z",
                "A",
                "PX",
                "60000",
                "BLOCK",
                "0",
            ],
        );
        wait_until("A queued", || queued(&mut con, "z") == 1);
        end(&server, &mut con, a_id);
        wait_until(how, || {
            queued(&mut con, "y") == 0 && queued(&mut con, "z") == 0
        });
        set_delay(&mut con, "0");
        let before = deadlocks(&server);
        // A's wait is over: B waiting for x closes no cycle.
        assert_eq!(
            raw(
                &mut b,
                &["LOCK.ACQUIRE", "x", "B", "PX", "60000", "BLOCK", "20"]
            )
            .map_err(|e| error_line(&e)),
            Ok(Value::Nil),
            "after {how}"
        );
        assert_eq!(deadlocks(&server), before, "after {how}");
        assert_eq!(
            server.info_field("lock", "lock_waiters").as_deref(),
            Some("0"),
            "after {how}"
        );
    }
}

/// The id of the one blocked client (CLIENT LIST flags=b).
fn client_id_of_blocked(con: &mut Connection) -> String {
    let list: String = q(con, &["CLIENT", "LIST"]);
    let blocked: Vec<&str> = list.lines().filter(|l| l.contains(" flags=b ")).collect();
    assert_eq!(blocked.len(), 1, "{list}");
    blocked[0]
        .split_whitespace()
        .find_map(|f| f.strip_prefix("id="))
        .unwrap()
        .to_string()
}

/// Ignored (slow, prints numbers; no timed assertion). `k` callers each
/// hold a read lock of `l` and wait for the write lock of `m`, held by `n`
/// readers; one more caller then waits for the write lock of `l`. Its
/// check visits the k holders and, for each, reads `m` and its n readers
/// again: k x n work in one command (the docs say "one read of each lock
/// on the path"). Rerun: `cargo test --release --test integration
/// deadlock_edges:: -- --ignored --nocapture` (K, N in env DLR_K, DLR_N; defaults 100, 2000).
#[test]
#[ignore]
fn search_cost_of_a_wait_whose_holders_wait_for_a_widely_read_lock() {
    let k: usize = std::env::var("DLR_K").map_or(100, |v| v.parse().unwrap());
    let n: usize = std::env::var("DLR_N").map_or(2000, |v| v.parse().unwrap());
    let server = Server::start();
    let mut con = server.client();
    let mut pipe = redis::pipe();
    for j in 0..n {
        pipe.cmd("LOCK.RACQUIRE")
            .arg("m")
            .arg(format!("s{j}"))
            .arg("PX")
            .arg("600000")
            .ignore();
    }
    let _: () = pipe.query(&mut con).unwrap();
    let mut waiters = Vec::with_capacity(k);
    for i in 0..k {
        let mut w = server.client();
        let owner = format!("r{i}");
        assert_eq!(
            q::<i64>(&mut w, &["LOCK.RACQUIRE", "l", &owner, "PX", "600000"]),
            1
        );
        send(
            &mut w,
            &["LOCK.WACQUIRE", "m", &owner, "PX", "600000", "BLOCK", "0"],
        );
        waiters.push(w);
    }
    wait_until("k queued on m", || queued(&mut con, "m") == k);
    for (setting, label) in [("-1", "detection off"), ("0", "detection on")] {
        set_delay(&mut con, setting);
        let _: () = q(&mut con, &["CONFIG", "SET", "slowlog-log-slower-than", "0"]);
        let _: () = q(&mut con, &["SLOWLOG", "RESET"]);
        let mut x = server.client();
        assert_eq!(
            raw(
                &mut x,
                &["LOCK.WACQUIRE", "l", "X", "PX", "600000", "BLOCK", "1"]
            )
            .unwrap(),
            Value::Nil
        );
        let log: Vec<Value> = q(&mut con, &["SLOWLOG", "GET", "10"]);
        let us = log
            .iter()
            .find_map(|e| match e {
                Value::Array(f) => match &f[3] {
                    Value::Array(args) if args.len() > 2 && text(&args[2]) == "X" => {
                        Some(text(&f[2]))
                    }
                    _ => None,
                },
                _ => None,
            })
            .unwrap();
        println!("k={k} n={n}, {label}: X's LOCK.WACQUIRE took {us} us");
    }
}
