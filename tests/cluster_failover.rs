//! A Redis Cluster of 3 masters and 3 replicas, driven through a
//! cluster-aware client (tests/common/cluster_client.rs): lock commands on
//! keys of every shard with redirects followed by the client (MOVED, ASK),
//! CROSSSLOT for transactions and scripts over two slots, and a coordinated
//! manual failover (`CLUSTER FAILOVER`) of every shard while clients keep
//! locking: waiters of the old master are answered `UNBLOCKED ...`, queue
//! again on the new master and are served there; locks, leases and fencing
//! tokens carry over, and no two owners ever hold one lock at once.

use crate::common;
use common::cluster_client::{key_slot, CallError, ClusterClient};
use common::*;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

/// The first `n` names `prefix<i>` whose slot is in the started range of
/// master `shard`.
fn keys_on_shard(cluster: &Cluster, prefix: &str, shard: usize, n: usize) -> Vec<String> {
    (0..)
        .map(|i| format!("{prefix}{i}"))
        .filter(|k| cluster.shard_of_slot(key_slot(k.as_bytes())) == shard)
        .take(n)
        .collect()
}

fn slot_of(key: &str) -> u16 {
    key_slot(key.as_bytes())
}

/// The integer reply of a call that must succeed with one.
fn int(what: &str, r: Result<Value, CallError>) -> i64 {
    match r {
        Ok(Value::Int(n)) => n,
        other => panic!("{what}: expected an integer, got {other:?}"),
    }
}

/// The fencing token clock floor now (see [`token_floor`]); every node of
/// the test cluster runs on this machine's clock.
fn floor(cluster: &Cluster) -> i64 {
    token_floor(&mut cluster.nodes[0].client())
}

/// A counter ahead of any clock floor: FENCE goes on from it by exactly one.
const AHEAD: i64 = 9_000_000_000_000_000;

/// The error reply of a call that must fail with one.
fn reply_error(what: &str, r: Result<Value, CallError>) -> String {
    match r {
        Err(CallError::Reply(line)) => line,
        other => panic!("{what}: expected an error reply, got {other:?}"),
    }
}

/// LOCK.INFO through the cluster client, as (field, value-as-text) pairs.
fn info_via(c: &mut ClusterClient, key: &str) -> Vec<(String, String)> {
    match c.query(&["LOCK.INFO", key]) {
        Ok(Value::Nil) => Vec::new(),
        Ok(Value::Array(items)) => items
            .chunks(2)
            .map(|kv| (text(&kv[0]), text(&kv[1])))
            .collect(),
        other => panic!("LOCK.INFO {key}: {other:?}"),
    }
}

fn without_ttl(info: Vec<(String, String)>) -> Vec<(String, String)> {
    info.into_iter().filter(|(k, _)| k != "ttl").collect()
}

// ---------------------------------------------------------------------------
// The slot function

#[test]
fn module_key_slot_matches_cluster_keyslot() {
    // The Redis cluster specification's examples.
    assert_eq!(key_slot(b"somekey"), 11058);
    assert_eq!(key_slot(b"foo{hash_tag}"), 2515);
    assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));

    let server = Config::default()
        .arg("cluster-enabled", "yes")
        .arg("cluster-config-file", "nodes.conf")
        .start();
    let mut con = server.client();
    let mut keys: Vec<Vec<u8>> = [
        "",
        "{}",
        "{a",
        "a}",
        "}{a}",
        "{}a",
        "a{}",
        "{}{a}",
        "{a}{b}",
        "{{a}}",
        "{a}}",
        "a{b}c{d}",
        "{",
        "}",
        "{{}}",
        "{ }",
        "x{}y{z}",
        "{user1000}.following",
        "redisson_lock_token:{{}x}",
    ]
    .iter()
    .map(|k| k.as_bytes().to_vec())
    .collect();
    let seed = now_ms() as u64;
    let mut rng = Rng(seed);
    let alphabet = b"ab:{}{}0x_ ";
    for _ in 0..400 {
        let len = rng.below(24) as usize;
        keys.push(
            (0..len)
                .map(|_| {
                    if rng.one_in(8) {
                        rng.below(256) as u8
                    } else {
                        *rng.pick(alphabet)
                    }
                })
                .collect(),
        );
    }
    let mut pipe = redis::pipe();
    for key in &keys {
        pipe.cmd("CLUSTER").arg("KEYSLOT").arg(key.as_slice());
    }
    let slots: Vec<i64> = pipe.query(&mut con).expect("CLUSTER KEYSLOT");
    for (key, slot) in keys.iter().zip(slots) {
        assert_eq!(
            i64::from(key_slot(key)),
            slot,
            "slot of {:?} (seed {seed})",
            String::from_utf8_lossy(key)
        );
    }
}

// ---------------------------------------------------------------------------
// Lock commands through the cluster client

