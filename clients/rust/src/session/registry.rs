//! The holds the session keeps: registering a granted hold, re-attaching holds to a session
//! connection named again (`LOCK.RENEW` / `SEM.RENEW` / `ELECT.CAMPAIGN ... SESSION token`),
//! and the loss dispatch: a loss message, a `NOTOWNER` at a re-attach, a session connection
//! down past the lease or a broken one (leaderships) signal [`Lost`] on the hold's channel
//! and the session's.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::state::{lock, Entry, Inner, Of};
use crate::error::is_unusable;
use crate::proto::{self, Binding, Lost, Reason};

impl Inner {
    /// Registers a granted hold.
    pub fn register(&self, entry: Entry) -> u64 {
        let id = self.counter.fetch_add(1, Ordering::Relaxed) + 1;
        lock(&self.holds).insert(id, entry);
        id
    }

    /// Re-attaches hold `id` if the session reconnected since `sent_at` (when its acquire
    /// was sent): the re-attach of the reconnect may have missed it.
    /// `token`: the hold's (first) token, a leadership's term.
    pub async fn reattach_if_reconnected(&self, id: u64, sent_at: u64, token: i64) {
        if self.generation() == sent_at {
            return;
        }
        let hold = lock(&self.holds)
            .get(&id)
            .map(|e| (e.keys.clone(), e.owner.clone(), e.of, e.lease));
        if let Some((keys, owner, Of::Election, lease)) = &hold {
            let key = keys.first().cloned().unwrap_or_default();
            self.reattach_leadership(id, &key, owner, *lease, token)
                .await;
            return;
        }
        if let Some((keys, owner, of, lease)) = hold {
            for key in &keys {
                self.reattach_one(id, key, &owner, of, lease).await;
            }
        }
    }

    /// A leadership granted while a session connection was replaced may be bound to the one
    /// that broke: `ELECT.CAMPAIGN` again without `BLOCK` binds it to the session's connection
    /// now if the candidate still leads with term `term`. Anything else is a loss (a new
    /// term won here is not the one the caller was given: its watcher resigns it).
    async fn reattach_leadership(
        &self,
        id: u64,
        key: &str,
        owner: &str,
        lease: Duration,
        term: i64,
    ) {
        let args = Of::Election.renew(key, owner, lease, Binding::Session(&self.token));
        let sent = self.command(&args, Some(key));
        match tokio::time::timeout(self.opts.response_timeout, sent).await {
            Ok(Ok(v)) if proto::campaigned(&v) == Ok(Some(term)) => {}
            Ok(Ok(_)) => self.lose_id(id, key, Reason::NotOwner),
            _ => self.lose_id(id, key, Reason::ConnectionLost),
        }
    }

    async fn reattach_one(&self, id: u64, key: &str, owner: &str, of: Of, lease: Duration) {
        let args = of.renew(key, owner, lease, Binding::Session(&self.token));
        // A command connection to a server gone or demoted is replaced after its error: once
        // more on the new one.
        for _ in 0..2 {
            let sent = self.command(&args, Some(key));
            match tokio::time::timeout(self.opts.response_timeout, sent).await {
                Ok(Ok(_)) => return,
                Ok(Err(e)) if of.not_held(e.code()) => {
                    self.lose_id(id, key, Reason::NotOwner);
                    return;
                }
                Ok(Err(e)) if is_unusable(&e) || e.code() == Some("READONLY") => continue,
                // No answer in time: the connection is replaced.
                Err(_) => self.invalidate(""),
                Ok(Err(_)) => return,
            }
        }
    }

    /// Re-attaches every hold on `node` to the session connection named just now.
    pub(super) async fn reattach(&self, node: &str) {
        let holds: Vec<(u64, Vec<String>, String, Of, Duration)> = lock(&self.holds)
            .iter()
            .filter(|(_, e)| e.node == node && e.of != Of::Election)
            .map(|(id, e)| (*id, e.keys.clone(), e.owner.clone(), e.of, e.lease))
            .collect();
        for (id, keys, owner, of, lease) in holds {
            for key in &keys {
                self.reattach_one(id, key, &owner, of, lease).await;
            }
        }
    }

    fn signal(&self, entry: Entry, key: &str, reason: Reason) {
        let lost = Lost {
            key: key.to_string(),
            owner: entry.owner.clone(),
            reason,
        };
        entry.tx.send_replace(Some(lost.clone()));
        self.lost.send_replace(Some(lost));
    }

    fn lose_id(&self, id: u64, key: &str, reason: Reason) {
        let entry = lock(&self.holds).remove(&id);
        if let Some(e) = entry {
            self.signal(e, key, reason);
        }
    }

    /// A loss message: every hold of `owner` on `key`.
    pub(super) fn lose(&self, owner: &str, key: &str, reason: Reason) {
        for e in self.take(|e| e.owner == owner && e.keys.iter().any(|k| k == key)) {
            self.signal(e, key, reason.clone());
        }
    }

    /// Every hold on `node`: its session connection stayed down longer than the lease.
    pub(super) fn lose_node(&self, node: &str, reason: Reason) {
        self.lose_taken(self.take(|e| e.node == node), reason);
    }

    /// Every leadership on `node`: its session connection broke or was demoted.
    pub(super) fn lose_elections(&self, node: &str, reason: Reason) {
        self.lose_taken(
            self.take(|e| e.node == node && e.of == Of::Election),
            reason,
        );
    }

    /// Forgets every kept hold `which` picks, under one lock of the registry.
    fn take(&self, which: impl Fn(&Entry) -> bool) -> Vec<Entry> {
        let mut holds = lock(&self.holds);
        let ids: Vec<u64> = holds
            .iter()
            .filter(|(_, e)| which(e))
            .map(|(id, _)| *id)
            .collect();
        ids.iter().filter_map(|id| holds.remove(id)).collect()
    }

    /// Signals each of `gone` lost, under its first key.
    fn lose_taken(&self, gone: Vec<Entry>, reason: Reason) {
        for e in gone {
            let key = e.keys.first().cloned().unwrap_or_default();
            self.signal(e, &key, reason.clone());
        }
    }

    /// Signals hold `id` lost (if it is still kept) and forgets it.
    pub fn lose_hold(&self, id: u64, key: &str, reason: Reason) {
        self.lose_id(id, key, reason);
    }

    pub fn forget(&self, id: u64) -> Option<Entry> {
        lock(&self.holds).remove(&id)
    }

    /// The node hold `id` is on, if it is still kept.
    pub fn node_of_hold(&self, id: u64) -> Option<String> {
        lock(&self.holds).get(&id).map(|e| e.node.clone())
    }

    pub fn holds_entry(&self, id: u64) -> bool {
        lock(&self.holds).contains_key(&id)
    }

    /// Whether `owner` holds one of `keys` in this session (any of its holds).
    pub fn owner_holds_any(&self, owner: &str, keys: &[String]) -> bool {
        lock(&self.holds)
            .values()
            .any(|e| e.owner == owner && e.keys.iter().any(|k| keys.contains(k)))
    }

    pub fn set_lease(&self, id: u64, lease: Duration) {
        if let Some(e) = lock(&self.holds).get_mut(&id) {
            e.lease = lease;
        }
    }
}
