//! What a lock key holds, as far as the rules care: nothing, Redisson's
//! exclusive lock (RLock), or its read-write lock (RReadWriteLock).

use super::args::parse_i64;
use super::error::{printable, LockError};
use super::read_write::ReadWriteHolds;
use super::request::{FieldName, Side};

/// What the lock key holds, as far as the rules care.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockState {
    Free,
    /// An exclusive lock (Redisson's RLock).
    Held {
        owner: FieldName,
        holds: i64,
    },
    /// A read-write lock (Redisson's RReadWriteLock) with at least one hold.
    Shared(ReadWriteHolds),
}

impl LockState {
    /// Reads Redisson's RLock layout: a hash with exactly one field, the
    /// owner, whose value is its hold count (a positive integer).
    pub fn from_hash(fields: &[(Vec<u8>, Vec<u8>)]) -> Result<Self, LockError> {
        match fields {
            [] => Ok(Self::Free),
            [(owner, count)] => match parse_i64(count) {
                Some(holds) if holds > 0 => Ok(Self::Held {
                    owner: owner.as_slice().into(),
                    holds,
                }),
                _ => Err(LockError::not_a_lock(format_args!(
                    "field '{}' holds '{}', not a positive hold count",
                    printable(owner),
                    printable(count)
                ))),
            },
            many => Err(Self::too_many_fields(many.len())),
        }
    }

    pub fn too_many_fields(n: usize) -> LockError {
        LockError::not_a_lock(format_args!("it has {n} fields, a lock has one"))
    }

    /// Whether `who` has any hold, of either side of a read-write lock.
    pub fn held_by(&self, who: &[u8]) -> bool {
        match self {
            Self::Free => false,
            Self::Held { owner, .. } => owner[..] == *who,
            Self::Shared(rw) => {
                rw.holds_of(Side::Read, who).is_some() || rw.holds_of(Side::Write, who).is_some()
            }
        }
    }

    /// Every owner with a hold, each once.
    pub fn owners(&self) -> Vec<&[u8]> {
        match self {
            Self::Free => Vec::new(),
            Self::Held { owner, .. } => vec![&owner[..]],
            Self::Shared(rw) => {
                let mut owners: Vec<&[u8]> = rw.readers.iter().map(|r| &r.owner[..]).collect();
                if let Some((writer, _)) = &rw.writer {
                    if !owners.contains(&&writer[..]) {
                        owners.push(writer);
                    }
                }
                owners
            }
        }
    }

    pub fn holds_of(&self, who: &[u8]) -> Option<i64> {
        match self {
            Self::Held { owner, holds } if owner[..] == *who => Some(*holds),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(owner: &str, holds: i64) -> LockState {
        LockState::Held {
            owner: owner.as_bytes().into(),
            holds,
        }
    }

    #[test]
    fn parses_the_redisson_layout() {
        let f = |k: &str, v: &str| (k.as_bytes().to_vec(), v.as_bytes().to_vec());
        assert_eq!(LockState::from_hash(&[]), Ok(LockState::Free));
        assert_eq!(LockState::from_hash(&[f("u:1", "3")]), Ok(held("u:1", 3)));
        for bad in ["0", "-1", "x", "", "01", "1.0"] {
            let e = LockState::from_hash(&[f("u:1", bad)]).unwrap_err();
            assert!(e.to_string().starts_with("WRONGTYPE"), "{e}");
        }
        let e = LockState::from_hash(&[f("mode", "read"), f("u:1", "1")]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "WRONGTYPE key holds a hash that is not a lock: it has 2 fields, a lock has one"
        );
    }
}
