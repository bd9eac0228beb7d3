//! S14 (election): leader hand-over time. Two candidates, each a real
//! process, for one election name: the first leads, the second waits; then
//! a fault hits the leader, and the time from the fault to the moment the
//! standby leads is measured (the arrival, through a pipe, of its first
//! line: for `redis-lock elect` the line of the command it starts, for
//! `etcdctl elect` its own first line, for the other candidates their
//! `leading` line; see candidate.rs). Faults: a clean exit (SIGTERM: the
//! candidate resigns), kill -9 of the leader process, and a network cut (the
//! leader runs in a network namespace joined to the host by a veth pair,
//! whose host side is set down; root only).
//!
//! Systems: the module through `redis-lock elect NAME --lease 2s`; etcd
//! (a single node this scenario starts) through `etcdctl elect` (session TTL
//! 60 s) and through its election API with a lease of 2 s (`etcd-client`,
//! gRPC); and a Kubernetes-style lease (client-go's leaderelection with
//! its default timings) on a record in Redis, as a reference.

use std::fs;
use std::io::{self, BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::etcd::{self, Etcd};
use lock_bench::conn::{self, Reply};
use lock_bench::report::{Bar, Section};
use lock_bench::server::{Server, ServerSpec};
use lock_bench::stats::median;
use lock_bench::Opts;
use lock_harness::{find, tie_to_parent};

/// The lease of the module's and etcd's own-TTL candidates.
const LEASE_MS: u64 = 2000;
/// client-go's defaults (LeaseDuration, RenewDeadline, RetryPeriod).
const K8S_LEASE_MS: u64 = 15_000;
const K8S_RENEW_MS: u64 = 10_000;
const K8S_RETRY_MS: u64 = 2000;
/// Time the standby is left waiting before the fault (its keep-alives and
/// first polls run), plus a random part of up to `PHASE`: a leader renews
/// on a period (the module every L/2, etcd's keep-alives every TTL/3,
/// client-go every RetryPeriod) that would otherwise fall at the same place
/// before the fault in every sample.
const SETTLE: Duration = Duration::from_millis(300);
const PHASE: Duration = Duration::from_millis(2000);

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum System {
    Module,
    EtcdLease,
    Etcdctl,
    K8s,
}

pub const SYSTEMS: [System; 4] = [
    System::Module,
    System::EtcdLease,
    System::Etcdctl,
    System::K8s,
];

impl System {
    pub fn name(self) -> &'static str {
        match self {
            System::Module => "module",
            System::EtcdLease => "etcd-lease",
            System::Etcdctl => "etcdctl",
            System::K8s => "k8s-lease",
        }
    }

    fn describe(self) -> String {
        match self {
            System::Module => format!("redis-lock elect NAME --lease {}s -- cmd", LEASE_MS / 1000),
            System::EtcdLease => format!(
                "etcd election API (etcd-client, gRPC), own lease TTL {} s, keep-alive every TTL/3",
                LEASE_MS / 1000
            ),
            System::Etcdctl => "etcdctl elect NAME PROPOSAL (session TTL 60 s)".into(),
            System::K8s => format!(
                "client-go leaderelection on a Redis record, LeaseDuration {} s, RenewDeadline {} s, RetryPeriod {} s, ReleaseOnCancel",
                K8S_LEASE_MS / 1000,
                K8S_RENEW_MS / 1000,
                K8S_RETRY_MS / 1000
            ),
        }
    }

    /// Samples per cell by default: fewer where a sample takes a minute.
    fn default_samples(self, fault: Fault) -> usize {
        match (self, fault) {
            (System::Module | System::EtcdLease, _) => 5,
            (System::Etcdctl, Fault::Clean) => 5,
            (System::Etcdctl, _) => 2,
            (System::K8s, _) => 3,
        }
    }

    /// Longest a hand-over may take before the sample counts as failed.
    fn limit(self) -> Duration {
        match self {
            System::Module | System::EtcdLease => Duration::from_secs(30),
            System::Etcdctl => Duration::from_secs(120),
            System::K8s => Duration::from_secs(60),
        }
    }

    /// A cell whose samples take about a minute or more, or about 20 s
    /// each (skipped with --quick).
    fn slow(self, fault: Fault) -> bool {
        matches!(
            (self, fault),
            (System::Etcdctl, Fault::Kill | Fault::Cut) | (System::K8s, Fault::Kill | Fault::Cut)
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fault {
    Clean,
    Kill,
    Cut,
}

pub const FAULTS: [Fault; 3] = [Fault::Clean, Fault::Kill, Fault::Cut];

impl Fault {
    pub fn name(self) -> &'static str {
        match self {
            Fault::Clean => "clean",
            Fault::Kill => "kill9",
            Fault::Cut => "cut",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Fault::Clean => "SIGTERM (resign)",
            Fault::Kill => "kill -9",
            Fault::Cut => "network cut",
        }
    }
}

// ------------------------------------------------------------- processes

/// A line a process wrote, with its arrival time.
struct Line {
    at: Instant,
    stderr: bool,
    text: String,
}

/// A candidate process: its stdout and stderr read line by line by two
/// threads; killed (SIGKILL) when dropped.
struct Proc {
    child: Child,
    rx: mpsc::Receiver<Line>,
    lines: Vec<Line>,
}

impl Proc {
    fn spawn(argv: &[String]) -> io::Result<Proc> {
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .env("ETCDCTL_API", "3");
        tie_to_parent(&mut cmd, None);
        let mut child = cmd
            .spawn()
            .map_err(|e| io::Error::new(e.kind(), format!("start {}: {e}", argv[0])))?;
        let (tx, rx) = mpsc::channel();
        let out = child.stdout.take().expect("piped");
        let err = child.stderr.take().expect("piped");
        for (stream, stderr) in [
            (Box::new(out) as Box<dyn io::Read + Send>, false),
            (Box::new(err), true),
        ] {
            let tx = tx.clone();
            thread::spawn(move || {
                for text in BufReader::new(stream).lines().map_while(Result::ok) {
                    let line = Line {
                        at: Instant::now(),
                        stderr,
                        text,
                    };
                    if tx.send(line).is_err() {
                        return;
                    }
                }
            });
        }
        Ok(Proc {
            child,
            rx,
            lines: Vec::new(),
        })
    }

    fn pid(&self) -> libc::pid_t {
        self.child.id() as libc::pid_t
    }

    fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill on our own child's pid (not yet waited for).
        unsafe {
            libc::kill(self.pid(), sig);
        }
    }

    fn drain(&mut self) {
        while let Ok(l) = self.rx.try_recv() {
            self.lines.push(l);
        }
    }

    /// The first line (already read or arriving before `deadline`) that
    /// `want` accepts.
    fn wait_line(&mut self, deadline: Instant, want: impl Fn(&Line) -> bool) -> Option<Instant> {
        self.drain();
        if let Some(l) = self.lines.iter().find(|l| want(l)) {
            return Some(l.at);
        }
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(l) => {
                    let hit = want(&l).then_some(l.at);
                    self.lines.push(l);
                    if hit.is_some() {
                        return hit;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => return None,
                // Both streams closed: the process is gone.
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    if Instant::now() >= deadline {
                        return None;
                    }
                    thread::sleep(left.min(Duration::from_millis(20)));
                    if self.exited() {
                        return None;
                    }
                }
            }
        }
    }

    fn exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// Everything it wrote, for an error message.
    fn transcript(&mut self) -> String {
        self.drain();
        self.lines
            .iter()
            .map(|l| format!("{}{}", if l.stderr { "[err] " } else { "" }, l.text))
            .collect::<Vec<_>>()
            .join(" | ")
    }

    /// SIGTERM, then SIGKILL if it is still there after `grace`; waits for it.
    fn stop(&mut self, grace: Duration) {
        if !self.exited() {
            self.signal(libc::SIGTERM);
            let end = Instant::now() + grace;
            while Instant::now() < end && !self.exited() {
                thread::sleep(Duration::from_millis(10));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.drain();
        // The command `redis-lock elect` ran (`started <pid> ...`), if it
        // outlived it.
        for l in &self.lines {
            if let Some(pid) = l
                .text
                .strip_prefix("started ")
                .and_then(|r| r.split_whitespace().next())
                .and_then(|p| p.parse::<libc::pid_t>().ok())
            {
                let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                if String::from_utf8_lossy(&cmdline).contains("--s14-child") {
                    // SAFETY: plain kill of a process checked to be ours.
                    unsafe {
                        libc::kill(pid, libc::SIGKILL);
                    }
                }
            }
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop(Duration::ZERO);
    }
}

// ------------------------------------------------------------ network cut

fn ip(args: &[&str]) -> io::Result<()> {
    let out = Command::new("ip").args(args).output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// A network namespace joined to the host by a veth pair: the host side
/// 10.212.X.1/24, the namespace's 10.212.X.2 (tests/keepalive.rs uses
/// 10.213, tests/failover.rs 10.214 and up). Setting the host side down
/// cuts everything in the namespace off (its connections stay open, nothing
/// gets through); up heals it. Removed when dropped.
struct Netns {
    name: String,
    veth: String,
    host_ip: String,
}

impl Netns {
    fn create() -> io::Result<Netns> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err(io::Error::other("not root"));
        }
        let pid = std::process::id();
        let taken = Command::new("ip")
            .args(["-4", "-o", "addr", "show"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())?;
        let net = (0..250)
            .map(|k| format!("10.212.{}", (pid as usize + k) % 250))
            .find(|n| !taken.contains(&format!(" {n}.")))
            .ok_or_else(|| io::Error::other("no free 10.212.X.0/24"))?;
        let ns = Netns {
            name: format!("lockbench{pid}"),
            veth: format!("lbh{pid}"),
            host_ip: format!("{net}.1"),
        };
        let peer = format!("lbn{pid}");
        let _ = ip(&["link", "del", &ns.veth]);
        let _ = ip(&["netns", "del", &ns.name]);
        ip(&["netns", "add", &ns.name])?;
        ip(&[
            "link", "add", &ns.veth, "type", "veth", "peer", "name", &peer,
        ])?;
        ip(&["link", "set", &peer, "netns", &ns.name])?;
        ip(&["addr", "add", &format!("{net}.1/24"), "dev", &ns.veth])?;
        ip(&["link", "set", &ns.veth, "up"])?;
        ip(&[
            "-n",
            &ns.name,
            "addr",
            "add",
            &format!("{net}.2/24"),
            "dev",
            &peer,
        ])?;
        ip(&["-n", &ns.name, "link", "set", &peer, "up"])?;
        ip(&["-n", &ns.name, "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    fn cut(&self) -> io::Result<()> {
        ip(&["link", "set", &self.veth, "down"])
    }

    fn heal(&self) -> io::Result<()> {
        ip(&["link", "set", &self.veth, "up"])
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = ip(&["link", "del", &self.veth]);
        let _ = ip(&["netns", "del", &self.name]);
    }
}

// ------------------------------------------------------------------ etcd

// -------------------------------------------------------------- samples

/// What the scenario runs against.
struct Env {
    redis: Server,
    etcd: Option<Etcd>,
    netns: Option<Netns>,
    cli: PathBuf,
    etcdctl: Option<PathBuf>,
    /// As given (`--etcd`, `--etcdctl`), for the skip lines.
    etcd_bin: String,
    etcdctl_bin: String,
    exe: PathBuf,
}

impl Env {
    /// The address a candidate connects to: through the veth when it runs
    /// in the namespace.
    fn redis_addr(&self, in_ns: bool) -> String {
        match (&self.netns, in_ns) {
            (Some(ns), true) => format!("{}:{}", ns.host_ip, self.redis.port),
            _ => self.redis.addr(),
        }
    }

    fn etcd_addr(&self, in_ns: bool) -> String {
        let etcd = self.etcd.as_ref().expect("etcd");
        match (&self.netns, in_ns) {
            (Some(ns), true) => format!("{}:{}", ns.host_ip, etcd.port),
            _ => etcd.addr(),
        }
    }

    /// Ends the cut, and waits until the namespace reaches the server again.
    fn heal(&self) -> io::Result<()> {
        let ns = self.netns.as_ref().expect("netns");
        ns.heal()?;
        let ok = Command::new("ip")
            .args(["netns", "exec", &ns.name])
            .arg(&self.exe)
            .arg("--s14-probe")
            .arg(self.redis_addr(true))
            .stdin(Stdio::null())
            .status()?
            .success();
        if ok {
            Ok(())
        } else {
            Err(io::Error::other(
                "the namespace did not reach the server within 10 s after the cut was healed",
            ))
        }
    }

    fn argv(&self, system: System, name: &str, who: &str, in_ns: bool) -> Vec<String> {
        let exe = self.exe.display().to_string();
        let mut argv: Vec<String> = Vec::new();
        if in_ns {
            let ns = self.netns.as_ref().expect("netns");
            argv.extend(["ip", "netns", "exec", &ns.name].map(String::from));
        }
        let s = |x: &str| x.to_string();
        match system {
            System::Module => argv.extend([
                self.cli.display().to_string(),
                s("-u"),
                format!("redis://{}", self.redis_addr(in_ns)),
                s("elect"),
                s(name),
                s("--candidate"),
                s(who),
                s("--lease"),
                format!("{}s", LEASE_MS / 1000),
                s("--"),
                exe,
                s("--s14-child"),
                std::process::id().to_string(),
            ]),
            System::Etcdctl => argv.extend([
                self.etcdctl
                    .as_ref()
                    .expect("etcdctl")
                    .display()
                    .to_string(),
                format!("--endpoints={}", self.etcd_addr(in_ns)),
                s("elect"),
                s(name),
                s(who),
            ]),
            System::EtcdLease => argv.extend([
                exe,
                s("--s14-candidate"),
                s("etcd"),
                self.etcd_addr(in_ns),
                s(name),
                s(who),
                (LEASE_MS / 1000).to_string(),
            ]),
            System::K8s => argv.extend([
                exe,
                s("--s14-candidate"),
                s("k8s"),
                self.redis_addr(in_ns),
                s(name),
                s(who),
                K8S_LEASE_MS.to_string(),
                K8S_RENEW_MS.to_string(),
                K8S_RETRY_MS.to_string(),
            ]),
        }
        argv
    }

    /// The standby waits: queued in the server (module), its key written
    /// under the election's prefix (etcd), or its first attempt failed (k8s).
    fn standby_waits(&self, system: System, name: &str, standby: &mut Proc) -> io::Result<bool> {
        match system {
            System::Module => {
                let mut c = conn::blocking(&self.redis.addr(), Duration::from_secs(30))?;
                match redis::cmd("LOCK.WAITERS").arg(name).query(&mut c) {
                    Ok(Reply::Array(a)) => Ok(!a.is_empty()),
                    Ok(_) => Ok(false),
                    Err(e) => Err(io::Error::other(format!("LOCK.WAITERS: {e}"))),
                }
            }
            System::Etcdctl | System::EtcdLease => {
                let etcd = self.etcd.as_ref().expect("etcd");
                Ok(etcd::count(&etcd.addr(), &format!("{name}/"))? >= 2)
            }
            System::K8s => Ok(standby
                .wait_line(Instant::now(), |l| l.stderr && l.text == "waiting")
                .is_some()),
        }
    }
}

/// Did this line say the candidate leads?
fn leads(system: System, l: &Line) -> bool {
    match system {
        System::Module => !l.stderr && l.text.starts_with("started "),
        System::Etcdctl => !l.stderr,
        System::EtcdLease | System::K8s => !l.stderr && l.text.starts_with("leading"),
    }
}

/// Did this line say the (old) leader stopped believing it leads?
fn stops(l: &Line) -> bool {
    l.stderr && (l.text.contains("lost") || l.text.contains("resigned"))
}

struct Sample {
    handover_ms: f64,
    /// When the old leader said it stopped leading (lost/resigned), after
    /// the fault.
    old_stop_ms: Option<f64>,
}

/// The wall-clock unix ms a line states (`... at MS ...`): redis-lock's
/// `lost`/`resigned` lines say when it stopped believing it leads, which
/// may be before it printed them; so do the candidates of candidate.rs.
fn stated_ms(text: &str) -> Option<u128> {
    text.split(" at ")
        .nth(1)?
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// A number in [0, 1), different each call (xorshift seeded by the clock).
fn random_unit() -> f64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static STATE: AtomicU64 = AtomicU64::new(0);
    let mut x = STATE.load(Ordering::Relaxed);
    if x == 0 {
        x = (unix_ms() as u64) | 1;
    }
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    STATE.store(x, Ordering::Relaxed);
    (x >> 11) as f64 / (1u64 << 53) as f64
}

fn unix_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

fn ms_since(t0: Instant, t: Instant) -> f64 {
    t.saturating_duration_since(t0).as_secs_f64() * 1000.0
}

fn sample(env: &Env, system: System, fault: Fault, i: usize) -> io::Result<Sample> {
    let name = format!(
        "s14-{}-{}-{i}-{}",
        system.name(),
        fault.name(),
        std::process::id()
    );
    let in_ns = fault == Fault::Cut;
    let mut leader = Proc::spawn(&env.argv(system, &name, "a", in_ns))?;
    let start_limit = Instant::now() + Duration::from_secs(20);
    if leader
        .wait_line(start_limit, |l| leads(system, l))
        .is_none()
    {
        return Err(io::Error::other(format!(
            "the first candidate did not lead within 20 s: {}",
            leader.transcript()
        )));
    }
    let mut standby = Proc::spawn(&env.argv(system, &name, "b", false))?;
    loop {
        if env.standby_waits(system, &name, &mut standby)? {
            break;
        }
        if Instant::now() > start_limit || standby.exited() {
            return Err(io::Error::other(format!(
                "the second candidate did not wait: {}",
                standby.transcript()
            )));
        }
        thread::sleep(Duration::from_millis(10));
    }
    thread::sleep(SETTLE + PHASE.mul_f64(random_unit()));
    standby.drain();
    if standby.lines.iter().any(|l| leads(system, l)) {
        return Err(io::Error::other(
            "the second candidate led before the fault",
        ));
    }
    let t0 = match fault {
        Fault::Clean | Fault::Kill => {
            let t0 = Instant::now();
            leader.signal(if fault == Fault::Clean {
                libc::SIGTERM
            } else {
                libc::SIGKILL
            });
            t0
        }
        Fault::Cut => {
            let ns = env.netns.as_ref().expect("netns");
            ns.cut()?;
            // After the link is down (`ip` has returned).
            Instant::now()
        }
    };
    // The fault on the wall clock, for the times the old leader states.
    let t0_wall = unix_ms() as f64 - t0.elapsed().as_secs_f64() * 1000.0;
    let got = standby.wait_line(t0 + system.limit(), |l| leads(system, l));
    // The old leader's own word, if it says it stopped (at most 1 s more).
    let old_stop = got.and_then(|t| {
        let arrived = leader.wait_line(t.max(Instant::now()) + Duration::from_secs(1), stops)?;
        let line = leader.lines.iter().find(|l| l.at == arrived)?;
        Some(match stated_ms(&line.text) {
            Some(ms) => ms as f64 - t0_wall,
            None => ms_since(t0, arrived),
        })
    });
    if fault == Fault::Cut {
        env.heal()?;
    }
    let handover = got.map(|t| ms_since(t0, t));
    leader.stop(Duration::ZERO);
    // The new leader resigns (its lease would end in the server anyway).
    standby.stop(Duration::from_secs(2));
    match handover {
        Some(h) => Ok(Sample {
            handover_ms: h,
            old_stop_ms: old_stop,
        }),
        None => Err(io::Error::other(format!(
            "no hand-over within {} s; new: {}; old: {}",
            system.limit().as_secs(),
            standby.transcript(),
            leader.transcript()
        ))),
    }
}

/// Why `system` cannot run here, if it cannot.
fn unavailable(env: &Env, system: System) -> Option<String> {
    match system {
        System::Module => {
            let mut c = match conn::blocking(&env.redis.addr(), Duration::from_secs(30)) {
                Ok(c) => c,
                Err(e) => return Some(format!("server: {e}")),
            };
            let info: redis::RedisResult<Reply> = redis::cmd("COMMAND")
                .arg("INFO")
                .arg("ELECT.CAMPAIGN")
                .query(&mut c);
            match info {
                Ok(Reply::Array(a)) if a.first().is_some_and(|r| *r != Reply::Nil) => {}
                _ => return Some("the module has no ELECT.CAMPAIGN".into()),
            }
            if !env.cli.is_file() {
                return Some(format!("{} not found", env.cli.display()));
            }
            let help = Command::new(&env.cli)
                .args(["elect", "--help"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            if !help.is_ok_and(|s| s.success()) {
                return Some(format!("{} has no `elect`", env.cli.display()));
            }
            None
        }
        System::Etcdctl if env.etcdctl.is_none() => {
            Some(format!("etcdctl ({}) not found", env.etcdctl_bin))
        }
        System::Etcdctl | System::EtcdLease if env.etcd.is_none() => Some(format!(
            "etcd ({}) not found or did not start",
            env.etcd_bin
        )),
        _ => None,
    }
}

pub async fn s14(opts: &Opts, started: Instant) -> io::Result<Section> {
    let progress = |msg: &str| eprintln!("[{:>6.1}s] {msg}", started.elapsed().as_secs_f64());
    let mut section = Section::new(
        "S14",
        "leader hand-over: fault on the leader -> the standby's command starts (ms)",
    );
    let systems: Vec<System> = SYSTEMS
        .into_iter()
        .filter(|s| {
            opts.systems
                .as_ref()
                .is_none_or(|l| l.iter().any(|n| n == s.name()))
        })
        .collect();
    let faults: Vec<Fault> = FAULTS
        .into_iter()
        .filter(|f| {
            opts.faults
                .as_ref()
                .is_none_or(|l| l.iter().any(|n| n == f.name()))
        })
        .collect();
    let netns = if faults.contains(&Fault::Cut) {
        match Netns::create() {
            Ok(ns) => Some(ns),
            Err(e) => {
                section.line(format!(
                    "network cut: skipped ({e}; it needs root for a network namespace and a veth pair)"
                ));
                None
            }
        }
    } else {
        None
    };
    // Reachable from the namespace too (no password: protected mode would
    // refuse connections from there).
    let mut extra: Vec<String> = ["--protected-mode", "no", "--bind", "127.0.0.1"]
        .map(String::from)
        .to_vec();
    if let Some(ns) = &netns {
        extra.push(ns.host_ip.clone());
    }
    let redis = lock_bench::server::start(
        &ServerSpec {
            binary: opts.redis_server.clone(),
            module: Some(opts.module.clone()),
            core: opts.pinning.server,
            extra,
        },
        "S14",
    )?;
    let etcd_bin = find(&opts.etcd);
    let etcd = match (
        &etcd_bin,
        systems
            .iter()
            .any(|s| matches!(s, System::Etcdctl | System::EtcdLease)),
    ) {
        (Some(bin), true) => {
            match Etcd::start(bin, netns.as_ref().map(|n| n.host_ip.as_str()), None) {
                Ok(e) => {
                    section.line(format!(
                        "etcd: {} ({}), one node on 127.0.0.1:{}",
                        bin.display(),
                        Etcd::version(bin),
                        e.port
                    ));
                    Some(e)
                }
                Err(e) => {
                    section.errors.push(e.to_string());
                    None
                }
            }
        }
        _ => None,
    };
    let env = Env {
        redis,
        etcd,
        netns,
        cli: opts.cli.clone(),
        etcdctl: find(&opts.etcdctl),
        etcd_bin: opts.etcd.clone(),
        etcdctl_bin: opts.etcdctl.clone(),
        exe: std::env::current_exe()?,
    };
    section.line(
        "hand-over = from the fault (SIGTERM / SIGKILL sent, or `ip link set down` returned) to the arrival of the standby's first line: \
         module: the line of the command redis-lock elect starts; etcdctl: its elected line; the others: their `leading` line"
    );
    for s in &systems {
        section.line(format!("{:<10} = {}", s.name(), s.describe()));
    }
    section.line(format!(
        "{:<10} {:<17} {:>3} {:>9} {:>9} {:>9}   {}",
        "system",
        "fault",
        "n",
        "median",
        "min",
        "max",
        "old leader stopped believing (median after the fault, by its own ms stamp)"
    ));
    let mut cells = Vec::new();
    let mut module_max = std::collections::HashMap::new();
    for &system in &systems {
        if let Some(why) = unavailable(&env, system) {
            section.line(format!("{:<10} skipped: {why}", system.name()));
            continue;
        }
        for &fault in &faults {
            if fault == Fault::Cut && env.netns.is_none() {
                continue;
            }
            if opts.quick && opts.reps_given.is_none() && system.slow(fault) {
                section.line(format!(
                    "{:<10} {:<17} skipped with --quick (a sample takes 20 s to a minute)",
                    system.name(),
                    fault.describe()
                ));
                continue;
            }
            let n = opts.reps_given.unwrap_or(if opts.quick {
                1
            } else {
                system.default_samples(fault)
            });
            let t_cell = Instant::now();
            let (mut hand, mut stop, mut errs) = (Vec::new(), Vec::new(), Vec::new());
            for i in 0..n {
                match sample(&env, system, fault, i) {
                    Ok(s) => {
                        progress(&format!(
                            "S14 {} {} {}/{n}: {:.1} ms",
                            system.name(),
                            fault.name(),
                            i + 1,
                            s.handover_ms
                        ));
                        hand.push(s.handover_ms);
                        if let Some(o) = s.old_stop_ms {
                            stop.push(o);
                        }
                    }
                    Err(e) => {
                        progress(&format!(
                            "S14 {} {} {}/{n}: {e}",
                            system.name(),
                            fault.name(),
                            i + 1
                        ));
                        errs.push(e.to_string());
                    }
                }
            }
            let lo = hand.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = hand.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            section.line(format!(
                "{:<10} {:<17} {:>3} {:>9} {:>9} {:>9}   {}",
                system.name(),
                fault.describe(),
                hand.len(),
                lock_bench::report::ms(median(&hand)),
                lock_bench::report::ms(lo),
                lock_bench::report::ms(hi),
                if stop.is_empty() {
                    "-".to_string()
                } else {
                    format!(
                        "{} ms (n {})",
                        lock_bench::report::ms(median(&stop)),
                        stop.len()
                    )
                }
            ));
            for e in &errs {
                section
                    .errors
                    .push(format!("{} {}: {e}", system.name(), fault.name()));
            }
            if system == System::Module && !hand.is_empty() {
                module_max.insert(fault.name(), hi);
            }
            cells.push(json!({"system": system.name(), "fault": fault.name(),
                              "handover_ms": hand, "old_leader_stopped_ms": stop,
                              "errors": errs, "cell_s": t_cell.elapsed().as_secs_f64()}));
        }
    }
    // The module's documented bounds (docs/commands.md, Liveness), with
    // 100 ms for the CLI to start its command.
    let l = LEASE_MS as f64;
    if let Some(&m) = module_max.get("kill9") {
        section.bars.push(Bar::at_most_ms(
            "module kill -9: slowest hand-over <= L (+100 ms)",
            m,
            l + 100.0,
        ));
    }
    if let Some(&m) = module_max.get("cut") {
        section.bars.push(Bar::at_most_ms(
            "module network cut: slowest <= 1.5 L + 2 s (+100 ms)",
            m,
            1.5 * l + 2000.0 + 100.0,
        ));
    }
    section.json = json!({"lease_ms": LEASE_MS, "k8s": {"lease_ms": K8S_LEASE_MS,
                          "renew_deadline_ms": K8S_RENEW_MS, "retry_ms": K8S_RETRY_MS},
                          "cells": cells});
    Ok(section)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_stated_time() {
        assert_eq!(
            stated_ms("redis-lock: lost s14 term 7 at 1764185000123 (deadline)"),
            Some(1_764_185_000_123)
        );
        assert_eq!(stated_ms("resigned at 12"), Some(12));
        assert_eq!(stated_ms("waiting"), None);
    }
}
