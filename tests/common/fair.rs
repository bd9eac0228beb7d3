//! A Redisson `RFairLock` client for tests: it runs our scripts
//! (scripts/redisson-fair-*.lua, written from
//! shared/notes/redisson-fairlock.md) the way Redisson's `lock()` and
//! `tryLock(wait, ..)` do: one attempt; on a ttl, subscribe to the caller's
//! own channel `redisson_lock__channel:{name}:<owner>`, attempt again, then
//! wait for a message or the ttl and retry; on giving up, acquireFailed.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::{lock_field, q, queue_waiter, recv, Connection, Server, Value, PATIENCE};

/// tryLock: ARGV lease, owner, wait, now, 'ttl' | 'bool'.
pub const ACQUIRE: &str = include_str!("../../scripts/redisson-fair-acquire.lua");
/// unlock: ARGV '0', lease, owner, now, publish command, latch PX.
pub const RELEASE: &str = include_str!("../../scripts/redisson-fair-release.lua");
/// acquireFailed: ARGV owner, wait.
pub const ACQUIRE_FAILED: &str = include_str!("../../scripts/redisson-fair-acquire-failed.lua");

/// Redisson's default `fairLockWaitTimeout` (5 minutes).
pub const DEFAULT_WAIT_MS: i64 = 300_000;

/// Redisson's `prefixName`: `prefix:{name}`, or `prefix:name` when the name
/// has its own tag.
pub fn prefixed(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// The waiting owners, in order (a LIST).
pub fn queue_key(name: &str) -> String {
    prefixed("redisson_lock_queue", name)
}

/// Owner -> absolute deadline in ms (a ZSET).
pub fn timeout_key(name: &str) -> String {
    prefixed("redisson_lock_timeout", name)
}

/// The plain lock channel; a fair waiter listens on `<this>:<owner>`.
pub fn channel(name: &str) -> String {
    prefixed("redisson_lock__channel", name)
}

pub fn own_channel(name: &str, owner: &str) -> String {
    format!("{}:{owner}", channel(name))
}

/// The client clock Redisson passes to its scripts.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64
}

/// One tryLock ("ttl" variant, which queues the caller): `None` when taken
/// or re-entered, else the ttl to wait.
pub fn try_acquire(
    con: &mut Connection,
    name: &str,
    owner: &str,
    lease_ms: i64,
    wait_ms: i64,
) -> Option<i64> {
    match acquire_script(con, name, owner, lease_ms, wait_ms, "ttl") {
        Value::Nil => None,
        Value::Int(ttl) => Some(ttl),
        other => panic!("fair tryLock replied {other:?}"),
    }
}

/// tryLock without a wait ("boolean" variant): taken or not; never queues.
pub fn try_acquire_once(con: &mut Connection, name: &str, owner: &str, lease_ms: i64) -> bool {
    match acquire_script(con, name, owner, lease_ms, DEFAULT_WAIT_MS, "bool") {
        Value::Nil => true,
        Value::Int(1) => false,
        other => panic!("fair tryLock (boolean) replied {other:?}"),
    }
}

/// The acquire script, `variant` `ttl` (queues the caller) or `bool`.
fn acquire_script(
    con: &mut Connection,
    name: &str,
    owner: &str,
    lease_ms: i64,
    wait_ms: i64,
    variant: &str,
) -> Value {
    let (q_key, t_key) = (queue_key(name), timeout_key(name));
    let (lease, wait, now) = (
        lease_ms.to_string(),
        wait_ms.to_string(),
        now_ms().to_string(),
    );
    let args = [
        "EVAL", ACQUIRE, "3", name, &q_key, &t_key, &lease, owner, &wait, &now, variant,
    ];
    q(con, &args)
}

/// unlock, with Redisson's unlock latch (set by the script, DEL'd after the
/// reply): nil (not the owner), 0 (holds remain) or 1 (released).
pub fn release(con: &mut Connection, name: &str, owner: &str, lease_ms: i64) -> Value {
    let (q_key, t_key, ch) = (queue_key(name), timeout_key(name), channel(name));
    let latch = format!(
        "{}:{owner}-{}",
        prefixed("redisson_unlock_latch", name),
        now_ms()
    );
    let (lease, now) = (lease_ms.to_string(), now_ms().to_string());
    let args = [
        "EVAL", RELEASE, "5", name, &q_key, &t_key, &ch, &latch, "0", &lease, owner, &now,
        "publish", "30000",
    ];
    let reply: Value = q(con, &args);
    let _: i64 = q(con, &["DEL", &latch]);
    reply
}

/// acquireFailed: leave the queue; those behind are due `wait_ms` earlier.
pub fn acquire_failed(con: &mut Connection, name: &str, owner: &str, wait_ms: i64) {
    let (q_key, t_key, wait) = (queue_key(name), timeout_key(name), wait_ms.to_string());
    let _: Value = q(
        con,
        &["EVAL", ACQUIRE_FAILED, "2", &q_key, &t_key, owner, &wait],
    );
}

