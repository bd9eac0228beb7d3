//! Redisson's semaphore and count-down latch scripts (scripts/redisson-sem-*.lua,
//! scripts/redisson-latch-*.lua, extracted from Redisson) run byte for byte
//! as Redisson sends them, and SEM.INFO / LATCH.INFO read back, for
//! tests/redisson_semaphores.rs and tests/semaphore_replication.rs.
//!
//! Not a module of `common` (mod.rs does not declare it): each test that
//! uses it includes it with `#[path = "common/redisson_sem.rs"] mod
//! redisson_sem;`, beside its `mod common;`.

#![allow(dead_code)]

use crate::common::{q, raw, wait_until, Connection, Rng, Value};

/// Redisson's "no lease" score for a permit (`nonExpirableTimeout`).
pub const NEVER: i64 = 922_337_203_685_477;

/// The script of one of scripts/redisson-{sem,latch}-*.lua as Redisson sends
/// it: the header comment dropped, the lines (one Java string literal each)
/// joined without their newlines.
pub fn redisson_script(file: &str) -> String {
    file.lines()
        .skip_while(|line| line.starts_with("--"))
        .collect::<Vec<_>>()
        .concat()
}

/// The scripts, each as Redisson sends it.
pub mod lua {
    macro_rules! script {
        ($name:ident, $file:literal) => {
            pub fn $name() -> String {
                super::redisson_script(include_str!(concat!("../../scripts/", $file)))
            }
        };
    }

    script!(
        expirable_try_acquire,
        "redisson-sem-expirable-try-acquire.lua"
    );
    script!(
        expirable_try_release,
        "redisson-sem-expirable-try-release.lua"
    );
    script!(
        expirable_available_permits,
        "redisson-sem-expirable-available-permits.lua"
    );
    script!(
        expirable_get_permits,
        "redisson-sem-expirable-get-permits.lua"
    );
    script!(
        expirable_update_lease_time,
        "redisson-sem-expirable-update-lease-time.lua"
    );
    script!(try_set_permits, "redisson-sem-try-set-permits.lua");
    script!(plain_try_acquire, "redisson-sem-try-acquire.lua");
    script!(plain_release, "redisson-sem-release.lua");
    script!(latch_try_set_count, "redisson-latch-try-set-count.lua");
    script!(latch_count_down, "redisson-latch-count-down.lua");
}

/// `EVAL script numkeys keys... args...` with binary arguments.
pub fn eval(
    con: &mut Connection,
    script: &str,
    keys: &[&[u8]],
    args: &[&[u8]],
) -> redis::RedisResult<Value> {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(script).arg(keys.len());
    for k in keys {
        cmd.arg(*k);
    }
    for a in args {
        cmd.arg(*a);
    }
    cmd.query(con)
}

/// A command with binary arguments, expected to succeed.
pub fn qb<T: redis::FromRedisValue>(con: &mut Connection, args: &[&[u8]]) -> T {
    let mut cmd = redis::cmd(std::str::from_utf8(args[0]).expect("command name"));
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query(con)
        .unwrap_or_else(|e| panic!("{:?} failed: {e}", String::from_utf8_lossy(args[0])))
}

/// The server's clock, unix ms (what Redisson's client clock stands for).
pub fn server_ms(con: &mut Connection) -> i64 {
    let time: Vec<i64> = q(con, &["TIME"]);
    time[0] * 1000 + time[1] / 1000
}

/// `n` Redisson permit ids: 16 random bytes each, as Redisson's
/// `generateId` makes them (the first one made to hold a byte that is not
/// UTF-8, as about every random id does).
pub fn permit_ids(rng: &mut Rng, n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let mut id: Vec<u8> = [rng.next(), rng.next()]
                .iter()
                .flat_map(|w| w.to_le_bytes())
                .collect();
            if i == 0 {
                id[0] = 0xff;
            }
            // Never `<something>:<digits>`: that is how the module names
            // its own owners' permits.
            if id[15].is_ascii_digit() {
                id[15] = b'x';
            }
            id
        })
        .collect()
}

/// RedissonObject.suffixName / prefixName.
fn tagged(name: &str) -> bool {
    name.contains('{')
}

/// A Redisson semaphore's names: the counter, the timeout set
/// (`{name}:timeout`) and the channel (`redisson_sc:{name}`).
#[derive(Clone, Debug)]
pub struct RSem {
    pub name: String,
    pub timeout: String,
    pub channel: String,
}

