//! Cluster mode: routing by the server (MOVED, CROSSSLOT), fencing token keys
//! in the lock's slot, shard-channel notifications, hand-off on a node, and
//! no module write into a slot the node gives away.

use crate::common;
use common::*;

fn slot(cluster: &Cluster, key: &str) -> i64 {
    q(&mut cluster.nodes[0].client(), &["CLUSTER", "KEYSLOT", key])
}

fn node_id(server: &Server) -> String {
    q(&mut server.client(), &["CLUSTER", "MYID"])
}

fn other_node<'a>(cluster: &'a Cluster, key: &str) -> &'a Server {
    let owner = cluster.node_for(key).port;
    cluster
        .nodes
        .iter()
        .find(|n| n.port != owner)
        .expect("another node")
}

/// The slot of `key` moving from the node serving it (`from`) to another
/// (`to`), both marked with CLUSTER SETSLOT IMPORTING / MIGRATING.
struct Migration<'a> {
    cluster: &'a Cluster,
    slot: String,
    from: &'a Server,
    to: &'a Server,
    to_id: String,
}

impl<'a> Migration<'a> {
    fn start(cluster: &'a Cluster, key: &str) -> Self {
        let slot = slot(cluster, key).to_string();
        let (from, to) = (cluster.node_for(key), other_node(cluster, key));
        let (from_id, to_id) = (node_id(from), node_id(to));
        let setslot = |node: &Server, state: &str, id: &str| {
            let _: () = q(
                &mut node.client(),
                &["CLUSTER", "SETSLOT", &slot, state, id],
            );
        };
        setslot(to, "IMPORTING", &from_id);
        setslot(from, "MIGRATING", &to_id);
        Migration {
            cluster,
            slot,
            from,
            to,
            to_id,
        }
    }

    /// MIGRATE of one key from `from` to `to`.
    fn migrate(&self, key: &str) {
        let port = self.to.port.to_string();
        let args = ["MIGRATE", "127.0.0.1", &port, key, "0", "5000"];
        let _: () = q(&mut self.from.client(), &args);
    }

    /// The slot now belongs to `to`, on both nodes; returns when every
    /// node agrees.
    fn finish(&self) {
        for node in [self.to, self.from] {
            let args = ["CLUSTER", "SETSLOT", &self.slot, "NODE", &self.to_id];
            let _: () = q(&mut node.client(), &args);
        }
        let slot: u16 = self.slot.parse().expect("slot number");
        assert_eq!(self.cluster.master_of_slot(slot).port, self.to.port);
    }
}

/// A pub/sub message or confirmation as its text parts.
fn texts(v: Value) -> Vec<String> {
    match v {
        Value::Array(items) | Value::Push { data: items, .. } => items.iter().map(text).collect(),
        other => panic!("expected a pub/sub array, got {other:?}"),
    }
}

#[test]
fn wrong_node_redirects_with_moved() {
    let cluster = Cluster::start(3);
    let key = "lock:moved";
    let slot = slot(&cluster, key);
    let right = cluster.node_for(key);
    let wrong = other_node(&cluster, key);
    for args in [
        &["LOCK.ACQUIRE", key, "o1"][..],
        &[
            "LOCK.ACQUIRE",
            key,
            "o1",
            "PX",
            "1000",
            "BLOCK",
            "0",
            "FENCE",
        ],
        &["LOCK.RELEASE", key, "o1"],
        &["LOCK.RACQUIRE", key, "o1", "BLOCK", "0"],
        &["LOCK.WACQUIRE", key, "o1"],
        &["LOCK.MACQUIRE", "1", key, "o1", "BLOCK", "0"],
        &["LOCK.MRELEASE", "1", key, "o1"],
        &["LOCK.RENEW", key, "o1"],
        &["LOCK.FORCERELEASE", key],
        &["LOCK.INFO", key],
    ] {
        let e = err(&mut wrong.client(), args);
        assert!(
            e.starts_with(&format!("MOVED {slot} 127.0.0.1:{}", right.port)),
            "{args:?} on the wrong node: {e}"
        );
    }
    assert_eq!(
        q::<i64>(&mut wrong.client(), &["DBSIZE"]),
        0,
        "nothing written on the wrong node"
    );
    let mut con = right.client();
    assert_eq!(q::<i64>(&mut con, &["LOCK.ACQUIRE", key, "o1"]), 1);
    assert_eq!(lock_field(&mut con, key, "owner").as_deref(), Some("o1"));
}

