//! Connections: the server URL, connecting with a timeout, and commands that
//! follow a cluster's `MOVED` / `ASK` redirections.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisResult, Value};

use crate::exit;
use crate::sys::{self, Peer};

/// How long a connection attempt may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a reply to a command that does not block may take.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long `elect` and `leader --watch` wait before connecting again after a connection broke.
pub const RECONNECT_DELAY: Duration = Duration::from_millis(500);
/// Redirections followed for one command before giving up.
const MAX_REDIRECTS: usize = 5;

pub const DEFAULT_URL: &str = "redis://127.0.0.1:6379";

/// Where to connect: parsed from a `redis://`, `rediss://` or `unix://` URL.
pub fn target(url: &str) -> Result<ConnectionInfo, String> {
    url.into_connection_info()
        .map_err(|e| format!("invalid URL '{}': {e}", redact(url)))
}

/// The URL with its password replaced by `***`, for messages.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.into();
    };
    match rest.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
            None => url.into(),
        },
        None => url.into(),
    }
}

/// `host:port` (or the socket path) of a target, for messages.
pub fn describe(info: &ConnectionInfo) -> String {
    match info.addr() {
        ConnectionAddr::Tcp(host, port) => format!("{host}:{port}"),
        ConnectionAddr::TcpTls { host, port, .. } => format!("{host}:{port} (TLS)"),
        ConnectionAddr::Unix(path) => path.display().to_string(),
        _ => "the server".into(),
    }
}

/// The same target at another node (a redirection), keeping TLS, user,
/// password and protocol. An empty host (`MOVED 12 :6380`) means the host we
/// are connected to.
pub fn redirected(info: &ConnectionInfo, host: &str, port: u16) -> ConnectionInfo {
    let addr = match info.addr() {
        ConnectionAddr::TcpTls {
            host: h,
            insecure,
            tls_params,
            ..
        } => ConnectionAddr::TcpTls {
            host: if host.is_empty() {
                h.clone()
            } else {
                host.into()
            },
            port,
            insecure: *insecure,
            tls_params: tls_params.clone(),
        },
        ConnectionAddr::Tcp(h, _) => ConnectionAddr::Tcp(
            if host.is_empty() {
                h.clone()
            } else {
                host.into()
            },
            port,
        ),
        _ => ConnectionAddr::Tcp(host.into(), port),
    };
    info.clone().set_addr(addr)
}

/// Host and port of a redirection's `host:port` (`[::1]:7000`, `::1:7000`,
/// `:7000` for "the host you are connected to" all allowed).
pub fn node(addr: &str) -> Option<(String, u16)> {
    let (host, port) = addr.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((host.to_string(), port.parse().ok()?))
}

fn command(args: &[String]) -> redis::Cmd {
    let mut cmd = redis::Cmd::new();
    for a in args {
        cmd.arg(a.as_bytes());
    }
    cmd
}

/// What failed while connecting: the connection itself (with the
/// handshake: `HELLO`, `AUTH`) or selecting the URL's database.
#[derive(Debug)]
pub enum ConnectError {
    Connect(redis::RedisError),
    /// `SELECT db` answered an error: the connection works, the database is
    /// refused.
    Select(i64, redis::RedisError),
}

impl ConnectError {
    pub fn into_error(self) -> redis::RedisError {
        match self {
            ConnectError::Connect(e) | ConnectError::Select(_, e) => e,
        }
    }
}

/// Connections are made one at a time (see [`Conn::fd`]).
static CONNECTING: Mutex<()> = Mutex::new(());

/// The open sockets of this process: descriptor and `socket:[inode]`.
fn sockets() -> HashSet<(i32, PathBuf)> {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else {
        return HashSet::new();
    };
    dir.filter_map(|entry| {
        let entry = entry.ok()?;
        let fd: i32 = entry.file_name().to_str()?.parse().ok()?;
        let target = std::fs::read_link(entry.path()).ok()?;
        target
            .to_str()
            .is_some_and(|t| t.starts_with("socket:"))
            .then_some((fd, target))
    })
    .collect()
}

/// Whether a socket connected to `peer` may be one to `info`'s address.
fn leads_to(peer: &Peer, info: &ConnectionInfo) -> bool {
    match (peer, info.addr()) {
        (Peer::Tcp(p), ConnectionAddr::Tcp(_, port)) => p == port,
        (Peer::Tcp(p), ConnectionAddr::TcpTls { port, .. }) => p == port,
        // The server's path may be spelled otherwise than in the URL.
        (Peer::Unix(_), ConnectionAddr::Unix(_)) => true,
        _ => false,
    }
}

/// One connection, which moves to another node when a command is redirected.
pub struct Conn {
    info: ConnectionInfo,
    con: redis::Connection,
    fd: Option<i32>,
}

