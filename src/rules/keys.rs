//! Names derived from a lock's key, following Redisson's naming so both can
//! share locks, and the cluster hash slot rule they must obey.

use super::error::LockError;

/// Redisson's `prefixName`: `prefix:{name}`, or `prefix:name` when the name
/// already carries a `{` (its own tag then decides the slot).
fn prefixed(prefix: &[u8], name: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(prefix.len() + name.len() + 3);
    out.extend_from_slice(prefix);
    out.push(b':');
    if name.contains(&b'{') {
        out.extend_from_slice(name);
    } else {
        out.push(b'{');
        out.extend_from_slice(name);
        out.push(b'}');
    }
    out
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

/// Where Redisson clients wait for a release: `redisson_lock__channel:{key}`.
pub fn notify_channel(lock: &[u8]) -> Vec<u8> {
    prefixed(b"redisson_lock__channel", lock)
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

/// Whether the `myself` line of `CLUSTER NODES` serves `slot` and is not
/// migrating it away: only then may this node write a key of that slot on
/// its own initiative (a timer, not a routed command).
pub fn myself_serves_slot(cluster_nodes: &str, slot: u16) -> bool {
    let Some(line) = cluster_nodes.lines().find(|line| {
        line.split(' ')
            .nth(2)
            .is_some_and(|flags| flags.split(',').any(|f| f == "myself"))
    }) else {
        return false;
    };
    let mut served = false;
    for field in line.split(' ').skip(8) {
        if let Some(state) = field.strip_prefix('[') {
            // "[slot->-node]" migrating away, "[slot-<-node]" importing.
            if let Some((s, _)) = state.split_once("->-") {
                if s.parse() == Ok(slot) {
                    return false;
                }
            }
            continue;
        }
        let (lo, hi) = field.split_once('-').unwrap_or((field, field));
        if let (Ok(lo), Ok(hi)) = (lo.parse::<u16>(), hi.parse::<u16>()) {
            served |= (lo..=hi).contains(&slot);
        }
    }
    served
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn reads_slot_ownership_from_cluster_nodes() {
        let nodes = "\
07c3 127.0.0.1:30002@40002 master - 0 1 2 connected 5461-10922\n\
e7d1 127.0.0.1:30001@40001 myself,master - 0 0 1 connected 0-5460 12000 [5000->-07c3] [6000-<-07c3]\n";
        assert!(myself_serves_slot(nodes, 0));
        assert!(myself_serves_slot(nodes, 5460));
        assert!(myself_serves_slot(nodes, 12000));
        assert!(!myself_serves_slot(nodes, 5000), "migrating away");
        assert!(!myself_serves_slot(nodes, 6000), "importing, not ours yet");
        assert!(!myself_serves_slot(nodes, 5461));
        assert!(!myself_serves_slot(nodes, 16383));
        assert!(!myself_serves_slot("", 0));
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
}
