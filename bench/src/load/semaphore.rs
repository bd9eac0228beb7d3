//! Semaphore runs (S12): a client's acquire and release of one permit
//! (`SEM.ACQUIRE` / `SEM.RELEASE`, Redisson's `RPermitExpirableSemaphore`
//! scripts and subscription entries, or a blpop token); the keys Redisson's
//! semaphore uses; a fresh semaphore before a run and every permit back
//! after it.
//!
//! Offers: [`sem_channel`], [`sem_timeout_key`], [`init_semaphore`],
//! [`check_semaphore`].

use std::io;
use std::rc::Rc;
use std::time::Duration;

use lock_rules::keys::tagged_name;
use tokio::time::sleep;

use super::client::{outcome, unix_ms, until_granted, Client, Outcome};
use super::process::SemEntry;
use super::scripts::REDISSON_NEVER;
use super::spec::{Proto, BLPOP_TOKEN};
use crate::conn::{unexpected, Conn, Reply, ReplyExt};

impl Client {
    /// One permit of semaphore `k`: `SEM.ACQUIRE key owner PX lease BLOCK
    /// wait` (1 = granted, nil = BLOCK timeout, sent again), Redisson's
    /// `RPermitExpirableSemaphore.acquire(leaseTime)`, or `BLPOP key wait`
    /// of one of the list's tokens.
    pub(super) async fn acquire_permit(&mut self, k: usize) -> io::Result<Outcome> {
        let sh = self.shared.clone();
        let key = &sh.keys[k];
        match sh.proto {
            Proto::Module => {
                let args: [&[u8]; 7] = [
                    b"SEM.ACQUIRE",
                    key,
                    &self.owner,
                    b"PX",
                    &sh.lease,
                    b"BLOCK",
                    &sh.block,
                ];
                let granted = until_granted(&mut self.conn, &sh, "SEM.ACQUIRE", &args, |r| {
                    *r == Reply::Int(1)
                })
                .await?;
                Ok(outcome(granted))
            }
            Proto::Redisson => self.redisson_sem_acquire(k).await,
            Proto::Blpop => self.blpop_token(k).await,
            other => Err(io::Error::other(format!(
                "{} has no semaphore",
                other.name()
            ))),
        }
    }

    /// Redisson's `RPermitExpirableSemaphore.acquire(leaseTime, unit)`: the
    /// try-acquire script with a new permit id; if it answers anything but
    /// `OK`, subscribe (the process's entry for the channel, see
    /// `SemEntry`) and loop: the script again; `OK` ends it, nil waits for a
    /// permit of the entry's latch, `:<ms>` waits for one at most until that
    /// unix ms (a held permit's lease end); the thread leaves the entry at
    /// the end.
    async fn redisson_sem_acquire(&mut self, k: usize) -> io::Result<Outcome> {
        let sh = self.shared.clone();
        let key = &sh.keys[k];
        self.permit = {
            let (a, b) = (self.permit_ids.next_u64(), self.permit_ids.next_u64());
            [a.to_le_bytes(), b.to_le_bytes()].concat()
        };
        let process = self
            .process
            .clone()
            .ok_or_else(|| io::Error::other("redisson client without process"))?;
        let mut entry: Option<Rc<SemEntry>> = None;
        let outcome = loop {
            let now = unix_ms();
            let (now_s, end_s) = (now.to_string(), (now + sh.lease_ms).to_string());
            let r = self
                .conn
                .cmd(&[
                    b"EVALSHA",
                    sh.scripts.sem_acquire.as_bytes(),
                    b"3",
                    key,
                    &sh.sem_timeouts[k],
                    &sh.channels[k],
                    b"1",
                    end_s.as_bytes(),
                    now_s.as_bytes(),
                    REDISSON_NEVER,
                    b"publish",
                    &self.permit,
                ])
                .await;
            let nearest = match r {
                Ok(Reply::BulkString(b)) if b == b"OK" => break Ok(Outcome::Granted),
                Ok(Reply::Nil) => None,
                Ok(Reply::BulkString(b)) if b.first() == Some(&b':') => {
                    match std::str::from_utf8(&b[1..])
                        .ok()
                        .and_then(|t| t.parse::<f64>().ok())
                    {
                        Some(at) => Some(at as u64),
                        None => {
                            break Err(unexpected(
                                "redisson semaphore acquire script",
                                &Reply::BulkString(b),
                            ))
                        }
                    }
                }
                Ok(other) => break Err(unexpected("redisson semaphore acquire script", &other)),
                Err(e) => break Err(e),
            };
            sh.failed_try();
            if sh.stopping.get() {
                break Ok(Outcome::Stopped);
            }
            match &entry {
                // First failure: subscribe, then try again at once.
                None => match process.sem_subscribe(k).await {
                    Ok(e) => entry = Some(e),
                    Err(e) => break Err(e),
                },
                Some(e) => {
                    let wait = match nearest {
                        Some(at) => Duration::from_millis(at.saturating_sub(unix_ms())),
                        None => Duration::from_secs(3600),
                    };
                    tokio::select! {
                        p = e.latch.acquire() => {
                            if let Ok(p) = p {
                                p.forget();
                            }
                        }
                        _ = sleep(wait) => {}
                        _ = sh.stop.notified() => {}
                    }
                    if sh.stopping.get() {
                        break Ok(Outcome::Stopped);
                    }
                }
            }
        };
        if let Some(e) = &entry {
            process.sem_unsubscribe(k, e);
        }
        outcome
    }

