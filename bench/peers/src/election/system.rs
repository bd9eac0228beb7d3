//! S14's systems ([`System`]: the module through `redis-lock elect`, etcd's
//! election API with a lease of its own, `etcdctl elect`, client-go's lease
//! loop on Redis) and faults ([`Fault`]: a clean exit, kill -9, a network
//! cut); their timings, how each is described, how many samples a cell
//! takes, how long a hand-over may take.

use std::time::Duration;

/// The lease of the module's and etcd's own-TTL candidates.
pub(super) const LEASE_MS: u64 = 2000;
/// client-go's defaults (LeaseDuration, RenewDeadline, RetryPeriod).
pub(super) const K8S_LEASE_MS: u64 = 15_000;
pub(super) const K8S_RENEW_MS: u64 = 10_000;
pub(super) const K8S_RETRY_MS: u64 = 2000;

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

    pub(super) fn describe(self) -> String {
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
    pub(super) fn default_samples(self, fault: Fault) -> usize {
        match (self, fault) {
            (System::Module | System::EtcdLease, _) => 5,
            (System::Etcdctl, Fault::Clean) => 5,
            (System::Etcdctl, _) => 2,
            (System::K8s, _) => 3,
        }
    }

    /// Longest a hand-over may take before the sample counts as failed.
    pub(super) fn limit(self) -> Duration {
        match self {
            System::Module | System::EtcdLease => Duration::from_secs(30),
            System::Etcdctl => Duration::from_secs(120),
            System::K8s => Duration::from_secs(60),
        }
    }

    /// A cell whose samples take about a minute or more, or about 20 s
    /// each (skipped with --quick).
    pub(super) fn slow(self, fault: Fault) -> bool {
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

    pub(super) fn describe(self) -> &'static str {
        match self {
            Fault::Clean => "SIGTERM (resign)",
            Fault::Kill => "kill -9",
            Fault::Cut => "network cut",
        }
    }
}
