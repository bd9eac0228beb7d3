//! The LOCK.* commands redis-lock sends, built from what was asked (no I/O).

use std::time::Duration;

use redis_lock_client::proto::{self, Binding, SemAcquire};

// The kinds of lock and of waiting are the client library's; `Wait::from_duration` maps
// `--wait 0` to no wait (`BLOCK 0` would wait forever).
pub use redis_lock_client::proto::{Kind, Wait};

/// One acquisition: the names, the owner and the options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acquire {
    pub names: Vec<String>,
    pub owner: String,
    pub kind: Kind,
    pub lease: Duration,
    pub wait: Wait,
    pub fence: bool,
    pub keepalive: bool,
    /// `--semaphore NAME:N`: one permit of semaphore `names[0]`, whose total is N, instead
    /// of a lock.
    pub semaphore: Option<u32>,
}

impl Acquire {
    pub fn is_multi(&self) -> bool {
        self.names.len() > 1
    }

    /// What is held, for messages: `lock` or `permit`.
    pub fn what(&self) -> &'static str {
        if self.semaphore.is_some() {
            "permit"
        } else {
            "lock"
        }
    }

    fn binding(&self) -> Binding<'static> {
        if self.keepalive {
            Binding::Keepalive
        } else {
            Binding::None
        }
    }

    /// `SEM.INIT name N` for a semaphore (its total, set once).
    pub fn init(&self) -> Option<Vec<String>> {
        self.semaphore.map(|n| proto::sem_init(&self.names[0], n))
    }

    /// `LOCK.ACQUIRE name owner PX lease [BLOCK ms] [FENCE] [KEEPALIVE]`, or
    /// RACQUIRE / WACQUIRE, or `LOCK.MACQUIRE n k1 .. kn owner ...`: the client library's
    /// command, bound with `KEEPALIVE` to the connection that sends it (redis-lock's holder
    /// connection, which the command inherits) rather than to a library session.
    /// For a semaphore: `SEM.ACQUIRE name owner PX lease KEEPALIVE [BLOCK ms] [FENCE]`.
    pub fn command(&self) -> Vec<String> {
        if self.semaphore.is_some() {
            return SemAcquire {
                key: &self.names[0],
                owner: &self.owner,
                permits: 1,
                lease: self.lease,
                wait: self.wait,
                fence: self.fence,
                binding: self.binding(),
            }
            .args();
        }
        proto::Acquire {
            keys: &self.names,
            owner: &self.owner,
            kind: self.kind,
            lease: self.lease,
            wait: self.wait,
            fence: self.fence,
            binding: self.binding(),
        }
        .args()
    }

    /// What drops the hold this acquisition took: `LOCK.RELEASE name owner
    /// [READ|WRITE]` or `LOCK.MRELEASE n k1 .. kn owner`; `SEM.RELEASE name owner`.
    pub fn release(&self) -> Vec<String> {
        if self.semaphore.is_some() {
            return proto::sem_release(&self.names[0], &self.owner, None);
        }
        proto::release(&self.names, &self.owner, self.kind)
    }

    /// Whether the code word of a release's or re-attach's error says the owner no longer
    /// holds it: `NOTOWNER`, and for a semaphore `EXPIRED` (its lease ended) too.
    pub fn not_held(&self, code: Option<&str>) -> bool {
        if self.semaphore.is_some() {
            proto::Refusal::not_held(code)
        } else {
            code == Some("NOTOWNER")
        }
    }

    /// `LOCK.CANCEL name owner` (the first name of several; semaphore waits too): ends the
    /// owner's wait, after which no grant can reach it.
    pub fn cancel(&self) -> Vec<String> {
        proto::cancel(&self.names, &self.owner)
    }

    /// What tells whether the owner still holds `name`: `LOCK.INFO` or `SEM.INFO`.
    pub fn info(&self, name: &str) -> Vec<String> {
        if self.semaphore.is_some() {
            proto::sem_info(name)
        } else {
            info(name)
        }
    }

    /// `LOCK.RENEW name owner PX lease KEEPALIVE` for every name: re-attaches
    /// the holds to the connection that sends them.
    pub fn reattach(&self) -> Vec<Vec<String>> {
        self.names
            .iter()
            .map(|name| {
                if self.semaphore.is_some() {
                    proto::sem_renew(name, &self.owner, self.lease, Binding::Keepalive)
                } else {
                    proto::renew(name, &self.owner, self.lease, Binding::Keepalive)
                }
            })
            .collect()
    }
}

/// `LOCK.RELEASE name owner`, with `READ` / `WRITE` for a read-write lock.
pub fn release_one(name: &str, owner: &str, kind: Kind) -> Vec<String> {
    proto::release(&[name.to_string()], owner, kind)
}

pub fn force_release(name: &str) -> Vec<String> {
    vec!["LOCK.FORCERELEASE".into(), name.into()]
}

pub fn info(name: &str) -> Vec<String> {
    vec!["LOCK.INFO".into(), name.into()]
}

