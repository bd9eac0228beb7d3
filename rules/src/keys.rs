//! Names derived from a lock's key, following Redisson's naming so both can
//! share locks, and the cluster hash slot rule they must obey.

use super::error::LockError;

/// Redisson's `prefixName`: `prefix:{name}`, or `prefix:name` when the name
/// already carries a `{` (its own tag then decides the slot).
fn prefixed(prefix: &[u8], name: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(prefix.len() + name.len() + 3);
    write_prefixed(prefix, name, &mut out);
    out
}

fn write_prefixed(prefix: &[u8], name: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(prefix);
    out.push(b':');
    push_tagged(name, out);
}

/// `{name}`, or `name` when it already carries a `{` (its own tag then
/// decides the slot).
fn push_tagged(name: &[u8], out: &mut Vec<u8>) {
    if name.contains(&b'{') {
        out.extend_from_slice(name);
    } else {
        out.push(b'{');
        out.extend_from_slice(name);
        out.push(b'}');
    }
}

/// The counter behind `FENCE`: `redisson_lock_token:{key}`.
pub fn token_key(lock: &[u8]) -> Vec<u8> {
    prefixed(b"redisson_lock_token", lock)
}

/// The token key of `lock`, refused when it would hash to another slot than
/// the lock itself (a name with an empty or unmatched `{`), since a
/// command must never touch a key of another slot.
pub fn token_key_in_slot(lock: &[u8]) -> Result<Vec<u8>, LockError> {
    let token = token_key(lock);
    if key_slot(&token) == key_slot(lock) {
        Ok(token)
    } else {
        Err(LockError::token_cross_slot(&token))
    }
}

/// A semaphore's permits: `{key}:timeout`, the sorted set of
/// Redisson's `RPermitExpirableSemaphore`.
pub fn permits_key(semaphore: &[u8]) -> Vec<u8> {
    suffixed(semaphore, &[b"timeout"])
}

/// [`permits_key`] written into `out` (cleared first).
pub fn write_permits_key(semaphore: &[u8], out: &mut Vec<u8>) {
    out.clear();
    push_tagged(semaphore, out);
    out.extend_from_slice(b":timeout");
}

/// [`permits_key`], refused when it would hash to another slot than the
/// semaphore (a name with an empty or unmatched `{`).
pub fn permits_key_in_slot(semaphore: &[u8]) -> Result<Vec<u8>, LockError> {
    let key = permits_key(semaphore);
    permits_key_slot_ok(semaphore, &key)?;
    Ok(key)
}

/// Whether `key`, the permit set of `semaphore`, is in its slot (see
/// [`permits_key_in_slot`]).
pub fn permits_key_slot_ok(semaphore: &[u8], key: &[u8]) -> Result<(), LockError> {
    // `{name}:timeout` hashes as `name` does: only a name with its own `{`
    // can land elsewhere.
    if !semaphore.contains(&b'{') || key_slot(key) == key_slot(semaphore) {
        Ok(())
    } else {
        Err(LockError::permits_key_cross_slot(key))
    }
}

/// The semaphores whose permit set `key` would be (the inverse of
/// [`permits_key`]): none for a key that is no permit set's name, two for
/// `{t}:timeout` (the set of `t` and of `{t}` alike, as in Redisson).
pub fn semaphores_of_permits_key(key: &[u8]) -> Vec<&[u8]> {
    names_of_suffixed(key, b":timeout")
}

/// An election's leader record: `{key}:leader`, a hash with the leader's
/// `candidate`, `term` and `value`, expiring with the lock.
pub fn leader_key(election: &[u8]) -> Vec<u8> {
    suffixed(election, &[b"leader"])
}

/// [`leader_key`], refused when it would hash to another slot than the
/// election's lock (a name with an empty or unmatched `{`).
pub fn leader_key_in_slot(election: &[u8]) -> Result<Vec<u8>, LockError> {
    let key = leader_key(election);
    if !election.contains(&b'{') || key_slot(&key) == key_slot(election) {
        Ok(key)
    } else {
        Err(LockError::leader_key_cross_slot(&key))
    }
}

