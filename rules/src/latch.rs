//! The count-down latch rules (Redisson's `RCountDownLatch`): a string key
//! holds the count; counting down to zero deletes it, so a missing latch is
//! open.

use crate::args::parse_i64;
use crate::error::LockError;

/// The largest count LATCH.INIT takes: 2^53, exact as a Lua, JavaScript or
/// Java `double` number.
pub const MAX_COUNT: i64 = 1 << 53;

/// What a latch key holds: its count.
pub fn parse_count(raw: &[u8]) -> Result<i64, LockError> {
    parse_i64(raw).ok_or_else(LockError::not_a_latch)
}

/// The count after counting `count` down by `n`: 0 (open) at or below
/// zero, as Redisson's script deletes the key there.
pub fn count_down(count: i64, n: i64) -> i64 {
    count.saturating_sub(n).max(0)
}

/// Whether a latch with this count is open. A count Redisson's script left
/// below zero (a count-down of a missing key writes -1, then deletes it) is
/// open too.
pub fn is_open(count: i64) -> bool {
    count <= 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_down_to_zero_and_no_further() {
        assert_eq!(count_down(3, 1), 2);
        assert_eq!(count_down(3, 3), 0);
        assert_eq!(count_down(3, 10), 0);
        assert_eq!(count_down(i64::MIN + 1, i64::MAX), 0);
        assert!(is_open(0) && is_open(-1) && !is_open(1));
    }

    #[test]
    fn a_count_is_an_integer() {
        assert_eq!(parse_count(b"12"), Ok(12));
        assert_eq!(parse_count(b"x"), Err(LockError::not_a_latch()));
    }
}
