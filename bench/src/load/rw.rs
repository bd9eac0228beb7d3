//! Read-write runs (S7): a grant counted into the key's readers and
//! writers (a writer beside anyone, or a reader beside a writer, is a
//! violation) with its wait recorded by kind, and the critical section (a
//! reader `GET`s the guarded data, a writer `INCR`s it).

use std::io;
use std::sync::atomic::Ordering;

use super::client::Client;
use super::shared::{Guarded, Mode, Rw, READER, WRITER};
use crate::conn::{unexpected, Reply, ReplyExt};
use crate::stats;

impl Client {
    /// A read-write grant: counts this holder in, checks that no writer
    /// overlaps anyone, and records the figures of its kind.
    pub(super) fn granted_rw(&self, rw: &Rw, k: usize, mode: Mode, wait_us: u64) {
        let sh = &self.shared;
        let delta = if mode == Mode::Write { WRITER } else { READER };
        let before = rw.active[k].fetch_add(delta, Ordering::SeqCst);
        let (readers, writers) = (before & (WRITER - 1), before >> 32);
        if writers != 0 || (mode == Mode::Write && readers != 0) {
            rw.violations.set(rw.violations.get() + 1);
            sh.violations.note(format!(
                "{}: {} {} granted to client {} while {readers} reader(s) and {writers} writer(s) hold it",
                sh.proto.name(),
                String::from_utf8_lossy(&sh.keys[k]),
                if mode == Mode::Write { "write" } else { "read" },
                self.id,
            ));
        }
        if !sh.measuring() {
            return;
        }
        if mode == Mode::Write {
            rw.writes.set(rw.writes.get() + 1);
            stats::record(&mut rw.write_hist.borrow_mut(), wait_us);
        } else {
            rw.reads.set(rw.reads.get() + 1);
            stats::record(&mut rw.read_hist.borrow_mut(), wait_us);
            let now = readers + 1;
            rw.readers_sum.set(rw.readers_sum.get() + now);
            rw.readers_max.set(rw.readers_max.get().max(now));
        }
    }

    /// The read-write critical section: a reader `GET`s the lock's data key,
    /// a writer `INCR`s it. A reader must see exactly the writes completed
    /// so far, a writer the next number: anything else means a writer ran
    /// beside another holder in the server.
    pub(super) async fn critical_rw(
        &mut self,
        rw: &Rw,
        data: &Guarded,
        k: usize,
        mode: Mode,
    ) -> io::Result<()> {
        let key = &data.keys[k];
        let (what, r) = if mode == Mode::Write {
            ("INCR", self.conn.cmd(&[b"INCR", key]).await?)
        } else {
            ("GET", self.conn.cmd(&[b"GET", key]).await?)
        };
        let seen = match &r {
            Reply::Nil => 0,
            _ => r.int().ok_or_else(|| unexpected(what, &r))?,
        };
        if !self.check_data(data, k, what, seen, mode == Mode::Write) {
            rw.violations.set(rw.violations.get() + 1);
        }
        Ok(())
    }
}
