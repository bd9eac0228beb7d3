//! Where this node stands: in a cluster, which slots it serves (a timer may
//! only write keys of those: commands are routed by the server, timers are
//! not); outside cluster mode, every key.
//!
//! Offers: [`in_cluster`], [`Placement`].

use std::sync::OnceLock;

use redis_module::{Context, ContextFlags};

use lock_rules::keys::key_slot;
use lock_rules::server_text::myself_serves_slot;

/// Cluster mode is fixed for the server's life (`cluster-enabled` cannot
/// be changed at run time), so it is read once.
pub fn in_cluster(ctx: &Context) -> bool {
    static CLUSTER: OnceLock<bool> = OnceLock::new();
    *CLUSTER.get_or_init(|| ctx.get_flags().contains(ContextFlags::CLUSTER))
}

/// Where this node stands in a cluster (`CLUSTER NODES`), read once for a
/// batch of keys; outside cluster mode every key is served here.
pub struct Placement(Option<String>);

impl Placement {
    pub fn read(ctx: &Context) -> Self {
        if !in_cluster(ctx) {
            return Self(None);
        }
        let nodes = ctx.call("CLUSTER", &["NODES"]).and_then(String::try_from);
        Self(Some(nodes.unwrap_or_default()))
    }

    /// Whether this node serves `key`'s slot and is not migrating it away.
    pub fn serves(&self, key: &[u8]) -> bool {
        self.0
            .as_deref()
            .is_none_or(|nodes| myself_serves_slot(nodes, key_slot(key)))
    }
}
