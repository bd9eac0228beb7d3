//! Every LOCK.* command, reply and error against a real server.

use crate::common;
use common::*;

use std::sync::Barrier;
use std::thread;
use std::time::Duration;

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
const NOTOWNER: &str = "NOTOWNER the owner holds no hold on this lock";
const EMPTY_OWNER: &str = "ERR owner must not be empty";
const TOKEN_NOT_INTEGER: &str =
    "ERR fencing token key holds a value that is not an integer or out of range";
const TOKEN_WRONGTYPE: &str = "WRONGTYPE fencing token key holds the wrong kind of value";

// ---------------------------------------------------------------- helpers

/// Every key of the db with its DUMP and absolute expiry (PEXPIRETIME), so
/// "nothing changed" covers values, types, leases and keys appearing.
type Snapshot = Vec<(String, Value, i64)>;

fn snapshot(con: &mut Connection) -> Snapshot {
    let mut keys: Vec<String> = q(con, &["KEYS", "*"]);
    keys.sort();
    keys.into_iter()
        .map(|k| {
            let dump: Value = q(con, &["DUMP", &k]);
            let at: i64 = q(con, &["PEXPIRETIME", &k]);
            (k, dump, at)
        })
        .collect()
}

/// `args` fails with exactly `want`, and the data set is unchanged.
fn assert_refused(con: &mut Connection, args: &[&str], want: &str) {
    let before = snapshot(con);
    assert_eq!(err(con, args), want, "{args:?}");
    assert_eq!(snapshot(con), before, "{args:?} changed the data");
}

/// `args` replies nil and the data set is unchanged.
fn assert_nil_unchanged(con: &mut Connection, args: &[&str]) {
    let before = snapshot(con);
    assert_eq!(raw(con, args).expect("reply"), Value::Nil, "{args:?}");
    assert_eq!(snapshot(con), before, "{args:?} changed the data");
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

/// Field `name` of a flat RESP2 name/value array.
fn flat_get<'a>(items: &'a [Value], name: &str) -> Option<&'a Value> {
    items
        .chunks(2)
        .find(|kv| text(&kv[0]) == name)
        .map(|kv| &kv[1])
}

/// An integer reply (a hold count or a fencing token).
fn int(v: Value) -> i64 {
    match v {
        Value::Int(n) => n,
        other => panic!("expected an integer, got {other:?}"),
    }
}

fn array(v: &Value) -> &[Value] {
    match v {
        Value::Array(items) => items,
        other => panic!("expected an array, got {other:?}"),
    }
}

// ---------------------------------------------------------------- LOCK.ACQUIRE

#[test]
fn acquire_new_lock_sets_owner_field_and_lease() {
    let server = Server::start();
    let mut con = server.client();
    assert_eq!(
        acquire(&mut con, "k", "o1", &["PX", "10000"]),
        Value::Int(1)
    );
    assert_eq!(q::<String>(&mut con, &["TYPE", "k"]), "hash");
    assert_eq!(hgetall(&mut con, "k"), pairs(&[("o1", "1")]));
    assert_in(pttl(&mut con, "k"), 9000, 10000, "PTTL after PX 10000");
    // Nothing else is written (no token key without FENCE).
    assert_eq!(q::<i64>(&mut con, &["DBSIZE"]), 1);
}

#[test]
fn acquire_reentry_counts_up_and_resets_the_lease() {
    let server = Server::start();
    let mut con = server.client();
    assert_eq!(acquire(&mut con, "k", "o", &["PX", "2000"]), Value::Int(1));
    assert_in(pttl(&mut con, "k"), 0, 2000, "first lease");
    assert_eq!(
        acquire(&mut con, "k", "o", &["PX", "100000"]),
        Value::Int(2)
    );
    assert_eq!(hgetall(&mut con, "k"), pairs(&[("o", "2")]));
    assert_in(
        pttl(&mut con, "k"),
        90000,
        100000,
        "longer lease on re-entry",
    );
    // A shorter lease on re-entry also replaces the current one.
    assert_eq!(acquire(&mut con, "k", "o", &["PX", "50000"]), Value::Int(3));
    assert_eq!(hgetall(&mut con, "k"), pairs(&[("o", "3")]));
    assert_in(
        pttl(&mut con, "k"),
        40000,
        50000,
        "shorter lease on re-entry",
    );
}

#[test]
fn acquire_busy_returns_nil_and_changes_nothing() {
    let server = Server::start();
    let mut con = server.client();
    let mut other = server.client();
    assert_eq!(acquire(&mut con, "k", "a", &["PX", "60000"]), Value::Int(1));
    assert_nil_unchanged(&mut other, &["LOCK.ACQUIRE", "k", "b"]);
    assert_nil_unchanged(&mut other, &["LOCK.ACQUIRE", "k", "b", "PX", "100"]);
    assert_nil_unchanged(&mut other, &["LOCK.ACQUIRE", "k", "b", "EX", "1"]);
    // A busy FENCE acquire does not consume a token.
    assert_nil_unchanged(&mut other, &["LOCK.ACQUIRE", "k", "b", "FENCE"]);
    assert!(!exists(&mut con, "redisson_lock_token:{k}"));
    assert_eq!(hgetall(&mut con, "k"), pairs(&[("a", "1")]));
    assert_eq!(waiters(&mut con, "k"), 0);
}

#[test]
fn acquire_ex_sets_the_lease_in_seconds() {
    let server = Server::start();
    let mut con = server.client();
    assert_eq!(acquire(&mut con, "k", "o", &["EX", "7"]), Value::Int(1));
    assert_in(pttl(&mut con, "k"), 6000, 7000, "EX 7");
    // The largest allowed durations are accepted.
    assert_eq!(
        acquire(&mut con, "k2", "o", &["PX", "9007199254740991"]),
        Value::Int(1)
    );
    assert!(pttl(&mut con, "k2") > 9_007_199_254_000_000);
    assert_eq!(
        acquire(&mut con, "k3", "o", &["EX", "1000000000000"]),
        Value::Int(1)
    );
    assert!(pttl(&mut con, "k3") > 999_999_000_000_000);
}

#[test]
fn acquire_options_are_case_insensitive() {
    let server = Server::start();
    let mut con = server.client();
    let before = token_floor(&mut con);
    let token = int(acquire(
        &mut con,
        "k",
        "o",
        &["px", "5000", "block", "10", "fence"],
    ));
    // `fence` took effect: the reply is a fencing token, not the hold count.
    assert_token_between(token, before, token_floor(&mut con), 0, "fence");
    assert_in(pttl(&mut con, "k"), 4000, 5000, "px 5000");
    assert_eq!(
        q::<i64>(&mut con, &["GET", "redisson_lock_token:{k}"]),
        token
    );
}

#[test]
fn acquire_block_on_busy_lock_times_out_with_nil() {
    let server = Server::start();
    let mut con = server.client();
    assert_eq!(acquire(&mut con, "k", "a", &["PX", "60000"]), Value::Int(1));
    let before = snapshot(&mut con);
    let mut waiter = server.client();
    assert_eq!(
        acquire(&mut waiter, "k", "b", &["BLOCK", "100"]),
        Value::Nil
    );
    assert_eq!(waiters(&mut con, "k"), 0);
    assert_eq!(snapshot(&mut con), before);
    assert_eq!(server.stat("wait_timeouts"), 1);
}

#[test]
fn default_lease_comes_from_config() {
    let server = Server::start();
    let mut con = server.client();
    assert_eq!(config_get(&mut con, "lock.default-lease-ms"), "30000");
    assert_eq!(acquire(&mut con, "k1", "o", &[]), Value::Int(1));
    assert_in(pttl(&mut con, "k1"), 29000, 30000, "built-in default");

    let _: () = q(
        &mut con,
        &["CONFIG", "SET", "lock.default-lease-ms", "5000"],
    );
    assert_eq!(config_get(&mut con, "lock.default-lease-ms"), "5000");
    assert_eq!(acquire(&mut con, "k2", "o", &[]), Value::Int(1));
    assert_in(pttl(&mut con, "k2"), 4000, 5000, "configured default");
    // Re-entry without PX also takes the default.
    assert_eq!(acquire(&mut con, "k1", "o", &[]), Value::Int(2));
    assert_in(pttl(&mut con, "k1"), 4000, 5000, "default on re-entry");
}

