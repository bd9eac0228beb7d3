//! Semaphores (SEM.*): one FIFO whatever the permit counts (a caller asking
//! for 3 is never overtaken by callers asking for 1), waiters that leave
//! (BLOCK time, disconnect, LOCK.CANCEL) let the next one in, permits that
//! come back when a holder's lease ends (a timer when someone waits, so the
//! waiter hears at once), a killed KEEPALIVE holder, the bounds of SEM.INIT,
//! SEM.ADD, SEM.GIVE and PERMITS, nothing left behind once all is given
//! back, SEM.TAKE and SEM.GIVE, fencing tokens, WRONGTYPE and CROSSSLOT, and
//! a replica that refuses writes but shows what it was sent.

use crate::common;
use common::redis_cli::Cli;
use common::*;

fn int(v: Value) -> i64 {
    match v {
        Value::Int(n) => n,
        other => panic!("expected an integer, got {other:?}"),
    }
}

/// A map reply (a flat array in RESP2) as (field, value) pairs.
fn pairs(v: &Value) -> Vec<(String, Value)> {
    match v {
        Value::Array(items) => items
            .chunks(2)
            .map(|kv| (text(&kv[0]), kv[1].clone()))
            .collect(),
        other => panic!("expected a map as a flat array, got {other:?}"),
    }
}

fn get<'a>(fields: &'a [(String, Value)], name: &str) -> &'a Value {
    &fields
        .iter()
        .find(|(k, _)| k == name)
        .unwrap_or_else(|| panic!("no field {name} in {fields:?}"))
        .1
}

/// One holder of SEM.INFO.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Holder {
    owner: String,
    permits: i64,
    ttl: i64,
    keepalive_client: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct SemInfo {
    permits: i64,
    available: i64,
    holders: Vec<Holder>,
    waiters: i64,
}

/// SEM.INFO, `None` when the semaphore does not exist.
fn sem_info(con: &mut Connection, key: &str) -> Option<SemInfo> {
    let reply: Value = q(con, &["SEM.INFO", key]);
    if reply == Value::Nil {
        return None;
    }
    let fields = pairs(&reply);
    let holders = match get(&fields, "holders") {
        Value::Array(hs) => hs
            .iter()
            .map(|h| {
                let f = pairs(h);
                Holder {
                    owner: text(get(&f, "owner")),
                    permits: int(get(&f, "permits").clone()),
                    ttl: int(get(&f, "ttl").clone()),
                    keepalive_client: f
                        .iter()
                        .find(|(k, _)| k == "keepalive_client")
                        .map(|(_, v)| int(v.clone())),
                }
            })
            .collect(),
        other => panic!("holders: {other:?}"),
    };
    Some(SemInfo {
        permits: int(get(&fields, "permits").clone()),
        available: int(get(&fields, "available").clone()),
        holders,
        waiters: int(get(&fields, "waiters").clone()),
    })
}

fn info(con: &mut Connection, key: &str) -> SemInfo {
    sem_info(con, key).unwrap_or_else(|| panic!("SEM.INFO {key}: nil"))
}

/// (owner, permits) of each holder, by owner.
fn holders(con: &mut Connection, key: &str) -> Vec<(String, i64)> {
    sem_info(con, key)
        .map(|i| {
            i.holders
                .into_iter()
                .map(|h| (h.owner, h.permits))
                .collect()
        })
        .unwrap_or_default()
}

/// LOCK.WAITERS key COUNT 0: (owner, kind, permits) of each, in queue order.
fn queue(con: &mut Connection, key: &str) -> Vec<(String, String, i64)> {
    match q::<Value>(con, &["LOCK.WAITERS", key, "COUNT", "0"]) {
        Value::Array(entries) => entries
            .iter()
            .map(|e| {
                let f = pairs(e);
                (
                    text(get(&f, "owner")),
                    text(get(&f, "kind")),
                    int(get(&f, "permits").clone()),
                )
            })
            .collect(),
        other => panic!("LOCK.WAITERS: {other:?}"),
    }
}

fn queued(con: &mut Connection, key: &str) -> usize {
    queue(con, key).len()
}

/// Sends a blocking SEM.* call on a new connection and waits until it is
/// the `nth` caller queued on `key`.
fn queue_call(server: &Server, con: &mut Connection, args: &[&str], nth: usize) -> Connection {
    let mut waiter = server.client();
    send(&mut waiter, args);
    let key = args[1];
    wait_until(&format!("{args:?} queued as #{nth}"), || {
        queued(con, key) == nth
    });
    waiter
}

/// Every key of the db, sorted.
fn keys(con: &mut Connection) -> Vec<String> {
    let mut keys: Vec<String> = q(con, &["KEYS", "*"]);
    keys.sort();
    keys
}

fn assert_no_crash(server: &Server) {
    let log = server.log();
    for bad in [
        "crashed by signal",
        "ASSERTION",
        "internal error",
        "panicked",
    ] {
        assert!(!log.contains(bad), "server log has {bad:?}:\n{log}");
    }
}

