//! Error replies. Every one starts with a code, as Redis's own do, so clients
//! can branch on the first word.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockError {
    code: &'static str,
    message: String,
}

impl LockError {
    fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    #[cfg(test)]
    pub fn code(&self) -> &'static str {
        self.code
    }

    pub fn arity(command: &str) -> Self {
        Self::new(
            "ERR",
            format!("wrong number of arguments for '{command}' command"),
        )
    }

    pub fn syntax(detail: impl fmt::Display) -> Self {
        Self::new("ERR", format!("syntax error: {detail}"))
    }

    pub fn invalid_value(option: &str, raw: &[u8], why: &str) -> Self {
        Self::new(
            "ERR",
            format!("invalid {option} '{}': {why}", printable(raw)),
        )
    }

    pub fn empty_owner() -> Self {
        Self::new("ERR", "owner must not be empty")
    }

    pub fn wrong_type() -> Self {
        Self::new(
            "WRONGTYPE",
            "Operation against a key holding the wrong kind of value",
        )
    }

    /// A hash that does not follow the lock layout: exactly one field whose
    /// value is a positive integer.
    pub fn not_a_lock(why: impl fmt::Display) -> Self {
        Self::new(
            "WRONGTYPE",
            format!("key holds a hash that is not a lock: {why}"),
        )
    }

    /// A reader asking for the write lock while others read: it would wait
    /// for itself.
    pub fn no_upgrade() -> Self {
        Self::new(
            "DEADLOCK",
            "the owner holds read holds and other readers hold the lock: the write lock would wait for its own read holds",
        )
    }

    /// A wait that would close a cycle of waits (`why` names it).
    pub fn deadlock(why: impl Into<String>) -> Self {
        Self::new("DEADLOCK", why)
    }

    /// LOCK.RELEASE without READ or WRITE by an owner holding both.
    pub fn ambiguous_release() -> Self {
        Self::new(
            "ERR",
            "the owner holds both read and write holds: name READ or WRITE",
        )
    }

    pub fn holds_read_write_lock() -> Self {
        Self::new(
            "WRONGTYPE",
            "key holds a read-write lock: use LOCK.RACQUIRE or LOCK.WACQUIRE",
        )
    }

    pub fn holds_exclusive_lock() -> Self {
        Self::new(
            "WRONGTYPE",
            "key holds an exclusive lock: use LOCK.ACQUIRE, and LOCK.RELEASE without READ or WRITE",
        )
    }

    pub fn reserved_owner(owner: &[u8]) -> Self {
        Self::new(
            "ERR",
            format!(
                "owner '{}' is reserved in a read-write lock: it must not be 'mode' or end with ':write'",
                printable(owner)
            ),
        )
    }

    pub fn too_many_read_holds(max: i64) -> Self {
        Self::new(
            "ERR",
            format!("an owner may take at most {max} read holds of one lock (each has its own lease key)"),
        )
    }

    pub fn lease_key_cross_slot(key: &[u8]) -> Self {
        Self::new(
            "CROSSSLOT",
            format!(
                "read hold lease key '{}' hashes to another slot than the lock; use a lock name \
                 without '{{' or with a non-empty {{hash tag}}",
                printable(key)
            ),
        )
    }

    pub fn numkeys_missing() -> Self {
        Self::new("ERR", "numkeys is missing")
    }

    pub fn numkeys_invalid(raw: &[u8]) -> Self {
        Self::new(
            "ERR",
            format!(
                "numkeys should be a positive integer, got '{}'",
                printable(raw)
            ),
        )
    }

    /// `numkeys key [key ...] owner` with fewer than `numkeys` arguments
    /// after `numkeys`.
    pub fn numkeys_too_many(numkeys: i64, follow: usize) -> Self {
        Self::new(
            "ERR",
            format!(
                "numkeys is {numkeys} but only {follow} argument{} follow{} it: {numkeys} keys and then the owner are needed",
                if follow == 1 { "" } else { "s" },
                if follow == 1 { "s" } else { "" },
            ),
        )
    }

    /// `numkeys key [key ...]` with nothing after the keys.
    pub fn owner_missing(numkeys: usize) -> Self {
        Self::new(
            "ERR",
            format!(
                "the owner is missing: numkeys is {numkeys} and the {numkeys} argument{} after it {} the key{}; the owner follows them",
                if numkeys == 1 { "" } else { "s" },
                if numkeys == 1 { "is" } else { "are" },
                if numkeys == 1 { "" } else { "s" },
            ),
        )
    }

    pub fn duplicate_key(key: &[u8]) -> Self {
        Self::new(
            "ERR",
            format!("key '{}' is named more than once", printable(key)),
        )
    }

    pub fn no_permission(what: &str, key: &[u8]) -> Self {
        Self::new(
            "NOPERM",
            format!(
                "this user has no permissions to access the {what} '{}'",
                printable(key)
            ),
        )
    }

    pub fn not_owner() -> Self {
        Self::new("NOTOWNER", "the owner holds no hold on this lock")
    }

    /// A semaphore's counter that is not an integer.
    pub fn not_a_semaphore() -> Self {
        Self::new(
            "WRONGTYPE",
            "key holds a string that is not a semaphore's permit count",
        )
    }

    /// A latch's count that is not an integer.
    pub fn not_a_latch() -> Self {
        Self::new(
            "WRONGTYPE",
            "key holds a string that is not a latch's count",
        )
    }

    pub fn no_permits() -> Self {
        Self::new("NOTOWNER", "the owner holds no permits of this semaphore")
    }

    pub fn fewer_permits(held: usize, asked: u32) -> Self {
        Self::new(
            "NOTOWNER",
            format!("the owner holds {held} permits of this semaphore, fewer than {asked}"),
        )
    }

    /// The owner's permits were still recorded, but their lease had ended:
    /// they went back to the available count.
    pub fn permits_expired() -> Self {
        Self::new(
            "EXPIRED",
            "the owner's permits' lease ended before this call",
        )
    }

    /// SEM.ADD or SEM.GIVE would take the semaphore out of its range.
    pub fn permits_out_of_range(command: &str, total: i128) -> Self {
        Self::new(
            "ERR",
            format!(
                "{command} would leave the semaphore {total} permits: must be 0 to {}",
                i32::MAX
            ),
        )
    }

    /// A semaphore whose `{key}:timeout` set would land in another slot.
    pub fn permits_key_cross_slot(key: &[u8]) -> Self {
        Self::new(
            "CROSSSLOT",
            format!(
                "semaphore permit key '{}' hashes to another slot than the semaphore; use a name \
                 without '{{' or with a non-empty {{hash tag}}",
                printable(key)
            ),
        )
    }

    /// An election whose `{key}:leader` record would land in another slot.
    pub fn leader_key_cross_slot(key: &[u8]) -> Self {
        Self::new(
            "CROSSSLOT",
            format!(
                "leader record key '{}' hashes to another slot than the election; use a name \
                 without '{{' or with a non-empty {{hash tag}}",
                printable(key)
            ),
        )
    }

    /// An election's `{key}:leader` holds a key that is not a leader record
    /// (a lock, a string, a hash of other fields): the module never
    /// overwrites it.
    pub fn not_a_leader_record(key: &[u8]) -> Self {
        Self::new(
            "WRONGTYPE",
            format!(
                "leader record key '{}' holds a key that is not a leader record",
                printable(key)
            ),
        )
    }

    /// ELECT.CAMPAIGN without KEEPALIVE or SESSION: a leadership that is not
    /// bound to a connection would outlive its leader.
    pub fn campaign_without_keepalive() -> Self {
        Self::new(
            "ERR",
            "ELECT.CAMPAIGN needs KEEPALIVE or SESSION token: a leadership lives as long as the \
             connection that keeps it",
        )
    }

    /// ELECT.CAMPAIGN by a candidate that holds the election's lock but not
    /// as its leader (taken with LOCK.ACQUIRE): it has no term.
    pub fn held_outside_election() -> Self {
        Self::new(
            "ERR",
            "the candidate holds this lock outside ELECT.* (with LOCK.ACQUIRE), so it has no \
             term: release it, then campaign",
        )
    }

    /// A latch that ended without reaching zero, answered to its waiters.
    pub fn latch_gone(expired: bool) -> Self {
        let how = if expired { "expired" } else { "was deleted" };
        Self::new("GONE", format!("the latch {how} before reaching zero"))
    }

    pub fn token_not_integer() -> Self {
        Self::new(
            "ERR",
            "fencing token key holds a value that is not an integer or out of range",
        )
    }

    pub fn token_wrong_type() -> Self {
        Self::new(
            "WRONGTYPE",
            "fencing token key holds the wrong kind of value",
        )
    }

    pub fn token_overflow() -> Self {
        Self::new("ERR", "fencing token would overflow")
    }

    pub fn token_cross_slot(token_key: &[u8]) -> Self {
        Self::new(
            "CROSSSLOT",
            format!(
                "fencing token key '{}' hashes to another slot than the lock; use a lock name \
                 without '{{' or with a non-empty {{hash tag}}",
                printable(token_key)
            ),
        )
    }

    pub fn holds_overflow() -> Self {
        Self::new("ERR", "hold count would overflow")
    }

    /// A broken invariant of the module itself; reported instead of panicking.
    pub fn internal(what: &str) -> Self {
        Self::new("ERR", format!("internal error: {what}"))
    }

    pub fn lease_overflow() -> Self {
        Self::new("ERR", "lease deadline out of range")
    }

    /// This node does not (or no longer) serve the lock's hash slot.
    pub fn slot_not_served() -> Self {
        Self::new(
            "TRYAGAIN",
            "the lock's hash slot is not served by this node any more; retry",
        )
    }

    /// FENCE during a slot migration, with the token key not on this node:
    /// its value is unknown here.
    pub fn token_unavailable() -> Self {
        Self::new(
            "TRYAGAIN",
            "the lock's hash slot is migrating and its fencing token key is not on this node; retry",
        )
    }

    /// A waiter of a master that became a replica: it was not granted the
    /// lock, and calls again on the new master. Redis's own words for the
    /// callers it unblocks on that change, so clients see one answer.
    pub fn demoted() -> Self {
        Self::new(
            "UNBLOCKED",
            "force unblock from blocking operation, instance state changed (master -> replica?)",
        )
    }

    /// KEEPALIVE from a script, a function or another module's RM_Call:
    /// their client never disconnects, so the hold would be renewed forever.
    pub fn keepalive_without_connection() -> Self {
        Self::new(
            "ERR",
            "KEEPALIVE needs the caller's own connection: not from a script, a function or a module's call",
        )
    }

    /// `SESSION` or `LOCK.SESSION` with an empty token.
    pub fn empty_session() -> Self {
        Self::new("ERR", "the session token must not be empty")
    }

    /// `SESSION token` naming a token no live connection of this server
    /// named with `LOCK.SESSION` (a failover, a restart, another cluster
    /// node): the caller opens its session here and calls again.
    pub fn no_session(token: &[u8]) -> Self {
        Self::new(
            "NOSESSION",
            format!("no session '{}' on this server", printable(token)),
        )
    }

    /// `SESSION token` or `LOCK.SESSION token` when the token is named by a
    /// connection of another ACL user.
    pub fn session_of_another_user(token: &[u8]) -> Self {
        Self::new(
            "NOPERM",
            format!(
                "session '{}' belongs to a connection of another user",
                printable(token)
            ),
        )
    }

    /// LOCK.SESSION from a script, a function or a module's call.
    pub fn session_without_connection() -> Self {
        Self::new(
            "ERR",
            "LOCK.SESSION needs the caller's own connection: not from a script, a function or a module's call",
        )
    }

    /// KEEPALIVE (or a new lease for a hold kept alive) with a lease the
    /// server cannot renew in time.
    pub fn keepalive_lease_too_short(min_ms: i64, lease_ms: i64, late_ms: i64, hz: i64) -> Self {
        Self::new(
            "ERR",
            format!(
                "KEEPALIVE needs a lease of at least {min_ms} ms, got {lease_ms}: the server renews it \
                 at half the lease, and a renewal can be up to {late_ms} ms late (a cron tick at hz \
                 {hz}, a fork, a busy machine)"
            ),
        )
    }

    /// A lock write sent to a replica that accepts writes.
    pub fn replica() -> Self {
        Self::new("READONLY", "lock commands cannot run on a replica")
    }

    pub fn busy() -> Self {
        Self::new("BUSY", "module state is in use, try again")
    }
}

