//! Closed-loop lock clients for the throughput scenarios (S1, S2, S5, S7,
//! S8, S12; S3 and S15 drive them too), one tokio task per client on a
//! current_thread runtime, and the protocols:
//!
//! - module:   `LOCK.ACQUIRE key owner PX lease BLOCK wait` / `LOCK.RELEASE key owner`
//! - module-keepalive: the same with `KEEPALIVE` (the server renews the lease
//!   while the connection lives)
//! - module-fence: the same with `FENCE` (the answer is the lock's fencing
//!   token, which must be above the key's previous one; the server writes
//!   the token key `redisson_lock_token:{key}` on every acquire)
//! - redisson: acquire script by EVALSHA; on a PTTL answer the client's process
//!   subscribes to `redisson_lock__channel:{key}` (once per process and lock) and
//!   the client retries when one message is handed to it or the PTTL passes;
//!   release script (HINCRBY -1, DEL + PUBLISH at 0)
//! - spin:     `SET key owner NX PX lease`, retried after a fixed sleep;
//!   compare-and-delete script to release
//! - raw:      `SET key owner NX PX lease` retried at once / `DEL key`
//! - blpop:    S2's reference, not a lock: the key is a list holding one
//!   token (`DEL` + `RPUSH` before the run); `BLPOP key wait` / `RPUSH key
//!   token`, Redis's own hand-off between blocked clients, no module involved
//! - module-floor: S2's other reference: `FLOOR.ACQUIRE key wait` /
//!   `FLOOR.RELEASE key` of libfloor.so (bench/floor), a module that only
//!   blocks and unblocks: the module API's own hand-off
//!
//! With `LoadSpec::read_fraction` set (S7), module and redisson take a
//! read-write lock instead: each cycle is a read with that probability (a
//! seeded RNG per client), else a write. module: `LOCK.RACQUIRE` /
//! `LOCK.WACQUIRE key owner PX lease BLOCK wait`, `LOCK.RELEASE`; redisson:
//! the RReadWriteLock scripts by EVALSHA, waiting on
//! `redisson_rwlock:{key}` (a write release publishes 1, which wakes every
//! waiting thread of a process; the last read release publishes 0, which
//! wakes one). The critical section is one round trip: a read `GET`s the
//! key's data, a write `INCR`s it.
//!
//! With `LoadSpec::multi` set (S8), module and redisson take several keys at
//! once: each cycle picks distinct keys at random (named in that random order
//! or sorted). module: `LOCK.MACQUIRE n key.. owner PX lease BLOCK wait`
//! (retried on nil), `LOCK.MRELEASE n key.. owner`; redisson:
//! `RedissonMultiLock.lock()`, i.e. `tryLock` with a wait of 1.5 s per key,
//! called again whenever it gives up: the keys one by one in the caller's
//! order, each with `RLock.tryLock` for the wait left (the acquire script and
//! the pub/sub waits above), the keys taken so far unlocked when the time is
//! up; the releases of all keys sent together. The critical section is one
//! round trip that `INCR`s every key's data (pipelined).
//!
//! Every grant is checked against a holder flag per key (set when the grant
//! arrives, cleared before the release is sent; for read-write locks an
//! atomic count of the readers and writers holding the key) and every reply
//! against what the protocol must answer; either failing is reported and
//! fails the run. Where the critical section touches the guarded data (S7,
//! S8), the server's answers are checked against the writes completed too.
//!
//! Offers: [`run_load`] (a [`LoadSpec`] run as a [`LoadResult`]), [`Harness`]
//! (a run's clients connected, for a scenario to drive itself), the
//! protocols ([`Proto`]) and their scripts ([`Scripts`]), [`commandstats`]
//! and [`ping_rate`].
//!
//! The parts: `spec` (what a run is: protocol, clients, keys, kind of lock),
//! `scripts` (Redisson's and the spin lock's Lua), `shared` (one run's state
//! shared by its clients), `process` (a simulated Redisson process's pub/sub
//! connection), `client` (a client and the plain lock commands), `redisson`,
//! `semaphore`, `multi` and `rw` (the client's calls for Redisson's waits,
//! semaphores, multi-locks and read-write locks), `cycle` (one client's
//! closed loop), `harness` (a run's clients connected, run and measured),
//! `result` (what a run measured) and `probe` (what the server says of a
//! run: its command stats, one client's PING rate).

mod client;
mod cycle;
mod harness;
mod multi;
mod probe;
mod process;
mod redisson;
mod result;
mod rw;
mod scripts;
mod semaphore;
mod shared;
mod spec;

pub use harness::{run_load, Harness};
pub use probe::{commandstats, ping_rate};
pub use result::{LoadResult, RwStats};
pub use scripts::Scripts;
pub use spec::{
    owner_id, redisson_multi_wait, KeyOrder, LoadSpec, MultiSpec, Proto,
    REDISSON_MULTI_WAIT_PER_KEY,
};
