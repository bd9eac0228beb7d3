//! What a run is: the protocol ([`Proto`]), its clients and keys, and the
//! kind of lock they take ([`LoadSpec`]: exclusive, read-write, a
//! multi-lock of several keys ([`MultiSpec`], [`KeyOrder`]) or a
//! semaphore); the owner ids and the blpop reference's token.

use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    Module,
    /// The module's commands with KEEPALIVE.
    ModuleKeepalive,
    /// The module's commands with FENCE (exclusive, one key per cycle).
    ModuleFence,
    /// Redisson's protocol emulated by this generator (our copies of its
    /// scripts, its wait loop): `redisson-emu`.
    Redisson,
    /// The real Redisson client (Java), driven by interop/redisson's load
    /// driver (`redisson_client.rs`): `redisson`. S2, S12 and S13.
    RedissonClient,
    /// Retry sleep in ms.
    Spin(u64),
    Raw,
    /// Redis's native blocked-client hand-off: BLPOP / RPUSH of one token.
    Blpop,
    /// The module API's own hand-off: `FLOOR.ACQUIRE` / `FLOOR.RELEASE` of
    /// libfloor.so (bench/floor: block, unblock, nothing else), loaded next
    /// to liblock.so: `module-floor`.
    Floor,
}

impl Proto {
    /// The module's commands, with or without KEEPALIVE or FENCE.
    pub fn is_module(&self) -> bool {
        matches!(
            self,
            Proto::Module | Proto::ModuleKeepalive | Proto::ModuleFence
        )
    }

    /// The acquire options after `PX lease BLOCK wait`.
    pub(super) fn acquire_flags(&self) -> &'static [&'static [u8]] {
        match self {
            Proto::ModuleKeepalive => &[b"KEEPALIVE"],
            Proto::ModuleFence => &[b"FENCE"],
            _ => &[],
        }
    }

    pub fn name(&self) -> String {
        match self {
            Proto::Module => "module".into(),
            Proto::ModuleKeepalive => "module-keepalive".into(),
            Proto::ModuleFence => "module-fence".into(),
            Proto::Redisson => "redisson-emu".into(),
            Proto::RedissonClient => "redisson".into(),
            Proto::Spin(ms) => format!("spin-{ms}ms"),
            Proto::Raw => "raw".into(),
            Proto::Blpop => "blpop".into(),
            Proto::Floor => "module-floor".into(),
        }
    }
}

/// The one element of a `blpop` key's list.
pub const BLPOP_TOKEN: &[u8] = b"token";

/// BLPOP's timeout (seconds, decimals allowed since Redis 6) for a BLOCK
/// wait in ms: 10000 -> "10", 500 -> "0.5", 0 -> "0" (forever, as BLOCK 0).
pub fn blpop_timeout(block_ms: u64) -> String {
    let (s, ms) = (block_ms / 1000, block_ms % 1000);
    if ms == 0 {
        s.to_string()
    } else {
        format!("{s}.{ms:03}").trim_end_matches('0').to_string()
    }
}

/// Owner id in Redisson's `<uuid>:<thread>` form: one uuid-like id per
/// simulated process.
pub fn owner_id(process: usize, thread: usize) -> Vec<u8> {
    format!(
        "8743c9c0-0795-4907-87fd-{:012x}:{}",
        0x6c71_9a6b_0000u64 + process as u64,
        thread + 1
    )
    .into_bytes()
}

#[derive(Clone, Debug)]
pub struct LoadSpec {
    pub proto: Proto,
    pub clients: usize,
    pub keys: usize,
    /// Redisson: client threads per simulated process.
    pub threads_per_process: usize,
    pub warmup: Duration,
    pub measure: Duration,
    pub lease_ms: u64,
    pub block_ms: u64,
    /// Key prefix, unique per run.
    pub prefix: String,
    pub seed: u64,
    /// Read-write lock (module and redisson only): the probability that a
    /// cycle is a read; None = the exclusive lock.
    pub read_fraction: Option<f64>,
    /// Multi-lock (module and redisson only): each cycle takes several keys
    /// at once; None = one key per cycle.
    pub multi: Option<MultiSpec>,
    /// Semaphore of this many permits (module, redisson, blpop): each cycle
    /// takes one permit; None = a lock.
    pub semaphore: Option<usize>,
}

/// How a multi-lock caller names its keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyOrder {
    /// In the random order they were drawn in.
    Random,
    /// In one global order (the key's index), the same for every caller.
    Sorted,
}

impl KeyOrder {
    pub fn name(&self) -> &'static str {
        match self {
            KeyOrder::Random => "random",
            KeyOrder::Sorted => "sorted",
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub struct MultiSpec {
    /// Distinct keys taken per cycle.
    pub keys_per_lock: usize,
    pub order: KeyOrder,
}

/// `RedissonMultiLock.lock()` calls `tryLock` with a wait of this much per
/// lock, again and again until it returns true.
pub const REDISSON_MULTI_WAIT_PER_KEY: Duration = Duration::from_millis(1500);

/// The wait of each of `RedissonMultiLock.lock()`'s `tryLock` calls.
pub fn redisson_multi_wait(keys_per_lock: usize) -> Duration {
    REDISSON_MULTI_WAIT_PER_KEY * keys_per_lock as u32
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blpop_timeout_is_block_in_seconds() {
        assert_eq!(blpop_timeout(10_000), "10");
        assert_eq!(blpop_timeout(500), "0.5");
        assert_eq!(blpop_timeout(1_250), "1.25");
        assert_eq!(blpop_timeout(7), "0.007");
        assert_eq!(blpop_timeout(0), "0");
    }
}
