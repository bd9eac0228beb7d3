//! The read-write lock's rules, on Redisson's RReadWriteLock layout: one hash
//! with `mode` = `read` or `write`, a field `<owner>` per reader holding its
//! read holds, and `<owner>:write` holding the writer's write holds.
//!
//! Many readers or one writer; both reentrant. The writer may also take read
//! holds (after it releases its write holds it keeps them: a downgrade). A
//! reader may take the write lock only while it is the only holder; with
//! other readers it is refused at once, since waiting would deadlock.
//! Waiters are served first come, first served: once anyone waits, a new
//! reader queues behind it (no writer starvation), and a freed lock goes to
//! the run of readers at the head of the queue together, or to one writer.
//!
//! Not wired to commands yet (issue 5); the shell will diff [`RwHolds`]
//! before and after a transition to write the hash fields.

use super::args::parse_i64;
use super::error::{printable, LockError};
use super::lock::Owner;
use super::queue::{Fifo, WaiterId};

pub const MODE_FIELD: &[u8] = b"mode";
pub const WRITE_SUFFIX: &[u8] = b":write";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Read,
    Write,
}

/// Who holds a read-write lock. Free when both are empty.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RwHolds {
    /// The writer and its write holds (mode `write`).
    pub writer: Option<(Owner, i64)>,
    /// Read holds by owner, the writer's own among them, in the order they
    /// were first taken.
    pub readers: Vec<(Owner, i64)>,
}

/// Whether an owner may take a hold of a kind now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// One more hold of a kind the owner already has (or a writer's read
    /// hold): never queued, whoever waits.
    Reentry,
    /// A first hold, if nobody is queued ahead.
    Fresh,
    /// Held against the owner: wait, or answer busy.
    Busy,
    /// Can never be granted while the owner holds what it holds.
    Refused(LockError),
}

impl RwHolds {
    pub fn is_free(&self) -> bool {
        self.writer.is_none() && self.readers.is_empty()
    }

    /// Reads the hash. `None` when it is not a read-write lock at all (no
    /// `mode` field): the caller decides what else it may be.
    pub fn from_hash(fields: &[(Vec<u8>, Vec<u8>)]) -> Result<Option<Self>, LockError> {
        let Some((_, mode)) = fields.iter().find(|(f, _)| f == MODE_FIELD) else {
            return Ok(None);
        };
        let write_mode = match mode.as_slice() {
            b"write" => true,
            b"read" => false,
            other => {
                return Err(not_rw(format_args!(
                    "mode is '{}', not read or write",
                    printable(other)
                )))
            }
        };
        let mut holds = Self::default();
        for (field, value) in fields.iter().filter(|(f, _)| f != MODE_FIELD) {
            let count = parse_i64(value).filter(|&n| n > 0).ok_or_else(|| {
                not_rw(format_args!(
                    "field '{}' holds '{}', not a positive hold count",
                    printable(field),
                    printable(value)
                ))
            })?;
            match field.strip_suffix(WRITE_SUFFIX) {
                Some(owner) if write_mode && holds.writer.is_none() => {
                    holds.writer = Some((owner.into(), count));
                }
                Some(_) => {
                    return Err(not_rw("a writer's field in the wrong mode, or two writers"))
                }
                None => holds.readers.push((field.as_slice().into(), count)),
            }
        }
        if write_mode && holds.writer.is_none() {
            return Err(not_rw("mode is write but there is no writer"));
        }
        Ok(Some(holds))
    }

    /// The hash fields for this state (empty when free), mode first.
    pub fn to_fields(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        if self.is_free() {
            return Vec::new();
        }
        let mode: &[u8] = if self.writer.is_some() {
            b"write"
        } else {
            b"read"
        };
        let mut fields = vec![(MODE_FIELD.to_vec(), mode.to_vec())];
        if let Some((owner, n)) = &self.writer {
            fields.push((
                [&owner[..], WRITE_SUFFIX].concat(),
                n.to_string().into_bytes(),
            ));
        }
        for (owner, n) in &self.readers {
            fields.push((owner.to_vec(), n.to_string().into_bytes()));
        }
        fields
    }

    pub fn holds_of(&self, kind: Kind, who: &[u8]) -> Option<i64> {
        match kind {
            Kind::Write => self.writer.as_ref().filter(|(o, _)| o[..] == *who),
            Kind::Read => self.readers.iter().find(|(o, _)| o[..] == *who),
        }
        .map(|(_, n)| *n)
    }

    fn is_writer(&self, who: &[u8]) -> bool {
        self.holds_of(Kind::Write, who).is_some()
    }