/// How a lock call went.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Wakes {
    /// Script runs.
    pub attempts: u32,
    /// Waits ended by a message on the caller's own channel.
    pub messages: u32,
    /// Waits ended by the ttl (or the time left) running out.
    pub timeouts: u32,
}

/// One Redisson fair-lock caller (an owner `<uuid>:<thread id>`) on a name.
pub struct FairClient {
    con: Connection,
    sub: Connection,
    pub name: String,
    pub owner: String,
    pub lease_ms: i64,
}

impl FairClient {
    /// A caller with a 60 s lease (so that sleeping out a lease is never
    /// mistaken for a wake-up).
    pub fn new(server: &Server, name: &str, owner: &str) -> FairClient {
        FairClient {
            con: server.client(),
            sub: server.client(),
            name: name.to_string(),
            owner: owner.to_string(),
            lease_ms: 60_000,
        }
    }

    /// `lock()`: waits (with threadWaitTime as its queue wait) until taken;
    /// panics after [`PATIENCE`] (a test failure, not Redisson behaviour).
    pub fn lock(&mut self) -> Wakes {
        let deadline = Instant::now() + PATIENCE;
        self.run(DEFAULT_WAIT_MS, deadline)
            .unwrap_or_else(|| panic!("{} never got {}", self.owner, self.name))
    }

    /// `tryLock(wait, lease)`: `None` when it gave up (after acquireFailed).
    pub fn try_lock(&mut self, wait: Duration) -> Option<Wakes> {
        let deadline = Instant::now() + wait;
        let wakes = self.run(wait.as_millis() as i64, deadline);
        if wakes.is_none() {
            let (name, owner) = (self.name.clone(), self.owner.clone());
            acquire_failed(&mut self.con, &name, &owner, wait.as_millis() as i64);
        }
        wakes
    }

    /// unlock (see [`release`]).
    pub fn unlock(&mut self) -> Value {
        let (name, owner) = (self.name.clone(), self.owner.clone());
        release(&mut self.con, &name, &owner, self.lease_ms)
    }

    fn attempt(&mut self, wakes: &mut Wakes, wait_ms: i64) -> Option<i64> {
        wakes.attempts += 1;
        let (name, owner) = (self.name.clone(), self.owner.clone());
        try_acquire(&mut self.con, &name, &owner, self.lease_ms, wait_ms)
    }

    /// The loop of `lock()` / `tryLock(wait)`: Some when taken before
    /// `deadline`.
    fn run(&mut self, wait_ms: i64, deadline: Instant) -> Option<Wakes> {
        let mut wakes = Wakes::default();
        if self.attempt(&mut wakes, wait_ms).is_none() {
            return Some(wakes);
        }
        let ch = own_channel(&self.name, &self.owner);
        let mut sub = self.sub.as_pubsub();
        sub.subscribe(&ch).expect("subscribe");
        let taken = loop {
            let ttl = {
                wakes.attempts += 1;
                try_acquire(
                    &mut self.con,
                    &self.name,
                    &self.owner,
                    self.lease_ms,
                    wait_ms,
                )
            };
            let Some(ttl) = ttl else { break true };
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break false;
            }
            let pause = if ttl >= 0 {
                left.min(Duration::from_millis(ttl as u64))
            } else {
                left
            };
            if pause.is_zero() {
                // ttl 0: free but someone else is first; Redisson retries at once.
                continue;
            }
            sub.set_read_timeout(Some(pause)).expect("read timeout");
            match sub.get_message() {
                Ok(_) => wakes.messages += 1,
                Err(e) if e.is_timeout() => wakes.timeouts += 1,
                Err(e) => panic!("{}: subscription failed: {e}", self.owner),
            }
            // As Redisson: the time used up after a wait means giving up,
            // without another attempt.
            if Instant::now() >= deadline {
                break false;
            }
        };
        sub.unsubscribe(&ch).expect("unsubscribe");
        drop(sub);
        self.sub
            .set_read_timeout(Some(PATIENCE))
            .expect("read timeout");
        taken.then_some(wakes)
    }
}

/// `owner` queued on `name` with `LOCK.ACQUIRE name owner PX px BLOCK
/// block`; its connection answers when it is served.
pub fn module_waiter(
    server: &Server,
    con: &mut Connection,
    name: &str,
    owner: &str,
    px: &str,
    block: &str,
) -> Connection {
    queue_waiter::<Connection>(server, con, name, owner, &["PX", px, "BLOCK", block], 1)
}

/// A `LOCK.ACQUIRE ... BLOCK` caller (queued with `module_waiter`) is
/// answered the lock, and `owner` holds `name` now.
pub fn assert_served(con: &mut Connection, waiter: &mut Connection, name: &str, owner: &str) {
    assert_eq!(recv(waiter).expect("module waiter's reply"), Value::Int(1));
    assert_eq!(lock_field(con, name, "owner").as_deref(), Some(owner));
}
