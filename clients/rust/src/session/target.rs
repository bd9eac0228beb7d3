//! Where a session connects ([`Target`]: one server, a Sentinel-monitored master, a
//! cluster) and its settings ([`Options`]).

#[cfg(any(feature = "cluster", feature = "sentinel"))]
use redis::IntoConnectionInfo;
#[cfg(any(feature = "cluster", feature = "sentinel"))]
use redis::RedisResult;
#[cfg(feature = "cluster")]
use redis::{ConnectionInfo, RedisError};
#[cfg(feature = "sentinel")]
use std::sync::Mutex;
use std::time::Duration;

/// Where the session connects: one server, a Sentinel-monitored master (feature
/// `sentinel`), or a cluster (feature `cluster`).
pub struct Target(pub(crate) Backend);

pub(crate) enum Backend {
    Single(redis::Client),
    #[cfg(feature = "sentinel")]
    Sentinel {
        sentinel: tokio::sync::Mutex<redis::sentinel::SentinelClient>,
        master: Mutex<Option<redis::Client>>,
    },
    #[cfg(feature = "cluster")]
    Cluster {
        client: redis::cluster::ClusterClient,
        template: ConnectionInfo,
    },
}

impl Target {
    /// A cluster, from the addresses of some of its nodes (the first one's user, password
    /// and TLS settings are used for the direct connections to every node).
    #[cfg(feature = "cluster")]
    pub fn cluster<T: IntoConnectionInfo>(nodes: Vec<T>) -> RedisResult<Target> {
        let infos: Vec<ConnectionInfo> = nodes
            .into_iter()
            .map(IntoConnectionInfo::into_connection_info)
            .collect::<RedisResult<_>>()?;
        let template = infos.first().cloned().ok_or_else(|| {
            RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "no cluster node given",
            ))
        })?;
        let client = redis::cluster::ClusterClient::builder(infos)
            .connection_timeout(Duration::from_secs(5))
            .response_timeout(Duration::from_secs(10))
            .build()?;
        Ok(Target(Backend::Cluster { client, template }))
    }

    /// The master that Sentinels at `sentinels` monitor as `master_name`. The session asks
    /// them for the master at every (re)connection, so after a failover it re-attaches its
    /// holds on the new master.
    #[cfg(feature = "sentinel")]
    pub fn sentinel<T: IntoConnectionInfo>(
        sentinels: Vec<T>,
        master_name: impl Into<String>,
    ) -> RedisResult<Target> {
        let sentinel = redis::sentinel::SentinelClient::build(
            sentinels,
            // A `String`: the redis crate takes one without `tls-rustls`, `impl AsRef<str>` with.
            master_name.into(),
            None,
            redis::sentinel::SentinelServerType::Master,
        )?;
        Ok(Target(Backend::Sentinel {
            sentinel: tokio::sync::Mutex::new(sentinel),
            master: Mutex::new(None),
        }))
    }
}

impl From<redis::Client> for Target {
    fn from(c: redis::Client) -> Target {
        Target(Backend::Single(c))
    }
}

impl From<&redis::Client> for Target {
    fn from(c: &redis::Client) -> Target {
        Target(Backend::Single(c.clone()))
    }
}

/// Session settings.
#[derive(Clone, Debug)]
pub struct Options {
    /// The lease of every hold (default 30 s): how long a hold outlives its session once the
    /// session connection is gone. At least the server's `lock_keepalive_min_lease_ms` (704
    /// ms at `hz 10`, `INFO lock`): else opening the session is
    /// [`Error::LeaseTooShort`].
    ///
    /// [`Error::LeaseTooShort`]: crate::Error::LeaseTooShort
    pub lease: Duration,
    /// How often the session connection is pinged (default 1 s).
    pub ping_interval: Duration,
    /// How long connecting may take (default 5 s).
    pub connect_timeout: Duration,
    /// How long a command that does not wait may take (default 5 s).
    pub response_timeout: Duration,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            lease: Duration::from_secs(30),
            ping_interval: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(5),
            response_timeout: Duration::from_secs(5),
        }
    }
}

impl Options {
    pub fn lease(mut self, lease: Duration) -> Options {
        self.lease = lease;
        self
    }

    pub fn ping_interval(mut self, every: Duration) -> Options {
        self.ping_interval = every;
        self
    }
}
