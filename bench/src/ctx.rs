//! What a scenario runs against ([`Ctx`]): a fresh server with the module
//! (S2's also with the floor module, when built), the scripts loaded on it, the options, and the real Redisson client's
//! driver once a scenario asks for it; its helpers: a run's [`LoadSpec`],
//! the protocols `--protocols` keeps, progress lines, a disturbed run
//! measured again, the server settled after a run; [`info_field`].

use std::io;
use std::time::{Duration, Instant};

use crate::conn::{Conn, ReplyExt};
use crate::load::{LoadSpec, Proto, Scripts};
use crate::options::{workspace_dir, Opts};
use crate::redisson_client;
use crate::report::{self, Section};
use crate::server::{Server, ServerSpec};

/// What a scenario runs against: a fresh server with the module.
pub struct Ctx {
    pub opts: Opts,
    pub server: Server,
    /// The server also loaded libfloor.so (S2's, when the file is there):
    /// the `module-floor` protocol can run.
    pub floor: bool,
    pub addr: String,
    pub server_pid: Option<u32>,
    pub scripts: Scripts,
    runs: std::cell::Cell<u64>,
    pub(crate) started: Instant,
    /// The real Redisson client's load driver (a JVM), started at its first
    /// run; Err: why it could not be (its rows are then left out).
    redisson: std::cell::RefCell<Option<Result<redisson_client::RedissonClient, String>>>,
}

impl Ctx {
    pub fn server_spec(opts: &Opts, with_module: bool) -> ServerSpec {
        ServerSpec {
            binary: opts.redis_server.clone(),
            module: with_module.then(|| opts.module.clone()),
            core: opts.pinning.server,
            // S4 queues 10k waiters; every server is started the same way.
            extra: vec!["--maxclients".into(), "20100".into()],
        }
    }

    /// A fresh server with the module; S2's loads libfloor.so next to it
    /// (`--floor-module`), when the file is there, for its module-floor row.
    pub(crate) async fn new(opts: &Opts, tag: &str, started: Instant) -> io::Result<Ctx> {
        let mut spec = Ctx::server_spec(opts, true);
        let floor = match opts.floor() {
            Some(path) if tag == "S2" => {
                let path = path.to_string_lossy().into_owned();
                spec.extra.extend(["--loadmodule".to_string(), path]);
                true
            }
            _ => false,
        };
        let server = crate::server::start(&spec, tag)?;
        let addr = server.addr();
        let mut conn = Conn::connect(&addr).await?;
        let scripts = Scripts::load(&mut conn).await?;
        Ok(Ctx {
            opts: opts.clone(),
            server_pid: server.pid(),
            server,
            floor,
            addr,
            scripts,
            runs: std::cell::Cell::new(0),
            started,
            redisson: std::cell::RefCell::new(None),
        })
    }

    /// Runs `f` with the real Redisson client's driver, started (built with
    /// Maven, its JVM pinned to the generator's core) at the first call.
    pub fn with_redisson<T>(
        &self,
        f: impl FnOnce(&mut redisson_client::RedissonClient) -> io::Result<T>,
    ) -> io::Result<T> {
        let mut slot = self.redisson.borrow_mut();
        if slot.is_none() {
            self.progress(&format!(
                "starting the real Redisson client {} (interop/redisson's load driver: mvn compile, then a JVM)",
                redisson_client::REDISSON_VERSION
            ));
            *slot = Some(redisson_client::RedissonClient::start(
                &workspace_dir(),
                self.opts.pinning.generator,
            ));
        }
        match slot.as_mut() {
            Some(Ok(client)) => f(client),
            Some(Err(why)) => Err(io::Error::other(why.clone())),
            None => Err(io::Error::other("no Redisson driver")),
        }
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.addr
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or(0)
    }

    pub fn spec(&self, proto: Proto, clients: usize, keys: usize) -> LoadSpec {
        let n = self.runs.get() + 1;
        self.runs.set(n);
        LoadSpec {
            proto,
            clients,
            keys,
            threads_per_process: self.opts.threads_per_process,
            warmup: self.opts.warmup,
            measure: self.opts.measure,
            lease_ms: 30_000,
            block_ms: 10_000,
            prefix: format!("b{n}-{}", proto.name()),
            seed: n,
            read_fraction: None,
            multi: None,
            semaphore: None,
        }
    }

    /// The protocols of `all` that `--protocols` keeps.
    pub fn protocols(&self, all: &[Proto]) -> Vec<Proto> {
        all.iter()
            .copied()
            .filter(|p| {
                self.opts
                    .protocols
                    .as_ref()
                    .is_none_or(|l| l.iter().any(|n| *n == p.name()))
            })
            .collect()
    }

    pub fn progress(&self, msg: &str) {
        eprintln!("[{:>6.1}s] {msg}", self.started.elapsed().as_secs_f64());
    }

    /// A run that other processes disturbed: kept aside (`json`), then
    /// waits for quiet before it is measured again.
    pub fn measure_again(&self, section: &mut Section, json: serde_json::Value) {
        section.discarded.push(json);
        let waited = crate::server::wait_for_quiet(self.server_pid, report::INTERFERENCE_PCT);
        self.progress(&format!(
            "  other processes were busy: waited {:.1} s for quiet, measuring again",
            waited.as_secs_f64()
        ));
    }

    /// After a run: the server is alive and no caller is left queued.
    pub async fn settle(&self, section: &mut Section) {
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            match self.info_field("lock", "lock_waiters").await {
                Ok(Some(v)) if v == "0" => return,
                Ok(v) if Instant::now() > deadline => {
                    section.errors.push(format!(
                        "lock_waiters is {} after every client of the run disconnected",
                        v.unwrap_or_else(|| "missing".into())
                    ));
                    return;
                }
                Err(e) => {
                    section
                        .errors
                        .push(format!("server not answering after a run: {e}"));
                    return;
                }
                _ => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        }
    }

    pub async fn info_field(&self, section: &str, field: &str) -> io::Result<Option<String>> {
        let mut c = Conn::connect(&self.addr).await?;
        info_field(&mut c, section, field).await
    }
}

/// A field of `INFO section`, as text.
pub async fn info_field(c: &mut Conn, section: &str, field: &str) -> io::Result<Option<String>> {
    let info = c.ok(&["INFO", section]).await?.text();
    Ok(info.lines().find_map(|line| {
        line.strip_prefix(field)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(|v| v.trim().to_string())
    }))
}
