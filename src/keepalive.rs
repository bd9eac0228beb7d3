//! KEEPALIVE: the server renews a hold's lease for as long as the
//! connection that took it lives (or that was handed it after waiting, or
//! that re-attached it with `LOCK.RENEW ... KEEPALIVE`), or the session
//! connection its `SESSION token` named. No client timer. A hold bound to a
//! session that ends or is no longer renewed without its owner releasing it
//! is reported on the session's channel (`sessions::lost`).
//!
//! One timer, armed at the earliest renewal due, renews every hold due by
//! then in one step, so their new deadlines reach replicas and the AOF as
//! absolute `PEXPIREAT`s in one MULTI/EXEC. A renewal is the LOCK.RENEW
//! transition with the lease the hold was bound with, once half of that
//! lease has passed (`lock_rules::keepalive::RENEW_DIVISOR` says why half).
//! When the connection ends the binding goes, and the hold lives out its
//! current lease: the lock-delay that keeps a dead holder's late writes
//! away from the next one. A connection whose peer vanished without closing
//! it is closed by the kernel (`lock.keepalive-dead-peer-ms`, see
//! `ffi::close_when_peer_is_gone`); a holder alive at the TCP level but
//! stuck is cut off after `lock.keepalive-max-hold-ms` if that is set.
//!
//! Bindings live in this server's memory only: a replica never renews, and
//! after a failover or a restart a holder re-attaches on the new master.
//!
//! An election's leader is kept alive only while it is heard from (its
//! session answers PINGs): that rule is the elections' own, handed in at
//! load ([`install_election_rules`]) so that this file does not import them.
//!
//! Offers: [`install_election_rules`], [`min_lease_ms`], [`may_keep_alive`], [`tune_connection`],
//! [`may_set_lease`], [`how_taken`], [`taken`], [`released`],
//! [`unbind_lock`], [`client_gone`], [`clear`], [`held`], [`client_of`].

use std::sync::{LazyLock, Mutex, MutexGuard, OnceLock};

use redis_module::Context;

use crate::engine::{self, Origin};
use crate::ffi::{self, TimerHandler, TimerId};
use crate::placement::Placement;
use crate::stats::{Stats, STATS};
use crate::waiters::with_queue;
use crate::writable::{writable, Writable};
use crate::{config, server_settings, sessions, sync};
use lock_rules::error::LockError;
use lock_rules::ids::IdMap;
use lock_rules::keepalive::{check_lease, Binding, ClientId, Hold, Keepalive};
use lock_rules::lock_id::LockId;
use lock_rules::request::KeepAlive;
use lock_rules::server_text::client_fd;
use lock_rules::session::LossReason;
use lock_rules::state::LockState;

