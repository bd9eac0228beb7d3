//! When the module starts listening to each kind of event, and the flags
//! that say it does. Every subscription is made lazily, at the first lock
//! that needs it (Redis offers no way to stop listening to keyspace events
//! later): until then the rest of Redis pays nothing for them, and every
//! `DEL` on the server would otherwise call into the module. The handlers
//! (`events.rs`, `fair_queue.rs`) are handed in at load ([`install`]), so
//! that the layers that start listening (an acquire, a wait, a command)
//! need not import the layers that handle the events.
//!
//! Offers: [`Handlers`], [`install`], [`watch_for_waiters`],
//! [`watch_expiry`], [`watch_clients`], [`watch_strings`],
//! [`watch_hashes`], [`watch_fair_queues`], [`fair_waiters_remembered`],
//! [`fair_queue_changes_heard`].

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::OnceLock;

use redis_module::Context;

use crate::{config, ffi};

/// How to subscribe to each kind of event, with the module's handler.
pub struct Handlers {
    /// Every keyspace event (`del`, `rename`, `expired`...).
    pub keyspace: fn(&Context) -> bool,
    /// The event loop's wake-ups.
    pub event_loop: fn(&Context) -> bool,
    /// Hash events (`hset`...).
    pub hashes: fn(&Context) -> bool,
    /// String events (`incrby`, `set`...).
    pub strings: fn(&Context) -> bool,
    /// Key creations (`new`).
    pub new_keys: fn(&Context) -> bool,
    /// Expiry and eviction.
    pub expiry: fn(&Context) -> bool,
    /// Client connections and disconnections.
    pub clients: fn(&Context) -> bool,
    /// List events, for Redisson's fair queues.
    pub fair_queue_lists: fn(&Context) -> bool,
}

static HANDLERS: OnceLock<Handlers> = OnceLock::new();

/// Sets the handlers (once, at load).
pub fn install(handlers: Handlers) {
    let _ = HANDLERS.set(handlers);
}

fn no_subscription(_: &Context) -> bool {
    false
}

/// Before [`install`] (never in a loaded module), nothing is subscribed.
const NONE: Handlers = Handlers {
    keyspace: no_subscription,
    event_loop: no_subscription,
    hashes: no_subscription,
    strings: no_subscription,
    new_keys: no_subscription,
    expiry: no_subscription,
    clients: no_subscription,
    fair_queue_lists: no_subscription,
};

fn handlers() -> &'static Handlers {
    HANDLERS.get().unwrap_or(&NONE)
}

/// Subscribes once: the call that first sets `flag` runs `subscribe`, and
/// logs `failure` if the server refused. Read before it is written: every
/// acquire asks, and after the first one pays a load, not a write.
fn once(flag: &AtomicBool, ctx: &Context, subscribe: impl FnOnce() -> bool, failure: &str) {
    if flag.load(Relaxed) || flag.swap(true, Relaxed) {
        return;
    }
    if !subscribe() {
        ffi::log_warning(ctx, failure);
    }
}

/// Set once the module listens to the events that only matter to waiters.
static WATCHING: AtomicBool = AtomicBool::new(false);
static WATCHING_CLIENTS: AtomicBool = AtomicBool::new(false);
static WATCHING_EXPIRY: AtomicBool = AtomicBool::new(false);
/// Set once generic keyspace events are heard (the subscription made).
static KEYSPACE_HEARD: AtomicBool = AtomicBool::new(false);

/// Starts listening, at the first wait, to keyspace events that can end a
/// lock, list events (a Redisson fair queue appearing or changing; only
/// with `lock.redisson-notify yes`),
/// client disconnections and event-loop wake-ups. Until a caller has
/// waited, no lock can need them, and the rest of Redis pays nothing for
/// them (the lock commands' own `del` and `expire` events included);
/// Redis offers no way to stop listening to keyspace events later.
pub fn watch_for_waiters(ctx: &Context) {
    once(
        &WATCHING,
        ctx,
        || {
            watch_clients(ctx);
            watch_expiry(ctx);
            let keyspace = (handlers().keyspace)(ctx);
            KEYSPACE_HEARD.store(keyspace, Relaxed);
            // Fair queues are only read while the module speaks to
            // Redisson's clients: otherwise no list command need call in.
            if config::redisson_notify() {
                watch_lists(ctx);
            }
            keyspace && (handlers().event_loop)(ctx)
        },
        "lock: could not subscribe to keyspace and event-loop events; \
         waiters are served at lease deadlines only",
    );
}

