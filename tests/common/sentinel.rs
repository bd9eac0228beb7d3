//! Redis Sentinel for tests: sentinels (the server binary run as
//! `<binary> sentinel.conf --sentinel`) watching one master named
//! [`MASTER_NAME`], on free loopback ports, each with its own directory and
//! sentinel.conf, killed by PID when dropped; and the questions a test asks
//! of them: who the master is, whether a failover has happened, whether the
//! whole group has settled (one master every sentinel agrees on, the other
//! servers replicating it, no sentinel seeing anything down). Servers are
//! named by address: they may listen on loopback or in network namespaces
//! of their own ([`super::Config::in_netns`]).

use std::collections::HashMap;
use std::fs;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::{free_port, fresh_dir, server_binary, Connection, Server};

pub const MASTER_NAME: &str = "m";
/// How long a master must not answer before a sentinel thinks it down.
/// Sentinel documents no minimum (it must be positive), but it pings an
/// instance only once `min(this, 1 s)` has passed since its last reply,
/// counting from when it (re)created its link: a fresh link to a newly
/// promoted master gets its first PING just as this much has passed when
/// it is 1 s or less, so the sentinels can see the new master down a moment
/// after the switch and fail over again. With 400 ms that happened after
/// about half of the failovers, twice in a row, ending on the old master
/// restarted empty (all data lost). Above 1 s plus the sentinels' 100 ms
/// timer, with margin for a busy machine.
pub const DOWN_AFTER_MS: u64 = 2000;
/// Bounds each step of a failover, and a sentinel does not try the same
/// master again for twice this after a failover started.
pub const FAILOVER_TIMEOUT_MS: u64 = 2000;
/// Sentinels that must agree the master is down.
pub const QUORUM: usize = 2;

pub struct Sentinel {
    pub port: u16,
    pub dir: PathBuf,
    child: Option<Child>,
}

impl Sentinel {
    fn start(master: &Server) -> Sentinel {
        let mut errors = Vec::new();
        for _ in 0..3 {
            let mut sentinel = Sentinel {
                port: free_port(),
                dir: fresh_dir(),
                child: None,
            };
            match sentinel.spawn(master) {
                Ok(()) => return sentinel,
                Err(e) => errors.push(format!("port {}: {e}", sentinel.port)),
            }
        }
        panic!(
            "sentinel ({} --sentinel) did not start:\n{}",
            server_binary(),
            errors.join("\n")
        );
    }

    fn spawn(&mut self, master: &Server) -> Result<(), String> {
        // The sentinel rewrites its file (ids, epochs, what it discovered).
        // It announces itself to the others on loopback, where it listens
        // (by default it would give its address on the link to the master).
        let conf = self.dir.join("sentinel.conf");
        let text = format!(
            "port {port}\nbind 127.0.0.1\ndir {dir}\nlogfile sentinel.log\n\
             sentinel announce-ip 127.0.0.1\n\
             sentinel monitor {MASTER_NAME} {host} {master} {QUORUM}\n\
             sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}\n\
             sentinel failover-timeout {MASTER_NAME} {FAILOVER_TIMEOUT_MS}\n\
             sentinel parallel-syncs {MASTER_NAME} 1\n",
            port = self.port,
            dir = self.dir.display(),
            host = master.host(),
            master = master.port,
        );
        fs::write(&conf, text).map_err(|e| format!("write {}: {e}", conf.display()))?;
        let mut child = Command::new(server_binary())
            .current_dir(&self.dir)
            .arg(&conf)
            .arg("--sentinel")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("spawn {} --sentinel: {e}", server_binary()))?;
        let ready = || {
            connect(self.addr(), Duration::from_millis(200))
                .is_ok_and(|mut con| redis::cmd("PING").query::<String>(&mut con).is_ok())
        };
        super::wait_ready(&mut child, ready, || self.log())?;
        self.child = Some(child);
        Ok(())
    }

    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("sentinel.log")).unwrap_or_default()
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::new(Ipv4Addr::LOCALHOST.into(), self.port)
    }

    /// This sentinel's answer to `SENTINEL get-master-addr-by-name`.
    pub fn master_addr(&self) -> Result<SocketAddr, String> {
        ask_master(self.addr())
    }

    fn client(&self) -> Result<Connection, String> {
        connect(self.addr(), Duration::from_secs(1))
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if !thread::panicking() {
            let _ = fs::remove_dir_all(&self.dir);
        } else {
            eprintln!("sentinel {} log kept in {}", self.port, self.dir.display());
        }
    }
}

