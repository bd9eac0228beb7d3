//! A hold ([`Hold`]) and the acquire that makes one ([`acquire`]), shared by every object of
//! the session: a lock's hold, a semaphore's permits, an election's leadership are each a
//! hold, taken through the same path (a fresh owner bound to the session, waiting in the
//! server's queue, queued again after a broken wait, `MOVED` and `NOSESSION` followed),
//! kept by the session and released the same way.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::RedisError;
use tokio::sync::watch;

use super::state::{Entry, Inner, Of};
use super::wait::{wait_left, CallError};
use crate::error::{is_unusable, Error, Result};
use crate::proto::{self, Acquire, Binding, Kind, Lost, SemAcquire, Wait};

fn unexpected(v: &redis::Value) -> Error {
    Error::Other(RedisError::from((
        redis::ErrorKind::Parse,
        "unexpected reply to an acquire",
        format!("{v:?}"),
    )))
}

/// Takes a hold: a lock's (`of` a kind of lock), a semaphore's permits or an election's
/// leadership (with `value`), bound to the session, waiting as `wait` says; a fresh owner
/// unless `owner` is given (a re-entry, or `acquire_as`).
///
/// A wait whose connection breaks while the server can still be reached is cleaned up as a
/// cancel (`LOCK.CANCEL`, then the release of a grant that crossed the break) and queued
/// again as a fresh owner (the given one for `acquire_as`) for the time left: the place in
/// line is lost. So is an acquire that does not wait, whose connection broke before its
/// answer. Not a re-entry: its release would drop a hold the owner has.
pub(crate) async fn acquire(
    inner: &Arc<Inner>,
    keys: Vec<String>,
    of: Of,
    lease: Duration,
    wait: Wait,
    owner: Option<String>,
    value: Option<&str>,
) -> Result<Hold> {
    inner.check_open()?;
    let first = keys.first().cloned().ok_or_else(|| {
        Error::Other(RedisError::from((
            redis::ErrorKind::InvalidClientConfig,
            "no key",
        )))
    })?;
    let started = Instant::now();
    let given_owner = owner.is_some();
    let reentry = owner
        .as_deref()
        .is_some_and(|o| inner.owner_holds_any(o, &keys));
    let mut owner = owner.unwrap_or_else(|| inner.new_owner());
    let mut node = inner.node_of(&first);
    inner.ensure_session(&node).await?;
    inner.check_lease(lease)?;
    let mut retried = false;
    let mut redirects = 0;
    loop {
        let wait = wait_left(wait, started);
        let sent_at = inner.generation();
        let binding = Binding::Session(&inner.token);
        let args = match of {
            Of::Lock(kind) => Acquire {
                keys: &keys,
                owner: &owner,
                kind,
                lease,
                wait,
                fence: true,
                binding,
            }
            .args(),
            Of::Semaphore { permits } => SemAcquire {
                key: &first,
                owner: &owner,
                permits,
                lease,
                wait,
                fence: false,
                binding,
            }
            .args(),
            Of::Election => proto::elect_campaign(&first, &owner, value, lease, binding, wait),
        };
        let reply = if wait.block_ms().is_none() {
            match inner.command(&args, Some(&first)).await {
                // Granted or not as the connection broke: cleaned up as a broken wait.
                Err(e) if is_unusable(&e) && !reentry => {
                    match inner.clean_cancelled(&keys, &owner, of).await {
                        Ok(()) => Err(CallError::Broken),
                        Err(unreachable) => Err(CallError::Redis(unreachable)),
                    }
                }
                r => r.map_err(CallError::Redis),
            }
        } else {
            inner.wait_call(&node, &args, wait, &keys, &owner, of).await
        };
        let e = match reply {
            Ok(v) => {
                let granted = match of {
                    Of::Lock(_) => proto::acquired(&v),
                    Of::Semaphore { .. } => proto::sem_acquired(&v).map(|n| n.map(|n| vec![n])),
                    Of::Election => proto::campaigned(&v).map(|n| n.map(|n| vec![n])),
                };
                return match granted {
                    Ok(None) => Err(Error::Busy),
                    Ok(Some(tokens)) => {
                        let (tx, rx) = watch::channel(None);
                        let entry = Entry {
                            keys: keys.clone(),
                            owner: owner.clone(),
                            of,
                            lease,
                            node: node.clone(),
                            tx,
                        };
                        let id = inner.register(entry);
                        let first_token = tokens.first().copied().unwrap_or_default();
                        let hold = Hold {
                            inner: inner.clone(),
                            id,
                            keys,
                            owner,
                            of,
                            lease,
                            tokens,
                            lost: rx,
                            done: false,
                        };
                        // Dropped here, the hold is released by its Drop.
                        inner
                            .reattach_if_reconnected(id, sent_at, first_token)
                            .await;
                        Ok(hold)
                    }
                    Err(proto::Unexpected) => {
                        let _ = inner
                            .command(&of.release(&keys, &owner), Some(&first))
                            .await;
                        Err(unexpected(&v))
                    }
                };
            }
            Err(CallError::Moved(addr)) if redirects < 5 => {
                redirects += 1;
                inner.moved(&first, &addr);
                node = addr;
                inner.ensure_session(&node).await?;
                continue;
            }
            Err(CallError::Moved(addr)) => {
                return Err(Error::Unavailable(RedisError::from((
                    redis::ErrorKind::Io,
                    "too many redirections",
                    addr,
                ))))
            }
            // Cleaned up; the server answers: again, as a fresh owner, for the time left.
            Err(CallError::Broken) => {
                if !given_owner {
                    owner = inner.new_owner();
                }
                continue;
            }
            Err(CallError::Redis(e)) => e,
        };
        if e.code() == Some("NOSESSION") && !retried {
            retried = true;
            node = inner.node_of(&first);
            inner.resume_session(&node, sent_at).await?;
            node = inner.node_of(&first);
            continue;
        }
        return Err(e.into());
    }
}