#[test]
fn default_lease_from_module_argument() {
    let server = Config::default()
        .module_arg("default-lease-ms", "7000")
        .start();
    let mut con = server.client();
    assert_eq!(config_get(&mut con, "lock.default-lease-ms"), "7000");
    assert_eq!(acquire(&mut con, "k", "o", &[]), Value::Int(1));
    assert_in(pttl(&mut con, "k"), 6000, 7000, "module arg default");
}

#[test]
fn config_set_out_of_range_is_refused() {
    let server = Server::start();
    let mut con = server.client();
    for bad in ["0", "-1", "9007199254740992", "abc"] {
        let e = err(&mut con, &["CONFIG", "SET", "lock.default-lease-ms", bad]);
        assert!(e.starts_with("ERR"), "CONFIG SET {bad}: {e}");
        assert!(e.contains("lock.default-lease-ms"), "CONFIG SET {bad}: {e}");
        assert_eq!(config_get(&mut con, "lock.default-lease-ms"), "30000");
    }
    // Both bounds are accepted.
    for good in ["1", "9007199254740991", "30000"] {
        let _: () = q(&mut con, &["CONFIG", "SET", "lock.default-lease-ms", good]);
        assert_eq!(config_get(&mut con, "lock.default-lease-ms"), good);
    }
}

/// Load arguments are checked as CONFIG SET checks values: anything it
/// would refuse, an unknown name, a name without a value or given twice
/// fails the load (and so the server's start) with the argument named in
/// the log, instead of starting on defaults, a 5 ms dead-peer timeout or a
/// zero lease.
#[test]
fn load_arguments_are_checked_and_refused_with_the_reason() {
    for (args, why) in [
        (
            &["bogus-option", "1"][..],
            "unknown load argument 'bogus-option'",
        ),
        (
            &["default_lease_ms", "5000"],
            "unknown load argument 'default_lease_ms'",
        ),
        (
            &["default-lease-ms"],
            "load argument default-lease-ms has no value",
        ),
        (
            &["default-lease-ms", "5000", "token-ttl-ms"],
            "load argument token-ttl-ms has no value",
        ),
        (
            &["default-lease-ms", "abc"],
            "load argument default-lease-ms 'abc' is not an integer (1 to 2^53-1)",
        ),
        (
            &["redisson-notify", "maybe"],
            "load argument redisson-notify 'maybe' must be yes or no",
        ),
        (
            &["default-lease-ms", "0"],
            "load argument default-lease-ms 0 is out of range (1 to 2^53-1)",
        ),
        (
            &["keepalive-dead-peer-ms", "5"],
            "load argument keepalive-dead-peer-ms 5 is out of range (1000 to 86400000)",
        ),
        (
            &["keepalive-max-hold-ms", "-5"],
            "load argument keepalive-max-hold-ms -5 is out of range",
        ),
        (
            &["token-ttl-ms", "5", "LOCK.TOKEN-TTL-MS", "6"],
            "load argument token-ttl-ms is given twice",
        ),
    ] {
        let config = Config {
            module_args: args.iter().map(|a| a.to_string()).collect(),
            ..Config::default()
        };
        let log = config.start_refused();
        assert!(log.contains(&format!("lock: {why}")), "{args:?}: {log}");
    }
    // Either name, in any case; both bounds.
    let server = Config::default()
        .module_arg("DEFAULT-LEASE-MS", "7000")
        .module_arg("lock.keepalive-dead-peer-ms", "1000")
        .module_arg("Lock.Redisson-Notify", "NO")
        .module_arg("keepalive-max-hold-ms", "0")
        .start();
    let mut con = server.client();
    assert_eq!(config_get(&mut con, "lock.default-lease-ms"), "7000");
    assert_eq!(config_get(&mut con, "lock.keepalive-dead-peer-ms"), "1000");
    assert_eq!(config_get(&mut con, "lock.redisson-notify"), "no");
    assert_eq!(config_get(&mut con, "lock.keepalive-max-hold-ms"), "0");
    assert_eq!(config_get(&mut con, "lock.token-ttl-ms"), "3600000");
    let _: Value = acquire(&mut con, "k", "o", &[]);
    let ttl = pttl(&mut con, "k");
    assert!((6000..=7000).contains(&ttl), "lease {ttl}");
}

/// A `lock.*` line of the configuration file is applied, and one the server
/// refuses stops it.
#[test]
fn settings_in_the_configuration_file_are_applied() {
    let server = Config::default()
        .arg("lock.default-lease-ms", "9000")
        .start();
    let mut con = server.client();
    assert_eq!(config_get(&mut con, "lock.default-lease-ms"), "9000");
    let log = Config::default()
        .arg("lock.default-lease-ms", "0")
        .start_refused();
    assert!(log.contains("lock.default-lease-ms"), "{log}");
}

#[test]
fn config_redisson_notify_yes_no() {
    let server = Server::start();
    let mut con = server.client();
    assert_eq!(config_get(&mut con, "lock.redisson-notify"), "yes");
    let _: () = q(&mut con, &["CONFIG", "SET", "lock.redisson-notify", "no"]);
    assert_eq!(config_get(&mut con, "lock.redisson-notify"), "no");
    let e = err(
        &mut con,
        &["CONFIG", "SET", "lock.redisson-notify", "maybe"],
    );
    assert!(e.starts_with("ERR"), "{e}");
    assert_eq!(config_get(&mut con, "lock.redisson-notify"), "no");
    let _: () = q(&mut con, &["CONFIG", "SET", "lock.redisson-notify", "yes"]);
    assert_eq!(config_get(&mut con, "lock.redisson-notify"), "yes");
}

// ---------------------------------------------------------------- FENCE

#[test]
fn fence_tokens_strictly_increase() {
    let server = Server::start();
    let mut con = server.client();
    let token_key = "redisson_lock_token:{k}";
    // A fresh lock's first token is the server's clock floor (not 1).
    let before = token_floor(&mut con);
    let t1 = int(acquire(&mut con, "k", "a", &["FENCE"]));
    assert_token_between(t1, before, token_floor(&mut con), 0, "first token");
    assert_eq!(q::<i64>(&mut con, &["GET", token_key]), t1);
    assert_eq!(hgetall(&mut con, "k"), pairs(&[("a", "1")]));
    // Fenced re-entry: a new token, and one more hold.
    let t2 = int(acquire(&mut con, "k", "a", &["FENCE"]));
    assert!(t2 > t1, "re-entry token {t2} after {t1}");
    assert_eq!(q::<i64>(&mut con, &["GET", token_key]), t2);
    assert_eq!(hgetall(&mut con, "k"), pairs(&[("a", "2")]));
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "k", "a"]), 1);
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "k", "a"]), 0);
    // The token key survives the release (kept lock.token-ttl-ms, an hour,
    // past the last token); the next cycle continues from it.
    assert_eq!(q::<i64>(&mut con, &["GET", token_key]), t2);
    assert_in(pttl(&mut con, token_key), 3_590_000, 3_600_000, "token TTL");
    let t3 = int(acquire(&mut con, "k", "b", &["FENCE"]));
    assert!(t3 > t2, "next cycle's token {t3} after {t2}");
    assert_eq!(q::<i64>(&mut con, &["GET", token_key]), t3);
    assert_eq!(lock_field(&mut con, "k", "token"), Some(t3.to_string()));
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "k", "b"]), 0);
    // An unfenced cycle does not consume a token.
    assert_eq!(acquire(&mut con, "k", "c", &[]), Value::Int(1));
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "k", "c"]), 0);
    assert_eq!(q::<i64>(&mut con, &["GET", token_key]), t3);
    let t4 = int(acquire(&mut con, "k", "d", &["FENCE"]));
    assert!(t4 > t3, "token {t4} after {t3}");
    // A counter ahead of the clock goes on by exactly one.
    let ahead: i64 = 9_000_000_000_000_000;
    let _: () = q(&mut con, &["SET", token_key, &ahead.to_string()]);
    assert_eq!(
        acquire(&mut con, "k", "d", &["FENCE"]),
        Value::Int(ahead + 1)
    );
    assert_eq!(
        acquire(&mut con, "k", "d", &["FENCE"]),
        Value::Int(ahead + 2)
    );
}

#[test]
fn fence_token_key_of_a_hash_tagged_name() {
    let server = Server::start();
    let mut con = server.client();
    let before = token_floor(&mut con);
    let token = int(acquire(&mut con, "{user}:lock", "a", &["FENCE"]));
    assert_token_between(token, before, token_floor(&mut con), 0, "{user}:lock");
    assert_eq!(
        q::<i64>(&mut con, &["GET", "redisson_lock_token:{user}:lock"]),
        token
    );
    let mut keys: Vec<String> = q(&mut con, &["KEYS", "*"]);
    keys.sort();
    assert_eq!(keys, ["redisson_lock_token:{user}:lock", "{user}:lock"]);
}

