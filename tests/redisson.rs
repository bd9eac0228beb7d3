//! Interop with Redisson's RLock protocol: locks taken or released by
//! Redisson-style Lua scripts and by LOCK.* commands see each other, and the
//! module publishes on Redisson's release channel.

use crate::common;
use common::*;

/// Redisson-style tryLock (shared with the bench): nil on success, else the
/// PTTL of the busy lock. KEYS[1] = lock, ARGV[1] = lease ms, ARGV[2] = owner.
const ACQUIRE_SCRIPT: &str = include_str!("../scripts/redisson-acquire.lua");

/// Redisson-style unlock (shared with the bench): nil if not the owner, 0 if
/// holds remain (lease reset), 1 when released (key deleted and "0"
/// published). KEYS[1] = lock, KEYS[2] = channel, ARGV[1] = message,
/// ARGV[2] = lease ms, ARGV[3] = owner.
const RELEASE_SCRIPT: &str = include_str!("../scripts/redisson-release.lua");

const OWNER_A: &str = "8743c9c0-0795-4907-87fd-6c719a6b4586:1";
const OWNER_B: &str = "8743c9c0-0795-4907-87fd-6c719a6b4586:57";
const OWNER_C: &str = "0e5a2f61-3c1d-4a8b-9f0e-2b7d6c4e1a90:1";

fn channel(name: &str) -> String {
    format!("redisson_lock__channel:{{{name}}}")
}

fn script_acquire(con: &mut Connection, name: &str, lease_ms: &str, owner: &str) -> Value {
    q(con, &["EVAL", ACQUIRE_SCRIPT, "1", name, lease_ms, owner])
}

fn script_release(con: &mut Connection, name: &str, lease_ms: &str, owner: &str) -> Value {
    let ch = channel(name);
    q(
        con,
        &["EVAL", RELEASE_SCRIPT, "2", name, &ch, "0", lease_ms, owner],
    )
}

/// The lock key's DUMP and absolute expiry, for "unchanged" checks.
fn state(con: &mut Connection, key: &str) -> (Value, i64) {
    (q(con, &["DUMP", key]), q(con, &["PEXPIRETIME", key]))
}

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

#[test]
fn script_taken_lock_is_held_for_lock_commands() {
    let server = Server::start();
    let mut con = server.client();
    assert_eq!(
        script_acquire(&mut con, "res", "30000", OWNER_A),
        Value::Nil,
        "script acquire of a free lock"
    );
    assert_eq!(
        hgetall(&mut con, "res"),
        [(OWNER_A.to_string(), "1".to_string())]
    );

    // Another owner: busy, nothing changes.
    let before = state(&mut con, "res");
    assert_eq!(
        q::<Value>(&mut con, &["LOCK.ACQUIRE", "res", OWNER_B]),
        Value::Nil
    );
    assert_eq!(state(&mut con, "res"), before);

    let info = lock_info(&mut con, "res");
    assert_eq!(field(&info, "owner").as_deref(), Some(OWNER_A));
    assert_eq!(field(&info, "holds").as_deref(), Some("1"));
    let ttl: i64 = field(&info, "ttl").expect("ttl").parse().expect("ttl");
    assert!(ttl > 20000 && ttl <= 30000, "ttl {ttl}");

    // The same owner re-enters.
    assert_eq!(
        q::<i64>(&mut con, &["LOCK.ACQUIRE", "res", OWNER_A, "PX", "40000"]),
        2
    );
    assert_eq!(
        hgetall(&mut con, "res"),
        [(OWNER_A.to_string(), "2".to_string())]
    );
    assert_eq!(lock_field(&mut con, "res", "holds").as_deref(), Some("2"));

    assert_eq!(
        q::<i64>(&mut con, &["LOCK.RENEW", "res", OWNER_A, "PX", "90000"]),
        90000
    );
    let p = pttl(&mut con, "res");
    assert!(p > 80000 && p <= 90000, "PTTL after renew {p}");
    let e = err(&mut con, &["LOCK.RENEW", "res", OWNER_B]);
    assert_eq!(e, "NOTOWNER the owner holds no hold on this lock");

    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "res", OWNER_A]), 1);
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "res", OWNER_A]), 0);
    assert!(!exists(&mut con, "res"));
    // Free again for the script.
    assert_eq!(
        script_acquire(&mut con, "res", "30000", OWNER_B),
        Value::Nil
    );
}