/// Whether the module hears every way a key becomes a Redisson fair queue
/// (list events, and the generic `rename_to`, `restore`, `copy_to`,
/// `move_to`; `SWAPDB` and loading are server events it always hears):
/// from the first wait on. Only then may a lock found without a fair
/// queue be known to have none until such an event (`fair_queue.rs`).
pub fn fair_queue_changes_heard() -> bool {
    KEYSPACE_HEARD.load(Relaxed) && LISTS_HEARD.load(Relaxed)
}

static WATCHING_HASHES: AtomicBool = AtomicBool::new(false);

/// Starts listening to hash events (`hset`...), at the first ELECT.OBSERVE
/// on a replica: its observers hear of a new leader by the replicated
/// writes of the leader record.
pub fn watch_hashes(ctx: &Context) {
    once(
        &WATCHING_HASHES,
        ctx,
        || (handlers().hashes)(ctx),
        "lock: could not subscribe to hash events; observers on a replica hear of \
         new leaders only when a key is deleted or expires",
    );
}

static WATCHING_STRINGS: AtomicBool = AtomicBool::new(false);

/// Starts listening to string events (`incrby`, `set`...) and key creations
/// (`new`), at the first wait on a semaphore or a latch: Redisson's clients
/// give permits back and count latches down with INCRBY/DECR, and their
/// waiters here must hear it; a missing semaphore someone waits for may be
/// created as another type. Also at the first `FENCE`: Redisson's
/// RFencedLock takes its tokens with INCR of the fencing counter, which must
/// then lose the expiry the module gave it. Every string command and key
/// creation on the server then calls into the module (a lookup that finds
/// no waiter, for keys nobody waits on).
pub fn watch_strings(ctx: &Context) {
    once(
        &WATCHING_STRINGS,
        ctx,
        || (handlers().strings)(ctx) && (handlers().new_keys)(ctx),
        "lock: could not subscribe to string events; semaphore and latch \
         waiters do not hear Redisson clients' releases and count-downs",
    );
}

/// Starts listening to expiry and eviction, at the first acquire (or
/// wait): a hold's time ends with its key.
pub fn watch_expiry(ctx: &Context) {
    once(
        &WATCHING_EXPIRY,
        ctx,
        || (handlers().expiry)(ctx),
        "lock: could not subscribe to expiry events; holds whose lease \
         runs out are not timed",
    );
}

/// Starts listening to client disconnections: at the first wait, or the
/// first KEEPALIVE hold (whose renewals end with its connection).
pub fn watch_clients(ctx: &Context) {
    once(
        &WATCHING_CLIENTS,
        ctx,
        || (handlers().clients)(ctx),
        "lock: could not subscribe to client events; KEEPALIVE holds are \
         renewed until their lease is renewed no more, and lost grants are \
         released at their lease end",
    );
}

static WATCHING_LISTS: AtomicBool = AtomicBool::new(false);
static LISTS_HEARD: AtomicBool = AtomicBool::new(false);
static FAIR_WAITERS_REMEMBERED: AtomicBool = AtomicBool::new(false);

/// Whether a module waiter may remember fair waiters ahead of it: one was
/// queued behind one (which started [`watch_fair_queues`]) since the module loaded.
pub fn fair_waiters_remembered() -> bool {
    FAIR_WAITERS_REMEMBERED.load(Relaxed)
}

/// Subscribes to list events once.
fn watch_lists(ctx: &Context) {
    once(
        &WATCHING_LISTS,
        ctx,
        || {
            let heard = (handlers().fair_queue_lists)(ctx);
            LISTS_HEARD.store(heard, Relaxed);
            heard
        },
        "lock: could not subscribe to list events; a Redisson fair waiter that \
         gives up lets the module's waiters have the lock at its deadline only",
    );
}

/// Listens to list events (from the first wait on, if not already), at the
/// first wait of a module caller on a lock with a fair queue: a fair waiter
/// that gives up (acquireFailed's `LREM`) or is dropped by another's script
/// (`LPOP`) while the lock is kept for it must let the module's waiter
/// behind it have the lock. Until a caller waits no list command on the
/// server calls into the module.
pub fn watch_fair_queues(ctx: &Context) {
    watch_lists(ctx);
    FAIR_WAITERS_REMEMBERED.store(true, Relaxed);
}
