//! etcd for the benchmark: a single node on free loopback ports, its data in a
//! temp dir (S14 and S16 start it the same way), and S16's client side: the
//! v3 lock service (`Lock` / `Unlock`, a lease per client) and the election
//! service (`Campaign` / `Resign`) through the `etcd-client` crate (gRPC).
//! Every etcd call of the benchmark goes through `etcd-client`; `blocking`
//! and `count` are for the plain std code (S14's sampling, the start-up
//! probe), which runs inside main's runtime.

use std::fs;
use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use etcd_client::{Client, GetOptions, LeaderKey, LockOptions, ResignOptions};

use lock_harness::{free_port, tie_to_parent};

/// TTL of each S16 client's lease, granted once when it connects (a run is
/// far shorter, so no keep-alive is needed; the lease is revoked at the end).
pub const LEASE_TTL_S: i64 = 30;

/// A single etcd node on free loopback ports (and on `also_on`, S14's
/// network namespace's host address, for the cut), its data (and so its
/// write-ahead log, fsynced as etcd does by default) in a temp dir; pinned to
/// `core` when given; killed by PID when dropped, and with the benchmark
/// (`PR_SET_PDEATHSIG`).
pub struct Etcd {
    child: Child,
    dir: PathBuf,
    pub port: u16,
}

impl Etcd {
    pub fn start(bin: &Path, also_on: Option<&str>, core: Option<usize>) -> io::Result<Etcd> {
        let mut last = String::new();
        for attempt in 0..3 {
            let (port, peer) = (free_port(), free_port());
            let dir = std::env::temp_dir().join(format!(
                "lock-bench-{}-etcd-{attempt}-{port}",
                std::process::id()
            ));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir)?;
            let mut clients = format!("http://127.0.0.1:{port}");
            if let Some(h) = also_on {
                clients.push_str(&format!(",http://{h}:{port}"));
            }
            let log = fs::File::create(dir.join("etcd.log"))?;
            let mut cmd = Command::new(bin);
            cmd.arg("--name")
                .arg("bench")
                .arg("--data-dir")
                .arg(dir.join("data"))
                .arg("--listen-client-urls")
                .arg(&clients)
                .arg("--advertise-client-urls")
                .arg(format!("http://127.0.0.1:{port}"))
                .arg("--listen-peer-urls")
                .arg(format!("http://127.0.0.1:{peer}"))
                .arg("--initial-advertise-peer-urls")
                .arg(format!("http://127.0.0.1:{peer}"))
                .arg("--initial-cluster")
                .arg(format!("bench=http://127.0.0.1:{peer}"))
                .arg("--initial-cluster-state")
                .arg("new")
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log);
            tie_to_parent(&mut cmd, core);
            let child = cmd.spawn()?;
            let mut etcd = Etcd { child, dir, port };
            let deadline = Instant::now() + Duration::from_secs(15);
            loop {
                if let Ok(Some(st)) = etcd.child.try_wait() {
                    last = format!("exited with {st}: {}", etcd.log_tail());
                    break;
                }
                if answers(&etcd.addr(), Duration::from_secs(1)) {
                    return Ok(etcd);
                }
                if Instant::now() > deadline {
                    last = format!("not answering after 15 s: {}", etcd.log_tail());
                    break;
                }
                thread::sleep(Duration::from_millis(50));
            }
        }
        Err(io::Error::other(format!("etcd did not start: {last}")))
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Still running?
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log_tail(&self) -> String {
        let log = fs::read_to_string(self.dir.join("etcd.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(5)..].join("\n")
    }

    pub fn version(bin: &Path) -> String {
        Command::new(bin)
            .arg("--version")
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_string()
            })
            .unwrap_or_default()
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

// ------------------------------------------------------------- the client

fn err(what: &str, e: etcd_client::Error) -> io::Error {
    io::Error::other(format!("etcd {what}: {e}"))
}

/// A gRPC client of the node at `addr` (host:port). The connection is made
/// lazily, on the first request, so callers bound their requests.
pub async fn connect(addr: &str) -> io::Result<Client> {
    Client::connect([format!("http://{addr}")], None)
        .await
        .map_err(|e| err("connect", e))
}

/// `work()` run to completion on a current-thread runtime of its own, on a
/// thread of its own: the plain std code that calls etcd runs inside main's
/// runtime and blocks its thread, where tokio refuses to block on another
/// runtime and a task spawned on main's would never run.
pub fn blocking<T, F>(work: impl FnOnce() -> F + Send) -> io::Result<T>
where
    F: Future<Output = io::Result<T>>,
    T: Send,
{
    thread::scope(|s| {
        s.spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?
                .block_on(work())
        })
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("etcd call panicked")))
    })
}