#[test]
fn lock_commands_through_a_cluster_client_follow_moved_and_ask() {
    let cluster = Cluster::start_with_replicas(3, 1);
    // Seeded with one replica's address and no slot map.
    let mut c = ClusterClient::new(&[cluster.nodes[3].addr()]);

    let mut keys = Vec::new();
    for shard in 0..3 {
        keys.extend(keys_on_shard(&cluster, "order:", shard, 2));
    }
    keys.push("{acct:7}:lock".to_string());
    let mut last_token = HashMap::new();
    for key in &keys {
        let acquire = |owner: &str, extra: &[&str]| {
            let mut args = vec!["LOCK.ACQUIRE", key.as_str(), owner, "PX", "60000"];
            args.extend_from_slice(extra);
            args.iter().map(|s| s.to_string()).collect::<Vec<_>>()
        };
        let run = |c: &mut ClusterClient, args: &[String]| {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            c.query(&args)
        };
        let before = floor(&cluster);
        let first = int(key, run(&mut c, &acquire("app-1", &["FENCE"])));
        assert_token_between(first, before, floor(&cluster), 0, "first token");
        let token = int(key, run(&mut c, &acquire("app-1", &["FENCE"])));
        assert!(token > first, "re-entry takes a new token: {token}");
        last_token.insert(key.clone(), token);
        assert_eq!(int(key, run(&mut c, &acquire("app-1", &[]))), 3, "holds");
        assert_eq!(run(&mut c, &acquire("app-2", &[])), Ok(Value::Nil), "busy");
        assert_eq!(
            int(key, c.query(&["LOCK.RENEW", key, "app-1", "PX", "30000"])),
            30000
        );
        // The lock lives on the master of its slot, where the client sends.
        let master = cluster.master_of_slot(slot_of(key));
        assert_eq!(c.addr_of_slot(slot_of(key)), Some(master.addr().as_str()));
        let info = lock_info(&mut master.client(), key);
        assert_eq!(field(&info, "owner").as_deref(), Some("app-1"), "{key}");
        assert_eq!(field(&info, "holds").as_deref(), Some("3"));
        assert_eq!(field(&info, "token"), Some(token.to_string()));
        let ttl: i64 = field(&info, "ttl").expect("ttl").parse().unwrap();
        assert!(ttl > 0 && ttl <= 30000, "renewed lease: {ttl}");
        assert_eq!(without_ttl(info_via(&mut c, key)), without_ttl(info));
        for left in [2, 1, 0] {
            assert_eq!(int(key, c.query(&["LOCK.RELEASE", key, "app-1"])), left);
        }
        let e = reply_error(key, c.query(&["LOCK.RELEASE", key, "app-1"]));
        assert!(e.starts_with("NOTOWNER "), "passed on unchanged: {e}");
        assert_eq!(c.query(&["LOCK.INFO", key]), Ok(Value::Nil));
    }
    assert!(
        c.stats.moved >= 1 && c.stats.map_reloads >= 1,
        "a client seeded with a replica and no map is redirected: {:?}",
        c.stats
    );
    assert_eq!(c.stats.unknown_outcomes, 0, "{:?}", c.stats);

    // A blocked waiter through a second client is handed the lock.
    let key = keys[2].clone();
    let held = int(
        &key,
        c.query(&["LOCK.ACQUIRE", &key, "app-1", "PX", "60000", "FENCE"]),
    );
    assert!(held > last_token[&key], "the counter goes on: {held}");
    let seed = cluster.nodes[0].addr();
    let waiter = {
        let key = key.clone();
        thread::spawn(move || {
            let mut w = ClusterClient::new(&[seed]);
            let args = ["LOCK.ACQUIRE", &key, "app-2", "PX", "60000"];
            w.query(&[&args[..], &["BLOCK", "10000", "FENCE"]].concat())
        })
    };
    let master = cluster.master_of_slot(slot_of(&key));
    wait_for_waiters(&mut master.client(), &key, 1);
    assert_eq!(int(&key, c.query(&["LOCK.RELEASE", &key, "app-1"])), 0);
    let handed = int(&key, waiter.join().expect("waiter"));
    assert!(handed > held, "the waiter's token {handed} after {held}");
    assert_eq!(int(&key, c.query(&["LOCK.RELEASE", &key, "app-2"])), 0);

    asked_while_the_slot_migrates(&cluster, &mut c);
    crossslot(&cluster, &mut c);
    resends_only_what_did_not_run(&cluster);
}

