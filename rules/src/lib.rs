//! The lock module's functional core: plain Rust, no FFI, unit-tested without a
//! server. The module (`liblock.so`) reads keys, asks these rules what to do, and
//! applies and replicates the answer.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod args;
pub mod error;
pub mod ids;
pub mod keys;
pub mod lock;
pub mod multilock;
pub mod queue;
pub mod rwlock;
pub mod server;
