//! Persistence: locks, their absolute lease deadlines and fencing counters
//! survive an AOF or RDB restart; expired leases are not brought back.

use crate::common;
use common::*;

/// owner, holds, token of a lock (token `None` when absent).
fn summary(con: &mut Connection, key: &str) -> (String, String, Option<String>) {
    let info = lock_info(con, key);
    assert!(!info.is_empty(), "{key} is locked");
    (
        field(&info, "owner").expect("owner"),
        field(&info, "holds").expect("holds"),
        field(&info, "token"),
    )
}

/// Stops the master from deleting expired keys on its own, so a lease can
/// run out while its lock is still stored (as if the server had been down).
fn stop_active_expiry(con: &mut Connection) {
    let _: () = q(con, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]);
}

/// Waits until the wall clock is past the absolute deadline `at` (ms),
/// without touching the key (which would expire it).
fn wait_past(at: i64) {
    wait_until("lease deadline passed", || now_ms() > at + 5);
}

/// The fencing counter of `fenced` starts here, ahead of the clock, so
/// that each FENCE takes exactly the next token (from the clock, a counter
/// lost in a restart could not be told from one kept).
const AHEAD: i64 = 9_000_000_000_000_000;

/// The locks several tests take: a plain one, one re-entered three times,
/// a fenced one (token AHEAD + 2 after a first fenced owner released it),
/// with their deadlines and the fencing token key's.
fn take_locks(con: &mut Connection) -> Vec<(&'static str, i64)> {
    assert_eq!(
        q::<i64>(con, &["LOCK.ACQUIRE", "plain", "o1", "PX", "60000"]),
        1
    );
    for n in 1..=3 {
        assert_eq!(
            q::<i64>(con, &["LOCK.ACQUIRE", "reentered", "o2", "PX", "50000"]),
            n
        );
    }
    // With an expiry, as the module writes its counters (one without is
    // Redisson's, and stays without).
    let _: () = q(
        con,
        &[
            "SET",
            "redisson_lock_token:{fenced}",
            &AHEAD.to_string(),
            "PX",
            "3600000",
        ],
    );
    assert_eq!(
        q::<i64>(
            con,
            &["LOCK.ACQUIRE", "fenced", "o0", "PX", "60000", "FENCE"]
        ),
        AHEAD + 1
    );
    assert_eq!(q::<i64>(con, &["LOCK.RELEASE", "fenced", "o0"]), 0);
    assert_eq!(
        q::<i64>(con, &["LOCK.ACQUIRE", "fenced", "o3", "EX", "70", "FENCE"]),
        AHEAD + 2
    );
    // The token key has a TTL (lock.token-ttl-ms), kept like a lease's.
    [
        "plain",
        "reentered",
        "fenced",
        "redisson_lock_token:{fenced}",
    ]
    .into_iter()
    .map(|k| (k, pexpiretime(con, k)))
    .collect()
}

/// `reentered` and `fenced` of [`take_locks`] have their owners, holds and
/// token.
#[track_caller]
fn check_reentered_and_fenced(con: &mut Connection) {
    assert_eq!(summary(con, "reentered"), ("o2".into(), "3".into(), None));
    assert_eq!(
        summary(con, "fenced"),
        ("o3".into(), "1".into(), Some((AHEAD + 2).to_string()))
    );
}

/// The locks of [`take_locks`] are back, unchanged, and still work.
fn check_locks(server: &Server, deadlines: &[(&str, i64)]) {
    let mut con = server.client();
    assert_eq!(summary(&mut con, "plain"), ("o1".into(), "1".into(), None));
    check_reentered_and_fenced(&mut con);
    for (key, at) in deadlines {
        assert!(*at > now_ms(), "{key} deadline in the future");
        assert_eq!(pexpiretime(&mut con, key), *at, "PEXPIRETIME {key}");
    }
    assert_eq!(
        q::<i64>(&mut con, &["GET", "redisson_lock_token:{fenced}"]),
        AHEAD + 2
    );
    // Owners can still release; a new fenced owner continues the counter.
    let e = err(&mut con, &["LOCK.RELEASE", "plain", "o2"]);
    assert!(e.starts_with("NOTOWNER"), "{e}");
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "plain", "o1"]), 0);
    assert_eq!(q::<i64>(&mut con, &["EXISTS", "plain"]), 0);
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "reentered", "o2"]), 2);
    assert_eq!(
        pexpiretime(&mut con, "reentered"),
        deadlines[1].1,
        "a partial release keeps the lease"
    );
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "reentered", "o2"]), 1);
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "reentered", "o2"]), 0);
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "fenced", "o3"]), 0);
    assert_eq!(
        q::<i64>(&mut con, &["LOCK.ACQUIRE", "fenced", "o4", "FENCE"]),
        AHEAD + 3
    );
}

