//! Keeping a hold while the command runs: the hold is kept alive by the
//! server (KEEPALIVE) on the connection that took it; a thread polls
//! `LOCK.INFO` on a second connection to see that the owner still holds every
//! lock and that the holder connection still keeps it alive. When that
//! binding is gone (the connection broke, the server restarted or failed
//! over), it re-attaches with `LOCK.RENEW ... KEEPALIVE`: on the holder
//! connection if it still works (the command inherited that one, see
//! `run`), else on a new one. A lock the owner no longer holds is reported
//! as lost.

use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use redis::{ConnectionInfo, RedisError};

use crate::commands::Acquire;
use crate::conn::{Conn, REPLY_TIMEOUT};
use crate::exit::is_unusable;
use crate::hold::{judge, judge_permit, needs_reattach, Seen};
use crate::reply::{self, Fields};
use crate::words;

/// How often `LOCK.INFO` is polled: a tenth of the lease, at most every
/// 100 ms apart, at least 5 ms.
pub fn interval(lease: Duration) -> Duration {
    (lease / 10).clamp(Duration::from_millis(5), Duration::from_millis(100))
}

/// The `CLIENT ID` of a connection, if the server tells.
pub fn client_id(conn: &mut Conn) -> Option<i64> {
    conn.call(&["CLIENT".into(), "ID".into()])
        .ok()
        .and_then(|v| reply::int(&v))
}

enum Trouble {
    /// The owner no longer holds a lock.
    Lost(String),
    /// Could not tell this time (the server is not answering).
    Unsure(String),
}

fn unsure(info: &ConnectionInfo, args: &[String], e: &RedisError) -> Trouble {
    Trouble::Unsure(words::reason(info, args, e))
}

/// How long a re-attach on the holder connection may wait for its reply
/// before a new connection is tried: a connection cut off without a reset
/// must not use up the lease left.
fn same_connection_patience(lease: Duration) -> Duration {
    (lease / 4).clamp(Duration::from_millis(50), REPLY_TIMEOUT)
}

enum Bind {
    NotOwner(String),
    Failed(RedisError),
}

fn not_owner(name: &str) -> Trouble {
    Trouble::Lost(format!(
        "{name}: it was no longer held when re-attached to a connection"
    ))
}

pub struct Watch {
    acquire: Acquire,
    holder: Conn,
    holder_id: Option<i64>,
    probe_target: ConnectionInfo,
    probe: Option<Conn>,
}

/// The running watch: stop it to get the holder connection back.
pub struct Running {
    stop: Sender<()>,
    thread: JoinHandle<Conn>,
}

impl Running {
    /// Stops the thread; the holder connection, unless the thread died.
    pub fn stop(self) -> Option<Conn> {
        let _ = self.stop.send(());
        self.thread.join().ok()
    }
}

impl Watch {
    pub fn new(acquire: Acquire, mut holder: Conn) -> Watch {
        let holder_id = client_id(&mut holder);
        let probe_target = holder.info().clone();
        Watch {
            acquire,
            holder,
            holder_id,
            probe_target,
            probe: None,
        }
    }

