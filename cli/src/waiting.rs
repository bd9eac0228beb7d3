//! The status line while a run waits for its lock: how many callers are ahead
//! in the queue (`LOCK.WAITERS`), who holds the lock, for how long we waited.

use std::time::Duration;

use redis::ConnectionInfo;

use crate::commands::{self, Acquire};
use crate::conn::Conn;
use crate::exit::is_unusable;
use crate::reply::{self, Fields};

/// `waiting for job: 3 ahead, held by web-1:812:0a1b2c3d, 1.2 s` (`held`: who holds it, or
/// how many permits are held, in words).
pub fn line(
    names: &[String],
    ahead: Option<usize>,
    held: Option<&str>,
    waited: Duration,
) -> String {
    let mut parts = Vec::new();
    if let Some(n) = ahead {
        parts.push(format!("{n} ahead"));
    }
    if let Some(h) = held {
        parts.push(h.to_string());
    }
    parts.push(format!("{:.1} s", waited.as_secs_f64()));
    format!("waiting for {}: {}", names.join(" "), parts.join(", "))
}

/// How many callers are ahead of `owner` in a `LOCK.WAITERS` queue (first =
/// next served); `None` if it is not in it.
pub fn position(queue: &[Fields], owner: &str) -> Option<usize> {
    queue
        .iter()
        .position(|w| w.text("owner").as_deref() == Some(owner))
}

/// Polls the queue on a connection of its own (opened at the first poll).
pub struct Progress {
    target: ConnectionInfo,
    conn: Option<Conn>,
    waiters_supported: bool,
}

impl Progress {
    pub fn new(target: ConnectionInfo) -> Progress {
        Progress {
            target,
            conn: None,
            waiters_supported: true,
        }
    }

    /// Callers ahead (the most over every name) and who holds the first name
    /// (`held by OWNER`; for a semaphore `2 of 2 permits held`); `None`s when
    /// the server does not say.
    pub fn poll(&mut self, acquire: &Acquire) -> (Option<usize>, Option<String>) {
        if self.conn.is_none() {
            self.conn = Conn::connect(&self.target).ok();
        }
        let Some(conn) = self.conn.as_mut() else {
            return (None, None);
        };
        let mut ahead: Option<usize> = None;
        if self.waiters_supported {
            for name in &acquire.names {
                match conn.call(&commands::waiters(name)) {
                    Ok(v) => {
                        let queue = reply::entries(&v);
                        if let Some(p) = position(&queue, &acquire.owner) {
                            ahead = Some(ahead.map_or(p, |a| a.max(p)));
                        }
                    }
                    Err(e) if is_unusable(&e) => {
                        self.conn = None;
                        return (None, None);
                    }
                    // A module without LOCK.WAITERS.
                    Err(_) => self.waiters_supported = false,
                }
            }
        }
        let holder = acquire.names.first().and_then(|name| {
            let v = conn.call(&acquire.info(name)).ok()?;
            let f = Fields::parse(&v)?;
            if acquire.semaphore.is_some() {
                let total = f.int("permits")?;
                let available = f.int("available")?;
                return Some(format!(
                    "{} of {total} permits held",
                    (total - available).max(0)
                ));
            }
            f.text("owner")
                .or_else(|| f.text("writer"))
                .map(|o| format!("held by {o}"))
        });
        (ahead, holder)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reply::tests::{bulk, flat};
    use redis::Value;

    #[test]
    fn text() {
        let names = vec!["job".to_string()];
        assert_eq!(
            line(&names, Some(3), None, Duration::from_millis(1200)),
            "waiting for job: 3 ahead, 1.2 s"
        );
        assert_eq!(
            line(
                &names,
                Some(0),
                Some("held by h:1:ab"),
                Duration::from_millis(50)
            ),
            "waiting for job: 0 ahead, held by h:1:ab, 0.1 s"
        );
        assert_eq!(
            line(
                &["a".into(), "b".into()],
                None,
                None,
                Duration::from_secs(2)
            ),
            "waiting for a b: 2.0 s"
        );
    }

    #[test]
    fn place_in_the_queue() {
        let queue: Vec<Fields> = ["x", "me", "y"]
            .iter()
            .map(|o| {
                Fields::parse(&flat(&[
                    ("owner", bulk(o)),
                    ("kind", bulk("exclusive")),
                    ("waited", Value::Int(5)),
                ]))
                .expect("fields")
            })
            .collect();
        assert_eq!(position(&queue, "x"), Some(0));
        assert_eq!(position(&queue, "me"), Some(1));
        assert_eq!(position(&queue, "z"), None);
    }
}