/// What elections add to keeping a hold alive.
pub struct ElectionRules {
    /// Whether `lock` is an election's.
    pub is_election: fn(&LockId<'_>) -> bool,
    /// Whether the leader holding `lock` with `binding` was heard from
    /// within its lease (true for any other hold).
    pub heard_from: fn(&Context, &LockId<'_>, &[u8], &Binding) -> bool,
}

static ELECTION_RULES: OnceLock<ElectionRules> = OnceLock::new();

/// Sets the elections' rules (once, at load).
pub fn install_election_rules(rules: ElectionRules) {
    let _ = ELECTION_RULES.set(rules);
}

fn is_election(lock: &LockId<'_>) -> bool {
    ELECTION_RULES.get().is_some_and(|r| (r.is_election)(lock))
}

fn heard_from(ctx: &Context, lock: &LockId<'_>, owner: &[u8], binding: &Binding) -> bool {
    ELECTION_RULES
        .get()
        .is_none_or(|r| (r.heard_from)(ctx, lock, owner, binding))
}

/// Renewals due within this long of the earliest one are made with it: a
/// lease renewed a little early loses nothing, and the server wakes up
/// once for many holds instead of once per millisecond.
const BATCH_MS: i64 = 50;
/// Delay before retrying while the server refuses writes (clients paused,
/// loading). Short: Redis tells modules nothing when a pause ends, and a
/// renewal must get in before the next pause of back-to-back `CLIENT PAUSE
/// WRITE`s. A retry while paused costs a PING (see `ffi::writes_paused`).
const RETRY_MS: i64 = 1;
/// Delay before retrying while too few replicas ack (`min-replicas-to-write`):
/// that can last for as long as a master is cut off, and a renewal then
/// waits like a client's `LOCK.RENEW`, which Redis refuses.
const NO_REPLICAS_RETRY_MS: i64 = 20;

#[derive(Default)]
struct State {
    holds: Keepalive,
    /// The renewal timer and when it fires (unix ms).
    timer: Option<(TimerId, i64)>,
    /// Clients whose socket is already set to close when its peer is gone.
    tuned: IdMap<ClientId, ()>,
}

static STATE: LazyLock<Mutex<State>> = LazyLock::new(Mutex::default);

fn state() -> MutexGuard<'static, State> {
    sync::lock(&STATE)
}

/// The shortest lease the server keeps alive now (see
/// `lock_rules::keepalive::min_lease_ms`).
pub fn min_lease_ms() -> i64 {
    lock_rules::keepalive::min_lease_ms(server_settings::hz())
}

/// Whether a hold with `lease_ms` may be kept alive as `how` asks: the
/// lease is long enough for the server to renew in time, and the connection
/// to bind exists: the caller's own (not a script's, a function's or an
/// RM_Call's client, which never disconnects; see [`tune_connection`]), or
/// the connection naming the session token, of the caller's user.
pub fn may_keep_alive(ctx: &Context, how: &KeepAlive, lease_ms: i64) -> Result<(), LockError> {
    check_lease(lease_ms, server_settings::hz())?;
    match how {
        KeepAlive::Caller => tune_connection(ctx),
        KeepAlive::Session(token) => sessions::resolve(ctx, token).map(|_| ()),
    }
}

/// Fails unless the context's client is a connection of its own; a
/// connection seen for the first time has its socket set to be closed by
/// the kernel when its peer stops answering (a CLIENT LIST once per
/// connection).
pub fn tune_connection(ctx: &Context) -> Result<(), LockError> {
    let client = ffi::client_id(ctx);
    if state().tuned.contains_key(&client) {
        return Ok(());
    }
    let line = ctx
        .call("CLIENT", &["LIST", "ID", &client.to_string()])
        .and_then(String::try_from)
        .unwrap_or_default();
    let fd = client_fd(&line).ok_or_else(LockError::keepalive_without_connection)?;
    ffi::close_when_peer_is_gone(fd, config::keepalive_dead_peer_ms());
    state().tuned.insert(client, ());
    Ok(())
}

/// Refuses a new lease (a re-entry's, a renewal's) for a hold of `owner`
/// that is kept alive, if the server could not renew it in time: from now
/// on its renewals would take that lease.
pub fn may_set_lease(lock: &LockId<'_>, owner: &[u8], lease_ms: i64) -> Result<(), LockError> {
    if lease_ms < min_lease_ms() && client_of(lock, owner).is_some() {
        check_lease(lease_ms, server_settings::hz())?;
    }
    Ok(())
}

/// How a hold was just granted, as far as its binding goes.
pub enum Taken {
    /// With KEEPALIVE or SESSION: bound to this connection.
    KeepAlive(ClientId),
    /// A re-entry (or the other side of a read-write lock) without it.
    Reentry,
    /// A fresh hold without it.
    Fresh,
}

/// How a grant to the context's client is bound: with KEEPALIVE to the
/// client, with SESSION to the connection naming the token now (none: the
/// session is gone, and the grant keeps its lease only, like a hold whose
/// connection ended); `reentry` if the owner held the lock before.
pub fn how_taken(ctx: &Context, keepalive: Option<&KeepAlive>, reentry: bool) -> Taken {
    let client = match keepalive {
        Some(KeepAlive::Caller) => Some(ffi::client_id(ctx)),
        Some(KeepAlive::Session(token)) => sessions::lookup(token),
        None => None,
    };
    match client {
        Some(client) => Taken::KeepAlive(client),
        None if reentry => Taken::Reentry,
        None => Taken::Fresh,
    }
}

/// Settles `owner`'s binding of `lock` after a grant with a `lease_ms`
/// lease. KEEPALIVE binds the holds to a client (checked with
/// [`may_keep_alive`] when the command was called), renewed with that lease while
/// the connection lives. A re-entry without it keeps a binding, renewed
/// with the new lease from now on: a lease shorter than the time to the
/// next renewal would otherwise run out while the connection lives. A fresh
/// hold without it is not kept alive, even if a binding was left by a hold
/// that ended outside LOCK.* commands (DEL, FLUSHALL, a Redisson unlock)
/// before a renewal noticed.
pub fn taken(ctx: &Context, lock: &LockId<'_>, owner: &[u8], how: Taken, lease_ms: i64) {
    let rearm = {
        let mut s = state();
        match how {
            Taken::KeepAlive(client) => {
                s.holds.bind(lock, owner, client, lease_ms, ffi::now_ms());
                true
            }
            _ if s.holds.is_empty() => false,
            Taken::Reentry => s.holds.lease_replaced(lock, owner, lease_ms, ffi::now_ms()),
            Taken::Fresh => {
                if s.holds.unbind(lock, owner).is_some() {
                    Stats::bump(&STATS.keepalive_ended);
                }
                false
            }
        }
    };
    if rearm {
        arm(ctx);
    }
}

/// `owner` released a hold of `lock`, which is now `after`: once it holds
/// none, no more renewals.
pub fn released(lock: &LockId<'_>, owner: &[u8], after: &LockState) {
    if !after.held_by(owner) {
        unbind(lock, owner);
    }
}

/// `owner` no longer holds `lock`: no more renewals.
/// A release that left `owner` no permit of a semaphore ends its binding.
pub fn released_all(lock: &LockId<'_>, owner: &[u8]) {
    unbind(lock, owner);
}

fn unbind(lock: &LockId<'_>, owner: &[u8]) {
    if state().holds.unbind(lock, owner).is_some() {
        Stats::bump(&STATS.keepalive_ended);
    }
}

/// Nobody holds `lock` any more (forced release): `owners` held it, and
/// their sessions hear so.
pub fn unbind_lock<'o>(
    ctx: &Context,
    lock: &LockId<'_>,
    owners: impl IntoIterator<Item = &'o [u8]>,
) {
    let ended: Vec<(&[u8], ClientId)> = {
        let mut s = state();
        owners
            .into_iter()
            .filter_map(|owner| s.holds.unbind(lock, owner).map(|b| (owner, b.client)))
            .collect()
    };
    STATS
        .keepalive_ended
        .fetch_add(ended.len() as u64, std::sync::atomic::Ordering::Relaxed);
    for (owner, client) in ended {
        lost(ctx, client, LossReason::Forced, lock, owner);
    }
}

