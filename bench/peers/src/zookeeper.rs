//! ZooKeeper as a peer (S16): one standalone server started from Debian's
//! jars, and a client per session speaking ZooKeeper's documented recipes
//! through the `zookeeper-client` crate.
//!
//! Server: `org.apache.zookeeper.server.ZooKeeperServerMain` (standalone, no
//! quorum) with ZooKeeper's durability defaults: `forceSync=yes`, so each
//! write is in the transaction log and fsync'ed before it is acknowledged (the
//! sync thread group-commits the writes queued meanwhile, as etcd batches its
//! raft entries). Nothing is tuned beyond a 512 MiB heap cap.
//!
//! Recipes (<https://zookeeper.apache.org/doc/r3.8.0/recipes.html>), all on
//! ephemeral sequential nodes, each waiter watching only its predecessor (no
//! herd), the predecessor looked up again when it vanishes between the listing
//! and the watch:
//! - exclusive lock: Curator's `InterProcessMutex` layout,
//!   `/lock-bench/lock/<name>/_c_<id>-lock-<seq>`; the lowest sequence holds;
//!   the others watch the next lower node (a data watch, as Curator does, so a
//!   vanished predecessor leaves no watch behind);
//! - shared lock: `/lock-bench/rw/<name>/_c_<id>-read-<seq>` and `…-write-<seq>`;
//!   a reader waits for the nearest lower `write-` node, a writer for the
//!   nearest lower node of either kind;
//! - leader election: Curator's `LeaderLatch` layout,
//!   `/lock-bench/election/<name>/_c_<id>-latch-<seq>`; the lowest is leader.
//!
//! `<id>` is Curator's "protection" id (a GUID in Curator, here the session id
//! and a per-client counter): a create whose reply was lost to a connection
//! loss is found again by it. The crate's own `Client::lock` is not used: its
//! hold is released by a background delete when dropped, which the caller
//! cannot await, and an explicit delete before the drop would send a second,
//! failing delete (a logged error transaction) per release.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use zookeeper_client as zk;

use lock_harness::{find, free_port, tie_to_parent};

/// Debian's ZooKeeper jar; its manifest's Class-Path names the dependencies.
const ZOOKEEPER_JAR: &str = "/usr/share/java/zookeeper.jar";
/// The jars the manifest names that the server cannot start without.
const REQUIRED_JARS: &[&str] = &[
    "/usr/share/java/zookeeper-jute.jar",
    "/usr/share/java/slf4j-api.jar",
];
/// SLF4J's simple binding (logs to stderr, which goes to the log file);
/// without it the server logs nothing.
const SLF4J_SIMPLE_JAR: &str = "/usr/share/java/slf4j-simple.jar";
const INSTALL_HINT: &str = "install: scripts/deps.sh --bench";
/// Root of the benchmark's nodes.
const ROOT: &str = "/lock-bench";
/// How long the server may take to answer `ruok` (a cold JVM on a busy
/// 2-core machine takes a few seconds).
const START_DEADLINE: Duration = Duration::from_secs(60);

/// Where `java` and the jars are.
#[derive(Clone, Debug)]
pub struct ZkInstall {
    java: PathBuf,
    classpath: String,
}

/// Finds `java` (`$JAVA`, else on `PATH`) and Debian's ZooKeeper jars.
pub fn find_install() -> Result<ZkInstall, String> {
    for jar in std::iter::once(&ZOOKEEPER_JAR).chain(REQUIRED_JARS) {
        if !Path::new(jar).is_file() {
            return Err(format!("ZooKeeper not found ({jar}; {INSTALL_HINT})"));
        }
    }
    let java = match std::env::var_os("JAVA") {
        Some(j) => PathBuf::from(j),
        None => find("java").ok_or_else(|| {
            format!("java not found on PATH (ZooKeeper needs it; {INSTALL_HINT})")
        })?,
    };
    let mut classpath = ZOOKEEPER_JAR.to_string();
    if Path::new(SLF4J_SIMPLE_JAR).is_file() {
        classpath.push(':');
        classpath.push_str(SLF4J_SIMPLE_JAR);
    }
    Ok(ZkInstall { java, classpath })
}

