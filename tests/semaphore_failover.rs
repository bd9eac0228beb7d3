//! A semaphore across a real Sentinel failover (`SENTINEL FAILOVER`: the
//! sentinel promotes the replica and names it the master).
//!
//! Permits held with KEEPALIVE on the master are on the replica too, with
//! the same absolute lease ends, so they survive the failover; their
//! holders re-attach on the new master (`SEM.RENEW key owner PX ..
//! KEEPALIVE`), which then keeps them alive; a caller waiting on the old
//! master is answered `UNBLOCKED` when the old master is made a replica of
//! the new one, and waits again on the new one, where it is served when a
//! holder releases; the new master never lets more than the semaphore's
//! permits be held, and ends whole and free, as does the old master, now
//! its replica.
//!
//! The test makes the old master a replica itself (`REPLICAOF`), at once:
//! Sentinel does it only about 10 s after the switch (it waits for the old
//! master to report its role for a while), and in the same MULTI runs
//! `CLIENT KILL TYPE normal`, which closes the waiter's connection before
//! its `UNBLOCKED` reply is written: under Sentinel alone a waiter on a
//! demoted master sees its connection close (nothing granted either way).

use crate::common;
use crate::common::semaphore;

use common::sentinel::Sentinels;
use common::*;
use semaphore::{sem_info, SemInfo};

use std::time::Instant;

use redis::{Connection, Value};

const KEY: &str = "pool";
const PERMITS_KEY: &str = "{pool}:timeout";
const N: i64 = 3;
/// The lease of the permits taken on the old master: far longer than a
/// failover takes (about 1.5 s), so they are still there when their holders
/// re-attach.
const LEASE_MS: &str = "6000";
/// The lease the holders re-attach with: the new master renews it at half
/// of it, soon after.
const REATTACH_LEASE_MS: &str = "1000";

fn info(con: &mut Connection) -> SemInfo {
    sem_info(con, KEY)
        .expect("SEM.INFO")
        .expect("the semaphore exists")
}

/// `{pool}:timeout` as (member, lease end) pairs.
fn permit_set(con: &mut Connection) -> Vec<(String, i64)> {
    q(con, &["ZRANGE", PERMITS_KEY, "0", "-1", "WITHSCORES"])
}

/// The semaphore is whole (N permits) and holds what `holders` say:
/// (owner, permits), each with time left on its lease; `available` is what
/// is left. Never more than N held.
fn assert_holds(info: &SemInfo, holders: &[(&str, i64)], what: &str) {
    assert_eq!(info.permits, N, "{what}: {info:?}");
    let held: i64 = holders.iter().map(|(_, n)| n).sum();
    assert!(held <= N);
    assert_eq!(info.available, N - held, "{what}: {info:?}");
    let got: Vec<(&str, i64)> = info
        .holders
        .iter()
        .map(|h| (h.owner.as_str(), h.permits))
        .collect();
    assert_eq!(got, holders, "{what}: {info:?}");
    for h in &info.holders {
        assert!(h.ttl > 0, "{what}: {h:?} has no time left");
    }
}

/// A grab for a permit that must find none.
fn assert_nil(v: redis::RedisResult<Value>) {
    assert!(matches!(v, Ok(Value::Nil)), "a grab got {v:?}");
}