#[test]
fn fence_on_broken_hash_tags_is_crossslot() {
    let server = Server::start();
    let mut con = server.client();
    for (name, token) in [
        ("{}x", "redisson_lock_token:{}x"),
        ("a{b", "redisson_lock_token:a{b"),
    ] {
        let want =
            format!("CROSSSLOT fencing token key '{token}' hashes to another slot than the lock; ");
        let e = err(&mut con, &["LOCK.ACQUIRE", name, "a", "FENCE"]);
        assert!(e.starts_with(&want), "{name}: {e}");
        assert_eq!(
            q::<i64>(&mut con, &["DBSIZE"]),
            0,
            "{name}: wrote something"
        );
        // Without FENCE the name works; with FENCE it is refused even for
        // the holder (re-entry) and for another owner, changing nothing.
        assert_eq!(
            acquire(&mut con, name, "a", &["PX", "60000"]),
            Value::Int(1)
        );
        let before = snapshot(&mut con);
        for owner in ["a", "b"] {
            let e = err(&mut con, &["LOCK.ACQUIRE", name, owner, "FENCE"]);
            assert!(e.starts_with(&want), "{name} {owner}: {e}");
            assert_eq!(snapshot(&mut con), before, "{name} {owner}");
        }
        let _: () = q(&mut con, &["FLUSHALL"]);
    }
}

#[test]
fn fence_with_a_broken_token_key_is_refused() {
    let server = Server::start();
    let mut con = server.client();
    let token_key = "redisson_lock_token:{k}";
    let _: () = q(&mut con, &["SET", token_key, "abc"]);
    assert_refused(
        &mut con,
        &["LOCK.ACQUIRE", "k", "a", "FENCE"],
        TOKEN_NOT_INTEGER,
    );
    assert!(!exists(&mut con, "k"));
    // Also on re-entry: the hold count stays.
    assert_eq!(acquire(&mut con, "k", "a", &["PX", "60000"]), Value::Int(1));
    assert_refused(
        &mut con,
        &["LOCK.ACQUIRE", "k", "a", "FENCE"],
        TOKEN_NOT_INTEGER,
    );
    // LOCK.INFO shows no token for a non-integer token key.
    assert_eq!(lock_field(&mut con, "k", "token"), None);

    let _: () = q(&mut con, &["DEL", token_key]);
    let _: () = q(&mut con, &["HSET", token_key, "f", "1"]);
    assert_refused(
        &mut con,
        &["LOCK.ACQUIRE", "k", "a", "FENCE"],
        TOKEN_WRONGTYPE,
    );
    assert_eq!(lock_field(&mut con, "k", "token"), None);
    let _: () = q(&mut con, &["DEL", "k"]);
    assert_refused(
        &mut con,
        &["LOCK.ACQUIRE", "k", "a", "FENCE"],
        TOKEN_WRONGTYPE,
    );
    assert!(!exists(&mut con, "k"));
}

// ---------------------------------------------------------------- LOCK.RELEASE

#[test]
fn release_counts_down_and_deletes_at_zero() {
    let server = Server::start();
    let mut con = server.client();
    assert_eq!(
        acquire(&mut con, "k", "o", &["PX", "100000"]),
        Value::Int(1)
    );
    assert_eq!(
        acquire(&mut con, "k", "o", &["PX", "100000"]),
        Value::Int(2)
    );
    let deadline: i64 = q(&mut con, &["PEXPIRETIME", "k"]);
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "k", "o"]), 1);
    assert_eq!(hgetall(&mut con, "k"), pairs(&[("o", "1")]));
    assert_eq!(
        q::<i64>(&mut con, &["PEXPIRETIME", "k"]),
        deadline,
        "a partial release must not touch the lease"
    );
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "k", "o"]), 0);
    assert!(!exists(&mut con, "k"));
    assert_eq!(q::<i64>(&mut con, &["DBSIZE"]), 0);
}

#[test]
fn release_by_non_owner_is_notowner() {
    let server = Server::start();
    let mut con = server.client();
    // Free key: nothing is created.
    assert_refused(&mut con, &["LOCK.RELEASE", "k", "o"], NOTOWNER);
    assert_eq!(q::<i64>(&mut con, &["DBSIZE"]), 0);
    // Wrong owner.
    assert_eq!(acquire(&mut con, "k", "o", &["PX", "60000"]), Value::Int(1));
    assert_refused(&mut con, &["LOCK.RELEASE", "k", "other"], NOTOWNER);
    assert_eq!(hgetall(&mut con, "k"), pairs(&[("o", "1")]));
    // After the lease expired.
    assert_eq!(acquire(&mut con, "e", "o", &["PX", "50"]), Value::Int(1));
    wait_until("lease of e expired", || !exists(&mut con, "e"));
    assert_refused(&mut con, &["LOCK.RELEASE", "e", "o"], NOTOWNER);
    assert!(!exists(&mut con, "e"));
}

// ---------------------------------------------------------------- LOCK.RENEW

#[test]
fn renew_sets_and_returns_the_lease() {
    let server = Server::start();
    let mut con = server.client();
    assert_eq!(acquire(&mut con, "k", "o", &["PX", "1000"]), Value::Int(1));
    assert_eq!(acquire(&mut con, "k", "o", &["PX", "1000"]), Value::Int(2));
    assert_eq!(
        q::<i64>(&mut con, &["LOCK.RENEW", "k", "o", "PX", "100000"]),
        100000
    );
    assert_in(pttl(&mut con, "k"), 90000, 100000, "renew PX 100000");
    assert_eq!(
        q::<i64>(&mut con, &["LOCK.RENEW", "k", "o", "EX", "50"]),
        50000
    );
    assert_in(pttl(&mut con, "k"), 40000, 50000, "renew EX 50");
    // Holds are untouched by a renew.
    assert_eq!(hgetall(&mut con, "k"), pairs(&[("o", "2")]));
    // Without a lease: the default, also after CONFIG SET.
    assert_eq!(q::<i64>(&mut con, &["LOCK.RENEW", "k", "o"]), 30000);
    assert_in(pttl(&mut con, "k"), 29000, 30000, "renew default");
    let _: () = q(
        &mut con,
        &["CONFIG", "SET", "lock.default-lease-ms", "8000"],
    );
    assert_eq!(q::<i64>(&mut con, &["LOCK.RENEW", "k", "o"]), 8000);
    assert_in(pttl(&mut con, "k"), 7000, 8000, "renew configured default");
    assert_eq!(hgetall(&mut con, "k"), pairs(&[("o", "2")]));
}

#[test]
fn renew_by_non_owner_is_notowner() {
    let server = Server::start();
    let mut con = server.client();
    assert_refused(&mut con, &["LOCK.RENEW", "k", "o", "PX", "1000"], NOTOWNER);
    assert_eq!(q::<i64>(&mut con, &["DBSIZE"]), 0);
    assert_eq!(acquire(&mut con, "k", "o", &["PX", "60000"]), Value::Int(1));
    assert_refused(&mut con, &["LOCK.RENEW", "k", "other"], NOTOWNER);
    assert_refused(
        &mut con,
        &["LOCK.RENEW", "k", "other", "PX", "100000"],
        NOTOWNER,
    );
    assert_eq!(acquire(&mut con, "e", "o", &["PX", "50"]), Value::Int(1));
    wait_until("lease of e expired", || !exists(&mut con, "e"));
    assert_refused(&mut con, &["LOCK.RENEW", "e", "o", "PX", "1000"], NOTOWNER);
    assert!(!exists(&mut con, "e"));
}

