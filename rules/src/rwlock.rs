//! The read-write lock's rules, on Redisson's RReadWriteLock layout: one hash
//! with `mode` = `read` or `write`, a field `<owner>` per reader holding its
//! read holds, and `<owner>:write` holding the writer's write holds. Each
//! read hold also has a lease key, `{name}:<owner>:rwlock_timeout:<n>`,
//! and the hash's own TTL is the latest lease among all holds.
//!
//! Many readers or one writer; both reentrant. The writer may also take read
//! holds (after it releases its write holds it keeps them: a downgrade). A
//! reader may take the write lock only while it is the only holder; with
//! other readers it is refused at once, since waiting would deadlock.
//! Waiters are served first come, first served: once anyone waits, a new
//! reader queues behind it (no writer starvation), and a freed lock goes to
//! the run of readers at the head of the queue together, or to one writer
//! (see [`Transition::settle`]).

use super::args::parse_i64;
use super::error::{printable, LockError};
use super::lock::{Acquired, LockState, Owner, Queued, Request, Transition, Write};
use super::queue::Fifo;

pub const MODE_FIELD: &[u8] = b"mode";
pub const WRITE_SUFFIX: &[u8] = b":write";

/// Each read hold is a key; an owner's re-entries are capped so that one
/// caller cannot make a release or renewal touch an unbounded number.
pub const MAX_READ_HOLDS: i64 = 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Read,
    Write,
}

impl Kind {
    pub fn mode(self) -> &'static [u8] {
        match self {
            Self::Read => b"read",
            Self::Write => b"write",
        }
    }
}

/// One reader: its read holds and, per hold (hold 1 first), when its lease
/// key ends (`None` once the key is gone: that hold's lease ran out).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reader {
    pub owner: Owner,
    pub holds: i64,
    pub leases: Vec<Option<i64>>,
}

impl Reader {
    /// The end of its latest live hold lease.
    pub fn lease_end(&self) -> Option<i64> {
        self.leases.iter().flatten().max().copied()
    }

    /// Every hold's lease ran out (a reader that stopped renewing): it no
    /// longer holds the lock, whatever its field says.
    pub fn expired(&self) -> bool {
        !self.leases.is_empty() && self.leases.iter().all(Option::is_none)
    }
}

/// Who holds a read-write lock. Free when both are empty.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RwHolds {
    /// The writer and its write holds (mode `write`).
    pub writer: Option<(Owner, i64)>,
    /// Read holds by owner, the writer's own among them.
    pub readers: Vec<Reader>,
    /// The hash's deadline (PEXPIRETIME), as read.
    pub expires_at: Option<i64>,
    /// The write hold's lease end: the hash's deadline as read, then the
    /// lease of the last write grant or renewal.
    pub write_until: Option<i64>,
}

/// Whether an owner may take a hold of a kind now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// One more hold of a kind the owner already has (or a writer's read
    /// hold, or a lone reader's upgrade): never queued, whoever waits.
    Reentry,
    /// A first hold, if nobody is queued ahead.
    Fresh,
    /// Held against the owner: wait, or answer busy.
    Busy,
    /// Can never be granted while the owner holds what it holds.
    Refused(LockError),
}

/// The hash field of `owner`'s write holds.
pub fn write_field(owner: &[u8]) -> Owner {
    [owner, WRITE_SUFFIX].concat().into()
}

/// Owners whose field would read as something else in the hash.
pub fn check_owner(owner: &[u8]) -> Result<(), LockError> {
    if owner == MODE_FIELD || owner.ends_with(WRITE_SUFFIX) {
        Err(LockError::reserved_owner(owner))
    } else {
        Ok(())
    }
}

impl RwHolds {
    pub fn is_free(&self) -> bool {
        self.writer.is_none() && self.readers.is_empty()
    }

    pub fn mode(&self) -> Option<Kind> {
        if self.writer.is_some() {
            Some(Kind::Write)
        } else if self.readers.is_empty() {
            None
        } else {
            Some(Kind::Read)
        }
    }

