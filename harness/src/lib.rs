//! The one server harness of this workspace: real `redis-server` /
//! `valkey-server` processes with the lock module, on free loopback ports
//! (or in a network namespace, on an address there), each in its own
//! directory, killed by PID when dropped. The module's integration tests
//! (`tests/common`, also compiled into the CLI's and the Rust client's
//! tests), the Rust client's benchmark and `lock-bench` start their servers
//! here.
//!
//! `REDIS_SERVER` overrides the server binary, `LOCK_MODULE` the module
//! (default: target/release/liblock.so of this workspace), for the callers
//! that take [`server_binary`] and [`module_path`].

use std::fs;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// Generous bound for a server to start or stop; reached only on failure.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// `LOCK_MODULE`, else the workspace's target/release/liblock.so.
pub fn module_path() -> PathBuf {
    std::env::var_os("LOCK_MODULE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
            crate_dir
                .ancestors()
                .map(|d| d.join("target/release/liblock.so"))
                .find(|p| p.is_file())
                .unwrap_or_else(|| crate_dir.join("target/release/liblock.so"))
        })
}

/// `REDIS_SERVER`, else `redis-server` (from PATH).
pub fn server_binary() -> String {
    std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into())
}

/// A new empty directory under the temp dir, named by `prefix`, this
/// process and a counter: a server's, or a caller's own files.
pub fn fresh_dir(prefix: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("create a directory under the temp dir");
    dir
}

/// A port nothing listens on and no other server of this process was given,
/// below the kernel's ephemeral range (32768 and up on Linux): a port from
/// that range can go to a client's outgoing connection before the server
/// binds it ("Address already in use"). Each process starts at its own place
/// in the range.
pub fn free_port() -> u16 {
    const FIRST: usize = 10_000;
    const SPAN: usize = 22_000;
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let start = std::process::id() as usize * 997;
    for _ in 0..SPAN {
        let port = (FIRST + (start + NEXT.fetch_add(1, Ordering::Relaxed)) % SPAN) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {FIRST}..{}", FIRST + SPAN)
}

/// A binary on PATH (or a path), if it is there.
pub fn find(bin: &str) -> Option<PathBuf> {
    if bin.contains('/') {
        return Path::new(bin).is_file().then(|| PathBuf::from(bin));
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(bin))
            .find(|p| p.is_file())
    })
}

/// Pins thread `pid` (0: the calling one, and the threads it creates later)
/// to `core`.
pub fn set_affinity(pid: libc::pid_t, core: usize) -> io::Result<()> {
    // SAFETY: cpu_set_t is plain data; CPU_ZERO/CPU_SET only write into it and
    // sched_setaffinity reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(core, &mut set);
        if libc::sched_setaffinity(pid, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Makes `cmd` run pinned to `core` (when given) and die with the thread
/// that starts it (`PR_SET_PDEATHSIG`: SIGKILL when that thread ends, so
/// only for a process started by a thread that outlives it, as the
/// benchmark's main thread does): killed too when the caller dies without
/// running its destructors (SIGKILL, Ctrl-C).
pub fn tie_to_parent(cmd: &mut Command, core: Option<usize>) {
    pre_exec(cmd, core, true);
}

fn pre_exec(cmd: &mut Command, core: Option<usize>, tie: bool) {
    // SAFETY: the closure runs in the forked child before exec and calls only
    // async-signal-safe functions (sched_setaffinity, prctl).
    unsafe {
        cmd.pre_exec(move || {
            if let Some(core) = core {
                set_affinity(0, core)?;
            }
            if tie {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            }
            Ok(())
        });
    }
}

/// Waits until a just-started process answers (`ready`), for up to
/// [`PATIENCE`]; if it exits or never answers, says so with `log` (and
/// kills it in the second case).
pub fn wait_ready(
    child: &mut Child,
    ready: impl Fn() -> bool,
    log: impl Fn() -> String,
) -> Result<(), String> {
    let deadline = Instant::now() + PATIENCE;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("exited with {status}: {}", log()));
        }
        if ready() {
            return Ok(());
        }
        thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
    Err(format!("not ready in time: {}", log()))
}

/// Whether a server answers PING at `url` (connecting within 200 ms;
/// LOADING replies an error until the dataset is in memory).
pub fn answers_ping(url: &str) -> bool {
    let Ok(client) = redis::Client::open(url) else {
        return false;
    };
    let Ok(mut con) = client.get_connection_with_timeout(Duration::from_millis(200)) else {
        return false;
    };
    redis::cmd("PING").query::<String>(&mut con).is_ok()
}

/// How to start a server: `<binary> --port P --bind HOST --dir DIR
/// --logfile redis.log --save '' <args> [--loadmodule MODULE <module
/// args>]`, in DIR.
#[derive(Clone, Debug)]
pub struct Launch {
    pub binary: String,
    /// Extra `--name value` server arguments.
    pub args: Vec<String>,
    /// The module (an absolute path) and its arguments; `None`: a plain
    /// server.
    pub module: Option<(PathBuf, Vec<String>)>,
    /// The network namespace to run in (`ip netns exec`, which execs the
    /// server: the child's pid is the server's) and the address to listen
    /// on there, protected mode off (it admits loopback clients only);
    /// `None`: this namespace's 127.0.0.1.
    pub netns: Option<(String, IpAddr)>,
    /// Pinned to this core.
    pub core: Option<usize>,
    /// Killed with the thread that starts it ([`tie_to_parent`]).
    pub tied: bool,
}

impl Launch {
    /// `binary` with the module at `module_path()`, nothing else.
    pub fn new(binary: impl Into<String>) -> Launch {
        Launch {
            binary: binary.into(),
            args: Vec::new(),
            module: Some((module_path(), Vec::new())),
            netns: None,
            core: None,
            tied: false,
        }
    }