/// 4 permits: h holds 3. big (3) queues though 1 is free, and a (1) and
/// b (2) queue behind it: nobody overtakes big, a caller that does not
/// wait gets nil, and as permits come back each is served in its turn.
/// LOCK.WAITERS and LOCK.QUEUES show them with their kind and permits.
#[test]
fn fifo_with_mixed_permit_counts_never_lets_a_small_request_overtake() {
    let server = Server::start();
    let mut con = server.client();
    assert_eq!(q::<i64>(&mut con, &["SEM.INIT", "s", "4"]), 1);
    assert_eq!(
        q::<i64>(&mut con, &["SEM.ACQUIRE", "s", "h", "PERMITS", "3"]),
        3
    );
    let big_args = [
        "SEM.ACQUIRE",
        "s",
        "big",
        "PERMITS",
        "3",
        "PX",
        "60000",
        "BLOCK",
        "0",
    ];
    let mut big = queue_call(&server, &mut con, &big_args, 1);
    let mut a = queue_call(
        &server,
        &mut con,
        &["SEM.ACQUIRE", "s", "a", "BLOCK", "0"],
        2,
    );
    let mut b = queue_call(
        &server,
        &mut con,
        &["SEM.ACQUIRE", "s", "b", "PERMITS", "2", "BLOCK", "0"],
        3,
    );
    // One permit is free, yet nobody behind big, nor a caller that does
    // not wait, gets it.
    assert_eq!(raw(&mut con, &["SEM.ACQUIRE", "s", "c"]), Ok(Value::Nil));
    assert_eq!(raw(&mut con, &["SEM.TAKE", "s"]), Ok(Value::Nil));
    assert_eq!(
        queue(&mut con, "s"),
        vec![
            ("big".into(), "semaphore".into(), 3),
            ("a".into(), "semaphore".into(), 1),
            ("b".into(), "semaphore".into(), 2),
        ]
    );
    let s = info(&mut con, "s");
    assert_eq!((s.permits, s.available, s.waiters), (4, 1, 3));
    assert_eq!(holders(&mut con, "s"), vec![("h".into(), 3)]);
    let queues: Value = q(&mut con, &["LOCK.QUEUES"]);
    let Value::Array(locks) = &queues else {
        panic!("LOCK.QUEUES: {queues:?}")
    };
    assert_eq!(locks.len(), 1, "{queues:?}");
    let lock = pairs(&locks[0]);
    assert_eq!(text(get(&lock, "key")), "s");
    assert_eq!(get(&lock, "waiters"), &Value::Int(3));
    assert_eq!(get(&lock, "owner"), &Value::Nil);

    // 2 free: still not enough for big, and nobody overtakes it.
    assert_eq!(
        q::<i64>(&mut con, &["SEM.RELEASE", "s", "h", "PERMITS", "1"]),
        2
    );
    assert_eq!(queued(&mut con, "s"), 3);
    assert_eq!(info(&mut con, "s").available, 2);

    // 4 free: big gets 3, a the last one; b waits on.
    assert_eq!(q::<i64>(&mut con, &["SEM.RELEASE", "s", "h"]), 0);
    assert_eq!(int(recv(&mut big).expect("big's grant")), 3);
    assert_eq!(int(recv(&mut a).expect("a's grant")), 1);
    assert_eq!(
        queue(&mut con, "s"),
        vec![("b".into(), "semaphore".into(), 2)]
    );
    assert_eq!(
        holders(&mut con, "s"),
        vec![("a".into(), 1), ("big".into(), 3)]
    );
    let big_ttl = info(&mut con, "s").holders[1].ttl;
    assert_in(big_ttl, 50_000, 60_000, "big's lease");

    // big gives 2 back: b's turn.
    assert_eq!(
        q::<i64>(&mut con, &["SEM.RELEASE", "s", "big", "PERMITS", "2"]),
        1
    );
    assert_eq!(int(recv(&mut b).expect("b's grant")), 2);
    let s = info(&mut con, "s");
    assert_eq!((s.permits, s.available, s.waiters), (4, 0, 0));
    assert_eq!(
        holders(&mut con, "s"),
        vec![("a".into(), 1), ("b".into(), 2), ("big".into(), 1)]
    );
    assert!(server.stat("semaphore_grants") >= 4);
    assert_eq!(server.stat("waiters"), 0);
    for owner in ["a", "b", "big"] {
        assert_eq!(q::<i64>(&mut con, &["SEM.RELEASE", "s", owner]), 0);
    }
    assert_eq!(keys(&mut con), vec!["s".to_string()]);
    assert_eq!(q::<String>(&mut con, &["GET", "s"]), "4");
}

