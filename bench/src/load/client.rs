//! A client of a run: its connection, owner id and (for Redisson) its
//! process; the plain lock commands: the module's `LOCK.ACQUIRE` /
//! `LOCK.RACQUIRE` / `LOCK.WACQUIRE` and `LOCK.RELEASE`, blpop's `BLPOP` /
//! `RPUSH`, module-floor's `FLOOR.ACQUIRE` / `FLOOR.RELEASE`, spin and raw
//! `SET NX` and their releases, each reply checked;
//! the checks of a FENCE token and of the guarded data. Redisson's waits,
//! semaphores, multi-locks and read-write grants are the client's calls in
//! `redisson`, `semaphore`, `multi` and `rw`.

use std::io;
use std::rc::Rc;
use std::time::{Duration, Instant};

use lock_rules::keys::{read_lease_prefix, tagged_name};
use tokio::time::sleep;

use super::process::Process;
use super::shared::{Guarded, Mode, Shared};
use super::spec::{Proto, BLPOP_TOKEN};
use crate::conn::{unexpected, Conn, Reply};
use crate::stats;

pub(super) enum Outcome {
    Granted,
    Stopped,
    /// A bounded wait (Redisson's `tryLock`, the module's BLOCK) ran out.
    TimedOut,
}

/// Sends the blocking acquire `args` (`what`, in errors) until `is_grant`
/// accepts its reply, which is returned; a nil (its BLOCK time ran out) is
/// counted and sent again, until the run stops (`None`).
pub(super) async fn until_granted(
    conn: &mut Conn,
    sh: &Shared,
    what: &str,
    args: &[&[u8]],
    is_grant: impl Fn(&Reply) -> bool,
) -> io::Result<Option<Reply>> {
    loop {
        let r = conn.cmd(args).await?;
        if is_grant(&r) {
            return Ok(Some(r));
        }
        if r != Reply::Nil {
            return Err(unexpected(what, &r));
        }
        sh.timeouts.set(sh.timeouts.get() + 1);
        if sh.stopping.get() {
            return Ok(None);
        }
    }
}

/// What a blocking acquire came to: granted, or the run stopped first.
pub(super) fn outcome(granted: Option<Reply>) -> Outcome {
    match granted {
        Some(_) => Outcome::Granted,
        None => Outcome::Stopped,
    }
}

/// The wall clock in unix ms (Redisson's `System.currentTimeMillis()`).
pub(super) fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

pub(super) fn expired(deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|d| Instant::now() >= d)
}

pub struct Client {
    pub(super) id: usize,
    pub conn: Conn,
    pub(super) owner: Vec<u8>,
    /// `<owner>:write`: the write hold's field of a Redisson read-write lock.
    pub(super) owner_write: Vec<u8>,
    pub(super) process: Option<Rc<Process>>,
    pub(super) shared: Rc<Shared>,
    /// Redisson semaphore runs: the id of the permit asked for or held (16
    /// bytes, a new one per acquire, as Redisson's `generateId`) and the
    /// generator of those ids.
    pub(super) permit: Vec<u8>,
    pub(super) permit_ids: stats::Rng,
}

impl Client {
    /// Acquires the run's first key with the protocol's waiting strategy
    /// (true = granted, false = stopped).
    pub async fn acquire_first(&mut self) -> io::Result<bool> {
        Ok(matches!(
            self.acquire(0, Mode::Exclusive).await?,
            Outcome::Granted
        ))
    }

    /// Redis's own hand-off (`blpop`), for a lock or a semaphore alike: `BLPOP` of key `k`
    /// until the token is popped, counting each timeout, or the run stops.
    pub(super) async fn blpop_token(&mut self, k: usize) -> io::Result<Outcome> {
        let sh = self.shared.clone();
        let key = &sh.keys[k];
        let args: [&[u8]; 3] = [b"BLPOP", key, &sh.block_secs];
        let popped = until_granted(&mut self.conn, &sh, "BLPOP", &args, |r| {
            matches!(r, Reply::Array(items)
                if items.len() == 2
                    && items[0] == Reply::BulkString(key.clone())
                    && items[1] == Reply::BulkString(BLPOP_TOKEN.to_vec()))
        })
        .await?;
        Ok(outcome(popped))
    }

    pub(super) async fn acquire(&mut self, k: usize, mode: Mode) -> io::Result<Outcome> {
        let sh = self.shared.clone();
        let key = &sh.keys[k];
        if sh.sem.is_some() {
            return self.acquire_permit(k).await;
        }
        match sh.proto {
            Proto::Module | Proto::ModuleKeepalive | Proto::ModuleFence => {
                let name: &str = match mode {
                    Mode::Exclusive => "LOCK.ACQUIRE",
                    Mode::Read => "LOCK.RACQUIRE",
                    Mode::Write => "LOCK.WACQUIRE",
                };
                let mut args: Vec<&[u8]> = vec![
                    name.as_bytes(),
                    key,
                    &self.owner,
                    b"PX",
                    &sh.lease,
                    b"BLOCK",
                    &sh.block,
                ];
                args.extend(sh.proto.acquire_flags());
                let fenced = sh.proto == Proto::ModuleFence;
                let granted = until_granted(&mut self.conn, &sh, name, &args, |r| match r {
                    Reply::Int(t) if fenced => *t > 0,
                    r => *r == Reply::Int(1),
                })
                .await?;
                if let Some(Reply::Int(token)) = granted.as_ref().filter(|_| fenced) {
                    self.granted_token(k, *token);
                }
                Ok(outcome(granted))
            }
            Proto::Redisson => self.redisson_lock(k, mode, None).await,
            Proto::RedissonClient => Err(io::Error::other(
                "the real Redisson client runs in its own driver, not as a generator task",
            )),
            Proto::Blpop => self.blpop_token(k).await,
            // The module API's floor: 1 = the token, nil = the wait ran out.
            Proto::Floor => {
                let args: [&[u8]; 3] = [b"FLOOR.ACQUIRE", key, &sh.block];
                let granted = until_granted(&mut self.conn, &sh, "FLOOR.ACQUIRE", &args, |r| {
                    *r == Reply::Int(1)
                })
                .await?;
                Ok(outcome(granted))
            }
            // Raw retries at once; spin sleeps between tries.
            Proto::Spin(_) | Proto::Raw => loop {
                let r = self
                    .conn
                    .cmd(&[b"SET", key, &self.owner, b"NX", b"PX", &sh.lease])
                    .await?;
                match r {
                    Reply::Okay => return Ok(Outcome::Granted),
                    Reply::Nil => {}
                    other => return Err(unexpected("SET NX PX", &other)),
                }
                sh.failed_try();
                if sh.stopping.get() {
                    return Ok(Outcome::Stopped);
                }
                if let Proto::Spin(ms) = sh.proto {
                    tokio::select! {
                        _ = sleep(Duration::from_millis(ms)) => {}
                        _ = sh.stop.notified() => {}
                    }
                    if sh.stopping.get() {
                        return Ok(Outcome::Stopped);
                    }
                }
            },
        }
    }

