//! LOCK.WAITERS, LOCK.QUEUES and the time percentiles of `INFO lock`, on a
//! real server: who waits (order, kind, lease, flags, time waited and left),
//! which locks have waiters (longest wait first, COUNT, per db, hidden from
//! users who may not read the key, empty on a replica), and waits and holds
//! measured by the server within what the client measured around them.

use crate::common;
use common::*;

use std::thread;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------- helpers

/// One entry of a LOCK.WAITERS or LOCK.QUEUES reply: its fields in order.
type Entry = Vec<(String, Value)>;

/// The reply of `args` as entries, each checked to be a flat field/value
/// array (RESP2) or a map (RESP3) with text field names.
fn entries(con: &mut Connection, args: &[&str]) -> Vec<Entry> {
    let reply: Value = q(con, args);
    let Value::Array(items) = reply else {
        panic!("{args:?}: not an array: {reply:?}");
    };
    items
        .into_iter()
        .map(|item| match item {
            Value::Array(flat) => {
                assert_eq!(flat.len() % 2, 0, "{args:?}: odd flat array {flat:?}");
                flat.chunks(2)
                    .map(|kv| (text(&kv[0]), kv[1].clone()))
                    .collect()
            }
            Value::Map(pairs) => pairs.into_iter().map(|(k, v)| (text(&k), v)).collect(),
            other => panic!("{args:?}: entry is not a map: {other:?}"),
        })
        .collect()
}

fn names(entry: &Entry) -> Vec<&str> {
    entry.iter().map(|(k, _)| k.as_str()).collect()
}

fn get<'e>(entry: &'e Entry, name: &str) -> &'e Value {
    &entry
        .iter()
        .find(|(k, _)| k == name)
        .unwrap_or_else(|| panic!("no field {name} in {entry:?}"))
        .1
}

fn int(entry: &Entry, name: &str) -> i64 {
    match get(entry, name) {
        Value::Int(n) => *n,
        other => panic!("{name} is not an integer: {other:?}"),
    }
}

fn bulk(entry: &Entry, name: &str) -> String {
    match get(entry, name) {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        other => panic!("{name} is not a bulk string: {other:?}"),
    }
}

const WAITER_FIELDS: [&str; 8] = [
    "owner",
    "kind",
    "waited",
    "lease",
    "keepalive",
    "fence",
    "timeout",
    "waits_for",
];
const QUEUE_FIELDS: [&str; 5] = ["key", "waiters", "longest_wait", "owner", "ttl"];

fn waiters_of(con: &mut Connection, key: &str, count: Option<&str>) -> Vec<Entry> {
    let mut args = vec!["LOCK.WAITERS", key];
    if let Some(n) = count {
        args.extend(["COUNT", n]);
    }
    let all = entries(con, &args);
    for e in &all {
        assert_eq!(names(e), WAITER_FIELDS, "{e:?}");
    }
    all
}

/// The owners a waiter waits for (`waits_for`).
fn waits_for(entry: &Entry) -> Vec<String> {
    match get(entry, "waits_for") {
        Value::Array(owners) => owners.iter().map(text).collect(),
        other => panic!("waits_for is not an array: {other:?}"),
    }
}

fn owners(entries: &[Entry], field: &str) -> Vec<String> {
    entries.iter().map(|e| bulk(e, field)).collect()
}

fn queues(con: &mut Connection, count: Option<&str>) -> Vec<Entry> {
    let mut args = vec!["LOCK.QUEUES"];
    if let Some(n) = count {
        args.extend(["COUNT", n]);
    }
    let all = entries(con, &args);
    for e in &all {
        assert_eq!(names(e), QUEUE_FIELDS, "{e:?}");
    }
    all
}

/// Sends a blocking command on a new client of `server`; returns it with
/// the moment just before the command was sent.
fn blocked(server: &Server, args: &[&str]) -> (Connection, Instant) {
    let mut con = server.client();
    let sent = Instant::now();
    send(&mut con, args);
    (con, sent)
}

