//! Leader election (ELECT.*) against real servers: CAMPAIGN leads at once
//! or waits in the lock's FIFO queue (with LOCK.ACQUIRE callers), replying
//! the term, which only grows; the leader campaigning again re-attaches
//! without a re-entry count; the leader record `{key}:leader` holds the
//! candidate, term and value with the lock's absolute expiry; RESIGN hands
//! on at once; PROCLAIM; LEADER in RESP2 and RESP3; the OBSERVE long poll,
//! answered by every kind of change and by nothing else; the session's loss
//! messages (`forced`, `gone`, `idle`); errors by code; a replica and the
//! AOF that agree with the master key by key, and nothing left behind.

use crate::common;
use common::*;

use std::collections::BTreeMap;
use std::fs;
use std::time::{Duration, Instant};

/// ELECT.LEADER / ELECT.OBSERVE's map.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Leader {
    candidate: Option<String>,
    term: i64,
    value: Option<String>,
    ttl: i64,
}

fn opt_text(v: &Value) -> Option<String> {
    match v {
        Value::Nil => None,
        other => Some(text(other)),
    }
}

fn int(v: &Value, what: &str) -> i64 {
    match v {
        Value::Int(n) => *n,
        other => panic!("{what}: expected an integer, got {other:?}"),
    }
}

/// The map's fields in order (`candidate`, `term`, `value`, `ttl`), from a
/// RESP2 flat array or a RESP3 map; `None` for nil.
fn parse_leader(v: Value, resp3: bool) -> Option<Leader> {
    let pairs: Vec<(Value, Value)> = match v {
        Value::Nil => return None,
        Value::Array(items) if !resp3 => {
            assert_eq!(items.len(), 8, "a flat array of 4 fields: {items:?}");
            items
                .chunks(2)
                .map(|kv| (kv[0].clone(), kv[1].clone()))
                .collect()
        }
        Value::Map(pairs) if resp3 => pairs,
        other => panic!("not a leader map (resp3: {resp3}): {other:?}"),
    };
    let names: Vec<String> = pairs.iter().map(|(k, _)| text(k)).collect();
    assert_eq!(names, ["candidate", "term", "value", "ttl"], "{pairs:?}");
    Some(Leader {
        candidate: opt_text(&pairs[0].1),
        term: int(&pairs[1].1, "term"),
        value: opt_text(&pairs[2].1),
        ttl: int(&pairs[3].1, "ttl"),
    })
}

fn leader(con: &mut Connection, key: &str) -> Option<Leader> {
    parse_leader(q(con, &["ELECT.LEADER", key]), false)
}

/// The map OBSERVE answers when nobody leads.
fn nobody() -> Leader {
    Leader {
        candidate: None,
        term: 0,
        value: None,
        ttl: -1,
    }
}

/// `ELECT.CAMPAIGN key candidate <opts>`: the term, or `None` for nil.
fn campaign(con: &mut Connection, key: &str, candidate: &str, opts: &[&str]) -> Option<i64> {
    let mut args = vec!["ELECT.CAMPAIGN", key, candidate];
    args.extend_from_slice(opts);
    match q::<Value>(con, &args) {
        Value::Nil => None,
        v => Some(int(&v, "CAMPAIGN's term")),
    }
}

/// Sends a blocking CAMPAIGN on a new connection and waits until it is the
/// `nth` caller queued on `key`.
fn queue_candidate(
    server: &Server,
    con: &mut Connection,
    key: &str,
    candidate: &str,
    opts: &[&str],
    nth: i64,
) -> Connection {
    let mut c = server.client();
    let mut args = vec!["ELECT.CAMPAIGN", key, candidate];
    args.extend_from_slice(opts);
    send(&mut c, &args);
    wait_for_waiters(con, key, nth);
    c
}

/// The owners queued on `key`, in order (LOCK.WAITERS).
fn queued_owners(con: &mut Connection, key: &str) -> Vec<String> {
    let waiters: Vec<Value> = q(con, &["LOCK.WAITERS", key]);
    waiters
        .iter()
        .map(|w| match w {
            Value::Array(fields) => fields
                .chunks(2)
                .find(|kv| text(&kv[0]) == "owner")
                .map(|kv| text(&kv[1]))
                .expect("a waiter's owner"),
            other => panic!("LOCK.WAITERS entry {other:?}"),
        })
        .collect()
}

/// The term a queued CAMPAIGN was answered with.
fn term_of_reply(c: &mut Connection) -> i64 {
    int(&recv(c).expect("CAMPAIGN's reply"), "CAMPAIGN's term")
}

fn record_key(key: &str) -> String {
    format!("{{{key}}}:leader")
}

fn counter_key(key: &str) -> String {
    format!("redisson_lock_token:{{{key}}}")
}

/// The leader record's fields, sorted.
fn record(con: &mut Connection, key: &str) -> Vec<(String, String)> {
    let mut fields = hgetall(con, &record_key(key));
    fields.sort();
    fields
}

fn expected_record(candidate: &str, term: i64, value: Option<&str>) -> Vec<(String, String)> {
    let mut fields = vec![
        ("candidate".to_string(), candidate.to_string()),
        ("term".to_string(), term.to_string()),
    ];
    if let Some(v) = value {
        fields.push(("value".to_string(), v.to_string()));
    }
    fields.sort();
    fields
}

