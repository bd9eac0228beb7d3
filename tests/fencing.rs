//! Fencing tokens never go back: not after an unclean failover, a restart
//! from an older RDB or FLUSHALL, all of which take the token counter back;
//! and a token key does not outlive its lock for long (`lock.token-ttl-ms`).

use crate::common;

use common::*;
use redis::{Connection, Value};

/// A FENCE grant and its release: the token.
fn fenced_cycle(con: &mut Connection, key: &str, owner: &str) -> i64 {
    let token: i64 = q(con, &["LOCK.ACQUIRE", key, owner, "PX", "10000", "FENCE"]);
    let left: i64 = q(con, &["LOCK.RELEASE", key, owner]);
    assert_eq!(left, 0);
    token
}

fn fenced_cycles(con: &mut Connection, key: &str, n: usize) -> Vec<i64> {
    let tokens: Vec<i64> = (0..n)
        .map(|i| fenced_cycle(con, key, &format!("o{i}")))
        .collect();
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    tokens
}

/// Waits until `server`'s clock has moved past `token`'s millisecond: a
/// token granted from then on is above it by the clock alone.
fn wait_for_the_clock_past(server: &Server, token: i64) {
    let mut con = server.client();
    wait_until("the server's clock past the last token", || {
        token_floor(&mut con) > token
    });
}

/// The reproduction: 3 grants replicated, the replica cut off
/// from its master (it stops replicating, as after a network cut), 20 more
/// grants on the master, the master killed, the replica serving as the
/// master. Its counter is 20 grants behind (a counter alone would hand out
/// the 4th token again); its next token is above all 23.
#[test]
fn tokens_after_an_unclean_failover_are_above_every_earlier_one() {
    let mut master = Server::start();
    let replica = master.start_replica(Config::default());
    let mut con = master.client();
    let replicated = fenced_cycles(&mut con, "t", 3);
    wait_until("replica caught up", || master.replica_caught_up(&replica));

    let mut promoted = replica.client();
    q::<()>(&mut promoted, &["REPLICAOF", "NO", "ONE"]);
    let lost = fenced_cycles(&mut con, "t", 20);
    assert!(lost[0] > replicated[2]);
    master.kill();

    let counter: i64 = q(&mut promoted, &["GET", "redisson_lock_token:{t}"]);
    assert_eq!(counter, replicated[2], "the promoted replica's counter");
    wait_for_the_clock_past(&replica, lost[19]);
    let next = fenced_cycle(&mut promoted, "t", "after");
    assert!(next > lost[19], "{next} after {lost:?}");
}

/// FLUSHALL, or the token key deleted, restarts the counter; not the
/// tokens.
#[test]
fn flushall_or_a_deleted_token_key_does_not_take_tokens_back() {
    let server = Server::start();
    let mut con = server.client();
    let before = fenced_cycles(&mut con, "t", 5);
    q::<()>(&mut con, &["FLUSHALL"]);
    wait_for_the_clock_past(&server, before[4]);
    let after = fenced_cycle(&mut con, "t", "after");
    assert!(after > before[4], "{after} after {before:?}");

    q::<i64>(&mut con, &["DEL", "redisson_lock_token:{t}"]);
    wait_for_the_clock_past(&server, after);
    assert!(fenced_cycle(&mut con, "t", "later") > after);
}

/// Within one server tokens never repeat, not even when the counter is
/// gone in the same millisecond as the last grant (the clock floor alone
/// would give the same number again).
#[test]
fn a_counter_lost_in_the_same_millisecond_does_not_repeat_a_token() {
    let server = Server::start();
    let mut con = server.client();
    for reset in [&["FLUSHALL"][..], &["DEL", "redisson_lock_token:{t}"]] {
        let mut tx = redis::pipe();
        tx.atomic();
        tx.cmd("LOCK.ACQUIRE")
            .arg("t")
            .arg("a")
            .arg("PX")
            .arg(1000)
            .arg("FENCE");
        tx.cmd("LOCK.RELEASE").arg("t").arg("a").ignore();
        tx.cmd(reset[0]).arg(&reset[1..]).ignore();
        tx.cmd("LOCK.ACQUIRE")
            .arg("t")
            .arg("b")
            .arg("PX")
            .arg(1000)
            .arg("FENCE");
        tx.cmd("LOCK.RELEASE").arg("t").arg("b").ignore();
        let (first, second): (i64, i64) = tx.query(&mut con).expect("MULTI");
        assert!(second > first, "{reset:?}: {second} after {first}");
    }
}

