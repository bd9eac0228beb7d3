//! The watchers of a run: the sweeps of every held key's `PTTL` and
//! `PEXPIRETIME` (a key gone is a hold lost; each renewal seen and what it
//! found left: the closest call) and the `INFO lock` polls (bindings ended,
//! holds kept).

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::io;
use std::rc::Rc;
use std::time::{Duration, Instant};

use super::holds::HOLDS;
use crate::conn::{Conn, Reply, ReplyExt};

/// How often `INFO lock` is polled for ended bindings.
pub(super) const POLL: Duration = Duration::from_millis(250);

/// What the sweeps saw.
#[derive(Default)]
pub(super) struct Sweeps {
    pub(super) count: u64,
    pub(super) samples: u64,
    /// The smallest TTL seen, with the key and seconds into the hold.
    pub(super) min_ttl: Option<(i64, String, f64)>,
    /// Samples taken while a renewal was overdue (TTL below half the lease).
    pub(super) overdue: u64,
    /// The TTL each observed renewal found left: the previous expiry time
    /// minus the renewal's own time (its new expiry time minus the lease),
    /// both the server's.
    pub(super) renewal_ttls: Vec<i64>,
    /// Renewals seen that may have been two: the expiry moved by two
    /// [`min_renewal_gap_ms`] or more between sweeps that far apart.
    pub(super) unresolved: u64,
    /// Keys found gone (PTTL -2), with when first.
    pub(super) lost: BTreeSet<String>,
    pub(super) first_lost_s: Option<f64>,
    /// Keys found without a TTL (PTTL -1): never expected.
    pub(super) no_ttl: BTreeSet<String>,
    /// Longest time between the starts of two sweeps, in ms.
    pub(super) max_gap_ms: f64,
    pub(super) error: Option<String>,
}

/// The shortest time between two renewals of a hold with the floor lease
/// `lease_ms`: due half a lease after the last one, a renewal is made up to
/// 50 ms early (`BATCH_MS` in src/keepalive.rs), with the renewals due
/// soon after the one that woke the server.
fn min_renewal_gap_ms(lease_ms: i64) -> i64 {
    lease_ms / 2 - 50
}