    pub(super) async fn release(&mut self, k: usize, mode: Mode) -> io::Result<()> {
        let sh = self.shared.clone();
        let key = &sh.keys[k];
        if let Some(permits) = sh.sem {
            return self.release_permit(k, permits).await;
        }
        let (what, r, want): (&str, Reply, &[i64]) = match (sh.proto, mode) {
            (Proto::Module | Proto::ModuleKeepalive | Proto::ModuleFence, _) => (
                "LOCK.RELEASE",
                self.conn.cmd(&[b"LOCK.RELEASE", key, &self.owner]).await?,
                &[0],
            ),
            (Proto::Redisson, Mode::Exclusive) => return self.redisson_unlock(&[k]).await,
            // 0 while other readers hold the lock, 1 when the last one left.
            (Proto::Redisson, Mode::Read) => (
                "redisson read release script",
                self.conn
                    .cmd(&[
                        b"EVALSHA",
                        sh.scripts.read_release.as_bytes(),
                        b"4",
                        key,
                        &sh.channels[k],
                        &read_lease_prefix(key, &self.owner),
                        &tagged_name(key),
                        b"0",
                        &self.owner,
                    ])
                    .await?,
                &[0, 1],
            ),
            (Proto::Redisson, Mode::Write) => (
                "redisson write release script",
                self.conn
                    .cmd(&[
                        b"EVALSHA",
                        sh.scripts.write_release.as_bytes(),
                        b"2",
                        key,
                        &sh.channels[k],
                        b"1",
                        &sh.lease,
                        &self.owner_write,
                    ])
                    .await?,
                &[1],
            ),
            (Proto::Spin(_), _) => (
                "compare-and-delete script",
                self.conn
                    .cmd(&[
                        b"EVALSHA",
                        sh.scripts.cad.as_bytes(),
                        b"1",
                        key,
                        &self.owner,
                    ])
                    .await?,
                &[1],
            ),
            (Proto::Raw, _) => ("DEL", self.conn.cmd(&[b"DEL", key]).await?, &[1]),
            // The holder popped the only token, so the list is empty: 1 even
            // when RPUSH serves a blocked BLPOP at once.
            (Proto::Blpop, _) => (
                "RPUSH",
                self.conn.cmd(&[b"RPUSH", key, BLPOP_TOKEN]).await?,
                &[1],
            ),
            // 1 whether the token goes to a waiter or is freed.
            (Proto::Floor, _) => (
                "FLOOR.RELEASE",
                self.conn.cmd(&[b"FLOOR.RELEASE", key]).await?,
                &[1],
            ),
            (Proto::RedissonClient, _) => {
                return Err(io::Error::other(
                    "the real Redisson client runs in its own driver, not as a generator task",
                ))
            }
        };
        if !matches!(r, Reply::Int(n) if want.contains(&n)) {
            return Err(unexpected(what, &r));
        }
        Ok(())
    }

    /// Checks what a critical section saw of key `k`'s data: a read
    /// (`write` false) exactly the writes completed so far, a write the
    /// next number. False (and a violation recorded) otherwise.
    pub(super) fn check_data(
        &self,
        data: &Guarded,
        k: usize,
        what: &str,
        seen: i64,
        write: bool,
    ) -> bool {
        let sh = &self.shared;
        let written = &data.written[k];
        let want = written.get() + i64::from(write);
        let ok = seen == want;
        if !ok {
            sh.violations.note(format!(
                "{}: {} of {}'s data by client {} saw {seen}, {} write(s) had completed",
                sh.proto.name(),
                what,
                String::from_utf8_lossy(&sh.keys[k]),
                self.id,
                written.get()
            ));
        }
        if write {
            written.set(seen);
        }
        ok
    }

    /// A FENCE grant's token: it must be above the key's previous one. The
    /// previous holder's grant was read before its release was sent, and
    /// this grant came after that release, so the order seen here is the
    /// server's.
    fn granted_token(&self, k: usize, token: i64) {
        let sh = &self.shared;
        let last = &sh.tokens[k];
        if token <= last.get() {
            sh.violations.note(format!(
                "{}: {} granted to client {} with token {token}, not above the previous {}",
                sh.proto.name(),
                String::from_utf8_lossy(&sh.keys[k]),
                self.id,
                last.get()
            ));
        }
        last.set(token);
    }
}
