//! Interop with Redisson's RPermitExpirableSemaphore, RSemaphore and
//! RCountDownLatch: their scripts (scripts/redisson-sem-*.lua,
//! scripts/redisson-latch-*.lua, byte for byte as Redisson sends them) and
//! the SEM.* / LATCH.* commands share one state, wake each other's
//! waiters, and the module publishes on Redisson's channels.

use crate::common;
use crate::common::redisson_sem;

use common::*;
use redisson_sem::*;

/// The next message on a subscribed connection: (channel, payload).
fn next_message(sub: &mut redis::PubSub<'_>) -> (String, String) {
    let msg = sub.get_message().expect("pubsub message");
    let payload: String = msg.get_payload().expect("payload");
    (msg.get_channel_name().to_string(), payload)
}

/// Publishes a marker on `ch` and asserts it is the next message the
/// subscriber sees, i.e. nothing else was published there before it.
fn assert_nothing_published(
    sub: &mut redis::PubSub<'_>,
    con: &mut Connection,
    ch: &str,
    marker: &str,
) {
    let receivers: i64 = q(con, &["PUBLISH", ch, marker]);
    assert_eq!(receivers, 1);
    assert_eq!(
        next_message(sub),
        (ch.to_string(), marker.to_string()),
        "something was published on {ch} before the marker"
    );
}

