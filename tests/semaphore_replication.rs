//! Semaphores and latches under replication and persistence: everything
//! the module does to them (grants, releases, permits given back when a
//! lease ends, KEEPALIVE renewals, countdowns) reaches replicas, with or
//! without the module, and the AOF as native writes; a replica never
//! changes them by itself.

use crate::common;
use crate::common::redisson_sem;

use common::dataset::{aof_matches, replica_matches};
use common::*;
use redisson_sem::*;

fn digest(server: &Server) -> String {
    q(&mut server.client(), &["DEBUG", "DIGEST"])
}

/// Waits until `n` replicas acknowledged everything the master wrote, from
/// any client or timer (a PUBLISH first brings this connection's offset to
/// the master's, see tests/replication.rs).
fn sync_replicas(master: &Server, n: i64) {
    let mut con = master.client();
    let _: i64 = q(&mut con, &["PUBLISH", "test-sync-marker", "x"]);
    let acked: i64 = q(&mut con, &["WAIT", &n.to_string(), "5000"]);
    assert_eq!(acked, n, "replicas acknowledging the master's writes");
}

/// DUMP of the semaphore's two keys (nil for a missing one).
fn dumps(server: &Server, s: &RSem) -> (Value, Value) {
    let mut con = server.client();
    (
        q(&mut con, &["DUMP", &s.name]),
        q(&mut con, &["DUMP", &s.timeout]),
    )
}

/// The lease end of the permit `member` (`None`: not held).
fn lease_end(con: &mut Connection, s: &RSem, member: &str) -> Option<i64> {
    let score: Option<f64> = q(con, &["ZSCORE", &s.timeout, member]);
    score.map(|score| score as i64)
}

/// Lines that show the module or the server went wrong.
fn assert_clean_log(server: &Server) {
    let log = server.log();
    for bad in ["internal error caught", "ASSERTION", "crashed", "panicked"] {
        assert!(
            !log.contains(bad),
            "server {} log contains {bad:?}:\n{log}",
            server.port
        );
    }
}

