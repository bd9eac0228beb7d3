//! Comparing a server's data with its replica's and with its AOF's.
//!
//! `DEBUG DIGEST` hashes every key in memory, also keys whose TTL has passed
//! but that nothing has deleted yet. Those make it a poor judge of whether
//! two servers agree:
//! - a master deletes such a key when active expiry or a read reaches it, at
//!   any moment, and only then sends the DEL to its replicas and its AOF;
//! - a replica never deletes a key on its own: it keeps it (invisible to
//!   reads) until its master's DEL arrives;
//! - `DEBUG RELOAD` drops the master's expired keys without sending any DEL
//!   (rdbLoad skips them), so the replica keeps them for good, and the AOF,
//!   which still holds their writes, brings them back on a reload.
//!
//! So the checks here first let the master delete every key whose lease has
//! ended, and wait until no key is due to expire for a while
//! ([`wait_until_nothing_expires`]), then compare what readers see:
//! every key `SCAN` returns, by `DEBUG DIGEST-VALUE`.

use std::collections::{BTreeMap, BTreeSet};

use super::{q, wait_until, Server};

/// Every key a reader of `server` sees, with `DEBUG DIGEST-VALUE` of its
/// value: keys whose TTL has passed are not seen, on a master (which
/// deletes them as SCAN reaches them) nor on a replica.
pub fn visible_data(server: &Server) -> BTreeMap<String, String> {
    let mut con = server.client();
    let mut keys = BTreeSet::new();
    let mut cursor = "0".to_string();
    loop {
        let (next, batch): (String, Vec<String>) = q(&mut con, &["SCAN", &cursor, "COUNT", "1000"]);
        keys.extend(batch);
        if next == "0" {
            break;
        }
        cursor = next;
    }
    keys.into_iter()
        .map(|key| {
            let digest: Vec<String> = q(&mut con, &["DEBUG", "DIGEST-VALUE", &key]);
            (key, digest.concat())
        })
        .collect()
}

/// How far ahead no key may expire while two servers' data are compared:
/// far more than a comparison takes. Leases in the tests are shorter; the
/// fencing token keys' TTL (`lock.token-ttl-ms`, an hour) is longer.
const STABLE_FOR_MS: i64 = 60_000;

/// Keys on `server` whose TTL ends within [`STABLE_FOR_MS`]: scanning first
/// deletes those whose TTL has passed (a master does as SCAN reaches them).
fn keys_expiring_soon(server: &Server) -> usize {
    let mut con = server.client();
    visible_data(server)
        .keys()
        .filter(|key| {
            let pttl: i64 = q(&mut con, &["PTTL", key]);
            (0..=STABLE_FOR_MS).contains(&pttl)
        })
        .count()
}

/// Waits until the master `server` holds no key that expires soon: every
/// lease has ended and its key is deleted, and the DELs are on their way to
/// replicas and the AOF; what is left with a TTL (fencing token keys) stays
/// for the comparison. Call it only when nothing sets new leases.
pub fn wait_until_nothing_expires(server: &Server) {
    wait_until(
        "every key with a TTL due within a minute expired and deleted",
        || keys_expiring_soon(server) == 0,
    );
}

/// What differs between two views of the data, one line per key.
pub fn differences(
    want: &BTreeMap<String, String>,
    got: &BTreeMap<String, String>,
    got_name: &str,
) -> Vec<String> {
    let mut lines = Vec::new();
    for (key, digest) in want {
        match got.get(key) {
            None => lines.push(format!("{key}: missing on {got_name}")),
            Some(d) if d != digest => lines.push(format!("{key}: differs on {got_name}")),
            Some(_) => {}
        }
    }
    for key in got.keys().filter(|k| !want.contains_key(*k)) {
        lines.push(format!("{key}: only on {got_name}"));
    }
    lines
}

/// Whether `replica` holds what readers of `master` see, once the master
/// has deleted every expired key and the replica has applied the whole
/// replication stream ([`Server::replica_caught_up`]). Keys the replica
/// still keeps past their TTL are not compared (see the module doc);
/// everything else is.
pub fn replica_matches(master: &Server, replica: &Server) -> Result<(), String> {
    wait_until_nothing_expires(master);
    let want = visible_data(master);
    wait_until("the replica caught up", || {
        master.replica_caught_up(replica)
    });
    let diff = differences(&want, &visible_data(replica), "the replica");
    if diff.is_empty() {
        Ok(())
    } else {
        Err(diff.join("\n"))
    }
}

/// Whether reloading `master`'s AOF (`DEBUG LOADAOF`) gives back the data it
/// holds, compared once expired keys are deleted before and after the
/// reload, by key and by `DEBUG DIGEST` of the whole dataset.
pub fn aof_matches(master: &Server) -> Result<(), String> {
    let mut con = master.client();
    wait_until_nothing_expires(master);
    let want = visible_data(master);
    let want_digest: String = q(&mut con, &["DEBUG", "DIGEST"]);
    let _: () = q(&mut con, &["DEBUG", "LOADAOF"]);
    wait_until_nothing_expires(master);
    let mut diff = differences(&want, &visible_data(master), "the AOF reload");
    let digest: String = q(&mut con, &["DEBUG", "DIGEST"]);
    if diff.is_empty() && digest != want_digest {
        diff.push(format!("DEBUG DIGEST {digest}, was {want_digest}"));
    }
    if diff.is_empty() {
        Ok(())
    } else {
        Err(diff.join("\n"))
    }
}