    /// Gives back the permit of semaphore `k` (of `permits`):
    /// `SEM.RELEASE key owner` (must answer 0: none held now), Redisson's
    /// release script (must answer 1), or `RPUSH key token` (the list's
    /// length: 1 to `permits`).
    pub(super) async fn release_permit(&mut self, k: usize, permits: usize) -> io::Result<()> {
        let sh = self.shared.clone();
        let key = &sh.keys[k];
        let (what, r, ok) = match sh.proto {
            Proto::Module => {
                let r = self.conn.cmd(&[b"SEM.RELEASE", key, &self.owner]).await?;
                let ok = r == Reply::Int(0);
                ("SEM.RELEASE", r, ok)
            }
            Proto::Redisson => {
                let now = unix_ms().to_string();
                let r = self
                    .conn
                    .cmd(&[
                        b"EVALSHA",
                        sh.scripts.sem_release.as_bytes(),
                        b"3",
                        key,
                        &sh.channels[k],
                        &sh.sem_timeouts[k],
                        &self.permit,
                        b"1",
                        now.as_bytes(),
                        b"publish",
                    ])
                    .await?;
                let ok = r == Reply::Int(1);
                ("redisson semaphore release script", r, ok)
            }
            _ => {
                let r = self.conn.cmd(&[b"RPUSH", key, BLPOP_TOKEN]).await?;
                let ok = matches!(r, Reply::Int(n) if n >= 1 && n as usize <= permits);
                ("RPUSH", r, ok)
            }
        };
        if !ok {
            return Err(unexpected(what, &r));
        }
        Ok(())
    }
}

/// Where Redisson's semaphore clients wait: `redisson_sc:{name}`.
pub fn sem_channel(name: &[u8]) -> Vec<u8> {
    [b"redisson_sc:".as_slice(), &tagged_name(name)].concat()
}

/// A semaphore's held permits, Redisson's `{name}:timeout`.
pub fn sem_timeout_key(name: &[u8]) -> Vec<u8> {
    [tagged_name(name).as_slice(), b":timeout"].concat()
}

/// A fresh semaphore of `permits` for `proto`: `SEM.INIT key permits` (must
/// answer 1), the counter Redisson's `trySetPermits` writes (`SET key
/// permits NX`), or a list of `permits` tokens.
pub async fn init_semaphore(
    admin: &mut Conn,
    proto: Proto,
    key: &[u8],
    permits: usize,
) -> io::Result<()> {
    let n = permits.to_string();
    let timeout = sem_timeout_key(key);
    admin.cmd(&[b"DEL", key, &timeout]).await?;
    let (what, r, ok) = match proto {
        Proto::Module => {
            let r = admin.cmd(&[b"SEM.INIT", key, n.as_bytes()]).await?;
            let ok = r == Reply::Int(1);
            ("SEM.INIT", r, ok)
        }
        Proto::Redisson => {
            let r = admin.cmd(&[b"SET", key, n.as_bytes(), b"NX"]).await?;
            let ok = r == Reply::Okay;
            ("SET NX of the permits", r, ok)
        }
        _ => {
            let mut args: Vec<&[u8]> = vec![b"RPUSH", key];
            args.extend(std::iter::repeat_n(BLPOP_TOKEN, permits));
            let r = admin.cmd(&args).await?;
            let ok = r == Reply::Int(permits as i64);
            ("RPUSH of the tokens", r, ok)
        }
    };
    if !ok {
        return Err(unexpected(what, &r));
    }
    Ok(())
}

/// After a semaphore run (every client done): every permit is back. The
/// counter is `permits` and no held permit is left in `{name}:timeout`
/// (module and redisson share that layout), or the list holds `permits`
/// tokens.
pub async fn check_semaphore(
    addr: &str,
    proto: Proto,
    key: &[u8],
    permits: usize,
) -> io::Result<()> {
    let mut c = Conn::connect(addr).await?;
    if proto == Proto::Blpop {
        let r = c.cmd(&[b"LLEN", key]).await?;
        if r != Reply::Int(permits as i64) {
            return Err(unexpected(&format!("LLEN (want {permits})"), &r));
        }
        return Ok(());
    }
    let r = c.cmd(&[b"GET", key]).await?;
    if r.int() != Some(permits as i64) {
        return Err(unexpected(&format!("GET (want {permits})"), &r));
    }
    let r = c.cmd(&[b"EXISTS", &sem_timeout_key(key)]).await?;
    if r != Reply::Int(0) {
        return Err(unexpected(
            "EXISTS of the held permits' sorted set (want 0)",
            &r,
        ));
    }
    Ok(())
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn semaphore_keys_are_redissons() {
        assert_eq!(sem_channel(b"pool"), b"redisson_sc:{pool}");
        assert_eq!(sem_timeout_key(b"pool"), b"{pool}:timeout");
        assert_eq!(sem_channel(b"{a}b"), b"redisson_sc:{a}b");
        assert_eq!(sem_timeout_key(b"{a}b"), b"{a}b:timeout");
        assert_eq!(
            crate::latch::latch_channel(b"gate"),
            b"redisson_countdownlatch__channel__{gate}"
        );
    }
}
