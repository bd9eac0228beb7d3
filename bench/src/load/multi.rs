//! Multi-lock runs (S8): a client's multi-lock on several keys, taken with
//! the protocol's waiting strategy (the module's `LOCK.MACQUIRE`, sent
//! again after a BLOCK timeout; Redisson's `RedissonMultiLock.lock()`, its
//! `tryLock` again after each one that gave up), released
//! (`LOCK.MRELEASE`, or every key's unlock script sent together), and its
//! critical section (every key's data `INCR`ed in one round trip).

use std::io;
use std::time::Instant;

use super::client::{expired, Client, Outcome};
use super::shared::{Guarded, Mode, Multi};
use super::spec::redisson_multi_wait;
use crate::conn::{unexpected, Reply, ReplyExt};

/// `name numkeys key.. owner` of the module's multi-lock commands.
fn multi_args<'a>(
    name: &'a [u8],
    numkeys: &'a [u8],
    keys: &'a [Vec<u8>],
    ks: &[usize],
    owner: &'a [u8],
) -> Vec<&'a [u8]> {
    let mut args = vec![name, numkeys];
    args.extend(ks.iter().map(|&k| keys[k].as_slice()));
    args.push(owner);
    args
}

/// An array of `n` integers, each `v` (a multi-lock command's answer).
fn all_ints(r: &Reply, n: usize, v: i64) -> bool {
    matches!(r, Reply::Array(items) if items.len() == n && items.iter().all(|i| *i == Reply::Int(v)))
}

impl Client {
    /// A multi-lock on the keys `ks`, in that order, taken with the
    /// protocol's waiting strategy until granted (or stopped): the module's
    /// `LOCK.MACQUIRE` again after a BLOCK timeout, Redisson's
    /// `RedissonMultiLock.lock()`: `tryLock` with a wait of 1.5 s per key
    /// again after each one that gave up.
    pub(super) async fn acquire_multi(
        &mut self,
        multi: &Multi,
        ks: &[usize],
    ) -> io::Result<Outcome> {
        let sh = self.shared.clone();
        loop {
            let got = if sh.proto.is_module() {
                self.macquire(multi, ks).await?
            } else {
                self.redisson_try_multi(multi, ks).await?
            };
            if !matches!(got, Outcome::TimedOut) {
                return Ok(got);
            }
            sh.count(&multi.gave_up);
            if sh.stopping.get() {
                return Ok(Outcome::Stopped);
            }
        }
    }

    /// `LOCK.MACQUIRE n key.. owner PX lease BLOCK wait`: every key's hold
    /// count (1) when granted, nil when the BLOCK time ran out.
    async fn macquire(&mut self, multi: &Multi, ks: &[usize]) -> io::Result<Outcome> {
        let sh = self.shared.clone();
        let n = ks.len().to_string();
        let mut args = multi_args(b"LOCK.MACQUIRE", n.as_bytes(), &sh.keys, ks, &self.owner);
        args.extend([b"PX".as_slice(), &sh.lease, b"BLOCK", &sh.block]);
        args.extend(sh.proto.acquire_flags());
        let r = self.conn.cmd(&args).await?;
        if r == Reply::Nil {
            sh.timeouts.set(sh.timeouts.get() + 1);
            return Ok(Outcome::TimedOut);
        }
        if !all_ints(&r, ks.len(), 1) {
            return Err(unexpected("LOCK.MACQUIRE", &r));
        }
        sh.count(&multi.grant_calls);
        Ok(Outcome::Granted)
    }

    /// `RedissonMultiLock.tryLock(wait)` (lease left to the watchdog): the
    /// locks one by one in the caller's order, each with `RLock.tryLock`
    /// for the wait time left; time up after any step (the last grant too)
    /// unlocks what is taken and gives up. (Redisson also starts over from
    /// the first lock when one is not acquired, but a lock's `tryLock` for
    /// the time left fails only once that time is up, so it then gives up.)
    async fn redisson_try_multi(&mut self, multi: &Multi, ks: &[usize]) -> io::Result<Outcome> {
        let sh = self.shared.clone();
        let deadline = Instant::now() + redisson_multi_wait(multi.spec.keys_per_lock);
        for (i, &k) in ks.iter().enumerate() {
            let taken = match self
                .redisson_lock(k, Mode::Exclusive, Some(deadline))
                .await?
            {
                Outcome::Granted => {
                    sh.count(&multi.grant_calls);
                    i + 1
                }
                Outcome::Stopped => return Ok(Outcome::Stopped),
                Outcome::TimedOut => i,
            };
            if expired(Some(deadline)) {
                self.redisson_unlock(&ks[..taken]).await?;
                return Ok(Outcome::TimedOut);
            }
        }
        Ok(Outcome::Granted)
    }

    /// Releases a multi-lock: `LOCK.MRELEASE n key.. owner` (every key's
    /// holds left: 0), or Redisson's unlock of every key, sent together.
    pub(super) async fn release_multi(&mut self, ks: &[usize]) -> io::Result<()> {
        if !self.shared.proto.is_module() {
            return self.redisson_unlock(ks).await;
        }
        let sh = self.shared.clone();
        let n = ks.len().to_string();
        let args = multi_args(b"LOCK.MRELEASE", n.as_bytes(), &sh.keys, ks, &self.owner);
        let r = self.conn.cmd(&args).await?;
        if !all_ints(&r, ks.len(), 0) {
            return Err(unexpected("LOCK.MRELEASE", &r));
        }
        Ok(())
    }

    /// The multi-lock critical section: one round trip that `INCR`s the data
    /// of every key held (pipelined); each must answer the next number.
    pub(super) async fn critical_multi(&mut self, data: &Guarded, ks: &[usize]) -> io::Result<()> {
        for &k in ks {
            self.conn.push(&[b"INCR", &data.keys[k]]);
        }
        self.conn.flush().await?;
        for &k in ks {
            let r = self.conn.read().await?;
            let seen = r.int().ok_or_else(|| unexpected("INCR", &r))?;
            self.check_data(data, k, "INCR", seen, true);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multi_lock_answers() {
        let ones = Reply::Array(vec![Reply::Int(1); 3]);
        assert!(all_ints(&ones, 3, 1));
        assert!(!all_ints(&ones, 2, 1));
        assert!(!all_ints(&ones, 3, 0));
        assert!(!all_ints(&Reply::Nil, 3, 1));
    }
}