    /// Starts the thread; `lost(reason)` is sent on `tx` once, when a lock is
    /// lost, and the thread then stops watching.
    pub fn start<E: Send + 'static>(
        mut self,
        tx: Sender<E>,
        lost: fn(String) -> E,
    ) -> std::io::Result<Running> {
        let (stop, stopped) = mpsc::channel::<()>();
        let every = interval(self.acquire.lease);
        let thread = thread::Builder::new().name("watch".into()).spawn(move || {
            let mut confirmed = Instant::now();
            loop {
                match stopped.recv_timeout(every) {
                    Err(RecvTimeoutError::Timeout) => {}
                    _ => return self.holder,
                }
                match self.check() {
                    Ok(()) => confirmed = Instant::now(),
                    Err(Trouble::Lost(reason)) => {
                        let _ = tx.send(lost(reason));
                        break;
                    }
                    Err(Trouble::Unsure(why)) => {
                        // Without renewals the lease ends a lease after the
                        // last one: past that, the lock cannot be ours still.
                        if confirmed.elapsed() >= self.acquire.lease {
                            let _ = tx.send(lost(format!(
                                "could not confirm it for a whole lease ({why})"
                            )));
                            break;
                        }
                    }
                }
            }
            let _ = stopped.recv();
            self.holder
        })?;
        Ok(Running { stop, thread })
    }

    fn check(&mut self) -> Result<(), Trouble> {
        if self.probe.is_none() {
            self.probe = Some(Conn::connect(&self.probe_target).map_err(|e| {
                Trouble::Unsure(words::connect_failure(&self.probe_target, &e).to_string())
            })?);
        }
        let mut reattach = false;
        for name in &self.acquire.names {
            let Some(probe) = self.probe.as_mut() else {
                return Err(Trouble::Unsure("no connection".into()));
            };
            let cmd = self.acquire.info(name);
            let v = match probe.call(&cmd) {
                Ok(v) => v,
                Err(e) => {
                    let why = words::reason(probe.info(), &cmd, &e);
                    if is_unusable(&e) {
                        self.probe = None;
                    } else if e.code() == Some("WRONGTYPE") {
                        return Err(Trouble::Lost(why));
                    }
                    return Err(Trouble::Unsure(why));
                }
            };
            let seen = if self.acquire.semaphore.is_some() {
                judge_permit(&v, &self.acquire.owner)
            } else {
                judge(
                    Fields::parse(&v).as_ref(),
                    &self.acquire.owner,
                    self.acquire.kind,
                )
            };
            match seen {
                Seen::Lost(why) => return Err(Trouble::Lost(format!("{name}: {why}"))),
                Seen::Held { bound } => reattach |= needs_reattach(bound, self.holder_id),
            }
        }
        if reattach {
            self.reattach()?;
        }
        Ok(())
    }

    /// Every hold bound to the holder connection again: to the one the
    /// command inherited while it works, else to a new one.
    fn reattach(&mut self) -> Result<(), Trouble> {
        let patience = same_connection_patience(self.acquire.lease);
        match self.bind(Some(patience)) {
            Err(Bind::Failed(e)) if is_unusable(&e) => {}
            Err(Bind::Failed(e)) => return Err(unsure(self.holder.info(), &self.renew_args(), &e)),
            Err(Bind::NotOwner(name)) => return Err(not_owner(&name)),
            Ok(()) => return Ok(()),
        }
        let target = self.holder.info().clone();
        self.holder
            .reconnect()
            .map_err(|e| Trouble::Unsure(words::connect_failure(&target, &e).to_string()))?;
        self.holder_id = client_id(&mut self.holder);
        match self.bind(None) {
            Ok(()) => Ok(()),
            Err(Bind::NotOwner(name)) => Err(not_owner(&name)),
            Err(Bind::Failed(e)) => Err(unsure(self.holder.info(), &self.renew_args(), &e)),
        }
    }

    /// The first re-attach command, for messages.
    fn renew_args(&self) -> Vec<String> {
        self.acquire
            .reattach()
            .into_iter()
            .next()
            .unwrap_or_default()
    }

    /// `LOCK.RENEW name owner PX lease KEEPALIVE` for every name on the
    /// holder connection, replies awaited up to `patience` (`None`: the
    /// usual).
    fn bind(&mut self, patience: Option<Duration>) -> Result<(), Bind> {
        for cmd in self.acquire.reattach() {
            let reply = match patience {
                Some(p) => self.holder.call_waiting(&cmd, Some(p)),
                None => self.holder.call(&cmd),
            };
            match reply {
                Ok(_) => {}
                Err(e) if self.acquire.not_held(e.code()) => {
                    return Err(Bind::NotOwner(cmd.get(1).cloned().unwrap_or_default()))
                }
                Err(e) => return Err(Bind::Failed(e)),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poll_interval() {
        assert_eq!(
            interval(Duration::from_secs(30)),
            Duration::from_millis(100)
        );
        assert_eq!(
            interval(Duration::from_millis(300)),
            Duration::from_millis(30)
        );
        assert_eq!(
            interval(Duration::from_millis(10)),
            Duration::from_millis(5)
        );
    }
}