    pub fn admission(&self, kind: Kind, who: &[u8]) -> Admission {
        match kind {
            Kind::Read if self.holds_of(Kind::Read, who).is_some() || self.is_writer(who) => {
                Admission::Reentry
            }
            Kind::Read if self.writer.is_none() => Admission::Fresh,
            Kind::Read => Admission::Busy,
            Kind::Write if self.is_writer(who) => Admission::Reentry,
            Kind::Write if self.is_free() => Admission::Fresh,
            Kind::Write => match self.readers.as_slice() {
                // The only holder, a reader: taking the write lock cannot
                // wait for anyone (an upgrade).
                [(only, _)] if self.writer.is_none() && only[..] == *who => Admission::Reentry,
                readers if readers.iter().any(|(o, _)| o[..] == *who) => {
                    Admission::Refused(LockError::no_upgrade())
                }
                _ => Admission::Busy,
            },
        }
    }

    /// One more hold of `kind` for `who`; the caller checked
    /// [`Self::admission`]. Returns that kind's holds after it.
    pub fn grant(&mut self, kind: Kind, who: &Owner) -> Result<i64, LockError> {
        let slot = match kind {
            Kind::Write => {
                if self.writer.is_none() {
                    self.writer = Some((who.clone(), 0));
                }
                self.writer.as_mut()
            }
            Kind::Read => {
                if self.holds_of(Kind::Read, who).is_none() {
                    self.readers.push((who.clone(), 0));
                }
                self.readers.iter_mut().find(|(o, _)| o == who)
            }
        };
        let Some((_, holds)) = slot.filter(|(o, _)| o == who) else {
            return Err(LockError::internal("grant against the holders"));
        };
        *holds = holds.checked_add(1).ok_or_else(LockError::holds_overflow)?;
        Ok(*holds)
    }

    /// Drops one hold of `kind` (or, without a kind, of the only kind the
    /// owner holds). Returns the kind and its holds left.
    pub fn release(&mut self, kind: Option<Kind>, who: &[u8]) -> Result<(Kind, i64), LockError> {
        let kind = match kind {
            Some(kind) => kind,
            None => match (
                self.holds_of(Kind::Write, who),
                self.holds_of(Kind::Read, who),
            ) {
                (Some(_), Some(_)) => return Err(LockError::ambiguous_release()),
                (Some(_), None) => Kind::Write,
                _ => Kind::Read,
            },
        };
        let left = match kind {
            Kind::Write => match &mut self.writer {
                Some((owner, holds)) if owner[..] == *who => {
                    *holds -= 1;
                    let left = *holds;
                    if left == 0 {
                        self.writer = None;
                    }
                    left
                }
                _ => return Err(LockError::not_owner()),
            },
            Kind::Read => {
                let Some(i) = self.readers.iter().position(|(o, _)| o[..] == *who) else {
                    return Err(LockError::not_owner());
                };
                self.readers[i].1 -= 1;
                let left = self.readers[i].1;
                if left == 0 {
                    self.readers.remove(i);
                }
                left
            }
        };
        Ok((kind, left))
    }
}

/// A queued caller of a read-write lock.
pub trait RwQueued {
    fn kind(&self) -> Kind;
    fn owner(&self) -> &Owner;
}

/// Serves the queue from its head: readers while no writer holds, a writer
/// when the lock is free (or only it holds). Stops at the first waiter that
/// cannot be served, so nobody is overtaken. Returns who was served and its
/// holds (or why it could not be).
pub fn serve<T: RwQueued>(
    holds: &mut RwHolds,
    queue: &mut Fifo<T>,
) -> Vec<(WaiterId, T, Result<i64, LockError>)> {
    let mut served = Vec::new();
    while let Some((kind, owner)) = queue.front().map(|(_, w)| (w.kind(), w.owner().clone())) {
        let answer = match holds.admission(kind, &owner) {
            Admission::Reentry | Admission::Fresh => holds.grant(kind, &owner),
            Admission::Refused(e) => Err(e),
            Admission::Busy => break,
        };
        let Some((id, waiter)) = queue.pop_front() else {
            break;
        };
        served.push((id, waiter, answer));
    }
    served
}