/// The elections whose leader record `key` would be (the inverse of
/// [`leader_key`], as [`semaphores_of_permits_key`]).
pub fn elections_of_leader_key(key: &[u8]) -> Vec<&[u8]> {
    names_of_suffixed(key, b":leader")
}

/// The names `n` for which `suffixed(n, suffix)` is `key`.
fn names_of_suffixed<'k>(key: &'k [u8], suffix: &[u8]) -> Vec<&'k [u8]> {
    let Some(prefix) = key.strip_suffix(suffix) else {
        return Vec::new();
    };
    let mut names = Vec::with_capacity(2);
    if let Some(inner) = prefix.strip_prefix(b"{").and_then(|p| p.strip_suffix(b"}")) {
        if !inner.contains(&b'{') {
            names.push(inner);
        }
    }
    if prefix.contains(&b'{') {
        names.push(prefix);
    }
    names
}

/// Where Redisson's semaphore waiters listen: `redisson_sc:{key}`.
pub fn semaphore_channel(semaphore: &[u8]) -> Vec<u8> {
    prefixed(b"redisson_sc", semaphore)
}

/// Where Redisson's latch waiters listen:
/// `redisson_countdownlatch__channel__{key}` (braces whatever the name).
pub fn latch_channel(latch: &[u8]) -> Vec<u8> {
    let mut out = b"redisson_countdownlatch__channel__{".to_vec();
    out.extend_from_slice(latch);
    out.push(b'}');
    out
}

/// Redisson's `suffixName`: `{name}:suffix`, or `name:suffix` when the name
/// already carries a `{`.
fn suffixed(name: &[u8], suffix: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::with_capacity(name.len() + 64);
    push_tagged(name, &mut out);
    out.push(b':');
    for part in suffix {
        out.extend_from_slice(part);
    }
    out
}

/// `{name}`, or `name` when it carries its own `{`: what every key derived
/// from the lock with Redisson's `suffixName` starts with.
pub fn tagged_name(lock: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(lock.len() + 2);
    push_tagged(lock, &mut out);
    out
}

/// `{name}:<owner>:rwlock_timeout`: what an owner's read hold lease keys
/// start with (Redisson's scripts add `:<hold>`).
pub fn read_lease_prefix(lock: &[u8], owner: &[u8]) -> Vec<u8> {
    suffixed(lock, &[owner, b":rwlock_timeout"])
}

/// The lease of a read-write lock's read hold number `hold` (from 1) of
/// `owner`, as Redisson's RReadWriteLock keeps it:
/// `{name}:<owner>:rwlock_timeout:<hold>`.
pub fn read_lease_key(lock: &[u8], owner: &[u8], hold: i64) -> Vec<u8> {
    let hold = hold.to_string();
    suffixed(lock, &[owner, b":rwlock_timeout:", hold.as_bytes()])
}

/// [`read_lease_key`], refused when it would hash to another slot than the
/// lock (only the lock's name decides, so checking hold 1 checks all).
pub fn read_lease_key_in_slot(lock: &[u8], owner: &[u8]) -> Result<Vec<u8>, LockError> {
    let key = read_lease_key(lock, owner, 1);
    if key_slot(&key) == key_slot(lock) {
        Ok(key)
    } else {
        Err(LockError::lease_key_cross_slot(&key))
    }
}

/// Where Redisson's read-write lock clients wait: `redisson_rwlock:{key}`.
pub fn rw_notify_channel(lock: &[u8]) -> Vec<u8> {
    prefixed(b"redisson_rwlock", lock)
}

/// [`rw_notify_channel`] written into `out` (cleared first).
pub fn write_rw_notify_channel(lock: &[u8], out: &mut Vec<u8>) {
    write_prefixed(b"redisson_rwlock", lock, out);
}

/// Where Redisson clients wait for a release: `redisson_lock__channel:{key}`.
pub fn notify_channel(lock: &[u8]) -> Vec<u8> {
    prefixed(b"redisson_lock__channel", lock)
}

