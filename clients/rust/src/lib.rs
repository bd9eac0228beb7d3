//! Client library of the `lock` Redis module (`LOCK.*` commands): distributed locks whose
//! holds live exactly as long as the client's **session**, with waiting done by the server
//! (`BLOCK`, first come first served), fencing tokens, and a signal when a hold is lost.
//!
//! ```no_run
//! use std::time::Duration;
//! use redis_lock_client::{Session, Wait};
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! let client = redis::Client::open("redis://127.0.0.1/")?;
//! let session = Session::open(&client).await?;
//! let hold = session.lock("invoice:7").acquire(Wait::For(Duration::from_secs(5))).await?;
//! println!("token {}", hold.token()); // hold.lost(): a watch::Receiver<Option<Lost>>
//! hold.release().await?;
//! # Ok(()) }
//! ```
//!
//! # The session
//!
//! A [`Session`] owns one dedicated connection per server (the *session connection*): it
//! sends `LOCK.SESSION <token>` (a random 128-bit token), subscribes to
//! `__lock__:session:<token>` and then only pings (every second). Every acquire carries
//! `SESSION <token>` and `FENCE`: the server renews the hold's lease for as long as the
//! session connection lives, whichever connection took it. When the session connection
//! drops, the session reconnects, names itself again and re-attaches every hold
//! (`LOCK.RENEW key owner PX lease SESSION token`). A hold is **lost** when the server says
//! so on the channel (force-released, gone, moved, past `lock.keepalive-max-hold-ms`), when
//! a re-attach is answered `NOTOWNER`, or when the session connection stayed down longer
//! than the lease: [`Hold::lost`] (and [`Session::lost`] for any hold) then holds
//! `Some(Lost)`. Closing or dropping the session releases every hold; if the process dies,
//! its holds end a lease later.
//!
//! # Waiting
//!
//! An acquire that waits ([`Wait::For`], [`Wait::Forever`]) sends `BLOCK` on a dedicated
//! waiting connection (pooled, never shared while it waits), so the server queues it and
//! hands it the lock in turn: no polling, no pub/sub. Dropping the acquire future
//! (`tokio::time::timeout`, `select!`) closes that connection (the server drops the waiter)
//! and, once the server has seen it closed, sends `LOCK.RELEASE key owner` for a grant that
//! raced the cancel: no waiter and no hold is left behind.
//!
//! A wait whose connection breaks (killed, reaped, reset) while the server can still be
//! reached is cleaned up the same way and queued again, as a fresh owner on a new
//! connection, for the time left: the place in line is lost. A server that cannot be
//! reached is [`Error::Unavailable`]; a refused password or permission, [`Error::Auth`].
//!
//! # Features
//!
//! `session` (default): the client on one server. `tls`: `rediss://`. `cluster`:
//! `Target::cluster`. `sentinel`: `Target::sentinel`.
//!
//! # Owners and re-entry
//!
//! Each [`Lock::acquire`] is a new owner `<token>:<n>`: two tasks acquiring the same key
//! exclude each other even in one session. Re-entry is explicit: [`Hold::reenter`] takes
//! another hold for the same owner at once; each hold is released on its own.
//!
//! # Semaphores and latches
//!
//! [`Session::semaphore`] is a semaphore (`SEM.*`): its [`Permits`] are held as locks are
//! (bound to the session, a fresh owner per acquisition, server-side FIFO waiting, cancel
//! with `LOCK.CANCEL` then `SEM.RELEASE`, re-attach with `SEM.RENEW ... SESSION token`, loss
//! signals). [`Session::latch`] is a count-down latch (`LATCH.*`).
//!
//! # Leader election
//!
//! [`Session::election`] is an election (`ELECT.*`): [`Election::campaign`] waits in the
//! server's FIFO queue until the candidate (a fresh one per campaign, bound to the session)
//! leads, and returns a [`Leadership`] with its term (a fencing token) and a loss signal
//! that fires on a loss message, `demoted`, a broken session connection, or the local
//! deadline (the last answered PING on the session connection sent + lease/2; the session
//! pings every lease/4 then). [`Election::leader`] and [`Election::observe`] (a long poll)
//! tell who leads.
//!
//! # Faces
//!
//! This module is the tokio face; [`blocking`] has the same types for threads.

// Three layers, each importing only those below it: `proto` and `error` (no I/O); the core,
// `session` (the session, its connections, waits and holds: none of the objects); the
// objects `lock`, `sem`, `election` (each only the core, each with its own constructors on
// `Session`); and on top this root and `blocking` (the threads' face of all of them).
#[cfg(feature = "session")]
pub mod blocking;
#[cfg(feature = "session")]
mod election;
mod error;
#[cfg(feature = "session")]
mod lock;
pub mod proto;
#[cfg(feature = "session")]
mod sem;
#[cfg(feature = "session")]
mod session;

#[cfg(feature = "session")]
pub use election::{Election, Leadership};
pub use error::{
    is_auth_error, is_connection_error, is_unknown_command, is_unusable, Error, Result,
};
#[cfg(feature = "session")]
pub use lock::{Lock, MultiLock, RwLock};
pub use proto::{Kind, Leader, Lost, Reason, Wait};
#[cfg(feature = "session")]
pub use sem::{Latch, Permits, Semaphore};
#[cfg(feature = "session")]
pub use session::{Hold, Options, Session, Target};
