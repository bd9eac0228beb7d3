//! The lock module's functional core: plain Rust, no FFI, unit-tested without a
//! server. The module (`liblock.so`) reads keys, asks these rules what to do, and
//! applies and replicates the answer.
//!
//! From the bottom up: `error`, `ids`, `args` (parsing), `keys` (names derived
//! from a lock's key), `server_text` (what the rules read from server
//! replies), `percentiles` (what INFO prints of a histogram); `request` (what
//! a caller asks for), `read_write` (the read-write lock's holders and who
//! may take which side), `state` (what a lock key holds), `holds` (since when
//! each holder holds its lock), `queue` (a wait queue), `fair` (Redisson's
//! fair lock queue beside the module's), `transition` (the rules proper),
//! `multilock`, `registry` (who waits for which lock),
//! `keepalive` (which holds the server renews) and `session` (which
//! connection names which session token, and the loss messages); beside the
//! locks, `semaphore` (permits, in Redisson's layout) and `latch` (count-down
//! latches) and `election` (the leader record, long polls, a leader's
//! liveness); `deadlock` (the waits-for graph over owners and the cycle a
//! new wait would close, which the server consults before it queues a
//! caller and refuses with `DEADLOCK`).

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod args;
pub mod deadlock;
pub mod election;
pub mod error;
pub mod fair;
pub mod holds;
pub mod ids;
pub mod keepalive;
pub mod keys;
pub mod latch;
pub mod lock_id;
pub mod multilock;
pub mod names;
pub mod percentiles;
pub mod queue;
pub mod read_write;
pub mod registry;
pub mod request;
pub mod semaphore;
pub mod server_text;
pub mod session;
pub mod state;
pub mod transition;
