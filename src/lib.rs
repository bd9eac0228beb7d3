//! `lock`: Redisson-compatible distributed locks as native Redis commands,
//! with in-server FIFO waiting and direct hand-off.
//!
//! Layers, each using only those below it:
//! - `lib.rs`: registration (commands, configs, INFO, events).
//! - `commands/`: one file per command family.
//! - `handoff.rs`: committing transitions, timers and events that end locks.
//! - `store.rs` (the lock key), `waiters.rs` (who waits for what),
//!   `alarm.rs` (a thread that wakes the main thread at lease ends).
//! - `lock_rules` (the `rules/` crate): the lock rules, pure Rust with unit tests.
//! - `ffi.rs`: every `unsafe` call into the module API.

#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
#![deny(unsafe_op_in_unsafe_fn)]

mod alarm;
mod commands;
mod config;
mod ffi;
mod handoff;
mod info;
mod replication;
mod store;
mod waiters;

use lock_rules as rules;

mod module {
    use std::ffi::CStr;

    use redis_module::configuration::ConfigurationFlags;
    use redis_module::{redis_module, Context, InfoContext, RedisResult, RedisString, Status};
    use redis_module_macros::info_command_handler;

    use crate::commands::{lock, multilock, rwlock};
    use crate::ffi::{
        self, ArgDoc, ArgKind, CommandDoc, KEY_RO_ACCESS, KEY_RW_DELETE, KEY_RW_UPDATE,
    };
    use crate::rules::args::MAX_DURATION_MS;
    use crate::{alarm, config, handoff, info, waiters};

    const fn arg(name: &'static CStr, kind: ArgKind) -> ArgDoc {
        ArgDoc {
            name,
            kind,
            token: None,
            optional: false,
            multiple: false,
            subargs: &[],
        }
    }

    const fn option(name: &'static CStr, kind: ArgKind, token: &'static CStr) -> ArgDoc {
        ArgDoc {
            name,
            kind,
            token: Some(token),
            optional: true,
            multiple: false,
            subargs: &[],
        }
    }

    const KEY: ArgDoc = arg(c"key", ArgKind::Key);
    const OWNER: ArgDoc = arg(c"owner", ArgKind::String);
    const LEASE: ArgDoc = ArgDoc {
        name: c"lease",
        kind: ArgKind::OneOf,
        token: None,
        optional: true,
        multiple: false,
        subargs: &[
            ArgDoc {
                optional: false,
                ..option(c"milliseconds", ArgKind::Integer, c"PX")
            },
            ArgDoc {
                optional: false,
                ..option(c"seconds", ArgKind::Integer, c"EX")
            },
        ],
    };

    const BLOCK: ArgDoc = option(c"timeout", ArgKind::Integer, c"BLOCK");
    const FENCE: ArgDoc = option(c"fence", ArgKind::Flag, c"FENCE");
    /// LOCK.ACQUIRE's, LOCK.RACQUIRE's and LOCK.WACQUIRE's.
    const ACQUIRE_ARGS: &[ArgDoc] = &[KEY, OWNER, LEASE, BLOCK, FENCE];
    const NUMKEYS: ArgDoc = arg(c"numkeys", ArgKind::Integer);
    const KEYS: ArgDoc = ArgDoc {
        multiple: true,
        ..arg(c"key", ArgKind::Key)
    };

