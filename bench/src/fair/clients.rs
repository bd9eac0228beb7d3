//! S17's two kinds of client: the module's caller (`LOCK.ACQUIRE ... BLOCK
//! 0` / `LOCK.RELEASE`) and Redisson's `RFairLock` client (our copies of its
//! scripts by `EVALSHA`, its own channel on its own pub/sub connection, the
//! unlock latch), each looping acquire, critical section, release until the
//! run stops or the drain runs out.

use std::io;
use std::rc::Rc;
use std::time::{Duration, Instant};

use tokio::time::sleep_until;

use super::cells::Kind;
use super::shared::{Names, Shared};
use crate::conn::{unexpected, Conn, Reply};
use crate::load::owner_id;

/// Redisson's fair acquire (`tryLock`): KEYS lock, queue, timeouts; ARGV
/// lease, owner, wait, now, 'ttl' | 'bool'.
pub const FAIR_ACQUIRE: &str = include_str!("../../../scripts/redisson-fair-acquire.lua");
/// Redisson's fair unlock: KEYS lock, queue, timeouts, channel prefix,
/// latch; ARGV '0', lease, owner, now, publish command, latch PX.
pub const FAIR_RELEASE: &str = include_str!("../../../scripts/redisson-fair-release.lua");
/// Redisson's acquireFailed: KEYS queue, timeouts; ARGV owner, wait.
pub const FAIR_ACQUIRE_FAILED: &str =
    include_str!("../../../scripts/redisson-fair-acquire-failed.lua");

pub(super) const LEASE_MS: &str = "30000";
/// Redisson's `fairLockWaitTimeout` default, the wait `lock()` queues with.
pub(super) const WAIT_MS: &str = "300000";
/// The unlock latch's PX (Redisson: the response timeout, 3 s by default;
/// DEL'd right after the reply anyway).
const LATCH_PX: &str = "3000";

fn unix_ms() -> Vec<u8> {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
        .to_string()
        .into_bytes()
}

pub(super) async fn module_client(
    id: usize,
    sh: Rc<Shared>,
    names: Rc<Names>,
    mut conn: Conn,
) -> io::Result<()> {
    let owner = owner_id(id, 0);
    loop {
        if sh.stopping.get() {
            return Ok(());
        }
        let t0 = Instant::now();
        sh.wait_start[id].set(Some(t0));
        conn.push(&[
            b"LOCK.ACQUIRE",
            &names.lock,
            &owner,
            b"PX",
            LEASE_MS.as_bytes(),
            b"BLOCK",
            b"0",
        ]);
        conn.flush().await?;
        let r = tokio::select! {
            r = conn.read() => r?,
            _ = sh.drain_over() => {
                // Closing the connection takes it out of the queue.
                sh.stuck[Kind::Module.index()].set(sh.stuck[0].get() + 1);
                return Ok(());
            }
        };
        if r != Reply::Int(1) {
            return Err(unexpected("LOCK.ACQUIRE ... BLOCK 0", &r));
        }
        sh.granted(id, t0);
        sh.critical(id, &names, &mut conn).await?;
        sh.releasing(id);
        let r = conn.cmd(&[b"LOCK.RELEASE", &names.lock, &owner]).await?;
        if r != Reply::Int(0) {
            return Err(unexpected("LOCK.RELEASE", &r));
        }
    }
}

pub(super) struct FairClient {
    pub(super) id: usize,
    pub(super) sh: Rc<Shared>,
    pub(super) names: Rc<Names>,
    pub(super) conn: Conn,
    pub(super) sub: Conn,
    pub(super) owner: Vec<u8>,
    pub(super) channel: Vec<u8>,
    pub(super) unlocks: u64,
}

impl FairClient {
    /// One acquire script: None = granted, else the ttl.
    async fn attempt(&mut self) -> io::Result<Option<i64>> {
        let n = &self.names;
        self.sh.count(&self.sh.kinds[1].evals);
        let now = unix_ms();
        let r = self
            .conn
            .cmd(&[
                b"EVALSHA",
                &n.acquire_sha,
                b"3",
                &n.lock,
                &n.queue,
                &n.timeouts,
                LEASE_MS.as_bytes(),
                &self.owner,
                WAIT_MS.as_bytes(),
                &now,
                b"ttl",
            ])
            .await?;
        match r {
            Reply::Nil => Ok(None),
            Reply::Int(ttl) => {
                if ttl <= 0 {
                    self.sh.count(&self.sh.kinds[1].zero_ttls);
                }
                Ok(Some(ttl))
            }
            other => Err(unexpected("the fair acquire script", &other)),
        }
    }