/// `owner`'s holds of `lock` were lost without its doing (an election's
/// lock deleted or handed on): no more renewals, and its session hears
/// `reason`. False if they were not bound.
pub fn end(ctx: &Context, lock: &LockId<'_>, owner: &[u8], reason: LossReason) -> bool {
    let Some(binding) = state().holds.unbind(lock, owner) else {
        return false;
    };
    Stats::bump(&STATS.keepalive_ended);
    lost(ctx, binding.client, reason, lock, owner);
    true
}

/// Tells the session of `client` that `owner`'s hold of `lock` is lost;
/// for an election, that its leader was told it lost (`INFO lock`).
fn lost(ctx: &Context, client: ClientId, reason: LossReason, lock: &LockId<'_>, owner: &[u8]) {
    if is_election(lock) {
        Stats::bump(&STATS.elections_lost);
    }
    sessions::lost(ctx, client, reason, owner, &lock.key);
}

/// The owners whose holds of `lock` are kept alive.
pub fn owners_of(lock: &LockId<'_>) -> Vec<Vec<u8>> {
    let s = state();
    if s.holds.is_empty() {
        return Vec::new();
    }
    s.holds.owners_of(lock)
}

/// A connection ended: its holds are no longer renewed.
pub fn client_gone(client: ClientId) {
    let n = {
        let mut s = state();
        s.tuned.remove(&client);
        s.holds.client_gone(client)
    };
    STATS
        .keepalive_ended
        .fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
}

/// Every binding goes: the server became a replica.
pub fn clear() {
    let mut s = state();
    s.holds.clear();
    s.tuned = IdMap::default();
}

/// How many holds are kept alive now.
pub fn held() -> usize {
    state().holds.len()
}

/// The client keeping `owner`'s holds of `lock` alive, if any.
pub fn client_of(lock: &LockId<'_>, owner: &[u8]) -> Option<ClientId> {
    state().holds.binding(lock, owner).map(|b| b.client)
}

