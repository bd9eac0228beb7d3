//! `lock`: Redisson-compatible distributed locks as native Redis commands,
//! with in-server FIFO waiting and direct hand-off.
//!
//! Layers, each using only those below it (top first; docs/architecture.md
//! walks through them):
//! - `lib.rs`: loading (settings, commands, events, and the hooks that plug
//!   the features built on commits into the layers below) and unloading;
//!   INFO.
//! - `commands/`: the LOCK.*, SEM.*, LATCH.* and ELECT.* commands, each
//!   declared next to its handler.
//! - `acquisition.rs`: an acquire carried through: the rules' decision
//!   (one lock, or a multi-lock caller's all or none), the commit, and what
//!   the outcome brings (a KEEPALIVE binding, or the caller blocked in the
//!   queues with a lease timer).
//! - `events.rs`: what ends a lock outside a command (keyspace and server
//!   events), and the drain of deferred work, handed to the engine.
//! - `deadlocks.rs`: cycles of waits, at each wait or on a timer.
//! - `blocking.rs`: blocked callers, the BLOCK timer, lost grants.
//! - `keepalive.rs`: KEEPALIVE holds renewed by the server while their
//!   connection lives (elections' liveness rule handed in at load).
//! - `elections.rs`, `observers.rs`, `fair_queue.rs`, `holds.rs`: the
//!   features built on a lock's commits (an election's leader record and
//!   observers, Redisson's fair queue, hold times), plugged into the engine
//!   at load.
//! - `engine/`: the hand-off engine, one FIFO engine for every resource
//!   kind (a lock, a semaphore; a multi-lock caller across locks): begin,
//!   commit, settle, lost grants, renewals, and what a key is.
//! - `lease.rs`: timers (and an alarm thread) at lease ends of keys
//!   someone waits for.
//! - `deferred.rs`: work noted now and done in a 0 ms timer.
//! - `store.rs` (the lock key), `semaphore_key.rs`, `leader_record.rs`,
//!   `latches.rs` (latches, answered by their own broadcast), `tokens.rs`
//!   (fencing counters), `writable.rs` (whether a timer may write now).
//! - `native_writes.rs` (writes replicated as native commands),
//!   `subscriptions.rs` (when each kind of event starts being heard),
//!   `waiters.rs` (the waiter registry), `waitlist.rs`, `replication.rs`,
//!   `config.rs` (the module's settings), `server_settings.rs` (the
//!   server's that it follows), `sessions.rs`, `stats.rs` (counters and
//!   time percentiles).
//! - `placement.rs` (which keys this node serves), `sync.rs` (taking
//!   mutexes), `clock.rs` (the clock in µs).
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
mod engine;
mod events;
mod fair_queue;
#[allow(unsafe_code)]
mod ffi;
mod holds;
mod keepalive;
mod latches;
mod leader_record;
mod lease;
mod native_writes;
mod observers;
mod placement;
mod replication;
mod scratch;
mod semaphore_key;
mod server_settings;
mod sessions;
mod stats;
mod store;
mod subscriptions;
mod sync;
mod tokens;
mod waiters;
mod waitlist;
mod writable;

mod module {
    use redis_module::{redis_module, Context, InfoContext, RedisResult, RedisString, Status};
    use redis_module_macros::info_command_handler;

    use crate::{
        commands, config, deferred, elections, engine, events, fair_queue, ffi, holds, keepalive,
        lease, server_settings, stats, subscriptions, waiters,
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
        engine::hooks::install(engine::hooks::LockHooks {
            fair_queue: fair_queue::read,
            fair_waiters_remembered: subscriptions::fair_waiters_remembered,
            kept_for_fair_head: fair_queue::kept,
            committed: &[holds::committed, elections::committed],
        });
        ffi::after_every_timer(deferred::drain_after_timer);
        keepalive::install_election_rules(keepalive::ElectionRules {
            is_election: elections::is_election,
            heard_from: elections::heard_from,
        });
        subscriptions::install(subscriptions::Handlers {
            keyspace: ffi::subscribe_keyspace_events::<events::KeyspaceEvents>,
            event_loop: ffi::subscribe_event_loop::<events::ServerEvents>,
            hashes: ffi::subscribe_hash_events::<events::KeyspaceEvents>,
            strings: ffi::subscribe_string_events::<events::KeyspaceEvents>,
            new_keys: ffi::subscribe_new_key_events::<events::KeyspaceEvents>,
            expiry: ffi::subscribe_expiry_events::<events::ExpiryEvents>,
            clients: ffi::subscribe_client_events::<events::ServerEvents>,
            fair_queue_lists: ffi::subscribe_list_events::<fair_queue::QueueEvents>,
        });
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