/// The record names `candidate` in `term` (with `value`), expires when the
/// lock does (PEXPIREAT equal), the lock hash is `{candidate: 1}`, and
/// LEADER says the same.
fn assert_leads(con: &mut Connection, key: &str, candidate: &str, term: i64, value: Option<&str>) {
    assert_eq!(
        record(con, key),
        expected_record(candidate, term, value),
        "the leader record of {key}"
    );
    assert_eq!(
        hgetall(con, key),
        vec![(candidate.to_string(), "1".to_string())],
        "the lock hash of {key}"
    );
    let lock_expiry = pexpiretime(con, key);
    assert!(lock_expiry > 0, "the lock {key} has an expiry");
    assert_eq!(
        pexpiretime(con, &record_key(key)),
        lock_expiry,
        "the record of {key} expires with the lock"
    );
    let l = leader(con, key).expect("somebody leads");
    assert_eq!(l.candidate.as_deref(), Some(candidate));
    assert_eq!(l.term, term);
    assert_eq!(l.value.as_deref(), value);
    assert!(l.ttl > 0, "{l:?}");
}

/// Nobody leads `key`: no lock, no record, LEADER nil.
fn assert_nobody_leads(con: &mut Connection, key: &str) {
    assert!(!exists(con, key), "the lock {key} is gone");
    assert!(
        !exists(con, &record_key(key)),
        "the record of {key} is gone"
    );
    assert_eq!(leader(con, key), None);
}

/// Sends `ELECT.OBSERVE key <opts>` on a new connection and waits until the
/// server counts `observers` callers blocked in it.
fn observer(server: &Server, key: &str, opts: &[&str], observers: i64) -> Connection {
    let mut c = server.client();
    let mut args = vec!["ELECT.OBSERVE", key];
    args.extend_from_slice(opts);
    send(&mut c, &args);
    wait_until(&format!("{observers} observers blocked"), || {
        server.stat("election_observers") == observers
    });
    c
}

/// `ELECT.OBSERVE key TERM 1` without BLOCK (a term no leadership has):
/// the leadership now, the nobody map when nobody leads.
fn observe_now(c: &mut Connection, key: &str) -> Option<Leader> {
    parse_leader(q(c, &["ELECT.OBSERVE", key, "TERM", "1"]), false)
}

fn observed(c: &mut Connection) -> Option<Leader> {
    parse_leader(recv(c).expect("OBSERVE's reply"), false)
}

/// CAMPAIGN leads at once (term = the lock's fencing token) or waits in
/// the same FIFO queue as LOCK.ACQUIRE callers; without BLOCK it answers
/// nil while another leads; the leader campaigning again (from a new
/// connection) keeps its term, gets no re-entry count, is re-attached and
/// takes the new lease and value; RESIGN hands on at once, in queue order,
/// answers 1 then 0; each new leader's term is above the last, and the
/// record follows (value only when given); after the last resign nothing is
/// left but the fencing counter.
#[test]
fn campaigns_queue_with_lock_callers_and_terms_grow_across_hand_offs() {
    let server = Server::start();
    let mut con = server.client();
    let k = "sched";
    assert_eq!(leader(&mut con, k), None);

    let mut a = server.client();
    let before = token_floor(&mut con);
    let t1 = campaign(
        &mut a,
        k,
        "node a",
        &["VALUE", "10.0.0.5:80", "PX", "60000", "KEEPALIVE"],
    )
    .expect("a leads at once");
    let after = token_floor(&mut con);
    assert_token_between(t1, before, after, 0, "the first term");
    assert_eq!(q::<i64>(&mut con, &["GET", &counter_key(k)]), t1);
    assert_leads(&mut con, k, "node a", t1, Some("10.0.0.5:80"));
    assert_eq!(
        lock_field(&mut con, k, "keepalive_client"),
        Some(client_id(&mut a).to_string())
    );
    assert_eq!(server.stat("elections_won"), 1);

    // Another candidate without BLOCK: nil at once, nothing queued.
    let mut b = server.client();
    assert_eq!(campaign(&mut b, k, "b", &["KEEPALIVE"]), None);
    assert_eq!(waiters(&mut con, k), 0);

    // In line: a lock caller, then c (with a value), then d (without).
    let mut locker: Connection = queue_waiter(
        &server,
        &mut con,
        k,
        "locker",
        &["PX", "60000", "BLOCK", "0"],
        1,
    );
    let mut c = queue_candidate(
        &server,
        &mut con,
        k,
        "c",
        &["VALUE", "vc", "PX", "60000", "KEEPALIVE", "BLOCK", "0"],
        2,
    );
    let mut d = queue_candidate(
        &server,
        &mut con,
        k,
        "d",
        &["PX", "60000", "KEEPALIVE", "BLOCK", "0"],
        3,
    );
    assert_eq!(queued_owners(&mut con, k), ["locker", "c", "d"]);

    // The leader again, from a new connection: same term, no re-entry,
    // bound to the new connection, the new lease and value.
    let mut a2 = server.client();
    let old_expiry = pexpiretime(&mut con, k);
    assert_eq!(
        campaign(
            &mut a2,
            k,
            "node a",
            &["VALUE", "10.0.0.6:80", "PX", "30000", "KEEPALIVE"]
        ),
        Some(t1)
    );
    assert_leads(&mut con, k, "node a", t1, Some("10.0.0.6:80"));
    assert!(
        pexpiretime(&mut con, k) < old_expiry,
        "the 30 s lease replaced the 60 s one"
    );
    assert_in(pttl(&mut con, k), 25_000, 30_000, "the new lease");
    assert_eq!(
        lock_field(&mut con, k, "keepalive_client"),
        Some(client_id(&mut a2).to_string())
    );
    assert_eq!(server.stat("keepalive_holds"), 1);
    assert_eq!(
        server.stat("elections_won"),
        1,
        "re-attaching begins nothing"
    );
    drop(a);
    assert_eq!(q::<String>(&mut a2, &["PING"]), "PONG");
    assert_eq!(leader(&mut con, k).map(|l| l.term), Some(t1));

    // RESIGN: the lock caller first in line gets the lock at once; it is
    // no candidate, so nobody leads by the record.
    assert_eq!(q::<i64>(&mut con, &["ELECT.RESIGN", k, "node a"]), 1);
    assert_eq!(
        recv(&mut locker).expect("the lock caller's grant"),
        Value::Int(1)
    );
    assert_eq!(lock_field(&mut con, k, "owner").as_deref(), Some("locker"));
    assert_eq!(leader(&mut con, k), None);
    assert!(!exists(&mut con, &record_key(k)));
    assert_eq!(q::<i64>(&mut con, &["ELECT.RESIGN", k, "node a"]), 0);
    assert_eq!(q::<i64>(&mut con, &["ELECT.RESIGN", k, "never"]), 0);
    assert_eq!(server.stat("keepalive_holds"), 0);

    // The lock caller releases: c leads, then d, terms growing.
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", k, "locker"]), 0);
    let t2 = term_of_reply(&mut c);
    assert!(t2 > t1, "term {t2} after {t1}");
    assert_leads(&mut con, k, "c", t2, Some("vc"));
    assert_eq!(
        lock_field(&mut con, k, "keepalive_client"),
        Some(client_id(&mut c).to_string())
    );
    assert_eq!(q::<i64>(&mut con, &["ELECT.RESIGN", k, "c"]), 1);
    let t3 = term_of_reply(&mut d);
    assert!(t3 > t2, "term {t3} after {t2}");
    assert_leads(&mut con, k, "d", t3, None);
    assert_eq!(q::<i64>(&mut con, &["ELECT.RESIGN", k, "d"]), 1);
    assert_nobody_leads(&mut con, k);

    // Leading again later: a term above every earlier one.
    let t4 = campaign(&mut b, k, "b", &["PX", "60000", "KEEPALIVE"]).expect("b leads");
    assert!(t4 > t3);
    assert_eq!(q::<i64>(&mut con, &["ELECT.RESIGN", k, "b"]), 1);

    // Nothing left but the fencing counter (at the last term).
    assert_nobody_leads(&mut con, k);
    let keys: Vec<String> = q(&mut con, &["KEYS", "*"]);
    assert_eq!(keys, [counter_key(k)]);
    assert_eq!(q::<i64>(&mut con, &["GET", &counter_key(k)]), t4);
    assert_eq!(server.stat("keepalive_holds"), 0);
    assert_eq!(server.stat("waiters"), 0);
    assert_eq!(server.stat("elections_won"), 4);
    assert_eq!(server.stat("elections_lost"), 0);
}