#[test]
fn semaphore_and_latch_agree_on_replicas_and_after_an_aof_reload() {
    let master = Config::default().aof().start();
    let with_module = master.start_replica(Config::default());
    let without_module = master.start_replica(Config::default().without_module());
    let mut con = master.client();
    let s = RSem::new("s");
    let id = permit_ids(&mut Rng(31), 1).remove(0);

    assert_eq!(q::<i64>(&mut con, &["SEM.INIT", "s", "5"]), 1);
    assert_eq!(
        q::<i64>(
            &mut con,
            &["SEM.ACQUIRE", "s", "a", "PERMITS", "2", "PX", "60000"]
        ),
        2
    );
    let mut keepalive = master.client();
    assert_eq!(
        q::<i64>(
            &mut keepalive,
            &["SEM.ACQUIRE", "s", "b", "PX", "800", "KEEPALIVE"]
        ),
        1
    );
    let b_first_end = lease_end(&mut con, &s, "b:1").expect("b holds a permit");
    let now = server_ms(&mut con);
    s.try_acquire(&mut con, std::slice::from_ref(&id), now + 60000, now)
        .expect("Redisson takes a permit");
    assert_eq!(
        q::<i64>(&mut con, &["SEM.ACQUIRE", "s", "c", "PX", "60000"]),
        1
    );
    assert_eq!(counter(&mut con, &s), Some(0));

    // c's lease, shortened once d waits, ends: the module gives its permit
    // to d.
    let mut d = master.client();
    send(
        &mut d,
        &["SEM.ACQUIRE", "s", "d", "PX", "60000", "BLOCK", "0"],
    );
    wait_for_sem_waiters(&mut con, "s", 1);
    assert_eq!(q::<i64>(&mut con, &["SEM.RENEW", "s", "c", "PX", "150"]), 1);
    assert_eq!(recv(&mut d).unwrap(), Value::Int(1));
    let e = err(&mut con, &["SEM.RELEASE", "s", "c"]);
    assert!(e.starts_with("NOTOWNER"), "c's permit went to d: {e}");
    // Releases: e, waiting for 2, is served by the second.
    let mut e = master.client();
    send(
        &mut e,
        &[
            "SEM.ACQUIRE",
            "s",
            "e",
            "PERMITS",
            "2",
            "PX",
            "60000",
            "BLOCK",
            "0",
        ],
    );
    wait_for_sem_waiters(&mut con, "s", 1);
    assert_eq!(
        q::<i64>(&mut con, &["SEM.RELEASE", "s", "a", "PERMITS", "1"]),
        1
    );
    assert_eq!(sem_info(&mut con, "s").unwrap().waiters, 1);
    assert_eq!(q::<i64>(&mut con, &["SEM.RELEASE", "s", "a"]), 0);
    assert_eq!(recv(&mut e).unwrap(), Value::Int(2));

    // The server renews b's lease (at half of it) while its connection
    // lives.
    wait_until("b's KEEPALIVE lease renewed", || {
        lease_end(&mut con, &s, "b:1").expect("b holds a permit") > b_first_end
    });
    // The renewal is a write the replicas get (in time: a replica fed a
    // diskless full sync gets the stream once it acknowledged the load).
    for replica in [&with_module, &without_module] {
        let mut rcon = replica.client();
        wait_until("b's renewed lease on the replica", || {
            lease_end(&mut rcon, &s, "b:1").is_some_and(|end| end > b_first_end)
        });
    }
    assert_eq!(
        q::<i64>(&mut con, &["SEM.RENEW", "s", "d", "PX", "90000"]),
        1
    );
    let now = server_ms(&mut con);
    assert_eq!(s.update_lease_time(&mut con, &id, now + 120000, now), 1);
    assert_eq!(q::<i64>(&mut con, &["SEM.GIVE", "s"]), 1);
    assert_eq!(q::<i64>(&mut con, &["SEM.TAKE", "s"]), 1);
    assert_eq!(q::<i64>(&mut con, &["SEM.ADD", "s", "2"]), 2);
    // b lets go (no renewal may run while the copies are compared).
    assert_eq!(q::<i64>(&mut keepalive, &["SEM.RELEASE", "s", "b"]), 0);

    // Latches: counted down by the module and by Redisson.
    assert_eq!(q::<i64>(&mut con, &["LATCH.INIT", "l", "3"]), 1);
    let mut lw = master.client();
    send(&mut lw, &["LATCH.AWAIT", "l", "BLOCK", "0"]);
    wait_until("a latch waiter", || {
        latch_field(&mut con, "l", "waiters") == Some(1)
    });
    assert_eq!(q::<i64>(&mut con, &["LATCH.COUNTDOWN", "l"]), 2);
    latch_count_down(&mut con, "l");
    assert_eq!(q::<i64>(&mut con, &["LATCH.COUNTDOWN", "l"]), 0);
    assert_eq!(recv(&mut lw).unwrap(), Value::Int(0));
    assert_eq!(
        q::<i64>(&mut con, &["LATCH.INIT", "l2", "5", "PX", "600000"]),
        1
    );
    assert_eq!(q::<i64>(&mut con, &["LATCH.COUNTDOWN", "l2", "2"]), 3);
    assert_eq!(latch_set_count(&mut con, "l3", 2), 1);
    assert_eq!(q::<i64>(&mut con, &["LATCH.COUNTDOWN", "l3"]), 1);

    let mut want_held = vec![(id.clone(), 1), (b"d".to_vec(), 1), (b"e".to_vec(), 2)];
    want_held.sort();
    let info = sem_info(&mut con, "s").expect("SEM.INFO");
    assert_eq!(info.held(), want_held);
    assert_eq!((info.permits, info.available, info.waiters), (7, 3, 0));

    for replica in [&with_module, &without_module] {
        replica_matches(&master, replica)
            .unwrap_or_else(|diff| panic!("replica {}:\n{diff}", replica.port));
        assert_eq!(digest(replica), digest(&master), "DEBUG DIGEST");
        let mut rcon = replica.client();
        assert_eq!(counter(&mut rcon, &s), Some(3));
        assert_eq!(
            timeout_set(&mut rcon, &s),
            timeout_set(&mut con, &s),
            "the timeout set, scores included"
        );
        assert_eq!(
            q::<Option<i64>>(&mut rcon, &["GET", "l2"]),
            Some(3),
            "l2 on {}",
            replica.port
        );
        assert_eq!(pexpiretime(&mut rcon, "l2"), pexpiretime(&mut con, "l2"));
        for key in ["l", "l3"] {
            assert_eq!(
                q::<Option<i64>>(&mut rcon, &["GET", key]),
                q::<Option<i64>>(&mut con, &["GET", key]),
                "{key}"
            );
        }
    }
    // The module on a replica reads them, and refuses to write or wait.
    let mut rcon = with_module.client();
    let info = sem_info(&mut rcon, "s").expect("SEM.INFO on the replica");
    assert_eq!(info.held(), want_held);
    assert_eq!((info.permits, info.available, info.waiters), (7, 3, 0));
    assert_eq!(latch_field(&mut rcon, "l2", "count"), Some(3));
    assert_eq!(raw(&mut rcon, &["LATCH.AWAIT", "l2"]).unwrap(), Value::Nil);
    assert_eq!(
        err_code(&mut rcon, &["LATCH.AWAIT", "l2", "BLOCK", "0"]),
        "READONLY"
    );
    assert_eq!(
        err_code(&mut rcon, &["SEM.ACQUIRE", "s", "x", "BLOCK", "0"]),
        "READONLY"
    );

    // An RDB save and load (DEBUG RELOAD) gives the same back.
    let before = digest(&master);
    let _: () = q(&mut master.client(), &["DEBUG", "RELOAD"]);
    assert_eq!(digest(&master), before, "DEBUG RELOAD");
    assert_eq!(counter(&mut master.client(), &s), Some(3));

    // The AOF gives the same back, and it still works.
    aof_matches(&master).unwrap_or_else(|diff| panic!("AOF reload:\n{diff}"));
    let mut con = master.client();
    let info = sem_info(&mut con, "s").expect("SEM.INFO after the reload");
    assert_eq!(info.held(), want_held);
    assert_eq!((info.permits, info.available), (7, 3));
    assert_eq!(q::<i64>(&mut con, &["SEM.RELEASE", "s", "e"]), 0);
    assert_eq!(counter(&mut con, &s), Some(5));
    assert_eq!(q::<i64>(&mut con, &["LATCH.COUNTDOWN", "l2", "3"]), 0);
    assert!(!exists(&mut con, "l2"));
    for server in [&master, &with_module] {
        assert_clean_log(server);
    }
}

