//! One run's state, shared by its clients (one thread, so `Cell`s): the
//! phase (warm-up, measured window, drain), the keys and their channels,
//! the holder flags the mutual-exclusion check reads, the waits and counts
//! measured, and what a read-write, multi-lock, fenced or semaphore run
//! keeps besides.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

use hdrhistogram::Histogram;
use tokio::sync::Notify;

use super::scripts::Scripts;
use super::spec::{MultiSpec, Proto};
use crate::report::Findings;

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    Warmup,
    Measure,
    Drain,
}

/// What a cycle takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    Exclusive,
    Read,
    Write,
}

/// `Rw::active`: one reader, one writer.
pub(super) const READER: u64 = 1;
pub(super) const WRITER: u64 = 1 << 32;

/// A read-write run's state.
pub(super) struct Rw {
    pub(super) read_fraction: f64,
    /// Per key: readers holding it (low 32 bits) and writers (high 32 bits),
    /// added to when a grant arrives and taken from before the release is
    /// sent.
    pub(super) active: Vec<AtomicU64>,
    pub(super) read_hist: RefCell<Histogram<u64>>,
    pub(super) write_hist: RefCell<Histogram<u64>>,
    pub(super) reads: Cell<u64>,
    pub(super) writes: Cell<u64>,
    /// Sum and highest of the readers holding at read grants.
    pub(super) readers_sum: Cell<u64>,
    pub(super) readers_max: Cell<u64>,
    pub(super) violations: Cell<u64>,
}

/// Per key: the data the lock guards (`<key>:data`, a counter INCRed by
/// every write hold) and the writes completed so far.
pub(super) struct Guarded {
    pub(super) keys: Vec<Vec<u8>>,
    pub(super) written: Vec<Cell<i64>>,
}

/// A multi-lock run's state.
pub(super) struct Multi {
    pub(super) spec: MultiSpec,
    pub(super) grant_calls: Cell<u64>,
    pub(super) gave_up: Cell<u64>,
}

pub(super) struct Shared {
    pub(super) proto: Proto,
    pub(super) phase: Cell<Phase>,
    pub(super) stopping: Cell<bool>,
    pub(super) stop: Notify,
    pub(super) keys: Vec<Vec<u8>>,
    pub(super) channels: Vec<Vec<u8>>,
    pub(super) channel_index: HashMap<Vec<u8>, usize>,
    pub(super) holders: Vec<Cell<u32>>,
    pub(super) hist: RefCell<Histogram<u64>>,
    pub(super) counts: Vec<Cell<u64>>,
    pub(super) wait_start: Vec<Cell<Option<(Instant, Mode)>>>,
    pub(super) violations: Findings,
    pub(super) errors: Findings,
    pub(super) failed_tries: Cell<u64>,
    pub(super) timeouts: Cell<u64>,
    pub(super) lease: Vec<u8>,
    pub(super) lease_ms: u64,
    pub(super) block: Vec<u8>,
    /// `block` in seconds (BLPOP's timeout), e.g. "10" or "0.5".
    pub(super) block_secs: Vec<u8>,
    pub(super) scripts: Scripts,
    pub(super) rw: Option<Rw>,
    pub(super) multi: Option<Multi>,
    /// Read-write and multi-lock runs.
    pub(super) data: Option<Guarded>,
    /// module-fence runs: per key, the last fencing token granted (0 =
    /// none yet).
    pub(super) tokens: Vec<Cell<i64>>,
    /// Semaphore runs: the permits (`holders` then counts the clients
    /// holding one).
    pub(super) sem: Option<usize>,
    /// Semaphore runs: each key's `{name}:timeout` (Redisson's sorted set
    /// of held permits).
    pub(super) sem_timeouts: Vec<Vec<u8>>,
}

impl Shared {
    pub(super) fn measuring(&self) -> bool {
        self.phase.get() == Phase::Measure
    }

    pub(super) fn failed_try(&self) {
        self.count(&self.failed_tries);
    }

    /// Adds one to a counter of the measured window.
    pub(super) fn count(&self, c: &Cell<u64>) {
        if self.measuring() {
            c.set(c.get() + 1);
        }
    }

    /// The keys' names, for messages.
    pub(super) fn names(&self, ks: &[usize]) -> String {
        ks.iter()
            .map(|&k| String::from_utf8_lossy(&self.keys[k]))
            .collect::<Vec<_>>()
            .join(",")
    }
}
