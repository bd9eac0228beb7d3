//! LOCK.SESSION: a connection names itself as a session, so that `SESSION
//! token` in the other commands binds KEEPALIVE holds to it whichever
//! connection sends them (see `sessions.rs`, and docs/clients.md for how the
//! client libraries use it).

use redis_module::{Context, RedisResult, RedisString, RedisValue};

use super::{arg, command, run, Command};
use crate::ffi::{ArgKind, CommandSpec, KeyArgs};
use crate::{keepalive, sessions, subscriptions};
use lock_rules::args::parse_session_token;
use lock_rules::error::LockError;

/// `LOCK.SESSION token`
pub const SESSION: Command = command!(
    CommandSpec {
        name: c"lock.session",
        flags: c"write fast",
        acl_categories: "write connection fast",
        summary: c"Names this connection as a session: holds taken with SESSION token are kept alive while it lives.",
        complexity: c"O(1)",
        since: c"1.2.0",
        arity: 2,
        key_flags: 0,
        keys: KeyArgs::None,
        args: &[arg(c"token", ArgKind::String)],
    },
    session
);

fn session(ctx: &Context, args: &[RedisString]) -> RedisResult {
    run(ctx, || {
        let [_, token] = args else {
            return Err(LockError::arity(SESSION.spec.name()));
        };
        let token = parse_session_token(token.as_slice())?;
        // Only a connection of its own can be a session: a script's or an
        // RM_Call's client never disconnects.
        keepalive::tune_connection(ctx).map_err(|_| LockError::session_without_connection())?;
        subscriptions::watch_clients(ctx);
        sessions::name(ctx, token)?;
        Ok(RedisValue::SimpleStringStatic("OK"))
    })
}
