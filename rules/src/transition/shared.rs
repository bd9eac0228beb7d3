//! The read-write lock's transitions (Redisson's RReadWriteLock; the layout
//! and who may take which side are in [`crate::read_write`]): acquiring a
//! side, releasing it (downgrade included), renewing every hold of an owner,
//! force-releasing, and dropping readers whose leases all ran out.

use super::{Acquisition, Change, Transition};
use crate::error::LockError;
use crate::queue::Fifo;
use crate::read_write::{
    check_owner, lease_keys, write_field, HoldAdmission, ReadWriteHolds, Reader, MODE_FIELD,
    READ_RELEASED, WRITE_RELEASED,
};
use crate::request::{FieldName, Queued, Request, Side};
use crate::state::LockState;

impl<T: Queued> Transition<T> {
    /// Drops readers whose every hold's lease ran out; the hash follows
    /// the leases left (and goes if none is).
    pub(crate) fn drop_expired_readers(&mut self) {
        let LockState::Shared(rw) = &mut self.state else {
            return;
        };
        if !rw.readers.iter().any(Reader::expired) {
            return;
        }
        let (gone, kept): (Vec<Reader>, Vec<Reader>) = std::mem::take(&mut rw.readers)
            .into_iter()
            .partition(Reader::expired);
        rw.readers = kept;
        if rw.is_free() {
            self.state = LockState::Free;
            self.changes.push(Change::Delete);
            self.changes.push(Change::NotifyReadWrite(READ_RELEASED));
            return;
        }
        for reader in gone {
            self.changes.push(Change::RemoveField {
                field: reader.owner,
            });
        }
        self.follow_leases();
    }

    /// LOCK.RACQUIRE / LOCK.WACQUIRE, after the queue was settled.
    pub(crate) fn acquire_shared(
        &mut self,
        queue: &Fifo<T>,
        req: &Request,
        kind: Side,
        may_wait: bool,
    ) -> Result<Acquisition, LockError> {
        check_owner(&req.owner)?;
        let admission = match &self.state {
            LockState::Free => HoldAdmission::Fresh,
            LockState::Shared(rw) => rw.admission(kind, &req.owner),
            LockState::Held { .. } => return Err(LockError::holds_exclusive_lock()),
        };
        match admission {
            HoldAdmission::Reentry => {
                let reply = self.grant_shared(req, kind)?;
                self.tally.reentered += 1;
                Ok(Acquisition::Now(reply))
            }
            HoldAdmission::Fresh if queue.is_empty() => {
                let reply = self.grant_shared(req, kind)?;
                self.tally.acquired += 1;
                Ok(Acquisition::Now(reply))
            }
            HoldAdmission::Refused(e) => Err(e),
            HoldAdmission::Fresh | HoldAdmission::Busy if may_wait => Ok(Acquisition::Wait),
            HoldAdmission::Fresh | HoldAdmission::Busy => Ok(Acquisition::Busy),
        }
    }

    /// One more hold of `kind` for `req.owner` on a lock that is free or
    /// read-write and admits it. Checks everything before writing.
    pub(crate) fn grant_shared(&mut self, req: &Request, kind: Side) -> Result<i64, LockError> {
        let at = self.deadline(req.lease_ms)?;
        let token = if req.fence {
            Some(self.next_token()?)
        } else {
            None
        };
        let mut rw = match std::mem::replace(&mut self.state, LockState::Free) {
            LockState::Free => ReadWriteHolds::default(),
            LockState::Shared(rw) => rw,
            held @ LockState::Held { .. } => {
                self.state = held;
                return Err(LockError::internal("read-write grant on an exclusive lock"));
            }
        };
        let mode_before = rw.mode();
        let holds = match rw.grant(kind, &req.owner, at) {
            Ok(holds) => holds,
            Err(e) => {
                self.state = if rw.is_free() {
                    LockState::Free
                } else {
                    LockState::Shared(rw)
                };
                return Err(e);
            }
        };
        if rw.mode() != mode_before {
            if let Some(mode) = rw.mode() {
                self.changes.push(Change::SetMode(mode));
            }
        }
        match kind {
            Side::Read => {
                self.changes.push(Change::SetHolds {
                    field: req.owner.clone(),
                    holds,
                });
                self.changes.push(Change::SetReadLease {
                    owner: req.owner.clone(),
                    hold: holds,
                    at,
                });
            }
            Side::Write => self.changes.push(Change::SetHolds {
                field: write_field(&req.owner),
                holds,
            }),
        }
        for field in std::mem::take(&mut self.vacated) {
            if !rw.has_field(&field) {
                self.changes.push(Change::RemoveField { field });
            }
        }
        self.vacated_notice = None;
        self.state = LockState::Shared(rw);
        self.follow_leases();
        if let Some(t) = token {
            self.changes.push(Change::SetToken {
                to: t,
                fenced_until: at,
            });
            self.token = Some(Ok(t));
        }
        Ok(token.unwrap_or(holds))
    }