/// 2 permits, h holds 1: a caller asking for 2 holds back a caller asking
/// for 1 behind it until it leaves, by its BLOCK time, a closed connection
/// or LOCK.CANCEL; then the one behind is served at once.
#[test]
fn a_waiter_that_leaves_lets_the_one_behind_it_in() {
    let server = Server::start();
    let mut con = server.client();
    assert_eq!(q::<i64>(&mut con, &["SEM.INIT", "s", "2"]), 1);
    assert_eq!(q::<i64>(&mut con, &["SEM.ACQUIRE", "s", "h"]), 1);

    // Its BLOCK time runs out.
    let mut big = queue_call(
        &server,
        &mut con,
        &["SEM.ACQUIRE", "s", "big", "PERMITS", "2", "BLOCK", "800"],
        1,
    );
    let mut small = queue_call(
        &server,
        &mut con,
        &["SEM.ACQUIRE", "s", "a", "BLOCK", "0"],
        2,
    );
    assert_eq!(recv(&mut big).expect("big's nil"), Value::Nil);
    assert_eq!(int(recv(&mut small).expect("a's grant")), 1);
    assert_eq!(
        holders(&mut con, "s"),
        vec![("a".into(), 1), ("h".into(), 1)]
    );
    assert_eq!(q::<i64>(&mut con, &["SEM.RELEASE", "s", "a"]), 0);

    // Its connection closes.
    let big = queue_call(
        &server,
        &mut con,
        &["SEM.ACQUIRE", "s", "big", "PERMITS", "2", "BLOCK", "0"],
        1,
    );
    let mut small = queue_call(
        &server,
        &mut con,
        &["SEM.ACQUIRE", "s", "b", "BLOCK", "0"],
        2,
    );
    let disconnected = server.stat("waiters_disconnected");
    drop(big);
    assert_eq!(int(recv(&mut small).expect("b's grant")), 1);
    assert_eq!(server.stat("waiters_disconnected"), disconnected + 1);
    assert_eq!(
        holders(&mut con, "s"),
        vec![("b".into(), 1), ("h".into(), 1)]
    );
    assert_eq!(q::<i64>(&mut con, &["SEM.RELEASE", "s", "b"]), 0);

    // LOCK.CANCEL ends its wait; it is answered nil and may go on.
    let mut big = queue_call(
        &server,
        &mut con,
        &["SEM.ACQUIRE", "s", "big", "PERMITS", "2", "BLOCK", "0"],
        1,
    );
    let mut small = queue_call(
        &server,
        &mut con,
        &["SEM.ACQUIRE", "s", "c", "BLOCK", "0"],
        2,
    );
    assert_eq!(q::<i64>(&mut con, &["LOCK.CANCEL", "s", "big"]), 1);
    assert_eq!(recv(&mut big).expect("big's nil"), Value::Nil);
    assert_eq!(int(recv(&mut small).expect("c's grant")), 1);
    assert_eq!(q::<i64>(&mut con, &["LOCK.CANCEL", "s", "big"]), 0);
    assert_eq!(
        err(&mut con, &["SEM.RELEASE", "s", "big"])
            .split(' ')
            .next(),
        Some("NOTOWNER")
    );
    assert_eq!(raw(&mut big, &["SEM.ACQUIRE", "s", "big"]), Ok(Value::Nil));
    assert_eq!(
        holders(&mut con, "s"),
        vec![("c".into(), 1), ("h".into(), 1)]
    );
    assert_eq!(queued(&mut con, "s"), 0);
    assert_eq!(server.stat("waiters"), 0);
    // Nothing of the waits that ended is left behind.
    for owner in ["c", "h"] {
        assert_eq!(q::<i64>(&mut con, &["SEM.RELEASE", "s", owner]), 0);
    }
    assert_eq!(keys(&mut con), vec!["s".to_string()]);
    assert_eq!(q::<String>(&mut con, &["GET", "s"]), "2");
}

/// A holder process with KEEPALIVE keeps its permits past several leases;
/// killed with -9, it gives them back when the lease left ends (not
/// before), and the waiter gets them then.
#[test]
fn a_killed_keepalive_holder_gives_its_permits_back_at_its_lease_end() {
    let server = Server::start();
    let mut con = server.client();
    assert_eq!(q::<i64>(&mut con, &["SEM.INIT", "pool", "2"]), 1);
    let mut cli = Cli::local(&server);
    cli.run("SEM.ACQUIRE pool cron-1 PERMITS 2 PX 800 KEEPALIVE");
    wait_until("the process holds 2 permits, kept alive", || {
        info(&mut con, "pool")
            .holders
            .first()
            .is_some_and(|h| h.owner == "cron-1" && h.permits == 2 && h.keepalive_client.is_some())
    });
    let mut waiter = queue_call(
        &server,
        &mut con,
        &[
            "SEM.ACQUIRE",
            "pool",
            "w",
            "PERMITS",
            "2",
            "PX",
            "60000",
            "BLOCK",
            "0",
        ],
        1,
    );
    // Past two leases of 800 ms, renewed at every half.
    let from = server.stat("keepalive_renewals");
    wait_until("4 renewals", || {
        server.stat("keepalive_renewals") >= from + 4
    });
    assert_eq!(holders(&mut con, "pool"), vec![("cron-1".into(), 2)]);
    assert_eq!(queued(&mut con, "pool"), 1);

    let expired = server.stat("semaphore_permits_expired");
    cli.kill();
    wait_until("the KEEPALIVE binding gone", || {
        server.stat("keepalive_holds") == 0
    });
    // The lease left (at least half of it), on the server's clock: the
    // permits' score.
    let ends: Vec<String> = q(
        &mut con,
        &["ZRANGE", "{pool}:timeout", "0", "-1", "WITHSCORES"],
    );
    assert_eq!(ends.len(), 4, "{ends:?}");
    assert!(ends[0].starts_with("cron-1:"), "{ends:?}");
    let deadline: i64 = ends[1].parse().expect("a lease end");
    assert_eq!(int(recv(&mut waiter).expect("the waiter's grant")), 2);
    let granted: i64 = q::<String>(&mut con, &["ZSCORE", "{pool}:timeout", "w:1"])
        .parse::<i64>()
        .expect("w's lease end")
        - 60_000;
    assert!(
        granted > deadline && granted <= deadline + 1000,
        "handed on at {granted}, the lease ran to {deadline}"
    );
    assert_eq!(holders(&mut con, "pool"), vec![("w".into(), 2)]);
    assert_eq!(server.stat("semaphore_permits_expired"), expired + 2);
    assert_eq!(q::<i64>(&mut con, &["SEM.RELEASE", "pool", "w"]), 0);
    assert_eq!(keys(&mut con), vec!["pool".to_string()]);
}