fn bytes(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

/// `(owner, permits)` pairs sorted by owner bytes, as SEM.INFO orders them.
fn sorted(mut held: Vec<(Vec<u8>, i64)>) -> Vec<(Vec<u8>, i64)> {
    held.sort();
    held
}

/// Redisson's tryAcquire reply when it cannot take: `:<score>` of the
/// soonest lease end.
fn soonest(score: i64) -> Result<(), Value> {
    Err(Value::BulkString(format!(":{score}").into_bytes()))
}

#[test]
fn redisson_and_module_permits_count_against_one_total() {
    let server = Server::start();
    let mut con = server.client();
    let s = RSem::new("pool");
    let mut rng = Rng(24);

    // Set by the module; Redisson's trySetPermits finds it set.
    assert_eq!(q::<i64>(&mut con, &["SEM.INIT", "pool", "4"]), 1);
    assert_eq!(s.try_set_permits(&mut con, 9), 0);
    assert_eq!(counter(&mut con, &s), Some(4));

    // Module permits: members <owner>:<i> scored by their lease end.
    let before = server_ms(&mut con);
    assert_eq!(
        q::<i64>(
            &mut con,
            &["SEM.ACQUIRE", "pool", "w1", "PERMITS", "2", "PX", "30000"]
        ),
        2
    );
    let after = server_ms(&mut con);
    let set = timeout_set(&mut con, &s);
    assert_eq!(
        set.iter().map(|(m, _)| m.clone()).collect::<Vec<_>>(),
        [bytes("w1:1"), bytes("w1:2")]
    );
    for (_, score) in &set {
        assert!(
            (before + 30000..=after + 30000).contains(score),
            "lease end {score} not in [{}, {}]",
            before + 30000,
            after + 30000
        );
    }
    let w1_end = set[0].1;

    // Redisson takes the other two; nobody can take a fifth.
    let ids = permit_ids(&mut rng, 3);
    let now = server_ms(&mut con);
    s.try_acquire(&mut con, &ids[..2], now + 60000, now)
        .expect("Redisson takes 2 of the 4");
    assert_eq!(
        s.try_acquire(&mut con, &ids[2..], now + 60000, now),
        soonest(w1_end),
        "Redisson's tryAcquire of a fifth permit"
    );
    assert_eq!(
        raw(&mut con, &["SEM.ACQUIRE", "pool", "w2"]).unwrap(),
        Value::Nil,
        "SEM.ACQUIRE of a fifth permit"
    );
    assert_eq!(counter(&mut con, &s), Some(0));
    assert_eq!(timeout_set(&mut con, &s).len(), 4);

    let info = sem_info(&mut con, "pool").expect("SEM.INFO");
    assert_eq!((info.permits, info.available, info.waiters), (4, 0, 0));
    assert_eq!(
        info.held(),
        sorted(vec![
            (ids[0].clone(), 1),
            (ids[1].clone(), 1),
            (bytes("w1"), 2)
        ]),
        "holders, ordered by owner bytes"
    );
    assert_in(
        info.holder(&ids[0]).unwrap().ttl,
        50000,
        60000,
        "Redisson ttl",
    );
    assert_in(info.holder(b"w1").unwrap().ttl, 20000, 30000, "w1 ttl");
    let now = server_ms(&mut con);
    assert_eq!(s.get_permits(&mut con, now), 4);
    assert_eq!(s.available_permits(&mut con, now), 0);

    // A module release makes room for Redisson, a Redisson release for the
    // module.
    assert_eq!(
        q::<i64>(&mut con, &["SEM.RELEASE", "pool", "w1", "PERMITS", "1"]),
        1
    );
    s.try_acquire(&mut con, &ids[2..], now + 60000, now)
        .expect("Redisson takes the permit w1 gave back");
    assert_eq!(s.try_release(&mut con, &ids[0], now), 1);
    assert_eq!(
        q::<i64>(&mut con, &["SEM.ACQUIRE", "pool", "w2", "PX", "30000"]),
        1
    );
    assert_eq!(
        raw(&mut con, &["SEM.ACQUIRE", "pool", "w3"]).unwrap(),
        Value::Nil
    );
    assert!(s
        .try_acquire(&mut con, &ids[..1], now + 60000, now)
        .is_err());
    let info = sem_info(&mut con, "pool").expect("SEM.INFO");
    assert_eq!((info.permits, info.available), (4, 0));
    assert_eq!(
        info.held(),
        sorted(vec![
            (ids[1].clone(), 1),
            (ids[2].clone(), 1),
            (bytes("w1"), 1),
            (bytes("w2"), 1)
        ])
    );
    // Releasing a permit no longer held changes nothing.
    assert_eq!(s.try_release(&mut con, &ids[0], now), 0);
    assert_eq!(counter(&mut con, &s), Some(0));

    // All back: the counter alone is left.
    assert_eq!(q::<i64>(&mut con, &["SEM.RELEASE", "pool", "w1"]), 0);
    assert_eq!(q::<i64>(&mut con, &["SEM.RELEASE", "pool", "w2"]), 0);
    assert_eq!(s.try_release(&mut con, &ids[1], now), 1);
    assert_eq!(s.try_release(&mut con, &ids[2], now), 1);
    assert_eq!(counter(&mut con, &s), Some(4));
    assert!(!exists(&mut con, &s.timeout));

    // Redisson's permits without a lease (score 922337203685477): held for
    // good, shown without a TTL.
    let forever = permit_ids(&mut rng, 5);
    s.try_acquire(&mut con, &forever[..3], NEVER, now)
        .expect("Redisson takes 3 permits without a lease");
    assert_eq!(
        timeout_set(&mut con, &s)
            .iter()
            .map(|(_, score)| *score)
            .collect::<Vec<_>>(),
        [NEVER; 3]
    );
    assert_eq!(
        q::<i64>(&mut con, &["SEM.ACQUIRE", "pool", "w1", "PX", "30000"]),
        1
    );
    let w1_end = timeout_set(&mut con, &s)[0].1;
    assert!(w1_end < NEVER);
    assert_eq!(
        s.try_acquire(&mut con, &forever[3..4], NEVER, now),
        soonest(w1_end)
    );
    assert_eq!(q::<i64>(&mut con, &["SEM.RELEASE", "pool", "w1"]), 0);
    s.try_acquire(&mut con, &forever[3..4], NEVER, now)
        .expect("the fourth permit without a lease");
    // Every permit held for good: Redisson's script has no lease end to
    // report (nil, not ':922337203685477'), the module none to wait for.
    assert_eq!(
        s.try_acquire(&mut con, &forever[4..], NEVER, now),
        Err(Value::Nil)
    );
    assert_eq!(
        raw(&mut con, &["SEM.ACQUIRE", "pool", "w2", "BLOCK", "50"]).unwrap(),
        Value::Nil
    );
    let info = sem_info(&mut con, "pool").expect("SEM.INFO");
    assert_eq!((info.permits, info.available, info.waiters), (4, 0, 0));
    assert_eq!(info.holders.len(), 4);
    for h in &info.holders {
        assert_eq!((h.permits, h.ttl), (1, -1), "{h:?}");
    }
    assert_eq!(timeout_set(&mut con, &s).len(), 4);
    assert_eq!(counter(&mut con, &s), Some(0));
}

#[test]
fn module_gives_and_releases_publish_the_available_count() {
    let server = Server::start();
    let mut con = server.client();
    let s = RSem::new("pool");
    assert_eq!(q::<i64>(&mut con, &["SEM.INIT", "pool", "2"]), 1);
    assert_eq!(
        q::<i64>(&mut con, &["SEM.ACQUIRE", "pool", "w1", "PERMITS", "2"]),
        2
    );
    let mut sub_con = server.client();
    let mut sub = sub_con.as_pubsub();
    sub.subscribe(&s.channel).expect("subscribe");

    assert_eq!(
        q::<i64>(&mut con, &["SEM.RELEASE", "pool", "w1", "PERMITS", "1"]),
        1
    );
    assert_eq!(next_message(&mut sub), (s.channel.clone(), "1".into()));
    assert_eq!(q::<i64>(&mut con, &["SEM.RELEASE", "pool", "w1"]), 0);
    assert_eq!(next_message(&mut sub), (s.channel.clone(), "2".into()));
    assert_eq!(q::<i64>(&mut con, &["SEM.ADD", "pool", "3"]), 5);
    assert_eq!(next_message(&mut sub), (s.channel.clone(), "5".into()));
    assert_eq!(q::<i64>(&mut con, &["SEM.GIVE", "pool"]), 6);
    assert_eq!(next_message(&mut sub), (s.channel.clone(), "6".into()));
    // Taking publishes nothing.
    assert_eq!(q::<i64>(&mut con, &["SEM.TAKE", "pool", "PERMITS", "6"]), 6);
    assert_nothing_published(&mut sub, &mut con, &s.channel, "marker-1");

    // A permit that goes straight to a queued caller leaves none available:
    // nothing to tell Redisson's waiters.
    let mut w = server.client();
    send(
        &mut w,
        &["SEM.ACQUIRE", "pool", "w2", "PX", "30000", "BLOCK", "0"],
    );
    wait_for_sem_waiters(&mut con, "pool", 1);
    assert_eq!(q::<i64>(&mut con, &["SEM.GIVE", "pool"]), 0);
    assert_eq!(recv(&mut w).unwrap(), Value::Int(1));
    assert_nothing_published(&mut sub, &mut con, &s.channel, "marker-2");
    assert_eq!(q::<i64>(&mut con, &["SEM.RELEASE", "pool", "w2"]), 0);
    assert_eq!(next_message(&mut sub), (s.channel.clone(), "1".into()));

    // A hash-tagged name keeps its own tag in the channel name.
    let tagged = RSem::new("{user}:sem");
    assert_eq!(tagged.channel, "redisson_sc:{user}:sem");
    sub.subscribe(&tagged.channel).expect("subscribe");
    assert_eq!(q::<i64>(&mut con, &["SEM.ADD", "{user}:sem", "2"]), 2);
    assert_eq!(next_message(&mut sub), (tagged.channel.clone(), "2".into()));
}

#[test]
fn redisson_releases_wake_blocked_module_acquires() {
    let server = Server::start();
    let mut con = server.client();
    let s = RSem::new("pool");
    let ids = permit_ids(&mut Rng(7), 1);
    assert_eq!(s.try_set_permits(&mut con, 1), 1);
    let now = server_ms(&mut con);
    s.try_acquire(&mut con, &ids, now + 30000, now)
        .expect("Redisson takes the only permit");

    let mut w1 = server.client();
    send(
        &mut w1,
        &["SEM.ACQUIRE", "pool", "w1", "PX", "30000", "BLOCK", "0"],
    );
    wait_for_sem_waiters(&mut con, "pool", 1);
    // tryRelease: ZREM, INCRBY, PUBLISH.
    assert_eq!(s.try_release(&mut con, &ids[0], now), 1);
    assert_eq!(recv(&mut w1).unwrap(), Value::Int(1));
    let info = sem_info(&mut con, "pool").expect("SEM.INFO");
    assert_eq!(info.held(), [(bytes("w1"), 1)]);
    assert_eq!((info.available, info.waiters), (0, 0));
    assert_eq!(counter(&mut con, &s), Some(0));

    // RSemaphore's release (INCRBY, PUBLISH) on the same counter: a waiter
    // for 2 waits until 2 are there.
    let mut w2 = server.client();
    send(
        &mut w2,
        &[
            "SEM.ACQUIRE",
            "pool",
            "w2",
            "PERMITS",
            "2",
            "PX",
            "30000",
            "BLOCK",
            "0",
        ],
    );
    wait_for_sem_waiters(&mut con, "pool", 1);
    s.plain_release(&mut con, 1);
    assert_eq!(counter(&mut con, &s), Some(1));
    assert_eq!(sem_info(&mut con, "pool").unwrap().waiters, 1);
    s.plain_release(&mut con, 1);
    assert_eq!(recv(&mut w2).unwrap(), Value::Int(2));
    let info = sem_info(&mut con, "pool").expect("SEM.INFO");
    assert_eq!(info.held(), [(bytes("w1"), 1), (bytes("w2"), 2)]);
    assert_eq!((info.permits, info.available, info.waiters), (3, 0, 0));
    assert_eq!(counter(&mut con, &s), Some(0));
}

#[test]
fn expired_redisson_permits_go_to_module_waiters() {
    let server = Server::start();
    let mut con = server.client();
    let s = RSem::new("pool");
    let ids = permit_ids(&mut Rng(8), 3);
    assert_eq!(q::<i64>(&mut con, &["SEM.INIT", "pool", "3"]), 1);
    let now = server_ms(&mut con);
    let end = now + 300;
    s.try_acquire(&mut con, &ids[..2], end, now)
        .expect("Redisson takes 2 with a short lease");
    s.try_acquire(&mut con, &ids[2..], NEVER, now)
        .expect("Redisson takes 1 without a lease");

    let mut w = server.client();
    send(
        &mut w,
        &[
            "SEM.ACQUIRE",
            "pool",
            "w1",
            "PERMITS",
            "2",
            "PX",
            "30000",
            "BLOCK",
            "0",
        ],
    );
    wait_for_sem_waiters(&mut con, "pool", 1);
    assert_eq!(recv(&mut w).unwrap(), Value::Int(2));
    assert!(
        server_ms(&mut con) >= end,
        "served once the Redisson leases ended"
    );
    let set = timeout_set(&mut con, &s);
    assert_eq!(
        set.iter().map(|(m, _)| m.clone()).collect::<Vec<_>>(),
        [bytes("w1:1"), bytes("w1:2"), ids[2].clone()],
        "the expired ids are gone, the one without a lease stays"
    );
    assert_eq!(counter(&mut con, &s), Some(0));
    // Redisson's release of an id whose permit went to the waiter changes
    // nothing.
    let now = server_ms(&mut con);
    assert_eq!(s.try_release(&mut con, &ids[0], now), 0);
    assert_eq!(counter(&mut con, &s), Some(0));
    let info = sem_info(&mut con, "pool").expect("SEM.INFO");
    assert_eq!(
        info.held(),
        sorted(vec![(ids[2].clone(), 1), (bytes("w1"), 2)])
    );
    assert_eq!((info.permits, info.available, info.waiters), (3, 0, 0));
}

#[test]
fn expired_module_permits_are_reclaimed_by_redisson() {
    let server = Server::start();
    let mut con = server.client();
    let s = RSem::new("pool");
    let ids = permit_ids(&mut Rng(9), 2);
    assert_eq!(q::<i64>(&mut con, &["SEM.INIT", "pool", "2"]), 1);
    assert_eq!(
        q::<i64>(
            &mut con,
            &["SEM.ACQUIRE", "pool", "w1", "PERMITS", "2", "PX", "150"]
        ),
        2
    );
    let end = timeout_set(&mut con, &s).last().expect("w1's permits").1;
    wait_until("w1's lease over", || server_ms(&mut con) > end);
    // Counted as available, no longer a holder, before anyone acts.
    let info = sem_info(&mut con, "pool").expect("SEM.INFO");
    assert_eq!((info.permits, info.available), (2, 2));
    assert_eq!(info.holders, []);

    // Redisson's tryAcquire gives them back, then takes them.
    let now = server_ms(&mut con);
    s.try_acquire(&mut con, &ids, now + 30000, now)
        .expect("Redisson takes w1's expired permits");
    let mut want = ids.clone();
    want.sort();
    assert_eq!(
        timeout_set(&mut con, &s)
            .into_iter()
            .map(|(m, _)| m)
            .collect::<Vec<_>>(),
        want,
        "the timeout set holds Redisson's ids alone"
    );
    assert_eq!(counter(&mut con, &s), Some(0));
    let e = err(&mut con, &["SEM.RELEASE", "pool", "w1"]);
    assert!(e.starts_with("NOTOWNER"), "{e}");
    assert_eq!(counter(&mut con, &s), Some(0));

    // Redisson's availablePermits gives them back too, and publishes.
    let s2 = RSem::new("pool2");
    assert_eq!(q::<i64>(&mut con, &["SEM.INIT", "pool2", "3"]), 1);
    assert_eq!(
        q::<i64>(
            &mut con,
            &["SEM.ACQUIRE", "pool2", "w1", "PERMITS", "2", "PX", "150"]
        ),
        2
    );
    let end = timeout_set(&mut con, &s2).last().expect("w1's permits").1;
    let mut sub_con = server.client();
    let mut sub = sub_con.as_pubsub();
    sub.subscribe(&s2.channel).expect("subscribe");
    wait_until("w1's lease over", || server_ms(&mut con) > end);
    let now = server_ms(&mut con);
    assert_eq!(s2.available_permits(&mut con, now), 3);
    assert_eq!(next_message(&mut sub), (s2.channel.clone(), "3".into()));
    assert_eq!(counter(&mut con, &s2), Some(3));
    assert!(!exists(&mut con, &s2.timeout));
    let e = err(&mut con, &["SEM.RELEASE", "pool2", "w1"]);
    assert!(e.starts_with("NOTOWNER"), "{e}");
}

#[test]
fn rsemaphore_counter_is_shared_with_take_and_give() {
    let server = Server::start();
    let mut con = server.client();
    let s = RSem::new("rs");
    assert_eq!(s.try_set_permits(&mut con, 3), 1);
    assert_eq!(q::<i64>(&mut con, &["SEM.INIT", "rs", "5"]), 0);
    assert_eq!(q::<i64>(&mut con, &["SEM.TAKE", "rs", "PERMITS", "2"]), 2);
    assert_eq!(s.plain_try_acquire(&mut con, 2), 0);
    assert_eq!(s.plain_try_acquire(&mut con, 1), 1);
    assert_eq!(counter(&mut con, &s), Some(0));
    assert_eq!(raw(&mut con, &["SEM.TAKE", "rs"]).unwrap(), Value::Nil);

    // RSemaphore's release wakes a queued SEM.TAKE once enough are there.
    let mut w = server.client();
    send(&mut w, &["SEM.TAKE", "rs", "PERMITS", "2", "BLOCK", "0"]);
    wait_for_sem_waiters(&mut con, "rs", 1);
    s.plain_release(&mut con, 1);
    assert_eq!(counter(&mut con, &s), Some(1));
    assert_eq!(sem_info(&mut con, "rs").unwrap().waiters, 1);
    s.plain_release(&mut con, 1);
    assert_eq!(recv(&mut w).unwrap(), Value::Int(2));
    assert_eq!(counter(&mut con, &s), Some(0));

    // SEM.GIVE tells RSemaphore's waiters, who can take what it gave.
    let mut sub_con = server.client();
    let mut sub = sub_con.as_pubsub();
    sub.subscribe(&s.channel).expect("subscribe");
    assert_eq!(q::<i64>(&mut con, &["SEM.GIVE", "rs", "PERMITS", "2"]), 2);
    assert_eq!(next_message(&mut sub), (s.channel.clone(), "2".into()));
    assert_eq!(s.plain_try_acquire(&mut con, 2), 1);
    assert_eq!(counter(&mut con, &s), Some(0));
    // Permits taken without an owner are nobody's.
    let info = sem_info(&mut con, "rs").expect("SEM.INFO");
    assert_eq!((info.permits, info.available, info.waiters), (0, 0, 0));
    assert_eq!(info.holders, []);
    assert!(!exists(&mut con, &s.timeout));
}

#[test]
fn latches_are_shared_with_redisson() {
    let server = Server::start();
    let mut con = server.client();

    // Set by Redisson, counted down to zero by Redisson (DECR, DEL,
    // PUBLISH): the module's waiters hear it opened, not deleted.
    assert_eq!(latch_set_count(&mut con, "l", 2), 1);
    assert_eq!(q::<i64>(&mut con, &["LATCH.INIT", "l", "5"]), 0);
    assert_eq!(raw(&mut con, &["LATCH.AWAIT", "l"]).unwrap(), Value::Nil);
    assert_eq!(latch_field(&mut con, "l", "count"), Some(2));
    let mut waiters: Vec<Connection> = (0..2).map(|_| server.client()).collect();
    for w in &mut waiters {
        send(w, &["LATCH.AWAIT", "l", "BLOCK", "0"]);
    }
    wait_until("2 latch waiters", || {
        latch_field(&mut con, "l", "waiters") == Some(2)
    });
    latch_count_down(&mut con, "l");
    assert_eq!(q::<Option<i64>>(&mut con, &["GET", "l"]), Some(1));
    assert_eq!(latch_field(&mut con, "l", "waiters"), Some(2));
    latch_count_down(&mut con, "l");
    assert!(!exists(&mut con, "l"));
    for w in &mut waiters {
        assert_eq!(recv(w).unwrap(), Value::Int(0), "opened, not GONE");
    }
    assert_eq!(q::<i64>(&mut con, &["LATCH.AWAIT", "l"]), 0);
    assert_eq!(latch_info(&mut con, "l"), None);

    // Set and counted down by the module: Redisson's waiters hear 1, then 0.
    let ch = latch_channel("m");
    let mut sub_con = server.client();
    let mut sub = sub_con.as_pubsub();
    sub.subscribe(&ch).expect("subscribe");
    assert_eq!(q::<i64>(&mut con, &["LATCH.INIT", "m", "3"]), 1);
    assert_eq!(next_message(&mut sub), (ch.clone(), "1".into()));
    assert_eq!(latch_set_count(&mut con, "m", 7), 0);
    assert_eq!(q::<i64>(&mut con, &["LATCH.COUNTDOWN", "m"]), 2);
    latch_count_down(&mut con, "m");
    assert_eq!(q::<i64>(&mut con, &["GET", "m"]), 1);
    assert_nothing_published(&mut sub, &mut con, &ch, "marker-1");
    assert_eq!(q::<i64>(&mut con, &["LATCH.COUNTDOWN", "m"]), 0);
    assert_eq!(next_message(&mut sub), (ch.clone(), "0".into()));
    assert!(!exists(&mut con, "m"));
    // An open latch: nothing written, nothing published.
    assert_eq!(q::<i64>(&mut con, &["LATCH.COUNTDOWN", "m"]), 0);
    assert!(!exists(&mut con, "m"));
    assert_nothing_published(&mut sub, &mut con, &ch, "marker-2");

    // A hash-tagged name: Redisson still wraps it in braces.
    let tagged = latch_channel("{t}m");
    assert_eq!(tagged, "redisson_countdownlatch__channel__{{t}m}");
    sub.subscribe(&tagged).expect("subscribe");
    assert_eq!(q::<i64>(&mut con, &["LATCH.INIT", "{t}m", "1"]), 1);
    assert_eq!(next_message(&mut sub), (tagged.clone(), "1".into()));
    assert_eq!(q::<i64>(&mut con, &["LATCH.COUNTDOWN", "{t}m"]), 0);
    assert_eq!(next_message(&mut sub), (tagged, "0".into()));
}