impl fmt::Display for LockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.code, self.message)
    }
}

impl std::error::Error for LockError {}

/// Client bytes quoted in an error line: error replies are single lines of
/// text, so everything but printable ASCII is escaped (`\xNN`) and long
/// input is cut.
pub fn printable(raw: &[u8]) -> String {
    const MAX: usize = 64;
    let mut out = String::new();
    for &b in raw.iter().take(MAX) {
        if b.is_ascii_graphic() || b == b' ' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    if raw.len() > MAX {
        out.push_str("...");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_starts_with_its_code() {
        let all = [
            LockError::arity("lock.acquire"),
            LockError::syntax("x"),
            LockError::invalid_value("PX", b"a", "b"),
            LockError::empty_owner(),
            LockError::wrong_type(),
            LockError::not_a_lock("x"),
            LockError::not_owner(),
            LockError::no_upgrade(),
            LockError::numkeys_missing(),
            LockError::numkeys_invalid(b"x"),
            LockError::numkeys_too_many(3, 2),
            LockError::owner_missing(2),
            LockError::duplicate_key(b"k"),
            LockError::no_permission("fencing token key", b"k"),
            LockError::ambiguous_release(),
            LockError::holds_read_write_lock(),
            LockError::holds_exclusive_lock(),
            LockError::reserved_owner(b"mode"),
            LockError::too_many_read_holds(10),
            LockError::lease_key_cross_slot(b"k"),
            LockError::token_not_integer(),
            LockError::token_wrong_type(),
            LockError::token_overflow(),
            LockError::token_cross_slot(b"t"),
            LockError::lease_overflow(),
            LockError::holds_overflow(),
            LockError::internal("x"),
            LockError::slot_not_served(),
            LockError::token_unavailable(),
            LockError::replica(),
            LockError::busy(),
            LockError::keepalive_lease_too_short(704, 5, 352, 10),
            LockError::empty_session(),
            LockError::no_session(b"s 1"),
            LockError::session_of_another_user(b"s"),
            LockError::session_without_connection(),
            LockError::not_a_semaphore(),
            LockError::not_a_latch(),
            LockError::no_permits(),
            LockError::fewer_permits(2, 3),
            LockError::permits_expired(),
            LockError::permits_out_of_range("SEM.ADD", -1),
            LockError::permits_key_cross_slot(b"k"),
            LockError::latch_gone(true),
            LockError::latch_gone(false),
        ];
        for e in all {
            let text = e.to_string();
            assert!(text.starts_with(e.code()), "{text}");
            let code = text.split(' ').next().unwrap_or_default();
            assert!(code.chars().all(|c| c.is_ascii_uppercase()), "{text}");
            assert!(!text.contains('\n') && !text.contains('\r'), "{text}");
        }
    }

    #[test]
    fn printable_is_ascii_escapes_and_cuts() {
        assert_eq!(printable(b"a b\r\n"), "a b\\x0d\\x0a");
        assert_eq!(printable(b"\xff\x00z"), "\\xff\\x00z");
        // Code points that are multiples of 256 must not become NUL bytes.
        assert_eq!(printable("Ā一".as_bytes()), "\\xc4\\x80\\xe4\\xb8\\x80");
        let long = printable(&[b'x'; 200]);
        assert_eq!(long.len(), 64 + 3);
        for text in [
            printable(&[0, 1, 0x7f, 0x80, 0xff]),
            printable("é%s".as_bytes()),
        ] {
            assert!(
                text.bytes().all(|b| b.is_ascii_graphic() || b == b' '),
                "{text}"
            );
        }
    }
}
