//! Leader election on top of the lock: the leader is the holder of the
//! election's lock, its term the fencing token of its grant. What the
//! module writes besides the lock is the leader record (`{key}:leader`, see
//! [`crate::keys::leader_key`]): who leads, in which term, with which value.
//! These rules say what the record holds, when a long poll (ELECT.OBSERVE)
//! is answered, and when a leader's connection has been silent too long to
//! be renewed.

use crate::args::parse_i64;
use crate::state::LockState;

/// The leader record's fields.
pub const CANDIDATE: &[u8] = b"candidate";
pub const TERM: &[u8] = b"term";
pub const VALUE: &[u8] = b"value";

/// A key at a leader record's name that is not one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotARecord;

/// Who leads, as the leader record says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    pub candidate: Vec<u8>,
    pub term: i64,
    pub value: Option<Vec<u8>>,
}

impl Leader {
    /// Reads a record's fields; `None` unless it names a candidate and a
    /// positive term (a record written by hand is ignored, not trusted).
    pub fn from_fields(fields: &[(Vec<u8>, Vec<u8>)]) -> Option<Leader> {
        let get = |name: &[u8]| fields.iter().find(|(f, _)| f == name).map(|(_, v)| v);
        let candidate = get(CANDIDATE)?.clone();
        let term = parse_i64(get(TERM)?).filter(|t| *t > 0)?;
        Some(Leader {
            candidate,
            term,
            value: get(VALUE).cloned(),
        })
    }

    /// What a key at the record's name holds: `Ok(None)` nothing (an empty
    /// hash), `Ok(Some)` a record, `Err` anything else (a lock, a hash with
    /// other fields: a key of the user's that happens to have that name,
    /// which the module must neither read as a record nor overwrite).
    pub fn from_record_hash(fields: &[(Vec<u8>, Vec<u8>)]) -> Result<Option<Leader>, NotARecord> {
        if fields.is_empty() {
            return Ok(None);
        }
        let ours = fields
            .iter()
            .all(|(f, _)| [CANDIDATE, TERM, VALUE].contains(&&f[..]));
        match Leader::from_fields(fields) {
            Some(leader) if ours => Ok(Some(leader)),
            _ => Err(NotARecord),
        }
    }

    /// The record as written: candidate, term, then the value if any.
    pub fn fields(&self) -> Vec<(&'static [u8], Vec<u8>)> {
        let mut out = vec![
            (CANDIDATE, self.candidate.clone()),
            (TERM, self.term.to_string().into_bytes()),
        ];
        if let Some(value) = &self.value {
            out.push((VALUE, value.clone()));
        }
        out
    }

    /// The term observers compare with; 0 when nobody leads.
    pub fn term_of(leader: Option<&Leader>) -> i64 {
        leader.map_or(0, |l| l.term)
    }
}

/// Who leads: the record's leader if it holds the lock now. A record whose
/// candidate no longer holds the lock (its lease ran out, the lock was
/// deleted or taken outside ELECT.*) is stale, and nobody leads by it; a
/// lock held by someone the record does not name has no known term either.
pub fn current_leader(state: &LockState, record: Option<Leader>) -> Option<Leader> {
    let record = record?;
    match state {
        LockState::Held { owner, .. } if owner[..] == record.candidate[..] => Some(record),
        _ => None,
    }
}

/// The exclusive holder of an election's lock, if any: its candidate.
pub fn holder(state: &LockState) -> Option<&[u8]> {
    match state {
        LockState::Held { owner, .. } => Some(owner),
        _ => None,
    }
}

/// Whether an observer that last saw `seen_term` (0: nobody, or nothing
/// yet) is answered now: the leadership differs from what it saw.
pub fn observer_answered(current_term: i64, seen_term: i64) -> bool {
    current_term != seen_term
}