    /// Reads the hash. `None` when it is not a read-write lock at all (no
    /// `mode` field): the caller decides what else it may be. Lease fields
    /// are left for the caller to fill in from the keys.
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
                None => holds.readers.push(Reader {
                    owner: field.as_slice().into(),
                    holds: count,
                    leases: Vec::new(),
                }),
            }
        }
        if write_mode && holds.writer.is_none() {
            return Err(not_rw("mode is write but there is no writer"));
        }
        Ok(Some(holds))
    }

    pub fn holds_of(&self, kind: Kind, who: &[u8]) -> Option<i64> {
        match kind {
            Kind::Write => self
                .writer
                .as_ref()
                .filter(|(o, _)| o[..] == *who)
                .map(|(_, n)| *n),
            Kind::Read => self.reader(who).map(|r| r.holds),
        }
    }

    pub fn reader(&self, who: &[u8]) -> Option<&Reader> {
        self.readers.iter().find(|r| r.owner[..] == *who)
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
                [only] if self.writer.is_none() && only.owner[..] == *who => Admission::Reentry,
                readers if readers.iter().any(|r| r.owner[..] == *who) => {
                    Admission::Refused(LockError::no_upgrade())
                }
                _ => Admission::Busy,
            },
        }
    }

    /// One more hold of `kind` for `who` until `until`; the caller checked
    /// [`Self::admission`]. Returns that kind's holds after it. Nothing
    /// changes when it fails.
    pub fn grant(&mut self, kind: Kind, who: &Owner, until: i64) -> Result<i64, LockError> {
        match kind {
            Kind::Write => match &mut self.writer {
                None => {
                    self.writer = Some((who.clone(), 1));
                    self.write_until = Some(until);
                    Ok(1)
                }
                Some((owner, holds)) if owner == who => {
                    *holds = holds.checked_add(1).ok_or_else(LockError::holds_overflow)?;
                    self.write_until = Some(until);
                    Ok(*holds)
                }
                Some(_) => Err(LockError::internal("write grant against the holders")),
            },
            Kind::Read => match self.readers.iter_mut().find(|r| r.owner == *who) {
                None => {
                    self.readers.push(Reader {
                        owner: who.clone(),
                        holds: 1,
                        leases: vec![Some(until)],
                    });
                    Ok(1)
                }
                Some(r) if r.holds >= MAX_READ_HOLDS => {
                    Err(LockError::too_many_read_holds(MAX_READ_HOLDS))
                }
                Some(r) => {
                    r.holds += 1;
                    r.leases.resize(r.holds as usize - 1, None);
                    r.leases.push(Some(until));
                    Ok(r.holds)
                }
            },
        }
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
                        self.write_until = None;
                    }
                    left
                }
                _ => return Err(LockError::not_owner()),
            },
            Kind::Read => {
                let Some(i) = self.readers.iter().position(|r| r.owner[..] == *who) else {
                    return Err(LockError::not_owner());
                };
                let reader = &mut self.readers[i];
                reader.holds -= 1;
                reader.leases.truncate(reader.holds as usize);
                let left = reader.holds;
                if left == 0 {
                    self.readers.remove(i);
                }
                left
            }
        };
        Ok((kind, left))
    }

    /// The deadline the hash must have: the latest of the write lease and
    /// every live read hold's lease.
    pub fn deadline(&self) -> Option<i64> {
        let reads = self.readers.iter().filter_map(Reader::lease_end);
        self.write_until.into_iter().chain(reads).max()
    }

    /// The earliest moment something here may end on its own: a reader's
    /// last lease, or the hash's deadline.
    pub fn next_end(&self) -> Option<i64> {
        let reads = self.readers.iter().filter_map(Reader::lease_end);
        self.expires_at.into_iter().chain(reads).min()
    }

    /// Every field of the hash, `mode` included.
    fn fields(&self) -> Vec<Owner> {
        let mut fields = vec![Owner::from(MODE_FIELD)];
        fields.extend(self.writer.iter().map(|(o, _)| write_field(o)));
        fields.extend(self.readers.iter().map(|r| r.owner.clone()));
        fields
    }

    fn has_field(&self, field: &[u8]) -> bool {
        field == MODE_FIELD
            || self.reader(field).is_some()
            || self
                .writer
                .as_ref()
                .is_some_and(|(o, _)| *write_field(o) == *field)
    }
}