/// A connection with connect and read timeouts.
pub fn connect(addr: SocketAddr, timeout: Duration) -> Result<Connection, String> {
    let client = redis::Client::open(format!("redis://{addr}/"))
        .map_err(|e| format!("client for {addr}: {e}"))?;
    let con = client
        .get_connection_with_timeout(timeout)
        .map_err(|e| format!("connect to {addr}: {e}"))?;
    con.set_read_timeout(Some(timeout))
        .map_err(|e| format!("read timeout on {addr}: {e}"))?;
    con.set_write_timeout(Some(timeout))
        .map_err(|e| format!("write timeout on {addr}: {e}"))?;
    Ok(con)
}

/// The master's address as the sentinel at `sentinel` names it.
pub fn ask_master(sentinel: SocketAddr) -> Result<SocketAddr, String> {
    let mut con = connect(sentinel, Duration::from_secs(1))?;
    let addr: Option<(String, String)> = redis::cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg(MASTER_NAME)
        .query(&mut con)
        .map_err(|e| format!("sentinel {sentinel}: {e}"))?;
    let (host, port) = addr.ok_or_else(|| format!("sentinel {sentinel} knows no master"))?;
    format!("{host}:{port}")
        .parse()
        .map_err(|e| format!("sentinel {sentinel} named {host}:{port}: {e}"))
}

/// A server's `ROLE`: `master`, `slave` (or `replica`), `sentinel`.
pub fn role(con: &mut Connection) -> Result<String, String> {
    let reply: Vec<redis::Value> = redis::cmd("ROLE")
        .query(con)
        .map_err(|e| format!("ROLE: {e}"))?;
    match reply.first() {
        Some(redis::Value::BulkString(b)) => Ok(String::from_utf8_lossy(b).into_owned()),
        Some(redis::Value::SimpleString(s)) => Ok(s.clone()),
        other => Err(format!("ROLE replied {other:?}")),
    }
}

/// A sentinel's flat field/value reply (`SENTINEL master`, one entry of
/// `SENTINEL replicas`) as a map.
fn fields(flat: Vec<String>) -> HashMap<String, String> {
    flat.chunks(2)
        .filter(|kv| kv.len() == 2)
        .map(|kv| (kv[0].clone(), kv[1].clone()))
        .collect()
}

/// Flags that say a sentinel does not see an instance as healthy.
fn troubled(flags: &str) -> bool {
    flags.split(',').any(|f| {
        [
            "s_down",
            "o_down",
            "disconnected",
            "failover_in_progress",
            "promoted",
            "reconf_sent",
            "reconf_inprog",
        ]
        .contains(&f)
    })
}

/// INFO replication of a server, as (field, value) pairs.
fn replication(addr: SocketAddr) -> Result<HashMap<String, String>, String> {
    let mut con = connect(addr, Duration::from_secs(1))?;
    let text: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut con)
        .map_err(|e| format!("INFO replication on {addr}: {e}"))?;
    Ok(text
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect())
}

pub struct Sentinels {
    pub nodes: Vec<Sentinel>,
}

impl Sentinels {
    /// `count` sentinels watching `master`; returns once each has found the
    /// other sentinels and `replicas` replicas (through the master's
    /// INFO and its hello channel, which take a few seconds).
    pub fn start(count: usize, master: &Server, replicas: usize) -> Sentinels {
        let sentinels = Sentinels {
            nodes: (0..count).map(|_| Sentinel::start(master)).collect(),
        };
        sentinels.wait(
            "every sentinel to find the others and the replicas",
            PATIENCE_SETTLE,
            || {
                for s in &sentinels.nodes {
                    let mut con = s.client()?;
                    let master: Vec<String> = redis::cmd("SENTINEL")
                        .arg("master")
                        .arg(MASTER_NAME)
                        .query(&mut con)
                        .map_err(|e| format!("sentinel {}: {e}", s.port))?;
                    let master = fields(master);
                    let others = master
                        .get("num-other-sentinels")
                        .cloned()
                        .unwrap_or_default();
                    let known = master.get("num-slaves").cloned().unwrap_or_default();
                    if others != (count - 1).to_string() || known != replicas.to_string() {
                        return Err(format!(
                            "sentinel {} sees {others} other sentinels and {known} replicas",
                            s.port
                        ));
                    }
                }
                Ok(())
            },
        );
        sentinels
    }

