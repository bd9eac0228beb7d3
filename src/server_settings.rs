//! The server's own settings that the module follows, read at load and
//! after every `CONFIG SET` (the config-change event), never on a command's
//! path: `min-replicas-to-write` (see `writable.rs`) and `hz`, the rate of
//! the server's cron, which bounds how late a KEEPALIVE renewal can be (see
//! `keepalive.rs`).
//!
//! Offers: [`read`], [`min_replicas_to_write`], [`hz`].

use std::sync::atomic::{AtomicI64, Ordering::Relaxed};

use redis_module::Context;

use crate::ffi;

/// `min-replicas-to-write` as last read; 0 (off) until read.
static MIN_REPLICAS_TO_WRITE: AtomicI64 = AtomicI64::new(0);
/// `hz` as last read; the server's default until read.
static HZ: AtomicI64 = AtomicI64::new(10);

/// Reads the settings (at load, after a configuration change). One that
/// cannot be read keeps its last value.
pub fn read(ctx: &Context) {
    for (name, cell) in [
        ("min-replicas-to-write", &MIN_REPLICAS_TO_WRITE),
        ("hz", &HZ),
    ] {
        if let Some(value) = ffi::server_config_i64(ctx, name) {
            cell.store(value, Relaxed);
        }
    }
}

pub fn min_replicas_to_write() -> i64 {
    MIN_REPLICAS_TO_WRITE.load(Relaxed)
}

pub fn hz() -> i64 {
    HZ.load(Relaxed)
}
