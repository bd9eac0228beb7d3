//! Atomic multi-locks: one caller takes several exclusive locks at once, all
//! or none. A caller that must wait waits as one unit: it holds none of its
//! keys meanwhile and keeps its place in every key's queue; it is granted
//! all of them in one step when it is first in line on each and each is free
//! (or already its own). Since every key's queue is ordered by arrival, two
//! multi-lock callers are in the same order on every key they share, so
//! they can never wait for each other, whatever order they name the keys in.

use super::args::parse_i64;
use super::error::LockError;
use super::request::{Queued, Request};
use super::state::LockState;
use super::transition::Transition;

/// What a multi-lock caller's keys allow now: all of them, or none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllOrNone {
    /// Every key is the caller's now: per key, its hold count after this
    /// take, or its fencing token.
    Taken(Vec<i64>),
    /// A key is held by someone else, or free with others first in line:
    /// nothing is taken; the caller waits (or is answered nil).
    Busy,
    /// The caller can never have a key this way (a read-write lock, a
    /// fencing token that cannot be issued, a lease or hold count out of
    /// range): nothing is taken.
    Refused(LockError),
}

/// The all-or-none decision of a multi-lock caller asking for `req`, on
/// each of its keys' transitions (begun, and settled as far as its queue
/// allows) with whether the caller is first in line there: nobody queued
/// on the key, or the caller's own entry heads its queue. LOCK.MACQUIRE
/// decides with it, and so does the hand-off to a multi-lock waiter.
///
/// A refusal on any key wins, busy keys or not: a caller whose fencing
/// token cannot be issued is told so at once, as a single-key caller is,
/// and one that names a read-write lock would wait forever. Otherwise, if
/// every key can be taken, each one is, in one step.
pub fn take_all<'t, T: Queued + 't>(
    keys: impl IntoIterator<Item = (&'t mut Transition<T>, bool)>,
    req: &Request,
) -> AllOrNone {
    let mut keys: Vec<(&mut Transition<T>, bool)> = keys.into_iter().collect();
    let mut busy = false;
    for (tx, first_in_line) in &mut keys {
        if req.fence {
            if let Err(e) = tx.next_token() {
                return AllOrNone::Refused(e);
            }
        }
        match access(tx.state(), &req.owner, *first_in_line) {
            Err(e) => return AllOrNone::Refused(e),
            Ok(KeyAccess::Busy) => busy = true,
            // A free key with a Redisson fair queue goes to that queue's
            // head first.
            Ok(KeyAccess::Free) if tx.keep_for_fair(None) => busy = true,
            Ok(KeyAccess::Free | KeyAccess::Reentry) => {}
        }
    }
    if busy {
        return AllOrNone::Busy;
    }
    if let Some(e) = keys.iter().find_map(|(tx, _)| tx.check_take(req).err()) {
        return AllOrNone::Refused(e);
    }
    let mut replies = Vec::with_capacity(keys.len());
    for (tx, _) in &mut keys {
        match tx.take(req) {
            Ok(reply) => replies.push(reply),
            // `check_take` said it would not: a bug of these rules, which
            // must not take some keys and not others.
            Err(e) => return AllOrNone::Refused(e),
        }
    }
    AllOrNone::Taken(replies)
}

/// Whether `owner` may release one hold of each of these locks (LOCK.MRELEASE,
/// all or none): each must be an exclusive lock it holds.
pub fn may_release_all<'s>(
    states: impl IntoIterator<Item = &'s LockState>,
    owner: &[u8],
) -> Result<(), LockError> {
    for state in states {
        match state {
            LockState::Shared(_) => return Err(LockError::holds_read_write_lock()),
            state if state.holds_of(owner).is_none() => return Err(LockError::not_owner()),
            _ => {}
        }
    }
    Ok(())
}

/// What a multi-lock caller may do with one of its keys now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyAccess {
    /// Free, and nobody queued ahead of the caller.
    Free,
    /// Already the caller's: one more hold, whoever waits.
    Reentry,
    /// Held by another owner, or free with others first in line.
    Busy,
}

/// Whether `owner` may take `state` now.
fn access(state: &LockState, owner: &[u8], first_in_line: bool) -> Result<KeyAccess, LockError> {
    match state {
        LockState::Shared(_) => Err(LockError::holds_read_write_lock()),
        LockState::Held { owner: o, .. } if o[..] == *owner => Ok(KeyAccess::Reentry),
        LockState::Held { .. } => Ok(KeyAccess::Busy),
        LockState::Free if first_in_line => Ok(KeyAccess::Free),
        LockState::Free => Ok(KeyAccess::Busy),
    }
}