/// A node that cannot be reached got nothing: the client goes elsewhere.
/// A connection lost while a command waited for its reply is an unknown
/// outcome: reported, never sent again.
fn resends_only_what_did_not_run(cluster: &Cluster) {
    let dead = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr").to_string()
    };
    let mut c = ClusterClient::new(&[dead, cluster.nodes[1].addr()]);
    let key = "resend:1";
    let acquire = ["LOCK.ACQUIRE", key, "app-1", "PX", "60000"];
    assert_eq!(int(key, c.query(&acquire)), 1);
    assert!(
        c.stats.connection_errors >= 1 && c.stats.map_reloads >= 1,
        "{:?}",
        c.stats
    );

    let master = cluster.master_of_slot(slot_of(key));
    let seed = master.addr();
    let waiter = thread::spawn(move || {
        let mut w = ClusterClient::new(&[seed]);
        let r = w.query(&["LOCK.ACQUIRE", key, "app-2", "BLOCK", "0"]);
        (r, w.stats)
    });
    let mut con = master.client();
    wait_for_waiters(&mut con, key, 1);
    let clients: String = q(&mut con, &["CLIENT", "LIST"]);
    let id = clients
        .lines()
        .find(|l| l.contains(" flags=b ") && l.contains(" cmd=lock.acquire "))
        .and_then(|l| l.strip_prefix("id="))
        .and_then(|l| l.split(' ').next())
        .unwrap_or_else(|| panic!("no blocked LOCK.ACQUIRE in CLIENT LIST:\n{clients}"))
        .to_string();
    assert_eq!(q::<i64>(&mut con, &["CLIENT", "KILL", "ID", &id]), 1);
    let (r, stats) = waiter.join().expect("waiter");
    assert!(matches!(r, Err(CallError::Unknown(_))), "{r:?}");
    assert_eq!((stats.unknown_outcomes, stats.retries), (1, 0), "{stats:?}");
    assert_eq!(waiters(&mut con, key), 0, "not queued again");
    assert_eq!(int(key, c.query(&["LOCK.RELEASE", key, "app-1"])), 0);
}

/// A lock key moved to the importing node is served there through `ASK`,
/// without the client's map changing; once the slot is handed over the
/// client follows `MOVED`.
fn asked_while_the_slot_migrates(cluster: &Cluster, c: &mut ClusterClient) {
    let key = keys_on_shard(cluster, "migrating:", 0, 1).remove(0);
    let token_key = format!("redisson_lock_token:{{{key}}}");
    let slot = slot_of(&key).to_string();
    let from = cluster.master_of_slot(slot_of(&key));
    let to = cluster.master_of_slot(cluster.slot_range(1).0);
    let acquire = |c: &mut ClusterClient, owner: &str, fence: bool| {
        let mut args = vec!["LOCK.ACQUIRE", key.as_str(), owner, "PX", "60000"];
        if fence {
            args.push("FENCE");
        }
        int(&key, c.query(&args))
    };
    // A counter ahead of the clock: each FENCE takes exactly the next one,
    // so a counter left behind on `from` or lost would show.
    let _: () = q(&mut from.client(), &["SET", &token_key, &AHEAD.to_string()]);
    assert_eq!(acquire(c, "app-1", true), AHEAD + 1);

    let (from_id, to_id) = (cluster.node_id(from), cluster.node_id(to));
    let setslot = |node: &Server, args: &[&str]| {
        let mut all = vec!["CLUSTER", "SETSLOT", slot.as_str()];
        all.extend_from_slice(args);
        let _: () = q(&mut node.client(), &all);
    };
    setslot(to, &["IMPORTING", &from_id]);
    setslot(from, &["MIGRATING", &to_id]);
    let migrate = |name: &str| {
        let port = to.port.to_string();
        let _: () = q(
            &mut from.client(),
            &["MIGRATE", "127.0.0.1", &port, name, "0", "5000"],
        );
    };
    migrate(&key);

    // The lock is on `to`, its token counter still on `from`: a FENCE
    // acquire asked over to `to` cannot count there (TRYAGAIN, retried a
    // bounded number of times, then reported as not run).
    let before = c.stats.clone();
    c.max_attempts = 4;
    let r = c.query(&["LOCK.ACQUIRE", &key, "app-1", "PX", "60000", "FENCE"]);
    c.max_attempts = 16;
    match &r {
        Err(CallError::NotRun(why)) if why.contains("TRYAGAIN") => {}
        other => panic!("FENCE with the token key left behind: {other:?}"),
    }
    // Sends alternate: `from` answers ASK, `to` answers TRYAGAIN.
    assert_eq!(c.stats.ask - before.ask, 2, "{:?}", c.stats);
    assert_eq!(c.stats.tryagain - before.tryagain, 2, "{:?}", c.stats);
    // Without FENCE the re-entry runs on `to`.
    assert_eq!(acquire(c, "app-1", false), 2);

    migrate(&token_key);
    let before = c.stats.clone();
    assert_eq!(
        acquire(c, "app-1", true),
        AHEAD + 2,
        "the counter moved with its key"
    );
    let info = info_via(c, &key);
    assert_eq!(field(&info, "owner").as_deref(), Some("app-1"));
    assert_eq!(field(&info, "holds").as_deref(), Some("3"));
    assert_eq!(field(&info, "token"), Some((AHEAD + 2).to_string()));
    let mut asking = to.client();
    let _: () = q(&mut asking, &["ASKING"]);
    assert_eq!(
        without_ttl(info),
        without_ttl(lock_info(&mut asking, &key)),
        "on the importing node"
    );
    for left in [2, 1, 0] {
        assert_eq!(int(&key, c.query(&["LOCK.RELEASE", &key, "app-1"])), left);
    }
    // A new owner: the key is on neither node, `from` asks it over.
    assert_eq!(acquire(c, "app-3", true), AHEAD + 3);
    assert!(c.stats.ask - before.ask >= 6, "{:?}", c.stats);
    assert_eq!(c.stats.moved, before.moved, "ASK does not touch the map");
    assert_eq!(c.addr_of_slot(slot_of(&key)), Some(from.addr().as_str()));
    assert_eq!(
        q::<i64>(&mut from.client(), &["CLUSTER", "COUNTKEYSINSLOT", &slot]),
        0,
        "lock and counter left the migrating node"
    );

    setslot(to, &["NODE", &to_id]);
    setslot(from, &["NODE", &to_id]);
    let before = c.stats.clone();
    assert_eq!(int(&key, c.query(&["LOCK.RELEASE", &key, "app-3"])), 0);
    assert_eq!(c.stats.moved - before.moved, 1, "{:?}", c.stats);
    assert_eq!(c.addr_of_slot(slot_of(&key)), Some(to.addr().as_str()));
    assert_eq!(acquire(c, "app-4", true), AHEAD + 4);
    assert_eq!(int(&key, c.query(&["LOCK.RELEASE", &key, "app-4"])), 0);
}