/// Whole ms of `d`, rounded down / up.
fn floor_ms(d: Duration) -> i64 {
    d.as_millis() as i64
}

fn ceil_ms(d: Duration) -> i64 {
    d.as_micros().div_ceil(1000) as i64
}

/// An `INFO lock` field (`wait_ms_p50` ... without the `lock_` prefix).
fn timing(server: &Server, name: &str) -> i64 {
    server.stat(name)
}

/// p50, p99, max of `wait_ms` or `hold_ms`, checked to be in order.
fn percentiles(server: &Server, what: &str) -> (i64, i64, i64) {
    let p50 = timing(server, &format!("{what}_p50"));
    let p99 = timing(server, &format!("{what}_p99"));
    let max = timing(server, &format!("{what}_max"));
    assert!(
        0 <= p50 && p50 <= p99 && p99 <= max,
        "{what}: {p50} {p99} {max}"
    );
    (p50, p99, max)
}

/// Upper bound of a server-side time measured inside `outer`: the
/// histogram keeps 2 significant digits and reports the top of a value's
/// bucket (at most 1 % above), and the server's ms clock may tick once more.
fn at_most(outer: Duration) -> i64 {
    ceil_ms(outer) * 101 / 100 + 2
}

/// Lets time pass that the client then measures; no assertion depends on
/// how long this really takes.
fn pause() {
    thread::sleep(Duration::from_millis(30));
}

// ---------------------------------------------------------------- LOCK.WAITERS

#[test]
fn waiters_of_an_exclusive_lock_in_queue_order_with_their_options() {
    let server = Server::start();
    let mut con = server.client();
    assert_eq!(
        acquire(&mut con, "k", "holder", &["PX", "60000"]),
        Value::Int(1)
    );
    let mut clients = Vec::new();
    for (i, (owner, opts)) in [
        ("w1", &["PX", "5000", "BLOCK", "0", "FENCE"][..]),
        ("w2", &["PX", "7000", "BLOCK", "60000", "KEEPALIVE"]),
        ("w3", &["BLOCK", "30000", "FENCE", "KEEPALIVE"]),
    ]
    .into_iter()
    .enumerate()
    {
        let mut args = vec!["LOCK.ACQUIRE", "k", owner];
        args.extend_from_slice(opts);
        let (c, sent) = blocked(&server, &args);
        wait_for_waiters(&mut con, "k", i as i64 + 1);
        clients.push((c, sent));
    }

    let before = Instant::now();
    let all = waiters_of(&mut con, "k", None);
    let read = Instant::now();
    assert_eq!(owners(&all, "owner"), ["w1", "w2", "w3"]);
    for e in &all {
        assert_eq!(bulk(e, "kind"), "exclusive");
    }
    let column = |name: &str| all.iter().map(|e| int(e, name)).collect::<Vec<_>>();
    assert_eq!(column("lease"), [5000, 7000, 30000]);
    assert_eq!(column("keepalive"), [0, 1, 1]);
    assert_eq!(column("fence"), [1, 0, 1]);

    // Waited: at most since each command was sent, and no more for a caller
    // queued later.
    let waited = column("waited");
    for (w, (_, sent)) in waited.iter().zip(&clients) {
        assert!(*w >= 0 && *w <= ceil_ms(read - *sent), "waited {w}");
    }
    assert!(
        waited[0] >= waited[1] && waited[1] >= waited[2],
        "{waited:?}"
    );

    // Time left: -1 for BLOCK 0; otherwise within BLOCK, less what passed
    // since the command was sent.
    let timeout = column("timeout");
    assert_eq!(timeout[0], -1);
    for (i, block) in [(1, 60000), (2, 30000)] {
        let passed = floor_ms(before - clients[i].1);
        assert!(
            timeout[i] > 0 && timeout[i] <= block - passed + 1,
            "timeout {} of BLOCK {block}",
            timeout[i]
        );
    }

    // The time waited goes on.
    wait_until("waited grows", || {
        int(&waiters_of(&mut con, "k", None)[0], "waited") > waited[0]
    });
    let later = waiters_of(&mut con, "k", None);
    assert!(int(&later[1], "timeout") <= timeout[1], "{later:?}");

    // COUNT: the first n; 0 is all.
    assert_eq!(
        owners(&waiters_of(&mut con, "k", Some("1")), "owner"),
        ["w1"]
    );
    assert_eq!(
        owners(&waiters_of(&mut con, "k", Some("2")), "owner"),
        ["w1", "w2"]
    );
    assert_eq!(
        owners(&waiters_of(&mut con, "k", Some("0")), "owner").len(),
        3
    );
    assert_eq!(
        owners(&waiters_of(&mut con, "k", Some("99")), "owner").len(),
        3
    );

    // Served in that order: the next one shows first.
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "k", "holder"]), 0);
    assert!(matches!(recv(&mut clients[0].0), Ok(Value::Int(t)) if t > 1));
    assert_eq!(
        owners(&waiters_of(&mut con, "k", None), "owner"),
        ["w2", "w3"]
    );
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "k", "w1"]), 0);
    assert_eq!(recv(&mut clients[1].0).expect("w2"), Value::Int(1));
    assert_eq!(q::<i64>(&mut con, &["LOCK.FORCERELEASE", "k"]), 1);
    assert!(matches!(recv(&mut clients[2].0), Ok(Value::Int(t)) if t > 1));
    assert!(waiters_of(&mut con, "k", None).is_empty());
}