/// Does the node at `addr` answer `Status` within `limit`? (Its client
/// port accepts before the server is ready to serve.)
fn answers(addr: &str, limit: Duration) -> bool {
    blocking(|| async {
        let status = tokio::time::timeout(limit, async {
            connect(addr)
                .await?
                .status()
                .await
                .map_err(|e| err("status", e))
        });
        status.await.map_err(io::Error::other)?
    })
    .is_ok()
}

/// The number of keys under `prefix` (`Range` with `count_only`), within
/// 5 s.
pub fn count(addr: &str, prefix: &str) -> io::Result<u64> {
    blocking(|| async {
        let range = tokio::time::timeout(Duration::from_secs(5), async {
            let opts = GetOptions::new().with_prefix().with_count_only();
            connect(addr)
                .await?
                .get(prefix, Some(opts))
                .await
                .map_err(|e| err("range", e))
        });
        let r = range
            .await
            .map_err(|_| io::Error::other(format!("etcd range {prefix}: timed out")))??;
        Ok(u64::try_from(r.count()).unwrap_or(0))
    })
}

/// One S16 client: its own gRPC connection (an `etcd_client::Client` of its
/// own) and its own lease of `LEASE_TTL_S`, granted once; every lock key and
/// leadership it takes is attached to that lease.
pub struct EtcdClient {
    client: Client,
    lease: i64,
    /// The key `Lock` answered, while held.
    held: Option<Vec<u8>>,
    /// The leadership `Campaign` answered, while leading.
    leader: Option<LeaderKey>,
}

impl EtcdClient {
    pub async fn connect(addr: &str) -> io::Result<EtcdClient> {
        let mut client = connect(addr).await?;
        let lease = client
            .lease_grant(LEASE_TTL_S, None)
            .await
            .map_err(|e| err("lease grant", e))?
            .id();
        Ok(EtcdClient {
            client,
            lease,
            held: None,
            leader: None,
        })
    }

    /// `Lock(name, lease)`: returns once held (etcd queues the caller by
    /// the revision of its key `name/<lease>` and waits for the keys before
    /// it to go).
    pub async fn lock(&mut self, name: &str) -> io::Result<()> {
        let r = self
            .client
            .lock(name, Some(LockOptions::new().with_lease(self.lease)))
            .await
            .map_err(|e| err("lock", e))?;
        if r.key().is_empty() {
            return Err(io::Error::other("etcd lock answered no key"));
        }
        self.held = Some(r.key().to_vec());
        Ok(())
    }

    /// `Unlock(key)` of the key the last `lock` answered.
    pub async fn unlock(&mut self) -> io::Result<()> {
        let key = self
            .held
            .take()
            .ok_or_else(|| io::Error::other("etcd unlock without a held lock"))?;
        self.client
            .unlock(key)
            .await
            .map_err(|e| err("unlock", e))?;
        Ok(())
    }

    /// `Campaign(name, value, lease)`: returns once leader.
    pub async fn campaign(&mut self, name: &str) -> io::Result<()> {
        let mut r = self
            .client
            .campaign(name, format!("{:x}", self.lease), self.lease)
            .await
            .map_err(|e| err("campaign", e))?;
        let leader = r
            .take_leader()
            .ok_or_else(|| io::Error::other("etcd campaign answered no leader key"))?;
        self.leader = Some(leader);
        Ok(())
    }