impl Conn {
    /// Connects (with the handshake the URL asks for), then selects the
    /// URL's database with a `SELECT` of our own, so that a refused
    /// database is told apart from a refused login.
    pub fn connect(info: &ConnectionInfo) -> Result<Conn, ConnectError> {
        let db = info.redis_settings().db();
        let plain = info
            .clone()
            .set_redis_settings(info.redis_settings().clone().set_db(0));
        let (con, fd) = {
            let _one_at_a_time = CONNECTING
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let before = sockets();
            let client = redis::Client::open(plain).map_err(ConnectError::Connect)?;
            let con = client
                .get_connection_with_timeout(CONNECT_TIMEOUT)
                .map_err(ConnectError::Connect)?;
            let new: Vec<i32> = sockets()
                .difference(&before)
                .map(|(fd, _)| *fd)
                .filter(|fd| sys::peer(*fd).is_some_and(|p| leads_to(&p, info)))
                .collect();
            (con, (new.len() == 1).then(|| new[0]))
        };
        con.set_read_timeout(Some(REPLY_TIMEOUT))
            .map_err(ConnectError::Connect)?;
        con.set_write_timeout(Some(REPLY_TIMEOUT))
            .map_err(ConnectError::Connect)?;
        let mut conn = Conn {
            info: info.clone(),
            con,
            fd,
        };
        if db != 0 {
            if let Err(e) = conn.call(&["SELECT".into(), db.to_string()]) {
                return Err(if exit::is_connection_error(&e) {
                    ConnectError::Connect(e)
                } else {
                    ConnectError::Select(db, e)
                });
            }
        }
        Ok(conn)
    }

    /// The node this connection is on now.
    pub fn info(&self) -> &ConnectionInfo {
        &self.info
    }

    /// The descriptor of this connection's socket, if it could be told
    /// (Linux's /proc: the socket that appeared while connecting, leading
    /// to the server's port; connections are made one at a time).
    pub fn fd(&self) -> Option<i32> {
        self.fd
    }

    /// The connection itself (for a subscribed session connection).
    pub fn connection(&mut self) -> &mut redis::Connection {
        &mut self.con
    }

    /// A new connection to the same node, replacing this one.
    pub fn reconnect(&mut self) -> Result<(), ConnectError> {
        *self = Conn::connect(&self.info)?;
        Ok(())
    }

    /// Sends a command that answers at once.
    pub fn call(&mut self, args: &[String]) -> RedisResult<Value> {
        self.call_waiting(args, Some(REPLY_TIMEOUT))
    }

    /// Sends a command whose reply may take up to `patience` (`None`: no
    /// limit, for `BLOCK 0`), following redirections: `MOVED` moves this
    /// connection to the node named, `ASK` sends `ASKING` and the command to
    /// it (and moves there too, so a `KEEPALIVE` hold stays bound to this
    /// connection).
    pub fn call_waiting(
        &mut self,
        args: &[String],
        patience: Option<Duration>,
    ) -> RedisResult<Value> {
        self.con.set_read_timeout(patience)?;
        let cmd = command(args);
        let mut asking = false;
        let mut redirects = 0;
        let result = loop {
            let reply: RedisResult<Value> = if asking {
                redis::pipe()
                    .cmd("ASKING")
                    .ignore()
                    .add_command(cmd.clone())
                    .query::<Vec<Value>>(&mut self.con)
                    .map(|mut v| v.pop().unwrap_or(Value::Nil))
            } else {
                cmd.query(&mut self.con)
            };
            let e = match reply {
                Ok(v) => break Ok(v),
                Err(e) => e,
            };
            let Some((host, port)) = e.redirect_node().and_then(|(addr, _slot)| node(addr)) else {
                break Err(e);
            };
            redirects += 1;
            if redirects > MAX_REDIRECTS {
                break Err(e);
            }
            asking = e.code() == Some("ASK");
            let next = redirected(&self.info, &host, port);
            *self = Conn::connect(&next).map_err(ConnectError::into_error)?;
            self.con.set_read_timeout(patience)?;
        };
        self.con.set_read_timeout(Some(REPLY_TIMEOUT))?;
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let t = target("redis://127.0.0.1:7001/2").expect("url");
        assert_eq!(describe(&t), "127.0.0.1:7001");
        assert_eq!(t.redis_settings().db(), 2);
        let t = target("redis://user:secret@example.com:7002").expect("url");
        assert_eq!(t.redis_settings().username(), Some("user"));
        assert_eq!(t.redis_settings().password(), Some("secret"));
        let t = target("rediss://example.com:6380").expect("tls url");
        assert!(matches!(t.addr(), ConnectionAddr::TcpTls { .. }));
        assert!(target("http://x").is_err());
    }

    #[test]
    fn redaction() {
        assert_eq!(redact("redis://u:pw@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact("redis://h:1"), "redis://h:1");
        assert_eq!(redact("redis://:pw@h:1"), "redis://:***@h:1");
    }

    #[test]
    fn redirection_targets() {
        assert_eq!(node("127.0.0.1:7001"), Some(("127.0.0.1".into(), 7001)));
        assert_eq!(node("[::1]:7001"), Some(("::1".into(), 7001)));
        assert_eq!(node("::1:7001"), Some(("::1".into(), 7001)));
        assert_eq!(node(":7001"), Some((String::new(), 7001)));
        assert_eq!(node("h:x"), None);
        assert_eq!(node("h"), None);
    }

    #[test]
    fn redirections_keep_the_rest() {
        let t = target("rediss://u:pw@example.com:6380/0").expect("url");
        let r = redirected(&t, "10.0.0.2", 7000);
        match r.addr() {
            ConnectionAddr::TcpTls { host, port, .. } => {
                assert_eq!((host.as_str(), *port), ("10.0.0.2", 7000))
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(r.redis_settings().password(), Some("pw"));
        let t = target("redis://h1:6379").expect("url");
        assert_eq!(describe(&redirected(&t, "", 7001)), "h1:7001");
    }
}
