//! The Lua the generator loads for the protocols it emulates: Redisson's
//! RLock, RReadWriteLock and RPermitExpirableSemaphore scripts (copies,
//! checked against `scripts/redisson-*.lua`) and the spin lock's
//! compare-and-delete.
//!
//! Offers: the scripts' texts, and [`Scripts`], their SHA1s on a server
//! (`SCRIPT LOAD`).

use std::io;

use crate::conn::{Conn, ReplyExt};

/// Redisson's acquire (RLock `tryLockInnerAsync`, as described in
/// redisson-protocol.md), the same script the interop tests run: KEYS[1]
/// lock, ARGV[1] lease ms, ARGV[2] owner. Nil = acquired, otherwise the
/// lock's PTTL.
pub const REDISSON_ACQUIRE: &str = include_str!("../../../scripts/redisson-acquire.lua");

/// Redisson's release: KEYS[1] lock, KEYS[2] channel, ARGV[1] message,
/// ARGV[2] lease ms, ARGV[3] owner. Nil = not the owner, 0 = holds remain,
/// 1 = released (deleted and published).
pub const REDISSON_RELEASE: &str = include_str!("../../../scripts/redisson-release.lua");

/// Redisson's RReadWriteLock read acquire: KEYS[1] lock, KEYS[2]
/// `{lock}:<owner>:rwlock_timeout`; ARGV[1] lease ms, ARGV[2] owner,
/// ARGV[3] `<owner>:write`. Nil = acquired, otherwise the lock's PTTL.
pub const REDISSON_READ_ACQUIRE: &str = include_str!("../../../scripts/redisson-read-acquire.lua");

/// Read release: KEYS[1] lock, KEYS[2] `redisson_rwlock:{lock}`, KEYS[3]
/// `{lock}:<owner>:rwlock_timeout`, KEYS[4] `{lock}`; ARGV[1] message (0),
/// ARGV[2] owner. Nil = no read hold, 0 = the lock stays, 1 = deleted (and
/// published).
pub const REDISSON_READ_RELEASE: &str = include_str!("../../../scripts/redisson-read-release.lua");

/// Write acquire: KEYS[1] lock; ARGV[1] lease ms, ARGV[2] `<owner>:write`.
/// Nil = acquired, otherwise the lock's PTTL.
pub const REDISSON_WRITE_ACQUIRE: &str =
    include_str!("../../../scripts/redisson-write-acquire.lua");

/// Write release: KEYS[1] lock, KEYS[2] `redisson_rwlock:{lock}`; ARGV[1]
/// message (1), ARGV[2] lease ms, ARGV[3] `<owner>:write`. Nil = not the
/// writer, 0 = write holds remain, 1 = the write lock ended.
pub const REDISSON_WRITE_RELEASE: &str =
    include_str!("../../../scripts/redisson-write-release.lua");

/// Redisson's `RPermitExpirableSemaphore` try-acquire script, the exact text
/// of `tryAcquireAsync(List<String> ids, long timeoutDate)` in
/// `RedissonPermitExpirableSemaphore.java` (Redisson HEAD 6686397,
/// 2026-08-21; the Java string pieces joined as they are): KEYS[1] the
/// semaphore, KEYS[2] `{name}:timeout`, KEYS[3] `redisson_sc:{name}`;
/// ARGV[1] permits, ARGV[2] the lease's end (unix ms), ARGV[3] now (unix
/// ms), ARGV[4] Redisson's "never" (922337203685477), ARGV[5] the publish
/// command, ARGV[6..] one 16-byte id per permit. `OK` = acquired; `:<ms>`
/// = the unix ms at which the first held permit's lease ends; nil = none
/// available and none with a lease.
pub const REDISSON_SEM_ACQUIRE: &str = concat!(
    "local expiredIds = redis.call('zrangebyscore', KEYS[2], 0, ARGV[3], 'limit', 0, ARGV[1]); ",
    "if #expiredIds > 0 then ",
    "redis.call('zrem', KEYS[2], unpack(expiredIds)); ",
    "local value = redis.call('incrby', KEYS[1], #expiredIds); ",
    "if tonumber(value) > 0 then ",
    "redis.call(ARGV[5], KEYS[3], value); ",
    "end;",
    "end; ",
    "local value = redis.call('get', KEYS[1]); ",
    "if (value ~= false and tonumber(value) >= tonumber(ARGV[1])) then ",
    "redis.call('decrby', KEYS[1], ARGV[1]); ",
    "for i = 6, #ARGV, 1 do ",
    "redis.call('zadd', KEYS[2], ARGV[2], ARGV[i]); ",
    "end; ",
    "local ttl = redis.call('pttl', KEYS[1]); ",
    "if ttl > 0 then ",
    "redis.call('pexpire', KEYS[2], ttl); ",
    "end; ",
    "return 'OK'; ",
    "end; ",
    "local v = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES'); ",
    "if v[1] ~= nil and v[2] ~= ARGV[4] then ",
    "return ':' .. tostring(v[2]); ",
    "end ",
    "return nil;",
);

