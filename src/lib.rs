//! `lock`: Redisson-compatible distributed locks as native Redis commands,
//! with in-server FIFO waiting and direct hand-off.
//!
//! Layers, each using only those below it (top first; docs/architecture.md
//! walks through them):
//! - `lib.rs`: loading (settings, commands, events) and unloading; INFO.
//! - `commands/`: the LOCK.* commands, each declared next to its handler.
//! - `acquisition.rs`: an acquire carried through: the rules' decision
//!   (one lock, or a multi-lock caller's all or none), the commit, and what
//!   the outcome brings (a KEEPALIVE binding and event watches, or the
//!   caller blocked in the queues with a lease timer).
//! - `events.rs`: what ends a lock outside a command (keyspace and server
//!   events), and the drain of deferred work.
//! - `blocking.rs`: blocked callers, the BLOCK timer, lost grants.
//! - `keepalive.rs`: KEEPALIVE holds renewed by the server while their
//!   connection lives.
//! - `handoff.rs`: beginning and committing a lock's transition; serving a
//!   multi-lock waiter.
//! - `lease.rs`: timers (and an alarm thread) at lease ends of locks
//!   someone waits for.
//! - `fair_queue.rs`: Redisson's fair queue of a lock (read for each
//!   transition; a timer at the deadline of the fair waiter a free lock is
//!   kept for; its list events).
//! - `deferred.rs`: work noted now and done in a 0 ms timer.
//! - `store.rs` (the lock key), `writable.rs` (whether a timer may write
//!   now), `holds.rs` (since when each lock is held, for hold times).
//! - `waiters.rs` (the waiter registry), `replication.rs`, `config.rs`
//!   (the module's settings), `server_settings.rs` (the server's that it
//!   follows), `stats.rs` (counters and time percentiles).
//! - `sync.rs` (taking mutexes), `clock.rs` (the clock in µs).
//! - `lock_rules` (the `rules/` crate): the lock rules, pure Rust with unit
//!   tests.
//! - `ffi/`: every `unsafe` call into the module API; the compiler refuses
//!   `unsafe` anywhere else.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![deny(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]

mod acquisition;
mod blocking;
mod clock;
mod commands;
mod config;
mod deadlocks;
mod deferred;
mod elections;
mod events;
mod fair_queue;
#[allow(unsafe_code)]
mod ffi;
mod handoff;
mod holds;
mod keepalive;
mod latches;
mod leader_record;
mod lease;
mod observers;
mod replication;
mod semaphore_handoff;
mod semaphore_key;
mod server_settings;
mod sessions;
mod stats;
mod store;
mod sync;
mod waiters;
mod waitlist;
mod writable;

mod module {
    use redis_module::{redis_module, Context, InfoContext, RedisResult, RedisString, Status};
    use redis_module_macros::info_command_handler;

    use crate::{
        commands, config, deferred, events, ffi, holds, keepalive, lease, server_settings, stats,
        waiters,
    };

    fn init(ctx: &Context, args: &[RedisString]) -> Status {
        let args: Vec<&[u8]> = args.iter().map(RedisString::as_slice).collect();
        if let Err(problem) = config::register(ctx, &args) {
            ffi::log_warning(ctx, &format!("lock: {problem}"));
            return Status::Err;
        }
        if !commands::register_all(ctx) {
            ffi::log_warning(ctx, "lock: could not register the commands");
            return Status::Err;
        }
        ffi::signal_modified_keys_explicitly(ctx);
        deferred::on_drain(events::drain);
        ffi::after_every_timer(deferred::drain_after_timer);
        // Keyspace events follow at the first acquire, client and
        // event-loop events at the first wait.
        if !ffi::subscribe_data_events::<events::ServerEvents>(ctx) {
            ffi::log_warning(ctx, "lock: could not subscribe to server events");
            return Status::Err;
        }
        server_settings::read(ctx);
        ffi::keep_detached_context(ctx);
        Status::Ok
    }

    /// MODULE UNLOAD. Redis already refuses while a timer of the module is
    /// armed; a wake-up queued for the main thread would run this library's
    /// code after it is gone, so that refuses too.
    fn deinit(ctx: &Context) -> Status {
        if ffi::one_shots_pending() {
            ffi::log_warning(ctx, "lock: a lease wake-up is queued; unload again later");
            return Status::Err;
        }
        lease::shutdown_alarm();
        if ffi::one_shots_pending() {
            ffi::log_warning(ctx, "lock: a lease wake-up is queued; unload again later");
            return Status::Err;
        }
        Status::Ok
    }

    #[allow(deprecated)] // the builder API cannot name the section after the module
    #[info_command_handler]
    fn info(ctx: &InfoContext, _for_crash_report: bool) -> RedisResult<()> {
        // Nothing here may panic or block: INFO also runs in crash reports.
        let _ = std::panic::catch_unwind(|| {
            ctx.add_info_section(None);
            for (name, value) in stats::STATS.fields() {
                ctx.add_info_field_long_long(name, value as i64);
            }
            let (waiters, locks) = waiters::registry()
                .map(|r| (r.waiting(), r.lock_count()))
                .unwrap_or_default();
            ctx.add_info_field_long_long("waiters", waiters as i64);
            ctx.add_info_field_long_long("locks_with_waiters", locks as i64);
            ctx.add_info_field_long_long("keepalive_holds", keepalive::held() as i64);
            ctx.add_info_field_long_long("keepalive_min_lease_ms", keepalive::min_lease_ms());
            ctx.add_info_field_long_long("election_observers", crate::observers::count() as i64);
            for (name, value) in stats::wait_fields().into_iter().chain(holds::time_fields()) {
                ctx.add_info_field_long_long(&name, i64::try_from(value).unwrap_or(i64::MAX));
            }
        });
        Ok(())
    }

    // Rust's heap goes through Redis's allocator so it counts in used_memory
    // and maxmemory; unit tests run outside Redis, where it does not exist.
    #[cfg(not(test))]
    type Allocator = redis_module::alloc::RedisAlloc;
    #[cfg(not(test))]
    const ALLOCATOR: Allocator = redis_module::alloc::RedisAlloc;
    #[cfg(test)]
    type Allocator = std::alloc::System;
    #[cfg(test)]
    const ALLOCATOR: Allocator = std::alloc::System;

    /// MODULE LIST's `ver`: the package version as MMmmpp (1.1.0 is 10100),
    /// the version that `since` in the commands' docs refers to.
    const VERSION: i32 = 10100;

    redis_module! {
        name: "lock",
        version: VERSION,
        allocator: (Allocator, ALLOCATOR),
        data_types: [],
        init: init,
        deinit: deinit,
        // Registered in `init`, with a dispatcher that does not copy the
        // arguments.
        commands: [],
        // Settings are registered in `init`, from `config::SETTINGS`, with
        // the load arguments checked as CONFIG SET checks values.
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn module_version_is_the_package_version() {
            let v = super::VERSION;
            let dotted = format!("{}.{}.{}", v / 10000, v / 100 % 100, v % 100);
            assert_eq!(dotted, env!("CARGO_PKG_VERSION"));
        }
    }
}