impl RSem {
    pub fn new(name: &str) -> RSem {
        let (timeout, channel) = if tagged(name) {
            (format!("{name}:timeout"), format!("redisson_sc:{name}"))
        } else {
            (
                format!("{{{name}}}:timeout"),
                format!("redisson_sc:{{{name}}}"),
            )
        };
        RSem {
            name: name.into(),
            timeout,
            channel,
        }
    }

    /// RPermitExpirableSemaphore tryAcquire of `ids.len()` permits whose
    /// lease ends at `lease_end` ([`NEVER`]: none), at `now`: `Ok` when
    /// taken, else the script's reply (`:<score>` or nil).
    pub fn try_acquire(
        &self,
        con: &mut Connection,
        ids: &[Vec<u8>],
        lease_end: i64,
        now: i64,
    ) -> Result<(), Value> {
        let n = ids.len().to_string();
        let (end, now, never) = (lease_end.to_string(), now.to_string(), NEVER.to_string());
        let mut args: Vec<&[u8]> = vec![
            n.as_bytes(),
            end.as_bytes(),
            now.as_bytes(),
            never.as_bytes(),
            b"publish",
        ];
        args.extend(ids.iter().map(Vec::as_slice));
        let keys: [&[u8]; 3] = [
            self.name.as_bytes(),
            self.timeout.as_bytes(),
            self.channel.as_bytes(),
        ];
        match eval(con, &lua::expirable_try_acquire(), &keys, &args).expect("Redisson tryAcquire") {
            Value::BulkString(b) if b == b"OK" => Ok(()),
            Value::Okay => Ok(()),
            other => Err(other),
        }
    }

    /// RPermitExpirableSemaphore tryRelease(id) at `now`: 1 released, 0 not
    /// held (or its lease had ended).
    pub fn try_release(&self, con: &mut Connection, id: &[u8], now: i64) -> i64 {
        let now = now.to_string();
        let keys: [&[u8]; 3] = [
            self.name.as_bytes(),
            self.channel.as_bytes(),
            self.timeout.as_bytes(),
        ];
        let args: [&[u8]; 4] = [id, b"1", now.as_bytes(), b"publish"];
        match eval(con, &lua::expirable_try_release(), &keys, &args).expect("Redisson tryRelease") {
            Value::Int(n) => n,
            other => panic!("Redisson tryRelease replied {other:?}"),
        }
    }

    fn now_and_publish(&self, con: &mut Connection, script: &str, now: i64, what: &str) -> i64 {
        let now = now.to_string();
        let keys: [&[u8]; 3] = [
            self.name.as_bytes(),
            self.timeout.as_bytes(),
            self.channel.as_bytes(),
        ];
        let args: [&[u8]; 2] = [now.as_bytes(), b"publish"];
        match eval(con, script, &keys, &args).unwrap_or_else(|e| panic!("{what}: {e}")) {
            Value::Int(n) => n,
            Value::BulkString(b) => String::from_utf8_lossy(&b)
                .parse()
                .unwrap_or_else(|_| panic!("{what} replied {b:?}")),
            other => panic!("{what} replied {other:?}"),
        }
    }

    /// RPermitExpirableSemaphore availablePermits at `now`.
    pub fn available_permits(&self, con: &mut Connection, now: i64) -> i64 {
        self.now_and_publish(
            con,
            &lua::expirable_available_permits(),
            now,
            "Redisson availablePermits",
        )
    }

    /// RPermitExpirableSemaphore getPermits at `now`: available plus held.
    pub fn get_permits(&self, con: &mut Connection, now: i64) -> i64 {
        self.now_and_publish(
            con,
            &lua::expirable_get_permits(),
            now,
            "Redisson getPermits",
        )
    }

    /// RPermitExpirableSemaphore updateLeaseTime(id) to end at `end`, at `now`.
    pub fn update_lease_time(&self, con: &mut Connection, id: &[u8], end: i64, now: i64) -> i64 {
        let (end, now) = (end.to_string(), now.to_string());
        let keys: [&[u8]; 3] = [
            self.name.as_bytes(),
            self.timeout.as_bytes(),
            self.channel.as_bytes(),
        ];
        let args: [&[u8]; 4] = [id, end.as_bytes(), now.as_bytes(), b"publish"];
        match eval(con, &lua::expirable_update_lease_time(), &keys, &args)
            .expect("Redisson updateLeaseTime")
        {
            Value::Int(n) => n,
            other => panic!("Redisson updateLeaseTime replied {other:?}"),
        }
    }