/// Redisson's `RPermitExpirableSemaphore.release(id)`: the exact script of
/// `tryReleaseAsync(String permitId)` (same file and commit): KEYS[1] the
/// semaphore, KEYS[2] `redisson_sc:{name}`, KEYS[3] `{name}:timeout`;
/// ARGV[1] the permit's id, ARGV[2] permits (1), ARGV[3] now (unix ms),
/// ARGV[4] the publish command. 1 = released in time (`release` throws on
/// 0); publishes the available count after every release.
pub const REDISSON_SEM_RELEASE: &str = concat!(
    "local expire = redis.call('zscore', KEYS[3], ARGV[1]);",
    "local removed = redis.call('zrem', KEYS[3], ARGV[1]);",
    "if tonumber(removed) ~= 1 then ",
    "return 0;",
    "end;",
    "local value = redis.call('incrby', KEYS[1], ARGV[2]); ",
    "redis.call(ARGV[4], KEYS[2], value); ",
    "if tonumber(expire) <= tonumber(ARGV[3]) then ",
    "return 0;",
    "end;",
    "return 1;",
);

/// Redisson's `RedissonPermitExpirableSemaphore.nonExpirableTimeout`.
pub const REDISSON_NEVER: &[u8] = b"922337203685477";

/// Compare-and-delete (redis-py's Lock release): 1 = deleted.
pub const COMPARE_AND_DELETE: &str = "\
if redis.call('get', KEYS[1]) == ARGV[1] then \
return redis.call('del', KEYS[1]); \
end; \
return 0;";

#[derive(Clone, Debug)]
pub struct Scripts {
    pub acquire: String,
    pub release: String,
    pub cad: String,
    pub read_acquire: String,
    pub read_release: String,
    pub write_acquire: String,
    pub write_release: String,
    pub sem_acquire: String,
    pub sem_release: String,
}

impl Scripts {
    pub async fn load(conn: &mut Conn) -> io::Result<Scripts> {
        Ok(Scripts {
            acquire: conn.ok(&["SCRIPT", "LOAD", REDISSON_ACQUIRE]).await?.text(),
            release: conn.ok(&["SCRIPT", "LOAD", REDISSON_RELEASE]).await?.text(),
            cad: conn
                .ok(&["SCRIPT", "LOAD", COMPARE_AND_DELETE])
                .await?
                .text(),
            read_acquire: conn
                .ok(&["SCRIPT", "LOAD", REDISSON_READ_ACQUIRE])
                .await?
                .text(),
            read_release: conn
                .ok(&["SCRIPT", "LOAD", REDISSON_READ_RELEASE])
                .await?
                .text(),
            write_acquire: conn
                .ok(&["SCRIPT", "LOAD", REDISSON_WRITE_ACQUIRE])
                .await?
                .text(),
            write_release: conn
                .ok(&["SCRIPT", "LOAD", REDISSON_WRITE_RELEASE])
                .await?
                .text(),
            sem_acquire: conn
                .ok(&["SCRIPT", "LOAD", REDISSON_SEM_ACQUIRE])
                .await?
                .text(),
            sem_release: conn
                .ok(&["SCRIPT", "LOAD", REDISSON_SEM_RELEASE])
                .await?
                .text(),
        })
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    /// The scripts as `scripts/redisson-*.lua` keep them (Redisson's Java
    /// string literals one per line below the comments; joined without the
    /// newlines they are the script): the same bytes as these constants.
    #[test]
    fn redisson_scripts_match_the_extracted_ones() {
        fn joined(file: &str) -> String {
            file.split('\n').filter(|l| !l.starts_with("--")).collect()
        }
        let pairs = [
            (
                REDISSON_SEM_ACQUIRE,
                include_str!("../../../scripts/redisson-sem-expirable-try-acquire.lua"),
            ),
            (
                REDISSON_SEM_RELEASE,
                include_str!("../../../scripts/redisson-sem-expirable-try-release.lua"),
            ),
            (
                crate::latch::REDISSON_COUNT_DOWN,
                include_str!("../../../scripts/redisson-latch-count-down.lua"),
            ),
            (
                crate::latch::REDISSON_TRY_SET_COUNT,
                include_str!("../../../scripts/redisson-latch-try-set-count.lua"),
            ),
        ];
        for (ours, file) in pairs {
            assert_eq!(ours, joined(file));
        }
    }
}