/// A lease that ends while someone waits (here shortened by SEM.RENEW
/// after the waiter queued) is taken back by a timer, and the waiter is
/// answered then; the holder's release after that finds nothing
/// (NOTOWNER). Without waiters an ended lease is found by the next command:
/// the holder's release says EXPIRED and the permit is available again.
#[test]
fn an_ended_lease_serves_a_waiter_at_once_and_a_late_release_is_refused() {
    let server = Server::start();
    let mut con = server.client();
    assert_eq!(q::<i64>(&mut con, &["SEM.INIT", "s", "1"]), 1);
    assert_eq!(
        q::<i64>(&mut con, &["SEM.ACQUIRE", "s", "h", "PX", "60000"]),
        1
    );
    let mut waiter = queue_call(
        &server,
        &mut con,
        &["SEM.ACQUIRE", "s", "w", "PX", "60000", "BLOCK", "0"],
        1,
    );
    // A shorter lease, while w waits: the lease timer is set again.
    assert_eq!(q::<i64>(&mut con, &["SEM.RENEW", "s", "h", "PX", "300"]), 1);
    let end: i64 = q::<String>(&mut con, &["ZSCORE", "{s}:timeout", "h:1"])
        .parse()
        .expect("h's lease end");
    // Nothing but the lease timer can serve it: no command touches s.
    assert_eq!(int(recv(&mut waiter).expect("w's grant")), 1);
    let granted = q::<String>(&mut con, &["ZSCORE", "{s}:timeout", "w:1"])
        .parse::<i64>()
        .expect("w's lease end")
        - 60_000;
    assert!(
        granted > end && granted <= end + 1000,
        "served at {granted}, the lease ended at {end}"
    );
    assert_eq!(
        err(&mut con, &["SEM.RELEASE", "s", "h"]),
        "NOTOWNER the owner holds no permits of this semaphore"
    );
    assert_eq!(
        err(&mut con, &["SEM.RENEW", "s", "h"]).split(' ').next(),
        Some("NOTOWNER")
    );
    assert_eq!(holders(&mut con, "s"), vec![("w".into(), 1)]);

    // No waiter: the permit stays recorded past its lease (SEM.INFO counts
    // it available), until the holder's release says EXPIRED and puts it
    // back.
    assert_eq!(q::<i64>(&mut con, &["SEM.INIT", "t", "2"]), 1);
    assert_eq!(
        q::<i64>(
            &mut con,
            &["SEM.ACQUIRE", "t", "h", "PERMITS", "2", "PX", "50"]
        ),
        2
    );
    wait_until("h's lease over", || info(&mut con, "t").available == 2);
    assert_eq!(q::<String>(&mut con, &["GET", "t"]), "0");
    assert_eq!(
        err(&mut con, &["SEM.RELEASE", "t", "h"]),
        "EXPIRED the owner's permits' lease ended before this call"
    );
    assert_eq!(q::<String>(&mut con, &["GET", "t"]), "2");
    assert!(!exists(&mut con, "{t}:timeout"));
    assert_eq!(
        err(&mut con, &["SEM.RELEASE", "t", "h"]),
        "NOTOWNER the owner holds no permits of this semaphore"
    );
    assert_eq!(
        q::<i64>(&mut con, &["SEM.ACQUIRE", "t", "x", "PERMITS", "2"]),
        2
    );
    assert_no_crash(&server);
}