#[test]
fn renew_option_errors() {
    let server = Server::start();
    let mut con = server.client();
    assert_eq!(acquire(&mut con, "k", "o", &["PX", "60000"]), Value::Int(1));
    let cases: &[(&[&str], &str)] = &[
        (&["PX"], "ERR syntax error: PX needs a value"),
        (&["EX"], "ERR syntax error: EX needs a value"),
        (&["BLOCK", "1"], "ERR syntax error: unknown option 'BLOCK'"),
        (&["FENCE"], "ERR syntax error: unknown option 'FENCE'"),
        (&["NX"], "ERR syntax error: unknown option 'NX'"),
        (
            &["PX", "1000", "PX", "2000"],
            "ERR syntax error: PX given more than once",
        ),
        (
            &["PX", "1000", "EX", "2"],
            "ERR syntax error: PX and EX cannot be combined",
        ),
        (
            &["PX", "abc"],
            "ERR invalid PX 'abc': not an integer or out of range",
        ),
        (&["PX", "0"], "ERR invalid PX '0': must be positive"),
        (&["EX", "-1"], "ERR invalid EX '-1': must be positive"),
        (
            &["EX", "9223372036854775807"],
            "ERR invalid EX '9223372036854775807': too large",
        ),
        (
            &["PX", "9007199254740992"],
            "ERR invalid PX '9007199254740992': too large",
        ),
    ];
    for (opts, want) in cases {
        for key in ["k", "free"] {
            let mut args = vec!["LOCK.RENEW", key, "o"];
            args.extend_from_slice(opts);
            assert_refused(&mut con, &args, want);
        }
    }
}

// ---------------------------------------------------------------- LOCK.FORCERELEASE

#[test]
fn forcerelease_removes_any_lock() {
    let server = Server::start();
    let mut con = server.client();
    assert_eq!(acquire(&mut con, "k", "o", &["PX", "60000"]), Value::Int(1));
    assert_eq!(acquire(&mut con, "k", "o", &["PX", "60000"]), Value::Int(2));
    assert_eq!(q::<i64>(&mut con, &["LOCK.FORCERELEASE", "k"]), 1);
    assert!(!exists(&mut con, "k"));
    assert_eq!(q::<i64>(&mut con, &["LOCK.FORCERELEASE", "k"]), 0);
    assert_eq!(q::<i64>(&mut con, &["DBSIZE"]), 0);
    // A lock hash without TTL is a lock too.
    let _: () = q(&mut con, &["HSET", "h", "a", "1"]);
    assert_eq!(q::<i64>(&mut con, &["LOCK.FORCERELEASE", "h"]), 1);
    assert!(!exists(&mut con, "h"));
}

#[test]
fn forcerelease_leaves_non_lock_keys_alone() {
    let server = Server::start();
    let mut con = server.client();
    let _: () = q(&mut con, &["SET", "s", "v"]);
    let _: () = q(&mut con, &["RPUSH", "l", "a"]);
    let _: () = q(&mut con, &["SADD", "set", "a"]);
    let _: () = q(&mut con, &["HSET", "h", "a", "x"]);
    let _: () = q(&mut con, &["HSET", "h2", "a", "1", "b", "1"]);
    assert_refused(&mut con, &["LOCK.FORCERELEASE", "s"], WRONGTYPE);
    assert_refused(&mut con, &["LOCK.FORCERELEASE", "l"], WRONGTYPE);
    assert_refused(&mut con, &["LOCK.FORCERELEASE", "set"], WRONGTYPE);
    assert_refused(
        &mut con,
        &["LOCK.FORCERELEASE", "h"],
        "WRONGTYPE key holds a hash that is not a lock: field 'a' holds 'x', not a positive hold count",
    );
    assert_refused(
        &mut con,
        &["LOCK.FORCERELEASE", "h2"],
        "WRONGTYPE key holds a hash that is not a lock: it has 2 fields, a lock has one",
    );
}

// ---------------------------------------------------------------- LOCK.INFO

#[test]
fn info_fields_in_order_resp2() {
    let server = Server::start();
    let mut con = server.client();
    assert_eq!(raw(&mut con, &["LOCK.INFO", "k"]).unwrap(), Value::Nil);

    assert_eq!(acquire(&mut con, "k", "o", &["PX", "10000"]), Value::Int(1));
    assert_eq!(acquire(&mut con, "k", "o", &["PX", "10000"]), Value::Int(2));
    let items = match raw(&mut con, &["LOCK.INFO", "k"]).unwrap() {
        Value::Array(items) => items,
        other => panic!("LOCK.INFO: {other:?}"),
    };
    let names: Vec<String> = items.iter().step_by(2).map(text).collect();
    assert_eq!(names, ["owner", "holds", "ttl", "waiters"]);
    assert_eq!(items[1], Value::BulkString(b"o".to_vec()));
    assert_eq!(items[3], Value::Int(2));
    match items[5] {
        Value::Int(ttl) => assert_in(ttl, 9000, 10000, "LOCK.INFO ttl"),
        ref other => panic!("ttl: {other:?}"),
    }
    assert_eq!(items[7], Value::Int(0));

    // A waiter is counted.
    let mut waiter = queue_waiter(&server, &mut con, "k", "w", &["BLOCK", "0"], 1);
    assert_eq!(lock_field(&mut con, "k", "waiters").as_deref(), Some("1"));
    assert_eq!(q::<i64>(&mut con, &["LOCK.FORCERELEASE", "k"]), 1);
    assert_eq!(recv(&mut waiter).unwrap(), Value::Int(1));
    assert_eq!(lock_field(&mut con, "k", "owner").as_deref(), Some("w"));
    assert_eq!(lock_field(&mut con, "k", "waiters").as_deref(), Some("0"));
}

#[test]
fn info_ttl_is_minus_one_without_expiry() {
    let server = Server::start();
    let mut con = server.client();
    let _: () = q(&mut con, &["HSET", "k", "a", "1"]);
    assert_eq!(
        lock_info(&mut con, "k"),
        pairs(&[
            ("owner", "a"),
            ("holds", "1"),
            ("ttl", "-1"),
            ("waiters", "0")
        ])
    );
}

#[test]
fn info_token_only_when_a_token_exists() {
    let server = Server::start();
    let mut con = server.client();
    assert_eq!(acquire(&mut con, "k", "o", &["PX", "60000"]), Value::Int(1));
    assert_eq!(lock_field(&mut con, "k", "token"), None);
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "k", "o"]), 0);
    let token = int(acquire(&mut con, "k", "o", &["PX", "60000", "FENCE"]));
    let info = lock_info(&mut con, "k");
    let names: Vec<&str> = info.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["owner", "holds", "ttl", "waiters", "token"]);
    assert_eq!(info[1].1, "1");
    assert_eq!(info[4].1, token.to_string());
    let _: () = q(&mut con, &["DEL", "redisson_lock_token:{k}"]);
    assert_eq!(lock_field(&mut con, "k", "token"), None);
    assert_eq!(lock_info(&mut con, "k").len(), 4);
}

#[test]
fn info_is_a_map_in_resp3() {
    let server = Server::start();
    let mut con = server.client_resp3();
    assert_eq!(raw(&mut con, &["LOCK.INFO", "k"]).unwrap(), Value::Nil);
    let before = token_floor(&mut con);
    let token = int(acquire(&mut con, "k", "o", &["PX", "10000", "FENCE"]));
    assert_token_between(token, before, token_floor(&mut con), 0, "token");
    let map = match raw(&mut con, &["LOCK.INFO", "k"]).unwrap() {
        Value::Map(map) => map,
        other => panic!("LOCK.INFO in RESP3 should be a map: {other:?}"),
    };
    let names: Vec<String> = map.iter().map(|(k, _)| text(k)).collect();
    assert_eq!(names, ["owner", "holds", "ttl", "waiters", "token"]);
    assert_eq!(map[0].1, Value::BulkString(b"o".to_vec()));
    assert_eq!(map[1].1, Value::Int(1));
    match map[2].1 {
        Value::Int(ttl) => assert_in(ttl, 9000, 10000, "RESP3 ttl"),
        ref other => panic!("ttl: {other:?}"),
    }
    assert_eq!(map[3].1, Value::Int(0));
    assert_eq!(map[4].1, Value::Int(token));
}

// ---------------------------------------------------------------- errors

