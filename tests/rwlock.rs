//! Read-write locks: LOCK.RACQUIRE / LOCK.WACQUIRE with LOCK.RELEASE,
//! RENEW, FORCERELEASE and INFO, on Redisson's RReadWriteLock layout.
//! Readers share, a writer is alone, waiters are served first come first
//! served with runs of readers granted together, downgrade and upgrade
//! rules, per-hold leases, Redisson interop both ways, and replication.

use crate::common;
use common::*;

const READ_ACQUIRE: &str = include_str!("../scripts/redisson-read-acquire.lua");
const READ_RELEASE: &str = include_str!("../scripts/redisson-read-release.lua");
const WRITE_ACQUIRE: &str = include_str!("../scripts/redisson-write-acquire.lua");
const WRITE_RELEASE: &str = include_str!("../scripts/redisson-write-release.lua");

fn racquire(con: &mut Connection, key: &str, owner: &str, opts: &[&str]) -> Value {
    let mut args = vec!["LOCK.RACQUIRE", key, owner];
    args.extend_from_slice(opts);
    q(con, &args)
}

fn wacquire(con: &mut Connection, key: &str, owner: &str, opts: &[&str]) -> Value {
    let mut args = vec!["LOCK.WACQUIRE", key, owner];
    args.extend_from_slice(opts);
    q(con, &args)
}

fn int(v: Value) -> i64 {
    match v {
        Value::Int(n) => n,
        other => panic!("expected an integer, got {other:?}"),
    }
}

fn release(con: &mut Connection, args: &[&str]) -> i64 {
    let mut all = vec!["LOCK.RELEASE"];
    all.extend_from_slice(args);
    q(con, &all)
}

/// Sends a blocking command on a new client and waits until it is the
/// `nth` waiter of its key.
fn queued(server: &Server, con: &mut Connection, args: &[&str], nth: i64) -> Connection {
    let mut w = server.client();
    send(&mut w, args);
    wait_for_waiters(con, args[1], nth);
    w
}

fn sorted(mut pairs: Vec<(String, String)>) -> Vec<(String, String)> {
    pairs.sort();
    pairs
}

fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
    sorted(
        items
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect(),
    )
}

fn lease_key(lock: &str, owner: &str, hold: i64) -> String {
    format!("{{{lock}}}:{owner}:rwlock_timeout:{hold}")
}

/// The readers map of LOCK.INFO (RESP2: a flat array), as sorted pairs.
fn readers(con: &mut Connection, key: &str) -> Vec<(String, String)> {
    let Value::Array(items) = raw(con, &["LOCK.INFO", key]).expect("LOCK.INFO") else {
        return Vec::new();
    };
    let Some(Value::Array(readers)) = items
        .chunks(2)
        .find(|kv| text(&kv[0]) == "readers")
        .map(|kv| kv[1].clone())
    else {
        panic!("LOCK.INFO {key} has no readers map: {items:?}");
    };
    sorted(
        readers
            .chunks(2)
            .map(|kv| (text(&kv[0]), text(&kv[1])))
            .collect(),
    )
}

