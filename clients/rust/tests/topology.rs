//! A Sentinel failover (the session re-attaches its holds on the new master) and a
//! 3-master cluster (a session connection per node holding a key, redirections, waits,
//! losses, re-attach), on real servers.

#[path = "../../../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::sentinel::{Sentinels, MASTER_NAME};
use common::{lock_info, q, raw, Cluster, Config, Server, Value};
use redis_lock_client::{Error, Options, Reason, Session, Target, Wait};

fn owner_of(con: &mut redis::Connection, key: &str) -> Option<String> {
    common::field(&lock_info(con, key), "owner")
}

fn bound_client(con: &mut redis::Connection, key: &str) -> Option<String> {
    common::field(&lock_info(con, key), "keepalive_client")
}

async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + common::PATIENCE;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn sessions_on(server: &Server, token: &str) -> usize {
    let list: String = q(&mut server.client(), &["CLIENT", "LIST"]);
    list.lines()
        .filter(|l| l.contains(&format!("name=lock-session:{token} ")))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_failover_reattaches_holds_on_the_new_master() {
    let master = Server::start();
    let replica = master.start_replica(Config::default());
    let sentinels = Sentinels::start(3, &master, 1);
    let urls: Vec<String> = sentinels
        .addrs()
        .iter()
        .map(|a| format!("redis://{a}/"))
        .collect();
    // Covers the failover: the last renewal the replica saw was up to half a lease before
    // the kill; the master is seen down 2 s after it, a replica promoted after an election
    // (another one 4 s later if the first fails).
    let lease = Duration::from_secs(20);
    let session = Session::open_with(
        Target::sentinel(urls, MASTER_NAME).unwrap(),
        Options::default().lease(lease),
    )
    .await
    .unwrap();
    let hold = session.lock("job").acquire(Wait::No).await.unwrap();
    let mut con = master.client();
    assert_eq!(owner_of(&mut con, "job").as_deref(), Some(hold.owner()));
    common::wait_until("the replica caught up", || {
        master.replica_caught_up(&replica)
    });

    let mut master = master;
    master.kill();
    let new = sentinels.wait_for_new_master(master.socket_addr(), common::PATIENCE);
    assert_eq!(new, replica.socket_addr());
    let mut con = replica.client();
    eventually("the hold re-attached on the new master", || {
        assert!(!hold.is_lost(), "lost: {:?}", hold.lost().borrow());
        bound_client(&mut con, "job").is_some()
    })
    .await;
    assert_eq!(owner_of(&mut con, "job").as_deref(), Some(hold.owner()));
    // Renewed there by the server: its deadline moves on (half a lease after the re-attach).
    let deadline = |con: &mut redis::Connection| common::pexpiretime(con, "job");
    let first = deadline(&mut con);
    eventually("a renewal on the new master", || deadline(&mut con) > first).await;
    assert_eq!(owner_of(&mut con, "job").as_deref(), Some(hold.owner()));
    assert!(!hold.is_lost());
    // New acquires and the release go to the new master.
    let other = session
        .lock("job2")
        .acquire(Wait::For(Duration::from_secs(5)))
        .await;
    let other = match other {
        Ok(h) => h,
        // The first command on the old master's connection tells it is gone.
        Err(Error::Unavailable(_)) => session.lock("job2").acquire(Wait::No).await.unwrap(),
        Err(e) => panic!("{e}"),
    };
    assert_eq!(owner_of(&mut con, "job2").as_deref(), Some(other.owner()));
    hold.release().await.unwrap();
    other.release().await.unwrap();
    assert_eq!(owner_of(&mut con, "job"), None);
}

/// Keys named so that each lands on another master of a 3-master cluster.
fn keys_on_each_node(cluster: &Cluster) -> Vec<String> {
    let mut keys = Vec::new();
    for shard in 0..3 {
        let key = (0..)
            .map(|i| format!("k{i}"))
            .find(|k| {
                cluster.shard_of_slot(redis_lock_client::proto::key_slot(k.as_bytes())) == shard
            })
            .unwrap();
        keys.push(key);
    }
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_of_three() {
    let cluster = Cluster::start(3);
    // A lease below the nodes' floor: refused when the session opens.
    let floor = cluster.nodes[0].stat("keepalive_min_lease_ms") as u64;
    let short = Session::open_with(
        Target::cluster(vec![cluster.nodes[0].url()]).unwrap(),
        Options::default().lease(Duration::from_millis(floor - 1)),
    )
    .await;
    assert!(
        matches!(short, Err(Error::LeaseTooShort { min_lease_ms, .. }) if min_lease_ms == floor),
        "{:?}",
        short.err()
    );
    let lease = Duration::from_millis(1500);
    let session = Session::open_with(
        Target::cluster(vec![cluster.nodes[0].url()]).unwrap(),
        Options::default().lease(lease),
    )
    .await
    .unwrap();
    let keys = keys_on_each_node(&cluster);
    let mut holds = Vec::new();
    for key in &keys {
        holds.push(session.lock(key.clone()).acquire(Wait::No).await.unwrap());
    }
    // One session connection per node holding a key, each hold bound to its node's.
    for (i, key) in keys.iter().enumerate() {
        let node = &cluster.nodes[i];
        assert_eq!(sessions_on(node, session.token()), 1, "node {}", node.port);
        let mut con = node.client();
        assert_eq!(owner_of(&mut con, key).as_deref(), Some(holds[i].owner()));
        assert!(bound_client(&mut con, key).is_some());
    }
    // Waiting on a node: served when released.
    let waiter_session = Session::open(Target::cluster(vec![cluster.nodes[1].url()]).unwrap())
        .await
        .unwrap();
    let lock = waiter_session.lock(keys[2].clone());
    let waiting =
        tokio::spawn(async move { lock.acquire(Wait::For(Duration::from_secs(10))).await });
    let mut con = cluster.nodes[2].client();
    eventually("queued on its node", || {
        matches!(raw(&mut con, &["LOCK.WAITERS", &keys[2]]), Ok(Value::Array(v)) if v.len() == 1)
    })
    .await;
    holds.pop().unwrap().release().await.unwrap();
    let served = waiting.await.unwrap().unwrap();
    assert_eq!(
        owner_of(&mut con, &keys[2]).as_deref(),
        Some(served.owner())
    );
    served.release().await.unwrap();
    // A multi-lock needs one slot: a hash tag.
    let m = session
        .multi_lock(["{order:7}:a", "{order:7}:b"])
        .acquire(Wait::No)
        .await
        .unwrap();
    assert_eq!(m.tokens().len(), 2);
    let r = session.multi_lock(["a-1", "b-2"]).acquire(Wait::No).await;
    assert!(
        matches!(r, Err(Error::Other(ref e)) if e.code() == Some("CROSSSLOT")),
        "{r:?}"
    );
    m.release().await.unwrap();
    // Loss from one node; re-attach on another after its session connection is killed.
    let mut con0 = cluster.nodes[0].client();
    let mut lost = holds[0].lost();
    let _: i64 = q(&mut con0, &["LOCK.FORCERELEASE", &keys[0]]);
    let got = tokio::time::timeout(common::PATIENCE, lost.wait_for(Option::is_some))
        .await
        .unwrap()
        .unwrap()
        .clone()
        .unwrap();
    assert_eq!(got.reason, Reason::Forced);
    let mut con1 = cluster.nodes[1].client();
    let before = bound_client(&mut con1, &keys[1]).unwrap();
    let _: i64 = q(&mut con1, &["CLIENT", "KILL", "ID", &before]);
    eventually("re-attached on its node", || {
        bound_client(&mut con1, &keys[1]).is_some_and(|id| id != before)
    })
    .await;
    tokio::time::sleep(lease * 2).await;
    assert_eq!(
        owner_of(&mut con1, &keys[1]).as_deref(),
        Some(holds[1].owner())
    );
    assert!(!holds[1].is_lost());
    session.close().await;
    assert_eq!(owner_of(&mut con1, &keys[1]), None);
}