/// A CAMPAIGN's BLOCK time runs out: nil, nothing queued; LOCK.CANCEL and
/// RESIGN end a wait (nil) and the candidate never leads.
#[test]
fn a_campaign_wait_ends_by_timeout_cancel_or_resign() {
    let server = Server::start();
    let mut con = server.client();
    let mut a = server.client();
    let t = campaign(&mut a, "e", "a", &["PX", "60000", "KEEPALIVE"]).expect("a leads");
    let mut b = server.client();
    let started = Instant::now();
    assert_eq!(
        campaign(&mut b, "e", "b", &["KEEPALIVE", "BLOCK", "200"]),
        None
    );
    assert!(started.elapsed() >= Duration::from_millis(150));
    assert_eq!(waiters(&mut con, "e"), 0);

    let mut c = queue_candidate(&server, &mut con, "e", "c", &["KEEPALIVE", "BLOCK", "0"], 1);
    let mut d = queue_candidate(&server, &mut con, "e", "d", &["KEEPALIVE", "BLOCK", "0"], 2);
    assert_eq!(q::<i64>(&mut con, &["LOCK.CANCEL", "e", "c"]), 1);
    assert_eq!(recv(&mut c).expect("c's answer"), Value::Nil);
    assert_eq!(q::<i64>(&mut con, &["ELECT.RESIGN", "e", "d"]), 0);
    assert_eq!(recv(&mut d).expect("d's answer"), Value::Nil);
    assert_eq!(waiters(&mut con, "e"), 0);
    assert_eq!(leader(&mut con, "e").map(|l| l.term), Some(t));
    assert_eq!(q::<i64>(&mut con, &["ELECT.RESIGN", "e", "a"]), 1);
    assert_nobody_leads(&mut con, "e");
    assert_eq!(server.stat("waiters"), 0);
}

