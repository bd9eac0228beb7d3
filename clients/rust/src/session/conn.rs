//! The session's connections other than the session connections: the shared command
//! connection (or the cluster client's routing), the pool of waiting connections per node
//! (checked out for one wait, back in once answered), how a node is reached (one server,
//! Sentinel's master, a cluster node), and what is read from the servers with them (the
//! lease floor, the cluster's slot map).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use redis::aio::MultiplexedConnection;
#[cfg(feature = "cluster")]
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
#[cfg(feature = "cluster")]
use redis::ConnectionAddr;
use redis::{
    AsyncConnectionConfig, ConnectionInfo, ProtocolVersion, PushInfo, PushKind, RedisResult, Value,
};

#[cfg(feature = "cluster")]
use super::state::protocol_error;
use super::state::{lock, Conn, Inner};
use super::target::Backend;
use crate::error::is_unusable;
use crate::proto;

/// Idle waiting connections kept per node.
const POOL_MAX: usize = 64;

impl Inner {
    /// Reads the server's lease floor (`INFO lock`) on `con`; see [`Inner::note_lease_floor`].
    pub(super) async fn read_lease_floor(
        &self,
        con: &mut MultiplexedConnection,
    ) -> RedisResult<()> {
        let info: Value = redis::cmd("INFO").arg("lock").query_async(con).await?;
        self.note_lease_floor(&info);
        Ok(())
    }

    /// A cluster's lease floor, from one node (`INFO lock`) when the session opens; each
    /// node's own is read when its session connection opens.
    #[cfg(feature = "cluster")]
    pub(super) async fn read_cluster_lease_floor(&self) -> RedisResult<()> {
        let Some(cluster) = &self.cluster else {
            return Ok(());
        };
        let info = cluster
            .clone()
            .route_command(
                redis::cmd("INFO").arg("lock").clone(),
                RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
            )
            .await?;
        self.note_lease_floor(&info);
        Ok(())
    }

    /// Connection settings for a node: the single server, the master Sentinel names now,
    /// or a cluster node.
    // `node` names a cluster node; one server or Sentinel's master has one node ("").
    #[cfg_attr(not(feature = "cluster"), allow(unused_variables))]
    async fn node_info(&self, node: &str) -> RedisResult<ConnectionInfo> {
        match &self.backend {
            Backend::Single(c) => Ok(c.get_connection_info().clone()),
            #[cfg(feature = "sentinel")]
            Backend::Sentinel { sentinel, master } => {
                if let Some(c) = lock(master).clone() {
                    return Ok(c.get_connection_info().clone());
                }
                let c = sentinel.lock().await.async_get_client().await?;
                *lock(master) = Some(c.clone());
                Ok(c.get_connection_info().clone())
            }
            #[cfg(feature = "cluster")]
            Backend::Cluster { template, .. } => {
                let (host, port) = node
                    .rsplit_once(':')
                    .and_then(|(h, p)| Some((h.to_string(), p.parse::<u16>().ok()?)))
                    .ok_or_else(|| protocol_error(&format!("cluster node '{node}'")))?;
                let addr = match template.addr() {
                    ConnectionAddr::TcpTls {
                        insecure,
                        tls_params,
                        ..
                    } => ConnectionAddr::TcpTls {
                        host,
                        port,
                        insecure: *insecure,
                        tls_params: tls_params.clone(),
                    },
                    _ => ConnectionAddr::Tcp(host, port),
                };
                Ok(template.clone().set_addr(addr))
            }
        }
    }

    pub(super) async fn connect(
        &self,
        node: &str,
        config: AsyncConnectionConfig,
        resp3: bool,
    ) -> RedisResult<MultiplexedConnection> {
        let mut info = self.node_info(node).await?;
        if resp3 {
            let settings = info
                .redis_settings()
                .clone()
                .set_protocol(ProtocolVersion::RESP3);
            info = info.set_redis_settings(settings);
        }
        let client = redis::Client::open(info)?;
        client
            .get_multiplexed_async_connection_with_config(
                &config.set_connection_timeout(Some(self.opts.connect_timeout)),
            )
            .await
    }

    /// Forgets connections to `node` after it failed or stopped being the master: the next
    /// use connects again (asking Sentinel anew).
    pub fn invalidate(&self, node: &str) {
        #[cfg(feature = "sentinel")]
        if let Backend::Sentinel { master, .. } = &self.backend {
            *lock(master) = None;
        }
        lock(&self.pool).remove(node);
        if !self.is_cluster() {
            *lock(&self.cmd) = None;
        }
    }

