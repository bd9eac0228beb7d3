//! Sessions (`LOCK.SESSION token`, `SESSION token`): holds taken on any
//! connection are kept alive by the session connection, for as long as it
//! lives and no longer; a waiter is bound to whichever connection names its
//! token when it is served; the session hears of every hold it loses
//! without its owner releasing it, on `__lock__:session:<token>`; and
//! LOCK.CANCEL, with which a library ends a wait it gave up on.

use crate::common;
use common::*;

fn keepalive_client(con: &mut Connection, key: &str) -> Option<i64> {
    lock_field(con, key, "keepalive_client").and_then(|c| c.parse().ok())
}

fn renewals(server: &Server) -> i64 {
    server.stat("keepalive_renewals")
}

/// A hold taken on one connection with `SESSION` is renewed while the
/// session connection lives, after the connection that took it closed;
/// when the session closes, the hold lives out its lease and ends.
#[test]
fn a_session_keeps_holds_taken_elsewhere_alive_while_it_lives_and_no_longer() {
    let server = Server::start();
    let mut con = server.client();
    let session = Session::open(&server, "s1");
    {
        let mut taker = server.client();
        assert_eq!(
            q::<i64>(
                &mut taker,
                &["LOCK.ACQUIRE", "k", "o", "PX", "800", "SESSION", "s1"]
            ),
            1
        );
    }
    assert_eq!(keepalive_client(&mut con, "k"), Some(session.id));
    // The taker's connection is gone; three leases pass, counted by
    // renewals: still held.
    let from = renewals(&server);
    wait_until("6 renewals", || renewals(&server) >= from + 6);
    assert_eq!(lock_field(&mut con, "k", "owner").as_deref(), Some("o"));
    assert_eq!(server.stat("keepalive_holds"), 1);

    drop(session);
    wait_until("the binding gone", || server.stat("keepalive_holds") == 0);
    assert!(pttl(&mut con, "k") <= 800);
    wait_until("the lease run out", || !exists(&mut con, "k"));
    // The token went with its connection.
    assert!(err(&mut con, &["LOCK.ACQUIRE", "k", "o", "SESSION", "s1"]).starts_with("NOSESSION"));
}

/// A caller waiting with `SESSION` is bound when served, to the connection
/// that names the token then (here one that reconnected while it waited);
/// with no such connection, the grant has its lease only.
#[test]
fn a_waiter_is_bound_to_whichever_connection_names_its_token_when_served() {
    let server = Server::start();
    let mut con = server.client();
    acquire(&mut con, "k", "holder", &["PX", "60000"]);
    let old = Session::open(&server, "s1");
    let mut waiter = queue_waiter::<Connection>(
        &server,
        &mut con,
        "k",
        "w",
        &["PX", "800", "BLOCK", "0", "SESSION", "s1"],
        1,
    );
    drop(old);
    wait_until("the old session gone", || {
        err(&mut con, &["LOCK.RENEW", "none", "o", "SESSION", "s1"]).starts_with("NOSESSION")
    });
    let new = Session::open(&server, "s1");
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "k", "holder"]), 0);
    assert_eq!(recv(&mut waiter).expect("granted"), Value::Int(1));
    assert_eq!(keepalive_client(&mut con, "k"), Some(new.id));

    // Served after its session ended: not kept alive.
    let gone = Session::open(&server, "s2");
    let mut late = queue_waiter::<Connection>(
        &server,
        &mut con,
        "k",
        "late",
        &["PX", "60000", "BLOCK", "0", "SESSION", "s2"],
        1,
    );
    drop(gone);
    wait_until("the session gone", || {
        err(&mut con, &["LOCK.RENEW", "none", "o", "SESSION", "s2"]).starts_with("NOSESSION")
    });
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "k", "w"]), 0);
    assert_eq!(recv(&mut late).expect("granted"), Value::Int(1));
    assert_eq!(lock_field(&mut con, "k", "owner").as_deref(), Some("late"));
    assert_eq!(keepalive_client(&mut con, "k"), None);
}

