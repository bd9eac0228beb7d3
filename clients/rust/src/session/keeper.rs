//! The session connection of each node and the task that keeps it: opened with
//! `LOCK.SESSION token` and a `SUBSCRIBE` to the session's channel, pinged, reconnected and
//! named again when it drops (then every hold on the node is re-attached), its loss
//! messages dispatched; and the waits of an acquire for it (a node's first hold, a
//! `NOSESSION`).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, PushInfo, PushKind, RedisError, Value};
use tokio::sync::{mpsc, watch};

use super::state::{lock, Inner, NodeState};
#[cfg(feature = "sentinel")]
use super::target::Backend;
use crate::error::{Error, Result};
use crate::proto::{self, Message, Reason};

impl Inner {
    /// Opens the session connection: `CLIENT SETNAME`, `LOCK.SESSION token`, `SUBSCRIBE`.
    async fn connect_session(&self, node: &str) -> Result<SessionConn> {
        let sent = Instant::now();
        let (tx, rx) = mpsc::unbounded_channel::<PushInfo>();
        let timeout = self.opts.ping_interval.max(Duration::from_secs(1));
        let mut con = self
            .connect(
                node,
                AsyncConnectionConfig::new()
                    .set_response_timeout(Some(timeout))
                    .set_push_sender(tx),
                true,
            )
            .await?;
        let _ = redis::cmd("CLIENT")
            .arg("SETNAME")
            .arg(format!("lock-session:{}", self.token))
            .exec_async(&mut con)
            .await;
        // `ERR unknown command`: Error::ModuleNotLoaded.
        con.send_packed_command(&proto::cmd(&proto::session(&self.token)))
            .await
            .and_then(Value::extract_error)?;
        self.read_lease_floor(&mut con).await?;
        #[cfg(feature = "sentinel")]
        if matches!(self.backend, Backend::Sentinel { .. }) {
            // Sentinel may still name the old master for a moment after a failover.
            let role: Value = redis::cmd("ROLE").query_async(&mut con).await?;
            let is_master = matches!(&role, Value::Array(v) if matches!(v.first(),
                Some(Value::BulkString(b)) if b == b"master"));
            if !is_master {
                return Err(Error::Unavailable(RedisError::from((
                    redis::ErrorKind::Io,
                    "Sentinel named a server that is not a master (yet)",
                ))));
            }
        }
        con.subscribe(proto::channel(&self.token)).await?;
        Ok(SessionConn { con, rx, sent })
    }

    /// Makes sure a session connection is open on `node` (a cluster opens one per node on
    /// the first hold there).
    pub async fn ensure_session(self: &Arc<Self>, node: &str) -> Result<()> {
        if lock(&self.nodes).contains_key(node) {
            return Ok(());
        }
        let _one = self.session_open.lock().await;
        if lock(&self.nodes).contains_key(node) {
            return Ok(());
        }
        let first = self.connect_session(node).await?;
        // Refused when it opens rather than at each acquire, in the lease's words (the
        // server's refusal names KEEPALIVE). Dropping `first` closes its connection.
        self.check_lease(self.opts.lease)?;
        let (up_tx, up_rx) = watch::channel(true);
        let (alive_tx, alive_rx) = watch::channel(first.sent);
        lock(&self.nodes).insert(
            node.to_string(),
            NodeState {
                up: up_rx,
                alive: alive_rx,
            },
        );
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.handle.spawn(keep(
            self.clone(),
            node.to_string(),
            first,
            Signals {
                up: up_tx,
                alive: alive_tx,
            },
        ));
        Ok(())
    }

    /// After `NOSESSION` from `node`: the session there is down or unknown to that server
    /// (a restart, a failover, a new cluster node). Waits until the session connection has
    /// been named again since `sent_at` (bounded by the lease), opening it if it is new.
    pub async fn resume_session(self: &Arc<Self>, node: &str, sent_at: u64) -> Result<()> {
        if self.is_cluster() {
            self.refresh_slots().await;
        }
        let up = lock(&self.nodes).get(node).map(|n| n.up.clone());
        let Some(mut up) = up else {
            return self.ensure_session(node).await;
        };
        let deadline = tokio::time::Instant::now() + self.opts.lease.min(Duration::from_secs(10));
        loop {
            if *up.borrow_and_update() && self.generation() != sent_at {
                return Ok(());
            }
            match tokio::time::timeout_at(deadline, up.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Err(Error::Closed),
                Err(_) => {
                    if *up.borrow() && self.generation() == sent_at {
                        // Up all along by its pings, yet unknown to the server: reconnect it.
                        return Ok(());
                    }
                    return Err(Error::Unavailable(RedisError::from((
                        redis::ErrorKind::Io,
                        "the session connection could not be opened again",
                    ))));
                }
            }
        }
    }
}

