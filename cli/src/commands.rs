//! The LOCK.* commands redis-lock sends, built from what was asked (no I/O).

use std::time::Duration;

use crate::duration::millis;

/// Which lock a run takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `LOCK.ACQUIRE` (one name) or `LOCK.MACQUIRE` (several).
    Exclusive,
    /// `LOCK.RACQUIRE`: a read hold of a read-write lock.
    Read,
    /// `LOCK.WACQUIRE`: the write hold of a read-write lock.
    Write,
}

/// How long an acquire waits in the server's queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// No `BLOCK`: busy means not acquired.
    No,
    /// `BLOCK 0`.
    Forever,
    /// `BLOCK ms`.
    For(Duration),
}

impl Wait {
    /// `--wait 0` does not wait at all (`BLOCK 0` would wait forever).
    pub fn from_duration(d: Duration) -> Wait {
        if d.is_zero() {
            Wait::No
        } else {
            Wait::For(d)
        }
    }
}

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
}

impl Acquire {
    pub fn is_multi(&self) -> bool {
        self.names.len() > 1
    }

    /// `LOCK.ACQUIRE name owner PX lease [BLOCK ms] [FENCE] [KEEPALIVE]`, or
    /// RACQUIRE / WACQUIRE, or `LOCK.MACQUIRE n k1 .. kn owner ...`.
    pub fn command(&self) -> Vec<String> {
        let mut args: Vec<String> = Vec::with_capacity(self.names.len() + 10);
        if self.is_multi() {
            args.push("LOCK.MACQUIRE".into());
            args.push(self.names.len().to_string());
        } else {
            args.push(
                match self.kind {
                    Kind::Exclusive => "LOCK.ACQUIRE",
                    Kind::Read => "LOCK.RACQUIRE",
                    Kind::Write => "LOCK.WACQUIRE",
                }
                .into(),
            );
        }
        args.extend(self.names.iter().cloned());
        args.push(self.owner.clone());
        args.push("PX".into());
        args.push(millis(self.lease).to_string());
        match self.wait {
            Wait::No => {}
            Wait::Forever => {
                args.push("BLOCK".into());
                args.push("0".into());
            }
            Wait::For(d) => {
                args.push("BLOCK".into());
                args.push(millis(d).to_string());
            }
        }
        if self.fence {
            args.push("FENCE".into());
        }
        if self.keepalive {
            args.push("KEEPALIVE".into());
        }
        args
    }

    /// What drops the hold this acquisition took: `LOCK.RELEASE name owner
    /// [READ|WRITE]` or `LOCK.MRELEASE n k1 .. kn owner`.
    pub fn release(&self) -> Vec<String> {
        if self.is_multi() {
            let mut args = vec!["LOCK.MRELEASE".to_string(), self.names.len().to_string()];
            args.extend(self.names.iter().cloned());
            args.push(self.owner.clone());
            args
        } else {
            release_one(
                self.names.first().map_or("", String::as_str),
                &self.owner,
                self.kind,
            )
        }
    }

    /// `LOCK.RENEW name owner PX lease KEEPALIVE` for every name: re-attaches
    /// the holds to the connection that sends them.
    pub fn reattach(&self) -> Vec<Vec<String>> {
        self.names
            .iter()
            .map(|name| {
                vec![
                    "LOCK.RENEW".into(),
                    name.clone(),
                    self.owner.clone(),
                    "PX".into(),
                    millis(self.lease).to_string(),
                    "KEEPALIVE".into(),
                ]
            })
            .collect()
    }
}

/// `LOCK.RELEASE name owner`, with `READ` / `WRITE` for a read-write lock.
pub fn release_one(name: &str, owner: &str, kind: Kind) -> Vec<String> {
    let mut args = vec!["LOCK.RELEASE".to_string(), name.into(), owner.into()];
    match kind {
        Kind::Exclusive => {}
        Kind::Read => args.push("READ".into()),
        Kind::Write => args.push("WRITE".into()),
    }
    args
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
    fn queries() {
        assert_eq!(line(&waiters("job")), "LOCK.WAITERS job COUNT 0");
        assert_eq!(line(&queues(25)), "LOCK.QUEUES COUNT 25");
        assert_eq!(line(&info("job")), "LOCK.INFO job");
        assert_eq!(line(&force_release("job")), "LOCK.FORCERELEASE job");
    }
}