/// NOTOWNER: never held, asked to give back more than held (nothing
/// changes), released already; another owner's permits are not touched.
#[test]
fn release_and_renew_of_permits_not_held_are_refused_and_change_nothing() {
    let server = Server::start();
    let mut con = server.client();
    assert_eq!(q::<i64>(&mut con, &["SEM.INIT", "s", "5"]), 1);
    assert_eq!(
        q::<i64>(
            &mut con,
            &["SEM.ACQUIRE", "s", "a", "PERMITS", "2", "PX", "60000"]
        ),
        2
    );
    assert_eq!(q::<i64>(&mut con, &["SEM.ACQUIRE", "s", "b"]), 1);
    let snapshot = |con: &mut Connection| {
        (
            keys(con),
            q::<Vec<String>>(con, &["ZRANGE", "{s}:timeout", "0", "-1", "WITHSCORES"]),
            q::<String>(con, &["GET", "s"]),
        )
    };
    let before = snapshot(&mut con);
    for (args, want) in [
        (
            &["SEM.RELEASE", "s", "nobody"][..],
            "NOTOWNER the owner holds no permits of this semaphore",
        ),
        (
            &["SEM.RELEASE", "s", "a", "PERMITS", "3"],
            "NOTOWNER the owner holds 2 permits of this semaphore, fewer than 3",
        ),
        (
            &["SEM.RENEW", "s", "nobody", "PX", "1000"],
            "NOTOWNER the owner holds no permits of this semaphore",
        ),
        (
            &["SEM.RELEASE", "missing", "a"],
            "NOTOWNER the owner holds no permits of this semaphore",
        ),
        // A Redisson permit id is not an owner.
        (
            &["SEM.RELEASE", "s", "a:1"],
            "NOTOWNER the owner holds no permits of this semaphore",
        ),
    ] {
        assert_eq!(err(&mut con, args), want, "{args:?}");
        assert_eq!(snapshot(&mut con), before, "{args:?} changed something");
    }
    // A renewal sets the new lease on all of a's permits and only a's.
    assert_eq!(
        q::<i64>(&mut con, &["SEM.RENEW", "s", "a", "PX", "120000"]),
        2
    );
    let s = info(&mut con, "s");
    assert_in(s.holders[0].ttl, 110_000, 120_000, "a's new lease");
    assert_eq!(s.holders[1].owner, "b");
    assert!(
        s.holders[1].ttl < 110_000,
        "b's lease: {}",
        s.holders[1].ttl
    );
    assert_eq!(
        q::<i64>(&mut con, &["SEM.RELEASE", "s", "a", "PERMITS", "1"]),
        1
    );
    assert_eq!(q::<i64>(&mut con, &["SEM.RELEASE", "s", "a"]), 0);
    assert_eq!(
        err(&mut con, &["SEM.RELEASE", "s", "a"]),
        "NOTOWNER the owner holds no permits of this semaphore"
    );
    assert_eq!(holders(&mut con, "s"), vec![("b".into(), 1)]);

    // A release that leaves the owner nothing ends its KEEPALIVE binding.
    let id = client_id(&mut con);
    assert_eq!(
        q::<i64>(
            &mut con,
            &["SEM.ACQUIRE", "s", "k", "PERMITS", "2", "KEEPALIVE"]
        ),
        2
    );
    let k = info(&mut con, "s").holders[1].clone();
    assert_eq!((k.owner.as_str(), k.keepalive_client), ("k", Some(id)));
    assert_eq!(server.stat("keepalive_holds"), 1);
    assert_eq!(
        q::<i64>(&mut con, &["SEM.RELEASE", "s", "k", "PERMITS", "1"]),
        1
    );
    assert_eq!(server.stat("keepalive_holds"), 1);
    assert_eq!(q::<i64>(&mut con, &["SEM.RELEASE", "s", "k"]), 0);
    assert_eq!(server.stat("keepalive_holds"), 0);
}