/// One standalone ZooKeeper server on a free loopback port; its directory (a
/// fresh temp dir with zoo.cfg, the data and the log) is removed and the
/// server killed by its PID when dropped.
pub struct ZooKeeper {
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl ZooKeeper {
    /// Starts the server, pinned to `core` when given, and returns once it
    /// answers `ruok`.
    pub async fn start(install: &ZkInstall, core: Option<usize>) -> io::Result<ZooKeeper> {
        let mut last = String::new();
        // A few attempts: the free port may be taken before the JVM binds it.
        for attempt in 0..3 {
            let port = free_port();
            let dir = std::env::temp_dir().join(format!(
                "lock-bench-{}-zk-{attempt}-{port}",
                std::process::id()
            ));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(dir.join("data"))?;
            let cfg = dir.join("zoo.cfg");
            fs::write(
                &cfg,
                format!(
                    "tickTime=2000\n\
                     dataDir={}\n\
                     clientPort={port}\n\
                     clientPortAddress=127.0.0.1\n\
                     maxClientCnxns=0\n\
                     admin.enableServer=false\n\
                     4lw.commands.whitelist=ruok,srvr\n",
                    dir.join("data").display()
                ),
            )?;
            let log = fs::File::create(dir.join("zookeeper.log"))?;
            let mut cmd = Command::new(&install.java);
            cmd.arg("-Xmx512m")
                .arg("-cp")
                .arg(&install.classpath)
                .arg("org.apache.zookeeper.server.ZooKeeperServerMain")
                .arg(&cfg)
                .current_dir(&dir)
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log);
            tie_to_parent(&mut cmd, core);
            let child = cmd.spawn().map_err(|e| {
                io::Error::new(e.kind(), format!("start {}: {e}", install.java.display()))
            })?;
            let mut zk = ZooKeeper {
                port,
                dir,
                child: Some(child),
            };
            match zk.wait_ready().await {
                Ok(()) => return Ok(zk),
                Err(e) => last = format!("{e}; log: {}", zk.log_tail()),
            }
        }
        Err(io::Error::other(format!("ZooKeeper did not start: {last}")))
    }