/// Redisson's messages on `redisson_rwlock:{name}` when the hash goes: `0`
/// after a read unlock, `1` after a write unlock.
pub const READ_RELEASED: &[u8] = b"0";
pub const WRITE_RELEASED: &[u8] = b"1";

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
            self.writes.push(Write::Delete);
            self.writes.push(Write::NotifyReadWrite(READ_RELEASED));
            return;
        }
        for reader in gone {
            self.writes.push(Write::RemoveHolder {
                owner: reader.owner,
            });
        }
        self.follow_leases();
    }

    /// LOCK.RACQUIRE / LOCK.WACQUIRE, after the queue was settled.
    pub(crate) fn acquire_shared(
        &mut self,
        queue: &Fifo<T>,
        req: &Request,
        kind: Kind,
        may_wait: bool,
    ) -> Result<Acquired, LockError> {
        check_owner(&req.owner)?;
        let admission = match &self.state {
            LockState::Free => Admission::Fresh,
            LockState::Shared(rw) => rw.admission(kind, &req.owner),
            LockState::Held { .. } => return Err(LockError::holds_exclusive_lock()),
        };
        match admission {
            Admission::Reentry => {
                let reply = self.grant_shared(req, kind)?;
                self.tally.reentered += 1;
                Ok(Acquired::Now(reply))
            }
            Admission::Fresh if queue.is_empty() => {
                let reply = self.grant_shared(req, kind)?;
                self.tally.acquired += 1;
                Ok(Acquired::Now(reply))
            }
            Admission::Refused(e) => Err(e),
            Admission::Fresh | Admission::Busy if may_wait => Ok(Acquired::Wait),
            Admission::Fresh | Admission::Busy => Ok(Acquired::Busy),
        }
    }

    /// One more hold of `kind` for `req.owner` on a lock that is free or
    /// read-write and admits it. Checks everything before writing.
    pub(crate) fn grant_shared(&mut self, req: &Request, kind: Kind) -> Result<i64, LockError> {
        let at = self.deadline(req.lease_ms)?;
        let token = if req.fence {
            Some(self.next_token()?)
        } else {
            None
        };
        let mut rw = match std::mem::replace(&mut self.state, LockState::Free) {
            LockState::Free => RwHolds::default(),
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
                self.writes.push(Write::SetMode(mode));
            }
        }
        match kind {
            Kind::Read => {
                self.writes.push(Write::SetHolds {
                    owner: req.owner.clone(),
                    holds,
                });
                self.writes.push(Write::SetReadLease {
                    owner: req.owner.clone(),
                    hold: holds,
                    at,
                });
            }
            Kind::Write => self.writes.push(Write::SetHolds {
                owner: write_field(&req.owner),
                holds,
            }),
        }
        for field in std::mem::take(&mut self.vacated) {
            if !rw.has_field(&field) {
                self.writes.push(Write::RemoveHolder { owner: field });
            }
        }
        self.vacated_notice = None;
        self.state = LockState::Shared(rw);
        self.follow_leases();
        if let Some(t) = token {
            self.writes.push(Write::IncrToken { to: t });
            self.token = Some(Ok(t));
        }
        Ok(token.unwrap_or(holds))
    }

    /// LOCK.RELEASE on a read-write lock.
    pub(crate) fn release_shared(
        &mut self,
        queue: &mut Fifo<T>,
        who: &[u8],
        kind: Option<Kind>,
    ) -> Result<i64, LockError> {
        let LockState::Shared(rw) = &mut self.state else {
            return Err(LockError::not_owner());
        };
        let (kind, left) = rw.release(kind, who)?;
        let field: Owner = match kind {
            Kind::Read => {
                self.writes.push(Write::DropReadLease {
                    owner: who.into(),
                    hold: left + 1,
                });
                who.into()
            }
            Kind::Write => write_field(who),
        };
        if rw.is_free() {
            self.state = LockState::Free;
            self.vacated = vec![field, Owner::from(MODE_FIELD)];
            self.vacated_notice = Some(Write::NotifyReadWrite(match kind {
                Kind::Read => READ_RELEASED,
                Kind::Write => WRITE_RELEASED,
            }));
            self.tally.released += 1;
        } else {
            let write_ended = kind == Kind::Write && left == 0;
            self.writes.push(if left == 0 {
                Write::RemoveHolder { owner: field }
            } else {
                Write::SetHolds {
                    owner: field,
                    holds: left,
                }
            });
            if write_ended {
                self.writes.push(Write::SetMode(Kind::Read));
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
                self.writes.push(Write::SetReadLease {
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
                self.writes.push(Write::DropReadLease {
                    owner: reader.owner.clone(),
                    hold,
                });
            }
        }
        self.vacated_notice = Some(Write::NotifyReadWrite(if rw.writer.is_some() {
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
            self.writes.push(Write::ExpireAt(at));
        }
    }
}

/// How many lease keys a reader's holds have: one each, up to the cap (a
/// hash written by others may claim any count; a command never touches
/// more keys than a reader taking holds through this module could have).
pub fn lease_keys(holds: i64) -> i64 {
    holds.clamp(0, MAX_READ_HOLDS)
}

fn not_rw(why: impl std::fmt::Display) -> LockError {
    LockError::not_a_lock(format_args!("not a read-write lock: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::{Answer, LockKind};

    const NOW: i64 = 1_000_000;
    const T: i64 = NOW + 100;

    fn o(s: &str) -> Owner {
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
        }
    }

    fn tx(state: LockState) -> Transition<Request> {
        Transition::new(state, NOW, Some(Ok(0)))
    }

    fn shared(t: &Transition<Request>) -> &RwHolds {
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
            .filter(|w| matches!(w.answer, Answer::Granted(_)))
            .map(|w| w.id)
            .collect()
    }

    #[test]
    fn readers_share_and_a_writer_is_alone() {
        let mut h = RwHolds::default();
        assert_eq!(h.admission(Kind::Read, b"a"), Admission::Fresh);
        assert_eq!(h.grant(Kind::Read, &o("a"), T), Ok(1));
        assert_eq!(h.admission(Kind::Read, b"b"), Admission::Fresh);
        assert_eq!(h.grant(Kind::Read, &o("b"), T), Ok(1));
        assert_eq!(h.admission(Kind::Read, b"a"), Admission::Reentry);
        assert_eq!(h.grant(Kind::Read, &o("a"), T + 5), Ok(2));
        assert_eq!(h.reader(b"a").unwrap().leases, vec![Some(T), Some(T + 5)]);
        assert_eq!(h.admission(Kind::Write, b"c"), Admission::Busy);

        let mut w = RwHolds::default();
        assert_eq!(w.grant(Kind::Write, &o("c"), T), Ok(1));
        assert_eq!(w.admission(Kind::Read, b"a"), Admission::Busy);
        assert_eq!(w.admission(Kind::Write, b"a"), Admission::Busy);
        assert_eq!(w.admission(Kind::Write, b"c"), Admission::Reentry);
    }

    #[test]
    fn a_writer_downgrades_by_taking_read_holds_first() {
        let mut h = RwHolds::default();
        h.grant(Kind::Write, &o("w"), T).unwrap();
        assert_eq!(h.admission(Kind::Read, b"w"), Admission::Reentry);
        assert_eq!(h.grant(Kind::Read, &o("w"), T), Ok(1));
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
        h.grant(Kind::Read, &o("a"), T).unwrap();
        assert_eq!(h.admission(Kind::Write, b"a"), Admission::Reentry);
        h.grant(Kind::Read, &o("b"), T).unwrap();
        assert_eq!(
            h.admission(Kind::Write, b"a"),
            Admission::Refused(LockError::no_upgrade())
        );
        assert_eq!(h.admission(Kind::Write, b"z"), Admission::Busy);
    }

    #[test]
    fn release_by_a_stranger_is_notowner() {
        let mut h = RwHolds::default();
        h.grant(Kind::Read, &o("a"), T).unwrap();
        assert_eq!(h.release(None, b"b"), Err(LockError::not_owner()));
        assert_eq!(
            h.release(Some(Kind::Write), b"a"),
            Err(LockError::not_owner())
        );
        assert_eq!(h.holds_of(Kind::Read, b"a"), Some(1));
    }

    #[test]
    fn read_holds_are_capped() {
        let mut h = RwHolds::default();
        for n in 1..=MAX_READ_HOLDS {
            assert_eq!(h.grant(Kind::Read, &o("a"), T), Ok(n));
        }
        assert_eq!(
            h.grant(Kind::Read, &o("a"), T),
            Err(LockError::too_many_read_holds(MAX_READ_HOLDS))
        );
        assert_eq!(h.holds_of(Kind::Read, b"a"), Some(MAX_READ_HOLDS));
    }

    #[test]
    fn a_huge_foreign_read_count_touches_at_most_the_cap_of_lease_keys() {
        let rw = RwHolds {
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
        assert_eq!(t.writes.len(), MAX_READ_HOLDS as usize + 1);
        let mut t = tx(LockState::Shared(rw));
        assert_eq!(t.force_release(&mut Fifo::default()), 1);
        assert_eq!(t.writes.len(), MAX_READ_HOLDS as usize + 2);
    }

    #[test]
    fn hash_layout_is_redissons_and_foreign_hashes_are_refused() {
        let redisson = fields(&[("mode", "write"), ("u:1:write", "2"), ("u:1", "1")]);
        let h = RwHolds::from_hash(&redisson).unwrap().unwrap();
        assert_eq!(h.writer, Some((o("u:1"), 2)));
        assert_eq!(h.holds_of(Kind::Read, b"u:1"), Some(1));
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
        assert!(check_owner(b"mode").is_err());
        assert!(check_owner(b"u:1:write").is_err());
        assert!(check_owner(b"u:1").is_ok());
    }

    #[test]
    fn a_first_read_writes_mode_holds_lease_key_and_ttl() {
        let mut t = tx(LockState::Free);
        let r = t.acquire(&mut Fifo::default(), &req(LockKind::Read, "a", 100), false);
        assert_eq!(r, Ok(Acquired::Now(1)));
        assert_eq!(
            t.writes,
            vec![
                Write::SetMode(Kind::Read),
                Write::SetHolds {
                    owner: o("a"),
                    holds: 1
                },
                Write::SetReadLease {
                    owner: o("a"),
                    hold: 1,
                    at: NOW + 100
                },
                Write::ExpireAt(NOW + 100),
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
            t.writes.last(),
            Some(&Write::SetReadLease {
                owner: o("b"),
                hold: 1,
                at: NOW + 100
            })
        );
        t.writes.clear();
        // The long one leaves: the hash follows the short one.
        assert_eq!(t.release(&mut q, b"a", None), Ok(0));
        assert_eq!(
            t.writes,
            vec![
                Write::DropReadLease {
                    owner: o("a"),
                    hold: 1
                },
                Write::RemoveHolder { owner: o("a") },
                Write::ExpireAt(NOW + 100),
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
            t.writes.clear();
            assert_eq!(t.release(&mut q, b"a", None), Ok(0));
            assert_eq!(t.state(), &LockState::Free);
            let tail = &t.writes[t.writes.len() - 2..];
            assert_eq!(tail, &[Write::Delete, Write::NotifyReadWrite(message)]);
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
            Ok(Acquired::Wait)
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
        assert!(t.writes.contains(&Write::RemoveHolder {
            owner: o("w:write")
        }));
        assert!(!t.writes.contains(&Write::Delete));
        // While w2 waits, a new reader queues even though readers hold.
        assert_eq!(
            t.acquire(&mut q, &req(LockKind::Read, "r9", 100), true),
            Ok(Acquired::Wait)
        );
        // A reader already holding re-enters without queueing.
        assert_eq!(
            t.acquire(&mut q, &req(LockKind::Read, "r1", 100), true),
            Ok(Acquired::Now(2))
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
        assert!(t.writes.contains(&Write::RemoveHolder { owner: o("mode") }));
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
        let e = t.release(&mut q, b"a", Some(Kind::Read)).unwrap_err();
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
            Ok(Acquired::Now(1))
        );
        assert_eq!(shared(&t).mode(), Some(Kind::Write));
        assert!(t.writes.contains(&Write::SetMode(Kind::Write)));
    }

    #[test]
    fn readers_whose_leases_ran_out_are_dropped_when_the_lock_is_next_read() {
        let reader = |name: &str, leases: Vec<Option<i64>>| Reader {
            owner: o(name),
            holds: leases.len() as i64,
            leases,
        };
        let rw = RwHolds {
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
            t.writes,
            vec![Write::RemoveHolder { owner: o("dead") }, Write::ExpireAt(T)]
        );
        assert_eq!(t.next_end(), Some(T));

        let all_dead = RwHolds {
            readers: vec![reader("dead", vec![None])],
            ..rw
        };
        let t = tx(LockState::Shared(all_dead));
        assert_eq!(t.state(), &LockState::Free);
        assert_eq!(
            t.writes,
            vec![Write::Delete, Write::NotifyReadWrite(READ_RELEASED)]
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
        t.writes.clear();
        assert_eq!(t.renew(b"w", 50), Ok(50));
        assert_eq!(
            t.writes,
            vec![
                Write::SetReadLease {
                    owner: o("w"),
                    hold: 1,
                    at: NOW + 50
                },
                Write::ExpireAt(NOW + 50),
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
        t.writes.clear();
        assert_eq!(t.force_release(&mut q), 1);
        assert_eq!(
            t.writes,
            vec![
                Write::DropReadLease {
                    owner: o("a"),
                    hold: 1
                },
                Write::DropReadLease {
                    owner: o("a"),
                    hold: 2
                },
                Write::Delete,
                Write::NotifyReadWrite(READ_RELEASED),
            ]
        );
    }
}