#[test]
fn replica_keeps_expired_permits_until_the_master_acts() {
    let master = Config::default().start();
    let replica = master.start_replica(Config::default());
    let mut con = master.client();
    let s = RSem::new("s");
    let id = permit_ids(&mut Rng(32), 1).remove(0);

    assert_eq!(q::<i64>(&mut con, &["SEM.INIT", "s", "3"]), 1);
    assert_eq!(
        q::<i64>(
            &mut con,
            &["SEM.ACQUIRE", "s", "a", "PERMITS", "2", "PX", "200"]
        ),
        2
    );
    let now = server_ms(&mut con);
    s.try_acquire(&mut con, std::slice::from_ref(&id), now + 200, now)
        .expect("Redisson takes the third permit");
    let end = timeout_set(&mut con, &s)
        .iter()
        .map(|(_, score)| *score)
        .max()
        .expect("permits held");
    sync_replicas(&master, 1);
    let stored = dumps(&master, &s);
    assert_eq!(dumps(&replica, &s), stored);

    // Every lease ends with nobody waiting and nobody acting on the master:
    // both keep the permits as the master wrote them; SEM.INFO, on either,
    // counts them as available without writing anything.
    let mut rcon = replica.client();
    wait_until("the leases over, past any timer due then", || {
        server_ms(&mut rcon) > end + 100
    });
    for server in [&replica, &master] {
        let info = sem_info(&mut server.client(), "s").expect("SEM.INFO");
        assert_eq!(
            (info.permits, info.available, info.waiters),
            (3, 3, 0),
            "SEM.INFO on {}",
            server.port
        );
        assert_eq!(info.holders, [], "SEM.INFO on {}", server.port);
    }
    assert_eq!(dumps(&replica, &s), stored, "the replica's copy");
    assert_eq!(dumps(&master, &s), stored, "the master's copy");
    sync_replicas(&master, 1);
    assert_eq!(dumps(&replica, &s), stored, "the replica's copy");

    // The master acts: the replica follows.
    assert_eq!(
        q::<i64>(&mut con, &["SEM.ACQUIRE", "s", "b", "PX", "60000"]),
        1
    );
    assert_eq!(counter(&mut con, &s), Some(2));
    assert_eq!(
        timeout_set(&mut con, &s)
            .into_iter()
            .map(|(m, _)| m)
            .collect::<Vec<_>>(),
        [b"b:1".to_vec()]
    );
    sync_replicas(&master, 1);
    assert_eq!(dumps(&replica, &s), dumps(&master, &s));
    assert_eq!(digest(&replica), digest(&master));
    assert_clean_log(&replica);
}