/// `LOCK.RENEW ... SESSION` re-attaches a hold to the session, and
/// `LOCK.MACQUIRE ... SESSION` binds every key to it.
#[test]
fn renew_and_multi_lock_bind_to_the_session() {
    let server = Server::start();
    let mut con = server.client();
    let session = Session::open(&server, "s1");
    acquire(&mut con, "k", "o", &["PX", "800", "KEEPALIVE"]);
    assert_eq!(keepalive_client(&mut con, "k"), Some(client_id(&mut con)));
    assert_eq!(
        q::<i64>(
            &mut con,
            &["LOCK.RENEW", "k", "o", "PX", "900", "SESSION", "s1"]
        ),
        900
    );
    assert_eq!(keepalive_client(&mut con, "k"), Some(session.id));
    let _: Value = q(
        &mut con,
        &[
            "LOCK.MACQUIRE",
            "2",
            "a",
            "b",
            "m",
            "PX",
            "800",
            "SESSION",
            "s1",
        ],
    );
    assert_eq!(keepalive_client(&mut con, "a"), Some(session.id));
    assert_eq!(keepalive_client(&mut con, "b"), Some(session.id));
    assert_eq!(server.stat("keepalive_holds"), 3);
}

/// What is refused, with nothing written: an unknown token, an empty one,
/// a lease too short to keep alive, LOCK.SESSION from a script, and
/// another user's session (named or used); the same user takes a token
/// over from its other connection.
#[test]
fn sessions_are_refused_where_they_cannot_hold() {
    let server = Server::start();
    let mut con = server.client();
    assert!(err(&mut con, &["LOCK.ACQUIRE", "k", "o", "SESSION", "nope"]).starts_with("NOSESSION"));
    assert!(
        err(&mut con, &["LOCK.RACQUIRE", "k", "o", "SESSION", "nope"]).starts_with("NOSESSION")
    );
    assert!(err(&mut con, &["LOCK.SESSION", ""]).starts_with("ERR"));
    assert!(err(&mut con, &["LOCK.ACQUIRE", "k", "o", "SESSION", ""]).starts_with("ERR"));
    assert!(!exists(&mut con, "k"));
    let script = err(
        &mut con,
        &["EVAL", "return redis.call('LOCK.SESSION', 'x')", "0"],
    );
    assert!(script.starts_with("ERR"), "{script}");

    let _session = Session::open(&server, "s1");
    assert!(err(
        &mut con,
        &["LOCK.ACQUIRE", "k", "o", "PX", "100", "SESSION", "s1"]
    )
    .starts_with("ERR KEEPALIVE needs a lease of at least"));
    assert!(!exists(&mut con, "k"));
    // From a script, SESSION binds to the session's connection.
    let _: Value = q(
        &mut con,
        &[
            "EVAL",
            "return redis.call('LOCK.ACQUIRE', KEYS[1], 'o', 'PX', '800', 'SESSION', 's1')",
            "1",
            "k",
        ],
    );
    assert_eq!(keepalive_client(&mut con, "k"), Some(_session.id));

    let _: Value = q(
        &mut con,
        &["ACL", "SETUSER", "other", "on", ">pw", "~*", "&*", "+@all"],
    );
    let mut other = server.client();
    let _: Value = q(&mut other, &["AUTH", "other", "pw"]);
    assert!(err(&mut other, &["LOCK.SESSION", "s1"]).starts_with("NOPERM"));
    assert!(err(&mut other, &["LOCK.ACQUIRE", "j", "o", "SESSION", "s1"]).starts_with("NOPERM"));
    assert!(!exists(&mut con, "j"));
    assert_eq!(q::<String>(&mut other, &["LOCK.SESSION", "s2"]), "OK");
    assert!(err(&mut con, &["LOCK.ACQUIRE", "j", "o", "SESSION", "s2"]).starts_with("NOPERM"));

    // The same user takes a token over from its other connection.
    let mut again = server.client();
    assert_eq!(q::<String>(&mut again, &["LOCK.SESSION", "s1"]), "OK");
    acquire(&mut con, "j", "o", &["PX", "800", "SESSION", "s1"]);
    assert_eq!(keepalive_client(&mut con, "j"), Some(client_id(&mut again)));
}