/// Whether a leadership may be renewed when the connection keeping it has
/// been idle `idle_s` whole seconds (Redis counts a client's idle time in
/// seconds, so up to a second more than that may have passed; and up to a
/// second less): renewed only while it was heard from within its lease.
/// A stopped or cut-off leader then loses its renewals after one lease of
/// silence, and its leadership ends at the end of the lease it had.
pub fn heard_within_lease(idle_s: i64, lease_ms: i64) -> bool {
    idle_s.saturating_sub(1).saturating_mul(1000) < lease_ms
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(candidate: &str, term: i64, value: Option<&str>) -> Leader {
        Leader {
            candidate: candidate.into(),
            term,
            value: value.map(Into::into),
        }
    }

    fn owned(fields: Vec<(&'static [u8], Vec<u8>)>) -> Vec<(Vec<u8>, Vec<u8>)> {
        fields.into_iter().map(|(f, v)| (f.to_vec(), v)).collect()
    }

    #[test]
    fn a_record_reads_back_what_was_written() {
        for leader in [record("a b", 17, Some("10.0.0.1:80")), record("c", 1, None)] {
            assert_eq!(Leader::from_fields(&owned(leader.fields())), Some(leader));
        }
    }

    #[test]
    fn only_a_hash_of_the_records_fields_is_a_record() {
        let leader = record("a", 17, Some("v"));
        assert_eq!(
            Leader::from_record_hash(&owned(leader.fields())),
            Ok(Some(leader))
        );
        assert_eq!(Leader::from_record_hash(&[]), Ok(None));
        // A lock (owner -> holds), a record with a field of someone else's.
        let lock = vec![(b"a".to_vec(), b"1".to_vec())];
        assert_eq!(Leader::from_record_hash(&lock), Err(NotARecord));
        let mut more = owned(record("a", 1, None).fields());
        more.push((b"other".to_vec(), b"x".to_vec()));
        assert_eq!(Leader::from_record_hash(&more), Err(NotARecord));
    }

    #[test]
    fn a_record_without_candidate_or_positive_term_is_ignored() {
        let no_term = vec![(b"candidate".to_vec(), b"a".to_vec())];
        assert_eq!(Leader::from_fields(&no_term), None);
        for term in ["0", "-3", "x", ""] {
            let fields = vec![
                (b"candidate".to_vec(), b"a".to_vec()),
                (b"term".to_vec(), term.as_bytes().to_vec()),
            ];
            assert_eq!(Leader::from_fields(&fields), None, "term {term:?}");
        }
    }

    #[test]
    fn the_leader_is_the_record_only_while_its_candidate_holds_the_lock() {
        let state = |owner: &str| LockState::Held {
            owner: owner.as_bytes().into(),
            holds: 1,
        };
        let r = record("a", 5, None);
        assert_eq!(
            current_leader(&state("a"), Some(r.clone())),
            Some(r.clone())
        );
        assert_eq!(current_leader(&state("b"), Some(r.clone())), None);
        assert_eq!(current_leader(&LockState::Free, Some(r)), None);
        assert_eq!(current_leader(&state("a"), None), None);
        assert_eq!(holder(&state("a")), Some(&b"a"[..]));
        assert_eq!(holder(&LockState::Free), None);
    }

    #[test]
    fn observers_are_answered_when_the_term_differs() {
        assert!(observer_answered(5, 0));
        assert!(observer_answered(0, 5));
        assert!(observer_answered(6, 5));
        assert!(!observer_answered(5, 5));
        assert!(!observer_answered(0, 0));
        assert_eq!(Leader::term_of(None), 0);
        assert_eq!(Leader::term_of(Some(&record("a", 9, None))), 9);
    }

    #[test]
    fn a_leadership_is_renewed_only_while_heard_from_within_its_lease() {
        // Idle 0 or 1 s: perhaps under a second of silence.
        assert!(heard_within_lease(0, 1000));
        assert!(heard_within_lease(1, 1000));
        // Idle 2 s: at least a second of silence, a whole 1 s lease.
        assert!(!heard_within_lease(2, 1000));
        assert!(heard_within_lease(5, 5000));
        assert!(!heard_within_lease(6, 5000));
        assert!(heard_within_lease(i64::MAX, i64::MAX) || !heard_within_lease(i64::MAX, 1));
    }
}
