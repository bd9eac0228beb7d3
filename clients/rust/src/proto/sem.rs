//! Semaphores (`SEM.*`) and count-down latches (`LATCH.*`): their commands, their replies
//! and refusals.

use std::time::Duration;

use redis::Value;

use super::common::{field, int_field, millis, renewal, Binding, Unexpected, Wait};

/// One `SEM.ACQUIRE`: `permits` permits of semaphore `key` for `owner`.
#[derive(Clone, Debug)]
pub struct SemAcquire<'a> {
    pub key: &'a str,
    pub owner: &'a str,
    pub permits: u32,
    pub lease: Duration,
    pub wait: Wait,
    /// `FENCE`: the reply is a fencing token instead of the permits held.
    pub fence: bool,
    pub binding: Binding<'a>,
}

impl SemAcquire<'_> {
    /// `SEM.ACQUIRE key owner [PERMITS n] PX lease [KEEPALIVE | SESSION token] [BLOCK ms]
    /// [FENCE]` (`PERMITS` left out for 1).
    pub fn args(&self) -> Vec<String> {
        let mut args = vec![
            "SEM.ACQUIRE".to_string(),
            self.key.into(),
            self.owner.into(),
        ];
        if self.permits != 1 {
            args.push("PERMITS".into());
            args.push(self.permits.to_string());
        }
        args.push("PX".into());
        args.push(millis(self.lease).to_string());
        self.binding.push(&mut args);
        self.wait.push(&mut args);
        if self.fence {
            args.push("FENCE".into());
        }
        args
    }
}

/// `SEM.INIT key permits`: sets the semaphore's permits once (reply 1), else nothing (0).
pub fn sem_init(key: &str, permits: u32) -> Vec<String> {
    vec!["SEM.INIT".into(), key.into(), permits.to_string()]
}

/// `SEM.ADD key delta`: adds (or takes away) permits; the reply is the permits available.
pub fn sem_add(key: &str, delta: i64) -> Vec<String> {
    vec!["SEM.ADD".into(), key.into(), delta.to_string()]
}

/// `SEM.RELEASE key owner [PERMITS n]`: gives back `n` of the owner's permits (all without).
pub fn sem_release(key: &str, owner: &str, permits: Option<u32>) -> Vec<String> {
    let mut args = vec!["SEM.RELEASE".to_string(), key.into(), owner.into()];
    if let Some(n) = permits {
        args.push("PERMITS".into());
        args.push(n.to_string());
    }
    args
}

/// `SEM.RENEW key owner PX lease [KEEPALIVE | SESSION token]`: a new lease on all of the
/// owner's permits, and with a binding, a re-attach.
pub fn sem_renew(key: &str, owner: &str, lease: Duration, binding: Binding<'_>) -> Vec<String> {
    renewal("SEM.RENEW", key, owner, lease, binding)
}

/// `SEM.INFO key`.
pub fn sem_info(key: &str) -> Vec<String> {
    vec!["SEM.INFO".into(), key.into()]
}

/// `LATCH.INIT key count [PX ttl]`: sets the latch if it does not exist (reply 1), else 0.
pub fn latch_init(key: &str, count: u64, ttl: Option<Duration>) -> Vec<String> {
    let mut args = vec!["LATCH.INIT".to_string(), key.into(), count.to_string()];
    if let Some(ttl) = ttl {
        args.push("PX".into());
        args.push(millis(ttl).to_string());
    }
    args
}

/// `LATCH.COUNTDOWN key [n]` (`n` left out for 1): the count left.
pub fn latch_count_down(key: &str, n: u64) -> Vec<String> {
    let mut args = vec!["LATCH.COUNTDOWN".to_string(), key.into()];
    if n != 1 {
        args.push(n.to_string());
    }
    args
}

/// `LATCH.AWAIT key [BLOCK ms]`.
pub fn latch_await(key: &str, wait: Wait) -> Vec<String> {
    let mut args = vec!["LATCH.AWAIT".to_string(), key.into()];
    wait.push(&mut args);
    args
}

/// `LATCH.INFO key`.
pub fn latch_info(key: &str) -> Vec<String> {
    vec!["LATCH.INFO".into(), key.into()]
}

/// What an error reply's leading code word says about an owner's permits or a latch (the
/// rest of the reply is wording, not read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// `NOTOWNER`: the owner holds nothing (never held, released, or given to others).
    NotOwner,
    /// `EXPIRED`: the owner's permits' lease ended before this command; they are back in
    /// the available count.
    Expired,
    /// `GONE`: the latch expired or was deleted before reaching zero.
    Gone,
}

impl Refusal {
    /// The refusal of an error code word, if it is one.
    pub fn of(code: &str) -> Option<Refusal> {
        match code {
            "NOTOWNER" => Some(Refusal::NotOwner),
            "EXPIRED" => Some(Refusal::Expired),
            "GONE" => Some(Refusal::Gone),
            _ => None,
        }
    }

    /// Whether the code word of a release's or renewal's error says the owner no longer
    /// holds anything there (`NOTOWNER`, `EXPIRED`): nothing to release, or the hold is lost.
    pub fn not_held(code: Option<&str>) -> bool {
        matches!(
            code.and_then(Refusal::of),
            Some(Refusal::NotOwner | Refusal::Expired)
        )
    }
}

/// `SEM.ACQUIRE`'s reply: `Some(permits held)` (the token with `FENCE`), `None` when not
/// taken (nil).
pub fn sem_acquired(v: &Value) -> Result<Option<i64>, Unexpected> {
    match v {
        Value::Nil => Ok(None),
        Value::Int(i) => Ok(Some(*i)),
        _ => Err(Unexpected),
    }
}

/// `LATCH.AWAIT`'s reply: `true` when the latch is open (0), `false` when not (yet) (nil).
pub fn latch_opened(v: &Value) -> Result<bool, Unexpected> {
    match v {
        Value::Nil => Ok(false),
        Value::Int(0) => Ok(true),
        _ => Err(Unexpected),
    }
}

/// One holder of a semaphore, as `SEM.INFO` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SemHolder {
    pub owner: String,
    pub permits: i64,
    /// Ms left of its lease, -1 for none.
    pub ttl: i64,
    /// The id of the connection that keeps it alive (`KEEPALIVE` / `SESSION`), if any.
    pub keepalive_client: Option<i64>,
}

/// The holders in a `SEM.INFO` reply (none for nil).
pub fn sem_holders(info: &Value) -> Vec<SemHolder> {
    let list = match field(info, "holders") {
        Some(Value::Array(items)) | Some(Value::Set(items)) => items.as_slice(),
        _ => &[],
    };
    list.iter()
        .filter_map(|h| {
            let owner = match field(h, "owner")? {
                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                Value::SimpleString(s) => s.clone(),
                _ => return None,
            };
            Some(SemHolder {
                owner,
                permits: int_field(h, "permits").unwrap_or(0),
                ttl: int_field(h, "ttl").unwrap_or(-1),
                keepalive_client: int_field(h, "keepalive_client"),
            })
        })
        .collect()
}