    /// SUBSCRIBE to the own channel and wait for its confirmation (skipping
    /// what an earlier subscription left: its UNSUBSCRIBE's answer, late
    /// messages).
    async fn subscribe(&mut self) -> io::Result<()> {
        self.sub.push(&[b"SUBSCRIBE", &self.channel]);
        self.sub.flush().await?;
        loop {
            let r = self.sub.read().await?;
            let Reply::Array(items) = &r else {
                return Err(unexpected("SUBSCRIBE", &r));
            };
            if let [Reply::BulkString(kind), Reply::BulkString(ch), _] = items.as_slice() {
                if kind == b"subscribe" && *ch == self.channel {
                    return Ok(());
                }
            }
        }
    }

    async fn unsubscribe(&mut self) -> io::Result<()> {
        self.sub.push(&[b"UNSUBSCRIBE", &self.channel]);
        self.sub.flush().await
    }

    /// A message on the own channel, when one is there already.
    async fn take_message(&mut self) -> io::Result<bool> {
        match tokio::time::timeout(Duration::ZERO, self.sub.read()).await {
            Ok(r) => {
                r?;
                Ok(true)
            }
            Err(_) => Ok(false),
        }
    }

    /// `lock()`: true when granted, false when the drain ran out (the
    /// client then left the queue by acquireFailed).
    async fn lock(&mut self) -> io::Result<bool> {
        if self.attempt().await?.is_none() {
            return Ok(true);
        }
        self.subscribe().await?;
        let granted = loop {
            let Some(ttl) = self.attempt().await? else {
                break true;
            };
            if self.sh.drain_expired() {
                break false;
            }
            if ttl == 0 {
                // Redisson's tryAcquire(0): a message already there is
                // taken, none is waited for.
                if self.take_message().await? {
                    self.sh.count(&self.sh.kinds[1].msg_wakes);
                }
                continue;
            }
            let sh = self.sh.clone();
            let until =
                (ttl > 0).then(|| tokio::time::Instant::now() + Duration::from_millis(ttl as u64));
            let sleep_ttl = async {
                match until {
                    Some(t) => sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                r = self.sub.read() => {
                    r?;
                    sh.count(&sh.kinds[1].msg_wakes);
                }
                _ = sleep_ttl => sh.count(&sh.kinds[1].ttl_wakes),
                _ = sh.drain_over() => break false,
            }
        };
        self.unsubscribe().await?;
        if !granted {
            let n = &self.names;
            let r = self
                .conn
                .cmd(&[
                    b"EVALSHA",
                    &n.failed_sha,
                    b"2",
                    &n.queue,
                    &n.timeouts,
                    &self.owner,
                    WAIT_MS.as_bytes(),
                ])
                .await?;
            if r != Reply::Nil {
                return Err(unexpected("the fair acquireFailed script", &r));
            }
        }
        Ok(granted)
    }

    async fn unlock(&mut self) -> io::Result<()> {
        self.unlocks += 1;
        let n = &self.names;
        let latch = [
            n.latch_prefix.as_slice(),
            b":",
            &self.owner,
            b"-",
            self.unlocks.to_string().as_bytes(),
        ]
        .concat();
        let now = unix_ms();
        let r = self
            .conn
            .cmd(&[
                b"EVALSHA",
                &n.release_sha,
                b"5",
                &n.lock,
                &n.queue,
                &n.timeouts,
                &n.channel,
                &latch,
                b"0",
                LEASE_MS.as_bytes(),
                &self.owner,
                &now,
                b"publish",
                LATCH_PX.as_bytes(),
            ])
            .await?;
        if r != Reply::Int(1) {
            return Err(unexpected("the fair release script", &r));
        }
        let r = self.conn.cmd(&[b"DEL", &latch]).await?;
        if r != Reply::Int(1) {
            return Err(unexpected("DEL of the unlock latch", &r));
        }
        Ok(())
    }

    pub(super) async fn run(mut self) -> io::Result<()> {
        loop {
            if self.sh.stopping.get() {
                return Ok(());
            }
            let t0 = Instant::now();
            self.sh.wait_start[self.id].set(Some(t0));
            if !self.lock().await? {
                self.sh.stuck[Kind::Fair.index()].set(self.sh.stuck[1].get() + 1);
                return Ok(());
            }
            self.sh.granted(self.id, t0);
            self.sh
                .critical(self.id, &self.names, &mut self.conn)
                .await?;
            self.sh.releasing(self.id);
            self.unlock().await?;
        }
    }
}