#[test]
fn transaction_over_two_slots_is_refused_with_crossslot() {
    let cluster = Cluster::start(3);
    let node = &cluster.nodes[0];
    // Two keys of different slots, both served by the same node, so the
    // refusal is about slots and not a redirect.
    let mut keys: Vec<(String, i64)> = Vec::new();
    for i in 0.. {
        let key = format!("lock:{i}");
        if cluster.node_for(&key).port == node.port {
            let s = slot(&cluster, &key);
            if keys.iter().all(|(_, other)| *other != s) {
                keys.push((key, s));
            }
        }
        if keys.len() == 2 {
            break;
        }
    }
    let (a, b) = (&keys[0].0, &keys[1].0);
    let mut con = node.client();
    let _: () = q(&mut con, &["MULTI"]);
    assert_eq!(
        raw(&mut con, &["LOCK.ACQUIRE", a, "o1"]).unwrap(),
        Value::SimpleString("QUEUED".into())
    );
    // Each command alone is fine when queued; EXEC sees both slots.
    assert_eq!(
        raw(&mut con, &["LOCK.ACQUIRE", b, "o1"]).unwrap(),
        Value::SimpleString("QUEUED".into())
    );
    let e = err(&mut con, &["EXEC"]);
    assert!(e.starts_with("CROSSSLOT"), "EXEC: {e}");
    assert_eq!(lock_info(&mut con, a), Vec::new());
    assert_eq!(lock_info(&mut con, b), Vec::new());
    // The transaction is gone: the connection is usable again.
    assert_eq!(q::<String>(&mut con, &["PING"]), "PONG");

    // A multi-lock over the two slots is refused before the module runs,
    // from their key spec; a read-write lock's acquire on a name whose lease
    // keys would land elsewhere is refused by the module.
    for args in [
        &["LOCK.MACQUIRE", "2", a, b, "o1"][..],
        &["LOCK.MRELEASE", "2", a, b, "o1"],
    ] {
        let e = err(&mut con, args);
        assert!(e.starts_with("CROSSSLOT"), "{args:?}: {e}");
    }
    let e = err(
        &mut cluster.node_for("{}x").client(),
        &["LOCK.RACQUIRE", "{}x", "o1"],
    );
    assert!(e.starts_with("CROSSSLOT read hold lease key"), "{e}");
    assert_eq!(lock_info(&mut con, a), Vec::new());

    // Keys sharing a hash tag live in one slot: the transaction runs.
    let (x, y) = ("{tag}:a", "{tag}:b");
    let node = cluster.node_for(x);
    let mut con = node.client();
    let before = token_floor(&mut con);
    let _: () = q(&mut con, &["MULTI"]);
    raw(&mut con, &["LOCK.ACQUIRE", x, "o1", "PX", "60000"]).unwrap();
    raw(&mut con, &["LOCK.ACQUIRE", y, "o1", "PX", "60000", "FENCE"]).unwrap();
    raw(&mut con, &["LOCK.RELEASE", x, "o1"]).unwrap();
    let exec = raw(&mut con, &["EXEC"]).unwrap();
    let after = token_floor(&mut con);
    let Value::Array(replies) = exec else {
        panic!("EXEC replied {exec:?}")
    };
    assert_eq!(replies.len(), 3, "{replies:?}");
    assert_eq!((&replies[0], &replies[2]), (&Value::Int(1), &Value::Int(0)));
    // y's first fencing token.
    let Value::Int(y_token) = replies[1] else {
        panic!("FENCE in EXEC replied {:?}", replies[1])
    };
    assert_token_between(y_token, before, after, 0, y);
    assert_eq!(lock_field(&mut con, y, "token"), Some(y_token.to_string()));
    assert_eq!(lock_info(&mut con, x), Vec::new());
    // A multi-lock over them runs on the node that serves them.
    let _: Value = q(&mut con, &["LOCK.RELEASE", y, "o1"]);
    let before = token_floor(&mut con);
    let got: Vec<i64> = q(&mut con, &["LOCK.MACQUIRE", "2", x, y, "o2", "FENCE"]);
    // x's first token; y's next one.
    assert_eq!(got.len(), 2, "{got:?}");
    assert_token_between(got[0], before, token_floor(&mut con), 0, x);
    assert!(got[1] > y_token, "{y}: token {} after {y_token}", got[1]);
    let got: Value = q(&mut con, &["LOCK.MRELEASE", "2", y, x, "o2"]);
    assert_eq!(got, Value::Array(vec![Value::Int(0), Value::Int(0)]));
}

