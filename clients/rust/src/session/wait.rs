//! Waiting on the server: a waiting acquire on a dedicated connection ([`Inner::wait_call`]),
//! cleaned up when cancelled (the future dropped: [`CancelGuard`]) or broken (the connection
//! killed, reaped, reset: [`CallError::Broken`], for the caller to queue again); the
//! cleanup itself (`LOCK.CANCEL`, then the release of a grant that crossed it); and a
//! waiting command that holds nothing (`LATCH.AWAIT`, `ELECT.OBSERVE`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{RedisError, RedisResult, Value};

use super::state::{Conn, Inner, Of};
use crate::error::{is_auth_error, is_unusable, Error, Result};
use crate::proto::{self, Wait};

/// What a command answered, or a redirection to follow (a cluster's `MOVED` on a direct
/// connection), or a wait whose connection broke.
pub(crate) enum CallError {
    Redis(RedisError),
    Moved(String),
    /// The waiting connection broke (killed, reaped, reset) while the server can still be
    /// reached: the owner's wait and a grant that crossed the break were cleaned up as a
    /// cancel does, so the caller may queue again as a fresh owner.
    Broken,
}

impl From<RedisError> for CallError {
    fn from(e: RedisError) -> CallError {
        CallError::Redis(e)
    }
}

/// The wait left of `wait`, begun at `started`: the rest of a [`Wait::For`] (a try once it
/// ran out); [`Wait::No`] and [`Wait::Forever`] as they are.
pub(crate) fn wait_left(wait: Wait, started: Instant) -> Wait {
    match wait {
        Wait::For(d) => Wait::from_duration(d.saturating_sub(started.elapsed())),
        other => other,
    }
}

/// Extra time, past a `BLOCK` time, that the reply to a waiting acquire may take.
pub(crate) const WAIT_MARGIN: Duration = Duration::from_secs(5);

impl Inner {
    /// A waiting command (`command`: LATCH.AWAIT, ELECT.OBSERVE), `args` for a wait, with
    /// `BLOCK`, on a waiting connection of `key`'s node, following `MOVED`. The connection
    /// goes back to the pool only once answered: dropped mid-wait, it is closed, which ends
    /// the wait in the server. A connection that breaks mid-wait took the wait with it (the
    /// command holds nothing): sent again on a new connection for the time left.
    pub async fn waiting_call(
        &self,
        key: &str,
        wait: Wait,
        command: &str,
        args: impl Fn(Wait) -> Vec<String>,
    ) -> Result<Value> {
        let started = Instant::now();
        let mut node = self.node_of(key);
        let mut redirects = 0;
        loop {
            let left = wait_left(wait, started);
            let cmd = proto::cmd(&args(left));
            let mut wc = self.checkout(&node).await?;
            let bound = match left {
                Wait::For(d) => Some(d + WAIT_MARGIN),
                Wait::No => Some(self.opts.response_timeout),
                Wait::Forever => None,
            };
            let send = wc.con.send_packed_command(&cmd);
            let reply = match bound {
                Some(bound) => match tokio::time::timeout(bound, send).await {
                    Ok(r) => r,
                    Err(_) => {
                        return Err(Error::Unavailable(RedisError::from((
                            redis::ErrorKind::Io,
                            "no reply in time",
                            command.to_string(),
                        ))))
                    }
                },
                None => send.await,
            }
            .and_then(Value::extract_error);
            match reply {
                Ok(v) => {
                    self.checkin(&node, wc);
                    return Ok(v);
                }
                // Broken: again on a new connection (whose connect fails if the server is
                // gone: Unavailable).
                Err(e) if is_unusable(&e) => continue,
                Err(e) => {
                    self.checkin(&node, wc);
                    match e.redirect_node() {
                        Some((addr, _)) if e.code() == Some("MOVED") && redirects < 5 => {
                            redirects += 1;
                            self.moved(key, addr);
                            node = addr.to_string();
                        }
                        _ => return Err(e.into()),
                    }
                }
            }
        }
    }

    /// After a cancelled or broken wait: ends the owner's waits in the server
    /// (`LOCK.CANCEL`, for semaphore waits too), after which no grant can reach it, then
    /// releases a grant that crossed the cancel (`LOCK.RELEASE`, or `SEM.RELEASE`: `NOTOWNER`
    /// / `EXPIRED` ignored). Closing the waiting connection alone is not enough: a grant
    /// written into a socket the client just closed looks delivered to the server, and a
    /// hold bound to the session outlives the waiting connection. `Err` when the server
    /// could not be reached (or refused the client: `NOAUTH`, `WRONGPASS`, `NOPERM`) for one
    /// of the two.
    pub async fn clean_cancelled(&self, keys: &[String], owner: &str, of: Of) -> RedisResult<()> {
        let key = keys.first().map(String::as_str);
        // A failed cancel does not stop the release: the server may have lost the waiter
        // with the connection, or answered the cancel on a connection that broke after.
        let cancelled = self.answered(&proto::cancel(keys, owner), key).await;
        let released = self.answered(&of.release(keys, owner), key).await;
        cancelled.and(released)
    }

