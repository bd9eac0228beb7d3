//! Leader election (`ELECT.*`): campaigns bound to the session, the leadership's loss
//! signal with its local deadline, observing who leads, and the constructor on [`Session`].
//! A leadership is a hold of the core ([`crate::session`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::error::{unexpected, Error, Result};
use crate::proto::{self, Leader, Lost, Reason, Wait};
use crate::session::{acquire, Hold, Inner, Of, Session};

/// An election of the session on `key`: one leader at a time among the candidates that
/// campaign, first come first served (in the same queue as the lock `key`'s waiters). Each
/// [`Election::campaign`] is a new candidate (`<session-token>:<n>`), bound to the session
/// (`SESSION token`). Cheap to clone.
#[derive(Clone)]
pub struct Election {
    inner: Arc<Inner>,
    key: String,
    value: Option<String>,
    lease: Option<Duration>,
}

impl Election {
    pub(crate) fn new(inner: Arc<Inner>, key: String) -> Election {
        Election {
            inner,
            key,
            value: None,
            lease: None,
        }
    }

    /// The value the leader publishes (its address, say): written to the leader record when
    /// a campaign of this election starts leading.
    pub fn value(mut self, value: impl Into<String>) -> Election {
        self.value = Some(value.into());
        self
    }

    /// The leadership's lease instead of the session's: how long the server may go on
    /// seeing a vanished leader as leader, and twice how long the leader believes it leads
    /// without a round trip on the session connection (at least the server's
    /// `lock_keepalive_min_lease_ms`, else [`Error::LeaseTooShort`] at the campaign).
    pub fn lease(mut self, lease: Duration) -> Election {
        self.lease = Some(lease);
        self
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    fn lease_or_default(&self) -> Duration {
        self.lease.unwrap_or(self.inner.opts.lease)
    }

    /// Campaigns as a new candidate, waiting as `wait` says until it leads:
    /// [`Error::Busy`] if it does not lead within the wait. Dropping the future while it
    /// waits ends the wait in the server (`LOCK.CANCEL`) and resigns a leadership that
    /// crossed the cancel (`ELECT.RESIGN`), on the runtime. While a leadership lives, the
    /// session connections are pinged at least every quarter lease.
    pub async fn campaign(&self, wait: Wait) -> Result<Leadership> {
        let lease = self.lease_or_default();
        self.inner.ping_at_least_every(lease / 4);
        // Before the campaign is sent: the server's lease starts no earlier.
        let started = Instant::now();
        let hold = acquire(
            &self.inner,
            vec![self.key.clone()],
            Of::Election,
            lease,
            wait,
            None,
            self.value.as_deref(),
        )
        .await?;
        Ok(Leadership::start(hold, lease, started))
    }

    /// Who leads now (`ELECT.LEADER`), `None` when nobody does.
    pub async fn leader(&self) -> Result<Option<Leader>> {
        self.inner.check_open()?;
        let v = self
            .inner
            .command(&proto::elect_leader(&self.key), Some(&self.key))
            .await?;
        proto::leader(&v).map_err(|_| unexpected("ELECT.LEADER", &v))
    }

    /// One long poll (`ELECT.OBSERVE key TERM last_term`): at once if the term now differs
    /// from `last_term` (0: nothing seen yet), else when leadership or the leader's value
    /// changes, waiting as `wait` says. `Ok(None)` if the wait ran out; a reply with
    /// `candidate: None` and term 0 when nobody leads. The loop of a follower:
    /// `let mut t = 0; loop { if let Some(l) = e.observe(t, Wait::Forever).await? { t = l.term; ... } }`.
    /// Dropping the future while it waits closes its waiting connection (the server drops
    /// the observer).
    pub async fn observe(&self, last_term: i64, wait: Wait) -> Result<Option<Leader>> {
        self.inner.check_open()?;
        let v = if wait.block_ms().is_none() {
            let args = proto::elect_observe(&self.key, last_term, wait);
            self.inner.command(&args, Some(&self.key)).await?
        } else {
            self.inner
                .waiting_call(&self.key, wait, "ELECT.OBSERVE", |left| {
                    proto::elect_observe(&self.key, last_term, left)
                })
                .await?
        };
        proto::leader(&v).map_err(|_| unexpected("ELECT.OBSERVE", &v))
    }
}

/// A leadership won by [`Election::campaign`]. The server keeps it while the session
/// connection lives and is heard from; [`Leadership::lost`] says when the leader must stop
/// believing it leads: a loss message for this candidate (`forced`, `gone`, `idle`,
/// `maxhold`, `moved`), `demoted`, the session connection broken, or the local deadline
/// (the last answered PING on the session connection was sent at `s`: the leadership is
/// believed until `s + lease/2`, the server never hands over before `s + lease`). Once lost
/// it is resigned (`ELECT.RESIGN`, best effort) so the next candidate leads at once if the
/// server still had it. End it with [`Leadership::resign`]; dropped, it is resigned in the
/// background.
pub struct Leadership {
    hold: Hold,
    lease: Duration,
    started: Instant,
    alive: Option<watch::Receiver<Instant>>,
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("key", &self.key())
            .field("candidate", &self.candidate())
            .field("term", &self.term())
            .finish()
    }
}

