//! One client of any S16 system ([`Client`]), with the same calls: lock,
//! read and write lock, unlock, campaign, resign, close. The module's is
//! the generator's own connection ([`ModuleClient`]), etcd's and
//! ZooKeeper's their crates' (etcd.rs, zookeeper.rs).

use std::io;

use super::system::System;
use crate::etcd::EtcdClient;
use crate::zookeeper::ZkClient;
use lock_bench::conn::{Conn, Reply};

/// Lease and wait of the module's commands, as in the rest of the benchmark.
const LEASE_MS: &str = "30000";
const BLOCK_MS: &str = "10000";

/// One module client: its own connection and owner id.
pub(super) struct ModuleClient {
    conn: Conn,
    owner: String,
    held: Option<String>,
    leading: Option<String>,
}

impl ModuleClient {
    async fn acquire(&mut self, cmd: &str, name: &str) -> io::Result<()> {
        loop {
            let r = self
                .conn
                .cmd(&[
                    cmd.as_bytes(),
                    name.as_bytes(),
                    self.owner.as_bytes(),
                    b"PX",
                    LEASE_MS.as_bytes(),
                    b"BLOCK",
                    BLOCK_MS.as_bytes(),
                ])
                .await?;
            match r {
                Reply::Int(1) => {
                    self.held = Some(name.to_string());
                    return Ok(());
                }
                // The BLOCK time ran out: ask again.
                Reply::Nil => continue,
                other => return Err(io::Error::other(format!("{cmd} answered {other:?}"))),
            }
        }
    }

    async fn release(&mut self) -> io::Result<()> {
        let name = self.held.take();
        self.let_go("LOCK.RELEASE", name, 0).await
    }

    /// Sends `cmd name owner` for the hold or leadership `name` and checks
    /// that it answered `want`.
    async fn let_go(&mut self, cmd: &str, name: Option<String>, want: i64) -> io::Result<()> {
        let name = name.ok_or_else(|| io::Error::other(format!("{cmd} with nothing held")))?;
        let r = self
            .conn
            .cmd(&[cmd.as_bytes(), name.as_bytes(), self.owner.as_bytes()])
            .await?;
        if r != Reply::Int(want) {
            return Err(io::Error::other(format!("{cmd} answered {r:?}")));
        }
        Ok(())
    }

    async fn campaign(&mut self, name: &str) -> io::Result<()> {
        loop {
            let r = self
                .conn
                .cmd(&[
                    b"ELECT.CAMPAIGN",
                    name.as_bytes(),
                    self.owner.as_bytes(),
                    b"PX",
                    LEASE_MS.as_bytes(),
                    b"KEEPALIVE",
                    b"BLOCK",
                    BLOCK_MS.as_bytes(),
                ])
                .await?;
            match r {
                Reply::Int(term) if term > 0 => {
                    self.leading = Some(name.to_string());
                    return Ok(());
                }
                Reply::Nil => continue,
                other => {
                    return Err(io::Error::other(format!(
                        "ELECT.CAMPAIGN answered {other:?}"
                    )))
                }
            }
        }
    }

    async fn resign(&mut self) -> io::Result<()> {
        let name = self.leading.take();
        self.let_go("ELECT.RESIGN", name, 1).await
    }
}

/// A client of any system, with the same calls.
pub(super) enum Client {
    Module(Box<ModuleClient>),
    Etcd(Box<EtcdClient>),
    Zk(Box<ZkClient>),
}

impl Client {
    pub(super) async fn connect(system: System, addr: &str, owner: String) -> io::Result<Client> {
        Ok(match system {
            System::Module | System::ModuleAlways => Client::Module(Box::new(ModuleClient {
                conn: Conn::connect(addr).await?,
                owner,
                held: None,
                leading: None,
            })),
            System::Etcd => Client::Etcd(Box::new(EtcdClient::connect(addr).await?)),
            System::ZooKeeper => Client::Zk(Box::new(ZkClient::connect(addr).await?)),
        })
    }

    pub(super) async fn lock(&mut self, name: &str) -> io::Result<()> {
        match self {
            Client::Module(c) => c.acquire("LOCK.ACQUIRE", name).await,
            Client::Etcd(c) => c.lock(name).await,
            Client::Zk(c) => c.lock(name).await,
        }
    }

    pub(super) async fn read_lock(&mut self, name: &str) -> io::Result<()> {
        match self {
            Client::Module(c) => c.acquire("LOCK.RACQUIRE", name).await,
            Client::Etcd(_) => Err(io::Error::other("etcd has no read-write lock")),
            Client::Zk(c) => c.read_lock(name).await,
        }
    }

    pub(super) async fn write_lock(&mut self, name: &str) -> io::Result<()> {
        match self {
            Client::Module(c) => c.acquire("LOCK.WACQUIRE", name).await,
            Client::Etcd(_) => Err(io::Error::other("etcd has no read-write lock")),
            Client::Zk(c) => c.write_lock(name).await,
        }
    }

    pub(super) async fn unlock(&mut self) -> io::Result<()> {
        match self {
            Client::Module(c) => c.release().await,
            Client::Etcd(c) => c.unlock().await,
            Client::Zk(c) => c.unlock().await,
        }
    }

    pub(super) async fn campaign(&mut self, name: &str) -> io::Result<()> {
        match self {
            Client::Module(c) => c.campaign(name).await,
            Client::Etcd(c) => c.campaign(name).await,
            Client::Zk(c) => c.campaign(name).await,
        }
    }

    pub(super) async fn resign(&mut self) -> io::Result<()> {
        match self {
            Client::Module(c) => c.resign().await,
            Client::Etcd(c) => c.resign().await,
            Client::Zk(c) => c.resign().await,
        }
    }

    /// Ends the client's session: for etcd its lease is revoked (any key of
    /// a wait cut off at the end of a run goes with it); a module or
    /// ZooKeeper client's connection closes when dropped.
    pub(super) async fn close(self) -> io::Result<()> {
        match self {
            Client::Module(_) | Client::Zk(_) => Ok(()),
            Client::Etcd(c) => (*c).close().await,
        }
    }
}