#[test]
fn readers_share_and_a_writer_is_alone_on_redissons_layout() {
    let server = Server::start();
    let mut con = server.client();
    assert_eq!(
        racquire(&mut con, "doc", "a", &["PX", "5000"]),
        Value::Int(1)
    );
    assert_eq!(
        racquire(&mut con, "doc", "b", &["PX", "10000"]),
        Value::Int(1)
    );
    assert_eq!(
        racquire(&mut con, "doc", "a", &["PX", "5000"]),
        Value::Int(2)
    );
    assert_eq!(
        sorted(hgetall(&mut con, "doc")),
        pairs(&[("mode", "read"), ("a", "2"), ("b", "1")])
    );
    // One lease key per read hold; the hash lives as long as the longest.
    for (owner, hold, lease) in [("a", 1, 5000), ("a", 2, 5000), ("b", 1, 10000)] {
        let ttl = pttl(&mut con, &lease_key("doc", owner, hold));
        assert!(ttl > lease - 1000 && ttl <= lease, "{owner}:{hold} {ttl}");
        assert_eq!(
            q::<String>(&mut con, &["GET", &lease_key("doc", owner, hold)]),
            "1"
        );
    }
    let ttl = pttl(&mut con, "doc");
    assert!(ttl > 9000 && ttl <= 10000, "{ttl}");

    let info = lock_info(&mut con, "doc");
    assert_eq!(field(&info, "mode").as_deref(), Some("read"));
    assert_eq!(field(&info, "writer"), None);
    assert_eq!(readers(&mut con, "doc"), pairs(&[("a", "2"), ("b", "1")]));

    // Busy for a writer: nil without BLOCK, and nothing changed.
    let before = hgetall(&mut con, "doc");
    assert_eq!(wacquire(&mut con, "doc", "w", &[]), Value::Nil);
    assert_eq!(hgetall(&mut con, "doc"), before);

    // The last read hold deletes the hash (and its lease keys).
    assert_eq!(release(&mut con, &["doc", "a"]), 1);
    assert!(!exists(&mut con, &lease_key("doc", "a", 2)));
    assert_eq!(release(&mut con, &["doc", "a"]), 0);
    assert_eq!(release(&mut con, &["doc", "b"]), 0);
    assert!(!exists(&mut con, "doc"));
    assert_eq!(
        q::<Vec<String>>(&mut con, &["KEYS", "*"]),
        Vec::<String>::new()
    );

    assert_eq!(
        wacquire(&mut con, "doc", "w", &["PX", "3000"]),
        Value::Int(1)
    );
    assert_eq!(
        wacquire(&mut con, "doc", "w", &["PX", "3000"]),
        Value::Int(2)
    );
    assert_eq!(
        sorted(hgetall(&mut con, "doc")),
        pairs(&[("mode", "write"), ("w:write", "2")])
    );
    let info = lock_info(&mut con, "doc");
    assert_eq!(field(&info, "mode").as_deref(), Some("write"));
    assert_eq!(field(&info, "writer").as_deref(), Some("w"));
    assert_eq!(field(&info, "write_holds").as_deref(), Some("2"));
    assert_eq!(racquire(&mut con, "doc", "r", &[]), Value::Nil);
    assert_eq!(wacquire(&mut con, "doc", "x", &[]), Value::Nil);
    assert_eq!(
        err(&mut con, &["LOCK.RELEASE", "doc", "r"]),
        "NOTOWNER the owner holds no hold on this lock"
    );
}