#[test]
fn waiters_of_read_write_and_multi_locks() {
    let server = Server::start();
    let mut con = server.client();
    let w: i64 = q(&mut con, &["LOCK.WACQUIRE", "rw", "writer", "PX", "60000"]);
    assert_eq!(w, 1);
    let (mut reader, _) = blocked(&server, &["LOCK.RACQUIRE", "rw", "r1", "BLOCK", "0"]);
    wait_for_waiters(&mut con, "rw", 1);
    let (mut writer, _) = blocked(
        &server,
        &[
            "LOCK.WACQUIRE",
            "rw",
            "w2",
            "PX",
            "900",
            "BLOCK",
            "0",
            "FENCE",
        ],
    );
    wait_for_waiters(&mut con, "rw", 2);
    let rw = waiters_of(&mut con, "rw", None);
    assert_eq!(owners(&rw, "owner"), ["r1", "w2"]);
    assert_eq!(owners(&rw, "kind"), ["read", "write"]);
    assert_eq!(int(&rw[1], "lease"), 900);
    assert_eq!(int(&rw[1], "fence"), 1);
    // Both wait for the writer holding the lock.
    assert_eq!(waits_for(&rw[0]), ["writer"]);
    assert_eq!(waits_for(&rw[1]), ["writer"]);

    // A multi-lock caller is queued on each of its keys, held or free,
    // with its deadline on every one.
    assert_eq!(
        acquire(&mut con, "x", "holder", &["PX", "60000"]),
        Value::Int(1)
    );
    let (mut multi, sent) = blocked(
        &server,
        &[
            "LOCK.MACQUIRE",
            "2",
            "x",
            "y",
            "m",
            "PX",
            "4000",
            "BLOCK",
            "50000",
        ],
    );
    wait_for_waiters(&mut con, "x", 1);
    let asked = Instant::now();
    for key in ["x", "y"] {
        let e = waiters_of(&mut con, key, None);
        assert_eq!(owners(&e, "owner"), ["m"], "{key}");
        assert_eq!(owners(&e, "kind"), ["multi"], "{key}");
        // On each key, it waits for the holders of all its keys: y is
        // free, x held.
        assert_eq!(waits_for(&e[0]), ["holder"], "{key}");
        assert_eq!(int(&e[0], "lease"), 4000);
        let left = int(&e[0], "timeout");
        assert!(
            left > 0 && left <= 50000 - floor_ms(asked - sent) + 1,
            "{key}: {left}"
        );
    }

    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "rw", "writer"]), 0);
    assert_eq!(recv(&mut reader).expect("r1"), Value::Int(1));
    assert_eq!(owners(&waiters_of(&mut con, "rw", None), "owner"), ["w2"]);
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "rw", "r1"]), 0);
    assert!(matches!(recv(&mut writer), Ok(Value::Int(t)) if t > 1));
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "x", "holder"]), 0);
    assert_eq!(
        recv(&mut multi).expect("multi"),
        Value::Array(vec![Value::Int(1), Value::Int(1)])
    );
    for key in ["rw", "x", "y"] {
        assert!(waiters_of(&mut con, key, None).is_empty(), "{key}");
    }
}