/// Transactions and scripts over lock keys of two slots are refused, and
/// nothing is written; one hash tag keeps them in one slot.
fn crossslot(cluster: &Cluster, c: &mut ClusterClient) {
    // Two slots of one master: the server refuses the EXEC itself.
    let same_node = keys_on_shard(cluster, "tx:", 2, 2);
    let (a, b) = (&same_node[0], &same_node[1]);
    assert_ne!(slot_of(a), slot_of(b));
    let both = [
        &["LOCK.ACQUIRE", a.as_str(), "app-1"][..],
        &["LOCK.ACQUIRE", b.as_str(), "app-1", "FENCE"],
    ];
    let e = reply_error("MULTI over two slots", c.transaction(&both));
    assert!(e.starts_with("CROSSSLOT "), "{e}");
    // Two masters: the second command is redirected while queued, so EXEC
    // discards the transaction.
    let other = keys_on_shard(cluster, "tx:", 0, 1).remove(0);
    let apart = [
        &["LOCK.ACQUIRE", a.as_str(), "app-1"][..],
        &["LOCK.ACQUIRE", other.as_str(), "app-1"],
    ];
    let e = reply_error("MULTI over two masters", c.transaction(&apart));
    assert!(e.starts_with("EXECABORT "), "{e}");
    // A script declaring both keys.
    let script = "return {redis.call('LOCK.ACQUIRE', KEYS[1], ARGV[1]), \
                  redis.call('LOCK.ACQUIRE', KEYS[2], ARGV[1])}";
    let e = reply_error(
        "EVAL over two slots",
        c.query(&["EVAL", script, "2", a, b, "app-1"]),
    );
    assert!(e.starts_with("CROSSSLOT "), "{e}");
    // A script (with flags, so not in the compatibility mode of scripts
    // without a shebang) declaring one key and locking another slot's.
    let script = "#!lua\nreturn redis.call('LOCK.ACQUIRE', ARGV[2], ARGV[1])";
    let e = reply_error(
        "script locking an undeclared key of another slot",
        c.query(&["EVAL", script, "1", a, "app-1", b]),
    );
    assert!(
        e.contains("Script attempted to access keys that do not hash to the same slot"),
        "{e}"
    );
    // The module's own check: a name whose token key is in another slot.
    let e = reply_error(
        "FENCE on {}x",
        c.query(&["LOCK.ACQUIRE", "{}x", "app-1", "FENCE"]),
    );
    assert!(
        e.starts_with("CROSSSLOT fencing token key 'redisson_lock_token:{}x'"),
        "{e}"
    );
    for key in [a.as_str(), b, &other, "{}x"] {
        assert_eq!(c.query(&["EXISTS", key]), Ok(Value::Int(0)), "{key}");
    }

    // One hash tag: one slot, the transaction runs.
    let (x, y) = ("{acct:9}:a", "{acct:9}:b");
    let before = floor(cluster);
    let exec = c.transaction(&[
        &["LOCK.ACQUIRE", x, "app-1", "PX", "60000"][..],
        &["LOCK.ACQUIRE", y, "app-1", "PX", "60000", "FENCE"],
        &["LOCK.RELEASE", x, "app-1"],
        &["LOCK.RELEASE", y, "app-1"],
    ]);
    let after = floor(cluster);
    let replies = match exec {
        Ok(Value::Array(replies)) if replies.len() == 4 => replies,
        other => panic!("EXEC on one slot: {other:?}"),
    };
    assert_eq!(
        [&replies[0], &replies[2], &replies[3]],
        [&Value::Int(1), &Value::Int(0), &Value::Int(0)]
    );
    // y's first fencing token.
    let first = int(y, Ok(replies[1].clone()));
    assert_token_between(first, before, after, 0, y);
    let script = "return {redis.call('LOCK.ACQUIRE', KEYS[1], ARGV[1], 'FENCE'), \
                  redis.call('LOCK.RELEASE', KEYS[1], ARGV[1])}";
    let replies = match c.query(&["EVAL", script, "1", y, "app-2"]) {
        Ok(Value::Array(replies)) if replies.len() == 2 => replies,
        other => panic!("EVAL on one slot: {other:?}"),
    };
    assert!(int(y, Ok(replies[0].clone())) > first, "{replies:?}");
    assert_eq!(replies[1], Value::Int(0));
}

