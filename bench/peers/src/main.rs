//! `lock-bench-peers`: lock-bench with the scenarios that measure the module
//! against its peers, S14 (leader election hand-over: the module, etcd's
//! election through `etcd-client`, `etcdctl elect`, client-go's lease loop
//! on Redis) and S16 (etcd's and ZooKeeper's locks and elections), and the
//! processes S14 starts (this binary run again with `--s14-*`). The same
//! options, the same one report; `make bench` runs it.

mod candidate;
mod election;
mod etcd;
mod peers;
mod zookeeper;

use std::io;
use std::process::ExitCode;
use std::time::Instant;

use lock_bench::chart::PeersChart;
use lock_bench::report::Section;
use lock_bench::{LocalFuture, Opts};

struct WithPeers;

impl lock_bench::Peers for WithPeers {
    fn s14_systems(&self) -> Vec<&'static str> {
        election::SYSTEMS.iter().map(|s| s.name()).collect()
    }

    fn s14_faults(&self) -> Vec<&'static str> {
        election::FAULTS.iter().map(|f| f.name()).collect()
    }

    fn s16_systems(&self) -> Vec<&'static str> {
        peers::SYSTEMS.iter().map(|s| s.name()).collect()
    }

    fn s14<'a>(&'a self, opts: &'a Opts, started: Instant) -> LocalFuture<'a, io::Result<Section>> {
        Box::pin(election::s14(opts, started))
    }

    fn s16<'a>(
        &'a self,
        opts: &'a Opts,
        started: Instant,
    ) -> LocalFuture<'a, io::Result<(Section, Option<PeersChart>)>> {
        Box::pin(peers::s16(opts, started))
    }

    fn child(&self, argv: &[String]) -> Option<u8> {
        let flag = argv
            .get(1)
            .filter(|f| ["--s14-child", "--s14-candidate", "--s14-probe"].contains(&f.as_str()))?;
        Some(candidate::main(flag, &argv[2..]) as u8)
    }
}

fn main() -> ExitCode {
    lock_bench::main(Some(&WithPeers))
}

/// Runs `f` on a current-thread runtime with a local task set, as the
/// benchmark itself runs (the peers' ignored tests use it).
#[cfg(test)]
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    tokio::task::LocalSet::new().block_on(&rt, f)
}