/// SEM.INIT and SEM.ADD keep the total (available plus held) within 0 to
/// 2147483647 and PERMITS within 1 to 100000; SEM.INIT sets once, counting
/// permits still held after the counter was deleted. Once every permit is
/// given back, only the counters are left: no permit set.
#[test]
fn permits_stay_in_bounds_and_nothing_is_left_once_all_are_given_back() {
    let server = Server::start();
    let mut con = server.client();
    let code = |con: &mut Connection, args: &[&str]| -> String {
        err(con, args)
            .split(' ')
            .next()
            .unwrap_or_default()
            .to_string()
    };
    for bad in ["-1", "2147483648", "x", "1.5", ""] {
        assert_eq!(code(&mut con, &["SEM.INIT", "s", bad]), "ERR", "{bad}");
    }
    assert_eq!(
        err(&mut con, &["SEM.INIT", "s", "-1"]),
        "ERR invalid permits '-1': must not be negative"
    );
    assert_eq!(keys(&mut con), Vec::<String>::new());
    assert_eq!(q::<i64>(&mut con, &["SEM.INIT", "s", "2147483647"]), 1);
    assert_eq!(q::<i64>(&mut con, &["SEM.INIT", "s", "3"]), 0);
    assert_eq!(
        err(&mut con, &["SEM.ADD", "s", "1"]),
        "ERR SEM.ADD would leave the semaphore 2147483648 permits: must be 0 to 2147483647"
    );
    assert_eq!(q::<i64>(&mut con, &["SEM.ADD", "s", "-2147483647"]), 0);
    assert_eq!(
        err(&mut con, &["SEM.ADD", "fresh", "-1"]),
        "ERR SEM.ADD would leave the semaphore -1 permits: must be 0 to 2147483647"
    );
    assert!(!exists(&mut con, "fresh"));
    assert_eq!(code(&mut con, &["SEM.ADD", "s", "2147483648"]), "ERR");

    // Taking away permits that are held leaves the count below zero until
    // they come back; the total may not go below zero.
    assert_eq!(q::<i64>(&mut con, &["SEM.INIT", "t", "3"]), 1);
    assert_eq!(
        q::<i64>(&mut con, &["SEM.ACQUIRE", "t", "a", "PERMITS", "2"]),
        2
    );
    assert_eq!(q::<i64>(&mut con, &["SEM.ADD", "t", "-2"]), -1);
    assert_eq!(
        err(&mut con, &["SEM.ADD", "t", "-2"]),
        "ERR SEM.ADD would leave the semaphore -1 permits: must be 0 to 2147483647"
    );
    assert_eq!(raw(&mut con, &["SEM.ACQUIRE", "t", "b"]), Ok(Value::Nil));
    let t = info(&mut con, "t");
    assert_eq!((t.permits, t.available), (1, -1));
    assert_eq!(q::<i64>(&mut con, &["SEM.RELEASE", "t", "a"]), 0);
    assert_eq!(q::<String>(&mut con, &["GET", "t"]), "1");

    // The counter deleted while permits are held: SEM.INIT counts them.
    assert_eq!(q::<i64>(&mut con, &["SEM.INIT", "u", "3"]), 1);
    assert_eq!(
        q::<i64>(&mut con, &["SEM.ACQUIRE", "u", "a", "PERMITS", "2"]),
        2
    );
    let _: i64 = q(&mut con, &["DEL", "u"]);
    assert_eq!(q::<i64>(&mut con, &["SEM.INIT", "u", "3"]), 1);
    assert_eq!(q::<String>(&mut con, &["GET", "u"]), "1");
    assert_eq!(info(&mut con, "u").permits, 3);

    // PERMITS: 1 to 100000 in one call.
    assert_eq!(
        err(&mut con, &["SEM.ACQUIRE", "v", "a", "PERMITS", "0"]),
        "ERR invalid PERMITS '0': must be positive"
    );
    assert_eq!(
        err(&mut con, &["SEM.ACQUIRE", "v", "a", "PERMITS", "100001"]),
        "ERR invalid PERMITS '100001': too large"
    );
    assert_eq!(
        code(&mut con, &["SEM.RELEASE", "v", "a", "PERMITS", "-1"]),
        "ERR"
    );
    assert_eq!(code(&mut con, &["SEM.GIVE", "v", "PERMITS", "x"]), "ERR");
    assert!(!exists(&mut con, "v"));
    assert_eq!(q::<i64>(&mut con, &["SEM.INIT", "v", "100000"]), 1);
    assert_eq!(
        q::<i64>(&mut con, &["SEM.ACQUIRE", "v", "a", "PERMITS", "100000"]),
        100_000
    );
    assert_eq!(q::<i64>(&mut con, &["ZCARD", "{v}:timeout"]), 100_000);
    assert_eq!(holders(&mut con, "v"), vec![("a".into(), 100_000)]);

    // Everyone gives everything back: the counters alone are left.
    assert_eq!(q::<i64>(&mut con, &["SEM.RELEASE", "v", "a"]), 0);
    assert_eq!(q::<i64>(&mut con, &["SEM.RELEASE", "u", "a"]), 0);
    assert_eq!(
        keys(&mut con),
        vec!["s".to_string(), "t".into(), "u".into(), "v".into()]
    );
    for (key, want) in [("s", "0"), ("t", "1"), ("u", "3"), ("v", "100000")] {
        assert_eq!(q::<String>(&mut con, &["GET", key]), want, "{key}");
        let i = info(&mut con, key);
        assert!(i.holders.is_empty() && i.waiters == 0, "{key}: {i:?}");
    }
}

/// SEM.TAKE and SEM.GIVE: owner-less permits (Redisson's RSemaphore) in the
/// same FIFO; they touch the counter only.
#[test]
fn take_and_give_use_the_counter_alone_in_the_same_queue() {
    let server = Server::start();
    let mut con = server.client();
    assert_eq!(raw(&mut con, &["SEM.TAKE", "jobs"]), Ok(Value::Nil));
    assert!(!exists(&mut con, "jobs"));
    assert_eq!(q::<i64>(&mut con, &["SEM.GIVE", "jobs", "PERMITS", "2"]), 2);
    assert_eq!(q::<i64>(&mut con, &["SEM.TAKE", "jobs", "PERMITS", "2"]), 2);
    assert_eq!(q::<String>(&mut con, &["GET", "jobs"]), "0");

    // A taker queued first, then an owner: each served in turn.
    let mut taker = queue_call(
        &server,
        &mut con,
        &["SEM.TAKE", "jobs", "PERMITS", "2", "BLOCK", "0"],
        1,
    );
    let mut owner = queue_call(
        &server,
        &mut con,
        &["SEM.ACQUIRE", "jobs", "o", "BLOCK", "0"],
        2,
    );
    assert_eq!(
        queue(&mut con, "jobs"),
        vec![
            (String::new(), "take".into(), 2),
            ("o".into(), "semaphore".into(), 1)
        ]
    );
    assert_eq!(q::<i64>(&mut con, &["SEM.GIVE", "jobs"]), 1);
    assert_eq!(queued(&mut con, "jobs"), 2);
    assert_eq!(q::<i64>(&mut con, &["SEM.GIVE", "jobs", "PERMITS", "2"]), 0);
    assert_eq!(int(recv(&mut taker).expect("the taker's permits")), 2);
    assert_eq!(int(recv(&mut owner).expect("o's permit")), 1);
    assert_eq!(holders(&mut con, "jobs"), vec![("o".into(), 1)]);
    assert_eq!(q::<i64>(&mut con, &["SEM.RELEASE", "jobs", "o"]), 0);
    assert_eq!(keys(&mut con), vec!["jobs".to_string()]);
    assert_eq!(q::<String>(&mut con, &["GET", "jobs"]), "1");

    // A taker's BLOCK time runs out: nil, nothing taken.
    assert_eq!(
        raw(
            &mut con,
            &["SEM.TAKE", "jobs", "PERMITS", "2", "BLOCK", "50"]
        ),
        Ok(Value::Nil)
    );
    assert_eq!(q::<String>(&mut con, &["GET", "jobs"]), "1");

    // SEM.GIVE may give more than there ever were, up to 2147483647.
    assert_eq!(
        q::<i64>(&mut con, &["SEM.ADD", "jobs", "2147483646"]),
        2147483647
    );
    assert_eq!(
        err(&mut con, &["SEM.GIVE", "jobs"]),
        "ERR SEM.GIVE would leave the semaphore 2147483648 permits: must be 0 to 2147483647"
    );
    assert_eq!(q::<String>(&mut con, &["GET", "jobs"]), "2147483647");
    assert_eq!(server.stat("waiters"), 0);
}