/// The whole queue of `name` (`COUNT 0`).
pub fn waiters(name: &str) -> Vec<String> {
    vec![
        "LOCK.WAITERS".into(),
        name.into(),
        "COUNT".into(),
        "0".into(),
    ]
}

pub fn queues(count: usize) -> Vec<String> {
    vec!["LOCK.QUEUES".into(), "COUNT".into(), count.to_string()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acquire(names: &[&str]) -> Acquire {
        Acquire {
            names: names.iter().map(|s| s.to_string()).collect(),
            owner: "host:1:ab".into(),
            kind: Kind::Exclusive,
            lease: Duration::from_secs(30),
            wait: Wait::Forever,
            fence: false,
            keepalive: true,
            semaphore: None,
        }
    }

    fn line(args: &[String]) -> String {
        args.join(" ")
    }

    #[test]
    fn exclusive_waits_forever_by_default() {
        assert_eq!(
            line(&acquire(&["job"]).command()),
            "LOCK.ACQUIRE job host:1:ab PX 30000 BLOCK 0 KEEPALIVE"
        );
        assert_eq!(
            line(&acquire(&["job"]).release()),
            "LOCK.RELEASE job host:1:ab"
        );
    }

    #[test]
    fn nonblocking_bounded_and_fenced() {
        let mut a = acquire(&["job"]);
        a.wait = Wait::No;
        a.fence = true;
        a.lease = Duration::from_millis(300);
        assert_eq!(
            line(&a.command()),
            "LOCK.ACQUIRE job host:1:ab PX 300 FENCE KEEPALIVE"
        );
        a.wait = Wait::For(Duration::from_millis(200));
        assert_eq!(
            line(&a.command()),
            "LOCK.ACQUIRE job host:1:ab PX 300 BLOCK 200 FENCE KEEPALIVE"
        );
        assert_eq!(Wait::from_duration(Duration::ZERO), Wait::No);
    }

    #[test]
    fn read_write() {
        let mut a = acquire(&["cfg"]);
        a.kind = Kind::Read;
        assert!(line(&a.command()).starts_with("LOCK.RACQUIRE cfg host:1:ab PX"));
        assert_eq!(line(&a.release()), "LOCK.RELEASE cfg host:1:ab READ");
        a.kind = Kind::Write;
        assert!(line(&a.command()).starts_with("LOCK.WACQUIRE cfg host:1:ab PX"));
        assert_eq!(line(&a.release()), "LOCK.RELEASE cfg host:1:ab WRITE");
    }

    #[test]
    fn several_names_at_once() {
        let a = acquire(&["a", "b", "c"]);
        assert_eq!(
            line(&a.command()),
            "LOCK.MACQUIRE 3 a b c host:1:ab PX 30000 BLOCK 0 KEEPALIVE"
        );
        assert_eq!(line(&a.release()), "LOCK.MRELEASE 3 a b c host:1:ab");
    }

    #[test]
    fn reattach_every_name() {
        let a = acquire(&["a", "b"]);
        let cmds: Vec<String> = a.reattach().iter().map(|c| line(c)).collect();
        assert_eq!(
            cmds,
            [
                "LOCK.RENEW a host:1:ab PX 30000 KEEPALIVE",
                "LOCK.RENEW b host:1:ab PX 30000 KEEPALIVE"
            ]
        );
    }

    #[test]
    fn semaphore_permit() {
        let mut a = acquire(&["pool"]);
        a.semaphore = Some(2);
        assert_eq!(a.what(), "permit");
        assert_eq!(line(&a.init().expect("init")), "SEM.INIT pool 2");
        assert_eq!(
            line(&a.command()),
            "SEM.ACQUIRE pool host:1:ab PX 30000 KEEPALIVE BLOCK 0"
        );
        a.wait = Wait::For(Duration::from_millis(1500));
        assert_eq!(
            line(&a.command()),
            "SEM.ACQUIRE pool host:1:ab PX 30000 KEEPALIVE BLOCK 1500"
        );
        assert_eq!(line(&a.release()), "SEM.RELEASE pool host:1:ab");
        assert_eq!(line(&a.cancel()), "LOCK.CANCEL pool host:1:ab");
        assert_eq!(line(&a.info("pool")), "SEM.INFO pool");
        assert_eq!(
            line(&a.reattach()[0]),
            "SEM.RENEW pool host:1:ab PX 30000 KEEPALIVE"
        );
        assert!(a.not_held(Some("EXPIRED")) && a.not_held(Some("NOTOWNER")));
        assert!(!acquire(&["job"]).not_held(Some("EXPIRED")));
        assert_eq!(acquire(&["job"]).init(), None);
    }

    #[test]
    fn queries() {
        assert_eq!(line(&waiters("job")), "LOCK.WAITERS job COUNT 0");
        assert_eq!(line(&queues(25)), "LOCK.QUEUES COUNT 25");
        assert_eq!(line(&info("job")), "LOCK.INFO job");
        assert_eq!(line(&force_release("job")), "LOCK.FORCERELEASE job");
    }
}
