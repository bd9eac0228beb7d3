//! The holds S11 takes: 10 connections of 100 locks each, their keys and
//! owners; what the server says of them: `INFO lock`'s counters and
//! `LOCK.INFO`'s owner and keepalive client.

use std::io;

use crate::conn::{Conn, Reply, ReplyExt};
use crate::info_field;

pub(super) const CONNECTIONS: usize = 10;
pub(super) const LOCKS_PER_CONNECTION: usize = 100;
pub(super) const HOLDS: usize = CONNECTIONS * LOCKS_PER_CONNECTION;

pub(super) fn key(prefix: &str, c: usize, i: usize) -> String {
    format!("{prefix}:{c}:{i}")
}

pub(super) fn owner(c: usize) -> String {
    format!("holder-{c}")
}

pub(super) async fn lock_stat(c: &mut Conn, name: &str) -> io::Result<i64> {
    info_field(c, "lock", name)
        .await?
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| io::Error::other(format!("INFO lock has no {name}")))
}

/// `LOCK.INFO key` (RESP2's flat array): the owner and the keepalive
/// client, or `None` when the lock is free.
pub(super) fn owner_and_client(reply: &Reply) -> Option<(String, Option<i64>)> {
    let Reply::Array(items) = reply else {
        return None;
    };
    let field = |name: &str| {
        items
            .chunks(2)
            .find(|kv| kv.first().is_some_and(|k| k.text() == name))
            .and_then(|kv| kv.get(1))
    };
    let owner = field("owner")?.text();
    Some((owner, field("keepalive_client").and_then(ReplyExt::int)))
}