#[test]
fn module_taken_lock_is_held_for_scripts() {
    let server = Server::start();
    let mut con = server.client();
    assert_eq!(
        q::<i64>(&mut con, &["LOCK.ACQUIRE", "res", OWNER_A, "PX", "30000"]),
        1
    );

    // Another owner gets the PTTL and changes nothing.
    let before = state(&mut con, "res");
    match script_acquire(&mut con, "res", "30000", OWNER_B) {
        Value::Int(p) => assert!(p > 0 && p <= 30000, "PTTL {p}"),
        other => panic!("script acquire of a busy lock replied {other:?}"),
    }
    assert_eq!(state(&mut con, "res"), before);
    // Another owner's release script is refused.
    assert_eq!(
        script_release(&mut con, "res", "30000", OWNER_B),
        Value::Nil
    );
    assert_eq!(state(&mut con, "res"), before);

    // The owner re-enters with the script.
    assert_eq!(
        script_acquire(&mut con, "res", "60000", OWNER_A),
        Value::Nil
    );
    assert_eq!(
        hgetall(&mut con, "res"),
        [(OWNER_A.to_string(), "2".to_string())]
    );
    let info = lock_info(&mut con, "res");
    assert_eq!(field(&info, "owner").as_deref(), Some(OWNER_A));
    assert_eq!(field(&info, "holds").as_deref(), Some("2"));
    let p = pttl(&mut con, "res");
    assert!(p > 50000 && p <= 60000, "PTTL after script re-entry {p}");

    // The release script counts down, then removes the lock.
    assert_eq!(
        script_release(&mut con, "res", "30000", OWNER_A),
        Value::Int(0)
    );
    assert_eq!(lock_field(&mut con, "res", "holds").as_deref(), Some("1"));
    assert_eq!(
        script_release(&mut con, "res", "30000", OWNER_A),
        Value::Int(1)
    );
    assert!(!exists(&mut con, "res"));
    assert_eq!(raw(&mut con, &["LOCK.INFO", "res"]).unwrap(), Value::Nil);
    assert_eq!(
        q::<i64>(&mut con, &["LOCK.ACQUIRE", "res", OWNER_B]),
        1,
        "free after the script released it"
    );
}

#[test]
fn release_to_zero_publishes_on_the_redisson_channel() {
    let server = Server::start();
    let mut con = server.client();
    let mut sub_con = server.client();
    let mut sub = sub_con.as_pubsub();
    let ch = channel("res");
    sub.subscribe(&ch).expect("subscribe");

    assert_eq!(q::<i64>(&mut con, &["LOCK.ACQUIRE", "res", OWNER_A]), 1);
    assert_eq!(q::<i64>(&mut con, &["LOCK.ACQUIRE", "res", OWNER_A]), 2);
    // A partial release publishes nothing.
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "res", OWNER_A]), 1);
    assert_nothing_published(&mut sub, &mut con, &ch, "marker-1");
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "res", OWNER_A]), 0);
    assert_eq!(next_message(&mut sub), (ch.clone(), "0".to_string()));
    assert_nothing_published(&mut sub, &mut con, &ch, "marker-2");

    // A hash-tagged name keeps its own tag in the channel name.
    let tagged_ch = "redisson_lock__channel:{user}:lock";
    sub.subscribe(tagged_ch).expect("subscribe");
    assert_eq!(
        q::<i64>(&mut con, &["LOCK.ACQUIRE", "{user}:lock", OWNER_A]),
        1
    );
    assert_eq!(
        q::<i64>(&mut con, &["LOCK.RELEASE", "{user}:lock", OWNER_A]),
        0
    );
    assert_eq!(
        next_message(&mut sub),
        (tagged_ch.to_string(), "0".to_string())
    );
}

#[test]
fn redisson_notify_no_stops_publishing() {
    let server = Server::start();
    let mut con = server.client();
    let mut sub_con = server.client();
    let mut sub = sub_con.as_pubsub();
    let ch = channel("res");
    sub.subscribe(&ch).expect("subscribe");

    let _: () = q(&mut con, &["CONFIG", "SET", "lock.redisson-notify", "no"]);
    assert_eq!(q::<i64>(&mut con, &["LOCK.ACQUIRE", "res", OWNER_A]), 1);
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "res", OWNER_A]), 0);
    assert_eq!(q::<i64>(&mut con, &["LOCK.ACQUIRE", "res", OWNER_A]), 1);
    assert_eq!(q::<i64>(&mut con, &["LOCK.FORCERELEASE", "res"]), 1);
    assert!(!exists(&mut con, "res"));
    assert_nothing_published(&mut sub, &mut con, &ch, "marker-off");

    let _: () = q(&mut con, &["CONFIG", "SET", "lock.redisson-notify", "yes"]);
    assert_eq!(q::<i64>(&mut con, &["LOCK.ACQUIRE", "res", OWNER_A]), 1);
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "res", OWNER_A]), 0);
    assert_eq!(next_message(&mut sub), (ch, "0".to_string()));
}