/// Sweeps the keys (`PTTL` and `PEXPIRETIME` of each, one pipeline) until
/// `stop`: a key gone is a hold lost; the TTLs sampled give the smallest
/// seen, and each change of a key's expiry time is a renewal, whose new
/// expiry time minus the lease is when it was made: the old expiry time
/// minus that is what the renewal found left, exactly, unless there is
/// room for two renewals (the expiry moved by two `min_renewal_gap_ms` or
/// more, and the sweeps were that far apart).
pub(super) async fn sweep(
    addr: String,
    keys: Rc<Vec<String>>,
    lease_ms: i64,
    t0: Instant,
    stop: Rc<std::cell::Cell<bool>>,
    out: Rc<RefCell<Sweeps>>,
) {
    let mut conn = match Conn::connect(&addr).await {
        Ok(c) => c,
        Err(e) => {
            out.borrow_mut().error = Some(e.to_string());
            return;
        }
    };
    let mut last: Option<Instant> = None;
    // Each key's expiry time at the last sweep.
    let mut expiry: Vec<Option<i64>> = vec![None; keys.len()];
    while !stop.get() {
        let start = Instant::now();
        for k in keys.iter() {
            conn.push(&[b"PTTL", k.as_bytes()]);
            conn.push(&[b"PEXPIRETIME", k.as_bytes()]);
        }
        if let Err(e) = conn.flush().await {
            out.borrow_mut().error = Some(format!("PTTL sweep: {e}"));
            return;
        }
        let mut replies = Vec::with_capacity(keys.len() * 2);
        for _ in 0..keys.len() * 2 {
            match conn.read().await {
                Ok(r) => replies.push(r),
                Err(e) => {
                    out.borrow_mut().error = Some(format!("PTTL sweep: {e}"));
                    return;
                }
            }
        }
        let at = start.duration_since(t0).as_secs_f64();
        // From the start of the sweep before to the end of this one: the
        // server read both samples of a key within it.
        let window_ms = last.map(|prev| prev.elapsed().as_secs_f64() * 1000.0);
        let mut s = out.borrow_mut();
        s.count += 1;
        if let Some(prev) = last {
            s.max_gap_ms = s
                .max_gap_ms
                .max(start.duration_since(prev).as_secs_f64() * 1000.0);
        }
        last = Some(start);
        for ((n, k), r) in keys.iter().enumerate().zip(replies.chunks(2)) {
            match (&r[0], &r[1]) {
                (Reply::Int(-2), _) | (_, Reply::Int(-2)) => {
                    if s.lost.insert(k.clone()) && s.first_lost_s.is_none() {
                        s.first_lost_s = Some(at);
                    }
                    expiry[n] = None;
                }
                (Reply::Int(-1), _) | (_, Reply::Int(-1)) => {
                    s.no_ttl.insert(k.clone());
                }
                (Reply::Int(ttl), Reply::Int(at_ms)) => {
                    let (ttl, at_ms) = (*ttl, *at_ms);
                    s.samples += 1;
                    if ttl < lease_ms / 2 {
                        s.overdue += 1;
                    }
                    if s.min_ttl.as_ref().is_none_or(|(m, _, _)| ttl < *m) {
                        s.min_ttl = Some((ttl, k.clone(), at));
                    }
                    if let Some(before) = expiry[n].filter(|e| *e != at_ms) {
                        let renewed_at = at_ms - lease_ms;
                        // One renewal since the last sweep, unless the
                        // expiry moved by two gaps or more and the sweeps
                        // were far enough apart for two.
                        let gap = min_renewal_gap_ms(lease_ms);
                        let one =
                            at_ms - before < 2 * gap || window_ms.is_some_and(|w| w < gap as f64);
                        if one {
                            s.renewal_ttls.push(before - renewed_at);
                        } else {
                            s.unresolved += 1;
                        }
                    }
                    expiry[n] = Some(at_ms);
                }
                other => {
                    s.error = Some(format!("PTTL/PEXPIRETIME {k} answered {other:?}"));
                    return;
                }
            }
        }
    }
}

/// What the `INFO lock` polls saw: the most bindings ended since the start
/// and the fewest held, with when the first change was seen.
#[derive(Default)]
pub(super) struct Polls {
    pub(super) count: u64,
    pub(super) ended_max: i64,
    pub(super) holds_min: Option<i64>,
    pub(super) first_seen_s: Option<f64>,
    pub(super) error: Option<String>,
}

pub(super) async fn poll_info(
    addr: String,
    ended0: i64,
    holds0: i64,
    t0: Instant,
    stop: Rc<std::cell::Cell<bool>>,
    out: Rc<RefCell<Polls>>,
) {
    let mut conn = match Conn::connect(&addr).await {
        Ok(c) => c,
        Err(e) => {
            out.borrow_mut().error = Some(e.to_string());
            return;
        }
    };
    while !stop.get() {
        let read = async {
            let info = conn.ok(&["INFO", "lock"]).await?.text();
            let field = |name: &str| {
                info.lines()
                    .find_map(|l| {
                        l.strip_prefix(name)?
                            .strip_prefix(':')?
                            .trim()
                            .parse::<i64>()
                            .ok()
                    })
                    .ok_or_else(|| io::Error::other(format!("INFO lock has no {name}")))
            };
            Ok::<_, io::Error>((
                field("lock_keepalive_ended")? - ended0,
                field("lock_keepalive_holds")? - holds0,
            ))
        }
        .await;
        {
            let mut p = out.borrow_mut();
            match read {
                Ok((ended, holds)) => {
                    p.count += 1;
                    p.ended_max = p.ended_max.max(ended);
                    p.holds_min = Some(p.holds_min.map_or(holds, |m| m.min(holds)));
                    if (ended > 0 || holds < HOLDS as i64) && p.first_seen_s.is_none() {
                        p.first_seen_s = Some(t0.elapsed().as_secs_f64());
                    }
                }
                Err(e) => {
                    p.error = Some(format!("INFO lock: {e}"));
                    return;
                }
            }
        }
        tokio::time::sleep(POLL).await;
    }
}