    pub fn addrs(&self) -> Vec<SocketAddr> {
        self.nodes.iter().map(Sentinel::addr).collect()
    }

    /// The master every sentinel names, if they agree.
    pub fn agreed_master(&self) -> Result<SocketAddr, String> {
        let answers: Vec<SocketAddr> = self
            .nodes
            .iter()
            .map(Sentinel::master_addr)
            .collect::<Result<_, _>>()?;
        if answers.iter().all(|p| *p == answers[0]) {
            Ok(answers[0])
        } else {
            Err(format!("the sentinels name different masters: {answers:?}"))
        }
    }

    /// Waits until every sentinel names a master other than `old` and that
    /// server answers `ROLE` as a master; returns its address.
    pub fn wait_for_new_master(&self, old: SocketAddr, bound: Duration) -> SocketAddr {
        let mut new = old;
        self.wait(
            &format!("the sentinels to elect a master other than {old}"),
            bound,
            || {
                let addr = self.agreed_master()?;
                if addr == old {
                    return Err(format!("every sentinel still names {old}"));
                }
                let role = role(&mut connect(addr, Duration::from_secs(1))?)?;
                if role != "master" {
                    return Err(format!("{addr}, named by every sentinel, is a {role}"));
                }
                new = addr;
                Ok(())
            },
        );
        new
    }

    /// `SENTINEL FAILOVER` on the first sentinel (retried while it answers
    /// NOGOODSLAVE: it needs its own fresh INFO of the replica first), then
    /// waits until `new` is the master the sentinels name, and makes `old`
    /// its replica at once (Sentinel does it only about 10 s later, with a
    /// `CLIENT KILL TYPE normal` that would close the old master's clients
    /// before their answers are written).
    pub fn force_failover(&self, old: &Server, new: &Server) {
        let mut sentinel = connect(self.nodes[0].addr(), Duration::from_secs(5)).expect("sentinel");
        super::wait_until("the sentinel to start a failover", || {
            match super::raw(&mut sentinel, &["SENTINEL", "FAILOVER", MASTER_NAME]) {
                Ok(_) => true,
                Err(e) => {
                    let refusal = super::error_line(&e);
                    assert!(refusal.starts_with("NOGOODSLAVE"), "{refusal}");
                    false
                }
            }
        });
        let promoted = self.wait_for_new_master(old.socket_addr(), PATIENCE_SETTLE);
        assert_eq!(promoted, new.socket_addr());
        let _: () = super::q(
            &mut old.client(),
            &["REPLICAOF", &new.host().to_string(), &new.port.to_string()],
        );
    }

    /// Waits until each of `replicas` has been told to replicate `master`
    /// (its role and master address say so; it may still be syncing): once
    /// Sentinel has reconfigured them, none can attach to the old master
    /// again when it comes back.
    pub fn wait_until_following(&self, master: SocketAddr, replicas: &[&Server], bound: Duration) {
        self.wait(
            &format!("the other servers to replicate {master}"),
            bound,
            || {
                for replica in replicas {
                    let info = replication(replica.socket_addr())?;
                    let get = |k: &str| info.get(k).map(String::as_str).unwrap_or("");
                    let following = format!("{}:{}", get("master_host"), get("master_port"));
                    if get("role") != "slave" || following != master.to_string() {
                        return Err(format!(
                            "{} is a {} of {following}",
                            replica.socket_addr(),
                            get("role")
                        ));
                    }
                }
                Ok(())
            },
        );
    }