#[test]
fn fencing_token_key_stays_in_the_lock_slot() {
    let cluster = Cluster::start(3);

    // `{}x` has an empty hash tag, so it and its token key
    // `redisson_lock_token:{}x` each hash as a whole: different slots.
    let bad = "{}x";
    let node = cluster.node_for(bad);
    let mut con = node.client();
    let e = err(&mut con, &["LOCK.ACQUIRE", bad, "o1", "FENCE"]);
    assert!(
        e.starts_with("CROSSSLOT fencing token key 'redisson_lock_token:{}x'"),
        "{e}"
    );
    assert_eq!(q::<i64>(&mut con, &["DBSIZE"]), 0, "errors change nothing");
    // Without FENCE the same name is an ordinary lock.
    assert_eq!(q::<i64>(&mut con, &["LOCK.ACQUIRE", bad, "o1"]), 1);

    let key = "{user}:lock";
    let token_key = "redisson_lock_token:{user}:lock";
    let s = slot(&cluster, key);
    assert_eq!(slot(&cluster, token_key), s);
    let node = cluster.node_for(key);
    let mut con = node.client();
    let before = token_floor(&mut con);
    let token: i64 = q(
        &mut con,
        &["LOCK.ACQUIRE", key, "o1", "PX", "60000", "FENCE"],
    );
    assert_token_between(token, before, token_floor(&mut con), 0, key);
    assert_eq!(q::<i64>(&mut con, &["EXISTS", token_key]), 1);
    assert_eq!(q::<i64>(&mut con, &["GET", token_key]), token);
    assert_eq!(
        q::<i64>(&mut con, &["CLUSTER", "COUNTKEYSINSLOT", &s.to_string()]),
        2
    );
    assert_eq!(lock_field(&mut con, key, "token"), Some(token.to_string()));
    for other in cluster.nodes.iter().filter(|n| n.port != node.port) {
        assert_eq!(q::<i64>(&mut other.client(), &["DBSIZE"]), 0);
    }
}

#[test]
fn release_to_zero_publishes_on_the_shard_channel() {
    let cluster = Cluster::start(3);
    let key = "orders";
    let channel = "redisson_lock__channel:{orders}";
    assert_eq!(slot(&cluster, channel), slot(&cluster, key));
    let node = cluster.node_for(key);
    let mut sub = node.client();
    send(&mut sub, &["SSUBSCRIBE", channel]);
    assert_eq!(texts(recv(&mut sub).unwrap()), ["ssubscribe", channel, "1"]);

    let mut con = node.client();
    assert_eq!(q::<i64>(&mut con, &["LOCK.ACQUIRE", key, "o1"]), 1);
    assert_eq!(q::<i64>(&mut con, &["LOCK.ACQUIRE", key, "o1"]), 2);
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", key, "o1"]), 1);
    // A marker after the partial release: nothing may arrive before it.
    let _: i64 = q(&mut con, &["SPUBLISH", channel, "marker"]);
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", key, "o1"]), 0);
    assert_eq!(
        texts(recv(&mut sub).unwrap()),
        ["smessage", channel, "marker"]
    );
    assert_eq!(texts(recv(&mut sub).unwrap()), ["smessage", channel, "0"]);

    // FORCERELEASE publishes too.
    assert_eq!(q::<i64>(&mut con, &["LOCK.ACQUIRE", key, "o2"]), 1);
    assert_eq!(q::<i64>(&mut con, &["LOCK.FORCERELEASE", key]), 1);
    assert_eq!(texts(recv(&mut sub).unwrap()), ["smessage", channel, "0"]);
}