#[test]
fn aof_restart_keeps_locks_holds_leases_and_tokens() {
    let mut server = Config::default().aof().start();
    let deadlines = take_locks(&mut server.client());
    server.restart();
    check_locks(&server, &deadlines);
}

#[test]
fn fencing_tokens_keep_increasing_across_restarts() {
    let mut server = Config::default().aof().start();
    let mut con = server.client();
    let t1: i64 = q(
        &mut con,
        &["LOCK.ACQUIRE", "f", "o1", "PX", "60000", "FENCE"],
    );
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "f", "o1"]), 0);
    server.restart();

    let mut con = server.client();
    let t2: i64 = q(
        &mut con,
        &["LOCK.ACQUIRE", "f", "o2", "PX", "60000", "FENCE"],
    );
    assert!(t2 > t1, "token after restart {t2} > {t1}");
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "f", "o2"]), 0);

    // A short lease that ends while the lock is stored but unused: the AOF
    // holds the lock and no DEL, like a server that was down past it.
    stop_active_expiry(&mut con);
    let t3: i64 = q(&mut con, &["LOCK.ACQUIRE", "f", "o3", "PX", "200", "FENCE"]);
    assert!(t3 > t2, "{t3} > {t2}");
    let deadline = pexpiretime(&mut con, "f");
    wait_past(deadline);
    server.restart();

    let mut con = server.client();
    assert_eq!(lock_info(&mut con, "f"), Vec::new(), "expired lock is free");
    let t4: i64 = q(
        &mut con,
        &["LOCK.ACQUIRE", "f", "o4", "PX", "60000", "FENCE"],
    );
    assert!(t4 > t3, "token after an expired lease {t4} > {t3}");
    let info = lock_info(&mut con, "f");
    assert_eq!(field(&info, "owner").as_deref(), Some("o4"));
    assert_eq!(field(&info, "token"), Some(t4.to_string()));
}

#[test]
fn expired_lease_is_not_resurrected_by_restart() {
    let mut server = Config::default().aof().start();
    let mut con = server.client();
    // Expired and deleted by the server before the restart (DEL in the AOF).
    assert_eq!(
        q::<i64>(&mut con, &["LOCK.ACQUIRE", "gone", "o1", "PX", "100"]),
        1
    );
    wait_until("gone expires", || {
        q::<i64>(&mut con, &["EXISTS", "gone"]) == 0
    });
    // Expired while stored but never deleted (no DEL in the AOF).
    stop_active_expiry(&mut con);
    assert_eq!(
        q::<i64>(&mut con, &["LOCK.ACQUIRE", "stale", "o1", "PX", "100"]),
        1
    );
    assert_eq!(
        q::<i64>(&mut con, &["LOCK.ACQUIRE", "kept", "o1", "PX", "60000"]),
        1
    );
    let deadline = pexpiretime(&mut con, "stale");
    wait_past(deadline);
    server.restart();

    let mut con = server.client();
    for key in ["gone", "stale"] {
        assert_eq!(q::<i64>(&mut con, &["EXISTS", key]), 0, "{key}");
        assert_eq!(lock_info(&mut con, key), Vec::new(), "{key}");
        assert_eq!(pexpiretime(&mut con, key), -2, "{key}");
        let e = err(&mut con, &["LOCK.RELEASE", key, "o1"]);
        assert!(e.starts_with("NOTOWNER"), "{key}: {e}");
        assert_eq!(
            q::<i64>(&mut con, &["LOCK.ACQUIRE", key, "o2", "PX", "60000"]),
            1,
            "{key} is free for a new owner"
        );
    }
    assert_eq!(summary(&mut con, "kept"), ("o1".into(), "1".into(), None));
}

#[test]
fn rdb_reload_and_restart_keep_locks_and_leases() {
    let mut server = Config::default().arg("save", "").start();
    let mut con = server.client();
    let deadlines = take_locks(&mut con);
    // An expired lease is dropped by the RDB load, not revived.
    stop_active_expiry(&mut con);
    assert_eq!(
        q::<i64>(&mut con, &["LOCK.ACQUIRE", "stale", "o1", "PX", "100"]),
        1
    );
    let stale = pexpiretime(&mut con, "stale");
    let _: () = q(&mut con, &["DEBUG", "RELOAD"]);
    {
        let mut con = server.client();
        for (key, at) in &deadlines {
            assert_eq!(pexpiretime(&mut con, key), *at, "after DEBUG RELOAD: {key}");
        }
        check_reentered_and_fenced(&mut con);
    }

    wait_past(stale);
    let _: () = q(&mut server.client(), &["SAVE"]);
    server.restart();
    let mut con = server.client();
    assert_eq!(q::<i64>(&mut con, &["EXISTS", "stale"]), 0);
    check_locks(&server, &deadlines);
}
