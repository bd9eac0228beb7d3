//! What S14 runs against ([`Env`]): the redis-server, the etcd node, the
//! network namespace, the binaries; the address a candidate connects to
//! (through the veth when it runs in the namespace), each system's
//! candidate command line, whether the standby waits, the cut healed; and
//! why a system cannot run here ([`unavailable`]).

use std::io;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::netns::Netns;
use super::process::Proc;
use super::system::{System, K8S_LEASE_MS, K8S_RENEW_MS, K8S_RETRY_MS, LEASE_MS};
use crate::etcd::{self, Etcd};
use lock_bench::conn::{self, Reply};
use lock_bench::server::Server;

/// What the scenario runs against.
pub(super) struct Env {
    pub(super) redis: Server,
    pub(super) etcd: Option<Etcd>,
    pub(super) netns: Option<Netns>,
    pub(super) cli: PathBuf,
    pub(super) etcdctl: Option<PathBuf>,
    /// As given (`--etcd`, `--etcdctl`), for the skip lines.
    pub(super) etcd_bin: String,
    pub(super) etcdctl_bin: String,
    pub(super) exe: PathBuf,
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
    pub(super) fn heal(&self) -> io::Result<()> {
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

    pub(super) fn argv(&self, system: System, name: &str, who: &str, in_ns: bool) -> Vec<String> {
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
    pub(super) fn standby_waits(
        &self,
        system: System,
        name: &str,
        standby: &mut Proc,
    ) -> io::Result<bool> {
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

/// Why `system` cannot run here, if it cannot.
pub(super) fn unavailable(env: &Env, system: System) -> Option<String> {
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
