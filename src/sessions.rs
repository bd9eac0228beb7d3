//! Sessions on this server: the connection that named each token with
//! `LOCK.SESSION`, looked up when `SESSION token` binds a hold; and the loss
//! messages published on a session's channel (`__lock__:session:<token>`)
//! when the server ends or stops renewing a hold bound to it.
//!
//! Like KEEPALIVE bindings, sessions live in this server's memory only: a
//! new master, a restart or another cluster node knows none (`NOSESSION`),
//! and the client names its token there.
//!
//! Offers: [`name`], [`resolve`], [`lookup`], [`client_gone`], [`lost`],
//! [`demoted`].

use std::sync::{LazyLock, Mutex, MutexGuard};

use redis_module::Context;

use crate::{ffi, sync};
use lock_rules::error::LockError;
use lock_rules::keepalive::ClientId;
use lock_rules::session::{channel, loss_message, LossReason, Sessions, DEMOTED_MESSAGE};

static SESSIONS: LazyLock<Mutex<Sessions>> = LazyLock::new(Mutex::default);

fn sessions() -> MutexGuard<'static, Sessions> {
    sync::lock(&SESSIONS)
}

/// The caller's connection names `token`, taking it over from another
/// connection of the same ACL user (never another user's).
pub fn name(ctx: &Context, token: &[u8]) -> Result<(), LockError> {
    let client = ffi::client_id(ctx);
    let holder = sessions().client(token);
    if let Some(other) = holder.filter(|other| *other != client) {
        if !ffi::same_user(ctx, other) {
            return Err(LockError::session_of_another_user(token));
        }
    }
    sessions().name(client, token);
    Ok(())
}

/// The connection `token` names, for a command binding a hold to it now:
/// `NOSESSION` if none does here, `NOPERM` if it is another user's.
pub fn resolve(ctx: &Context, token: &[u8]) -> Result<ClientId, LockError> {
    let client = lookup(token).ok_or_else(|| LockError::no_session(token))?;
    if !ffi::same_user(ctx, client) {
        return Err(LockError::session_of_another_user(token));
    }
    Ok(client)
}

/// The connection `token` names now, if any (a waiter served later binds
/// to whichever connection names its token then; it was checked when it
/// called).
pub fn lookup(token: &[u8]) -> Option<ClientId> {
    sessions().client(token)
}

/// A connection ended: the token it named with it.
pub fn client_gone(client: ClientId) {
    let mut s = sessions();
    if !s.is_empty() {
        s.client_gone(client);
    }
}

/// Tells the session of `client`, if it names one, that `owner`'s hold of
/// `key` is lost.
pub fn lost(ctx: &Context, client: ClientId, reason: LossReason, owner: &[u8], key: &[u8]) {
    let Some(channel) = sessions().token(client).map(channel) else {
        return;
    };
    ffi::publish(ctx, &channel, &loss_message(reason, owner, key));
}

/// Tells every session that this server became a replica: its bindings are
/// gone, and the holds are to be re-attached on the new master.
pub fn demoted(ctx: &Context) {
    let channels: Vec<Vec<u8>> = sessions().tokens().map(channel).collect();
    for channel in channels {
        ffi::publish(ctx, &channel, DEMOTED_MESSAGE);
    }
}