#[test]
fn blocked_waiter_is_handed_the_lock_on_a_node() {
    let cluster = Cluster::start(3);
    let key = "jobs:42";
    let node = cluster.node_for(key);
    let mut con = node.client();
    assert_eq!(
        q::<i64>(&mut con, &["LOCK.ACQUIRE", key, "o1", "PX", "60000"]),
        1
    );
    let mut w1 = queue_waiter(node, &mut con, key, "o2", &["PX", "60000", "BLOCK", "0"], 1);
    let mut w2 = queue_waiter(node, &mut con, key, "o3", &["PX", "60000", "BLOCK", "0"], 2);
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", key, "o1"]), 0);
    assert_eq!(recv(&mut w1).unwrap(), Value::Int(1));
    let info = lock_info(&mut con, key);
    assert_eq!(field(&info, "owner").as_deref(), Some("o2"));
    assert_eq!(field(&info, "waiters").as_deref(), Some("1"));
    // A DEL hands it on through the module's timer.
    assert_eq!(q::<i64>(&mut con, &["DEL", key]), 1);
    assert_eq!(recv(&mut w2).unwrap(), Value::Int(1));
    assert_eq!(lock_field(&mut con, key, "owner").as_deref(), Some("o3"));
    assert_eq!(node.stat("handed_off"), 2);
}

#[test]
fn waiter_of_a_migrated_slot_gets_tryagain_and_nothing_is_rewritten() {
    let cluster = Cluster::start(3);
    let key = "migrating-lock";
    let a = cluster.node_for(key);
    let mut con = a.client();
    assert_eq!(
        q::<i64>(&mut con, &["LOCK.ACQUIRE", key, "o1", "PX", "60000"]),
        1
    );
    let mut w = queue_waiter(a, &mut con, key, "o2", &["PX", "60000", "BLOCK", "0"], 1);

    let migration = Migration::start(&cluster, key);
    let (s, b) = (&migration.slot, migration.to);
    migration.migrate(key);
    // The key left a; the waiter on a cannot be served there any more.
    let e = recv_error(&mut w);
    assert!(e.starts_with("TRYAGAIN"), "waiter on the old node: {e}");

    migration.finish();
    assert_eq!(
        q::<i64>(&mut con, &["CLUSTER", "COUNTKEYSINSLOT", s]),
        0,
        "a did not write the lock back"
    );
    assert_eq!(a.stat("waiters"), 0);
    assert_eq!(a.stat("handed_off"), 0);
    let info = lock_info(&mut b.client(), key);
    assert_eq!(field(&info, "owner").as_deref(), Some("o1"));
    assert_eq!(field(&info, "holds").as_deref(), Some("1"));
    let ttl: i64 = field(&info, "ttl").expect("ttl").parse().unwrap();
    assert!(ttl > 0 && ttl <= 60000, "lease kept: {ttl}");
    let e = err(&mut con, &["LOCK.ACQUIRE", key, "o2"]);
    assert!(
        e.starts_with(&format!("MOVED {s} 127.0.0.1:{}", b.port)),
        "{e}"
    );
    // The owner releases it on its new node.
    assert_eq!(q::<i64>(&mut b.client(), &["LOCK.RELEASE", key, "o1"]), 0);
    assert!(!a.log().contains("internal error caught"), "{}", a.log());
}