/// FENCE replies a token, from `redisson_lock_token:{key}`, that grows with
/// every grant, at once or to a waiter.
#[test]
fn fence_tokens_grow_with_every_grant() {
    let server = Server::start();
    let mut con = server.client();
    assert_eq!(q::<i64>(&mut con, &["SEM.INIT", "f", "2"]), 1);
    let before = token_floor(&mut con);
    let t1: i64 = q(&mut con, &["SEM.ACQUIRE", "f", "a", "FENCE"]);
    let after = token_floor(&mut con);
    assert_token_between(t1, before, after, 0, "first token");
    let t2: i64 = q(
        &mut con,
        &["SEM.ACQUIRE", "f", "b", "PERMITS", "1", "FENCE"],
    );
    let mut waiter = queue_call(
        &server,
        &mut con,
        &["SEM.ACQUIRE", "f", "c", "BLOCK", "0", "FENCE"],
        1,
    );
    assert_eq!(q::<i64>(&mut con, &["SEM.RELEASE", "f", "a"]), 0);
    let t3 = int(recv(&mut waiter).expect("c's token"));
    // A re-entry with FENCE gets a new one too.
    assert_eq!(q::<i64>(&mut con, &["SEM.GIVE", "f"]), 1);
    let t4: i64 = q(&mut con, &["SEM.ACQUIRE", "f", "b", "FENCE", "BLOCK", "0"]);
    assert_eq!(
        raw(&mut con, &["SEM.ACQUIRE", "f", "b", "FENCE"]),
        Ok(Value::Nil)
    );
    assert_strictly_increasing(&[t1, t2, t3, t4], "semaphore tokens");
    assert_eq!(
        q::<String>(&mut con, &["GET", "redisson_lock_token:{f}"]),
        t4.to_string()
    );
    assert_eq!(
        holders(&mut con, "f"),
        vec![("b".into(), 2), ("c".into(), 1)]
    );
}

/// A key of another type, a counter that is not a number, a permit set of
/// another type: WRONGTYPE, nothing changed; a waiter whose key becomes
/// something else is answered WRONGTYPE; a name whose permit set would
/// hash elsewhere: CROSSSLOT.
#[test]
fn keys_of_other_types_are_refused() {
    let server = Server::start();
    let mut con = server.client();
    let code = |con: &mut Connection, args: &[&str]| -> String {
        err(con, args)
            .split(' ')
            .next()
            .unwrap_or_default()
            .to_string()
    };
    let _: i64 = q(&mut con, &["RPUSH", "list", "x"]);
    let _: () = q(&mut con, &["SET", "text", "abc"]);
    let _: () = q(&mut con, &["SET", "zbad", "3"]);
    let _: i64 = q(&mut con, &["RPUSH", "{zbad}:timeout", "x"]);
    let before = keys(&mut con);
    for key in ["list", "text", "zbad"] {
        for args in [
            &["SEM.INIT", key, "1"][..],
            &["SEM.ACQUIRE", key, "o"],
            &["SEM.ACQUIRE", key, "o", "BLOCK", "0"],
            &["SEM.RELEASE", key, "o"],
            &["SEM.RENEW", key, "o"],
            &["SEM.ADD", key, "1"],
            &["SEM.TAKE", key],
            &["SEM.GIVE", key],
            &["SEM.INFO", key],
        ] {
            assert_eq!(code(&mut con, args), "WRONGTYPE", "{args:?}");
        }
    }
    assert_eq!(
        err(&mut con, &["SEM.INFO", "text"]),
        "WRONGTYPE key holds a string that is not a semaphore's permit count"
    );
    assert_eq!(keys(&mut con), before);
    assert_eq!(q::<String>(&mut con, &["GET", "zbad"]), "3");
    assert_eq!(server.stat("waiters"), 0);

    for name in ["a{b", "{}x"] {
        assert_eq!(
            code(&mut con, &["SEM.ACQUIRE", name, "o"]),
            "CROSSSLOT",
            "{name}"
        );
        assert_eq!(
            code(&mut con, &["SEM.INIT", name, "1"]),
            "CROSSSLOT",
            "{name}"
        );
    }
    // A name with a hash tag keeps it: `s{t}:timeout`.
    assert_eq!(q::<i64>(&mut con, &["SEM.INIT", "s{t}", "1"]), 1);
    assert_eq!(q::<i64>(&mut con, &["SEM.ACQUIRE", "s{t}", "o"]), 1);
    assert!(exists(&mut con, "s{t}:timeout"));

    // Waiters on a semaphore that becomes something else: a string that
    // is not a count, a list renamed onto it.
    let _: () = q(&mut con, &["SET", "w", "0"]);
    let mut waiter = queue_call(
        &server,
        &mut con,
        &["SEM.ACQUIRE", "w", "o", "BLOCK", "0"],
        1,
    );
    let _: () = q(&mut con, &["SET", "w", "abc"]);
    assert_eq!(
        recv_error(&mut waiter),
        "WRONGTYPE key holds a string that is not a semaphore's permit count"
    );
    let _: () = q(&mut con, &["SET", "w", "0"]);
    let mut waiter = queue_call(&server, &mut con, &["SEM.TAKE", "w", "BLOCK", "0"], 1);
    let _: () = q(&mut con, &["RENAME", "list", "w"]);
    let reply = recv_error(&mut waiter);
    assert_eq!(reply.split(' ').next(), Some("WRONGTYPE"), "{reply}");
    assert_eq!(server.stat("waiters"), 0);
    assert_no_crash(&server);
}