    async fn wait_ready(&mut self) -> io::Result<()> {
        let deadline = Instant::now() + START_DEADLINE;
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Some(status) = child.try_wait()? {
                    return Err(io::Error::other(format!("exited with {status}")));
                }
            }
            if four_letter(("127.0.0.1", self.port), "ruok")
                .await
                .ok()
                .as_deref()
                == Some("imok")
            {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no answer to ruok within {START_DEADLINE:?}"),
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `127.0.0.1:<port>`, for [`ZkClient::connect`].
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, |c| c.id())
    }

    /// The last lines of the server's log.
    fn log_tail(&self) -> String {
        let text = fs::read_to_string(self.dir.join("zookeeper.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }
}

impl Drop for ZooKeeper {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// The version of the ZooKeeper at `addr`, from its `srvr` four-letter
/// command (empty if it does not say within 5 s).
pub async fn version(addr: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        // Answers "not currently serving requests" for a moment after `ruok`.
        let line = match four_letter(addr, "srvr").await {
            Ok(out) => out.lines().next().unwrap_or("").trim().to_string(),
            Err(_) => String::new(),
        };
        if line.starts_with("Zookeeper version") || Instant::now() > deadline {
            return line;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Sends a four-letter command and returns the whole answer (the server
/// closes the connection after it), within 2 s.
async fn four_letter(addr: impl tokio::net::ToSocketAddrs, cmd: &str) -> io::Result<String> {
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(addr).await?;
        s.write_all(cmd.as_bytes()).await?;
        let mut out = String::new();
        s.read_to_string(&mut out).await?;
        io::Result::Ok(out)
    };
    tokio::time::timeout(Duration::from_secs(2), exchange)
        .await
        .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "four-letter command"))?
}

fn zk_err(what: &str, e: zk::Error) -> io::Error {
    io::Error::other(format!("ZooKeeper {what}: {e}"))
}

/// What a node waits for before it holds.
#[derive(Clone, Copy)]
enum Waits {
    /// The nearest lower node with the same marker (exclusive lock, latch).
    Lower,
    /// The nearest lower `-read-` or `-write-` node (writer).
    LowerAny,
    /// The nearest lower `-write-` node (reader).
    LowerWrite,
}

const LOCK: &str = "-lock-";
const READ: &str = "-read-";
const WRITE: &str = "-write-";
const LATCH: &str = "-latch-";

/// One ZooKeeper session (the crate's `Client`), holding at most what its
/// caller took: a stack of lock nodes and one latch node.
pub struct ZkClient {
    client: zk::Client,
    /// Paths of the lock nodes held, the last taken last.
    holds: Vec<String>,
    latch: Option<String>,
    /// Per-client counter for the protection id.
    next_id: u64,
}

impl ZkClient {
    /// Opens a session (the crate's default session timeout, 6 s, negotiated
    /// with the server's tickTime bounds: 4 s to 40 s).
    pub async fn connect(addr: &str) -> io::Result<ZkClient> {
        let client = zk::Client::connect(addr)
            .await
            .map_err(|e| zk_err(&format!("connect {addr}"), e))?;
        Ok(ZkClient {
            client,
            holds: Vec::new(),
            latch: None,
            next_id: 0,
        })
    }

    /// Exclusive lock; returns once held.
    pub async fn lock(&mut self, name: &str) -> io::Result<()> {
        let path = self.acquire("lock", name, LOCK, Waits::Lower).await?;
        self.holds.push(path);
        Ok(())
    }

    /// Shared (read) side of the read/write lock; returns once held.
    pub async fn read_lock(&mut self, name: &str) -> io::Result<()> {
        let path = self.acquire("rw", name, READ, Waits::LowerWrite).await?;
        self.holds.push(path);
        Ok(())
    }

    /// Exclusive (write) side of the read/write lock; returns once held.
    pub async fn write_lock(&mut self, name: &str) -> io::Result<()> {
        let path = self.acquire("rw", name, WRITE, Waits::LowerAny).await?;
        self.holds.push(path);
        Ok(())
    }

    /// Releases the hold taken last (exclusive, read or write); returns once
    /// the server acknowledged the delete.
    pub async fn unlock(&mut self) -> io::Result<()> {
        let path = self
            .holds
            .pop()
            .ok_or_else(|| io::Error::other("ZooKeeper unlock: nothing held"))?;
        self.delete(&path).await
    }

    /// Leader election; returns once this client is the leader.
    pub async fn campaign(&mut self, name: &str) -> io::Result<()> {
        if self.latch.is_some() {
            return Err(io::Error::other("ZooKeeper campaign: already a candidate"));
        }
        let path = self.acquire("election", name, LATCH, Waits::Lower).await?;
        self.latch = Some(path);
        Ok(())
    }

    /// Gives up leadership; returns once the server acknowledged the delete.
    pub async fn resign(&mut self) -> io::Result<()> {
        let path = self
            .latch
            .take()
            .ok_or_else(|| io::Error::other("ZooKeeper resign: not leader"))?;
        self.delete(&path).await
    }

    /// Deletes this client's node; returns once the server acknowledged it.
    async fn delete(&self, path: &str) -> io::Result<()> {
        self.client
            .delete(path, None)
            .await
            .map_err(|e| zk_err(&format!("delete {path}"), e))
    }

    /// Creates this client's node under `/lock-bench/<kind>/<name>` and
    /// waits for its turn; returns the node's path. Cancel-safe: a node
    /// created by a dropped call is deleted.
    async fn acquire(
        &mut self,
        kind: &str,
        name: &str,
        marker: &str,
        waits: Waits,
    ) -> io::Result<String> {
        if name.is_empty() || name.contains('/') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("ZooKeeper lock name {name:?}: empty or with '/'"),
            ));
        }
        let dir = format!("{ROOT}/{kind}/{name}");
        self.next_id += 1;
        let protection = format!(
            "_c_{:016x}-{:016x}",
            self.client.session_id().0,
            self.next_id
        );
        let mut guard = Pending {
            client: &self.client,
            dir: &dir,
            protection: &protection,
            node: None,
            done: false,
        };
        let node = self.create(&dir, &protection, marker).await?;
        guard.node = Some(format!("{dir}/{node}"));
        self.wait_turn(&dir, &node, marker, waits).await?;
        guard.done = true;
        Ok(guard.node.take().unwrap_or_default())
    }

    /// Creates `<dir>/<protection><marker><seq>` (ephemeral sequential) and
    /// returns its name.
    async fn create(&self, dir: &str, protection: &str, marker: &str) -> io::Result<String> {
        let prefix = format!("{dir}/{protection}{marker}");
        let opts = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
        let mut made_dir = false;
        loop {
            match self.client.create(&prefix, b"", &opts).await {
                Ok((_, seq)) => return Ok(format!("{protection}{marker}{seq}")),
                Err(zk::Error::NoNode) if !made_dir => {
                    // The parents are created once, on the first NoNode.
                    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
                    self.client
                        .mkdir(dir, &persistent)
                        .await
                        .map_err(|e| zk_err(&format!("mkdir {dir}"), e))?;
                    made_dir = true;
                }
                Err(zk::Error::ConnectionLoss) => {
                    // The create may have been applied: look for it by its
                    // protection id.
                    let children = self.list(dir).await?;
                    if let Some(c) = children.into_iter().find(|c| c.starts_with(protection)) {
                        return Ok(c);
                    }
                }
                Err(e) => return Err(zk_err(&format!("create {prefix}"), e)),
            }
        }
    }

    async fn list(&self, dir: &str) -> io::Result<Vec<String>> {
        loop {
            match self.client.list_children(dir).await {
                Err(zk::Error::ConnectionLoss) => continue,
                r => return r.map_err(|e| zk_err(&format!("getChildren {dir}"), e)),
            }
        }
    }

    /// Waits until no node that `node` waits for is left below it, watching
    /// only the nearest such node.
    async fn wait_turn(&self, dir: &str, node: &str, marker: &str, waits: Waits) -> io::Result<()> {
        let mine = sequence(node).ok_or_else(|| io::Error::other(format!("bad node {node}")))?;
        loop {
            let children = self.list(dir).await?;
            let mut present = false;
            let mut nearest: Option<(u64, &str)> = None;
            for c in &children {
                let Some(seq) = sequence(c) else { continue };
                if seq == mine && c == node {
                    present = true;
                    continue;
                }
                let counts = match waits {
                    Waits::Lower => c.contains(marker),
                    Waits::LowerAny => c.contains(READ) || c.contains(WRITE),
                    Waits::LowerWrite => c.contains(WRITE),
                };
                if counts && seq < mine && nearest.is_none_or(|(s, _)| seq > s) {
                    nearest = Some((seq, c));
                }
            }
            if !present {
                return Err(io::Error::other(format!(
                    "ZooKeeper: node {dir}/{node} vanished (session expired?)"
                )));
            }
            let Some((_, pred)) = nearest else {
                return Ok(());
            };
            let pred = format!("{dir}/{pred}");
            match self.client.get_and_watch_data(&pred).await {
                Ok((_, _, watcher)) => {
                    watcher.changed().await;
                }
                // Gone between the listing and the watch: look again.
                Err(zk::Error::NoNode) | Err(zk::Error::ConnectionLoss) => {}
                Err(e) => return Err(zk_err(&format!("getData {pred}"), e)),
            }
        }
    }
}