    /// Settled: every sentinel names the same master and sees it and its
    /// replicas without a trouble flag and no failover under way; that
    /// server is a master with every other server of `servers` attached
    /// online, and each of those is its replica, link up, no sync under
    /// way. Returns the master's address, or what is not settled yet.
    pub fn settled(&self, servers: &[Server]) -> Result<SocketAddr, String> {
        let master = self.agreed_master()?;
        let others: Vec<SocketAddr> = servers
            .iter()
            .map(|s| s.socket_addr())
            .filter(|a| *a != master)
            .collect();
        if others.len() + 1 != servers.len() {
            return Err(format!(
                "the sentinels name {master}, not one of the servers"
            ));
        }
        for s in &self.nodes {
            let mut con = s.client()?;
            let entry: Vec<String> = redis::cmd("SENTINEL")
                .arg("master")
                .arg(MASTER_NAME)
                .query(&mut con)
                .map_err(|e| format!("sentinel {}: {e}", s.port))?;
            let entry = fields(entry);
            let flags = entry.get("flags").cloned().unwrap_or_default();
            if troubled(&flags) {
                return Err(format!("sentinel {} sees the master as {flags}", s.port));
            }
            let replicas: Vec<Vec<String>> = redis::cmd("SENTINEL")
                .arg("replicas")
                .arg(MASTER_NAME)
                .query(&mut con)
                .map_err(|e| format!("sentinel {}: {e}", s.port))?;
            let replicas: Vec<HashMap<String, String>> = replicas.into_iter().map(fields).collect();
            for addr in &others {
                let seen = replicas.iter().find(|r| {
                    let get = |k: &str| r.get(k).map(String::as_str).unwrap_or("");
                    format!("{}:{}", get("ip"), get("port")) == addr.to_string()
                });
                match seen.and_then(|r| r.get("flags")) {
                    None => {
                        return Err(format!("sentinel {} does not list replica {addr}", s.port))
                    }
                    Some(flags) if troubled(flags) => {
                        return Err(format!(
                            "sentinel {} sees replica {addr} as {flags}",
                            s.port
                        ))
                    }
                    Some(_) => {}
                }
            }
        }
        let info = replication(master)?;
        if info.get("role").map(String::as_str) != Some("master") {
            return Err(format!(
                "{master} is not a master yet: {:?}",
                info.get("role")
            ));
        }
        let online = info
            .iter()
            .filter(|(k, v)| k.starts_with("slave") && v.contains("state=online"))
            .count();
        if online != others.len() {
            return Err(format!("{master} has {online} replicas online"));
        }
        for addr in &others {
            let info = replication(*addr)?;
            let get = |k: &str| info.get(k).map(String::as_str).unwrap_or("");
            let following = format!("{}:{}", get("master_host"), get("master_port"));
            if get("role") != "slave"
                || following != master.to_string()
                || get("master_link_status") != "up"
                || get("master_sync_in_progress") != "0"
            {
                return Err(format!(
                    "{addr} not yet in sync with {master}: role {}, master {following}, link {}, syncing {}",
                    get("role"),
                    get("master_link_status"),
                    get("master_sync_in_progress")
                ));
            }
        }
        Ok(master)
    }

    /// Waits for [`Sentinels::settled`]; returns the master's address.
    pub fn wait_until_settled(&self, servers: &[Server], bound: Duration) -> SocketAddr {
        let mut master = None;
        self.wait("the sentinels and servers to settle", bound, || {
            master = Some(self.settled(servers)?);
            Ok(())
        });
        master.expect("settled")
    }

    /// Polls `check` until it is `Ok`; panics after `bound` with the last
    /// reason it gave and every sentinel's log tail.
    fn wait(&self, what: &str, bound: Duration, mut check: impl FnMut() -> Result<(), String>) {
        let deadline = Instant::now() + bound;
        loop {
            let why = match check() {
                Ok(()) => return,
                Err(why) => why,
            };
            if Instant::now() >= deadline {
                let logs: Vec<String> = self
                    .nodes
                    .iter()
                    .map(|s| {
                        let log = s.log();
                        let lines: Vec<&str> = log.lines().collect();
                        format!(
                            "sentinel {}:\n{}",
                            s.port,
                            lines[lines.len().saturating_sub(20)..].join("\n")
                        )
                    })
                    .collect();
                panic!(
                    "timed out after {bound:?} waiting for {what}: {why}\n{}",
                    logs.join("\n")
                );
            }
            thread::sleep(Duration::from_millis(20));
        }
    }
}

/// How long the sentinels may take to find each other, or a demoted master
/// to be reconfigured and resynced: Sentinel waits 8 s after it sees a
/// returning master before it makes it a replica, and asks a replica's
/// INFO every 10 s.
pub const PATIENCE_SETTLE: Duration = Duration::from_secs(60);