    /// LOCK.RELEASE on a read-write lock.
    pub(crate) fn release_shared(
        &mut self,
        queue: &mut Fifo<T>,
        who: &[u8],
        kind: Option<Side>,
    ) -> Result<i64, LockError> {
        let LockState::Shared(rw) = &mut self.state else {
            return Err(LockError::not_owner());
        };
        let (kind, left) = rw.release(kind, who)?;
        let field: FieldName = match kind {
            Side::Read => {
                self.changes.push(Change::DropReadLease {
                    owner: who.into(),
                    hold: left + 1,
                });
                who.into()
            }
            Side::Write => write_field(who),
        };
        if rw.is_free() {
            self.state = LockState::Free;
            self.vacated = vec![field, FieldName::from(MODE_FIELD)];
            self.vacated_notice = Some(Change::NotifyReadWrite(match kind {
                Side::Read => READ_RELEASED,
                Side::Write => WRITE_RELEASED,
            }));
            self.tally.released += 1;
        } else {
            let write_ended = kind == Side::Write && left == 0;
            self.changes.push(if left == 0 {
                Change::RemoveField { field }
            } else {
                Change::SetHolds { field, holds: left }
            });
            if write_ended {
                self.changes.push(Change::SetMode(Side::Read));
            }
            self.follow_leases();
        }
        self.settle(queue);
        self.leave_free();
        Ok(left)
    }

    /// LOCK.RENEW on a read-write lock: every hold of the owner, read and
    /// write, gets the new lease; the hash follows.
    pub(crate) fn renew_shared(&mut self, who: &[u8], lease_ms: i64) -> Result<i64, LockError> {
        let at = self.deadline(lease_ms)?;
        let LockState::Shared(rw) = &mut self.state else {
            return Err(LockError::not_owner());
        };
        let mut holds_any = false;
        if rw.is_writer(who) {
            rw.write_until = Some(at);
            holds_any = true;
        }
        if let Some(reader) = rw.readers.iter_mut().find(|r| r.owner[..] == *who) {
            let keys = lease_keys(reader.holds);
            reader.leases = vec![Some(at); keys as usize];
            for hold in 1..=keys {
                self.changes.push(Change::SetReadLease {
                    owner: reader.owner.clone(),
                    hold,
                    at,
                });
            }
            holds_any = true;
        }
        if !holds_any {
            return Err(LockError::not_owner());
        }
        self.follow_leases();
        Ok(lease_ms)
    }

    /// LOCK.FORCERELEASE on a read-write lock: every hold goes, lease keys
    /// too.
    pub(crate) fn vacate_shared(&mut self) {
        let LockState::Shared(rw) = std::mem::replace(&mut self.state, LockState::Free) else {
            return;
        };
        for reader in &rw.readers {
            for hold in 1..=lease_keys(reader.holds) {
                self.changes.push(Change::DropReadLease {
                    owner: reader.owner.clone(),
                    hold,
                });
            }
        }
        self.vacated_notice = Some(Change::NotifyReadWrite(if rw.writer.is_some() {
            WRITE_RELEASED
        } else {
            READ_RELEASED
        }));
        self.vacated = rw.fields();
    }