    /// RSemaphore / RPermitExpirableSemaphore trySetPermits: 1 set, 0 exists.
    pub fn try_set_permits(&self, con: &mut Connection, permits: i64) -> i64 {
        let p = permits.to_string();
        let keys: [&[u8]; 2] = [self.name.as_bytes(), self.channel.as_bytes()];
        match eval(
            con,
            &lua::try_set_permits(),
            &keys,
            &[p.as_bytes(), b"publish"],
        )
        .expect("Redisson trySetPermits")
        {
            Value::Int(n) => n,
            other => panic!("Redisson trySetPermits replied {other:?}"),
        }
    }

    /// RSemaphore tryAcquire(permits): 1 taken, 0 not.
    pub fn plain_try_acquire(&self, con: &mut Connection, permits: i64) -> i64 {
        let p = permits.to_string();
        match eval(
            con,
            &lua::plain_try_acquire(),
            &[self.name.as_bytes()],
            &[p.as_bytes()],
        )
        .expect("RSemaphore tryAcquire")
        {
            Value::Int(n) => n,
            other => panic!("RSemaphore tryAcquire replied {other:?}"),
        }
    }

    /// RSemaphore release(permits): INCRBY and PUBLISH of the new count.
    pub fn plain_release(&self, con: &mut Connection, permits: i64) {
        let p = permits.to_string();
        let keys: [&[u8]; 2] = [self.name.as_bytes(), self.channel.as_bytes()];
        let reply = eval(
            con,
            &lua::plain_release(),
            &keys,
            &[p.as_bytes(), b"publish"],
        )
        .expect("RSemaphore release");
        assert_eq!(reply, Value::Nil, "RSemaphore release");
    }
}

/// RCountDownLatch's channel: always `redisson_countdownlatch__channel__{name}`.
pub fn latch_channel(name: &str) -> String {
    format!("redisson_countdownlatch__channel__{{{name}}}")
}

/// RCountDownLatch trySetCount: 1 set (and `1` published), 0 exists.
pub fn latch_set_count(con: &mut Connection, name: &str, count: i64) -> i64 {
    let (ch, count) = (latch_channel(name), count.to_string());
    let keys: [&[u8]; 2] = [name.as_bytes(), ch.as_bytes()];
    match eval(
        con,
        &lua::latch_try_set_count(),
        &keys,
        &[b"1", count.as_bytes(), b"publish"],
    )
    .expect("RCountDownLatch trySetCount")
    {
        Value::Int(n) => n,
        other => panic!("RCountDownLatch trySetCount replied {other:?}"),
    }
}

/// RCountDownLatch countDown: DECR; DEL and PUBLISH `0` at zero.
pub fn latch_count_down(con: &mut Connection, name: &str) {
    let ch = latch_channel(name);
    let keys: [&[u8]; 2] = [name.as_bytes(), ch.as_bytes()];
    let reply = eval(con, &lua::latch_count_down(), &keys, &[b"0", b"publish"])
        .expect("RCountDownLatch countDown");
    assert_eq!(reply, Value::Nil, "RCountDownLatch countDown");
}

/// One holder of SEM.INFO.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    pub owner: Vec<u8>,
    pub permits: i64,
    /// ms left of its lease, -1 for none.
    pub ttl: i64,
    pub keepalive: bool,
}

/// SEM.INFO.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SemInfo {
    pub permits: i64,
    pub available: i64,
    pub holders: Vec<Holder>,
    pub waiters: i64,
}

impl SemInfo {
    pub fn holder(&self, owner: &[u8]) -> Option<&Holder> {
        self.holders.iter().find(|h| h.owner == owner)
    }

    /// (owner, permits) of every holder, in SEM.INFO's order.
    pub fn held(&self) -> Vec<(Vec<u8>, i64)> {
        self.holders
            .iter()
            .map(|h| (h.owner.clone(), h.permits))
            .collect()
    }
}

