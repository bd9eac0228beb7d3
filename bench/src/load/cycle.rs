//! One client's closed loop: draw the cycle's keys, acquire (the
//! protocol's waiting strategy), check the grant against the holders the
//! generator has seen, count it and its wait in the measured window, run
//! the critical section, clear the holder and release; until the run
//! stops.

use std::io;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::client::{Client, Outcome};
use super::shared::{Mode, READER, WRITER};
use super::spec::{KeyOrder, MultiSpec};
use crate::stats;

/// The keys of a cycle among `n`: one at random, or for a multi-lock
/// `keys_per_lock` distinct ones in the order drawn (every ordered choice
/// alike), sorted for `KeyOrder::Sorted`.
fn pick_keys(rng: &mut stats::Rng, n: usize, multi: Option<&MultiSpec>, ks: &mut Vec<usize>) {
    ks.clear();
    match multi {
        None => ks.push(if n == 1 { 0 } else { rng.below(n) }),
        Some(m) => {
            while ks.len() < m.keys_per_lock {
                let k = rng.below(n);
                if !ks.contains(&k) {
                    ks.push(k);
                }
            }
            if m.order == KeyOrder::Sorted {
                ks.sort_unstable();
            }
        }
    }
}

impl Client {
    pub(super) async fn run(mut self, seed: u64) {
        let sh = self.shared.clone();
        let id = self.id;
        let fail = |what: &str, ks: &[usize], e: io::Error| {
            sh.errors.note(format!(
                "{} client {id} {what} {}: {e}",
                sh.proto.name(),
                sh.names(ks)
            ));
        };
        let mut rng = stats::Rng::new(seed);
        let mut ks: Vec<usize> = Vec::new();
        loop {
            if sh.stopping.get() {
                break;
            }
            let mode = match &sh.rw {
                None => Mode::Exclusive,
                Some(rw) if rng.chance(rw.read_fraction) => Mode::Read,
                Some(_) => Mode::Write,
            };
            pick_keys(
                &mut rng,
                sh.keys.len(),
                sh.multi.as_ref().map(|m| &m.spec),
                &mut ks,
            );
            let k = ks[0];
            let t0 = Instant::now();
            sh.wait_start[id].set(Some((t0, mode)));
            let got = match &sh.multi {
                Some(multi) => self.acquire_multi(multi, &ks).await,
                None => self.acquire(k, mode).await,
            };
            sh.wait_start[id].set(None);
            match got {
                Ok(Outcome::Granted) => {}
                Ok(Outcome::Stopped) => break,
                Ok(Outcome::TimedOut) => {
                    fail("acquire", &ks, io::Error::other("gave up"));
                    break;
                }
                Err(e) => {
                    fail("acquire", &ks, e);
                    break;
                }
            }
            let t1 = Instant::now();
            let wait_us = (t1 - t0).as_micros() as u64;
            if let Some(rw) = &sh.rw {
                self.granted_rw(rw, k, mode, wait_us);
            } else if let Some(permits) = sh.sem {
                // Holders of the semaphore seen by the generator (an
                // overlap of holds that reach it, as the lock's flag).
                let holding = &sh.holders[k];
                if holding.get() as usize >= permits {
                    sh.violations.note(format!(
                        "{}: a permit of {} granted to client {id} while {} clients hold its {permits}",
                        sh.proto.name(),
                        String::from_utf8_lossy(&sh.keys[k]),
                        holding.get()
                    ));
                }
                holding.set(holding.get() + 1);
            } else {
                for &k in &ks {
                    let holder = &sh.holders[k];
                    if holder.get() != 0 {
                        sh.violations.note(format!(
                            "{}: {} granted to client {id} (with {}) while client {} holds it",
                            sh.proto.name(),
                            String::from_utf8_lossy(&sh.keys[k]),
                            sh.names(&ks),
                            holder.get() - 1
                        ));
                    }
                    holder.set(id as u32 + 1);
                }
            }
            if sh.measuring() {
                let c = &sh.counts[id];
                c.set(c.get() + 1);
                stats::record(&mut sh.hist.borrow_mut(), wait_us);
            }
            // Exclusive: empty critical section. Read-write and multi-lock:
            // one round trip on the data the lock guards, so that a holder
            // stays counted while other clients' replies are handled (with
            // nothing in between, one task would count itself in and out in
            // one poll and could never see another holder). Cleared before
            // the release is sent: the release itself may hand the lock on.
            let critical = match (&sh.data, &sh.rw) {
                (Some(data), Some(rw)) => self.critical_rw(rw, data, k, mode).await,
                (Some(data), None) => self.critical_multi(data, &ks).await,
                (None, _) => Ok(()),
            };
            if let Err(e) = critical {
                fail("critical section on", &ks, e);
                break;
            }
            match (&sh.rw, mode) {
                (None, _) if sh.sem.is_some() => {
                    sh.holders[k].set(sh.holders[k].get().saturating_sub(1));
                }
                (None, _) => {
                    for &k in &ks {
                        sh.holders[k].set(0);
                    }
                }
                (Some(rw), Mode::Write) => {
                    rw.active[k].fetch_sub(WRITER, Ordering::SeqCst);
                }
                (Some(rw), _) => {
                    rw.active[k].fetch_sub(READER, Ordering::SeqCst);
                }
            }
            let released = if sh.multi.is_some() {
                self.release_multi(&ks).await
            } else {
                self.release(k, mode).await
            };
            if let Err(e) = released {
                fail("release", &ks, e);
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multi_lock_keys_are_distinct_and_ordered_as_asked() {
        let mut rng = stats::Rng::new(3);
        let mut ks = Vec::new();
        let mut unsorted = 0;
        for order in [KeyOrder::Random, KeyOrder::Sorted] {
            let m = MultiSpec {
                keys_per_lock: 3,
                order,
            };
            for _ in 0..1000 {
                pick_keys(&mut rng, 8, Some(&m), &mut ks);
                assert_eq!(ks.len(), 3);
                assert!(ks.iter().all(|&k| k < 8));
                assert!(ks[0] != ks[1] && ks[0] != ks[2] && ks[1] != ks[2], "{ks:?}");
                let sorted = ks.windows(2).all(|w| w[0] < w[1]);
                match order {
                    KeyOrder::Sorted => assert!(sorted, "{ks:?}"),
                    KeyOrder::Random => unsorted += usize::from(!sorted),
                }
            }
        }
        // 5 of the 6 orders of 3 keys are not ascending.
        assert!((780..880).contains(&unsorted), "{unsorted}");
        pick_keys(&mut rng, 1, None, &mut ks);
        assert_eq!(ks, [0]);
    }
}