#[test]
fn arity_errors_for_every_command() {
    let server = Server::start();
    let mut con = server.client();
    assert_eq!(acquire(&mut con, "k", "o", &["PX", "60000"]), Value::Int(1));
    let cases: &[(&[&str], &str)] = &[
        (&["LOCK.ACQUIRE"], "lock.acquire"),
        (&["LOCK.ACQUIRE", "k"], "lock.acquire"),
        (&["LOCK.RELEASE"], "lock.release"),
        (&["LOCK.RELEASE", "k"], "lock.release"),
        (&["LOCK.RELEASE", "k", "o", "READ", "x"], "lock.release"),
        (&["LOCK.RACQUIRE"], "lock.racquire"),
        (&["LOCK.RACQUIRE", "k"], "lock.racquire"),
        (&["LOCK.WACQUIRE"], "lock.wacquire"),
        (&["LOCK.WACQUIRE", "k"], "lock.wacquire"),
        (&["LOCK.RENEW"], "lock.renew"),
        (&["LOCK.RENEW", "k"], "lock.renew"),
        (&["LOCK.FORCERELEASE"], "lock.forcerelease"),
        (&["LOCK.FORCERELEASE", "k", "x"], "lock.forcerelease"),
        (&["LOCK.INFO"], "lock.info"),
        (&["LOCK.INFO", "k", "x"], "lock.info"),
        (&["ELECT.CAMPAIGN"], "elect.campaign"),
        (&["ELECT.CAMPAIGN", "k"], "elect.campaign"),
        (&["ELECT.CAMPAIGN", "k", "o"], "elect.campaign"),
        (&["ELECT.RESIGN", "k"], "elect.resign"),
        (&["ELECT.RESIGN", "k", "o", "x"], "elect.resign"),
        (&["ELECT.PROCLAIM", "k", "o"], "elect.proclaim"),
        (&["ELECT.PROCLAIM", "k", "o", "v", "x"], "elect.proclaim"),
        (&["ELECT.LEADER"], "elect.leader"),
        (&["ELECT.LEADER", "k", "x"], "elect.leader"),
        (&["ELECT.OBSERVE"], "elect.observe"),
    ];
    for (args, name) in cases {
        assert_refused(
            &mut con,
            args,
            &format!("ERR wrong number of arguments for '{name}' command"),
        );
    }
}

#[test]
fn acquire_option_errors_change_nothing() {
    let server = Server::start();
    let mut con = server.client();
    let cases: &[(&[&str], &str)] = &[
        (&["PX"], "ERR syntax error: PX needs a value"),
        (&["EX"], "ERR syntax error: EX needs a value"),
        (&["BLOCK"], "ERR syntax error: BLOCK needs a value"),
        (&["FENCE", "PX"], "ERR syntax error: PX needs a value"),
        (&["NX"], "ERR syntax error: unknown option 'NX'"),
        (
            &["PX", "1000", "XX"],
            "ERR syntax error: unknown option 'XX'",
        ),
        (
            &["PX", "1000", "PX", "2000"],
            "ERR syntax error: PX given more than once",
        ),
        (
            &["EX", "1", "EX", "2"],
            "ERR syntax error: EX given more than once",
        ),
        (
            &["BLOCK", "1", "BLOCK", "2"],
            "ERR syntax error: BLOCK given more than once",
        ),
        (
            &["FENCE", "FENCE"],
            "ERR syntax error: FENCE given more than once",
        ),
        (
            &["PX", "1000", "EX", "2"],
            "ERR syntax error: PX and EX cannot be combined",
        ),
        (
            &["EX", "2", "PX", "1000"],
            "ERR syntax error: PX and EX cannot be combined",
        ),
        (
            &["PX", "abc"],
            "ERR invalid PX 'abc': not an integer or out of range",
        ),
        (
            &["PX", "1.5"],
            "ERR invalid PX '1.5': not an integer or out of range",
        ),
        (
            &["PX", "99999999999999999999"],
            "ERR invalid PX '99999999999999999999': not an integer or out of range",
        ),
        (&["PX", "0"], "ERR invalid PX '0': must be positive"),
        (&["PX", "-5"], "ERR invalid PX '-5': must be positive"),
        (&["EX", "0"], "ERR invalid EX '0': must be positive"),
        (
            &["EX", "x"],
            "ERR invalid EX 'x': not an integer or out of range",
        ),
        (
            &["BLOCK", "-1"],
            "ERR invalid BLOCK '-1': must not be negative",
        ),
        (
            &["BLOCK", "x"],
            "ERR invalid BLOCK 'x': not an integer or out of range",
        ),
        (
            &["EX", "9223372036854775807"],
            "ERR invalid EX '9223372036854775807': too large",
        ),
        (
            &["EX", "9007199254741"],
            "ERR invalid EX '9007199254741': too large",
        ),
        (
            &["PX", "9007199254740992"],
            "ERR invalid PX '9007199254740992': too large",
        ),
        (
            &["BLOCK", "9007199254740992"],
            "ERR invalid BLOCK '9007199254740992': too large",
        ),
    ];
    // On a free key (nothing may be created, no token consumed), on a lock
    // the caller holds (no re-entry) and on one another owner holds.
    assert_eq!(
        acquire(&mut con, "held", "o", &["PX", "60000"]),
        Value::Int(1)
    );
    for (opts, want) in cases {
        for (key, owner) in [("free", "o"), ("held", "o"), ("held", "p")] {
            let mut args = vec!["LOCK.ACQUIRE", key, owner];
            args.extend_from_slice(opts);
            assert_refused(&mut con, &args, want);
        }
    }
    assert_eq!(hgetall(&mut con, "held"), pairs(&[("o", "1")]));
}

#[test]
fn empty_owner_is_refused() {
    let server = Server::start();
    let mut con = server.client();
    for key in ["free", "held"] {
        if key == "held" {
            assert_eq!(
                acquire(&mut con, "held", "o", &["PX", "60000"]),
                Value::Int(1)
            );
        }
        assert_refused(&mut con, &["LOCK.ACQUIRE", key, ""], EMPTY_OWNER);
        assert_refused(&mut con, &["LOCK.ACQUIRE", key, "", "FENCE"], EMPTY_OWNER);
        assert_refused(&mut con, &["LOCK.RELEASE", key, ""], EMPTY_OWNER);
        assert_refused(&mut con, &["LOCK.RENEW", key, ""], EMPTY_OWNER);
        assert_refused(&mut con, &["LOCK.RENEW", key, "", "PX", "100"], EMPTY_OWNER);
    }
}

/// Every command on `key` is refused with `want` and nothing changes.
fn assert_every_command_refused(con: &mut Connection, key: &str, want: &str) {
    let cases: Vec<Vec<&str>> = vec![
        vec!["LOCK.ACQUIRE", key, "a"],
        vec!["LOCK.ACQUIRE", key, "a", "PX", "1000"],
        vec!["LOCK.ACQUIRE", key, "a", "FENCE"],
        vec!["LOCK.ACQUIRE", key, "a", "BLOCK", "0"],
        vec!["LOCK.RACQUIRE", key, "a"],
        vec!["LOCK.WACQUIRE", key, "a", "BLOCK", "0"],
        vec!["LOCK.RELEASE", key, "a"],
        vec!["LOCK.RELEASE", key, "a", "READ"],
        vec!["LOCK.RENEW", key, "a"],
        vec!["LOCK.RENEW", key, "a", "PX", "1000"],
        vec!["LOCK.FORCERELEASE", key],
        vec!["LOCK.INFO", key],
    ];
    for args in &cases {
        assert_refused(con, args, want);
    }
    assert_eq!(waiters(con, key), 0);
}

#[test]
fn wrongtype_on_string_list_set_and_zset_keys() {
    let server = Server::start();
    let mut con = server.client();
    let _: () = q(&mut con, &["SET", "s", "v", "PX", "100000"]);
    let _: () = q(&mut con, &["RPUSH", "l", "a", "b"]);
    let _: () = q(&mut con, &["SADD", "set", "a"]);
    let _: () = q(&mut con, &["ZADD", "z", "1", "a"]);
    for key in ["s", "l", "set", "z"] {
        assert_every_command_refused(&mut con, key, WRONGTYPE);
    }
    assert!(!exists(&mut con, "redisson_lock_token:{s}"));
}