// ---------------------------------------------------------------------------
// Manual failover of every shard under load

/// Leases of the background clients, in ms.
const BG_LEASE: (u64, u64) = (150, 400);
/// Grants whose replies are closer than this are not ordered by token.
const TOKEN_MARGIN_US: u64 = 25_000;

/// A granted acquire as the client saw it; times in µs since the test's
/// start.
#[derive(Clone, Debug)]
struct Grant {
    key: String,
    owner: String,
    /// `None` when the grant was found out after an unknown outcome.
    token: Option<i64>,
    send: u64,
    reply: u64,
    lease_ms: u64,
    release_send: Option<u64>,
}

impl Grant {
    /// The span in which the owner certainly held the lock: from the reply
    /// to the earliest of its release request and the lease counted from
    /// the request (the lease is counted from the grant, which is later).
    fn hold(&self) -> (u64, u64) {
        let lease_end = self.send + self.lease_ms * 1000;
        let end = self.release_send.map_or(lease_end, |r| r.min(lease_end));
        (self.reply, end)
    }
}

fn micros(t0: Instant) -> u64 {
    t0.elapsed().as_micros() as u64
}

#[derive(Default, Debug)]
struct BgReport {
    grants: Vec<Grant>,
    /// `UNBLOCKED` or `READONLY`: not run, called again.
    requeued: u64,
    timeouts: u64,
    notowner_releases: u64,
    unknown: u64,
    not_run: u64,
    stats: common::cluster_client::Stats,
}

/// What the background clients share.
#[derive(Clone)]
struct Load {
    keys: Vec<String>,
    shard_of_key: HashMap<String, usize>,
    stop: Arc<AtomicBool>,
    grants_per_shard: Arc<Vec<AtomicU64>>,
    t0: Instant,
    seed: u64,
}