#[test]
fn a_waiting_writer_queues_new_readers_and_a_release_grants_the_run_of_readers_at_once() {
    let server = Server::start();
    let mut con = server.client();
    assert_eq!(
        wacquire(&mut con, "k", "w1", &["PX", "60000"]),
        Value::Int(1)
    );
    let block = ["PX", "60000", "BLOCK", "0"];
    let cmd = |c: &'static str, owner: &'static str| {
        let mut args = vec![c, "k", owner];
        args.extend_from_slice(&block);
        args
    };
    let mut r1 = queued(&server, &mut con, &cmd("LOCK.RACQUIRE", "r1"), 1);
    let mut r2 = queued(&server, &mut con, &cmd("LOCK.RACQUIRE", "r2"), 2);
    let mut w2 = queued(&server, &mut con, &cmd("LOCK.WACQUIRE", "w2"), 3);
    let mut r3 = queued(&server, &mut con, &cmd("LOCK.RACQUIRE", "r3"), 4);

    // One release hands the lock to both readers at the head, in the same
    // step: they hold it together by the time the release is answered.
    assert_eq!(release(&mut con, &["k", "w1"]), 0);
    assert_eq!(readers(&mut con, "k"), pairs(&[("r1", "1"), ("r2", "1")]));
    assert_eq!(waiters(&mut con, "k"), 2);
    assert_eq!(recv(&mut r1).unwrap(), Value::Int(1));
    assert_eq!(recv(&mut r2).unwrap(), Value::Int(1));
    assert_eq!(
        sorted(hgetall(&mut con, "k")),
        pairs(&[("mode", "read"), ("r1", "1"), ("r2", "1")])
    );

    // The writer waits; so a new reader queues behind it instead of joining
    // the readers (no writer starvation)...
    assert_eq!(racquire(&mut con, "k", "late", &[]), Value::Nil);
    // ...while a reader that holds re-enters.
    assert_eq!(
        racquire(&mut con, "k", "r1", &["PX", "60000"]),
        Value::Int(2)
    );

    assert_eq!(release(&mut con, &["k", "r1"]), 1);
    assert_eq!(release(&mut con, &["k", "r1"]), 0);
    assert_eq!(waiters(&mut con, "k"), 2);
    assert_eq!(release(&mut con, &["k", "r2"]), 0);
    assert_eq!(recv(&mut w2).unwrap(), Value::Int(1));
    assert_eq!(lock_field(&mut con, "k", "writer").as_deref(), Some("w2"));

    assert_eq!(release(&mut con, &["k", "w2"]), 0);
    assert_eq!(recv(&mut r3).unwrap(), Value::Int(1));
    assert_eq!(waiters(&mut con, "k"), 0);
    assert_eq!(server.stat("handed_off"), 4);
    // Freed, the key can become an exclusive lock (Redisson's RLock).
    assert_eq!(release(&mut con, &["k", "r3"]), 0);
    assert_eq!(acquire(&mut con, "k", "x", &[]), Value::Int(1));
    assert_eq!(hgetall(&mut con, "k"), pairs(&[("x", "1")]));
}

#[test]
fn a_writer_downgrades_by_keeping_its_read_holds() {
    let server = Server::start();
    let mut con = server.client();
    assert_eq!(
        wacquire(&mut con, "d", "w", &["PX", "60000"]),
        Value::Int(1)
    );
    assert_eq!(
        racquire(&mut con, "d", "w", &["PX", "60000"]),
        Value::Int(1)
    );
    let mut reader = queued(
        &server,
        &mut con,
        &["LOCK.RACQUIRE", "d", "r", "BLOCK", "0"],
        1,
    );
    assert_eq!(
        err(&mut con, &["LOCK.RELEASE", "d", "w"]),
        "ERR the owner holds both read and write holds: name READ or WRITE"
    );
    assert_eq!(release(&mut con, &["d", "w", "write"]), 0);
    // Still a reader; the waiting reader joins it.
    assert_eq!(recv(&mut reader).unwrap(), Value::Int(1));
    assert_eq!(
        sorted(hgetall(&mut con, "d")),
        pairs(&[("mode", "read"), ("w", "1"), ("r", "1")])
    );
    assert_eq!(wacquire(&mut con, "d", "other", &[]), Value::Nil);
    assert_eq!(release(&mut con, &["d", "w", "READ"]), 0);
    assert_eq!(
        hgetall(&mut con, "d"),
        pairs(&[("mode", "read"), ("r", "1")])
    );
    assert_eq!(
        err(&mut con, &["LOCK.RELEASE", "d", "r", "sideways"]),
        "ERR syntax error: expected READ or WRITE, got 'sideways'"
    );
}

#[test]
fn a_reader_cannot_upgrade_beside_others_but_may_alone() {
    let server = Server::start();
    let mut con = server.client();
    racquire(&mut con, "u", "a", &[]);
    racquire(&mut con, "u", "b", &[]);
    let deadlock = "DEADLOCK the owner holds read holds and other readers hold the lock: \
                    the write lock would wait for its own read holds";
    assert_eq!(err(&mut con, &["LOCK.WACQUIRE", "u", "a"]), deadlock);
    // Refused at once, also when asked to wait.
    assert_eq!(
        err(&mut con, &["LOCK.WACQUIRE", "u", "a", "BLOCK", "0"]),
        deadlock
    );
    assert_eq!(waiters(&mut con, "u"), 0);
    release(&mut con, &["u", "b"]);
    assert_eq!(
        wacquire(&mut con, "u", "a", &["PX", "60000"]),
        Value::Int(1)
    );
    assert_eq!(
        sorted(hgetall(&mut con, "u")),
        pairs(&[("mode", "write"), ("a", "1"), ("a:write", "1")])
    );
    assert_eq!(racquire(&mut con, "u", "b", &[]), Value::Nil);
}