/// The sequence number ZooKeeper appended (the last ten digits).
fn sequence(node: &str) -> Option<u64> {
    let digits = node.get(node.len().checked_sub(10)?..)?;
    digits
        .bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| digits.parse().ok())
        .flatten()
}

/// Deletes the node of an acquire that did not return it (cancelled or
/// failed). `Client::delete` queues the request when called, so dropping its
/// future still sends it. Dropped while the create was in flight, it looks the
/// node up by its protection id in a task on the current tokio runtime. The
/// session's close removes the node at the latest.
struct Pending<'a> {
    client: &'a zk::Client,
    dir: &'a str,
    protection: &'a str,
    /// The node's path once created.
    node: Option<String>,
    /// The acquire returned the node.
    done: bool,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if let Some(path) = self.node.take() {
            drop(self.client.delete(&path, None));
        } else if !std::thread::panicking() {
            let Ok(rt) = tokio::runtime::Handle::try_current() else {
                return;
            };
            let client = self.client.clone();
            let dir = self.dir.to_string();
            let protection = self.protection.to_string();
            rt.spawn(async move {
                // After the create on the same session, so it sees the node.
                let Ok(children) = client.list_children(&dir).await else {
                    return;
                };
                for c in children.iter().filter(|c| c.starts_with(&protection)) {
                    let _ = client.delete(&format!("{dir}/{c}"), None).await;
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::block_on;
    use std::cell::Cell;
    use std::rc::Rc;
    use tokio::task::{spawn_local, yield_now};

    async fn clients(addr: &str, n: usize) -> Vec<ZkClient> {
        let t = Instant::now();
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(ZkClient::connect(addr).await.unwrap());
        }
        println!("  {n} sessions in {:?}", t.elapsed());
        out
    }

    async fn children(c: &ZkClient, dir: &str) -> Vec<String> {
        match c.client.list_children(dir).await {
            Err(zk::Error::NoNode) => Vec::new(),
            r => r.unwrap(),
        }
    }

    /// Polls (with a deadline) until `dir` has `n` children.
    async fn until_children(c: &ZkClient, dir: &str, n: usize) {
        until_children_within(c, dir, n, Duration::from_secs(10)).await
    }

    async fn until_children_within(c: &ZkClient, dir: &str, n: usize, within: Duration) {
        let deadline = Instant::now() + within;
        while children(c, dir).await.len() != n {
            assert!(Instant::now() < deadline, "{dir}: never {n} children");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// 16 clients, 50 acquisitions each, a shared counter checked while held.
    async fn exclusive(addr: &str) {
        println!("exclusive lock:");
        let holders = Rc::new(Cell::new(0u32));
        let overlaps = Rc::new(Cell::new(0u32));
        let t = Instant::now();
        let mut tasks = Vec::new();
        for mut c in clients(addr, 16).await {
            let (holders, overlaps) = (holders.clone(), overlaps.clone());
            tasks.push(spawn_local(async move {
                for _ in 0..50 {
                    c.lock("t").await.unwrap();
                    holders.set(holders.get() + 1);
                    if holders.get() != 1 {
                        overlaps.set(overlaps.get() + 1);
                    }
                    yield_now().await;
                    tokio::time::sleep(Duration::from_micros(100)).await;
                    holders.set(holders.get() - 1);
                    c.unlock().await.unwrap();
                }
                c
            }));
        }
        let mut cs = Vec::new();
        for t in tasks {
            cs.push(t.await.unwrap());
        }
        let el = t.elapsed();
        assert_eq!(overlaps.get(), 0, "two holders at once");
        println!(
            "  800 lock/unlock in {el:?} ({:.0}/s, hold >= 0.1 ms)",
            800.0 / el.as_secs_f64()
        );
        assert!(children(&cs[0], "/lock-bench/lock/t").await.is_empty());

        // Uncontended round trip: lock + unlock by one client.
        let c = &mut cs[0];
        let t = Instant::now();
        for _ in 0..200 {
            c.lock("u").await.unwrap();
            c.unlock().await.unwrap();
        }
        let el = t.elapsed();
        println!(
            "  uncontended lock+unlock: {:.2} ms ({:.0}/s)",
            el.as_secs_f64() * 1000.0 / 200.0,
            200.0 / el.as_secs_f64()
        );

        // A waiter cancelled in the middle of the queue: its node goes, the
        // one behind it watches the holder instead and is served only after
        // the holder's release.
        let dir = "/lock-bench/lock/c";
        let mut a = cs.pop().unwrap();
        let mut b = cs.pop().unwrap();
        let mut c = cs.pop().unwrap();
        let watcher = cs.pop().unwrap();
        a.lock("c").await.unwrap();
        let a_holds = Rc::new(Cell::new(true));
        let b_task = spawn_local(async move {
            b.lock("c").await.unwrap();
            unreachable!("b was cancelled");
        });
        until_children(&watcher, dir, 2).await;
        let a_held = a_holds.clone();
        let c_task = spawn_local(async move {
            c.lock("c").await.unwrap();
            assert!(!a_held.get(), "c served while a holds");
            c.unlock().await.unwrap();
        });
        until_children(&watcher, dir, 3).await;
        b_task.abort();
        assert!(b_task.await.unwrap_err().is_cancelled());
        until_children(&watcher, dir, 2).await;
        assert!(!c_task.is_finished());
        a_holds.set(false);
        a.unlock().await.unwrap();
        c_task.await.unwrap();
        assert!(children(&watcher, dir).await.is_empty());
        assert!(a.unlock().await.is_err(), "unlock without a hold");

        // A client dropped while it holds: its session is closed, and the
        // node goes with it (not after the 6 s session timeout).
        a.lock("d").await.unwrap();
        let dir = "/lock-bench/lock/d";
        assert_eq!(children(&watcher, dir).await.len(), 1);
        drop(a);
        until_children_within(&watcher, dir, 0, Duration::from_secs(3)).await;

        // An acquire cancelled while its create is in flight: the node it
        // created is found by its protection id and deleted, so the next
        // acquire of the same client (whose session stays open) is served.
        let mut e = cs.pop().unwrap();
        e.lock("x").await.unwrap();
        e.unlock().await.unwrap();
        let r = tokio::time::timeout(Duration::ZERO, e.lock("x")).await;
        assert!(r.is_err(), "served before its create was answered");
        tokio::time::timeout(Duration::from_secs(3), e.lock("x"))
            .await
            .expect("the cancelled create's node stayed")
            .unwrap();
        assert_eq!(children(&watcher, "/lock-bench/lock/x").await.len(), 1);
        e.unlock().await.unwrap();
    }

    /// Readers share; a writer waits for the readers before it; a reader
    /// arriving after a waiting writer waits for it.
    async fn shared_order(addr: &str) {
        println!("read/write lock, order:");
        let dir = "/lock-bench/rw/o";
        let mut cs = clients(addr, 6).await;
        let watcher = cs.pop().unwrap();
        let mut r5 = cs.pop().unwrap();
        let mut w = cs.pop().unwrap();
        let mut readers = cs;
        for r in readers.iter_mut() {
            r.read_lock("o").await.unwrap();
        }
        // The 3 readers hold together.
        let reading = Rc::new(Cell::new(3u32));
        let writing = Rc::new(Cell::new(false));
        let (rd, wr) = (reading.clone(), writing.clone());
        let (w_held_tx, w_held) = tokio::sync::oneshot::channel();
        let (w_go_tx, w_go) = tokio::sync::oneshot::channel::<()>();
        let w_task = spawn_local(async move {
            w.write_lock("o").await.unwrap();
            assert_eq!(rd.get(), 0, "writer served while readers hold");
            wr.set(true);
            w_held_tx.send(()).unwrap();
            w_go.await.unwrap();
            wr.set(false);
            w.unlock().await.unwrap();
        });
        until_children(&watcher, dir, 4).await;
        let (rd, wr) = (reading.clone(), writing.clone());
        let r5_task = spawn_local(async move {
            r5.read_lock("o").await.unwrap();
            assert!(!wr.get(), "reader served while the writer holds");
            rd.set(rd.get() + 1);
            r5.unlock().await.unwrap();
        });
        until_children(&watcher, dir, 5).await;
        assert!(!w_task.is_finished() && !r5_task.is_finished());
        for r in readers.iter_mut() {
            reading.set(reading.get() - 1);
            r.unlock().await.unwrap();
        }
        w_held.await.unwrap();
        assert!(!r5_task.is_finished());
        w_go_tx.send(()).unwrap();
        w_task.await.unwrap();
        r5_task.await.unwrap();
        assert_eq!(reading.get(), 1);
        assert!(children(&watcher, dir).await.is_empty());
    }

    /// 8 readers and 3 writers, 20 holds each.
    async fn shared_mixed(addr: &str) {
        println!("read/write lock, mixed:");
        let readers_in = Rc::new(Cell::new(0u32));
        let max_readers = Rc::new(Cell::new(0u32));
        let writer_in = Rc::new(Cell::new(false));
        let t = Instant::now();
        let mut tasks = Vec::new();
        for (i, mut c) in clients(addr, 11).await.into_iter().enumerate() {
            let (rd, max, wr) = (readers_in.clone(), max_readers.clone(), writer_in.clone());
            tasks.push(spawn_local(async move {
                for _ in 0..20 {
                    if i < 8 {
                        c.read_lock("m").await.unwrap();
                        assert!(!wr.get(), "reader with a writer");
                        rd.set(rd.get() + 1);
                        max.set(max.get().max(rd.get()));
                        tokio::time::sleep(Duration::from_micros(500)).await;
                        rd.set(rd.get() - 1);
                    } else {
                        c.write_lock("m").await.unwrap();
                        assert!(!wr.get() && rd.get() == 0, "writer not alone");
                        wr.set(true);
                        tokio::time::sleep(Duration::from_micros(500)).await;
                        wr.set(false);
                    }
                    c.unlock().await.unwrap();
                }
                c
            }));
        }
        let mut cs = Vec::new();
        for t in tasks {
            cs.push(t.await.unwrap());
        }
        let el = t.elapsed();
        println!(
            "  220 holds in {el:?} ({:.0}/s), up to {} readers at once",
            220.0 / el.as_secs_f64(),
            max_readers.get()
        );
        assert!(children(&cs[0], "/lock-bench/rw/m").await.is_empty());
    }

    /// 4 candidates, 10 terms each: one leader at a time.
    async fn election(addr: &str) {
        println!("election:");
        let leaders = Rc::new(Cell::new(0u32));
        let terms = Rc::new(Cell::new(0u32));
        let t = Instant::now();
        let mut tasks = Vec::new();
        for mut c in clients(addr, 4).await {
            let (leaders, terms) = (leaders.clone(), terms.clone());
            tasks.push(spawn_local(async move {
                for _ in 0..10 {
                    c.campaign("e").await.unwrap();
                    assert_eq!(leaders.get(), 0, "two leaders");
                    leaders.set(1);
                    terms.set(terms.get() + 1);
                    yield_now().await;
                    leaders.set(0);
                    c.resign().await.unwrap();
                }
                assert!(c.resign().await.is_err(), "resign without a campaign");
                c
            }));
        }
        let mut cs = Vec::new();
        for t in tasks {
            cs.push(t.await.unwrap());
        }
        let el = t.elapsed();
        assert_eq!(terms.get(), 40);
        println!(
            "  40 terms (campaign..resign) in {el:?} ({:.0}/s)",
            40.0 / el.as_secs_f64()
        );
        assert!(children(&cs[0], "/lock-bench/election/e").await.is_empty());
    }

    #[test]
    #[ignore = "starts a ZooKeeper server (a JVM): cargo test -p lock-bench-peers --release zookeeper -- --ignored --nocapture"]
    fn zookeeper_recipes() {
        let install = find_install().unwrap_or_else(|e| panic!("{e}"));
        block_on(async {
            let t = Instant::now();
            let zk = ZooKeeper::start(&install, None).await.unwrap();
            println!(
                "ZooKeeper pid {} on {} in {:?}",
                zk.pid(),
                zk.addr(),
                t.elapsed()
            );
            let dir = zk.dir.clone();
            exclusive(&zk.addr()).await;
            shared_order(&zk.addr()).await;
            shared_mixed(&zk.addr()).await;
            election(&zk.addr()).await;
            drop(zk);
            assert!(!dir.exists(), "temp dir left behind");
        });
    }
}