/// One background client: acquires random keys (`PX` 150-400 ms, `BLOCK`
/// up to half the lease, `FENCE`), holds them briefly and releases them,
/// or now and then walks away and lets the lease end it.
fn background(t: usize, seed_addr: String, load: Load) -> BgReport {
    let Load {
        keys,
        shard_of_key,
        stop,
        grants_per_shard,
        t0,
        seed,
    } = load;
    let mut rng = Rng(seed ^ (t as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut c = ClusterClient::new(&[seed_addr]);
    let mut report = BgReport::default();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let key = rng.pick(&keys).clone();
        let owner = format!("bg{t}-{n}");
        let lease = rng.range(BG_LEASE.0, BG_LEASE.1);
        let block = rng.range(20, lease / 2);
        let (lease_s, block_s) = (lease.to_string(), block.to_string());
        let args = [
            "LOCK.ACQUIRE",
            &key,
            &owner,
            "PX",
            &lease_s,
            "BLOCK",
            &block_s,
            "FENCE",
        ];
        let send = micros(t0);
        let r = c.query(&args);
        let reply = micros(t0);
        let mut grant = Grant {
            key: key.clone(),
            owner: owner.clone(),
            token: None,
            send,
            reply,
            lease_ms: lease,
            release_send: None,
        };
        match r {
            Ok(Value::Int(token)) => grant.token = Some(token),
            Ok(Value::Nil) => {
                report.timeouts += 1;
                continue;
            }
            Err(CallError::Reply(e)) if e.starts_with("UNBLOCKED") || e.starts_with("READONLY") => {
                report.requeued += 1;
                continue;
            }
            Err(CallError::NotRun(_)) => {
                report.not_run += 1;
                continue;
            }
            Err(CallError::Unknown(_)) => {
                // Maybe granted: find out. If so, the hold counts from now
                // and its token is unknown.
                report.unknown += 1;
                let info = match c.query(&["LOCK.INFO", &key]) {
                    Ok(Value::Array(items)) => items
                        .chunks(2)
                        .map(|kv| (text(&kv[0]), text(&kv[1])))
                        .collect(),
                    _ => Vec::new(),
                };
                if field(&info, "owner").as_deref() != Some(owner.as_str()) {
                    continue;
                }
                grant.reply = micros(t0);
            }
            other => panic!("{owner}: {args:?} answered {other:?}"),
        }
        grants_per_shard[shard_of_key[&key]].fetch_add(1, Ordering::Relaxed);
        if rng.one_in(8) {
            // Walks away: the lease ends it.
        } else {
            thread::sleep(Duration::from_millis(rng.below(30)));
            grant.release_send = Some(micros(t0));
            match c.query(&["LOCK.RELEASE", &key, &owner]) {
                Ok(Value::Int(0)) => {}
                Err(CallError::Reply(e)) if e.starts_with("NOTOWNER") => {
                    report.notowner_releases += 1
                }
                Err(CallError::Unknown(_)) => report.unknown += 1,
                Err(CallError::NotRun(_)) => report.not_run += 1,
                other => panic!("{owner}: LOCK.RELEASE {key} answered {other:?}"),
            }
        }
        report.grants.push(grant);
    }
    report.stats = c.stats.clone();
    report
}

/// A holder holds a key of `shard`, a waiter queues for it, the shard's
/// replica takes over with `CLUSTER FAILOVER`: the waiter is answered
/// `UNBLOCKED ...`, queues again through its client (redirected to the new
/// master) and is handed the lock when the holder releases it there, or,
/// when the holder `walks_away`, when its lease (shortened by a renewal on
/// the new master) ends there. The holder's lock, lease and token carry
/// over.
fn failover_with_a_waiter(
    cluster: &Cluster,
    shard: usize,
    walks_away: bool,
    t0: Instant,
) -> Vec<Grant> {
    let key = keys_on_shard(cluster, "failover:", shard, 1).remove(0);
    let slot = slot_of(&key);
    let old = cluster.master_of_slot(slot);
    let replica = cluster.replica_of(old);
    let seed = vec![cluster.nodes[0].addr()];
    let holder = format!("holder-{shard}");
    let mut h = ClusterClient::new(&seed);
    assert!(h.refresh(None), "slot map");
    let send = micros(t0);
    let args = ["LOCK.ACQUIRE", &key, &holder, "PX", "30000", "FENCE"];
    let token = int(&key, h.query(&args));
    let mut held = Grant {
        key: key.clone(),
        owner: holder.clone(),
        token: Some(token),
        send,
        reply: micros(t0),
        lease_ms: 30000,
        release_send: None,
    };
    let deadline = pexpiretime(&mut old.client(), &key);

    let (first_tx, first_rx) = mpsc::channel();
    let waiter = {
        let (key, seed) = (key.clone(), seed.clone());
        thread::spawn(move || {
            let mut w = ClusterClient::new(&seed);
            assert!(w.refresh(None), "slot map");
            let owner = format!("waiter-{shard}");
            let args = [
                "LOCK.ACQUIRE",
                &key,
                &owner,
                "PX",
                "30000",
                "BLOCK",
                "15000",
                "FENCE",
            ];
            let first = w.query(&args);
            first_tx.send(first).expect("report the first answer");
            let moved = w.stats.moved;
            let send = micros(t0);
            let second = w.query(&args);
            let (reply, reply_ms) = (micros(t0), now_ms());
            let moved = w.stats.moved - moved;
            (w, owner, send, second, reply, reply_ms, moved)
        })
    };
    wait_for_waiters(&mut old.client(), &key, 1);

    cluster.failover(replica);
    let new = replica;
    assert_eq!(cluster.master_of_slot(slot).port, new.port);
    let first = first_rx
        .recv_timeout(PATIENCE)
        .expect("the waiter's answer");
    match &first {
        Err(CallError::Reply(e)) if e.starts_with("UNBLOCKED ") => {}
        other => panic!("waiter of the demoted master {}: {other:?}", old.port),
    }

    // The waiter is queued again, on the new master, behind the holder,
    // whose lock came over with its lease and token.
    wait_for_waiters(&mut new.client(), &key, 1);
    let info = lock_info(&mut new.client(), &key);
    assert_eq!(field(&info, "owner").as_deref(), Some(holder.as_str()));
    assert_eq!(field(&info, "holds").as_deref(), Some("1"));
    assert_eq!(field(&info, "token"), Some(token.to_string()));
    assert_eq!(pexpiretime(&mut new.client(), &key), deadline, "same lease");
    assert_eq!(old.stat("waiters"), 0, "the demoted master has no queue");

    // The hold certainly lasts until the release or renewal is sent.
    held.release_send = Some(micros(t0));
    let floor_before_handoff = floor(cluster);
    let expired_with_waiters = new.stat("expired_with_waiters");
    let mut lease_end = None;
    if walks_away {
        let renew = ["LOCK.RENEW", &key, &holder, "PX", "300"];
        assert_eq!(int(&key, h.query(&renew)), 300);
        lease_end = Some(pexpiretime(&mut new.client(), &key));
    } else {
        assert_eq!(int(&key, h.query(&["LOCK.RELEASE", &key, &holder])), 0);
    }
    assert!(
        h.stats.moved >= 1,
        "the holder's client followed the slot to the new master: {:?}",
        h.stats
    );
    let (mut w, owner, send, second, reply, reply_ms, moved) =
        waiter.join().expect("waiter thread");
    assert!(moved >= 1, "the waiter was redirected: {:?}", w.stats);
    let handed = int(&format!("{key} handed to {owner}"), second);
    // The next token: above the holder's, from the new master's clock at
    // the hand-off (after the release or renewal was sent), at most one past
    // it if the holder's token was still ahead.
    assert!(handed > token, "the next token: {handed} after {token}");
    assert_token_between(handed, floor_before_handoff, floor(cluster), 1, "handed");
    if let Some(lease_end) = lease_end {
        // The new master's own timer ended the lease it never granted.
        assert!(
            reply_ms > lease_end,
            "granted at {reply_ms}, lease to {lease_end}"
        );
        // (The background clients' leases count there too.)
        assert!(new.stat("expired_with_waiters") > expired_with_waiters);
    }
    assert_eq!(w.addr_of_slot(slot), Some(new.addr().as_str()));
    let waited = Grant {
        key: key.clone(),
        owner: owner.clone(),
        token: Some(handed),
        send,
        reply,
        lease_ms: 30000,
        release_send: Some(micros(t0)),
    };
    assert_eq!(int(&key, w.query(&["LOCK.RELEASE", &key, &owner])), 0);
    vec![held, waited]
}

/// No two owners' holds of one key overlap; tokens of one key strictly
/// increase with the grants' reply times (for replies more than
/// [`TOKEN_MARGIN_US`] apart) and are never handed out twice.
fn check_history(grants: &[Grant]) {
    if let Some(violation) = history_violation(grants) {
        panic!("{violation}");
    }
}

fn history_violation(grants: &[Grant]) -> Option<String> {
    let mut by_key: BTreeMap<&str, Vec<&Grant>> = BTreeMap::new();
    for g in grants {
        by_key.entry(&g.key).or_default().push(g);
    }
    for (key, mut gs) in by_key {
        gs.sort_by_key(|g| g.reply);
        for (i, a) in gs.iter().enumerate() {
            let (a_start, a_end) = a.hold();
            for b in &gs[i + 1..] {
                let (b_start, b_end) = b.hold();
                let apart =
                    a_start >= a_end || b_start >= b_end || b_start >= a_end || a_start >= b_end;
                if !apart && a.owner != b.owner {
                    return Some(format!("{key}: holds of two owners overlap:\n{a:?}\n{b:?}"));
                }
                if let (Some(ta), Some(tb)) = (a.token, b.token) {
                    if ta == tb {
                        return Some(format!("{key}: one token handed out twice:\n{a:?}\n{b:?}"));
                    }
                    if b.reply > a.reply + TOKEN_MARGIN_US && tb < ta {
                        return Some(format!("{key}: token went back:\n{a:?}\n{b:?}"));
                    }
                }
            }
        }
    }
    None
}

#[test]
fn manual_failover_of_every_shard_under_load() {
    let cluster = Cluster::start_with_replicas(3, 1);
    let t0 = Instant::now();
    let seed = std::env::var("LOCK_CLUSTER_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| now_ms() as u64);
    eprintln!("LOCK_CLUSTER_SEED={seed}");

    let mut bg_keys = Vec::new();
    let mut shard_of_key = HashMap::new();
    for shard in 0..3 {
        for key in keys_on_shard(&cluster, "bg:", shard, 2) {
            shard_of_key.insert(key.clone(), shard);
            bg_keys.push(key);
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let grants_per_shard: Arc<Vec<AtomicU64>> =
        Arc::new((0..3).map(|_| AtomicU64::new(0)).collect());
    let load = Load {
        keys: bg_keys.clone(),
        shard_of_key,
        stop: stop.clone(),
        grants_per_shard: grants_per_shard.clone(),
        t0,
        seed,
    };
    let workers: Vec<_> = (0..8)
        .map(|t| {
            let seed_addr = cluster.nodes[t % cluster.nodes.len()].addr();
            let load = load.clone();
            thread::spawn(move || background(t, seed_addr, load))
        })
        .collect();
    let grants_on = |shard: usize| grants_per_shard[shard].load(Ordering::Relaxed);
    // The load runs on every shard before, between and after the failovers.
    let running = |what: &str| {
        let before: Vec<u64> = (0..3).map(grants_on).collect();
        wait_until(what, || (0..3).all(|s| grants_on(s) >= before[s] + 5));
    };
    running("background grants on every shard");

    let mut grants = Vec::new();
    let masters_before: Vec<u16> = (0..3)
        .map(|s| cluster.master_of_slot(cluster.slot_range(s).0).port)
        .collect();
    for shard in 0..3 {
        let walks_away = shard == 1;
        grants.extend(failover_with_a_waiter(&cluster, shard, walks_away, t0));
        running(&format!(
            "background grants after the failover of shard {shard}"
        ));
    }
    stop.store(true, Ordering::Relaxed);
    let reports: Vec<BgReport> = workers
        .into_iter()
        .map(|w| w.join().expect("background client"))
        .collect();
    for (s, before) in masters_before.iter().enumerate() {
        let now = cluster.master_of_slot(cluster.slot_range(s).0).port;
        assert_ne!(now, *before, "shard {s} has a new master");
    }

    // Every lock ends within one lease; nobody is left queued anywhere.
    let mut keys: Vec<String> = bg_keys.clone();
    keys.extend((0..3).map(|s| keys_on_shard(&cluster, "failover:", s, 1).remove(0)));
    for key in &keys {
        let master = cluster.master_of_slot(slot_of(key));
        let mut con = master.client();
        let ttl = pttl(&mut con, key);
        assert!(
            ttl == -2 || (0..=BG_LEASE.1 as i64).contains(&ttl),
            "{key}: lease left {ttl} ms"
        );
        wait_until(&format!("{key} free"), || {
            lock_info(&mut con, key).is_empty()
        });
        // On the master, a read deletes an expired key (and replicates the
        // DEL), so the replica ends with the same keys.
        assert!(!exists(&mut con, key));
    }
    for node in &cluster.nodes {
        assert_eq!(node.stat("waiters"), 0, "waiters on {}", node.port);
        assert_eq!(node.stat("locks_with_waiters"), 0, "on {}", node.port);
    }
    // Each replica holds what its master holds.
    for s in 0..3 {
        let master = cluster.master_of_slot(cluster.slot_range(s).0);
        let replica = cluster.replica_of(master);
        let mut con = master.client();
        let marker = format!("{{{}}}:synced", bg_keys[2 * s]);
        let _: i64 = q(&mut con, &["INCR", &marker]);
        assert_eq!(q::<i64>(&mut con, &["WAIT", "1", "5000"]), 1);
        let digest = |n: &Server| q::<String>(&mut n.client(), &["DEBUG", "DIGEST"]);
        assert_eq!(digest(master), digest(replica), "shard {s}");
    }

    // Nothing of the module is left armed or blocked on any node, the
    // demoted masters included (Redis refuses MODULE UNLOAD while a module
    // timer is armed or a client is blocked by the module), and nothing
    // went wrong inside the module.
    for node in &cluster.nodes {
        let mut con = node.client();
        wait_until(&format!("MODULE UNLOAD accepted on {}", node.port), || {
            raw(&mut con, &["MODULE", "UNLOAD", "lock"]).is_ok()
        });
        let log = node.log();
        for bad in [
            "internal error caught",
            "panicked",
            "crashed by signal",
            "ASSERTION",
        ] {
            assert!(!log.contains(bad), "{} log has {bad:?}:\n{log}", node.port);
        }
    }

    let mut total = BgReport::default();
    for r in reports {
        total.grants.extend(r.grants);
        total.requeued += r.requeued;
        total.timeouts += r.timeouts;
        total.notowner_releases += r.notowner_releases;
        total.unknown += r.unknown;
        total.not_run += r.not_run;
        total.stats.add(&r.stats);
    }
    eprintln!(
        "background: {} grants ({} with tokens), {} wait timeouts, {} re-queued after \
         UNBLOCKED/READONLY, {} releases after the lease, {} unknown outcomes, {} not run; \
         client {:?}; {:.1} s",
        total.grants.len(),
        total.grants.iter().filter(|g| g.token.is_some()).count(),
        total.timeouts,
        total.requeued,
        total.notowner_releases,
        total.unknown,
        total.not_run,
        total.stats,
        t0.elapsed().as_secs_f64()
    );
    assert!(
        total.stats.moved >= 1,
        "background clients followed the failovers"
    );
    grants.extend(total.grants);
    check_history(&grants);
}

#[test]
fn history_checker_catches_overlaps_and_reordered_tokens() {
    let g = |owner: &str, token: i64, reply_ms: u64, release_ms: u64| Grant {
        key: "k".into(),
        owner: owner.into(),
        token: Some(token),
        send: 1_000_000 + reply_ms * 1000 - 500,
        reply: 1_000_000 + reply_ms * 1000,
        lease_ms: 1000,
        release_send: Some(1_000_000 + release_ms * 1000),
    };
    check_history(&[g("a", 1, 0, 10), g("b", 2, 10, 20), g("c", 3, 30, 40)]);
    let caught = |grants: Vec<Grant>| history_violation(&grants).is_some();
    assert!(caught(vec![g("a", 1, 0, 10), g("b", 2, 9, 20)]), "overlap");
    assert!(
        caught(vec![g("a", 2, 0, 10), g("b", 1, 40, 50)]),
        "token back"
    );
    assert!(
        caught(vec![g("a", 1, 0, 10), g("b", 1, 11, 20)]),
        "token twice"
    );
    // Tokens of replies within the margin are not ordered.
    check_history(&[g("a", 2, 0, 10), g("b", 1, 11, 20)]);
}