/// A restart from an RDB saved before the last grants.
#[test]
fn a_restart_from_an_older_rdb_does_not_take_tokens_back() {
    let mut server = Server::start();
    let mut con = server.client();
    let saved = fenced_cycles(&mut con, "t", 3);
    q::<()>(&mut con, &["SAVE"]);
    let unsaved = fenced_cycles(&mut con, "t", 20);
    // No save points: SHUTDOWN does not save, the RDB is the older one.
    server.restart();
    let mut con = server.client();
    let counter: i64 = q(&mut con, &["GET", "redisson_lock_token:{t}"]);
    assert_eq!(counter, saved[2], "the reloaded counter");
    wait_for_the_clock_past(&server, unsaved[19]);
    let next = fenced_cycle(&mut con, "t", "after");
    assert!(next > unsaved[19], "{next} after {unsaved:?}");
}

/// A counter ahead of the clock (set by hand, or by a burst of grants) goes
/// on by one; Redisson's RFencedLock, which INCRs the same key, goes on
/// from the module's tokens, and the module from Redisson's. Tokens stay
/// exact through Lua (doubles): they are far below 2^53.
#[test]
fn tokens_go_on_from_a_counter_ahead_of_the_clock_and_from_redisson() {
    let server = Server::start();
    let mut con = server.client();
    let ahead = 9_000_000_000_000_000_i64;
    q::<()>(
        &mut con,
        &["SET", "redisson_lock_token:{t}", &ahead.to_string()],
    );
    assert_eq!(fenced_cycle(&mut con, "t", "a"), ahead + 1);

    let module_token = fenced_cycle(&mut con, "u", "a");
    assert!(module_token < 1 << 53, "{module_token}");
    // RFencedLock's acquire: HINCRBY, PEXPIRE, then INCR of the token key.
    let redisson_acquire = "if redis.call('exists', KEYS[1]) == 0 then \
        redis.call('hincrby', KEYS[1], ARGV[2], 1); \
        redis.call('pexpire', KEYS[1], ARGV[1]); \
        return redis.call('incr', KEYS[2]) end; return nil";
    let token: i64 = q(
        &mut con,
        &[
            "EVAL",
            redisson_acquire,
            "2",
            "u",
            "redisson_lock_token:{u}",
            "10000",
            "r:1",
        ],
    );
    assert_eq!(token, module_token + 1);
    let unlocked: i64 = q(&mut con, &["LOCK.RELEASE", "u", "r:1"]);
    assert_eq!(unlocked, 0);
    let after = fenced_cycle(&mut con, "u", "b");
    assert!(after > token);
    // The counter is Redisson's now: it keeps no expiry (see below), and
    // a counter set without one (`{t}`, as Redisson's INCR creates it) is
    // not given one by the module's tokens either.
    assert_eq!(pttl(&mut con, "redisson_lock_token:{u}"), -1);
    assert_eq!(pttl(&mut con, "redisson_lock_token:{t}"), -1);
}

/// Redisson's RFencedLock INCRs the counter and never lets it expire; INCR
/// keeps the expiry the module gave the key, and once that key is gone
/// Redisson's next INCR hands out 1, below every token before it. So a
/// counter Redisson incremented loses its expiry (a PERSIST, replicated),
/// and its tokens go on from it however long the name stays idle.
#[test]
fn a_counter_redisson_increments_outlives_the_token_ttl() {
    let server = Config::default().module_arg("token-ttl-ms", "300").start();
    let replica = server.start_replica(Config::default());
    let mut con = server.client();
    let module_token = fenced_cycle(&mut con, "v", "a");
    assert!(pttl(&mut con, "redisson_lock_token:{v}") > 0);
    let redisson_token: i64 = q(&mut con, &["INCR", "redisson_lock_token:{v}"]);
    assert_eq!(redisson_token, module_token + 1);
    // The module hears the INCR and drops the expiry right after it.
    wait_until("the counter persisted", || {
        pttl(&mut con, "redisson_lock_token:{v}") == -1
    });
    wait_until("the replica caught up", || {
        server.replica_caught_up(&replica)
    });
    assert_eq!(pttl(&mut replica.client(), "redisson_lock_token:{v}"), -1);
    // A name only the module fences, fenced after it, still leaves nothing
    // once idle; by then the other counter would have expired too.
    fenced_cycle(&mut con, "w", "a");
    wait_until("the module-only counter expired", || {
        pttl(&mut con, "redisson_lock_token:{w}") == -2
    });
    let next: i64 = q(&mut con, &["INCR", "redisson_lock_token:{v}"]);
    assert_eq!(next, redisson_token + 1);
    // The module's tokens go on from it, and leave it without an expiry.
    let module_again = fenced_cycle(&mut con, "v", "b");
    assert!(module_again > next);
    assert_eq!(pttl(&mut con, "redisson_lock_token:{v}"), -1);
}

