//! The functional core: plain Rust, no FFI, unit-tested without a server.

pub mod args;
pub mod error;
pub mod keys;
pub mod lock;
pub mod queue;
pub mod server;