#[test]
fn hashes_that_are_not_locks_are_wrongtype() {
    let server = Server::start();
    let mut con = server.client();
    for value in ["x", "0", "-1", "01", "1.5", ""] {
        let _: () = q(&mut con, &["HSET", "h", "a", value]);
        let _: () = q(&mut con, &["PEXPIRE", "h", "100000"]);
        let want = format!(
            "WRONGTYPE key holds a hash that is not a lock: field 'a' holds '{value}', not a positive hold count"
        );
        assert_every_command_refused(&mut con, "h", &want);
        // The field's own name as owner is refused just the same.
        assert_refused(&mut con, &["LOCK.RELEASE", "h", "a"], &want);
        assert_refused(&mut con, &["LOCK.ACQUIRE", "h", "a"], &want);
        let _: () = q(&mut con, &["DEL", "h"]);
    }
    let _: () = q(&mut con, &["HSET", "h2", "a", "1", "b", "1"]);
    let want = "WRONGTYPE key holds a hash that is not a lock: it has 2 fields, a lock has one";
    assert_every_command_refused(&mut con, "h2", want);
    assert_refused(&mut con, &["LOCK.RELEASE", "h2", "a"], want);
    let _: () = q(
        &mut con,
        &["HSET", "h3", "u:0", "1", "u:1", "1", "u:2", "1"],
    );
    assert_every_command_refused(
        &mut con,
        "h3",
        "WRONGTYPE key holds a hash that is not a lock: it has 3 fields, a lock has one",
    );
    // With a `mode` field a hash is read as Redisson's read-write lock.
    for (fields, why) in [
        (
            &["mode", "both", "u:1", "1"][..],
            "mode is 'both', not read or write",
        ),
        (
            &["mode", "read", "u:1", "x"],
            "field 'u:1' holds 'x', not a positive hold count",
        ),
        (
            &["mode", "write", "u:1", "1"],
            "mode is write but there is no writer",
        ),
        (
            &["mode", "read", "u:1:write", "1"],
            "a writer's field in the wrong mode, or two writers",
        ),
    ] {
        let mut args = vec!["HSET", "h4"];
        args.extend_from_slice(fields);
        let _: () = q(&mut con, &args);
        let want =
            format!("WRONGTYPE key holds a hash that is not a lock: not a read-write lock: {why}");
        assert_every_command_refused(&mut con, "h4", &want);
        let _: () = q(&mut con, &["DEL", "h4"]);
    }
}

// ---------------------------------------------------------------- MULTI / EVAL / FCALL

#[test]
fn block_inside_multi_answers_nil_at_once() {
    let server = Server::start();
    let mut holder = server.client();
    let mut con = server.client();
    short_timeout(&con);
    assert_eq!(
        acquire(&mut holder, "k", "a", &["PX", "60000"]),
        Value::Int(1)
    );
    let before = snapshot(&mut holder);
    for block in ["1000", "0"] {
        let _: () = q(&mut con, &["MULTI"]);
        let _: () = q(&mut con, &["LOCK.ACQUIRE", "k", "b", "BLOCK", block]);
        let _: () = q(&mut con, &["LOCK.INFO", "k"]);
        let reply = raw(&mut con, &["EXEC"]).expect("EXEC");
        let items = array(&reply);
        assert_eq!(items.len(), 2, "{reply:?}");
        assert_eq!(items[0], Value::Nil, "BLOCK {block} inside MULTI");
        let info = array(&items[1]);
        assert_eq!(flat_get(info, "waiters"), Some(&Value::Int(0)));
        assert_eq!(waiters(&mut holder, "k"), 0);
        assert_eq!(snapshot(&mut holder), before);
    }
}

#[test]
fn acquire_and_release_work_inside_multi() {
    let server = Server::start();
    let mut con = server.client();
    let before = token_floor(&mut con);
    let _: () = q(&mut con, &["MULTI"]);
    for args in [
        &["LOCK.ACQUIRE", "k", "a", "PX", "60000"][..],
        &["LOCK.ACQUIRE", "k", "a", "PX", "60000", "BLOCK", "0"],
        &["LOCK.RELEASE", "k", "a"],
        &["LOCK.RENEW", "k", "a", "PX", "50000"],
        &["LOCK.RELEASE", "k", "a"],
        &["LOCK.ACQUIRE", "k", "b", "FENCE"],
    ] {
        let queued: String = q(&mut con, args);
        assert_eq!(queued, "QUEUED");
    }
    let reply = raw(&mut con, &["EXEC"]).expect("EXEC");
    let after = token_floor(&mut con);
    let replies = array(&reply);
    assert_eq!(
        replies[..5],
        [
            Value::Int(1),
            Value::Int(2),
            Value::Int(1),
            Value::Int(50000),
            Value::Int(0),
        ]
    );
    // The last is the fresh lock's first fencing token.
    assert_eq!(replies.len(), 6, "{replies:?}");
    assert_token_between(int(replies[5].clone()), before, after, 0, "FENCE");
    assert_eq!(hgetall(&mut con, "k"), pairs(&[("b", "1")]));
}

#[test]
fn block_inside_eval_and_fcall_answers_nil() {
    let server = Server::start();
    let mut holder = server.client();
    let mut con = server.client();
    short_timeout(&con);
    let script = "return redis.call('LOCK.ACQUIRE', KEYS[1], ARGV[1], 'BLOCK', '0')";
    // Free: the script acquires.
    assert_eq!(
        q::<Value>(&mut con, &["EVAL", script, "1", "free", "x"]),
        Value::Int(1)
    );
    assert_eq!(
        acquire(&mut holder, "k", "a", &["PX", "60000"]),
        Value::Int(1)
    );
    let before = snapshot(&mut holder);
    assert_eq!(
        q::<Value>(&mut con, &["EVAL", script, "1", "k", "b"]),
        Value::Nil
    );
    assert_eq!(waiters(&mut holder, "k"), 0);
    assert_eq!(snapshot(&mut holder), before);

    let library = "#!lua name=locktest\n\
        redis.register_function('acq', function(keys, args) \
        return redis.call('LOCK.ACQUIRE', keys[1], args[1], 'BLOCK', '0') end)";
    let _: String = q(&mut con, &["FUNCTION", "LOAD", library]);
    let before = snapshot(&mut holder);
    assert_eq!(
        q::<Value>(&mut con, &["FCALL", "acq", "1", "k", "b"]),
        Value::Nil
    );
    assert_eq!(waiters(&mut holder, "k"), 0);
    assert_eq!(snapshot(&mut holder), before);
}

// ---------------------------------------------------------------- concurrency

const THREADS: usize = 20;
const ATTEMPTS: usize = 50;