#[test]
fn wrong_kind_calls_and_reserved_owners_are_errors() {
    let server = Server::start();
    let mut con = server.client();
    acquire(&mut con, "ex", "o", &[]);
    let holds_exclusive = "WRONGTYPE key holds an exclusive lock: use LOCK.ACQUIRE, \
                           and LOCK.RELEASE without READ or WRITE";
    assert_eq!(
        err(&mut con, &["LOCK.RACQUIRE", "ex", "o"]),
        holds_exclusive
    );
    assert_eq!(
        err(&mut con, &["LOCK.WACQUIRE", "ex", "p", "BLOCK", "0"]),
        holds_exclusive
    );
    assert_eq!(
        err(&mut con, &["LOCK.RELEASE", "ex", "o", "READ"]),
        holds_exclusive
    );

    racquire(&mut con, "rw", "o", &[]);
    let holds_rw = "WRONGTYPE key holds a read-write lock: use LOCK.RACQUIRE or LOCK.WACQUIRE";
    assert_eq!(err(&mut con, &["LOCK.ACQUIRE", "rw", "o"]), holds_rw);
    assert_eq!(
        err(&mut con, &["LOCK.ACQUIRE", "rw", "p", "BLOCK", "0"]),
        holds_rw
    );

    for owner in ["mode", "o:write"] {
        let e = err(&mut con, &["LOCK.RACQUIRE", "fresh", owner]);
        assert!(
            e.starts_with("ERR owner '") && e.contains("reserved"),
            "{e}"
        );
    }
    let _: () = q(&mut con, &["SET", "str", "x"]);
    assert!(err(&mut con, &["LOCK.RACQUIRE", "str", "o"]).starts_with("WRONGTYPE"));
    assert!(err(&mut con, &["LOCK.RACQUIRE", "{}x", "o"]).starts_with("CROSSSLOT"));
    assert!(!exists(&mut con, "fresh"));
}

#[test]
fn leases_end_per_hold_and_waiters_are_handed_the_lock() {
    let server = Server::start();
    let mut con = server.client();
    // A reader that stops renewing loses its hold at its own lease end,
    // while another reader's longer lease keeps the hash.
    racquire(&mut con, "e", "short", &["PX", "200"]);
    racquire(&mut con, "e", "long", &["PX", "60000"]);
    let mut w = queued(
        &server,
        &mut con,
        &["LOCK.WACQUIRE", "e", "w", "PX", "300", "BLOCK", "0"],
        1,
    );
    wait_until("the short reader's hold ends", || {
        readers(&mut con, "e") == pairs(&[("long", "1")])
            && !hgetall(&mut con, "e").iter().any(|(f, _)| f == "short")
    });
    assert_eq!(waiters(&mut con, "e"), 1);
    assert_eq!(release(&mut con, &["e", "long"]), 0);
    assert_eq!(recv(&mut w).unwrap(), Value::Int(1));

    // The writer's lease ends: the readers waiting get it together.
    let mut r1 = queued(
        &server,
        &mut con,
        &["LOCK.RACQUIRE", "e", "r1", "BLOCK", "0"],
        1,
    );
    let mut r2 = queued(
        &server,
        &mut con,
        &["LOCK.RACQUIRE", "e", "r2", "BLOCK", "0"],
        2,
    );
    assert_eq!(recv(&mut r1).unwrap(), Value::Int(1));
    assert_eq!(recv(&mut r2).unwrap(), Value::Int(1));
    assert_eq!(readers(&mut con, "e"), pairs(&[("r1", "1"), ("r2", "1")]));
    assert_eq!(lock_field(&mut con, "e", "writer"), None);
}