/// A token key lives `lock.token-ttl-ms` after its latest token, or until
/// the lease it fenced ends if that is later.
#[test]
fn a_token_key_lives_its_ttl_or_its_fenced_lease() {
    let server = Config::default().module_arg("token-ttl-ms", "2000").start();
    let mut con = server.client();
    assert_eq!(config_get(&mut con, "lock.token-ttl-ms"), "2000");
    let _: i64 = q(
        &mut con,
        &["LOCK.ACQUIRE", "short", "o", "PX", "100", "FENCE"],
    );
    assert_in(
        pttl(&mut con, "redisson_lock_token:{short}"),
        1000,
        2000,
        "token key TTL",
    );
    let token: i64 = q(
        &mut con,
        &["LOCK.ACQUIRE", "long", "o", "PX", "60000", "FENCE"],
    );
    assert!(token > 0);
    assert_in(
        pttl(&mut con, "redisson_lock_token:{long}"),
        59000,
        60000,
        "kept for the fenced lease",
    );
    // A shorter TTL later does not shorten it.
    q::<()>(&mut con, &["CONFIG", "SET", "lock.token-ttl-ms", "1"]);
    fenced_cycle(&mut con, "long2", "o");
    let _: i64 = q(&mut con, &["LOCK.RELEASE", "long", "o"]);
    let _: i64 = q(
        &mut con,
        &["LOCK.ACQUIRE", "long", "p", "PX", "10", "FENCE"],
    );
    assert!(pttl(&mut con, "redisson_lock_token:{long}") > 50000);
}

/// Idle locks leave nothing behind: a million names, each taken once with
/// FENCE and released, leave no key once the token TTL has passed.
#[test]
fn a_million_fenced_names_leave_no_key_behind() {
    let server = Config::default().module_arg("token-ttl-ms", "1000").start();
    let mut con = server.client();
    const NAMES: usize = 1_000_000;
    const BATCH: usize = 10_000;
    const LEASE_MS: i64 = 10_000;
    for start in (0..NAMES).step_by(BATCH) {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for i in start..start + BATCH {
            let name = format!("n{i}");
            pipe.cmd("LOCK.ACQUIRE")
                .arg(&name)
                .arg("o")
                .arg("PX")
                .arg(LEASE_MS)
                .arg("FENCE");
            pipe.cmd("LOCK.RELEASE").arg(&name).arg("o");
        }
        let sent = now_ms();
        let replies: Vec<Value> = pipe.query(&mut con).expect("pipeline");
        let took = now_ms() - sent;
        for (i, pair) in replies.chunks(2).enumerate() {
            let token = match &pair[0] {
                Value::Int(t) => *t,
                other => panic!("n{}: acquire answered {other:?}", start + i),
            };
            assert!(token > 0, "n{}: token {token}", start + i);
            match &pair[1] {
                Value::Int(0) => {}
                // The lease ran out before the release: only if the
                // machine stalled (the wall clock, which expiry follows,
                // moved a whole lease) while this batch ran.
                Value::ServerError(e) if e.code() == "NOTOWNER" => assert!(
                    took >= LEASE_MS,
                    "n{}: released NOTOWNER {took} ms after the batch was sent",
                    start + i
                ),
                other => panic!("n{}: release answered {other:?}", start + i),
            }
        }
    }
    // Each name left its token key (the latest ones at least are there).
    assert!(q::<i64>(&mut con, &["DBSIZE"]) > 0);
    wait_until("every token key expired", || {
        q::<i64>(&mut con, &["DBSIZE"]) == 0
    });
    let info: Value = q(&mut con, &["LOCK.INFO", "n0"]);
    assert_eq!(info, Value::Nil);
}