/// THREADS connections each trying ATTEMPTS acquires of `key` at once, each
/// attempt by a distinct owner; returns every (owner, reply).
fn storm(server: &Server, key: &str) -> Vec<(String, Value)> {
    let cons: Vec<Connection> = (0..THREADS).map(|_| server.client()).collect();
    let start = Barrier::new(THREADS);
    thread::scope(|s| {
        let handles: Vec<_> = cons
            .into_iter()
            .enumerate()
            .map(|(t, mut con)| {
                let start = &start;
                s.spawn(move || {
                    start.wait();
                    (0..ATTEMPTS)
                        .map(|i| {
                            let owner = format!("owner-{t}-{i}");
                            let reply = acquire(&mut con, key, &owner, &["PX", "600000"]);
                            (owner, reply)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("thread"))
            .collect()
    })
}

#[test]
fn concurrent_attempts_on_a_held_lock_all_get_nil() {
    let server = Server::start();
    let mut con = server.client();
    assert_eq!(
        acquire(&mut con, "k", "holder", &["PX", "600000"]),
        Value::Int(1)
    );
    let before = snapshot(&mut con);
    let replies = storm(&server, "k");
    assert_eq!(replies.len(), THREADS * ATTEMPTS);
    for (owner, reply) in &replies {
        assert_eq!(*reply, Value::Nil, "{owner}");
    }
    assert_eq!(snapshot(&mut con), before);
    assert_eq!(
        lock_field(&mut con, "k", "owner").as_deref(),
        Some("holder")
    );
    assert_eq!(lock_field(&mut con, "k", "waiters").as_deref(), Some("0"));
}

#[test]
fn concurrent_attempts_on_a_free_lock_exactly_one_wins() {
    let server = Server::start();
    let mut con = server.client();
    let replies = storm(&server, "k");
    assert_eq!(replies.len(), THREADS * ATTEMPTS);
    let winners: Vec<&String> = replies
        .iter()
        .filter(|(_, r)| *r == Value::Int(1))
        .map(|(o, _)| o)
        .collect();
    assert_eq!(winners.len(), 1, "winners: {winners:?}");
    for (owner, reply) in &replies {
        assert!(
            *reply == Value::Nil || owner == winners[0],
            "{owner} got {reply:?}"
        );
    }
    assert_eq!(
        lock_field(&mut con, "k", "owner").as_deref(),
        Some(winners[0].as_str())
    );
    assert_eq!(hgetall(&mut con, "k"), pairs(&[(winners[0], "1")]));
    assert_eq!(server.stat("acquired"), 1);
}

// ---------------------------------------------------------------- COMMAND

#[test]
fn command_info_docs_and_getkeys() {
    let server = Server::start();
    let mut con = server.client();
    let expected = [
        ("lock.acquire", -3, "write"),
        ("lock.racquire", -3, "write"),
        ("lock.wacquire", -3, "write"),
        ("lock.release", -3, "write"),
        ("lock.renew", -3, "write"),
        ("lock.forcerelease", 2, "write"),
        ("lock.info", 2, "readonly"),
        ("lock.waiters", -2, "readonly"),
        ("elect.campaign", -4, "write"),
        ("elect.resign", 3, "write"),
        ("elect.proclaim", 4, "write"),
        ("elect.leader", 2, "readonly"),
        ("elect.observe", -2, "readonly"),
    ];
    for (name, arity, flag) in expected {
        let reply: Value = q(&mut con, &["COMMAND", "INFO", name]);
        let entries = array(&reply);
        assert_eq!(entries.len(), 1, "{name}: {reply:?}");
        let info = array(&entries[0]);
        assert_eq!(text(&info[0]), name);
        assert_eq!(info[1], Value::Int(arity), "{name} arity");
        let flags: Vec<String> = array(&info[2]).iter().map(text).collect();
        assert!(flags.iter().any(|f| f == flag), "{name} flags {flags:?}");
        // first key, last key, step
        assert_eq!(info[3..6], [Value::Int(1), Value::Int(1), Value::Int(1)]);
        // One key spec, starting at argument 1.
        let specs = array(&info[8]);
        assert_eq!(specs.len(), 1, "{name} key specs");
        let spec = array(&specs[0]);
        let begin = array(flat_get(spec, "begin_search").expect("begin_search"));
        assert_eq!(flat_get(begin, "type").map(text).as_deref(), Some("index"));
        let index = array(flat_get(begin, "spec").expect("spec"));
        assert_eq!(flat_get(index, "index"), Some(&Value::Int(1)));
        let spec_flags: Vec<String> = array(flat_get(spec, "flags").expect("flags"))
            .iter()
            .map(text)
            .collect();
        let access = if flag == "write" { "RW" } else { "RO" };
        assert!(
            spec_flags.iter().any(|f| f == access),
            "{name} key spec flags {spec_flags:?}"
        );

        let docs: Value = q(&mut con, &["COMMAND", "DOCS", name]);
        let docs = array(&docs);
        assert_eq!(text(&docs[0]), name);
        let doc = array(&docs[1]);
        let summary = flat_get(doc, "summary").map(text).unwrap_or_default();
        assert!(!summary.is_empty(), "{name} has no summary: {doc:?}");
        assert_eq!(flat_get(doc, "group").map(text).as_deref(), Some("module"));
    }
    let flags_of = |con: &mut Connection, name: &str| -> Vec<String> {
        let reply: Value = q(con, &["COMMAND", "INFO", name]);
        array(&array(&array(&reply)[0])[2])
            .iter()
            .map(text)
            .collect()
    };
    // The commands that may wait, and only they.
    for (name, blocks) in [
        ("lock.acquire", true),
        ("elect.campaign", true),
        ("elect.observe", true),
        ("elect.resign", false),
        ("elect.proclaim", false),
        ("elect.leader", false),
    ] {
        let flags = flags_of(&mut con, name);
        assert_eq!(
            flags.iter().any(|f| f == "blocking"),
            blocks,
            "{name}: {flags:?}"
        );
    }

    for args in [
        &["LOCK.ACQUIRE", "k", "o"][..],
        &["LOCK.ACQUIRE", "k", "o", "PX", "100", "BLOCK", "0", "FENCE"],
        &["LOCK.RELEASE", "k", "o"],
        &["LOCK.RENEW", "k", "o", "EX", "1"],
        &["LOCK.FORCERELEASE", "k"],
        &["LOCK.INFO", "k"],
        &["LOCK.WAITERS", "k", "COUNT", "3"],
        &[
            "ELECT.CAMPAIGN",
            "k",
            "c",
            "VALUE",
            "v",
            "PX",
            "100",
            "SESSION",
            "s",
            "BLOCK",
            "0",
        ],
        &["ELECT.RESIGN", "k", "c"],
        &["ELECT.PROCLAIM", "k", "c", "v"],
        &["ELECT.LEADER", "k"],
        &["ELECT.OBSERVE", "k", "TERM", "5", "BLOCK", "0"],
    ] {
        let mut full = vec!["COMMAND", "GETKEYS"];
        full.extend_from_slice(args);
        assert_eq!(q::<Vec<String>>(&mut con, &full), ["k"], "{args:?}");
    }

    // LOCK.QUEUES names no key: any node answers it, for its own locks.
    let reply: Value = q(&mut con, &["COMMAND", "INFO", "lock.queues"]);
    let info = array(&array(&reply)[0]);
    assert_eq!(text(&info[0]), "lock.queues");
    assert_eq!(info[1], Value::Int(-1));
    let flags: Vec<String> = array(&info[2]).iter().map(text).collect();
    assert!(flags.iter().any(|f| f == "readonly"), "{flags:?}");
    assert!(!flags.iter().any(|f| f == "write"), "{flags:?}");
    assert_eq!(info[3..6], [Value::Int(0), Value::Int(0), Value::Int(0)]);
    assert!(array(&info[8]).is_empty(), "key specs {:?}", info[8]);
    assert_eq!(
        err_code(
            &mut con,
            &["COMMAND", "GETKEYS", "LOCK.QUEUES", "COUNT", "1"]
        ),
        "ERR"
    );
    let docs: Value = q(&mut con, &["COMMAND", "DOCS", "lock.queues"]);
    let doc = array(&array(&docs)[1]);
    let summary = flat_get(doc, "summary").map(text).unwrap_or_default();
    assert!(summary.contains("longest wait first"), "{summary}");
}

// ---------------------------------------------------------------- keyspace notifications

/// Runs `SET marker` and returns the (event, key) pairs the subscriber saw
/// before the marker's own event.
fn events_until_marker(
    sub: &mut redis::PubSub<'_>,
    con: &mut Connection,
    marker: &str,
) -> Vec<(String, String)> {
    let _: () = q(con, &["SET", marker, "1"]);
    let mut seen = Vec::new();
    loop {
        let msg = sub.get_message().expect("keyspace event");
        let event = msg
            .get_channel_name()
            .strip_prefix("__keyevent@0__:")
            .unwrap_or_else(|| panic!("channel {}", msg.get_channel_name()))
            .to_string();
        let key: String = msg.get_payload().expect("payload");
        if event == "set" && key == marker {
            return seen;
        }
        seen.push((event, key));
    }
}

fn sorted(mut v: Vec<(String, String)>) -> Vec<(String, String)> {
    v.sort();
    v
}

#[test]
fn keyspace_notifications_for_module_writes() {
    let server = Server::start();
    let mut con = server.client();
    let _: () = q(
        &mut con,
        &["CONFIG", "SET", "notify-keyspace-events", "KEA"],
    );
    let mut sub_con = server.client();
    let mut sub = sub_con.as_pubsub();
    sub.psubscribe("__keyevent@0__:*").expect("psubscribe");

    assert_eq!(acquire(&mut con, "k", "o", &["PX", "60000"]), Value::Int(1));
    assert_eq!(
        sorted(events_until_marker(&mut sub, &mut con, "m1")),
        pairs(&[("expire", "k"), ("hset", "k")])
    );
    // Re-entry: a new hold and a new lease.
    assert_eq!(acquire(&mut con, "k", "o", &["PX", "60000"]), Value::Int(2));
    assert_eq!(
        sorted(events_until_marker(&mut sub, &mut con, "m2")),
        pairs(&[("expire", "k"), ("hset", "k")])
    );
    // Busy acquire and errors write nothing.
    assert_eq!(acquire(&mut con, "k", "p", &[]), Value::Nil);
    let _ = err(&mut con, &["LOCK.RELEASE", "k", "p"]);
    assert_eq!(events_until_marker(&mut sub, &mut con, "m3"), vec![]);
    // Partial release: the hold count only.
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "k", "o"]), 1);
    assert_eq!(
        events_until_marker(&mut sub, &mut con, "m4"),
        pairs(&[("hset", "k")])
    );
    assert_eq!(
        q::<i64>(&mut con, &["LOCK.RENEW", "k", "o", "PX", "9000"]),
        9000
    );
    assert_eq!(
        events_until_marker(&mut sub, &mut con, "m5"),
        pairs(&[("expire", "k")])
    );
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "k", "o"]), 0);
    assert_eq!(
        events_until_marker(&mut sub, &mut con, "m6"),
        pairs(&[("del", "k")])
    );
    // FENCE adds the token key's set and expire, as SET ... PXAT fires them
    // (formerly an incrby).
    let _ = int(acquire(&mut con, "k", "o", &["FENCE"]));
    assert_eq!(
        sorted(events_until_marker(&mut sub, &mut con, "m7")),
        pairs(&[
            ("expire", "k"),
            ("expire", "redisson_lock_token:{k}"),
            ("hset", "k"),
            ("set", "redisson_lock_token:{k}")
        ])
    );
    assert_eq!(q::<i64>(&mut con, &["LOCK.FORCERELEASE", "k"]), 1);
    assert_eq!(
        events_until_marker(&mut sub, &mut con, "m8"),
        pairs(&[("del", "k")])
    );
}