pub(crate) struct SessionConn {
    con: MultiplexedConnection,
    rx: mpsc::UnboundedReceiver<PushInfo>,
    /// When its handshake was sent.
    sent: Instant,
}

/// What the task keeping a node's session connection tells: whether it is up, and when the
/// last answered round trip on it was sent.
struct Signals {
    up: watch::Sender<bool>,
    alive: watch::Sender<Instant>,
}

enum End {
    Shutdown,
    Dropped,
    Demoted,
}

/// Until the session is closed: at once if it is. The value, not a change: a session closed
/// before its connection's task first ran (the task's receiver, made then, sees `true` as
/// already seen) would not be told otherwise, and its task would ping on forever.
async fn closed(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|closed| *closed).await;
}

/// Keeps the session connection of `node`: pings it, reconnects and re-attaches every hold
/// when it drops, and signals losses.
async fn keep(inner: Arc<Inner>, node: String, first: SessionConn, signals: Signals) {
    let Signals { up, alive } = signals;
    let mut shutdown = inner.shutdown.subscribe();
    let mut conn = Some(first);
    let mut last_ok = Instant::now();
    let mut backoff = Duration::from_millis(20);
    let mut reattach = false;
    loop {
        if let Some(c) = conn.take() {
            if reattach {
                inner.generation.fetch_add(1, Ordering::SeqCst);
                inner.reattach(&node).await;
            }
            reattach = true;
            up.send_replace(true);
            alive.send_replace(c.sent);
            last_ok = Instant::now();
            backoff = Duration::from_millis(20);
            let end = run(&inner, c, &mut last_ok, &alive, &mut shutdown).await;
            up.send_replace(false);
            match end {
                End::Shutdown => return,
                End::Demoted => {
                    inner.lose_elections(&node, Reason::Demoted);
                    inner.invalidate(&node)
                }
                End::Dropped => inner.lose_elections(&node, Reason::ConnectionLost),
            }
        }
        if *shutdown.borrow() {
            return;
        }
        if last_ok.elapsed() > inner.opts.lease {
            inner.lose_node(&node, Reason::SessionDown);
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = closed(&mut shutdown) => return,
        }
        backoff = (backoff * 2).min(Duration::from_millis(500));
        match inner.connect_session(&node).await {
            Ok(c) => conn = Some(c),
            Err(_) => inner.invalidate(&node),
        }
    }
}

async fn run(
    inner: &Inner,
    c: SessionConn,
    last_ok: &mut Instant,
    alive: &watch::Sender<Instant>,
    shutdown: &mut watch::Receiver<bool>,
) -> End {
    let SessionConn {
        mut con, mut rx, ..
    } = c;
    let mut every = inner.ping_every.subscribe();
    let mut last_ping = tokio::time::Instant::now();
    loop {
        let next_ping = last_ping + *every.borrow_and_update();
        tokio::select! {
            // A shorter interval asked for (an election): the next ping is due sooner.
            _ = every.changed() => {}
            _ = closed(shutdown) => return End::Shutdown,
            msg = rx.recv() => match msg {
                None => return End::Dropped,
                // Seen at once: the connection lived until now.
                Some(p) if p.kind == PushKind::Disconnection => {
                    *last_ok = Instant::now();
                    return End::Dropped;
                }
                Some(p) if p.kind == PushKind::Message => {
                    let payload = match p.data.get(1) {
                        Some(Value::BulkString(b)) => b.clone(),
                        Some(Value::SimpleString(s)) => s.clone().into_bytes(),
                        _ => continue,
                    };
                    match proto::message(&payload) {
                        Some(Message::Demoted) => return End::Demoted,
                        Some(Message::Lost { reason, owner, key }) => inner.lose(&owner, &key, reason),
                        None => {}
                    }
                }
                Some(_) => {}
            },
            _ = tokio::time::sleep_until(next_ping) => {
                let sent = Instant::now();
                last_ping = tokio::time::Instant::now();
                match redis::cmd("PING").query_async::<Value>(&mut con).await {
                    Ok(_) => {
                        *last_ok = Instant::now();
                        alive.send_replace(sent);
                    }
                    Err(_) => return End::Dropped,
                }
            }
        }
    }
}