/// Makes sure the renewal timer fires by the earliest renewal due.
fn arm(ctx: &Context) {
    let mut s = state();
    let Some(next) = s.holds.next_due() else {
        return;
    };
    if s.timer.is_some_and(|(_, at)| at <= next) {
        return;
    }
    let now = ffi::now_ms();
    let Some(id) = ffi::create_timer::<Renewal>(ctx, next.saturating_sub(now).max(0), 0) else {
        return;
    };
    if let Some((old, _)) = s.timer.replace((id, next)) {
        ffi::stop_timer(ctx, old);
    }
}

struct Renewal;

impl TimerHandler for Renewal {
    fn fire(ctx: &Context, _: u64) {
        state().timer = None;
        match writable(ctx) {
            // A replica has no bindings (they go when it is demoted).
            Writable::Never => return,
            Writable::Later => return retry(ctx, RETRY_MS),
            Writable::TooFewReplicas => return retry(ctx, NO_REPLICAS_RETRY_MS),
            Writable::Now => renew_due(ctx),
        }
        arm(ctx);
    }
}

fn retry(ctx: &Context, delay_ms: i64) {
    let retry = ffi::create_timer::<Renewal>(ctx, delay_ms, 0);
    state().timer = retry.map(|id| (id, ffi::now_ms() + delay_ms));
}

/// Renews every hold due within [`BATCH_MS`], in one execution unit.
fn renew_due(ctx: &Context) {
    let now = ffi::now_ms();
    let due = state().holds.take_due(now + BATCH_MS);
    if due.is_empty() {
        return;
    }
    let max_hold = config::keepalive_max_hold_ms();
    let placement = Placement::read(ctx);
    for due in due {
        let binding = due.binding;
        let over = max_hold > 0 && now.saturating_sub(binding.since_ms) >= max_hold;
        let renewed = if over {
            Err(LossReason::MaxHold)
        } else if !heard_from(ctx, &due.hold.lock(), due.hold.owner(), &binding) {
            Err(LossReason::Idle)
        } else {
            renew(ctx, &placement, &due.hold, binding.lease_ms)
        };
        let ended = {
            let mut s = state();
            match renewed {
                Ok(()) => {
                    s.holds.renewed(&due, now);
                    Stats::bump(&STATS.keepalive_renewals);
                    None
                }
                Err(reason) => s.holds.unbind_due(&due).then_some(reason),
            }
        };
        if let Some(reason) = ended {
            Stats::bump(&STATS.keepalive_ended);
            let hold = &due.hold;
            lost(ctx, binding.client, reason, &hold.lock(), hold.owner());
            if reason == LossReason::Idle {
                resign_leadership(ctx, &placement, &hold.lock(), hold.owner());
            }
        }
    }
}

/// Ends `owner`'s leadership of `lock` now (its binding ended already, its
/// session told why), and the next candidate leads: an election's leader
/// not heard from within its lease has stopped believing it leads (its own
/// deadline, half a lease after the last PING it had answered, is past:
/// see `lock_rules::election`), and one whose leader record was deleted
/// leads nothing anyone can see.
pub fn resign_leadership(ctx: &Context, placement: &Placement, lock: &LockId<'_>, owner: &[u8]) {
    if !ffi::select_db(ctx, lock.db) || !placement.serves(&lock.key) {
        return;
    }
    let name = ffi::string(ctx, &lock.key);
    let Ok((key, mut tx)) = engine::lock::begin(ctx, &name, lock, Origin::Event) else {
        return;
    };
    if let Ok(true) = with_queue(lock, |queue| tx.resign(queue, owner)) {
        engine::lock::commit(ctx, lock, &key, tx);
    }
}

/// One renewal: LOCK.RENEW's transition for the hold's owner. Fails when
/// the key is no longer this node's, or the owner no longer holds the lock
/// (deleted, forced, its lease ran out): a release by the owner unbinds the
/// hold before any renewal is due.
fn renew(
    ctx: &Context,
    placement: &Placement,
    hold: &Hold,
    lease_ms: i64,
) -> Result<(), LossReason> {
    if !ffi::select_db(ctx, hold.db) || !placement.serves(hold.key()) {
        return Err(LossReason::Moved);
    }
    let name = ffi::string(ctx, hold.key());
    let owner = ffi::string(ctx, hold.owner());
    engine::renew_kept(ctx, &hold.lock(), &name, &owner, lease_ms).map_err(|_| LossReason::Gone)
}
