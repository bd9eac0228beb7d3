//! Atomic multi-locks: one caller takes several exclusive locks at once, all
//! or none. A caller that must wait waits as one unit: it holds none of its
//! keys meanwhile and keeps its place in every key's queue; it is granted
//! all of them in one step when it is first in line on each and each is free
//! (or already its own). Since every key's queue is ordered by arrival, two
//! multi-lock callers are in the same order on every key they share, so
//! they can never wait for each other, whatever order they name the keys in.

use super::args::parse_i64;
use super::error::LockError;
use super::state::LockState;

/// What a multi-lock caller may do with one of its keys now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyAccess {
    /// Free, and nobody queued ahead of the caller.
    Free,
    /// Already the caller's: one more hold, whoever waits.
    Reentry,
    /// Held by another owner, or free with others first in line.
    Busy,
}

/// Whether `owner` may take `state` now. `first_in_line`: nobody is queued
/// on the key, or the caller's own entry heads its queue.
pub fn access(
    state: &LockState,
    owner: &[u8],
    first_in_line: bool,
) -> Result<KeyAccess, LockError> {
    match state {
        LockState::Shared(_) => Err(LockError::holds_read_write_lock()),
        LockState::Held { owner: o, .. } if o[..] == *owner => Ok(KeyAccess::Reentry),
        LockState::Held { .. } => Ok(KeyAccess::Busy),
        LockState::Free if first_in_line => Ok(KeyAccess::Free),
        LockState::Free => Ok(KeyAccess::Busy),
    }
}

/// `numkeys key [key ...] owner` at the start of `args` (the command name
/// excluded): the number of keys, checked against what follows (the keys,
/// then at least the owner).
pub fn parse_numkeys(args: &[&[u8]]) -> Result<usize, LockError> {
    let Some(raw) = args.first() else {
        return Err(LockError::numkeys_missing());
    };
    let n = parse_i64(raw).ok_or_else(|| LockError::numkeys_invalid(raw))?;
    if n <= 0 {
        return Err(LockError::numkeys_invalid(raw));
    }
    let follow = args.len() - 1;
    match usize::try_from(n) {
        Ok(keys) if keys < follow => Ok(keys),
        Ok(keys) if keys == follow => Err(LockError::owner_missing(keys)),
        _ => Err(LockError::numkeys_too_many(n, follow)),
    }
}

/// A key named twice would be taken twice in one step; refused.
pub fn check_distinct(keys: &[&[u8]]) -> Result<(), LockError> {
    let mut seen: Vec<&[u8]> = keys.to_vec();
    seen.sort_unstable();
    match seen.windows(2).find(|w| w[0] == w[1]) {
        Some(w) => Err(LockError::duplicate_key(w[0])),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_follows_the_queue_and_the_holder() {
        let held = |o: &str| LockState::Held {
            owner: o.as_bytes().into(),
            holds: 1,
        };
        assert_eq!(access(&LockState::Free, b"a", true), Ok(KeyAccess::Free));
        assert_eq!(access(&LockState::Free, b"a", false), Ok(KeyAccess::Busy));
        assert_eq!(access(&held("a"), b"a", false), Ok(KeyAccess::Reentry));
        assert_eq!(access(&held("b"), b"a", true), Ok(KeyAccess::Busy));
        let rw = LockState::Shared(Default::default());
        assert_eq!(
            access(&rw, b"a", true),
            Err(LockError::holds_read_write_lock())
        );
    }

    #[test]
    fn numkeys_is_checked_against_the_arguments() {
        let args: Vec<&[u8]> = vec![b"2", b"k1", b"k2", b"owner", b"PX", b"10"];
        assert_eq!(parse_numkeys(&args), Ok(2));
        assert_eq!(parse_numkeys(&args[..4]), Ok(2));
        assert_eq!(parse_numkeys(&args[..3]), Err(LockError::owner_missing(2)));
        assert_eq!(
            parse_numkeys(&args[..2]),
            Err(LockError::numkeys_too_many(2, 1))
        );
        for bad in [&b"0"[..], b"-1", b"x", b""] {
            let mut a = args.clone();
            a[0] = bad;
            assert_eq!(
                parse_numkeys(&a),
                Err(LockError::numkeys_invalid(bad)),
                "{bad:?}"
            );
        }
        let huge: Vec<&[u8]> = vec![b"9223372036854775807", b"k", b"o"];
        assert_eq!(
            parse_numkeys(&huge),
            Err(LockError::numkeys_too_many(i64::MAX, 2))
        );
        assert_eq!(
            LockError::owner_missing(2).to_string(),
            "ERR the owner is missing: numkeys is 2 and the 2 arguments after it are the keys; the owner follows them"
        );
        assert_eq!(
            LockError::numkeys_too_many(3, 2).to_string(),
            "ERR numkeys is 3 but only 2 arguments follow it: 3 keys and then the owner are needed"
        );
        assert_eq!(parse_numkeys(&[]), Err(LockError::numkeys_missing()));
    }

    #[test]
    fn a_key_named_twice_is_refused() {
        assert!(check_distinct(&[b"a", b"b", b"c"]).is_ok());
        assert_eq!(
            check_distinct(&[b"a", b"b", b"a"]),
            Err(LockError::duplicate_key(b"a"))
        );
    }
}