#[test]
fn waiters_replies_a_map_per_waiter_in_resp3() {
    let server = Server::start();
    let mut con = server.client();
    let mut con3 = server.client_resp3();
    acquire(&mut con, "k", "holder", &["PX", "60000"]);
    let _w = queue_waiter::<Connection>(&server, &mut con, "k", "w", &["BLOCK", "0"], 1);
    for reply in [
        q::<Value>(&mut con3, &["LOCK.WAITERS", "k"]),
        q::<Value>(&mut con3, &["LOCK.QUEUES"]),
    ] {
        match reply {
            Value::Array(items) => {
                assert_eq!(items.len(), 1);
                assert!(matches!(&items[0], Value::Map(_)), "{items:?}");
            }
            other => panic!("not an array: {other:?}"),
        }
    }
    let e = waiters_of(&mut con3, "k", None);
    assert_eq!(bulk(&e[0], "owner"), "w");
    let queue = queues(&mut con3, None);
    assert_eq!(
        get(&queue[0], "owner"),
        &Value::BulkString(b"holder".to_vec())
    );
}

#[test]
fn waiters_errors_and_empty_answers() {
    let server = Server::start();
    let mut con = server.client();
    // Nobody waits: an empty array, for a missing key and a held lock.
    assert!(waiters_of(&mut con, "missing", None).is_empty());
    acquire(&mut con, "k", "holder", &[]);
    assert!(waiters_of(&mut con, "k", Some("0")).is_empty());
    assert!(queues(&mut con, None).is_empty());

    for (args, want) in [
        (
            &["LOCK.WAITERS"][..],
            "ERR wrong number of arguments for 'lock.waiters' command",
        ),
        (
            &["LOCK.WAITERS", "k", "COUNT", "-1"],
            "ERR invalid COUNT '-1': must not be negative",
        ),
        (
            &["LOCK.WAITERS", "k", "COUNT", "many"],
            "ERR invalid COUNT 'many': not an integer or out of range",
        ),
        (
            &["LOCK.WAITERS", "k", "COUNT"],
            "ERR syntax error: COUNT needs a value",
        ),
        (
            &["LOCK.WAITERS", "k", "COUNT", "1", "count", "2"],
            "ERR syntax error: COUNT given more than once",
        ),
        (
            &["LOCK.WAITERS", "k", "LIMIT", "1"],
            "ERR syntax error: unknown option 'LIMIT'",
        ),
        (
            &["LOCK.QUEUES", "COUNT", "-5"],
            "ERR invalid COUNT '-5': must not be negative",
        ),
        (
            &["LOCK.QUEUES", "k"],
            "ERR syntax error: unknown option 'k'",
        ),
    ] {
        assert_eq!(err(&mut con, args), want, "{args:?}");
    }

    // A key that is not a lock: as LOCK.INFO.
    let _: () = q(&mut con, &["SET", "s", "v"]);
    let _: () = q(&mut con, &["HSET", "h", "a", "1", "b", "2"]);
    for key in ["s", "h"] {
        assert_eq!(
            err_code(&mut con, &["LOCK.WAITERS", key]),
            err_code(&mut con, &["LOCK.INFO", key])
        );
        assert_eq!(err_code(&mut con, &["LOCK.WAITERS", key]), "WRONGTYPE");
    }
}

// ---------------------------------------------------------------- LOCK.QUEUES

