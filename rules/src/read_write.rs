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
use super::request::{FieldName, Side};

pub const MODE_FIELD: &[u8] = b"mode";
pub const WRITE_SUFFIX: &[u8] = b":write";

/// Each read hold is a key; an owner's re-entries are capped so that one
/// caller cannot make a release or renewal touch an unbounded number.
pub const MAX_READ_HOLDS: i64 = 1000;

/// One reader: its read holds and, per hold (hold 1 first), when its lease
/// key ends (`None` once the key is gone: that hold's lease ran out).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reader {
    pub owner: FieldName,
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
pub struct ReadWriteHolds {
    /// The writer and its write holds (mode `write`).
    pub writer: Option<(FieldName, i64)>,
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
pub enum HoldAdmission {
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
pub fn write_field(owner: &[u8]) -> FieldName {
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

impl ReadWriteHolds {
    pub fn is_free(&self) -> bool {
        self.writer.is_none() && self.readers.is_empty()
    }

    pub fn mode(&self) -> Option<Side> {
        if self.writer.is_some() {
            Some(Side::Write)
        } else if self.readers.is_empty() {
            None
        } else {
            Some(Side::Read)
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

    pub fn holds_of(&self, kind: Side, who: &[u8]) -> Option<i64> {
        match kind {
            Side::Write => self
                .writer
                .as_ref()
                .filter(|(o, _)| o[..] == *who)
                .map(|(_, n)| *n),
            Side::Read => self.reader(who).map(|r| r.holds),
        }
    }

    pub fn reader(&self, who: &[u8]) -> Option<&Reader> {
        self.readers.iter().find(|r| r.owner[..] == *who)
    }

    pub(crate) fn is_writer(&self, who: &[u8]) -> bool {
        self.holds_of(Side::Write, who).is_some()
    }

    pub fn admission(&self, kind: Side, who: &[u8]) -> HoldAdmission {
        match kind {
            Side::Read if self.holds_of(Side::Read, who).is_some() || self.is_writer(who) => {
                HoldAdmission::Reentry
            }
            Side::Read if self.writer.is_none() => HoldAdmission::Fresh,
            Side::Read => HoldAdmission::Busy,
            Side::Write if self.is_writer(who) => HoldAdmission::Reentry,
            Side::Write if self.is_free() => HoldAdmission::Fresh,
            Side::Write => match self.readers.as_slice() {
                // The only holder, a reader: taking the write lock cannot
                // wait for anyone (an upgrade).
                [only] if self.writer.is_none() && only.owner[..] == *who => HoldAdmission::Reentry,
                readers if readers.iter().any(|r| r.owner[..] == *who) => {
                    HoldAdmission::Refused(LockError::no_upgrade())
                }
                _ => HoldAdmission::Busy,
            },
        }
    }

    /// One more hold of `kind` for `who` until `until`; the caller checked
    /// [`Self::admission`]. Returns that kind's holds after it. Nothing
    /// changes when it fails.
    pub fn grant(&mut self, kind: Side, who: &FieldName, until: i64) -> Result<i64, LockError> {
        match kind {
            Side::Write => match &mut self.writer {
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
            Side::Read => match self.readers.iter_mut().find(|r| r.owner == *who) {
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
    pub fn release(&mut self, kind: Option<Side>, who: &[u8]) -> Result<(Side, i64), LockError> {
        let kind = match kind {
            Some(kind) => kind,
            None => match (
                self.holds_of(Side::Write, who),
                self.holds_of(Side::Read, who),
            ) {
                (Some(_), Some(_)) => return Err(LockError::ambiguous_release()),
                (Some(_), None) => Side::Write,
                _ => Side::Read,
            },
        };
        let left = match kind {
            Side::Write => match &mut self.writer {
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
            Side::Read => {
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
    pub(crate) fn fields(&self) -> Vec<FieldName> {
        let mut fields = vec![FieldName::from(MODE_FIELD)];
        fields.extend(self.writer.iter().map(|(o, _)| write_field(o)));
        fields.extend(self.readers.iter().map(|r| r.owner.clone()));
        fields
    }

    pub(crate) fn has_field(&self, field: &[u8]) -> bool {
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

/// How many lease keys a reader's holds have: one each, up to the cap (a
/// hash written by others may claim any count; a command never touches
/// more keys than a reader taking holds through this module could have).
pub fn lease_keys(holds: i64) -> i64 {
    holds.clamp(0, MAX_READ_HOLDS)
}

fn not_rw(why: impl std::fmt::Display) -> LockError {
    LockError::not_a_lock(format_args!("not a read-write lock: {why}"))
}