    /// `Resign(leader)` of the leadership the last `campaign` answered.
    pub async fn resign(&mut self) -> io::Result<()> {
        let leader = self
            .leader
            .take()
            .ok_or_else(|| io::Error::other("etcd resign without a leadership"))?;
        self.client
            .resign(Some(ResignOptions::new().with_leader(leader)))
            .await
            .map_err(|e| err("resign", e))?;
        Ok(())
    }

    /// Revokes the lease: whatever key the client still has (a wait cut off
    /// at the end of a run) goes with it.
    pub async fn close(mut self) -> io::Result<()> {
        self.client
            .lease_revoke(self.lease)
            .await
            .map_err(|e| err("lease revoke", e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block_on;

    /// Keys under `prefix` on the server.
    async fn keys(addr: &str, prefix: &str) -> usize {
        let mut c = Client::connect([format!("http://{addr}")], None)
            .await
            .unwrap();
        c.get(prefix, Some(GetOptions::new().with_prefix()))
            .await
            .unwrap()
            .kvs()
            .len()
    }

    #[test]
    #[ignore = "starts an etcd server: cargo test -p lock-bench-peers --release etcd -- --ignored --nocapture"]
    fn lock_and_election() {
        let bin = lock_harness::find("etcd").expect("etcd on PATH (scripts/deps.sh --bench)");
        block_on(async {
            let etcd = Etcd::start(&bin, None, None).unwrap();
            let addr = etcd.addr();
            let mut a = EtcdClient::connect(&addr).await.unwrap();
            let mut b = EtcdClient::connect(&addr).await.unwrap();
            assert!(a.unlock().await.is_err(), "unlock without a hold");

            // The lock: b waits while a holds, and is granted when a unlocks.
            a.lock("t").await.unwrap();
            let waiter = tokio::task::spawn_local(async move {
                b.lock("t").await.unwrap();
                b
            });
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert!(!waiter.is_finished(), "b granted while a holds");
            a.unlock().await.unwrap();
            let mut b = waiter.await.unwrap();
            b.unlock().await.unwrap();
            assert_eq!(keys(&addr, "t/").await, 0, "a lock key left behind");

            // The election: b leads once a resigns.
            a.campaign("e").await.unwrap();
            let candidate = tokio::task::spawn_local(async move {
                b.campaign("e").await.unwrap();
                b
            });
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert!(!candidate.is_finished(), "b leads while a does");
            a.resign().await.unwrap();
            let mut b = candidate.await.unwrap();
            b.resign().await.unwrap();
            assert!(b.resign().await.is_err(), "resign twice");
            assert_eq!(keys(&addr, "e/").await, 0, "an election key left behind");

            // A wait cut off (the RPC dropped): etcd's lock service deletes
            // the waiter's key itself; the holder's goes with its lease.
            a.lock("c").await.unwrap();
            let cut = tokio::task::spawn_local(async move {
                let _ = b.lock("c").await;
            });
            let deadline = Instant::now() + Duration::from_secs(5);
            while keys(&addr, "c/").await < 2 {
                assert!(Instant::now() < deadline, "the waiter's key never appeared");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            assert_eq!(count(&addr, "c/").unwrap(), 2, "count of holder and waiter");
            cut.abort();
            let _ = cut.await;
            while keys(&addr, "c/").await > 1 {
                assert!(Instant::now() < deadline, "the cut-off waiter's key stayed");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            a.close().await.unwrap();
            assert_eq!(
                keys(&addr, "c/").await,
                0,
                "the holder's key left after close"
            );
            let dir = etcd.dir.clone();
            drop(etcd);
            assert!(!dir.exists(), "temp dir left behind");
        });
    }
}