#[test]
fn queues_longest_wait_first_with_count_and_per_db() {
    let server = Server::start();
    let mut con = server.client();
    for key in ["a", "b", "c"] {
        acquire(&mut con, key, "holder", &["PX", "60000"]);
    }
    // Queued first on b, then c, then a; b gets a second waiter.
    let mut clients = Vec::new();
    for (key, owner, nth) in [
        ("b", "wb1", 1),
        ("c", "wc", 1),
        ("a", "wa", 1),
        ("b", "wb2", 2),
    ] {
        clients.push(queue_waiter::<Connection>(
            &server,
            &mut con,
            key,
            owner,
            &["BLOCK", "0"],
            nth,
        ));
    }
    let all = queues(&mut con, None);
    assert_eq!(owners(&all, "key"), ["b", "c", "a"]);
    assert_eq!(
        all.iter().map(|e| int(e, "waiters")).collect::<Vec<_>>(),
        [2, 1, 1]
    );
    let waits: Vec<i64> = all.iter().map(|e| int(e, "longest_wait")).collect();
    assert!(waits.windows(2).all(|w| w[0] >= w[1]), "{waits:?}");
    for e in &all {
        assert_eq!(bulk(e, "owner"), "holder");
        let ttl = int(e, "ttl");
        assert!(ttl > 0 && ttl <= 60000, "{ttl}");
    }
    assert_eq!(owners(&queues(&mut con, Some("2")), "key"), ["b", "c"]);
    assert_eq!(owners(&queues(&mut con, Some("1")), "key"), ["b"]);
    assert_eq!(owners(&queues(&mut con, Some("0")), "key").len(), 3);

    // The first in line of b is served: b's wait is now its second
    // waiter's, queued last of all.
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "b", "holder"]), 0);
    assert_eq!(recv(&mut clients[0]).expect("b's first"), Value::Int(1));
    assert_eq!(owners(&queues(&mut con, None), "key"), ["c", "a", "b"]);
    let b = &queues(&mut con, None)[2];
    assert_eq!(
        (int(b, "waiters"), bulk(b, "owner")),
        (1, "wb1".to_string())
    );
    assert_eq!(owners(&waiters_of(&mut con, "b", None), "owner"), ["wb2"]);

    // Another db: only its own locks.
    let mut db1 = server.client();
    let _: () = q(&mut db1, &["SELECT", "1"]);
    assert!(queues(&mut db1, None).is_empty());
    acquire(&mut db1, "a", "other", &[]);
    let mut in_db1 = server.client();
    let _: () = q(&mut in_db1, &["SELECT", "1"]);
    send(&mut in_db1, &["LOCK.ACQUIRE", "a", "w1", "BLOCK", "0"]);
    wait_for_waiters(&mut db1, "a", 1);
    let one = queues(&mut db1, None);
    assert_eq!(owners(&one, "key"), ["a"]);
    assert_eq!(bulk(&one[0], "owner"), "other");
    let ttl = int(&one[0], "ttl");
    assert!(ttl > 0 && ttl <= 30000, "default lease: {ttl}");
    assert_eq!(owners(&waiters_of(&mut db1, "a", None), "owner"), ["w1"]);
    assert_eq!(queues(&mut con, None).len(), 3);
}