#[test]
fn renewal_covers_the_owners_holds_and_the_hash_follows_the_longest() {
    let server = Server::start();
    let mut con = server.client();
    racquire(&mut con, "n", "a", &["PX", "1000"]);
    racquire(&mut con, "n", "a", &["PX", "1000"]);
    racquire(&mut con, "n", "b", &["PX", "2000"]);
    assert_eq!(
        q::<i64>(&mut con, &["LOCK.RENEW", "n", "a", "PX", "50000"]),
        50000
    );
    for hold in [1, 2] {
        assert!(pttl(&mut con, &lease_key("n", "a", hold)) > 40000);
    }
    assert!(pttl(&mut con, &lease_key("n", "b", 1)) <= 2000);
    assert!(pttl(&mut con, "n") > 40000);
    // Shortened again, the hash follows down to b's lease.
    q::<i64>(&mut con, &["LOCK.RENEW", "n", "a", "PX", "500"]);
    let ttl = pttl(&mut con, "n");
    assert!(ttl > 500 && ttl <= 2000, "{ttl}");
    assert!(err(&mut con, &["LOCK.RENEW", "n", "c"]).starts_with("NOTOWNER"));
}

#[test]
fn fencing_tokens_count_every_grant_of_both_kinds() {
    let server = Server::start();
    let mut con = server.client();
    // One counter for both kinds: each grant takes the next token.
    let before = token_floor(&mut con);
    let a = int(racquire(&mut con, "f", "a", &["FENCE"]));
    assert_token_between(a, before, token_floor(&mut con), 0, "first read");
    let b = int(racquire(&mut con, "f", "b", &["FENCE"]));
    assert!(b > a, "second read grant: {b} after {a}");
    let mut w = queued(
        &server,
        &mut con,
        &["LOCK.WACQUIRE", "f", "w", "BLOCK", "0", "FENCE"],
        1,
    );
    release(&mut con, &["f", "a"]);
    release(&mut con, &["f", "b"]);
    let w = int(recv(&mut w).unwrap());
    assert!(w > b, "the write grant: {w} after {b}");
    assert_eq!(lock_field(&mut con, "f", "token"), Some(w.to_string()));
}

#[test]
fn force_release_removes_every_hold_and_hands_the_lock_on() {
    let server = Server::start();
    let mut con = server.client();
    racquire(&mut con, "g", "a", &[]);
    racquire(&mut con, "g", "a", &[]);
    racquire(&mut con, "g", "b", &[]);
    let mut w = queued(
        &server,
        &mut con,
        &["LOCK.WACQUIRE", "g", "w", "BLOCK", "0"],
        1,
    );
    assert_eq!(q::<i64>(&mut con, &["LOCK.FORCERELEASE", "g"]), 1);
    assert_eq!(recv(&mut w).unwrap(), Value::Int(1));
    assert_eq!(
        hgetall(&mut con, "g"),
        pairs(&[("mode", "write"), ("w:write", "1")])
    );
    assert_eq!(
        q::<Vec<String>>(&mut con, &["KEYS", "*rwlock_timeout*"]),
        Vec::<String>::new()
    );
}

mod redisson {
    use super::*;

    const CLIENT: &str = "8743c9c0-0795-4907-87fd-6c719a6b4586";

    fn owner(thread: u32) -> String {
        format!("{CLIENT}:{thread}")
    }

    fn channel(lock: &str) -> String {
        format!("redisson_rwlock:{{{lock}}}")
    }

    fn read_lock(con: &mut Connection, lock: &str, lease: &str, owner: &str) -> Value {
        let prefix = format!("{{{lock}}}:{owner}:rwlock_timeout");
        let write = format!("{owner}:write");
        q(
            con,
            &[
                "EVAL",
                READ_ACQUIRE,
                "2",
                lock,
                &prefix,
                lease,
                owner,
                &write,
            ],
        )
    }

