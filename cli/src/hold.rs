//! What `LOCK.INFO` says about a hold of ours (no I/O): still ours, and kept
//! alive by which connection; or lost, and why.

use redis::Value;
use redis_lock_client::proto;

use crate::commands::Kind;
use crate::reply::Fields;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seen {
    /// The owner still holds the lock; `bound` is the id of the connection
    /// whose life keeps it renewed (`keepalive_client`), if any.
    Held { bound: Option<i64> },
    /// The owner no longer holds it.
    Lost(String),
}

/// Judges one key's `LOCK.INFO` reply (`None`: nil, the lock is free).
pub fn judge(info: Option<&Fields>, owner: &str, kind: Kind) -> Seen {
    let Some(info) = info else {
        return Seen::Lost("the lock is free".into());
    };
    let mode = info.text("mode");
    let bound_rw = || info.map("keepalive_clients").and_then(|m| m.int(owner));
    match kind {
        Kind::Exclusive => {
            if mode.is_some() {
                return Seen::Lost("it is a read-write lock now".into());
            }
            match info.text("owner") {
                Some(o) if o == owner => Seen::Held {
                    bound: info.int("keepalive_client"),
                },
                Some(o) => Seen::Lost(format!("it is held by {o}")),
                None => Seen::Lost("it has no owner".into()),
            }
        }
        Kind::Read => {
            let readers = info.map("readers").unwrap_or_default();
            if readers.int(owner).is_some_and(|n| n > 0) {
                Seen::Held { bound: bound_rw() }
            } else if let Some(w) = info.text("writer") {
                Seen::Lost(format!("it is write-held by {w}"))
            } else {
                Seen::Lost("the owner is not among its readers".into())
            }
        }
        Kind::Write => match (mode.as_deref(), info.text("writer")) {
            (Some("write"), Some(w)) if w == owner => Seen::Held { bound: bound_rw() },
            (Some("write"), Some(w)) => Seen::Lost(format!("it is write-held by {w}")),
            (Some("read"), _) => Seen::Lost("it is read-held by others".into()),
            _ => Seen::Lost("it is not write-held by the owner".into()),
        },
    }
}

/// Judges a semaphore's `SEM.INFO` reply: whether `owner` still holds permits of it.
pub fn judge_permit(info: &Value, owner: &str) -> Seen {
    if matches!(info, Value::Nil) {
        return Seen::Lost("the semaphore is gone".into());
    }
    match proto::sem_holders(info)
        .into_iter()
        .find(|h| h.owner == owner)
    {
        Some(h) if h.permits > 0 => Seen::Held {
            bound: h.keepalive_client,
        },
        _ => Seen::Lost("the owner holds no permit of it".into()),
    }
}

/// Whether a hold seen as `Held { bound }` must be re-attached to the
/// holder connection `holder` (its `CLIENT ID`, if known): nothing keeps it
/// alive, or another connection does.
pub fn needs_reattach(bound: Option<i64>, holder: Option<i64>) -> bool {
    match (bound, holder) {
        (None, _) => true,
        (Some(b), Some(h)) => b != h,
        (Some(_), None) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reply::tests::{bulk, flat};
    use redis::Value;

    fn fields(v: Value) -> Fields {
        Fields::parse(&v).expect("fields")
    }

    #[test]
    fn exclusive() {
        let mine = fields(flat(&[
            ("owner", bulk("me")),
            ("holds", Value::Int(1)),
            ("ttl", Value::Int(100)),
            ("keepalive_client", Value::Int(14)),
        ]));
        assert_eq!(
            judge(Some(&mine), "me", Kind::Exclusive),
            Seen::Held { bound: Some(14) }
        );
        assert_eq!(
            judge(Some(&mine), "you", Kind::Exclusive),
            Seen::Lost("it is held by me".into())
        );
        assert_eq!(
            judge(None, "me", Kind::Exclusive),
            Seen::Lost("the lock is free".into())
        );
        let unbound = fields(flat(&[("owner", bulk("me")), ("holds", Value::Int(1))]));
        assert_eq!(
            judge(Some(&unbound), "me", Kind::Exclusive),
            Seen::Held { bound: None }
        );
    }

    #[test]
    fn read_write() {
        let read = fields(flat(&[
            ("mode", bulk("read")),
            (
                "readers",
                flat(&[("r1", Value::Int(1)), ("me", Value::Int(2))]),
            ),
            ("keepalive_clients", flat(&[("me", Value::Int(9))])),
        ]));
        assert_eq!(
            judge(Some(&read), "me", Kind::Read),
            Seen::Held { bound: Some(9) }
        );
        assert_eq!(
            judge(Some(&read), "r1", Kind::Read),
            Seen::Held { bound: None }
        );
        assert!(matches!(judge(Some(&read), "x", Kind::Read), Seen::Lost(_)));
        assert!(matches!(
            judge(Some(&read), "me", Kind::Write),
            Seen::Lost(_)
        ));
        assert!(matches!(
            judge(Some(&read), "me", Kind::Exclusive),
            Seen::Lost(_)
        ));
        let write = fields(flat(&[
            ("mode", bulk("write")),
            ("writer", bulk("me")),
            ("write_holds", Value::Int(1)),
        ]));
        assert_eq!(
            judge(Some(&write), "me", Kind::Write),
            Seen::Held { bound: None }
        );
        assert_eq!(
            judge(Some(&write), "x", Kind::Write),
            Seen::Lost("it is write-held by me".into())
        );
        assert!(matches!(
            judge(Some(&write), "x", Kind::Read),
            Seen::Lost(_)
        ));
    }

    #[test]
    fn permits() {
        let holder = |o: &str, ka: Option<i64>| {
            let mut pairs = vec![
                ("owner", bulk(o)),
                ("permits", Value::Int(1)),
                ("ttl", Value::Int(900)),
            ];
            if let Some(id) = ka {
                pairs.push(("keepalive_client", Value::Int(id)));
            }
            flat(&pairs)
        };
        let info = flat(&[
            ("permits", Value::Int(2)),
            ("available", Value::Int(0)),
            (
                "holders",
                Value::Array(vec![holder("a", Some(5)), holder("me", None)]),
            ),
            ("waiters", Value::Int(1)),
        ]);
        assert_eq!(judge_permit(&info, "a"), Seen::Held { bound: Some(5) });
        assert_eq!(judge_permit(&info, "me"), Seen::Held { bound: None });
        assert!(matches!(judge_permit(&info, "x"), Seen::Lost(_)));
        assert_eq!(
            judge_permit(&Value::Nil, "a"),
            Seen::Lost("the semaphore is gone".into())
        );
    }

    #[test]
    fn reattach_when_unbound_or_bound_elsewhere() {
        assert!(needs_reattach(None, Some(3)));
        assert!(needs_reattach(None, None));
        assert!(needs_reattach(Some(4), Some(3)));
        assert!(!needs_reattach(Some(3), Some(3)));
        assert!(!needs_reattach(Some(3), None));
    }
}
