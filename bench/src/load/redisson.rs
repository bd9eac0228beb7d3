//! Redisson's RLock and RReadWriteLock waits, as the emulated client
//! (`redisson-emu`) runs them: the acquire scripts by `EVALSHA`; on a PTTL
//! answer the process subscribes to the lock's channel and the thread tries
//! again, then waits for a message or the PTTL between tries; the unlock
//! scripts of several locks sent together (`RedissonMultiLock.unlock()`).

use std::io;
use std::rc::Rc;
use std::time::{Duration, Instant};

use lock_rules::keys::read_lease_prefix;
use tokio::time::sleep;

use super::client::{expired, Client, Outcome};
use super::process::Chan;
use super::shared::Mode;
use crate::conn::{unexpected, Reply};

impl Client {
    /// Redisson's `RLock.lock()` (no deadline) or `tryLock(wait)` (until
    /// `deadline`): the acquire script; on a PTTL answer the process
    /// subscribes to the lock's channel and the thread tries again, then
    /// waits for a message handed to it or the PTTL (at most until the
    /// deadline) between tries. Past the deadline after a failed try or a
    /// wait: `TimedOut`.
    pub(super) async fn redisson_lock(
        &mut self,
        k: usize,
        mode: Mode,
        deadline: Option<Instant>,
    ) -> io::Result<Outcome> {
        let sh = self.shared.clone();
        let key = &sh.keys[k];
        let mut chan: Option<Rc<Chan>> = None;
        let lease_prefix = match mode {
            Mode::Read => read_lease_prefix(key, &self.owner),
            _ => Vec::new(),
        };
        loop {
            let (what, r) = match mode {
                Mode::Read => (
                    "redisson read acquire script",
                    self.conn
                        .cmd(&[
                            b"EVALSHA",
                            sh.scripts.read_acquire.as_bytes(),
                            b"2",
                            key,
                            &lease_prefix,
                            &sh.lease,
                            &self.owner,
                            &self.owner_write,
                        ])
                        .await?,
                ),
                // One key, the lease and the hold's field in the hash.
                Mode::Exclusive | Mode::Write => {
                    let (what, sha, field) = if mode == Mode::Write {
                        (
                            "redisson write acquire script",
                            &sh.scripts.write_acquire,
                            &self.owner_write,
                        )
                    } else {
                        ("redisson acquire script", &sh.scripts.acquire, &self.owner)
                    };
                    let r = self
                        .conn
                        .cmd(&[b"EVALSHA", sha.as_bytes(), b"1", key, &sh.lease, field])
                        .await?;
                    (what, r)
                }
            };
            let pttl = match r {
                Reply::Nil => return Ok(Outcome::Granted),
                Reply::Int(t) => t,
                other => return Err(unexpected(what, &other)),
            };
            sh.failed_try();
            if sh.stopping.get() {
                return Ok(Outcome::Stopped);
            }
            if expired(deadline) {
                return Ok(Outcome::TimedOut);
            }
            match &chan {
                // First failure: subscribe, then try again at once
                // (a release may have been published before the
                // subscription was in place).
                None => {
                    let process = self
                        .process
                        .clone()
                        .ok_or_else(|| io::Error::other("redisson client without process"))?;
                    chan = Some(process.subscribe(k).await?);
                }
                Some(c) => {
                    let mut wait = if pttl >= 0 {
                        Duration::from_millis(pttl as u64)
                    } else {
                        Duration::from_secs(3600)
                    };
                    if let Some(d) = deadline {
                        wait = wait.min(d.saturating_duration_since(Instant::now()));
                    }
                    tokio::select! {
                        _ = c.wake.notified() => {}
                        _ = sleep(wait) => {}
                        _ = sh.stop.notified() => {}
                    }
                }
            }
            if sh.stopping.get() {
                return Ok(Outcome::Stopped);
            }
            if expired(deadline) {
                return Ok(Outcome::TimedOut);
            }
        }
    }

    /// Redisson's unlock of these exclusive locks, sent together as
    /// `RedissonMultiLock.unlock()` does (every `unlockAsync` first, then
    /// wait for all); each must answer 1 (released: deleted and published).
    /// Also the unlock of the keys taken when a `tryLock` gives up
    /// (`unlockInner`: the same in older Redisson, one after another in
    /// newer; at most once per wait of seconds, so it makes no difference).
    pub(super) async fn redisson_unlock(&mut self, ks: &[usize]) -> io::Result<()> {
        let sh = self.shared.clone();
        for &k in ks {
            self.conn.push(&[
                b"EVALSHA",
                sh.scripts.release.as_bytes(),
                b"2",
                &sh.keys[k],
                &sh.channels[k],
                b"0",
                &sh.lease,
                &self.owner,
            ]);
        }
        self.conn.flush().await?;
        for _ in ks {
            let r = self.conn.read().await?;
            if r != Reply::Int(1) {
                return Err(unexpected("redisson release script", &r));
            }
        }
        Ok(())
    }
}