    fn read_unlock(con: &mut Connection, lock: &str, owner: &str) -> Value {
        let prefix = format!("{{{lock}}}:{owner}:rwlock_timeout");
        let all = format!("{{{lock}}}");
        let ch = channel(lock);
        q(
            con,
            &[
                "EVAL",
                READ_RELEASE,
                "4",
                lock,
                &ch,
                &prefix,
                &all,
                "0",
                owner,
            ],
        )
    }

    fn write_lock(con: &mut Connection, lock: &str, lease: &str, owner: &str) -> Value {
        let write = format!("{owner}:write");
        q(con, &["EVAL", WRITE_ACQUIRE, "1", lock, lease, &write])
    }

    fn write_unlock(con: &mut Connection, lock: &str, owner: &str) -> Value {
        let write = format!("{owner}:write");
        let ch = channel(lock);
        q(
            con,
            &["EVAL", WRITE_RELEASE, "2", lock, &ch, "1", "30000", &write],
        )
    }

    #[test]
    fn redisson_readers_and_module_readers_share_and_see_each_others_leases() {
        let server = Server::start();
        let mut con = server.client();
        let (a, b) = (owner(1), owner(2));
        assert_eq!(read_lock(&mut con, "s", "60000", &a), Value::Nil);
        assert_eq!(racquire(&mut con, "s", &b, &["PX", "5000"]), Value::Int(1));
        assert_eq!(readers(&mut con, "s"), pairs(&[(&a, "1"), (&b, "1")]));
        // Redisson's read unlock sets the hash TTL from the lease keys left:
        // the module's reader's 5 s lease key is one of them.
        assert_eq!(read_unlock(&mut con, "s", &a), Value::Int(0));
        let ttl = pttl(&mut con, "s");
        assert!(ttl > 3000 && ttl <= 5000, "{ttl}");
        assert_eq!(readers(&mut con, "s"), pairs(&[(&b, "1")]));
        // And the module's release of a Redisson hold follows its lease key.
        assert_eq!(read_lock(&mut con, "s", "60000", &a), Value::Nil);
        assert_eq!(release(&mut con, &["s", &b]), 0);
        let ttl = pttl(&mut con, "s");
        assert!(ttl > 50000, "{ttl}");
        // Writers of either kind are refused while they read.
        assert_eq!(wacquire(&mut con, "s", &b, &[]), Value::Nil);
        assert!(matches!(write_lock(&mut con, "s", "1000", &b), Value::Int(t) if t > 0));
    }

    #[test]
    fn a_redisson_release_hands_the_lock_to_a_module_waiter_and_module_releases_publish() {
        let server = Server::start();
        let mut con = server.client();
        let mut listener = server.client();
        let mut sub = listener.as_pubsub();
        sub.subscribe(channel("h")).expect("subscribe");
        let (a, w) = (owner(1), owner(7));

        assert_eq!(write_lock(&mut con, "h", "60000", &a), Value::Nil);
        let mut waiter = queued(
            &server,
            &mut con,
            &["LOCK.RACQUIRE", "h", "m", "PX", "60000", "BLOCK", "0"],
            1,
        );
        // Redisson's write unlock deletes the hash and publishes 1; the
        // module hands the lock to its waiter.
        assert_eq!(write_unlock(&mut con, "h", &a), Value::Int(1));
        assert_eq!(recv(&mut waiter).unwrap(), Value::Int(1));
        let msg = sub.get_message().expect("message");
        assert_eq!(msg.get_payload::<String>().unwrap(), "1");
        assert_eq!(readers(&mut con, "h"), pairs(&[("m", "1")]));

        // A Redisson reader joins, and a Redisson writer sees it busy.
        assert_eq!(read_lock(&mut con, "h", "60000", &w), Value::Nil);
        assert!(matches!(write_lock(&mut con, "h", "1000", &a), Value::Int(t) if t > 0));
        assert_eq!(read_unlock(&mut con, "h", &w), Value::Int(0));
        // The module's last read release deletes and publishes 0, as
        // Redisson's read unlock does.
        assert_eq!(release(&mut con, &["h", "m"]), 0);
        assert!(!exists(&mut con, "h"));
        let msg = sub.get_message().expect("message");
        assert_eq!(msg.get_payload::<String>().unwrap(), "0");

        // A module writer's last release publishes 1.
        assert_eq!(wacquire(&mut con, "h", "mw", &[]), Value::Int(1));
        assert!(matches!(write_lock(&mut con, "h", "1000", &a), Value::Int(t) if t > 0));
        assert_eq!(release(&mut con, &["h", "mw"]), 0);
        let msg = sub.get_message().expect("message");
        assert_eq!(msg.get_payload::<String>().unwrap(), "1");
    }

