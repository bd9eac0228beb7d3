//! An election across a real Sentinel failover (`SENTINEL FAILOVER`: the
//! sentinel promotes the replica and names it the master).
//!
//! The leadership taken on the old master (its lock and its leader record,
//! with their absolute deadlines) is on the replica too, so the new master
//! answers ELECT.LEADER with the same leader, term and value; the leader's
//! session on the old master hears `demoted` when that server becomes a
//! replica; a candidate waiting there is answered `UNBLOCKED`; an observer
//! on the new master is answered when the leadership changes hands there
//! (Sentinel closes the client connections of the replica it promotes, so
//! observers there call again); the leader re-attaches
//! on the new master with ELECT.CAMPAIGN (same candidate: the same term, no
//! second hold), resigns, and the next candidate leads with a higher term.
//! Nothing is left behind on either server.
//!
//! As in tests/semaphore_failover.rs, the test makes the old master a
//! replica itself (`REPLICAOF`) at once instead of waiting about 10 s for
//! Sentinel to do it.

use crate::common;

use common::sentinel::Sentinels;
use common::*;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use redis::{Connection, Value};

const KEY: &str = "scheduler";
const RECORD: &str = "{scheduler}:leader";

/// ELECT.LEADER as a map of field to text (RESP2's flat array); empty when
/// nobody leads.
fn leader(con: &mut Connection) -> HashMap<String, String> {
    match q::<Value>(con, &["ELECT.LEADER", KEY]) {
        Value::Nil => HashMap::new(),
        Value::Array(items) => items
            .chunks(2)
            .map(|pair| (text(&pair[0]), text(&pair[1])))
            .collect(),
        other => panic!("ELECT.LEADER: {other:?}"),
    }
}

#[test]
fn a_leadership_survives_a_sentinel_failover_and_is_reattached() {
    let started = Instant::now();
    let servers = {
        let first = Server::start();
        let second = first.start_replica(Config::default());
        [first, second]
    };
    let (old, new) = (&servers[0], &servers[1]);
    let sentinels = Sentinels::start(1, old, 1);

    // a leads on the old master with its session there; b waits.
    let mut s_old = Session::open(old, "sa");
    let mut a = old.client();
    let t1: i64 = q(
        &mut a,
        &[
            "ELECT.CAMPAIGN",
            KEY,
            "a",
            "VALUE",
            "10.0.0.5:80",
            "PX",
            "6000",
            "SESSION",
            "sa",
        ],
    );
    let mut b = old.client();
    send(
        &mut b,
        &[
            "ELECT.CAMPAIGN",
            KEY,
            "b",
            "PX",
            "6000",
            "KEEPALIVE",
            "BLOCK",
            "20000",
        ],
    );
    let mut on_old = old.client();
    wait_until("b queued on the old master", || old.stat("waiters") == 1);

    // The replica has the lock and the record, with the master's deadlines,
    // and answers ELECT.LEADER as its master does.
    let mut on_new = new.client();
    wait_until("the replica has the leader record", || {
        old.replica_caught_up(new)
            && q::<Option<i64>>(&mut on_new, &["PEXPIRETIME", RECORD])
                == q::<Option<i64>>(&mut on_old, &["PEXPIRETIME", RECORD])
    });
    let on_replica = leader(&mut on_new);
    assert_eq!(on_replica["candidate"], "a");
    assert_eq!(on_replica["term"], t1.to_string());
    assert_eq!(on_replica["value"], "10.0.0.5:80");
    sentinels.force_failover(old, new);

    // The old master is a replica: a's session hears it, b's wait ends.
    assert_eq!(s_old.next_message(), "demoted");
    let unblocked = recv_error(&mut b);
    assert!(unblocked.starts_with("UNBLOCKED"), "b: {unblocked}");

    // The new master has a's leadership, kept alive by nobody yet.
    let mut on_new = new.client();
    let kept = leader(&mut on_new);
    assert_eq!(kept["candidate"], "a");
    assert_eq!(kept["term"], t1.to_string());
    assert_eq!(kept["value"], "10.0.0.5:80");

    // a re-attaches there: the same term, one hold, its session now there.
    let mut s_new = Session::open(new, "sa2");
    let mut a2 = new.client();
    let again = q::<i64>(
        &mut a2,
        &["ELECT.CAMPAIGN", KEY, "a", "PX", "2000", "SESSION", "sa2"],
    );
    assert_eq!(again, t1);
    assert_eq!(q::<String>(&mut on_new, &["HGET", KEY, "a"]), "1");
    assert_eq!(new.stat("keepalive_holds"), 1);

    // An observer that saw a (Sentinel closed the promoted replica's
    // client connections, observers included: they call again).
    let mut observer = new.client();
    send(
        &mut observer,
        &[
            "ELECT.OBSERVE",
            KEY,
            "TERM",
            &t1.to_string(),
            "BLOCK",
            "30000",
        ],
    );
    wait_until("the observer blocked on the new master", || {
        new.stat("election_observers") == 1
    });

    // b campaigns again on the new master and leads when a resigns, with
    // a higher term; the observer hears it.
    let mut b2 = new.client();
    send(
        &mut b2,
        &[
            "ELECT.CAMPAIGN",
            KEY,
            "b",
            "PX",
            "2000",
            "KEEPALIVE",
            "BLOCK",
            "20000",
        ],
    );
    wait_until("b queued on the new master", || new.stat("waiters") == 1);
    assert_eq!(q::<i64>(&mut a2, &["ELECT.RESIGN", KEY, "a"]), 1);
    let t2 = int_reply(recv(&mut b2), "b's term");
    assert!(t2 > t1, "{t2} after {t1}");
    let seen: HashMap<String, String> = match recv(&mut observer).expect("the observer's answer") {
        Value::Array(items) => items
            .chunks(2)
            .map(|pair| (text(&pair[0]), text(&pair[1])))
            .collect(),
        other => panic!("OBSERVE: {other:?}"),
    };
    assert_eq!(seen["candidate"], "b");
    assert_eq!(seen["term"], t2.to_string());
    // a resigned: its session on the new master hears nothing of a loss.
    s_new
        .con
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    assert!(recv(&mut s_new.con).is_err(), "a's session heard a loss");

    // b resigns: nothing left of the election on either server.
    assert_eq!(q::<i64>(&mut b2, &["ELECT.RESIGN", KEY, "b"]), 1);
    wait_until("the old master replicates the new one", || {
        new.replica_caught_up(old)
    });
    let mut on_old = old.client();
    for con in [&mut on_new, &mut on_old] {
        assert!(leader(con).is_empty());
        assert_eq!(q::<i64>(con, &["EXISTS", KEY, RECORD]), 0);
    }
    drop((a, b, s_old));
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
    eprintln!("election failover: {:?}", started.elapsed());
}