    /// Sets the hash's deadline to the latest lease of the holds left.
    fn follow_leases(&mut self) {
        let LockState::Shared(rw) = &mut self.state else {
            return;
        };
        // Lease keys without a TTL on a hash without one: leave it so.
        let Some(at) = rw.deadline().filter(|&at| at != i64::MAX) else {
            return;
        };
        if rw.expires_at != Some(at) {
            rw.expires_at = Some(at);
            self.changes.push(Change::ExpireAt(at));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read_write::MAX_READ_HOLDS;
    use crate::request::LockKind;
    use crate::transition::Verdict;

    const NOW: i64 = 1_000_000;
    const T: i64 = NOW + 100;

    fn o(s: &str) -> FieldName {
        s.as_bytes().into()
    }

    fn fields(pairs: &[(&str, &str)]) -> Vec<(Vec<u8>, Vec<u8>)> {
        pairs
            .iter()
            .map(|(f, v)| (f.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect()
    }

    fn req(kind: LockKind, owner: &str, lease_ms: i64) -> Request {
        Request {
            owner: o(owner),
            lease_ms,
            fence: false,
            kind,
            keepalive: None,
            campaign: None,
        }
    }

    fn tx(state: LockState) -> Transition<Request> {
        Transition::new(state, NOW, Some(Ok(0)))
    }

    fn shared(t: &Transition<Request>) -> &ReadWriteHolds {
        match t.state() {
            LockState::Shared(rw) => rw,
            other => panic!("not a read-write lock: {other:?}"),
        }
    }

    fn queue(waiters: &[Request]) -> Fifo<Request> {
        let mut q = Fifo::default();
        for (i, w) in waiters.iter().enumerate() {
            q.push_back(i as u64 + 1, w.clone());
        }
        q
    }

    fn granted(t: &Transition<Request>) -> Vec<u64> {
        t.wakes
            .iter()
            .filter(|w| matches!(w.verdict, Verdict::Granted(_)))
            .map(|w| w.id)
            .collect()
    }

    #[test]
    fn readers_share_and_a_writer_is_alone() {
        let mut h = ReadWriteHolds::default();
        assert_eq!(h.admission(Side::Read, b"a"), HoldAdmission::Fresh);
        assert_eq!(h.grant(Side::Read, &o("a"), T), Ok(1));
        assert_eq!(h.admission(Side::Read, b"b"), HoldAdmission::Fresh);
        assert_eq!(h.grant(Side::Read, &o("b"), T), Ok(1));
        assert_eq!(h.admission(Side::Read, b"a"), HoldAdmission::Reentry);
        assert_eq!(h.grant(Side::Read, &o("a"), T + 5), Ok(2));
        assert_eq!(h.reader(b"a").unwrap().leases, vec![Some(T), Some(T + 5)]);
        assert_eq!(h.admission(Side::Write, b"c"), HoldAdmission::Busy);

        let mut w = ReadWriteHolds::default();
        assert_eq!(w.grant(Side::Write, &o("c"), T), Ok(1));
        assert_eq!(w.admission(Side::Read, b"a"), HoldAdmission::Busy);
        assert_eq!(w.admission(Side::Write, b"a"), HoldAdmission::Busy);
        assert_eq!(w.admission(Side::Write, b"c"), HoldAdmission::Reentry);
    }

    #[test]
    fn a_writer_downgrades_by_taking_read_holds_first() {
        let mut h = ReadWriteHolds::default();
        h.grant(Side::Write, &o("w"), T).unwrap();
        assert_eq!(h.admission(Side::Read, b"w"), HoldAdmission::Reentry);
        assert_eq!(h.grant(Side::Read, &o("w"), T), Ok(1));
        // Holding both, a bare release must say which.
        assert_eq!(h.release(None, b"w"), Err(LockError::ambiguous_release()));
        assert_eq!(h.release(Some(Side::Write), b"w"), Ok((Side::Write, 0)));
        assert_eq!(h.writer, None);
        assert_eq!(h.holds_of(Side::Read, b"w"), Some(1));
        // Now an ordinary reader: others may read with it.
        assert_eq!(h.admission(Side::Read, b"x"), HoldAdmission::Fresh);
        assert_eq!(h.release(None, b"w"), Ok((Side::Read, 0)));
        assert!(h.is_free());
    }

    #[test]
    fn only_a_lone_reader_may_upgrade() {
        let mut h = ReadWriteHolds::default();
        h.grant(Side::Read, &o("a"), T).unwrap();
        assert_eq!(h.admission(Side::Write, b"a"), HoldAdmission::Reentry);
        h.grant(Side::Read, &o("b"), T).unwrap();
        assert_eq!(
            h.admission(Side::Write, b"a"),
            HoldAdmission::Refused(LockError::no_upgrade())
        );
        assert_eq!(h.admission(Side::Write, b"z"), HoldAdmission::Busy);
    }

    #[test]
    fn release_by_a_stranger_is_notowner() {
        let mut h = ReadWriteHolds::default();
        h.grant(Side::Read, &o("a"), T).unwrap();
        assert_eq!(h.release(None, b"b"), Err(LockError::not_owner()));
        assert_eq!(
            h.release(Some(Side::Write), b"a"),
            Err(LockError::not_owner())
        );
        assert_eq!(h.holds_of(Side::Read, b"a"), Some(1));
    }

    #[test]
    fn read_holds_are_capped() {
        let mut h = ReadWriteHolds::default();
        for n in 1..=MAX_READ_HOLDS {
            assert_eq!(h.grant(Side::Read, &o("a"), T), Ok(n));
        }
        assert_eq!(
            h.grant(Side::Read, &o("a"), T),
            Err(LockError::too_many_read_holds(MAX_READ_HOLDS))
        );
        assert_eq!(h.holds_of(Side::Read, b"a"), Some(MAX_READ_HOLDS));
    }

    #[test]
    fn a_huge_foreign_read_count_touches_at_most_the_cap_of_lease_keys() {
        let rw = ReadWriteHolds {
            writer: None,
            readers: vec![Reader {
                owner: o("a"),
                holds: 100_000_000_000,
                leases: vec![Some(T)],
            }],
            expires_at: Some(T),
            write_until: None,
        };
        let mut t = tx(LockState::Shared(rw.clone()));
        assert_eq!(t.renew(b"a", 50), Ok(50));
        assert_eq!(t.changes.len(), MAX_READ_HOLDS as usize + 1);
        let mut t = tx(LockState::Shared(rw));
        assert_eq!(t.force_release(&mut Fifo::default()), 1);
        assert_eq!(t.changes.len(), MAX_READ_HOLDS as usize + 2);
    }

    #[test]
    fn hash_layout_is_redissons_and_foreign_hashes_are_refused() {
        let redisson = fields(&[("mode", "write"), ("u:1:write", "2"), ("u:1", "1")]);
        let h = ReadWriteHolds::from_hash(&redisson).unwrap().unwrap();
        assert_eq!(h.writer, Some((o("u:1"), 2)));
        assert_eq!(h.holds_of(Side::Read, b"u:1"), Some(1));
        assert_eq!(
            ReadWriteHolds::from_hash(&fields(&[("owner", "1")])),
            Ok(None)
        );
        for bad in [
            fields(&[("mode", "both")]),
            fields(&[("mode", "write"), ("a", "1")]),
            fields(&[("mode", "read"), ("a:write", "1")]),
            fields(&[("mode", "write"), ("a:write", "1"), ("b:write", "1")]),
            fields(&[("mode", "read"), ("a", "0")]),
            fields(&[("mode", "read"), ("a", "x")]),
        ] {
            let e = ReadWriteHolds::from_hash(&bad).unwrap_err();
            assert_eq!(e.code(), "WRONGTYPE", "{bad:?}");
        }
        assert!(check_owner(b"mode").is_err());
        assert!(check_owner(b"u:1:write").is_err());
        assert!(check_owner(b"u:1").is_ok());
    }

    #[test]
    fn a_first_read_writes_mode_holds_lease_key_and_ttl() {
        let mut t = tx(LockState::Free);
        let r = t.acquire(&mut Fifo::default(), &req(LockKind::Read, "a", 100), false);
        assert_eq!(r, Ok(Acquisition::Now(1)));
        assert_eq!(
            t.changes,
            vec![
                Change::SetMode(Side::Read),
                Change::SetHolds {
                    field: o("a"),
                    holds: 1
                },
                Change::SetReadLease {
                    owner: o("a"),
                    hold: 1,
                    at: NOW + 100
                },
                Change::ExpireAt(NOW + 100),
            ]
        );
    }

    #[test]
    fn the_hash_lives_as_long_as_its_longest_read_lease() {
        let mut t = tx(LockState::Free);
        let mut q = Fifo::default();
        t.acquire(&mut q, &req(LockKind::Read, "a", 500), false)
            .unwrap();
        t.acquire(&mut q, &req(LockKind::Read, "b", 100), false)
            .unwrap();
        assert_eq!(shared(&t).expires_at, Some(NOW + 500));
        assert_eq!(
            t.changes.last(),
            Some(&Change::SetReadLease {
                owner: o("b"),
                hold: 1,
                at: NOW + 100
            })
        );
        t.changes.clear();
        // The long one leaves: the hash follows the short one.
        assert_eq!(t.release(&mut q, b"a", None), Ok(0));
        assert_eq!(
            t.changes,
            vec![
                Change::DropReadLease {
                    owner: o("a"),
                    hold: 1
                },
                Change::RemoveField { field: o("a") },
                Change::ExpireAt(NOW + 100),
            ]
        );
    }

    #[test]
    fn the_last_release_deletes_the_hash_and_tells_redisson() {
        for (kind, message) in [
            (LockKind::Read, READ_RELEASED),
            (LockKind::Write, WRITE_RELEASED),
        ] {
            let mut t = tx(LockState::Free);
            let mut q = Fifo::default();
            t.acquire(&mut q, &req(kind, "a", 100), false).unwrap();
            t.changes.clear();
            assert_eq!(t.release(&mut q, b"a", None), Ok(0));
            assert_eq!(t.state(), &LockState::Free);
            let tail = &t.changes[t.changes.len() - 2..];
            assert_eq!(tail, &[Change::Delete, Change::NotifyReadWrite(message)]);
        }
    }

    #[test]
    fn a_waiting_writer_queues_new_readers_and_a_release_serves_the_run_of_readers() {
        let mut t = tx(LockState::Free);
        let mut q = Fifo::default();
        t.acquire(&mut q, &req(LockKind::Write, "w", 100), false)
            .unwrap();
        // Busy: the writer holds.
        assert_eq!(
            t.acquire(&mut q, &req(LockKind::Read, "r1", 100), true),
            Ok(Acquisition::Wait)
        );
        let mut q = queue(&[
            req(LockKind::Read, "r1", 100),
            req(LockKind::Read, "r2", 100),
            req(LockKind::Write, "w2", 100),
            req(LockKind::Read, "r3", 100),
            req(LockKind::Exclusive, "x", 100),
        ]);
        assert_eq!(t.release(&mut q, b"w", None), Ok(0));
        assert_eq!(granted(&t), vec![1, 2]);
        assert_eq!(shared(&t).readers.len(), 2);
        // The old writer's field went after the readers' were written.
        assert!(t.changes.contains(&Change::RemoveField {
            field: o("w:write")
        }));
        assert!(!t.changes.contains(&Change::Delete));
        // While w2 waits, a new reader queues even though readers hold.
        assert_eq!(
            t.acquire(&mut q, &req(LockKind::Read, "r9", 100), true),
            Ok(Acquisition::Wait)
        );
        // A reader already holding re-enters without queueing.
        assert_eq!(
            t.acquire(&mut q, &req(LockKind::Read, "r1", 100), true),
            Ok(Acquisition::Now(2))
        );
        t.release(&mut q, b"r1", None).unwrap();
        t.release(&mut q, b"r1", None).unwrap();
        assert_eq!(granted(&t), vec![1, 2]);
        t.release(&mut q, b"r2", None).unwrap();
        assert_eq!(granted(&t), vec![1, 2, 3]);
        assert_eq!(shared(&t).writer, Some((o("w2"), 1)));
        // The exclusive waiter behind the reader waits for it, then takes
        // the key as an exclusive lock.
        t.release(&mut q, b"w2", None).unwrap();
        assert_eq!(granted(&t), vec![1, 2, 3, 4]);
        t.release(&mut q, b"r3", None).unwrap();
        assert_eq!(granted(&t), vec![1, 2, 3, 4, 5]);
        assert_eq!(
            t.state(),
            &LockState::Held {
                owner: o("x"),
                holds: 1
            }
        );
        assert!(t
            .changes
            .contains(&Change::RemoveField { field: o("mode") }));
    }

    #[test]
    fn a_writer_handing_the_lock_to_readers_wakes_redissons_waiters() {
        let mut t = tx(LockState::Free);
        let mut q = Fifo::default();
        t.acquire(&mut q, &req(LockKind::Write, "w", 100), false)
            .unwrap();
        t.changes.clear();
        let mut q = queue(&[
            req(LockKind::Read, "r1", 100),
            req(LockKind::Write, "w2", 100),
        ]);
        assert_eq!(t.release(&mut q, b"w", None), Ok(0));
        assert_eq!(granted(&t), vec![1]);
        // After the reader's writes: Redisson's readers may share it now.
        assert_eq!(
            t.changes.last(),
            Some(&Change::NotifyReadWrite(WRITE_RELEASED))
        );
        assert!(!t.changes.contains(&Change::Delete));
    }

    #[test]
    fn a_hand_off_to_a_writer_or_from_readers_tells_redisson_nothing() {
        // Writer to writer: nobody else could get in.
        let mut t = tx(LockState::Free);
        let mut q = Fifo::default();
        t.acquire(&mut q, &req(LockKind::Write, "w", 100), false)
            .unwrap();
        t.changes.clear();
        let mut q = queue(&[req(LockKind::Write, "w2", 100)]);
        assert_eq!(t.release(&mut q, b"w", None), Ok(0));
        assert_eq!(granted(&t), vec![1]);
        assert!(!t
            .changes
            .iter()
            .any(|c| matches!(c, Change::NotifyReadWrite(_))));
        // Last reader to a writer.
        let mut t = tx(LockState::Free);
        let mut q = Fifo::default();
        t.acquire(&mut q, &req(LockKind::Read, "r", 100), false)
            .unwrap();
        t.changes.clear();
        let mut q = queue(&[req(LockKind::Write, "w", 100)]);
        assert_eq!(t.release(&mut q, b"r", None), Ok(0));
        assert_eq!(granted(&t), vec![1]);
        assert!(!t
            .changes
            .iter()
            .any(|c| matches!(c, Change::NotifyReadWrite(_))));
    }

    #[test]
    fn wrong_kind_calls_are_wrongtype() {
        let mut t = tx(LockState::Held {
            owner: o("a"),
            holds: 1,
        });
        let mut q = Fifo::default();
        let e = t
            .acquire(&mut q, &req(LockKind::Read, "a", 1), true)
            .unwrap_err();
        assert_eq!(e, LockError::holds_exclusive_lock());
        let e = t.release(&mut q, b"a", Some(Side::Read)).unwrap_err();
        assert_eq!(e, LockError::holds_exclusive_lock());

        let mut t = tx(LockState::Free);
        t.acquire(&mut q, &req(LockKind::Read, "a", 1), false)
            .unwrap();
        let e = t
            .acquire(&mut q, &req(LockKind::Exclusive, "a", 1), true)
            .unwrap_err();
        assert_eq!(e, LockError::holds_read_write_lock());
        let e = t
            .acquire(&mut q, &req(LockKind::Write, "x:write", 1), true)
            .unwrap_err();
        assert_eq!(e.code(), "ERR");
    }

    #[test]
    fn an_upgrade_refused_in_the_queue_is_answered_and_the_next_served() {
        let mut t = tx(LockState::Free);
        let mut q = Fifo::default();
        t.acquire(&mut q, &req(LockKind::Read, "a", 100), false)
            .unwrap();
        t.acquire(&mut q, &req(LockKind::Read, "b", 100), false)
            .unwrap();
        assert_eq!(
            t.acquire(&mut q, &req(LockKind::Write, "a", 100), true),
            Err(LockError::no_upgrade())
        );
        // Alone, it may.
        t.release(&mut q, b"b", None).unwrap();
        assert_eq!(
            t.acquire(&mut q, &req(LockKind::Write, "a", 100), true),
            Ok(Acquisition::Now(1))
        );
        assert_eq!(shared(&t).mode(), Some(Side::Write));
        assert!(t.changes.contains(&Change::SetMode(Side::Write)));
    }

    #[test]
    fn readers_whose_leases_ran_out_are_dropped_when_the_lock_is_next_read() {
        let reader = |name: &str, leases: Vec<Option<i64>>| Reader {
            owner: o(name),
            holds: leases.len() as i64,
            leases,
        };
        let rw = ReadWriteHolds {
            writer: None,
            readers: vec![
                reader("dead", vec![None, None]),
                reader("live", vec![None, Some(T)]),
            ],
            expires_at: Some(T + 50),
            write_until: None,
        };
        let t = tx(LockState::Shared(rw.clone()));
        assert_eq!(
            t.changes,
            vec![
                Change::RemoveField { field: o("dead") },
                Change::ExpireAt(T)
            ]
        );
        assert_eq!(t.next_end(), Some(T));

        let all_dead = ReadWriteHolds {
            readers: vec![reader("dead", vec![None])],
            ..rw
        };
        let t = tx(LockState::Shared(all_dead));
        assert_eq!(t.state(), &LockState::Free);
        assert_eq!(
            t.changes,
            vec![Change::Delete, Change::NotifyReadWrite(READ_RELEASED)]
        );
    }

    #[test]
    fn renewal_covers_every_hold_of_the_owner_and_the_hash_follows() {
        let mut t = tx(LockState::Free);
        let mut q = Fifo::default();
        t.acquire(&mut q, &req(LockKind::Write, "w", 100), false)
            .unwrap();
        t.acquire(&mut q, &req(LockKind::Read, "w", 300), false)
            .unwrap();
        assert_eq!(shared(&t).expires_at, Some(NOW + 300));
        t.changes.clear();
        assert_eq!(t.renew(b"w", 50), Ok(50));
        assert_eq!(
            t.changes,
            vec![
                Change::SetReadLease {
                    owner: o("w"),
                    hold: 1,
                    at: NOW + 50
                },
                Change::ExpireAt(NOW + 50),
            ]
        );
        assert_eq!(t.renew(b"z", 50), Err(LockError::not_owner()));
    }

    #[test]
    fn force_release_drops_every_hold_and_its_lease_keys() {
        let mut t = tx(LockState::Free);
        let mut q = Fifo::default();
        t.acquire(&mut q, &req(LockKind::Read, "a", 100), false)
            .unwrap();
        t.acquire(&mut q, &req(LockKind::Read, "a", 100), false)
            .unwrap();
        t.changes.clear();
        assert_eq!(t.force_release(&mut q), 1);
        assert_eq!(
            t.changes,
            vec![
                Change::DropReadLease {
                    owner: o("a"),
                    hold: 1
                },
                Change::DropReadLease {
                    owner: o("a"),
                    hold: 2
                },
                Change::Delete,
                Change::NotifyReadWrite(READ_RELEASED),
            ]
        );
    }
}