    const DOCS: &[CommandDoc] = &[
        CommandDoc {
            name: c"lock.macquire",
            summary: c"Acquires several reentrant locks at once, all or none, optionally waiting for all of them as one FIFO waiter.",
            complexity: c"O(N), N the number of keys",
            since: c"1.1.0",
            arity: -4,
            key_flags: KEY_RW_UPDATE,
            numkeys: true,
            args: &[NUMKEYS, KEYS, OWNER, LEASE, BLOCK, FENCE],
        },
        CommandDoc {
            name: c"lock.mrelease",
            summary: c"Releases one hold on each of several locks, all or none.",
            complexity: c"O(N), N the number of keys",
            since: c"1.1.0",
            arity: -4,
            key_flags: KEY_RW_DELETE,
            numkeys: true,
            args: &[NUMKEYS, KEYS, OWNER],
        },
        CommandDoc {
            name: c"lock.acquire",
            summary: c"Acquires a reentrant lock, optionally waiting in a FIFO queue for it.",
            complexity: c"O(1)",
            since: c"1.0.0",
            arity: -3,
            key_flags: KEY_RW_UPDATE,
            numkeys: false,
            args: ACQUIRE_ARGS,
        },
        CommandDoc {
            name: c"lock.racquire",
            summary: c"Acquires a read hold on a read-write lock, optionally waiting in its FIFO queue.",
            complexity: c"O(1) for a first hold; O(N) for a re-entry, N the owner's read holds",
            since: c"1.1.0",
            arity: -3,
            key_flags: KEY_RW_UPDATE,
            numkeys: false,
            args: ACQUIRE_ARGS,
        },
        CommandDoc {
            name: c"lock.wacquire",
            summary: c"Acquires the write hold of a read-write lock, optionally waiting in its FIFO queue.",
            complexity: c"O(N), N the read holds of the lock",
            since: c"1.1.0",
            arity: -3,
            key_flags: KEY_RW_UPDATE,
            numkeys: false,
            args: ACQUIRE_ARGS,
        },
        CommandDoc {
            name: c"lock.release",
            summary: c"Releases one hold on a lock; the last one hands it to the next waiter.",
            complexity: c"O(1) for an exclusive lock; O(N) for a read-write lock, N its read holds",
            since: c"1.0.0",
            arity: -3,
            key_flags: KEY_RW_DELETE,
            numkeys: false,
            args: &[
                KEY,
                OWNER,
                ArgDoc {
                    name: c"kind",
                    kind: ArgKind::OneOf,
                    token: None,
                    optional: true,
                    multiple: false,
                    subargs: &[
                        ArgDoc {
                            optional: false,
                            ..option(c"read", ArgKind::Flag, c"READ")
                        },
                        ArgDoc {
                            optional: false,
                            ..option(c"write", ArgKind::Flag, c"WRITE")
                        },
                    ],
                },
            ],
        },
        CommandDoc {
            name: c"lock.renew",
            summary: c"Sets a new lease on a lock held by the owner.",
            complexity: c"O(1)",
            since: c"1.0.0",
            arity: -3,
            key_flags: KEY_RW_UPDATE,
            numkeys: false,
            args: &[KEY, OWNER, LEASE],
        },
        CommandDoc {
            name: c"lock.forcerelease",
            summary: c"Removes a lock whoever holds it; the next waiter gets it.",
            complexity: c"O(1)",
            since: c"1.0.0",
            arity: 2,
            key_flags: KEY_RW_DELETE,
            numkeys: false,
            args: &[KEY],
        },
        CommandDoc {
            name: c"lock.info",
            summary:
                c"Returns the owner, hold count, lease left, waiters and fencing token of a lock.",
            complexity: c"O(1)",
            since: c"1.0.0",
            arity: 2,
            key_flags: KEY_RO_ACCESS,
            numkeys: false,
            args: &[KEY],
        },
    ];

    macro_rules! handler {
        ($name:ident, $body:path) => {
            struct $name;
            impl ffi::CommandHandler for $name {
                const BODY: ffi::CommandBody = $body;
            }
        };
    }
    handler!(Acquire, lock::acquire);
    handler!(Release, lock::release);
    handler!(Renew, lock::renew);
    handler!(ForceRelease, lock::force_release);
    handler!(Info, lock::info);
    handler!(ReadAcquire, rwlock::read_acquire);
    handler!(MultiAcquire, multilock::acquire);
    handler!(MultiRelease, multilock::release);
    handler!(WriteAcquire, rwlock::write_acquire);

    /// `ffi::create_command` for one handler.
    type Create = fn(&Context, &CStr, &CStr, (i32, i32, i32), &str) -> bool;

    /// A command to register.
    struct Command {
        name: &'static CStr,
        flags: &'static CStr,
        /// Legacy first, last and step key positions.
        keys: (i32, i32, i32),
        acl_categories: &'static str,
        create: Create,
    }

    const ONE_KEY: (i32, i32, i32) = (1, 1, 1);
    /// MACQUIRE and MRELEASE declare their keys with the numkeys key spec set
    /// with the docs, and getkeys-api for 7.0's cluster routing.
    const NUMKEYS_KEYS: (i32, i32, i32) = (0, 0, 0);

