//! One S17 run's state, shared by its clients: the holder slot both kinds
//! take (the mutual-exclusion check), the guarded counter's sections, the
//! waits and counts of the measured window by kind, the drain; the names of
//! the run's lock (its queue, timeout set, channels, the scripts' SHA1s).

use std::cell::{Cell, RefCell};
use std::io;
use std::time::Instant;

use hdrhistogram::Histogram;
use tokio::sync::Notify;
use tokio::time::sleep_until;

use super::cells::Kind;
use crate::conn::{unexpected, Conn, Reply};
use crate::report::Findings;
use crate::stats;

/// Per kind, the measured window's figures.
pub(super) struct KindStats {
    pub(super) hist: RefCell<Histogram<u64>>,
    pub(super) grants: Cell<u64>,
    /// Fair: acquire scripts sent.
    pub(super) evals: Cell<u64>,
    /// Fair: acquire scripts that answered a ttl of 0 or less (retry at once
    /// or wait for a message only).
    pub(super) zero_ttls: Cell<u64>,
    /// Fair: waits ended by a message on the own channel, by the ttl.
    pub(super) msg_wakes: Cell<u64>,
    pub(super) ttl_wakes: Cell<u64>,
}

impl KindStats {
    pub(super) fn new() -> KindStats {
        KindStats {
            hist: RefCell::new(stats::histogram()),
            grants: Cell::new(0),
            evals: Cell::new(0),
            zero_ttls: Cell::new(0),
            msg_wakes: Cell::new(0),
            ttl_wakes: Cell::new(0),
        }
    }
}

/// Names of the run's lock.
pub(super) struct Names {
    pub(super) lock: Vec<u8>,
    pub(super) queue: Vec<u8>,
    pub(super) timeouts: Vec<u8>,
    /// `redisson_lock__channel:{name}` (the release script adds `:<owner>`).
    pub(super) channel: Vec<u8>,
    /// `redisson_unlock_latch:{name}` (the client adds `:<request id>`).
    pub(super) latch_prefix: Vec<u8>,
    /// The guarded counter, `{name}:data`.
    pub(super) data: Vec<u8>,
    pub(super) acquire_sha: Vec<u8>,
    pub(super) release_sha: Vec<u8>,
    pub(super) failed_sha: Vec<u8>,
}

pub(super) struct Shared {
    pub(super) measuring: Cell<bool>,
    pub(super) stopping: Cell<bool>,
    pub(super) drain_deadline: Cell<Option<tokio::time::Instant>>,
    pub(super) stop: Notify,
    /// The client holding the lock, as the generator sees it.
    pub(super) holder: Cell<Option<usize>>,
    pub(super) kind_of: Vec<Kind>,
    pub(super) counts: Vec<Cell<u64>>,
    pub(super) wait_start: Vec<Cell<Option<Instant>>>,
    pub(super) all_hist: RefCell<Histogram<u64>>,
    pub(super) kinds: [KindStats; 2],
    pub(super) violations: Findings,
    pub(super) errors: Findings,
    /// Clients still waiting when the drain ran out.
    pub(super) stuck: [Cell<u64>; 2],
    /// Critical sections completed (the guarded counter's value).
    pub(super) done: Cell<i64>,
}

impl Shared {
    /// The critical section of client `id`: one `INCR` of the guarded
    /// counter, which must answer the sections completed so far + 1.
    pub(super) async fn critical(
        &self,
        id: usize,
        names: &Names,
        conn: &mut Conn,
    ) -> io::Result<()> {
        let r = conn.cmd(&[b"INCR", &names.data]).await?;
        let want = self.done.get() + 1;
        match r {
            Reply::Int(v) => {
                if v != want {
                    self.violations.note(format!(
                        "{} client {id}: INCR of the guarded counter answered {v}, {} sections completed before",
                        self.kind_of[id].name(),
                        want - 1
                    ));
                }
                self.done.set(v.max(want));
                Ok(())
            }
            other => Err(unexpected("INCR of the guarded counter", &other)),
        }
    }

    pub(super) fn kind(&self, id: usize) -> &KindStats {
        &self.kinds[self.kind_of[id].index()]
    }

    pub(super) fn count(&self, c: &Cell<u64>) {
        if self.measuring.get() {
            c.set(c.get() + 1);
        }
    }

    /// A grant reached client `id`, whose wait began at `t0`.
    pub(super) fn granted(&self, id: usize, t0: Instant) {
        self.wait_start[id].set(None);
        if let Some(other) = self.holder.get() {
            self.violations.note(format!(
                "{} client {id} granted while {} client {other} holds the lock",
                self.kind_of[id].name(),
                self.kind_of[other].name()
            ));
        }
        self.holder.set(Some(id));
        if self.measuring.get() {
            let us = t0.elapsed().as_micros() as u64;
            stats::record(&mut self.kind(id).hist.borrow_mut(), us);
            stats::record(&mut self.all_hist.borrow_mut(), us);
            self.count(&self.kind(id).grants);
            self.count(&self.counts[id]);
        }
    }

    /// Client `id` is about to send its release.
    pub(super) fn releasing(&self, id: usize) {
        if self.holder.get() == Some(id) {
            self.holder.set(None);
        }
    }

    /// Resolves once the window has closed and the drain time is up.
    pub(super) async fn drain_over(&self) {
        while !self.stopping.get() {
            self.stop.notified().await;
        }
        if let Some(d) = self.drain_deadline.get() {
            sleep_until(d).await;
        }
    }

    pub(super) fn drain_expired(&self) -> bool {
        self.stopping.get()
            && self
                .drain_deadline
                .get()
                .is_some_and(|d| tokio::time::Instant::now() >= d)
    }
}