    /// Sends a command whose repetition does no harm (a cancel, the release of a fresh
    /// owner's single grant), again on a new connection when the connection failed: `Ok`
    /// once the server answered, whatever it answered; `Err` when it could not be reached or
    /// refused the client.
    async fn answered(&self, args: &[String], key: Option<&str>) -> RedisResult<()> {
        let mut attempt = 0;
        loop {
            match self.command(args, key).await {
                Ok(_) => return Ok(()),
                Err(e) if is_auth_error(&e) => return Err(e),
                Err(e) if is_unusable(&e) && attempt < 2 => {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) if is_unusable(&e) => return Err(e),
                Err(_) => return Ok(()),
            }
        }
    }

    /// Sends a waiting acquire on a dedicated connection of `node`. Cancelled (the future
    /// dropped): the connection is closed and the owner's possible grant released, on the
    /// runtime. Broken (the connection killed, reset or reaped): the owner is cleaned up
    /// here the same way, then [`CallError::Broken`] if the server could be reached for it.
    /// No reply by the client-side bound: cleaned up in the background, an I/O error.
    pub async fn wait_call(
        self: &Arc<Self>,
        node: &str,
        args: &[String],
        wait: proto::Wait,
        keys: &[String],
        owner: &str,
        of: Of,
    ) -> std::result::Result<Value, CallError> {
        let wc = self.checkout(node).await?;
        let con = wc.con.clone();
        let mut guard = CancelGuard {
            inner: self.clone(),
            node: node.to_string(),
            wc: Some(wc),
            keys: keys.to_vec(),
            owner: owner.to_string(),
            of,
            armed: true,
        };
        let cmd = proto::cmd(args);
        let send = async move {
            let mut con = con;
            con.send_packed_command(&cmd)
                .await
                .and_then(Value::extract_error)
        };
        let reply = match wait {
            proto::Wait::For(d) => match tokio::time::timeout(d + WAIT_MARGIN, send).await {
                Ok(r) => r,
                // Not a broken connection: a server that does not answer (in time). The
                // guard cleans up in the background.
                Err(_) => {
                    return Err(CallError::Redis(RedisError::from((
                        redis::ErrorKind::Io,
                        "no reply to a waiting acquire in time",
                    ))))
                }
            },
            _ => send.await,
        };
        match reply {
            Ok(v) => {
                guard.done(true);
                Ok(v)
            }
            // The grant may have been sent as the connection broke. The guard stays armed
            // while this runs: dropped meanwhile, it cleans up again (both are harmless
            // twice).
            Err(e) if is_unusable(&e) => {
                drop(guard.wc.take());
                let cleaned = self.clean_cancelled(keys, owner, of).await;
                guard.armed = false;
                match cleaned {
                    Ok(()) => Err(CallError::Broken),
                    Err(unreachable) => Err(CallError::Redis(unreachable)),
                }
            }
            Err(e) => {
                guard.done(true);
                match e.redirect_node() {
                    Some((addr, _)) if e.code() == Some("MOVED") => {
                        Err(CallError::Moved(addr.to_string()))
                    }
                    _ => Err(e.into()),
                }
            }
        }
    }
}

/// Cleans a cancelled wait when dropped armed.
struct CancelGuard {
    inner: Arc<Inner>,
    node: String,
    wc: Option<Conn>,
    keys: Vec<String>,
    owner: String,
    of: Of,
    armed: bool,
}

impl CancelGuard {
    fn done(&mut self, reuse: bool) {
        self.armed = false;
        if let Some(wc) = self.wc.take() {
            if reuse {
                self.inner.checkin(&self.node, wc);
            }
        }
    }
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // Closes the waiting connection: the last handle of it, whose task ends with it.
        drop(self.wc.take());
        let inner = self.inner.clone();
        let (keys, owner, of) = (
            std::mem::take(&mut self.keys),
            std::mem::take(&mut self.owner),
            self.of,
        );
        self.inner.handle.spawn(async move {
            let _ = inner.clean_cancelled(&keys, &owner, of).await;
        });
    }
}