#[test]
fn fence_while_the_slot_migrates_and_the_token_is_elsewhere_is_tryagain() {
    // The lock key is still here (so the command is served here), the token
    // key is not: its value is unknown here (it may be ahead of the clock)
    // and must not restart from the clock.
    let cluster = Cluster::start(3);
    let key = "fenced-migrating";
    let mut con = cluster.node_for(key).client();
    let first: i64 = q(&mut con, &["LOCK.ACQUIRE", key, "o1", "FENCE"]);
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", key, "o1"]), 0);
    let second: i64 = q(&mut con, &["LOCK.ACQUIRE", key, "o1", "FENCE"]);
    assert!(second > first, "token {second} after {first}");

    let migration = Migration::start(&cluster, key);
    let s = &migration.slot;
    migration.migrate(&format!("redisson_lock_token:{{{key}}}"));
    let e = err(&mut con, &["LOCK.ACQUIRE", key, "o1", "FENCE"]);
    assert!(e.starts_with("TRYAGAIN"), "{e}");
    assert_eq!(lock_field(&mut con, key, "holds").as_deref(), Some("1"));
    assert_eq!(
        q::<i64>(&mut con, &["CLUSTER", "COUNTKEYSINSLOT", s]),
        1,
        "only the lock: no new counter on the old node"
    );
    // Without FENCE the lock itself still works here.
    assert_eq!(q::<i64>(&mut con, &["LOCK.ACQUIRE", key, "o1"]), 2);
}

/// A semaphore on a cluster: its commands go to the node of its key (a
/// wrong node answers MOVED, before anything runs), its permit set lives in
/// the same slot (also for a name with its own hash tag), a name whose
/// permit set would land elsewhere is refused, a waiter is served on the
/// node, and Redisson's waiters hear the count on the shard channel.
#[test]
fn a_semaphore_lives_in_its_keys_slot_and_notifies_on_the_shard_channel() {
    let cluster = Cluster::start(3);
    for key in ["pool", "a{tag}b"] {
        let permits = if key.contains('{') {
            format!("{key}:timeout")
        } else {
            format!("{{{key}}}:timeout")
        };
        assert_eq!(slot(&cluster, &permits), slot(&cluster, key), "{key}");
        let moved = err(
            &mut other_node(&cluster, key).client(),
            &["SEM.INIT", key, "2"],
        );
        assert!(moved.starts_with("MOVED "), "{moved}");

        let node = cluster.node_for(key);
        let mut con = node.client();
        let channel = if key.contains('{') {
            format!("redisson_sc:{key}")
        } else {
            format!("redisson_sc:{{{key}}}")
        };
        assert_eq!(slot(&cluster, &channel), slot(&cluster, key));
        let mut sub = node.client();
        send(&mut sub, &["SSUBSCRIBE", &channel]);
        assert_eq!(
            texts(recv(&mut sub).unwrap()),
            ["ssubscribe", channel.as_str(), "1"]
        );
        assert_eq!(q::<i64>(&mut con, &["SEM.INIT", key, "2"]), 1);
        assert_eq!(
            texts(recv(&mut sub).unwrap()),
            ["smessage", channel.as_str(), "2"]
        );
        assert_eq!(
            q::<i64>(
                &mut con,
                &["SEM.ACQUIRE", key, "a", "PERMITS", "2", "PX", "60000"]
            ),
            2
        );
        assert!(exists(&mut con, &permits));
        let mut waiter = node.client();
        send(
            &mut waiter,
            &["SEM.ACQUIRE", key, "w", "PX", "60000", "BLOCK", "0"],
        );
        wait_until("the waiter queued", || {
            q::<Vec<Value>>(&mut con, &["LOCK.WAITERS", key]).len() == 1
        });
        assert_eq!(
            q::<i64>(&mut con, &["SEM.RELEASE", key, "a", "PERMITS", "1"]),
            1
        );
        assert_eq!(recv(&mut waiter).unwrap(), Value::Int(1));
        assert_eq!(q::<i64>(&mut con, &["SEM.RELEASE", key, "a"]), 0);
        assert_eq!(
            texts(recv(&mut sub).unwrap()),
            ["smessage", channel.as_str(), "1"]
        );
        assert_eq!(q::<i64>(&mut con, &["SEM.RELEASE", key, "w"]), 0);
        assert_eq!(
            texts(recv(&mut sub).unwrap()),
            ["smessage", channel.as_str(), "2"]
        );
        assert!(!exists(&mut con, &permits));
    }
    let key = "{}x";
    let refused = err(&mut cluster.node_for(key).client(), &["SEM.INIT", key, "1"]);
    assert!(refused.starts_with("CROSSSLOT "), "{refused}");
}