/// LEADER: nil, then the map in RESP2 (flat array) and RESP3 (map), value
/// nil when none was given; PROCLAIM changes the value, keeps the term and
/// the record's expiry, and is refused NOTOWNER to anyone else.
#[test]
fn leader_in_resp2_and_resp3_and_proclaim() {
    let server = Server::start();
    let mut con = server.client();
    let mut con3 = server.client_resp3();
    assert_eq!(q::<Value>(&mut con3, &["ELECT.LEADER", "e"]), Value::Nil);
    assert_eq!(q::<Value>(&mut con, &["ELECT.LEADER", "e"]), Value::Nil);

    let mut a = server.client();
    let t = campaign(&mut a, "e", "a b", &["PX", "60000", "KEEPALIVE"]).expect("leads");
    for resp3 in [false, true] {
        let c = if resp3 { &mut con3 } else { &mut con };
        let l = parse_leader(q(c, &["ELECT.LEADER", "e"]), resp3).expect("leads");
        assert_eq!(l.candidate.as_deref(), Some("a b"));
        assert_eq!(l.term, t);
        assert_eq!(l.value, None);
        assert_in(l.ttl, 50_000, 60_000, "ttl");
    }

    assert!(err(&mut con, &["ELECT.PROCLAIM", "e", "other", "x"]).starts_with("NOTOWNER"));
    assert!(err(&mut con, &["ELECT.PROCLAIM", "none", "a b", "x"]).starts_with("NOTOWNER"));
    assert!(!exists(&mut con, "none"));
    let expiry = pexpiretime(&mut con, "e");
    assert_eq!(
        q::<i64>(&mut con, &["ELECT.PROCLAIM", "e", "a b", "10.0.0.7:80"]),
        t
    );
    assert_leads(&mut con, "e", "a b", t, Some("10.0.0.7:80"));
    assert_eq!(pexpiretime(&mut con, "e"), expiry);
    let l = parse_leader(q(&mut con3, &["ELECT.LEADER", "e"]), true).expect("leads");
    assert_eq!(l.value.as_deref(), Some("10.0.0.7:80"));
    assert_eq!(q::<i64>(&mut con, &["ELECT.RESIGN", "e", "a b"]), 1);
    assert!(err(&mut con, &["ELECT.PROCLAIM", "e", "a b", "x"]).starts_with("NOTOWNER"));
    assert_nobody_leads(&mut con, "e");
}

/// OBSERVE answers at once when the term differs from the caller's (none
/// given counts as 0), waits while it is the same, and is woken by each
/// change: PROCLAIM (same term, new value), a hand-off (the next term), a
/// resign with nobody next, LOCK.FORCERELEASE, DEL and FLUSHALL (the
/// nobody map: candidate nil, term 0); its BLOCK time running out answers
/// nil. `lock_election_observers` counts the callers blocked.
#[test]
fn observe_answers_each_change_and_nothing_else() {
    let server = Server::start();
    let mut con = server.client();
    let k = "e";
    // Nobody leads, the caller has seen nothing: nil without BLOCK, nil
    // when BLOCK runs out.
    assert_eq!(q::<Value>(&mut con, &["ELECT.OBSERVE", k]), Value::Nil);
    assert_eq!(
        q::<Value>(&mut con, &["ELECT.OBSERVE", k, "TERM", "0"]),
        Value::Nil
    );
    let started = Instant::now();
    assert_eq!(
        q::<Value>(&mut con, &["ELECT.OBSERVE", k, "TERM", "0", "BLOCK", "200"]),
        Value::Nil
    );
    assert!(started.elapsed() >= Duration::from_millis(150));
    assert_eq!(server.stat("election_observers"), 0);
    // A term the caller saw once, now over: the nobody map at once.
    assert_eq!(
        parse_leader(q(&mut con, &["ELECT.OBSERVE", k, "TERM", "5"]), false),
        Some(nobody())
    );

    // Two observers of "nobody", woken by the first leadership.
    let mut o1 = observer(&server, k, &["BLOCK", "0"], 1);
    let mut o2 = observer(&server, k, &["TERM", "0", "BLOCK", "0"], 2);
    let mut a = server.client();
    let t1 = campaign(&mut a, k, "a", &["VALUE", "va", "PX", "60000", "KEEPALIVE"]).expect("a");
    for o in [&mut o1, &mut o2] {
        let l = observed(o).expect("a map");
        assert_eq!((l.candidate.as_deref(), l.term), (Some("a"), t1));
        assert_eq!(l.value.as_deref(), Some("va"));
        assert_in(l.ttl, 50_000, 60_000, "ttl");
    }
    assert_eq!(server.stat("election_observers"), 0);
    // Another term than the caller's: at once, RESP3 a map.
    let l = parse_leader(
        q(
            &mut server.client_resp3(),
            &["ELECT.OBSERVE", k, "TERM", "1"],
        ),
        true,
    )
    .expect("a map");
    assert_eq!(l.term, t1);
    // The same term: nil without BLOCK, nil after BLOCK.
    let t1s = t1.to_string();
    assert_eq!(
        q::<Value>(&mut con, &["ELECT.OBSERVE", k, "TERM", &t1s]),
        Value::Nil
    );
    assert_eq!(
        q::<Value>(
            &mut con,
            &["ELECT.OBSERVE", k, "TERM", &t1s, "BLOCK", "100"]
        ),
        Value::Nil
    );

    // PROCLAIM: same term, the new value.
    let mut o = observer(&server, k, &["TERM", &t1s, "BLOCK", "0"], 1);
    assert_eq!(q::<i64>(&mut con, &["ELECT.PROCLAIM", k, "a", "vb"]), t1);
    let l = observed(&mut o).expect("a map");
    assert_eq!((l.term, l.value.as_deref()), (t1, Some("vb")));

    // A hand-off by resign: the next candidate's term.
    let mut b = queue_candidate(
        &server,
        &mut con,
        k,
        "b",
        &["PX", "60000", "KEEPALIVE", "BLOCK", "0"],
        1,
    );
    let mut o = observer(&server, k, &["TERM", &t1s, "BLOCK", "0"], 1);
    assert_eq!(q::<i64>(&mut con, &["ELECT.RESIGN", k, "a"]), 1);
    let t2 = term_of_reply(&mut b);
    let l = observed(&mut o).expect("a map");
    assert_eq!(
        (l.candidate.as_deref(), l.term, l.value),
        (Some("b"), t2, None)
    );
    let t2s = t2.to_string();

    // A resign with nobody next: the nobody map.
    let mut o = observer(&server, k, &["TERM", &t2s, "BLOCK", "0"], 1);
    assert_eq!(q::<i64>(&mut con, &["ELECT.RESIGN", k, "b"]), 1);
    assert_eq!(observed(&mut o), Some(nobody()));

    // LOCK.FORCERELEASE, DEL, FLUSHALL: the nobody map each time.
    type End = fn(&mut Connection, &str);
    let ends: [(&str, End); 3] = [
        ("FORCERELEASE", |c, k| {
            assert_eq!(q::<i64>(c, &["LOCK.FORCERELEASE", k]), 1)
        }),
        ("DEL", |c, k| assert_eq!(q::<i64>(c, &["DEL", k]), 1)),
        ("FLUSHALL", |c, _| q::<()>(c, &["FLUSHALL"])),
    ];
    for (what, end) in ends {
        let t = campaign(&mut a, k, "a", &["PX", "60000", "KEEPALIVE"]).expect(what);
        let ts = t.to_string();
        let mut o = observer(&server, k, &["TERM", &ts, "BLOCK", "0"], 1);
        end(&mut con, k);
        assert_eq!(observed(&mut o), Some(nobody()), "after {what}");
        assert_nobody_leads(&mut con, k);
    }
    assert_eq!(server.stat("election_observers"), 0);
    assert_eq!(server.stat("keepalive_holds"), 0);
}