/// A granted hold. The server keeps it alive while the session lives; [`Hold::lost`] says
/// when it ends otherwise. Release it with [`Hold::release`]; a hold dropped unreleased is
/// released in the background (spawned on the session's runtime, best effort: an error is
/// not reported, and the server ends the hold a lease after the session if it never
/// arrives).
pub struct Hold {
    inner: Arc<Inner>,
    id: u64,
    keys: Vec<String>,
    owner: String,
    of: Of,
    lease: Duration,
    tokens: Vec<i64>,
    lost: watch::Receiver<Option<Lost>>,
    done: bool,
}

impl std::fmt::Debug for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hold")
            .field("keys", &self.keys)
            .field("owner", &self.owner)
            .field("of", &self.of)
            .field("tokens", &self.tokens)
            .finish()
    }
}

impl Hold {
    /// The fencing token (of the first key): greater than every token handed out before for
    /// that key. Send it with every write the lock protects and have the storage refuse
    /// lower ones.
    pub fn token(&self) -> i64 {
        self.tokens.first().copied().unwrap_or_default()
    }

    /// The fencing token of each key, in the order given.
    pub fn tokens(&self) -> &[i64] {
        &self.tokens
    }

    pub fn keys(&self) -> &[String] {
        &self.keys
    }

    /// The owner this hold was granted to (`<session-token>:<n>`).
    pub fn owner(&self) -> &str {
        &self.owner
    }

    pub fn kind(&self) -> Kind {
        match self.of {
            Of::Lock(kind) => kind,
            Of::Semaphore { .. } | Of::Election => Kind::Exclusive,
        }
    }

    /// `Some(Lost)` once the hold is lost: force-released, gone, moved, past
    /// `lock.keepalive-max-hold-ms`, not held at a re-attach, or the session connection down
    /// longer than the lease. Await `changed()` on it, or `wait_for(Option::is_some)`.
    pub fn lost(&self) -> watch::Receiver<Option<Lost>> {
        self.lost.clone()
    }