/// The spec: "A waiter whose key becomes something else is answered
/// WRONGTYPE". A semaphore deleted, then written as a list, is not: the
/// module hears string and generic keyspace events only, so the waiter
/// waits until its BLOCK time runs out (for ever with BLOCK 0).
#[test]

fn a_waiter_whose_semaphore_is_deleted_then_written_as_a_list_is_answered_wrongtype() {
    let server = Server::start();
    let mut con = server.client();
    assert_eq!(q::<i64>(&mut con, &["SEM.INIT", "w", "0"]), 1);
    let mut waiter = queue_call(
        &server,
        &mut con,
        &["SEM.ACQUIRE", "w", "o", "BLOCK", "0"],
        1,
    );
    let _: i64 = q(&mut con, &["DEL", "w"]);
    let _: i64 = q(&mut con, &["RPUSH", "w", "x"]);
    waiter
        .set_read_timeout(Some(std::time::Duration::from_secs(2)))
        .expect("read timeout");
    let reply = recv_error(&mut waiter);
    assert_eq!(reply.split(' ').next(), Some("WRONGTYPE"), "{reply}");
}

/// A replica refuses every SEM.* write, and shows the semaphore its master
/// sent it: the counter and every permit with its lease end.
#[test]
fn a_replica_refuses_writes_and_shows_what_its_master_sent() {
    let master = Server::start();
    let replica = master.start_replica(Config::default());
    let mut con = master.client();
    assert_eq!(q::<i64>(&mut con, &["SEM.INIT", "s", "3"]), 1);
    assert_eq!(
        q::<i64>(
            &mut con,
            &["SEM.ACQUIRE", "s", "a", "PERMITS", "2", "PX", "60000"]
        ),
        2
    );
    wait_until("the replica in sync", || master.replica_caught_up(&replica));
    let mut r = replica.client();
    let on_master = info(&mut con, "s");
    let on_replica = info(&mut r, "s");
    assert_eq!(
        (on_replica.permits, on_replica.available, on_replica.waiters),
        (3, 1, 0)
    );
    assert_eq!(on_replica.holders.len(), 1);
    assert_eq!(on_replica.holders[0].owner, "a");
    assert!((on_master.holders[0].ttl - on_replica.holders[0].ttl).abs() < 5000);
    assert_eq!(
        q::<Vec<String>>(&mut r, &["ZRANGE", "{s}:timeout", "0", "-1", "WITHSCORES"]),
        q::<Vec<String>>(
            &mut con,
            &["ZRANGE", "{s}:timeout", "0", "-1", "WITHSCORES"]
        )
    );
    for args in [
        &["SEM.INIT", "n", "1"][..],
        &["SEM.ACQUIRE", "s", "b"],
        &["SEM.ACQUIRE", "s", "b", "BLOCK", "0"],
        &["SEM.RELEASE", "s", "a"],
        &["SEM.RENEW", "s", "a"],
        &["SEM.ADD", "s", "1"],
        &["SEM.TAKE", "s"],
        &["SEM.GIVE", "s"],
    ] {
        assert_eq!(err_code(&mut r, args), "READONLY", "{args:?}");
    }
    assert_eq!(info(&mut r, "s").holders.len(), 1);
    assert_eq!(replica.stat("waiters"), 0);
    assert_eq!(q::<i64>(&mut con, &["SEM.RELEASE", "s", "a"]), 0);
    wait_until("the replica in sync", || master.replica_caught_up(&replica));
    assert!(!exists(&mut r, "{s}:timeout"));
    assert_eq!(q::<String>(&mut r, &["GET", "s"]), "3");
}