/// A leader that keeps its leadership with SESSION hears on the session's
/// channel, at once (long before a renewal, with 60 s leases), each way
/// the server ends it other than its own resign: LOCK.FORCERELEASE
/// (`forced`), DEL and FLUSHALL (`gone`); an overwrite by SET at its next
/// renewal; the next candidate in line leads; `lock_elections_lost` counts
/// each.
#[test]
fn a_session_hears_at_once_of_each_leadership_it_loses() {
    let server = Server::start();
    let mut con = server.client();
    let mut session = Session::open(&server, "s1");
    let mut a = server.client();
    let lead = |a: &mut Connection, k: &str| -> i64 {
        campaign(a, k, "node a", &["PX", "60000", "SESSION", "s1"]).expect("leads")
    };

    // Its own resign: no message (the next one is the force's).
    lead(&mut a, "e 1");
    assert_eq!(q::<i64>(&mut a, &["ELECT.RESIGN", "e 1", "node a"]), 1);

    let t = lead(&mut a, "e 1");
    let mut b = queue_candidate(
        &server,
        &mut con,
        "e 1",
        "b",
        &["PX", "60000", "KEEPALIVE", "BLOCK", "0"],
        1,
    );
    assert_eq!(q::<i64>(&mut con, &["LOCK.FORCERELEASE", "e 1"]), 1);
    assert_eq!(session.next_message(), "forced 6 node a e 1");
    let tb = term_of_reply(&mut b);
    assert!(tb > t);
    assert_leads(&mut con, "e 1", "b", tb, None);

    lead(&mut a, "del");
    assert_eq!(q::<i64>(&mut con, &["DEL", "del"]), 1);
    assert_eq!(session.next_message(), "gone 6 node a del");
    assert_nobody_leads(&mut con, "del");

    // Overwritten by SET, whose (string) events the module does not hear:
    // the leader hears at its next renewal, half a lease later, and the
    // record expires with the lease it had.
    campaign(&mut a, "over", "node a", &["PX", "2000", "SESSION", "s1"]).expect("leads");
    q::<()>(&mut con, &["SET", "over", "x"]);
    assert_eq!(session.next_message(), "gone 6 node a over");
    let record_ttl = q::<i64>(&mut con, &["PTTL", &record_key("over")]);
    assert!(
        record_ttl <= 2000,
        "the record outlives its lease: {record_ttl}"
    );
    assert_eq!(err_code(&mut con, &["ELECT.LEADER", "over"]), "WRONGTYPE");
    q::<()>(&mut con, &["DEL", "over"]);

    lead(&mut a, "flushed");
    q::<()>(&mut con, &["FLUSHALL"]);
    let mut heard = vec![session.next_message()];
    // b's leadership of "e 1" was flushed too, but b keeps it with
    // KEEPALIVE: no session hears of it.
    assert_eq!(heard, ["gone 6 node a flushed"]);
    assert_nobody_leads(&mut con, "flushed");
    assert_nobody_leads(&mut con, "e 1");
    // Forced (1), deleted, overwritten, flushed (a's and b's): none by
    // its leader's resign or release.
    assert_eq!(server.stat("elections_lost"), 5, "lock_elections_lost");
    assert_eq!(server.stat("keepalive_holds"), 0);
    // The session heard nothing more (its own resign was silent).
    session
        .con
        .set_read_timeout(Some(Duration::from_millis(300)))
        .expect("timeout");
    if let Ok(v) = recv(&mut session.con) {
        heard.push(format!("{v:?}"));
        panic!("the session heard more: {heard:?}");
    }
}