    /// A module writer's release that hands the lock to queued module
    /// readers leaves it readable: Redisson's waiting readers hear `1` (as
    /// after Redisson's own write unlock) and can share it at once. A
    /// hand-off to a writer tells them nothing: none could get in.
    #[test]
    fn a_write_release_handing_the_lock_to_readers_wakes_redisson_readers() {
        let server = Server::start();
        let mut con = server.client();
        let mut listener = server.client();
        let mut sub = listener.as_pubsub();
        sub.subscribe(channel("g")).expect("subscribe");

        assert_eq!(
            wacquire(&mut con, "g", "mw", &["PX", "60000"]),
            Value::Int(1)
        );
        let mut writer = queued(
            &server,
            &mut con,
            &["LOCK.WACQUIRE", "g", "mw2", "PX", "60000", "BLOCK", "0"],
            1,
        );
        // Writer to writer: no message (the next one is a marker sent after).
        assert_eq!(release(&mut con, &["g", "mw"]), 0);
        assert_eq!(recv(&mut writer).unwrap(), Value::Int(1));
        let _: i64 = q(&mut con, &["PUBLISH", &channel("g"), "marker"]);
        let msg = sub.get_message().expect("message");
        assert_eq!(msg.get_payload::<String>().unwrap(), "marker");

        let mut reader = queued(
            &server,
            &mut con,
            &["LOCK.RACQUIRE", "g", "mr", "PX", "60000", "BLOCK", "0"],
            1,
        );
        assert_eq!(release(&mut con, &["g", "mw2"]), 0);
        assert_eq!(recv(&mut reader).unwrap(), Value::Int(1));
        let msg = sub
            .get_message()
            .expect("the hand-off to a reader published");
        assert_eq!(msg.get_payload::<String>().unwrap(), "1");
        // A Redisson reader woken by it gets in beside the module's reader.
        let r = owner(3);
        assert_eq!(read_lock(&mut con, "g", "60000", &r), Value::Nil);
        assert_eq!(readers(&mut con, "g"), pairs(&[("mr", "1"), (&r, "1")]));
    }
}