/// [`notify_channel`] written into `out` (cleared first), so that a
/// buffer can be reused from one release to the next.
pub fn write_notify_channel(lock: &[u8], out: &mut Vec<u8>) {
    write_prefixed(b"redisson_lock__channel", lock, out);
}

/// Redis Cluster's key hash slot (CRC16/XMODEM of the hash tag, mod 16384).
pub fn key_slot(key: &[u8]) -> u16 {
    let hashed = match key.iter().position(|&b| b == b'{') {
        Some(open) => match key[open + 1..].iter().position(|&b| b == b'}') {
            Some(0) | None => key,
            Some(len) => &key[open + 1..open + 1 + len],
        },
        None => key,
    };
    crc16(hashed) & 0x3fff
}

fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// Redisson's fair lock (`RFairLock`) queue of `lock`: a LIST of the
/// owners waiting, first to be served at its head
/// (`redisson_lock_queue:{key}`).
pub fn fair_queue_key(lock: &[u8]) -> Vec<u8> {
    prefixed(b"redisson_lock_queue", lock)
}

/// [`fair_queue_key`] written into `out` (cleared first): it is looked up
/// at every transition of a lock.
pub fn write_fair_queue_key(lock: &[u8], out: &mut Vec<u8>) {
    write_prefixed(b"redisson_lock_queue", lock, out);
}

/// The fair queue's deadlines: a ZSET of owner -> unix ms after which that
/// waiter, once first, counts as gone (`redisson_lock_timeout:{key}`).
pub fn fair_timeout_key(lock: &[u8]) -> Vec<u8> {
    prefixed(b"redisson_lock_timeout", lock)
}

/// Where one fair waiter listens: `redisson_lock__channel:{key}:<owner>`.
pub fn fair_waiter_channel(lock: &[u8], owner: &[u8]) -> Vec<u8> {
    let mut channel = notify_channel(lock);
    channel.push(b':');
    channel.extend_from_slice(owner);
    channel
}

/// Whether `lock`'s fair queue keys hash to its own slot (not for a name
/// with an empty or unmatched `{`, which Redisson's scripts could not use
/// in a cluster either).
pub fn fair_keys_in_slot(lock: &[u8]) -> bool {
    key_slot(&fair_queue_key(lock)) == key_slot(lock)
}