/// Liveness: a leadership is renewed only while the connection keeping it
/// is heard from within the lease. A session connection that sends
/// nothing for longer than its 1 s lease is told `idle`, its leadership
/// ends then (not before one lease after it was last heard, 1.5 leases +
/// 2 s after at most: Redis counts idle time in whole seconds) and the
/// next candidate leads;
/// meanwhile a session that PINGs every quarter lease keeps its leadership
/// of another election.
#[test]
fn a_silent_session_connection_loses_its_leadership_and_the_next_leads() {
    let server = Server::start();
    let mut con = server.client();
    let lease: i64 = 1000;
    assert!(server.stat("keepalive_min_lease_ms") <= lease);
    let px = lease.to_string();

    // A plain lock kept alive by a silent connection, observed with
    // ELECT.OBSERVE: observing makes it no leadership, so the liveness rule
    // never applies to it.
    let mut plain = server.client();
    assert_eq!(
        q::<i64>(
            &mut plain,
            &["LOCK.ACQUIRE", "plain", "worker", "PX", &px, "KEEPALIVE"]
        ),
        1
    );
    assert_eq!(observe_now(&mut con, "plain"), Some(nobody()));
    let _plain_observer = observer(&server, "plain", &["TERM", "0", "BLOCK", "0"], 1);

    let mut kept = Session::open(&server, "kept");
    let mut k = server.client();
    let tk = campaign(&mut k, "busy", "k", &["PX", &px, "SESSION", "kept"]).expect("k leads");
    let busy_first_expiry = pexpiretime(&mut con, "busy");

    // The session connection is last heard from when it sends SUBSCRIBE:
    // after `sent_at`, before `heard_at`.
    let sent_at = now_ms();
    let mut silent = Session::open(&server, "silent");
    let heard_at = now_ms();
    let mut s = server.client();
    let ts = campaign(&mut s, "quiet", "s", &["PX", &px, "SESSION", "silent"]).expect("s leads");
    let mut next = queue_candidate(
        &server,
        &mut con,
        "quiet",
        "next",
        &["PX", "60000", "KEEPALIVE", "BLOCK", "0"],
        1,
    );

    // `kept` pings every quarter lease until `silent`'s leadership ends.
    let mut last_ping = Instant::now() - Duration::from_secs(1);
    wait_until("the next candidate to lead", || {
        if last_ping.elapsed() >= Duration::from_millis(250) {
            send(&mut kept.con, &["PING"]);
            last_ping = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(10));
        lock_field(&mut con, "quiet", "owner").as_deref() == Some("next")
    });
    let tn = term_of_reply(&mut next);
    let handed_at = pexpiretime(&mut con, "quiet") - 60_000;
    assert!(tn > ts);
    assert!(
        handed_at >= sent_at + lease,
        "handed on at {handed_at}, under a lease after {sent_at}"
    );
    assert!(
        handed_at <= heard_at + lease * 3 / 2 + 2000 + 1500,
        "handed on at {handed_at}, last heard at {heard_at}"
    );
    assert_eq!(silent.next_message(), "idle 1 s quiet");
    assert_leads(&mut con, "quiet", "next", tn, None);
    // Silent for as long, the plain lock is still held, kept alive.
    assert_eq!(q::<String>(&mut con, &["HGET", "plain", "worker"]), "1");
    assert!(q::<i64>(&mut con, &["PTTL", "plain"]) > 0);
    assert!(!exists(&mut con, &record_key("plain")));
    assert!(server.stat("elections_lost") >= 1);

    // The pinging session's leader still leads, renewed meanwhile; its
    // session connection heard only PONGs.
    assert_eq!(leader(&mut con, "busy").map(|l| l.term), Some(tk));
    assert_eq!(q::<String>(&mut con, &["HGET", "busy", "k"]), "1");
    // Renewed past its first lease, and the record's expiry with it (both
    // read in one MULTI: no renewal between them).
    let (lock_at, record_at): (i64, i64) = redis::pipe()
        .atomic()
        .cmd("PEXPIRETIME")
        .arg("busy")
        .cmd("PEXPIRETIME")
        .arg(record_key("busy"))
        .query(&mut con)
        .expect("MULTI");
    assert!(lock_at > busy_first_expiry, "renewed: {lock_at}");
    assert_eq!(
        record_at, lock_at,
        "the record's expiry follows each renewal"
    );
    kept.con
        .set_read_timeout(Some(Duration::from_millis(300)))
        .expect("timeout");
    while let Ok(v) = recv(&mut kept.con) {
        let is_pong = match &v {
            Value::Array(items) => items.first().map(text).as_deref() == Some("pong"),
            Value::SimpleString(s) => s == "PONG",
            _ => false,
        };
        assert!(is_pong, "the kept session heard {v:?}");
    }
}

/// Errors, each matched by its code, with nothing written: no KEEPALIVE
/// nor SESSION, syntax, bad numbers (ERR); an unknown token (NOSESSION); a
/// key of another type (WRONGTYPE); a name whose record would hash to
/// another slot (CROSSSLOT); any ELECT write on a replica (READONLY), where
/// LEADER answers as the master does.
/// The leader record is the leadership's face: deleting it alone (the lock
/// left) ends the leadership, its leader hears `gone` and the next
/// candidate leads; observers of a lock overwritten by another type are
/// answered (nobody) once its record expires with the lease it had;
/// observers hear a PROCLAIM (another value, the same term).
#[test]
fn a_deleted_record_ends_its_leadership_and_observers_hear_every_change() {
    let server = Server::start();
    let mut con = server.client();
    let mut session = Session::open(&server, "rs");
    let mut a = server.client();
    let t = campaign(&mut a, "rec", "a", &["PX", "60000", "SESSION", "rs"]).expect("a leads");
    let mut b = queue_candidate(
        &server,
        &mut con,
        "rec",
        "b",
        &["PX", "60000", "KEEPALIVE", "BLOCK", "0"],
        1,
    );
    let mut watcher = observer(&server, "rec", &["TERM", &t.to_string(), "BLOCK", "0"], 1);
    assert_eq!(q::<i64>(&mut con, &["ELECT.PROCLAIM", "rec", "a", "v2"]), t);
    let seen = observed(&mut watcher).expect("a leadership");
    assert_eq!((seen.term, seen.value.as_deref()), (t, Some("v2")));

    assert_eq!(q::<i64>(&mut con, &["DEL", &record_key("rec")]), 1);
    assert_eq!(session.next_message(), "gone 1 a rec");
    let tb = term_of_reply(&mut b);
    assert!(tb > t);
    assert_leads(&mut con, "rec", "b", tb, None);
    assert_eq!(q::<i64>(&mut con, &["ELECT.RESIGN", "rec", "b"]), 1);
    assert_nobody_leads(&mut con, "rec");

    // Overwritten by SET: the observer is answered when the record expires.
    let t = campaign(&mut a, "over", "a", &["PX", "1000", "KEEPALIVE"]).expect("a leads");
    let mut watcher = observer(&server, "over", &["TERM", &t.to_string(), "BLOCK", "0"], 1);
    q::<()>(&mut con, &["SET", "over", "x"]);
    assert_eq!(observed(&mut watcher), Some(nobody()));
    assert_eq!(server.stat("election_observers"), 0);
}

