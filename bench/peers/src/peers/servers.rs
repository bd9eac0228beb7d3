//! The server of each S16 system ([`Target`]): redis-server with the module
//! (its durability checked), a single etcd node or a standalone ZooKeeper,
//! each pinned to the server core on free loopback ports, or the reason it
//! is not installed; whether it is still alive; the line naming it and its
//! version.

use std::io;

use super::system::System;
use crate::etcd::Etcd;
use crate::zookeeper::{self, ZooKeeper};
use lock_bench::conn::{Conn, Reply, ReplyExt};
use lock_bench::server::{self, Server, ServerSpec};
use lock_bench::Opts;

enum Backend {
    Redis(Server),
    Etcd(Etcd),
    Zk(ZooKeeper),
}

/// A running server of one system.
pub(super) struct Target {
    pub(super) system: System,
    pub(super) addr: String,
    pub(super) pid: Option<u32>,
    backend: Backend,
}

impl Target {
    pub(super) fn alive(&mut self) -> bool {
        match &mut self.backend {
            Backend::Redis(s) => s.alive(),
            Backend::Etcd(e) => e.alive(),
            // Not reaped until dropped: a dead server is a zombie.
            Backend::Zk(z) => pid_alive(z.pid()),
        }
    }

    pub(super) fn log_tail(&self) -> String {
        match &self.backend {
            Backend::Redis(s) => s.log_tail(20),
            Backend::Etcd(e) => e.log_tail(),
            Backend::Zk(_) => "(its log is in its temp dir, removed when it stops)".into(),
        }
    }
}

/// Starts the server of `system`: Ok(None) with the reason when it is not
/// installed.
pub(super) async fn start(opts: &Opts, system: System) -> io::Result<Result<Target, String>> {
    let core = opts.pinning.server;
    match system {
        System::Module | System::ModuleAlways => {
            let mut extra: Vec<String> = vec!["--maxclients".into(), "1000".into()];
            if system == System::ModuleAlways {
                extra.extend(["--appendonly", "yes", "--appendfsync", "always"].map(String::from));
            }
            let server = lock_bench::server::start(
                &ServerSpec {
                    binary: opts.redis_server.clone(),
                    module: Some(opts.module.clone()),
                    core,
                    extra,
                },
                "S16",
            )?;
            let addr = server.addr();
            // The durability asked for is the one the server runs with.
            let mut c = Conn::connect(&addr).await?;
            for (param, want) in [
                (
                    "appendonly",
                    if system == System::ModuleAlways {
                        "yes"
                    } else {
                        "no"
                    },
                ),
                ("appendfsync", "always"),
            ] {
                if param == "appendfsync" && system == System::Module {
                    continue;
                }
                let r = c.ok(&["CONFIG", "GET", param]).await?;
                let got = match &r {
                    Reply::Array(v) if v.len() == 2 => v[1].text(),
                    other => format!("{other:?}"),
                };
                if got != want {
                    return Err(io::Error::other(format!(
                        "{}: CONFIG GET {param} answered {got}, not {want}",
                        system.name()
                    )));
                }
            }
            Ok(Ok(Target {
                system,
                addr,
                pid: server.pid(),
                backend: Backend::Redis(server),
            }))
        }
        System::Etcd => {
            let Some(bin) = server::find(&opts.etcd) else {
                return Ok(Err(format!(
                    "etcd not found ({}; install: scripts/deps.sh --bench)",
                    opts.etcd
                )));
            };
            let e = Etcd::start(&bin, None, core)?;
            Ok(Ok(Target {
                system,
                addr: e.addr(),
                pid: Some(e.pid()),
                backend: Backend::Etcd(e),
            }))
        }
        System::ZooKeeper => {
            let install = match zookeeper::find_install() {
                Ok(i) => i,
                Err(why) => return Ok(Err(why)),
            };
            let z = ZooKeeper::start(&install, core).await?;
            Ok(Ok(Target {
                system,
                addr: z.addr(),
                pid: Some(z.pid()),
                backend: Backend::Zk(z),
            }))
        }
    }
}

/// Is process `pid` running (not gone, not a zombie)?
fn pid_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rfind(')')
                .and_then(|i| s[i + 1..].split_whitespace().next().map(|st| st != "Z"))
        })
        .unwrap_or(false)
}

/// A line naming a started server and its version.
pub(super) async fn started_line(opts: &Opts, t: &Target) -> String {
    let version = match t.system {
        System::Module | System::ModuleAlways => {
            lock_bench::command_output(&opts.redis_server, "--version")
        }
        System::Etcd => server::find(&opts.etcd)
            .map(|b| Etcd::version(&b))
            .unwrap_or_default(),
        System::ZooKeeper => zookeeper::version(&t.addr).await,
    };
    format!(
        "{:<14} on {} (pid {}): {version}",
        t.system.name(),
        t.addr,
        t.pid.map_or("?".into(), |p| p.to_string())
    )
}