/// A map reply (RESP2 flat array or RESP3 map) as (name, value) pairs.
fn pairs(v: Value, what: &str) -> Vec<(String, Value)> {
    let items: Vec<(Value, Value)> = match v {
        Value::Array(items) => {
            assert!(items.len() % 2 == 0, "{what}: odd map {items:?}");
            let mut it = items.into_iter();
            std::iter::from_fn(|| Some((it.next()?, it.next()?))).collect()
        }
        Value::Map(kv) => kv,
        other => panic!("{what}: not a map: {other:?}"),
    };
    items
        .into_iter()
        .map(|(k, v)| match k {
            Value::BulkString(b) => (String::from_utf8_lossy(&b).into_owned(), v),
            Value::SimpleString(s) => (s, v),
            other => panic!("{what}: field name {other:?}"),
        })
        .collect()
}

fn int(v: &Value, what: &str) -> i64 {
    match v {
        Value::Int(n) => *n,
        other => panic!("{what}: not an integer: {other:?}"),
    }
}

/// SEM.INFO `key` (nil: `None`), with every field checked present.
pub fn sem_info(con: &mut Connection, key: &str) -> Option<SemInfo> {
    let reply = raw(con, &["SEM.INFO", key]).expect("SEM.INFO");
    if reply == Value::Nil {
        return None;
    }
    let fields = pairs(reply, "SEM.INFO");
    let get = |name: &str| -> &Value {
        &fields
            .iter()
            .find(|(k, _)| k == name)
            .unwrap_or_else(|| panic!("SEM.INFO has no {name}: {fields:?}"))
            .1
    };
    let holders = match get("holders") {
        Value::Array(hs) => hs
            .iter()
            .map(|h| {
                let hf = pairs(h.clone(), "SEM.INFO holder");
                let hget = |name: &str| hf.iter().find(|(k, _)| k == name).map(|(_, v)| v);
                Holder {
                    owner: match hget("owner") {
                        Some(Value::BulkString(b)) => b.clone(),
                        other => panic!("SEM.INFO holder owner {other:?}"),
                    },
                    permits: int(hget("permits").expect("holder permits"), "permits"),
                    ttl: int(hget("ttl").expect("holder ttl"), "ttl"),
                    keepalive: hget("keepalive_client").is_some(),
                }
            })
            .collect(),
        other => panic!("SEM.INFO holders {other:?}"),
    };
    Some(SemInfo {
        permits: int(get("permits"), "permits"),
        available: int(get("available"), "available"),
        holders,
        waiters: int(get("waiters"), "waiters"),
    })
}

/// Waits until `n` callers are queued on the semaphore `key` (SEM.INFO).
pub fn wait_for_sem_waiters(con: &mut Connection, key: &str, n: i64) {
    wait_until(&format!("{n} waiters on semaphore {key}"), || {
        sem_info(con, key).map_or(0, |i| i.waiters) == n
    });
}

/// LATCH.INFO `key` as (field, value) pairs; `None` when missing.
pub fn latch_info(con: &mut Connection, key: &str) -> Option<Vec<(String, Value)>> {
    match raw(con, &["LATCH.INFO", key]).expect("LATCH.INFO") {
        Value::Nil => None,
        v => Some(pairs(v, "LATCH.INFO")),
    }
}

/// A LATCH.INFO integer field.
pub fn latch_field(con: &mut Connection, key: &str, name: &str) -> Option<i64> {
    latch_info(con, key).map(|f| {
        int(
            &f.iter()
                .find(|(k, _)| k == name)
                .unwrap_or_else(|| panic!("LATCH.INFO has no {name}: {f:?}"))
                .1,
            name,
        )
    })
}

/// The timeout set as (member, score), lowest score first.
pub fn timeout_set(con: &mut Connection, sem: &RSem) -> Vec<(Vec<u8>, i64)> {
    let flat: Vec<Vec<u8>> = q(con, &["ZRANGE", &sem.timeout, "0", "-1", "WITHSCORES"]);
    flat.chunks(2)
        .map(|c| {
            let score = String::from_utf8_lossy(&c[1])
                .parse::<f64>()
                .expect("score");
            (c[0].clone(), score as i64)
        })
        .collect()
}

/// The counter's value (`None` when missing).
pub fn counter(con: &mut Connection, sem: &RSem) -> Option<i64> {
    q(con, &["GET", &sem.name])
}