#[test]
fn errors_by_code() {
    let server = Server::start();
    let mut con = server.client();
    for args in [
        &["ELECT.CAMPAIGN", "e", "a"][..],
        &["ELECT.CAMPAIGN", "e", "a", "PX", "60000"],
        &["ELECT.CAMPAIGN", "e", "a", "PX", "-1", "KEEPALIVE"],
        &["ELECT.CAMPAIGN", "e", "a", "PX", "x", "KEEPALIVE"],
        &["ELECT.CAMPAIGN", "e", "a", "KEEPALIVE", "BLOCK", "-1"],
        &["ELECT.CAMPAIGN", "e", "a", "KEEPALIVE", "NOPE"],
        &["ELECT.CAMPAIGN", "e", "a", "VALUE"],
        &["ELECT.CAMPAIGN", "e"],
        &["ELECT.RESIGN", "e"],
        &["ELECT.PROCLAIM", "e", "a"],
        &["ELECT.OBSERVE", "e", "TERM", "x"],
        &["ELECT.OBSERVE", "e", "BLOCK", "-5"],
        &["ELECT.LEADER"],
    ] {
        assert_eq!(err_code(&mut con, args), "ERR", "{args:?}");
    }
    assert_eq!(
        err_code(&mut con, &["ELECT.CAMPAIGN", "e", "a", "SESSION", "nope"]),
        "NOSESSION"
    );
    q::<()>(&mut con, &["SET", "str", "x"]);
    q::<i64>(&mut con, &["RPUSH", "list", "x"]);
    for key in ["str", "list"] {
        for args in [
            &["ELECT.CAMPAIGN", key, "a", "KEEPALIVE"][..],
            &["ELECT.RESIGN", key, "a"],
            &["ELECT.PROCLAIM", key, "a", "v"],
            &["ELECT.LEADER", key],
            &["ELECT.OBSERVE", key, "TERM", "3"],
        ] {
            assert_eq!(err_code(&mut con, args), "WRONGTYPE", "{args:?}");
        }
    }
    for key in ["x{}y", "x{y"] {
        assert_eq!(
            err_code(&mut con, &["ELECT.CAMPAIGN", key, "a", "KEEPALIVE"]),
            "CROSSSLOT",
            "{key}"
        );
    }
    // ACL: the caller must be allowed to write the record and the counter.
    q::<()>(
        &mut con,
        &["ACL", "SETUSER", "narrow", "on", ">pw", "~e", "+@all"],
    );
    let mut narrow = server.client();
    q::<()>(&mut narrow, &["AUTH", "narrow", "pw"]);
    assert_eq!(
        err_code(&mut narrow, &["ELECT.CAMPAIGN", "e", "a", "KEEPALIVE"]),
        "NOPERM"
    );
    assert!(!exists(&mut con, "e"));
    // A name with a proper hash tag is fine: its record is `name:leader`.
    let mut a = server.client();
    let t = campaign(&mut a, "{t}x", "a", &["KEEPALIVE"]).expect("leads");
    assert_eq!(
        q::<String>(&mut con, &["HGET", "{t}x:leader", "term"]),
        t.to_string()
    );
    assert_eq!(q::<i64>(&mut con, &["ELECT.RESIGN", "{t}x", "a"]), 1);
    q::<()>(&mut con, &["DEL", "str", "list"]);
    let mut keys: Vec<String> = q(&mut con, &["KEYS", "*"]);
    keys.retain(|k| !k.starts_with("redisson_lock_token:"));
    assert_eq!(
        keys,
        Vec::<String>::new(),
        "nothing written by a refused call"
    );
    assert_eq!(server.stat("waiters"), 0);
    assert_eq!(server.stat("keepalive_holds"), 0);

    // A replica: writes refused READONLY, LEADER as on the master.
    let t = campaign(
        &mut a,
        "e",
        "a",
        &["VALUE", "v", "PX", "60000", "KEEPALIVE"],
    )
    .expect("a");
    let replica = server.start_replica(Config::default());
    wait_until("the replica caught up", || {
        server.replica_caught_up(&replica)
    });
    let mut on_replica = replica.client();
    for args in [
        &["ELECT.CAMPAIGN", "e", "b", "KEEPALIVE"][..],
        &["ELECT.CAMPAIGN", "f", "b", "KEEPALIVE"],
        &["ELECT.RESIGN", "e", "a"],
        &["ELECT.PROCLAIM", "e", "a", "w"],
    ] {
        assert_eq!(err_code(&mut on_replica, args), "READONLY", "{args:?}");
    }
    let on_master = leader(&mut con, "e").expect("a leads");
    let seen = leader(&mut on_replica, "e").expect("a leads on the replica");
    assert_eq!(
        (seen.candidate.as_deref(), seen.term, seen.value.as_deref()),
        (Some("a"), t, Some("v"))
    );
    assert_in(seen.ttl, 0, on_master.ttl + 1000, "the replica's ttl");
    assert_eq!(record(&mut on_replica, "e"), record(&mut con, "e"));
}