#[test]
fn replicas_with_and_without_the_module_end_with_the_masters_data() {
    let master = Config::default()
        .arg("repl-diskless-sync-delay", "0")
        .aof()
        .start();
    let with_module = master.start_replica(Config::default());
    let without_module = master.start_replica(Config::default().without_module());
    let mut con = master.client();

    // Readers handed on to a writer, a downgrade, a writer handed on to a
    // run of readers, a read hold ended by its lease (the timer drops its
    // field), a force release and fencing tokens.
    racquire(&mut con, "a", "r1", &["PX", "60000"]);
    racquire(&mut con, "a", "r2", &["PX", "60000", "FENCE"]);
    let mut w = queued(
        &master,
        &mut con,
        &["LOCK.WACQUIRE", "a", "w", "PX", "60000", "BLOCK", "0"],
        1,
    );
    release(&mut con, &["a", "r1"]);
    release(&mut con, &["a", "r2"]);
    assert_eq!(recv(&mut w).unwrap(), Value::Int(1));
    racquire(&mut con, "a", "w", &["PX", "60000"]);
    let mut r3 = queued(
        &master,
        &mut con,
        &["LOCK.RACQUIRE", "a", "r3", "PX", "60000", "BLOCK", "0"],
        1,
    );
    release(&mut con, &["a", "w", "WRITE"]);
    assert_eq!(recv(&mut r3).unwrap(), Value::Int(1));

    racquire(&mut con, "b", "short", &["PX", "100"]);
    racquire(&mut con, "b", "long", &["PX", "60000"]);
    let mut w2 = queued(
        &master,
        &mut con,
        &["LOCK.WACQUIRE", "b", "w2", "BLOCK", "0"],
        1,
    );
    wait_until("the short hold's field is dropped", || {
        !hgetall(&mut con, "b").iter().any(|(f, _)| f == "short")
    });
    release(&mut con, &["b", "long"]);
    assert_eq!(recv(&mut w2).unwrap(), Value::Int(1));

    let c1 = int(wacquire(&mut con, "c", "w", &["FENCE"]));
    racquire(&mut con, "c", "w", &[]);
    let mut r = queued(
        &master,
        &mut con,
        &["LOCK.RACQUIRE", "c", "r", "BLOCK", "0", "FENCE"],
        1,
    );
    assert_eq!(q::<i64>(&mut con, &["LOCK.FORCERELEASE", "c"]), 1);
    let c2 = int(recv(&mut r).unwrap());
    assert!(c2 > c1, "c: token {c2} after {c1}");

    // A key that changes kind under its waiters: an exclusive waiter
    // queued on an exclusive lock that a transaction turned into a
    // read-write lock is handed the lock when the read hold goes.
    assert_eq!(
        q::<i64>(&mut con, &["LOCK.ACQUIRE", "d", "x", "PX", "60000"]),
        1
    );
    let mut e = queued(
        &master,
        &mut con,
        &["LOCK.ACQUIRE", "d", "e", "PX", "60000", "BLOCK", "0"],
        1,
    );
    let _: () = redis::pipe()
        .atomic()
        .cmd("DEL")
        .arg("d")
        .cmd("HSET")
        .arg(&["d", "mode", "read", "r", "1"])
        .cmd("PEXPIRE")
        .arg(&["d", "60000"])
        .cmd("SET")
        .arg(&[lease_key("d", "r", 1).as_str(), "1", "PX", "60000"])
        .query(&mut con)
        .expect("MULTI/EXEC");
    assert_eq!(readers(&mut con, "d"), pairs(&[("r", "1")]));
    wait_for_waiters(&mut con, "d", 1);
    assert_eq!(release(&mut con, &["d", "r"]), 0);
    assert_eq!(recv(&mut e).unwrap(), Value::Int(1));
    assert_eq!(hgetall(&mut con, "d"), pairs(&[("e", "1")]));
    assert!(!exists(&mut con, &lease_key("d", "r", 1)));

    let mut sync = master.client();
    let _: i64 = q(&mut sync, &["PUBLISH", "test-sync-marker", "x"]);
    assert_eq!(q::<i64>(&mut sync, &["WAIT", "2", "5000"]), 2);
    let digest = |s: &Server| q::<String>(&mut s.client(), &["DEBUG", "DIGEST"]);
    let expected = digest(&master);
    assert_eq!(digest(&with_module), expected);
    assert_eq!(digest(&without_module), expected);
    for key in [
        "a",
        "b",
        "c",
        "d",
        "{a}:r3:rwlock_timeout:1",
        "{c}:r:rwlock_timeout:1",
        "redisson_lock_token:{a}",
        "redisson_lock_token:{c}",
    ] {
        let value = |s: &Server| q::<Vec<String>>(&mut s.client(), &["DEBUG", "DIGEST-VALUE", key]);
        assert_eq!(value(&without_module), value(&master), "{key}");
    }
    assert!(exists(&mut con, "{a}:r3:rwlock_timeout:1"));
    // The AOF replays to the same data.
    let mut master = master;
    master.restart();
    assert_eq!(digest(&master), expected);
}