impl<T: Queued> Transition<T> {
    /// Whether [`Self::take`] would succeed: the lease deadline, the hold
    /// count and the fencing token can all be had.
    fn check_take(&self, req: &Request) -> Result<(), LockError> {
        self.deadline(req.lease_ms)?;
        if let Some(holds) = self.state.holds_of(&req.owner) {
            holds.checked_add(1).ok_or_else(LockError::holds_overflow)?;
        }
        if req.fence {
            self.next_token()?;
        }
        Ok(())
    }

    /// One more hold for the caller on a key it may take now.
    fn take(&mut self, req: &Request) -> Result<i64, LockError> {
        let reentry = self.state.holds_of(&req.owner).is_some();
        let reply = self.grant(req)?;
        if reentry {
            self.tally.reentered += 1;
        } else {
            self.tally.acquired += 1;
        }
        Ok(reply)
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
    use crate::transition::{Change, TokenValue, TOKENS_PER_MS};

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

    const NOW: i64 = 1_000_000;

    fn req(owner: &str) -> Request {
        Request::exclusive(owner, 100)
    }

    fn held(owner: &str, holds: i64) -> LockState {
        LockState::Held {
            owner: owner.as_bytes().into(),
            holds,
        }
    }

    fn tx(state: LockState, token: TokenValue) -> Transition<Request> {
        Transition::new(state, NOW, token)
    }

    #[test]
    fn every_key_or_none() {
        // Free (first in line) and the caller's own: both taken.
        let (mut a, mut b) = (tx(LockState::Free, None), tx(held("m", 2), None));
        let taken = take_all([(&mut a, true), (&mut b, false)], &req("m"));
        assert_eq!(taken, AllOrNone::Taken(vec![1, 3]));
        assert_eq!(a.state(), &held("m", 1));
        assert_eq!(
            (a.tally.acquired, b.tally.reentered),
            (1, 1),
            "counted as a take and a re-entry"
        );
        assert_eq!(
            b.changes,
            vec![
                Change::SetHolds {
                    field: b"m"[..].into(),
                    holds: 3
                },
                Change::ExpireAt(NOW + 100)
            ]
        );
        // One key busy (held, or free with others first in line): none.
        for (busy, first) in [(held("x", 1), true), (LockState::Free, false)] {
            let (mut a, mut b) = (tx(LockState::Free, None), tx(busy, None));
            let taken = take_all([(&mut a, true), (&mut b, first)], &req("m"));
            assert_eq!(taken, AllOrNone::Busy);
            assert!(a.changes.is_empty() && b.changes.is_empty());
        }
    }

    #[test]
    fn a_refusal_on_any_key_wins_over_busy_keys() {
        let rw = LockState::Shared(Default::default());
        let (mut busy, mut shared) = (tx(held("x", 1), None), tx(rw, None));
        assert_eq!(
            take_all([(&mut busy, true), (&mut shared, true)], &req("m")),
            AllOrNone::Refused(LockError::holds_read_write_lock())
        );
        // A fencing token that cannot be issued, the lock busy or not.
        let fenced = Request {
            fence: true,
            ..req("m")
        };
        for state in [LockState::Free, held("x", 1)] {
            let mut free = tx(LockState::Free, Some(Ok(0)));
            let mut broken = tx(state, Some(Err(LockError::token_not_integer())));
            assert_eq!(
                take_all([(&mut free, true), (&mut broken, true)], &fenced),
                AllOrNone::Refused(LockError::token_not_integer())
            );
            assert!(free.changes.is_empty() && broken.changes.is_empty());
        }
        // A hold count or a lease out of range on the last key: the first
        // key is not taken either.
        let (mut a, mut full) = (tx(LockState::Free, None), tx(held("m", i64::MAX), None));
        assert_eq!(
            take_all([(&mut a, true), (&mut full, true)], &req("m")),
            AllOrNone::Refused(LockError::holds_overflow())
        );
        assert!(a.changes.is_empty());
        let long = Request {
            lease_ms: i64::MAX,
            ..req("m")
        };
        let (mut a, mut b) = (tx(LockState::Free, None), tx(LockState::Free, None));
        assert_eq!(
            take_all([(&mut a, true), (&mut b, true)], &long),
            AllOrNone::Refused(LockError::lease_overflow())
        );
        assert!(a.changes.is_empty() && b.changes.is_empty());
    }

    #[test]
    fn fenced_keys_get_a_token_each() {
        let fenced = Request {
            fence: true,
            ..req("m")
        };
        let (mut a, mut b) = (
            tx(LockState::Free, Some(Ok(0))),
            tx(LockState::Free, Some(Ok(i64::MAX / 2))),
        );
        let AllOrNone::Taken(tokens) = take_all([(&mut a, true), (&mut b, true)], &fenced) else {
            panic!("not taken");
        };
        assert_eq!(tokens, vec![NOW * TOKENS_PER_MS, i64::MAX / 2 + 1]);
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