/// Each key as (value digest, PEXPIRETIME), for a key-by-key comparison.
fn snapshot(server: &Server) -> BTreeMap<String, (String, i64)> {
    let mut con = server.client();
    let keys: Vec<String> = q(&mut con, &["KEYS", "*"]);
    keys.into_iter()
        .map(|key| {
            let digest: Vec<String> = q(&mut con, &["DEBUG", "DIGEST-VALUE", &key]);
            let at = pexpiretime(&mut con, &key);
            (key, (digest.concat(), at))
        })
        .collect()
}

/// What `master`'s AOF holds: [`snapshot`] of a server started on a copy
/// of it.
fn aof_snapshot(master: &Server) -> BTreeMap<String, (String, i64)> {
    let dir = fresh_dir();
    let src = master.dir.join("appendonlydir");
    let dst = dir.join("appendonlydir");
    fs::create_dir_all(&dst).expect("mkdir");
    for entry in fs::read_dir(&src).expect("the master's appendonlydir") {
        let entry = entry.expect("entry");
        fs::copy(entry.path(), dst.join(entry.file_name())).expect("copy the AOF");
    }
    // Later than the harness's own --dir, so this one counts.
    let copy = Config::default()
        .aof()
        .arg("dir", &dir.to_string_lossy())
        .start();
    let held = snapshot(&copy);
    drop(copy);
    let _ = fs::remove_dir_all(&dir);
    held
}

/// After hand-offs (resign to a waiting candidate, PROCLAIM, a forced
/// release), a real replica (`replicaof`) and the AOF hold the same lock,
/// record and fencing counter as the master, key by key with the same
/// absolute expiries; after the last resign nothing is left on any of the
/// three but the fencing counter.
#[test]
fn a_replica_and_the_aof_agree_with_the_master_after_hand_offs() {
    let master = Config::default().aof().start();
    let replica = master.start_replica(Config::default());
    let mut con = master.client();
    let k = "svc";
    let mut a = master.client();
    let t1 = campaign(&mut a, k, "a", &["VALUE", "va", "PX", "60000", "KEEPALIVE"]).expect("a");
    let mut b = queue_candidate(
        &master,
        &mut con,
        k,
        "b",
        &["VALUE", "vb", "PX", "50000", "KEEPALIVE", "BLOCK", "0"],
        1,
    );
    let mut c = queue_candidate(
        &master,
        &mut con,
        k,
        "c",
        &["PX", "40000", "KEEPALIVE", "BLOCK", "0"],
        2,
    );
    assert_eq!(q::<i64>(&mut con, &["ELECT.RESIGN", k, "a"]), 1);
    let t2 = term_of_reply(&mut b);
    // An observer on the replica hears the PROCLAIM (the same term, another
    // value) from the replicated record.
    wait_until("the replica has b's record", || {
        leader(&mut replica.client(), k).is_some_and(|l| l.term == t2)
    });
    let mut on_replica = replica.client();
    send(
        &mut on_replica,
        &["ELECT.OBSERVE", k, "TERM", &t2.to_string(), "BLOCK", "0"],
    );
    wait_until("the replica's observer blocked", || {
        replica.stat("election_observers") == 1
    });
    assert_eq!(q::<i64>(&mut con, &["ELECT.PROCLAIM", k, "b", "vb2"]), t2);
    let seen = observed(&mut on_replica).expect("b leads");
    assert_eq!((seen.term, seen.value.as_deref()), (t2, Some("vb2")));
    assert_eq!(q::<i64>(&mut con, &["LOCK.FORCERELEASE", k]), 1);
    let t3 = term_of_reply(&mut c);
    assert!(t1 < t2 && t2 < t3);
    assert_leads(&mut con, k, "c", t3, None);

    let compare = |what: &str| {
        wait_until("the replica caught up", || {
            master.replica_caught_up(&replica)
        });
        let want = snapshot(&master);
        assert_eq!(snapshot(&replica), want, "the replica {what}");
        assert_eq!(aof_snapshot(&master), want, "the AOF {what}");
        want
    };
    let held = compare("while c leads");
    let keys: Vec<&str> = held.keys().map(String::as_str).collect();
    let mut expected = vec![k.to_string(), record_key(k), counter_key(k)];
    expected.sort();
    assert_eq!(keys, expected);
    assert_eq!(
        held[k].1,
        held[&record_key(k)].1,
        "the record expires with the lock"
    );
    assert_eq!(
        leader(&mut replica.client(), k).map(|l| (l.candidate, l.term)),
        Some((Some("c".to_string()), t3))
    );

    assert_eq!(q::<i64>(&mut con, &["ELECT.RESIGN", k, "c"]), 1);
    let left = compare("after the last resign");
    assert_eq!(left.keys().collect::<Vec<_>>(), [&counter_key(k)]);
    assert_eq!(leader(&mut replica.client(), k), None);
    assert_eq!(master.stat("keepalive_holds"), 0);
    assert_eq!(master.stat("waiters"), 0);
    assert_eq!(master.stat("elections_won"), 3);
    assert_eq!(
        master.stat("elections_lost"),
        1,
        "b's, by the forced release"
    );
}