/// The locks whose fair queue `key` would be (the inverse of
/// [`fair_queue_key`]): `x` for `redisson_lock_queue:{x}`, and the rest
/// itself when it carries a `{`.
pub fn locks_of_fair_queue_key(key: &[u8]) -> Vec<&[u8]> {
    let Some(rest) = key.strip_prefix(b"redisson_lock_queue:".as_slice()) else {
        return Vec::new();
    };
    let mut names = Vec::with_capacity(2);
    if let Some(inner) = rest.strip_prefix(b"{").and_then(|r| r.strip_suffix(b"}")) {
        if !inner.contains(&b'{') {
            names.push(inner);
        }
    }
    if rest.contains(&b'{') {
        names.push(rest);
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_start_the_keys_they_prefix() {
        assert_eq!(tagged_name(b"k"), b"{k}");
        assert_eq!(tagged_name(b"a{b}"), b"a{b}");
        let key = read_lease_key(b"k", b"o", 3);
        assert_eq!(key, b"{k}:o:rwlock_timeout:3");
        assert!(key.starts_with(&read_lease_prefix(b"k", b"o")));
        assert!(key.starts_with(&tagged_name(b"k")));
    }

    #[test]
    fn derives_read_write_lock_names() {
        assert_eq!(
            read_lease_key(b"doc", b"u:1", 2),
            b"{doc}:u:1:rwlock_timeout:2"
        );
        assert_eq!(
            read_lease_key(b"{doc}:x", b"u:1", 1),
            b"{doc}:x:u:1:rwlock_timeout:1"
        );
        assert_eq!(rw_notify_channel(b"doc"), b"redisson_rwlock:{doc}");
        assert!(read_lease_key_in_slot(b"doc", b"u").is_ok());
        let e = read_lease_key_in_slot(b"{}doc", b"u").unwrap_err();
        assert!(e.to_string().starts_with("CROSSSLOT"), "{e}");
    }

    #[test]
    fn derives_redisson_names() {
        assert_eq!(token_key(b"order:1"), b"redisson_lock_token:{order:1}");
        assert_eq!(
            token_key(b"{user}:lock"),
            b"redisson_lock_token:{user}:lock"
        );
        assert_eq!(
            notify_channel(b"order:1"),
            b"redisson_lock__channel:{order:1}"
        );
    }

    #[test]
    fn slots_match_redis_cluster() {
        // Values from CLUSTER KEYSLOT on a real server.
        assert_eq!(key_slot(b"a"), 15495);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"123456789"), 12739);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"));
        assert_ne!(key_slot(b"foo{}{bar}"), key_slot(b"bar"));
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
    }

    #[test]
    fn token_key_shares_the_slot_unless_the_tag_is_broken() {
        for lock in [&b"order:1"[..], b"{user}:lock", b"x{tag}y"] {
            assert_eq!(key_slot(&token_key(lock)), key_slot(lock), "{lock:?}");
        }
        // An empty or unmatched tag hashes the whole name, which the
        // prefixed form changes.
        assert_ne!(key_slot(&token_key(b"{}x")), key_slot(b"{}x"));
        assert_ne!(key_slot(&token_key(b"a{b")), key_slot(b"a{b"));
        assert!(token_key_in_slot(b"order:1").is_ok());
        let e = token_key_in_slot(b"{}x").unwrap_err();
        assert!(e.to_string().starts_with("CROSSSLOT"), "{e}");
    }

    #[test]
    fn a_permit_set_names_its_semaphores() {
        for name in [&b"pool"[..], b"a{tag}b", b"{t}x", b"x:timeout", b"{t}"] {
            let permits = permits_key(name);
            assert!(
                semaphores_of_permits_key(&permits).contains(&name),
                "{permits:?}"
            );
        }
        assert_eq!(
            semaphores_of_permits_key(b"{t}:timeout"),
            vec![&b"t"[..], b"{t}"]
        );
        assert!(semaphores_of_permits_key(b"pool").is_empty());
        assert!(semaphores_of_permits_key(b"pool:timeout").is_empty());
    }

    #[test]
    fn fair_queue_keys_and_their_inverse() {
        assert_eq!(fair_queue_key(b"res"), b"redisson_lock_queue:{res}");
        let mut buf = b"left over".to_vec();
        for name in [&b"sem"[..], b"{a}b", b""] {
            write_permits_key(name, &mut buf);
            assert_eq!(buf, permits_key(name));
        }
        assert_eq!(fair_timeout_key(b"a{b}"), b"redisson_lock_timeout:a{b}");
        assert_eq!(
            fair_waiter_channel(b"res", b"u:1"),
            b"redisson_lock__channel:{res}:u:1"
        );
        // `res` and `{res}` both have this queue.
        let both: [&[u8]; 2] = [b"res", b"{res}"];
        assert_eq!(locks_of_fair_queue_key(b"redisson_lock_queue:{res}"), both);
        assert_eq!(
            locks_of_fair_queue_key(b"redisson_lock_queue:a{b}"),
            [b"a{b}"]
        );
        assert_eq!(
            locks_of_fair_queue_key(b"redisson_lock_queue:{a{b}}"),
            [b"{a{b}}"]
        );
        assert!(locks_of_fair_queue_key(b"other:{res}").is_empty());
        for name in [&b"res"[..], b"a{b}", b"{x}"] {
            assert!(locks_of_fair_queue_key(&fair_queue_key(name)).contains(&name));
            assert!(fair_keys_in_slot(name));
        }
        assert!(!fair_keys_in_slot(b"{}x"));
    }
}