impl Leadership {
    fn start(hold: Hold, lease: Duration, started: Instant) -> Leadership {
        let (inner, id) = hold.session();
        let inner = inner.clone();
        let alive = inner.node_of_hold(id).and_then(|node| inner.alive(&node));
        let leadership = Leadership {
            hold,
            lease,
            started,
            alive: alive.clone(),
        };
        let handle = inner.handle.clone();
        let task = Watcher {
            inner,
            id,
            key: leadership.key().to_string(),
            candidate: leadership.candidate().to_string(),
            half: lease / 2,
            started,
            alive,
            lost: leadership.hold.lost(),
        };
        handle.spawn(task.run());
        leadership
    }

    /// The term: the leadership's fencing token, greater than every term before it.
    pub fn term(&self) -> i64 {
        self.hold.token()
    }

    pub fn key(&self) -> &str {
        &self.hold.keys()[0]
    }

    /// The candidate id this leadership was won as (`<session-token>:<n>`).
    pub fn candidate(&self) -> &str {
        self.hold.owner()
    }

    /// The lease of the leadership.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// `Some(Lost)` once the leadership is lost (see [`Leadership`]). Await `changed()` on
    /// it, or `wait_for(Option::is_some)`.
    pub fn lost(&self) -> watch::Receiver<Option<Lost>> {
        self.hold.lost()
    }

    /// Until when it may believe it leads, by the local deadline (the last answered round
    /// trip on the session connection sent + lease/2).
    pub fn deadline(&self) -> Instant {
        let last = self
            .alive
            .as_ref()
            .map_or(self.started, |a| (*a.borrow()).max(self.started));
        last + self.lease / 2
    }

    /// Whether it is lost: signalled, or past its local deadline (check it before acting).
    pub fn is_lost(&self) -> bool {
        self.hold.is_lost() || Instant::now() >= self.deadline()
    }

    fn lost_error(&self) -> Error {
        match self.hold.lost().borrow().clone() {
            Some(l) => Error::Lost(l),
            None => Error::Lost(Lost {
                key: self.key().to_string(),
                owner: self.candidate().to_string(),
                reason: Reason::Deadline,
            }),
        }
    }

    /// Changes the leader's value (`ELECT.PROCLAIM`); observers are answered.
    /// [`Error::Lost`] if the leadership was lost ([`Error::NotOwner`] if the server says
    /// it does not lead and no loss was signalled yet).
    pub async fn proclaim(&self, value: &str) -> Result<()> {
        if self.is_lost() {
            return Err(self.lost_error());
        }
        let (inner, _) = self.hold.session();
        let args = proto::elect_proclaim(self.key(), self.candidate(), value);
        match inner.command(&args, Some(self.key())).await {
            Ok(_) => Ok(()),
            Err(e) => match Error::from(e) {
                Error::NotOwner if self.hold.is_lost() => Err(self.lost_error()),
                other => Err(other),
            },
        }
    }

    /// Ends the leadership (`ELECT.RESIGN`): the next candidate leads at once. `true` if
    /// it still led, `false` if not (lost before).
    pub async fn resign(mut self) -> Result<bool> {
        self.hold.set_done();
        let (inner, id) = self.hold.session();
        let inner = inner.clone();
        let known = inner.forget(id).is_some();
        if !known && inner.is_closed() && !self.hold.is_lost() {
            return Ok(true); // resigned when the session closed
        }
        let args = proto::elect_resign(self.key(), self.candidate());
        let v = inner.command(&args, Some(self.key())).await?;
        proto::integer(&v)
            .map(|n| n == 1)
            .map_err(|_| unexpected("ELECT.RESIGN", &v))
    }
}

/// The task that fires a leadership's loss at its local deadline and resigns it once lost.
struct Watcher {
    inner: Arc<Inner>,
    id: u64,
    key: String,
    candidate: String,
    half: Duration,
    started: Instant,
    alive: Option<watch::Receiver<Instant>>,
    lost: watch::Receiver<Option<Lost>>,
}

impl Watcher {
    async fn run(mut self) {
        loop {
            if self.lost.borrow_and_update().is_some() {
                break;
            }
            let last = self
                .alive
                .as_mut()
                .map_or(self.started, |a| (*a.borrow_and_update()).max(self.started));
            let deadline = tokio::time::Instant::from_std(last + self.half);
            let alive_changed = async {
                match self.alive.as_mut() {
                    Some(a) => a.changed().await.is_ok(),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => {
                    self.inner.lose_hold(self.id, &self.key, Reason::Deadline);
                }
                ok = alive_changed => {
                    if !ok {
                        // The session's connection task ended: the session closed (and
                        // resigned every leadership).
                        return;
                    }
                }
                changed = self.lost.changed() => {
                    if changed.is_err() && self.lost.borrow().is_none() {
                        return; // resigned or dropped by its owner
                    }
                }
            }
        }
        if self.inner.is_closed() {
            return;
        }
        // Lost: the server may still have it (a broken connection, the deadline, `idle`);
        // resigning hands over at once. `0` (it did not lead) is fine.
        let args = proto::elect_resign(&self.key, &self.candidate);
        let _ = self.inner.command(&args, Some(&self.key)).await;
    }
}

// The election's constructor lives here: the core does not know its objects.
impl Session {
    /// An election on `key` (`ELECT.*`): [`Election::campaign`] leads it in turn.
    pub fn election(&self, key: impl Into<String>) -> Election {
        Election::new(self.inner.clone(), key.into())
    }
}