    /// A connection watched for its close (RESP3: the redis crate reports a close through a
    /// push sender only there).
    async fn connect_watched(
        &self,
        node: &str,
        config: AsyncConnectionConfig,
    ) -> RedisResult<Conn> {
        let closed = Arc::new(AtomicBool::new(false));
        let seen = closed.clone();
        let config = config.set_push_sender(move |p: PushInfo| {
            if p.kind == PushKind::Disconnection {
                seen.store(true, Ordering::SeqCst);
            }
            Ok::<(), std::convert::Infallible>(())
        });
        let con = self.connect(node, config, true).await?;
        Ok(Conn { con, closed })
    }

    /// The shared command connection: the open one, or a new one if it closed.
    async fn command_conn(&self) -> RedisResult<MultiplexedConnection> {
        let open = || lock(&self.cmd).clone().filter(|c| !c.is_closed());
        if let Some(c) = open() {
            return Ok(c.con);
        }
        let _one = self.connecting.lock().await;
        if let Some(c) = open() {
            return Ok(c.con);
        }
        let c = self
            .connect_watched(
                "",
                AsyncConnectionConfig::new().set_response_timeout(Some(self.opts.response_timeout)),
            )
            .await?;
        *lock(&self.cmd) = Some(c.clone());
        Ok(c.con)
    }

    /// Sends a command that answers at once on the shared command connection (a cluster:
    /// routed to the master of `key`'s slot, following `MOVED`).
    // `key` routes in a cluster only.
    #[cfg_attr(not(feature = "cluster"), allow(unused_variables))]
    pub async fn command(&self, args: &[String], key: Option<&str>) -> RedisResult<Value> {
        let cmd = proto::cmd(args);
        #[cfg(feature = "cluster")]
        if let Some(cluster) = &self.cluster {
            let mut c = cluster.clone();
            let routing = match key {
                Some(k) => RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(
                    Route::new(proto::key_slot(k.as_bytes()), SlotAddr::Master),
                )),
                None => RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
            };
            return c
                .route_command(cmd, routing)
                .await
                .and_then(Value::extract_error);
        }
        let mut c = self.command_conn().await?;
        let r = c
            .send_packed_command(&cmd)
            .await
            .and_then(Value::extract_error);
        if let Err(e) = &r {
            if is_unusable(e) || e.code() == Some("READONLY") {
                self.invalidate("");
            }
        }
        r
    }

    /// A dedicated connection to `node` for one wait: an open one from the pool (those the
    /// server closed meanwhile are dropped), or a new one.
    pub async fn checkout(&self, node: &str) -> RedisResult<Conn> {
        loop {
            let Some(c) = lock(&self.pool).get_mut(node).and_then(Vec::pop) else {
                break;
            };
            if !c.is_closed() {
                return Ok(c);
            }
        }
        self.connect_watched(
            node,
            AsyncConnectionConfig::new().set_response_timeout(None),
        )
        .await
    }

    pub fn checkin(&self, node: &str, c: Conn) {
        if self.is_closed() || c.is_closed() {
            return;
        }
        let mut pool = lock(&self.pool);
        let idle = pool.entry(node.to_string()).or_default();
        if idle.len() < POOL_MAX {
            idle.push(c);
        }
    }

    /// Reads the cluster's slot map (`CLUSTER SLOTS`).
    #[cfg(not(feature = "cluster"))]
    pub async fn refresh_slots(&self) {}

    /// Reads the cluster's slot map (`CLUSTER SLOTS`).
    #[cfg(feature = "cluster")]
    pub async fn refresh_slots(&self) {
        let Some(cluster) = &self.cluster else { return };
        let mut c = cluster.clone();
        let Ok(Value::Array(ranges)) = c
            .route_command(
                redis::cmd("CLUSTER").arg("SLOTS").clone(),
                RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
            )
            .await
        else {
            return;
        };
        let default_host = match &self.backend {
            Backend::Cluster { template, .. } => match template.addr() {
                ConnectionAddr::Tcp(h, _) | ConnectionAddr::TcpTls { host: h, .. } => h.clone(),
                _ => "127.0.0.1".into(),
            },
            _ => return,
        };
        let mut map = Vec::new();
        for r in ranges {
            let Value::Array(parts) = r else { continue };
            let (Some(Value::Int(a)), Some(Value::Int(b)), Some(Value::Array(master))) =
                (parts.first(), parts.get(1), parts.get(2))
            else {
                continue;
            };
            let host = match master.first() {
                Some(Value::BulkString(h)) if !h.is_empty() && h != b"?" => {
                    String::from_utf8_lossy(h).into_owned()
                }
                _ => default_host.clone(),
            };
            let Some(Value::Int(port)) = master.get(1) else {
                continue;
            };
            map.push((*a as u16, *b as u16, format!("{host}:{port}")));
        }
        if !map.is_empty() {
            *lock(&self.slots) = map;
        }
    }
}