    pub fn arg(mut self, name: &str, value: &str) -> Launch {
        self.args.push(format!("--{name}"));
        self.args.push(value.into());
        self
    }

    pub fn host(&self) -> IpAddr {
        self.netns
            .as_ref()
            .map_or(IpAddr::V4(Ipv4Addr::LOCALHOST), |(_, addr)| *addr)
    }
}

/// A server process. Dropped: killed (SIGKILL) and waited for; its
/// directory removed, or kept (and said so) when the thread is panicking.
pub struct Server {
    pub port: u16,
    pub dir: PathBuf,
    launch: Launch,
    child: Option<Child>,
}

impl Server {
    /// Starts a server in `dir` on a free port, answering PING; another port
    /// is tried if one is taken after all (by a process outside this one),
    /// three ports in all.
    pub fn start(launch: Launch, dir: PathBuf) -> Result<Server, String> {
        let mut errors = Vec::new();
        for _ in 0..3 {
            let mut server = Server::new(launch.clone(), dir.clone());
            match server.spawn() {
                Ok(()) => return Ok(server),
                Err(e) => errors.push(format!("port {}: {e}", server.port)),
            }
        }
        Err(format!(
            "{} did not start:\n{}",
            launch.binary,
            errors.join("\n")
        ))
    }

    /// A server not started yet, on a free port (see [`Server::spawn`]).
    pub fn new(launch: Launch, dir: PathBuf) -> Server {
        Server {
            port: free_port(),
            dir,
            launch,
            child: None,
        }
    }

    /// Starts the process (again: on the same port and directory, with the
    /// same arguments) and waits until it answers PING.
    pub fn spawn(&mut self) -> Result<(), String> {
        let l = &self.launch;
        // A failed attempt's Drop removed it.
        fs::create_dir_all(&self.dir).map_err(|e| format!("create {}: {e}", self.dir.display()))?;
        let mut cmd = match &l.netns {
            Some((netns, _)) => {
                let mut cmd = Command::new("ip");
                cmd.args(["netns", "exec", netns]).arg(&l.binary);
                cmd.args(["--protected-mode", "no"]);
                cmd
            }
            None => Command::new(&l.binary),
        };
        cmd.current_dir(&self.dir)
            .args(["--port", &self.port.to_string()])
            .args(["--bind", &l.host().to_string()])
            .args(["--dir", &self.dir.to_string_lossy()])
            .args(["--logfile", "redis.log"])
            .args(["--save", ""])
            .args(&l.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some((module, module_args)) = &l.module {
            cmd.arg("--loadmodule").arg(module).args(module_args);
        }
        if l.core.is_some() || l.tied {
            pre_exec(&mut cmd, l.core, l.tied);
        }
        let mut child = cmd.spawn().map_err(|e| {
            format!(
                "spawn {} in {} (exists: {}): {e}",
                l.binary,
                self.dir.display(),
                self.dir.is_dir()
            )
        })?;
        let url = self.url();
        wait_ready(&mut child, || answers_ping(&url), || self.log_tail(15))?;
        self.child = Some(child);
        Ok(())
    }

    /// Starts a server that must exit at startup (a module that fails to
    /// load stops it) and returns its log; `Err` if it started.
    pub fn start_refused(launch: Launch, dir: PathBuf) -> Result<String, String> {
        let mut server = Server::new(launch, dir);
        match server.spawn() {
            Ok(()) => Err(format!(
                "started with {:?}",
                server.launch.module.as_ref().map(|m| &m.1)
            )),
            Err(e) if e.starts_with("exited") => Ok(server.log()),
            Err(e) => Err(e),
        }
    }

    /// The address the server listens on: 127.0.0.1, or its address in
    /// its network namespace.
    pub fn host(&self) -> IpAddr {
        self.launch.host()
    }

    pub fn socket_addr(&self) -> SocketAddr {
        SocketAddr::new(self.host(), self.port)
    }

    pub fn url(&self) -> String {
        format!("redis://{}/", self.socket_addr())
    }

    pub fn addr(&self) -> String {
        self.socket_addr().to_string()
    }

    pub fn with_module(&self) -> bool {
        self.launch.module.is_some()
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// Still running?
    pub fn alive(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Kills the process (SIGKILL) and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SHUTDOWN (a master waits for its replicas to catch up first), then
    /// waits for the process to exit (killed after [`PATIENCE`]).
    pub fn shut_down(&mut self) {
        let client = redis::Client::open(self.url()).expect("client");
        let mut con = client
            .get_connection_with_timeout(Duration::from_secs(5))
            .expect("connect");
        con.set_read_timeout(Some(PATIENCE)).expect("read timeout");
        let _: redis::RedisResult<()> = redis::cmd("SHUTDOWN").query(&mut con);
        if let Some(mut child) = self.child.take() {
            let deadline = Instant::now() + PATIENCE;
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                thread::sleep(Duration::from_millis(10));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the server the way an operator would (SHUTDOWN, which flushes
    /// the AOF), then starts it again on the same port and directory.
    pub fn restart(&mut self) {
        self.shut_down();
        self.spawn().expect("restart");
    }

    /// Starts a server that was killed or shut down again, on the same
    /// port and directory with the same configuration.
    pub fn start_again(&mut self) {
        assert!(self.child.is_none(), "server {} still running", self.port);
        if let Err(e) = self.spawn() {
            panic!("server {} did not start again: {e}", self.port);
        }
    }

    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
    }

    /// The log's last `n` lines.
    pub fn log_tail(&self, n: usize) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        if !thread::panicking() {
            let _ = fs::remove_dir_all(&self.dir);
        } else {
            eprintln!("server {} log kept in {}", self.port, self.dir.display());
        }
    }
}