#[test]
fn kept_permits_survive_a_sentinel_failover_and_are_reattached() {
    let started = Instant::now();
    let servers = {
        let first = Server::start();
        let second = first.start_replica(Config::default());
        [first, second]
    };
    let (old, new) = (&servers[0], &servers[1]);
    // One sentinel: a forced failover needs no quorum nor election.
    let sentinels = Sentinels::start(1, old, 1);

    let mut on_old = old.client();
    assert_eq!(q::<i64>(&mut on_old, &["SEM.INIT", KEY, "3"]), 1);
    // a holds 2 permits, b 1, both kept alive by their connection.
    let mut a = old.client();
    let mut b = old.client();
    let acquire = |con: &mut Connection, owner: &str, n: &str| -> i64 {
        q(
            con,
            &[
                "SEM.ACQUIRE",
                KEY,
                owner,
                "PERMITS",
                n,
                "PX",
                LEASE_MS,
                "KEEPALIVE",
                "FENCE",
            ],
        )
    };
    let token_a = acquire(&mut a, "a", "2");
    let token_b = acquire(&mut b, "b", "1");
    assert!(token_b > token_a);
    assert_holds(&info(&mut on_old), &[("a", 2), ("b", 1)], "old master");
    // w waits for a permit on the old master.
    let mut w = old.client();
    send(
        &mut w,
        &["SEM.ACQUIRE", KEY, "w", "PX", LEASE_MS, "BLOCK", "20000"],
    );
    wait_until("w queued on the old master", || {
        info(&mut on_old).waiters == 1
    });

    // The replica has the permits, with the master's absolute lease ends
    // (a renewal between the two reads is retried).
    let mut on_new = new.client();
    wait_until("the replica's permit set is the master's", || {
        old.replica_caught_up(new) && permit_set(&mut on_new) == permit_set(&mut on_old)
    });
    assert_holds(&info(&mut on_new), &[("a", 2), ("b", 1)], "replica");

    sentinels.force_failover(old, new);

    // The new master has every permit, none kept alive (no connection of
    // theirs is there), and lets nobody take more.
    let mut on_new = new.client();
    let after = info(&mut on_new);
    assert_holds(&after, &[("a", 2), ("b", 1)], "new master");
    assert!(
        after.holders.iter().all(|h| h.keepalive_client.is_none()),
        "{after:?}"
    );
    let grab = ["SEM.ACQUIRE", KEY, "g", "PX", "1000"];
    assert_nil(raw(&mut on_new, &grab));

    // The holders re-attach on the new master.
    let mut a2 = new.client();
    let mut b2 = new.client();
    let renew = ["PX", REATTACH_LEASE_MS, "KEEPALIVE"];
    let reattach = |con: &mut Connection, owner: &str| -> i64 {
        let mut args = vec!["SEM.RENEW", KEY, owner];
        args.extend(renew);
        q(con, &args)
    };
    assert_eq!(reattach(&mut a2, "a"), 2);
    assert_eq!(reattach(&mut b2, "b"), 1);
    let (id_a, id_b) = (client_id(&mut a2), client_id(&mut b2));
    let kept = info(&mut on_new);
    assert_holds(&kept, &[("a", 2), ("b", 1)], "re-attached");
    let clients: Vec<Option<i64>> = kept.holders.iter().map(|h| h.keepalive_client).collect();
    assert_eq!(clients, [Some(id_a), Some(id_b)], "{kept:?}");
    // The re-attach's lease replaced the old one.
    assert!(kept.holders.iter().all(|h| h.ttl <= 1000), "{kept:?}");
    let lease_ends = permit_set(&mut on_new);

    // The old master is a replica now: its waiter is told so.
    let unblocked = recv_error(&mut w);
    assert!(
        unblocked.starts_with("UNBLOCKED"),
        "w on the old master: {unblocked}"
    );
    assert_nil(raw(&mut on_new, &grab));

    // The new master renews the re-attached permits: their lease ends
    // move on.
    wait_until("the new master renews the kept permits", || {
        let now = permit_set(&mut on_new);
        now.len() == lease_ends.len()
            && now
                .iter()
                .zip(&lease_ends)
                .all(|((m, at), (m0, at0))| m == m0 && at > at0)
    });
    assert_holds(&info(&mut on_new), &[("a", 2), ("b", 1)], "kept alive");

    // w waits on the new master and is served when b releases, with a
    // token above every one the old master gave.
    let mut w2 = new.client();
    send(
        &mut w2,
        &[
            "SEM.ACQUIRE",
            KEY,
            "w",
            "PX",
            LEASE_MS,
            "BLOCK",
            "20000",
            "FENCE",
        ],
    );
    wait_until("w queued on the new master", || {
        info(&mut on_new).waiters == 1
    });
    assert_nil(raw(&mut on_new, &grab));
    assert_eq!(q::<i64>(&mut b2, &["SEM.RELEASE", KEY, "b"]), 0);
    let token_w = int_reply(recv(&mut w2), "w on the new master");
    assert!(token_w > token_b, "{token_w} after {token_b}");
    assert_holds(&info(&mut on_new), &[("a", 2), ("w", 1)], "w served");
    assert_nil(raw(&mut on_new, &grab));

    // Everything given back: whole and free on the new master, and on the
    // old one, now its replica.
    assert_eq!(q::<i64>(&mut a2, &["SEM.RELEASE", KEY, "a"]), 0);
    assert_eq!(q::<i64>(&mut w2, &["SEM.RELEASE", KEY, "w"]), 0);
    assert!(info(&mut on_new).is_whole_and_free(N));
    wait_until("the old master replicates the new one", || {
        new.replica_caught_up(old)
    });
    let mut on_old = old.client();
    let replica = info(&mut on_old);
    assert!(replica.is_whole_and_free(N), "{replica:?}");
    // The old connections close: nothing is kept alive anywhere.
    drop((a, b, w));
    for server in &servers {
        wait_until("no KEEPALIVE binding", || {
            server.stat("keepalive_holds") == 0
        });
        assert!(
            !server.log().contains("crashed by signal"),
            "{}",
            server.log()
        );
    }
    eprintln!("semaphore failover: {:?}", started.elapsed());
}
