//! `lock-bench-peers --s14-candidate etcd ...`: an election candidate on
//! etcd's v3 election service through `etcd-client` (gRPC), with a lease of
//! its own TTL kept alive every TTL/3, on a current-thread tokio runtime of
//! its own.

use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{Client, LeaseKeepAliveStream, LeaseKeeper, ResignOptions};

use super::process::{catch_sigterm, say, unix_ms, TERM};

fn etcd_err(what: &str, e: etcd_client::Error) -> io::Error {
    io::Error::other(format!("{what}: {e}"))
}

/// `f` bounded by `limit` (the tonic channel under `etcd-client` connects
/// lazily and waits for the endpoint to be ready: a request to an
/// unreachable node would otherwise wait for ever).
async fn within<T>(
    what: &str,
    limit: Duration,
    f: impl Future<Output = Result<T, etcd_client::Error>>,
) -> io::Result<T> {
    match tokio::time::timeout(limit, f).await {
        Ok(r) => r.map_err(|e| etcd_err(what, e)),
        Err(_) => Err(io::Error::other(format!("{what}: no answer in {limit:?}"))),
    }
}

/// `--s14-candidate etcd ADDR NAME PROPOSAL TTL_S`: grants a lease of
/// TTL_S, keeps it alive every TTL/3 (its own task, from the start: a
/// waiting candidate's key lives on the lease too), campaigns (`Campaign`
/// answers once this candidate leads), prints `leading`. On SIGTERM it
/// resigns (`Resign`). A lease whose keep-alives fail for TTL (as clientv3's
/// session sees it) or that the server reports gone (TTL 0) ends its
/// leadership: `lost`, exit 75. `etcd-client` is async: one current-thread
/// runtime runs the campaign, the keep-alive task and the 5 ms checks.
pub(super) fn etcd_candidate(args: &[String]) -> io::Result<i32> {
    let [addr, name, proposal, ttl] = args else {
        return Err(io::Error::other("etcd ADDR NAME PROPOSAL TTL_S"));
    };
    let ttl: u64 = ttl.parse().map_err(|_| io::Error::other("TTL_S"))?;
    catch_sigterm();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(etcd_elect(addr, name, proposal, ttl))
}

/// The etcd candidate proper, on its runtime.
async fn etcd_elect(addr: &str, name: &str, proposal: &str, ttl: u64) -> io::Result<i32> {
    // Each request but the campaign is bounded by the TTL.
    let short = Duration::from_secs(ttl.max(1));
    let mut client = crate::etcd::connect(addr).await?;
    let grant = within("lease grant", short, client.lease_grant(ttl as i64, None)).await?;
    let lease = grant.id();
    let started = Instant::now();
    // Milliseconds since `started` of the last keep-alive sent that the
    // server answered with a live lease; u64::MAX: the lease is gone.
    let last_ok = Arc::new(AtomicU64::new(0));
    tokio::spawn(keep_alive(
        client.clone(),
        lease,
        ttl,
        started,
        last_ok.clone(),
    ));
    let mut won = client
        .campaign(name, proposal, lease)
        .await
        .map_err(|e| etcd_err("campaign", e))?;
    let leader = won
        .take_leader()
        .ok_or_else(|| io::Error::other("campaign: answered no leader key"))?;
    say(&format!("leading {proposal} at {}", unix_ms()));
    loop {
        if TERM.load(Ordering::SeqCst) {
            let resign = client.resign(Some(ResignOptions::new().with_leader(leader)));
            within("resign", short, resign).await?;
            eprintln!("resigned at {}", unix_ms());
            return Ok(0);
        }
        let ok = last_ok.load(Ordering::SeqCst);
        let now = started.elapsed().as_millis() as u64;
        if ok == u64::MAX || now > ok + ttl * 1000 {
            eprintln!(
                "lost at {} ({})",
                unix_ms(),
                if ok == u64::MAX {
                    "lease gone"
                } else {
                    "no keep-alive answered for the TTL"
                }
            );
            return Ok(75);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The keep-alive loop: a keep-alive every TTL/3 from the last one sent,
/// each bounded by the TTL, over one `LeaseKeepAlive` stream. A stream
/// that fails or leaves a keep-alive unanswered is dropped (a late answer
/// on it would be taken for the next one's) and the next round opens a new
/// one, as clientv3 does.
async fn keep_alive(
    mut client: Client,
    lease: i64,
    ttl: u64,
    started: Instant,
    last_ok: Arc<AtomicU64>,
) {
    let short = Duration::from_secs(ttl.max(1));
    let period = Duration::from_millis(ttl * 1000 / 3);
    let mut stream = None;
    loop {
        let sent = started.elapsed().as_millis() as u64;
        match tokio::time::timeout(short, keep_alive_once(&mut client, lease, &mut stream)).await {
            Ok(Ok(true)) => {
                last_ok.fetch_max(sent, Ordering::SeqCst);
            }
            Ok(Ok(false)) => {
                last_ok.store(u64::MAX, Ordering::SeqCst);
                return;
            }
            Ok(Err(_)) | Err(_) => stream = None,
        }
        let spent = Duration::from_millis(started.elapsed().as_millis() as u64 - sent);
        tokio::time::sleep(period.saturating_sub(spent)).await;
    }
}

/// One keep-alive on `stream` (opened first if there is none): true if
/// the server answered that the lease lives, false if it answered TTL 0.
async fn keep_alive_once(
    client: &mut Client,
    lease: i64,
    stream: &mut Option<(LeaseKeeper, LeaseKeepAliveStream)>,
) -> Result<bool, etcd_client::Error> {
    if let Some((keeper, answers)) = stream {
        keeper.keep_alive().await?;
        return match answers.message().await? {
            Some(r) => Ok(r.ttl() > 0),
            None => Err(etcd_client::Error::LeaseKeepAliveError(
                "stream ended".into(),
            )),
        };
    }
    // Opening sends the first keep-alive and reads its answer; a TTL of 0
    // comes back as this error (the only one `LeaseKeepAliveError` can be
    // here: the request channel is fresh).
    match client.lease_keep_alive(lease).await {
        Ok(opened) => {
            *stream = Some(opened);
            Ok(true)
        }
        Err(etcd_client::Error::LeaseKeepAliveError(_)) => Ok(false),
        Err(e) => Err(e),
    }
}
