//! S16's systems ([`System`]): the module (without and with fsync),
//! etcd and ZooKeeper; how each is set up and driven, as the report says
//! it; which have a read-write lock.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum System {
    Module,
    ModuleAlways,
    Etcd,
    ZooKeeper,
}

pub const SYSTEMS: [System; 4] = [
    System::Module,
    System::ModuleAlways,
    System::Etcd,
    System::ZooKeeper,
];

impl System {
    pub fn name(self) -> &'static str {
        match self {
            System::Module => "module",
            System::ModuleAlways => "module-always",
            System::Etcd => "etcd",
            System::ZooKeeper => "zookeeper",
        }
    }

    pub(super) fn describe(self) -> &'static str {
        match self {
            System::Module => {
                "redis-server + module, --save '' --appendonly no (no fsync); LOCK.ACQUIRE key owner PX 30000 BLOCK 10000 / LOCK.RELEASE, \
                 LOCK.RACQUIRE/WACQUIRE, ELECT.CAMPAIGN key cand PX 30000 KEEPALIVE BLOCK 10000 / ELECT.RESIGN; the generator's own connections (conn.rs)"
            }
            System::ModuleAlways => {
                "the same, --appendonly yes --appendfsync always (AOF fsynced before the replies of each write batch)"
            }
            System::Etcd => {
                "etcd single node, defaults (WAL fsynced per commit); v3 Lock(name, lease)/Unlock(key), Campaign/Resign; \
                 a gRPC connection and a 30 s lease per client (etcd-client crate)"
            }
            System::ZooKeeper => {
                "ZooKeeper standalone, defaults (txn log fsynced per commit); its lock, shared-lock and election recipes \
                 (ephemeral sequential znodes, a watch on the predecessor); a session per client (zookeeper-client crate)"
            }
        }
    }

    pub(super) fn has_read_write(self) -> bool {
        !matches!(self, System::Etcd)
    }
}