#[test]
fn queues_show_read_write_and_free_locks_by_their_owner_field() {
    let server = Server::start();
    let mut con = server.client();
    // Read holds only: no single owner.
    let r: i64 = q(&mut con, &["LOCK.RACQUIRE", "rw", "r", "PX", "60000"]);
    assert_eq!(r, 1);
    let _wr = {
        let mut c = server.client();
        send(&mut c, &["LOCK.WACQUIRE", "rw", "w", "BLOCK", "0"]);
        wait_for_waiters(&mut con, "rw", 1);
        c
    };
    // A write hold: the writer.
    let w: i64 = q(&mut con, &["LOCK.WACQUIRE", "rw2", "writer", "PX", "60000"]);
    assert_eq!(w, 1);
    let _r2 = {
        let mut c = server.client();
        send(&mut c, &["LOCK.RACQUIRE", "rw2", "r2", "BLOCK", "0"]);
        wait_for_waiters(&mut con, "rw2", 1);
        c
    };
    // Free but waited for: a multi-lock caller waits for its other key.
    acquire(&mut con, "x", "holder", &[]);
    let _m = {
        let mut c = server.client();
        send(
            &mut c,
            &["LOCK.MACQUIRE", "2", "x", "free", "m", "BLOCK", "0"],
        );
        wait_for_waiters(&mut con, "x", 1);
        c
    };
    let all = queues(&mut con, None);
    let by_key = |key: &str| {
        all.iter()
            .find(|e| bulk(e, "key") == key)
            .unwrap_or_else(|| panic!("{key} not listed: {all:?}"))
    };
    assert_eq!(get(by_key("rw"), "owner"), &Value::Nil);
    assert_eq!(bulk(by_key("rw2"), "owner"), "writer");
    assert_eq!(get(by_key("free"), "owner"), &Value::Nil);
    assert_eq!(int(by_key("free"), "ttl"), -2);
    let ttl = int(by_key("x"), "ttl");
    assert!(ttl > 0 && ttl <= 30000, "{ttl}");
    assert_eq!(all.len(), 4);
}

#[test]
fn queues_leave_out_keys_the_user_may_not_read() {
    let server = Server::start();
    let mut admin = server.client();
    for key in ["allowed:1", "secret:1", "allowed:2"] {
        acquire(&mut admin, key, "holder", &[]);
    }
    let mut clients = Vec::new();
    for key in ["allowed:1", "secret:1", "allowed:2"] {
        clients.push(queue_waiter::<Connection>(
            &server,
            &mut admin,
            key,
            "w",
            &["BLOCK", "0"],
            1,
        ));
    }
    let _: () = q(
        &mut admin,
        &[
            "ACL",
            "SETUSER",
            "viewer",
            "on",
            ">pw",
            "~allowed*",
            "+lock.queues",
            "+lock.waiters",
            "+lock.info",
        ],
    );
    let mut viewer = redis::Client::open(format!("redis://viewer:pw@127.0.0.1:{}/", server.port))
        .expect("client")
        .get_connection()
        .expect("connect as viewer");
    assert_eq!(owners(&queues(&mut admin, None), "key").len(), 3);
    assert_eq!(
        owners(&queues(&mut viewer, None), "key"),
        ["allowed:1", "allowed:2"]
    );
    assert_eq!(
        owners(&queues(&mut viewer, Some("1")), "key"),
        ["allowed:1"]
    );
    // LOCK.WAITERS and LOCK.INFO refuse the key itself.
    for cmd in ["LOCK.WAITERS", "LOCK.INFO"] {
        assert_eq!(err_code(&mut viewer, &[cmd, "secret:1"]), "NOPERM", "{cmd}");
    }
    assert_eq!(waiters_of(&mut viewer, "allowed:2", None).len(), 1);
}

#[test]
fn a_replica_shows_no_waiters() {
    let master = Server::start();
    let replica = master.start_replica(Config::default());
    let mut con = master.client();
    acquire(&mut con, "k", "holder", &["PX", "60000"]);
    let _w = queue_waiter::<Connection>(&master, &mut con, "k", "w", &["BLOCK", "0"], 1);
    assert_eq!(queues(&mut con, None).len(), 1);
    wait_until("replica has the lock", || {
        master.replica_caught_up(&replica)
    });
    let mut on_replica = replica.client();
    assert_eq!(
        lock_field(&mut on_replica, "k", "owner").as_deref(),
        Some("holder")
    );
    assert!(waiters_of(&mut on_replica, "k", None).is_empty());
    assert!(waiters_of(&mut on_replica, "k", Some("0")).is_empty());
    assert!(queues(&mut on_replica, Some("0")).is_empty());
    let _: () = q(&mut con, &["SET", "s", "v"]);
    wait_until("replica has s", || master.replica_caught_up(&replica));
    assert_eq!(
        err_code(&mut on_replica, &["LOCK.WAITERS", "s"]),
        "WRONGTYPE"
    );
}