// ---------------------------------------------------------------- WATCH

#[test]
fn successful_acquire_aborts_a_watch() {
    let server = Server::start();
    let mut watcher = server.client();
    let mut other = server.client();
    let _: () = q(&mut watcher, &["WATCH", "k"]);
    assert_eq!(
        acquire(&mut other, "k", "a", &["PX", "60000"]),
        Value::Int(1)
    );
    let _: () = q(&mut watcher, &["MULTI"]);
    let _: () = q(&mut watcher, &["SET", "x", "1"]);
    assert_eq!(raw(&mut watcher, &["EXEC"]).unwrap(), Value::Nil);
    assert!(!exists(&mut watcher, "x"));
}

#[test]
fn failed_acquire_or_error_does_not_abort_a_watch() {
    let server = Server::start();
    let mut watcher = server.client();
    let mut holder = server.client();
    let mut other = server.client();
    assert_eq!(
        acquire(&mut holder, "k", "a", &["PX", "60000"]),
        Value::Int(1)
    );
    let _: () = q(&mut watcher, &["WATCH", "k"]);
    assert_eq!(acquire(&mut other, "k", "b", &[]), Value::Nil);
    assert_eq!(acquire(&mut other, "k", "b", &["FENCE"]), Value::Nil);
    assert_eq!(err(&mut other, &["LOCK.RELEASE", "k", "b"]), NOTOWNER);
    assert_eq!(err(&mut other, &["LOCK.RENEW", "k", "b"]), NOTOWNER);
    let _ = err(&mut other, &["LOCK.ACQUIRE", "k", "a", "PX", "0"]);
    let _: () = q(&mut watcher, &["MULTI"]);
    let _: () = q(&mut watcher, &["SET", "x", "2"]);
    let reply = raw(&mut watcher, &["EXEC"]).expect("EXEC");
    assert_eq!(array(&reply).len(), 1, "EXEC aborted: {reply:?}");
    assert_eq!(q::<String>(&mut watcher, &["GET", "x"]), "2");
}

// ---------------------------------------------------------------- INFO lock

#[test]
fn info_lock_counters_move() {
    let server = Server::start();
    let mut con = server.client();
    let counters =
        |s: &Server| ["acquired", "reentered", "released", "force_released"].map(|n| s.stat(n));
    assert_eq!(counters(&server), [0, 0, 0, 0]);
    assert_eq!(acquire(&mut con, "k", "a", &[]), Value::Int(1));
    assert_eq!(counters(&server), [1, 0, 0, 0]);
    assert_eq!(acquire(&mut con, "k", "a", &[]), Value::Int(2));
    assert_eq!(counters(&server), [1, 1, 0, 0]);
    // Busy, NOTOWNER and partial releases count nothing.
    assert_eq!(acquire(&mut con, "k", "b", &[]), Value::Nil);
    let _ = err(&mut con, &["LOCK.RELEASE", "k", "b"]);
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "k", "a"]), 1);
    assert_eq!(counters(&server), [1, 1, 0, 0]);
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "k", "a"]), 0);
    assert_eq!(counters(&server), [1, 1, 1, 0]);
    assert_eq!(acquire(&mut con, "k", "b", &[]), Value::Int(1));
    assert_eq!(q::<i64>(&mut con, &["LOCK.FORCERELEASE", "k"]), 1);
    assert_eq!(counters(&server), [2, 1, 1, 1]);
    assert_eq!(q::<i64>(&mut con, &["LOCK.FORCERELEASE", "k"]), 0);
    assert_eq!(counters(&server), [2, 1, 1, 1]);
    assert_eq!(server.stat("waiters"), 0);
    assert_eq!(server.stat("locks_with_waiters"), 0);
}

/// Bounds the read timeout of a connection that must not block, so a
/// regression fails in seconds rather than after [`PATIENCE`].
fn short_timeout(con: &Connection) {
    con.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("read timeout");
}

#[test]
fn client_text_in_errors_is_escaped_and_never_breaks_the_server() {
    // Code points that are multiples of 256 (Ā U+0100, 一 U+4E00) once
    // turned into NUL bytes on their way into an error reply.
    let server = Server::start();
    let mut con = server.client();
    assert_eq!(
        err(&mut con, &["LOCK.ACQUIRE", "k", "o", "一"]),
        "ERR syntax error: unknown option '\\xe4\\xb8\\x80'"
    );
    assert_eq!(
        err(&mut con, &["LOCK.ACQUIRE", "k", "o", "PX", "Ā%s\r\n"]),
        "ERR invalid PX '\\xc4\\x80%s\\x0d\\x0a': not an integer or out of range"
    );
    let _: i64 = q(&mut con, &["HSET", "h", "Ā", "x"]);
    assert_eq!(
        err(&mut con, &["LOCK.INFO", "h"]),
        "WRONGTYPE key holds a hash that is not a lock: field '\\xc4\\x80' holds 'x', not a positive hold count"
    );
    let crossslot = err(&mut con, &["LOCK.ACQUIRE", "{}一", "o", "FENCE"]);
    assert!(
        crossslot
            .starts_with("CROSSSLOT fencing token key 'redisson_lock_token:{}\\xe4\\xb8\\x80'"),
        "{crossslot}"
    );
    let pong: String = q(&mut con, &["PING"]);
    assert_eq!(pong, "PONG");

    // A waiter answered with such a text gets it whole, and only it.
    let _: Value = acquire(&mut con, "k", "holder", &["PX", "60000"]);
    let mut w: Connection = queue_waiter(&server, &mut con, "k", "w", &["BLOCK", "0"], 1);
    let _: () = q(&mut con, &["MULTI"]);
    let _: String = q(&mut con, &["DEL", "k"]);
    let _: String = q(&mut con, &["HSET", "k", "Ā", "x"]);
    let _: Value = q(&mut con, &["EXEC"]);
    assert_eq!(
        recv_error(&mut w),
        "WRONGTYPE key holds a hash that is not a lock: field '\\xc4\\x80' holds 'x', not a positive hold count"
    );
    let pong: String = q(&mut w, &["PING"]);
    assert_eq!(pong, "PONG");
    assert!(!server.log().contains("internal error"), "{}", server.log());
}

#[test]
fn fence_with_a_broken_token_is_an_error_even_when_the_lock_is_busy() {
    let server = Server::start();
    let mut con = server.client();
    let _: Value = acquire(&mut con, "k", "holder", &["PX", "60000"]);
    let _: () = q(&mut con, &["SET", "redisson_lock_token:{k}", "abc"]);
    let want = "ERR fencing token key holds a value that is not an integer or out of range";
    assert_eq!(
        err(&mut con, &["LOCK.ACQUIRE", "k", "other", "FENCE"]),
        want
    );
    assert_eq!(
        err(
            &mut con,
            &["LOCK.ACQUIRE", "k", "other", "FENCE", "BLOCK", "0"]
        ),
        want
    );
    assert_eq!(waiters(&mut con, "k"), 0);
}

#[test]
fn info_never_reads_a_token_key_of_another_slot() {
    // For `{}x` the token key would hash elsewhere: FENCE refuses it, and
    // LOCK.INFO does not look at a key of that name either.
    let server = Server::start();
    let mut con = server.client();
    let _: Value = acquire(&mut con, "{}x", "o", &["PX", "60000"]);
    let _: () = q(&mut con, &["SET", "redisson_lock_token:{}x", "7"]);
    assert_eq!(lock_field(&mut con, "{}x", "token"), None);
    assert_eq!(lock_field(&mut con, "{}x", "owner").as_deref(), Some("o"));
}