    const COMMANDS: &[Command] = &[
        Command {
            name: c"lock.acquire",
            flags: c"write deny-oom blocking",
            keys: ONE_KEY,
            acl_categories: "write hash blocking",
            create: ffi::create_command::<Acquire>,
        },
        Command {
            name: c"lock.racquire",
            flags: c"write deny-oom blocking",
            keys: ONE_KEY,
            acl_categories: "write hash blocking",
            create: ffi::create_command::<ReadAcquire>,
        },
        Command {
            name: c"lock.wacquire",
            flags: c"write deny-oom blocking",
            keys: ONE_KEY,
            acl_categories: "write hash blocking",
            create: ffi::create_command::<WriteAcquire>,
        },
        Command {
            name: c"lock.macquire",
            flags: c"write deny-oom blocking getkeys-api",
            keys: NUMKEYS_KEYS,
            acl_categories: "write hash blocking",
            create: ffi::create_command::<MultiAcquire>,
        },
        Command {
            name: c"lock.mrelease",
            flags: c"write fast getkeys-api",
            keys: NUMKEYS_KEYS,
            acl_categories: "write hash fast",
            create: ffi::create_command::<MultiRelease>,
        },
        Command {
            name: c"lock.release",
            flags: c"write fast",
            keys: ONE_KEY,
            acl_categories: "write hash fast",
            create: ffi::create_command::<Release>,
        },
        Command {
            name: c"lock.renew",
            flags: c"write fast",
            keys: ONE_KEY,
            acl_categories: "write hash fast",
            create: ffi::create_command::<Renew>,
        },
        Command {
            name: c"lock.forcerelease",
            flags: c"write fast",
            keys: ONE_KEY,
            acl_categories: "write hash fast",
            create: ffi::create_command::<ForceRelease>,
        },
        Command {
            name: c"lock.info",
            flags: c"readonly fast",
            keys: ONE_KEY,
            acl_categories: "read hash fast",
            create: ffi::create_command::<Info>,
        },
    ];

    /// Registers the commands. Their ACL categories are set where the server
    /// lets modules set them (Redis 7.2+, Valkey; 7.0 gives module commands
    /// none: grant them by name), with `lock` among them where modules may
    /// add categories (Redis 7.4+, Valkey 8+), so that `+@lock` grants all.
    fn create_commands(ctx: &Context) -> bool {
        let lock_category = ffi::add_acl_category(ctx, c"lock");
        COMMANDS.iter().all(|c| {
            let categories = if lock_category {
                format!("{} lock", c.acl_categories)
            } else {
                c.acl_categories.to_string()
            };
            (c.create)(ctx, c.name, c.flags, c.keys, &categories)
        })
    }

    fn init(ctx: &Context, _args: &[RedisString]) -> Status {
        if !create_commands(ctx) {
            ffi::log_warning(ctx, "lock: could not register the commands");
            return Status::Err;
        }
        ffi::signal_modified_keys_explicitly(ctx);
        for doc in DOCS {
            if !ffi::set_command_doc(ctx, doc) {
                ffi::log_warning(ctx, &format!("lock: could not describe {:?}", doc.name));
                return Status::Err;
            }
        }
        // Keyspace and event-loop events follow at the first wait.
        if !ffi::subscribe_data_events::<handoff::ServerEvents>(ctx) {
            ffi::log_warning(ctx, "lock: could not subscribe to server events");
            return Status::Err;
        }
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
        alarm::shutdown();
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
            for (name, value) in info::STATS.fields() {
                ctx.add_info_field_long_long(name, value as i64);
            }
            let (waiters, locks) = waiters::registry()
                .map(|r| (r.waiting(), r.lock_count()))
                .unwrap_or_default();
            ctx.add_info_field_long_long("waiters", waiters as i64);
            ctx.add_info_field_long_long("locks_with_waiters", locks as i64);
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

    redis_module! {
        name: "lock",
        version: 10000,
        allocator: (Allocator, ALLOCATOR),
        data_types: [],
        init: init,
        deinit: deinit,
        // Registered in `init`, with a dispatcher that does not copy the
        // arguments.
        commands: [],
        configurations: [
            i64: [
                ["default-lease-ms", &config::DEFAULT_LEASE_MS, config::DEFAULT_LEASE, 1, MAX_DURATION_MS, ConfigurationFlags::DEFAULT, None],
            ],
            string: [],
            bool: [
                ["redisson-notify", &config::REDISSON_NOTIFY, true, ConfigurationFlags::DEFAULT, None],
            ],
            enum: [],
            module_args_as_configuration: true,
        ]
    }
}