// ---------------------------------------------------------------- INFO lock

#[test]
fn info_reports_zero_percentiles_before_anything_ended() {
    let server = Server::start();
    for what in ["wait_ms", "hold_ms"] {
        assert_eq!(percentiles(&server, what), (0, 0, 0), "{what}");
    }
    let mut con = server.client();
    acquire(&mut con, "k", "a", &[]);
    // Held, not ended: no hold counted yet.
    assert_eq!(percentiles(&server, "hold_ms"), (0, 0, 0));
}

#[test]
fn a_hold_counts_from_its_grant_to_its_release() {
    let server = Server::start();
    let mut con = server.client();
    let sent = Instant::now();
    acquire(&mut con, "k", "a", &["PX", "60000"]);
    let granted = Instant::now();
    // Re-entry and renewal continue the same hold.
    acquire(&mut con, "k", "a", &[]);
    let _: i64 = q(&mut con, &["LOCK.RENEW", "k", "a", "PX", "60000"]);
    pause();
    let releasing = Instant::now();
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "k", "a"]), 1);
    assert_eq!(percentiles(&server, "hold_ms"), (0, 0, 0));
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "k", "a"]), 0);
    let released = Instant::now();
    let (p50, p99, max) = percentiles(&server, "hold_ms");
    // One hold: every percentile is it.
    assert_eq!((p50, p99), (max, max));
    assert!(max >= floor_ms(releasing - granted), "hold {max}");
    assert!(max <= at_most(released - sent), "hold {max}");
}

/// Makes a caller wait once (on a lock written by hand, which the module
/// did not grant, so no hold is timed): from then on the module listens to
/// every keyspace event that ends a lock, `del` included.
fn have_a_caller_wait(server: &Server, con: &mut Connection) {
    let _: i64 = q(con, &["HSET", "setup", "by-hand", "1"]);
    assert_eq!(acquire(con, "setup", "w", &["BLOCK", "1"]), Value::Nil);
    assert_eq!(q::<i64>(con, &["DEL", "setup"]), 1);
    assert_eq!(percentiles(server, "hold_ms"), (0, 0, 0));
}

#[test]
fn holds_end_by_force_release_delete_and_lease_expiry() {
    // Each on its own server, so that the one hold is the max.
    type End = fn(&mut Connection);
    let ends: [(&str, End); 3] = [
        ("forcerelease", |con| {
            assert_eq!(q::<i64>(con, &["LOCK.FORCERELEASE", "k"]), 1);
        }),
        ("del", |con| {
            assert_eq!(q::<i64>(con, &["DEL", "k"]), 1);
        }),
        ("unlink", |con| {
            assert_eq!(q::<i64>(con, &["UNLINK", "k"]), 1);
        }),
    ];
    for (name, end) in ends {
        let server = Server::start();
        let mut con = server.client();
        have_a_caller_wait(&server, &mut con);
        let sent = Instant::now();
        acquire(&mut con, "k", "a", &["PX", "60000"]);
        let granted = Instant::now();
        pause();
        let ending = Instant::now();
        end(&mut con);
        let ended = Instant::now();
        let (_, _, max) = percentiles(&server, "hold_ms");
        assert!(max >= floor_ms(ending - granted), "{name}: {max}");
        assert!(max <= at_most(ended - sent), "{name}: {max}");
    }

    // A lease that runs out: held at least its lease, until the server
    // expires the key (here when EXISTS finds it expired).
    let server = Server::start();
    let mut con = server.client();
    let sent = Instant::now();
    acquire(&mut con, "k", "a", &["PX", "50"]);
    wait_until("lease over", || !exists(&mut con, "k"));
    let gone = Instant::now();
    let (_, _, max) = percentiles(&server, "hold_ms");
    assert!(max >= 50, "{max}");
    assert!(max <= at_most(gone - sent), "{max}");
}