    pub fn is_lost(&self) -> bool {
        self.lost.borrow().is_some()
    }

    /// `Error::Lost` once lost.
    pub(crate) fn lost_error(&self) -> Option<Error> {
        self.lost.borrow().clone().map(Error::Lost)
    }

    /// Releases the hold (`LOCK.RELEASE`, `LOCK.MRELEASE`; `SEM.RELEASE` for permits).
    /// [`Error::Lost`] or [`Error::NotOwner`] ([`Error::Expired`] for permits) if it was no
    /// longer held.
    pub async fn release(mut self) -> Result<()> {
        self.done = true;
        let known = self.inner.forget(self.id).is_some();
        if !known && self.inner.is_closed() && self.lost_error().is_none() {
            return Ok(()); // released when the session closed
        }
        let args = self.of.release(&self.keys, &self.owner);
        match self.inner.command(&args, Some(&self.keys[0])).await {
            Ok(_) => Ok(()),
            Err(e) => match Error::from(e) {
                e @ (Error::NotOwner | Error::Expired) => Err(self.lost_error().unwrap_or(e)),
                other => {
                    if known && matches!(other, Error::Unavailable(_)) {
                        // Not known to be released: try again in the background.
                        let inner = self.inner.clone();
                        let key = self.keys[0].clone();
                        self.inner.handle.spawn(async move {
                            tokio::time::sleep(Duration::from_millis(200)).await;
                            let _ = inner.command(&args, Some(&key)).await;
                        });
                    }
                    Err(other)
                }
            },
        }
    }

    /// Sets a new lease from now (`LOCK.RENEW ... SESSION token`), kept from then on (and on
    /// re-attach). Not needed to keep the hold: the server renews it while the session lives.
    pub async fn extend(&mut self, lease: Duration) -> Result<()> {
        if let Some(e) = self.lost_error() {
            return Err(e);
        }
        for key in &self.keys {
            let args = self
                .of
                .renew(key, &self.owner, lease, Binding::Session(&self.inner.token));
            if let Err(e) = self.inner.command(&args, Some(key)).await {
                return Err(match Error::from(e) {
                    e @ (Error::NotOwner | Error::Expired) => self.lost_error().unwrap_or(e),
                    other => other,
                });
            }
        }
        self.lease = lease;
        self.inner.set_lease(self.id, lease);
        Ok(())
    }

    /// Takes the lock again for the same owner (a re-entry: the module counts holds), at
    /// once. The new hold is released on its own; the lock is free when every hold is.
    pub async fn reenter(&self) -> Result<Hold> {
        if let Some(e) = self.lost_error() {
            return Err(e);
        }
        if !self.inner.holds_entry(self.id) {
            return Err(Error::NotOwner);
        }
        acquire(
            &self.inner,
            self.keys.clone(),
            self.of,
            self.lease,
            Wait::No,
            Some(self.owner.clone()),
            None,
        )
        .await
    }

    /// What the hold is of (a lock's `acquire_as` takes a lock's hold only).
    pub(crate) fn of(&self) -> Of {
        self.of
    }

    /// The session's state and this hold's id in it (for elections, a lock's `acquire_as`).
    pub(crate) fn session(&self) -> (&Arc<Inner>, u64) {
        (&self.inner, self.id)
    }

    /// Marks the hold as done by its owner (released or resigned): not released when dropped.
    pub(crate) fn set_done(&mut self) {
        self.done = true;
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if self.inner.forget(self.id).is_none() {
            return; // lost, or released with the session
        }
        let inner = self.inner.clone();
        let args = self.of.release(&self.keys, &self.owner);
        let key = self.keys[0].clone();
        self.inner.handle.spawn(async move {
            let _ = inner.command(&args, Some(&key)).await;
        });
    }
}