/// The session hears of every hold it loses without its owner releasing
/// it: a forced release at once, a deleted key and the maximum hold time at
/// the next renewal, the server becoming a replica; never a release.
#[test]
fn a_session_hears_of_each_hold_it_loses_and_why() {
    let server = Server::start();
    let mut con = server.client();
    let mut session = Session::open(&server, "s1");
    let hold = |con: &mut Connection, key: &str, owner: &str| {
        acquire(con, key, owner, &["PX", "800", "SESSION", "s1"]);
    };

    // Released by its owner: no message (the next one is the force's).
    hold(&mut con, "released", "o");
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "released", "o"]), 0);
    hold(&mut con, "k 1", "own er");
    assert_eq!(q::<i64>(&mut con, &["LOCK.FORCERELEASE", "k 1"]), 1);
    assert_eq!(session.next_message(), "forced 6 own er k 1");

    hold(&mut con, "deleted", "o");
    assert_eq!(q::<i64>(&mut con, &["DEL", "deleted"]), 1);
    assert_eq!(session.next_message(), "gone 1 o deleted");

    let _: () = q(
        &mut con,
        &["CONFIG", "SET", "lock.keepalive-max-hold-ms", "1000"],
    );
    hold(&mut con, "long", "o");
    assert_eq!(session.next_message(), "maxhold 1 o long");
    assert!(exists(&mut con, "long"), "the hold lives out its lease");
    let _: () = q(
        &mut con,
        &["CONFIG", "SET", "lock.keepalive-max-hold-ms", "0"],
    );

    hold(&mut con, "kept", "o");
    let other = Server::start();
    let _: () = q(
        &mut con,
        &["REPLICAOF", "127.0.0.1", &other.port.to_string()],
    );
    assert_eq!(session.next_message(), "demoted");
    assert_eq!(server.stat("keepalive_holds"), 0);
}

/// LOCK.CANCEL ends an owner's waits at once, each answered nil: the next
/// caller in line is served in its turn, a multi-lock caller leaves every
/// key's queue, and once it has answered, no grant reaches the owner.
#[test]
fn cancel_ends_an_owners_waits_and_nothing_reaches_it_after() {
    let server = Server::start();
    let mut con = server.client();
    acquire(&mut con, "k", "holder", &["PX", "60000"]);
    let mut first = queue_waiter::<Connection>(
        &server,
        &mut con,
        "k",
        "a",
        &["PX", "60000", "BLOCK", "0"],
        1,
    );
    let mut second = queue_waiter::<Connection>(
        &server,
        &mut con,
        "k",
        "b",
        &["PX", "60000", "BLOCK", "0"],
        2,
    );
    assert_eq!(q::<i64>(&mut con, &["LOCK.CANCEL", "k", "a"]), 1);
    assert_eq!(recv(&mut first).expect("answered"), Value::Nil);
    assert_eq!(waiters(&mut con, "k"), 1);
    assert_eq!(q::<i64>(&mut con, &["LOCK.CANCEL", "k", "a"]), 0);
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "k", "holder"]), 0);
    assert_eq!(recv(&mut second).expect("granted"), Value::Int(1));
    assert_eq!(lock_field(&mut con, "k", "owner").as_deref(), Some("b"));
    // The cancelled connection is usable again, and was granted nothing.
    assert_eq!(q::<String>(&mut first, &["PING"]), "PONG");
    assert!(err(&mut con, &["LOCK.RELEASE", "k", "a"]).starts_with("NOTOWNER"));

    // A multi-lock caller, cancelled through either key, leaves both.
    acquire(&mut con, "m1", "holder", &["PX", "60000"]);
    let mut group = server.client();
    send(
        &mut group,
        &[
            "LOCK.MACQUIRE",
            "2",
            "m1",
            "m2",
            "g",
            "PX",
            "60000",
            "BLOCK",
            "0",
        ],
    );
    wait_for_waiters(&mut con, "m1", 1);
    assert_eq!(q::<i64>(&mut con, &["LOCK.CANCEL", "m2", "g"]), 1);
    assert_eq!(recv(&mut group).expect("answered"), Value::Nil);
    assert_eq!(waiters(&mut con, "m1"), 0);
    assert_eq!(waiters(&mut con, "m2"), 0);
    assert_eq!(server.stat("wait_cancels"), 2);
    assert!(err(&mut con, &["LOCK.CANCEL", "k"]).starts_with("ERR wrong number of arguments"));
    assert!(
        err(&mut con, &["LOCK.CANCEL", "k", "a", "b"]).starts_with("ERR wrong number of arguments")
    );
}