fn not_rw(why: impl std::fmt::Display) -> LockError {
    LockError::not_a_lock(format_args!("not a read-write lock: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(s: &str) -> Owner {
        s.as_bytes().into()
    }

    struct W(Kind, Owner);

    impl RwQueued for W {
        fn kind(&self) -> Kind {
            self.0
        }
        fn owner(&self) -> &Owner {
            &self.1
        }
    }

    fn fields(pairs: &[(&str, &str)]) -> Vec<(Vec<u8>, Vec<u8>)> {
        pairs
            .iter()
            .map(|(f, v)| (f.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn readers_share_and_a_writer_is_alone() {
        let mut h = RwHolds::default();
        assert_eq!(h.admission(Kind::Read, b"a"), Admission::Fresh);
        assert_eq!(h.grant(Kind::Read, &o("a")), Ok(1));
        assert_eq!(h.admission(Kind::Read, b"b"), Admission::Fresh);
        assert_eq!(h.grant(Kind::Read, &o("b")), Ok(1));
        assert_eq!(h.admission(Kind::Read, b"a"), Admission::Reentry);
        assert_eq!(h.grant(Kind::Read, &o("a")), Ok(2));
        assert_eq!(h.admission(Kind::Write, b"c"), Admission::Busy);

        let mut w = RwHolds::default();
        assert_eq!(w.grant(Kind::Write, &o("c")), Ok(1));
        assert_eq!(w.admission(Kind::Read, b"a"), Admission::Busy);
        assert_eq!(w.admission(Kind::Write, b"a"), Admission::Busy);
        assert_eq!(w.admission(Kind::Write, b"c"), Admission::Reentry);
    }

    #[test]
    fn a_writer_downgrades_by_taking_read_holds_first() {
        let mut h = RwHolds::default();
        h.grant(Kind::Write, &o("w")).unwrap();
        assert_eq!(h.admission(Kind::Read, b"w"), Admission::Reentry);
        assert_eq!(h.grant(Kind::Read, &o("w")), Ok(1));
        // Holding both, a bare release must say which.
        assert_eq!(h.release(None, b"w"), Err(LockError::ambiguous_release()));
        assert_eq!(h.release(Some(Kind::Write), b"w"), Ok((Kind::Write, 0)));
        assert_eq!(h.writer, None);
        assert_eq!(h.holds_of(Kind::Read, b"w"), Some(1));
        // Now an ordinary reader: others may read with it.
        assert_eq!(h.admission(Kind::Read, b"x"), Admission::Fresh);
        assert_eq!(h.release(None, b"w"), Ok((Kind::Read, 0)));
        assert!(h.is_free());
    }

    #[test]
    fn only_a_lone_reader_may_upgrade() {
        let mut h = RwHolds::default();
        h.grant(Kind::Read, &o("a")).unwrap();
        assert_eq!(h.admission(Kind::Write, b"a"), Admission::Reentry);
        h.grant(Kind::Read, &o("b")).unwrap();
        assert_eq!(
            h.admission(Kind::Write, b"a"),
            Admission::Refused(LockError::no_upgrade())
        );
        assert_eq!(h.admission(Kind::Write, b"z"), Admission::Busy);
    }

    #[test]
    fn release_by_a_stranger_is_notowner() {
        let mut h = RwHolds::default();
        h.grant(Kind::Read, &o("a")).unwrap();
        assert_eq!(h.release(None, b"b"), Err(LockError::not_owner()));
        assert_eq!(
            h.release(Some(Kind::Write), b"a"),
            Err(LockError::not_owner())
        );
        assert_eq!(h.holds_of(Kind::Read, b"a"), Some(1));
    }

    #[test]
    fn a_freed_lock_goes_to_the_run_of_readers_at_the_head_then_stops() {
        let mut h = RwHolds::default();
        h.grant(Kind::Write, &o("w")).unwrap();
        let mut q = Fifo::default();
        q.push_back(1, W(Kind::Read, o("r1")));
        q.push_back(2, W(Kind::Read, o("r2")));
        q.push_back(3, W(Kind::Write, o("w2")));
        q.push_back(4, W(Kind::Read, o("r3")));
        assert!(serve(&mut h, &mut q).is_empty(), "served while written");
        h.release(Some(Kind::Write), b"w").unwrap();
        let served: Vec<_> = serve(&mut h, &mut q)
            .into_iter()
            .map(|(id, _, r)| (id, r))
            .collect();
        assert_eq!(served, vec![(1, Ok(1)), (2, Ok(1))]);
        // The writer waits for both readers; the reader behind it waits too.
        assert_eq!(q.len(), 2);
        h.release(None, b"r1").unwrap();
        assert!(serve(&mut h, &mut q).is_empty());
        h.release(None, b"r2").unwrap();
        let served: Vec<_> = serve(&mut h, &mut q)
            .into_iter()
            .map(|(id, _, _)| id)
            .collect();
        assert_eq!(served, vec![3]);
    }

    #[test]
    fn hash_layout_round_trips_and_foreign_hashes_are_refused() {
        let redisson = fields(&[("mode", "write"), ("u:1:write", "2"), ("u:1", "1")]);
        let h = RwHolds::from_hash(&redisson).unwrap().unwrap();
        assert_eq!(h.writer, Some((o("u:1"), 2)));
        assert_eq!(h.readers, vec![(o("u:1"), 1)]);
        assert_eq!(h.to_fields(), redisson);
        let read = fields(&[("mode", "read"), ("a", "1"), ("b", "3")]);
        assert_eq!(
            RwHolds::from_hash(&read).unwrap().unwrap().to_fields(),
            read
        );

        assert_eq!(RwHolds::from_hash(&fields(&[("owner", "1")])), Ok(None));
        for bad in [
            fields(&[("mode", "both")]),
            fields(&[("mode", "write"), ("a", "1")]),
            fields(&[("mode", "read"), ("a:write", "1")]),
            fields(&[("mode", "write"), ("a:write", "1"), ("b:write", "1")]),
            fields(&[("mode", "read"), ("a", "0")]),
            fields(&[("mode", "read"), ("a", "x")]),
        ] {
            let e = RwHolds::from_hash(&bad).unwrap_err();
            assert_eq!(e.code(), "WRONGTYPE", "{bad:?}");
        }
        assert!(RwHolds::default().to_fields().is_empty());
    }
}