/// Until a caller has waited, the module does not listen to `del` (every
/// DEL on the server would pay for it): a lock a client deletes is not
/// timed, and what the module knew of it is dropped when the key is next
/// taken.
#[test]
fn before_any_wait_a_lock_deleted_by_a_client_is_not_timed() {
    let server = Server::start();
    let mut con = server.client();
    acquire(&mut con, "k", "a", &["PX", "60000"]);
    pause();
    assert_eq!(q::<i64>(&mut con, &["DEL", "k"]), 1);
    assert_eq!(percentiles(&server, "hold_ms"), (0, 0, 0));
    // b's hold is timed; a's (30 ms and more) is not.
    let sent = Instant::now();
    acquire(&mut con, "k", "b", &["PX", "60000"]);
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "k", "b"]), 0);
    let released = Instant::now();
    let (_, _, max) = percentiles(&server, "hold_ms");
    assert!(max <= at_most(released - sent), "{max}");
}

#[test]
fn read_write_and_multi_lock_holds_are_counted() {
    let server = Server::start();
    let mut con = server.client();
    let sent = Instant::now();
    let r: i64 = q(&mut con, &["LOCK.RACQUIRE", "rw", "r", "PX", "60000"]);
    assert_eq!(r, 1);
    let granted = Instant::now();
    pause();
    let releasing = Instant::now();
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "rw", "r"]), 0);
    let released = Instant::now();
    let (_, _, read_hold) = percentiles(&server, "hold_ms");
    assert!(read_hold >= floor_ms(releasing - granted), "{read_hold}");
    assert!(read_hold <= at_most(released - sent), "{read_hold}");

    // A multi-lock: one hold per key.
    let sent = Instant::now();
    let all: Vec<i64> = q(
        &mut con,
        &["LOCK.MACQUIRE", "2", "x", "y", "m", "PX", "60000"],
    );
    assert_eq!(all, [1, 1]);
    let granted = Instant::now();
    pause();
    let releasing = Instant::now();
    let left: Vec<i64> = q(&mut con, &["LOCK.MRELEASE", "2", "x", "y", "m"]);
    assert_eq!(left, [0, 0]);
    let released = Instant::now();
    let (p50, _, max) = percentiles(&server, "hold_ms");
    let at_least = floor_ms(releasing - granted);
    assert!(max >= at_least, "{max}");
    assert!(max <= at_most(released - sent).max(read_hold), "{max}");
    // Two of the three holds are the multi-lock's: the median is at least
    // the shorter of them.
    assert!(p50 >= at_least, "{p50}");
}

#[test]
fn a_wait_counts_from_queued_to_granted_and_ends_the_holders_hold() {
    let server = Server::start();
    let mut con = server.client();
    acquire(&mut con, "k", "holder", &["PX", "60000"]);
    let held = Instant::now();
    let (mut waiter, sent) = blocked(&server, &["LOCK.ACQUIRE", "k", "w", "BLOCK", "0"]);
    wait_for_waiters(&mut con, "k", 1);
    let queued = Instant::now();
    pause();
    let releasing = Instant::now();
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "k", "holder"]), 0);
    assert_eq!(recv(&mut waiter).expect("grant"), Value::Int(1));
    let granted = Instant::now();
    let (p50, p99, max) = percentiles(&server, "wait_ms");
    assert_eq!((p50, p99), (max, max));
    assert!(max >= floor_ms(releasing - queued), "wait {max}");
    assert!(max <= at_most(granted - sent), "wait {max}");
    // The holder's hold ended at the hand-off.
    let (_, _, hold) = percentiles(&server, "hold_ms");
    assert!(hold >= floor_ms(releasing - held), "hold {hold}");

    // A wait that times out is not a wait before a grant.
    let (mut gives_up, _) = blocked(&server, &["LOCK.ACQUIRE", "k", "x", "BLOCK", "1"]);
    assert_eq!(recv(&mut gives_up).expect("timeout"), Value::Nil);
    assert_eq!(percentiles(&server, "wait_ms"), (p50, p99, max));
}