#[test]
fn forcerelease_publishes_on_the_redisson_channel() {
    let server = Server::start();
    let mut con = server.client();
    let mut sub_con = server.client();
    let mut sub = sub_con.as_pubsub();
    let ch = channel("res");
    sub.subscribe(&ch).expect("subscribe");

    // A lock the script took, removed by force.
    assert_eq!(
        script_acquire(&mut con, "res", "30000", OWNER_A),
        Value::Nil
    );
    assert_eq!(q::<i64>(&mut con, &["LOCK.FORCERELEASE", "res"]), 1);
    assert_eq!(next_message(&mut sub), (ch.clone(), "0".to_string()));
    assert!(!exists(&mut con, "res"));
    // Nothing to remove: nothing published.
    assert_eq!(q::<i64>(&mut con, &["LOCK.FORCERELEASE", "res"]), 0);
    assert_nothing_published(&mut sub, &mut con, &ch, "marker");
}

#[test]
fn hand_off_to_a_queued_caller_publishes_nothing() {
    let server = Server::start();
    let mut con = server.client();
    let mut sub_con = server.client();
    let mut sub = sub_con.as_pubsub();
    let ch = channel("res");
    sub.subscribe(&ch).expect("subscribe");

    assert_eq!(q::<i64>(&mut con, &["LOCK.ACQUIRE", "res", OWNER_A]), 1);
    let mut waiter = queue_waiter(&server, &mut con, "res", OWNER_B, &["BLOCK", "0"], 1);
    // The lock goes straight to the waiter: it was never free.
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "res", OWNER_A]), 0);
    assert_eq!(recv(&mut waiter).expect("waiter reply"), Value::Int(1));
    assert_eq!(
        q::<Vec<String>>(&mut con, &["HKEYS", "res"]),
        vec![OWNER_B.to_string()]
    );
    assert_nothing_published(&mut sub, &mut con, &ch, "marker");
    // Freed with nobody queued: Redisson's waiters are told.
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "res", OWNER_B]), 0);
    assert_eq!(next_message(&mut sub), (ch, "0".to_string()));
}

#[test]
fn script_release_hands_the_lock_to_a_blocked_waiter() {
    let server = Server::start();
    let mut con = server.client();
    assert_eq!(
        script_acquire(&mut con, "res", "30000", OWNER_A),
        Value::Nil
    );
    assert_eq!(
        script_acquire(&mut con, "res", "30000", OWNER_A),
        Value::Nil
    );

    let mut waiter = queue_waiter(
        &server,
        &mut con,
        "res",
        OWNER_B,
        &["PX", "45000", "BLOCK", "0"],
        1,
    );

    // Holds remain: the waiter keeps waiting.
    assert_eq!(
        script_release(&mut con, "res", "30000", OWNER_A),
        Value::Int(0)
    );
    assert_eq!(waiters(&mut con, "res"), 1);
    assert_eq!(
        lock_field(&mut con, "res", "owner").as_deref(),
        Some(OWNER_A)
    );

    // The last hold: the script deletes the key, the module hands it on.
    assert_eq!(
        script_release(&mut con, "res", "30000", OWNER_A),
        Value::Int(1)
    );
    assert_eq!(recv(&mut waiter).expect("waiter reply"), Value::Int(1));
    let info = lock_info(&mut con, "res");
    assert_eq!(field(&info, "owner").as_deref(), Some(OWNER_B));
    assert_eq!(field(&info, "holds").as_deref(), Some("1"));
    assert_eq!(field(&info, "waiters").as_deref(), Some("0"));
    let p = pttl(&mut con, "res");
    assert!(p > 35000 && p <= 45000, "the waiter's own lease: {p}");
    // Held for Redisson clients too.
    match script_acquire(&mut con, "res", "30000", OWNER_C) {
        Value::Int(p) => assert!(p > 0, "PTTL {p}"),
        other => panic!("script acquire after hand-off replied {other:?}"),
    }
}

/// Redisson's watchdog renewal: a new lease for the holder.
/// KEYS[1] = lock, ARGV[1] = lease ms, ARGV[2] = owner.
const RENEW_SCRIPT: &str = "\
if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then \
  redis.call('pexpire', KEYS[1], ARGV[1]); \
  return 1; \
end; \
return 0;";

#[test]
fn lease_set_by_redisson_renewal_expires_into_a_waiter() {
    let server = Server::start();
    let mut con = server.client();
    assert_eq!(
        script_acquire(&mut con, "res", "30000", OWNER_A),
        Value::Nil
    );
    let mut waiter = queue_waiter(
        &server,
        &mut con,
        "res",
        OWNER_B,
        &["PX", "30000", "BLOCK", "0"],
        1,
    );
    // The holder's Redisson watchdog sets a short lease that then runs out.
    let renewed: i64 = q(
        &mut con,
        &["EVAL", RENEW_SCRIPT, "1", "res", "100", OWNER_A],
    );
    assert_eq!(renewed, 1);
    assert_eq!(recv(&mut waiter).expect("waiter reply"), Value::Int(1));
    let info = lock_info(&mut con, "res");
    assert_eq!(field(&info, "owner").as_deref(), Some(OWNER_B));
    assert_eq!(field(&info, "holds").as_deref(), Some("1"));
    assert_eq!(field(&info, "waiters").as_deref(), Some("0"));
}
