//! A simulated Redisson client process: one pub/sub connection shared by
//! its threads (clients), its subscriptions to lock channels (a message
//! wakes one waiting thread, or all of them for a write release) and to
//! semaphore channels (Redisson's `PublishSubscribe` entries, whose latch a
//! message releases permits of).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::io;
use std::rc::Rc;

use tokio::sync::{mpsc, Notify};

use super::shared::Shared;
use crate::conn::{unexpected, Conn, Reply, ReplyExt};

/// A subscription of one process to one lock's channel.
#[derive(Default)]
pub(super) struct Chan {
    /// 0 none, 1 SUBSCRIBE sent, 2 confirmed.
    pub(super) state: Cell<u8>,
    pub(super) ready: Notify,
    /// Message `0` wakes one waiting thread of the process (a message that
    /// finds none waiting is kept as one permit, like Redisson's semaphore);
    /// `1` (a read-write lock's write release) wakes every thread waiting
    /// then and keeps nothing (`release(getQueueLength())`).
    pub(super) wake: Notify,
}

/// What a process asks of its pub/sub connection.
pub(super) enum SubReq {
    Subscribe(usize),
    Unsubscribe(usize),
}

/// A Redisson process's subscription to a semaphore's channel while some of
/// its threads wait (`PublishSubscribe`'s entry, `RedissonLockEntry`):
/// made by the first thread that waits, dropped (and unsubscribed) when the
/// last one is done.
pub(super) struct SemEntry {
    /// Threads of the process that subscribed and have not unsubscribed
    /// (`entry.acquired()`).
    pub(super) acquired: Cell<usize>,
    /// The entry's latch: a message with the available count `v` releases
    /// `min(acquired, v)` permits of it (`SemaphorePubSub.onMessage`); a
    /// waiting thread takes one, a permit nobody takes stays.
    pub(super) latch: tokio::sync::Semaphore,
    /// The server confirmed the SUBSCRIBE.
    pub(super) ready: Cell<bool>,
    pub(super) ready_notify: Notify,
}

/// A simulated Redisson client process: one pub/sub connection shared by its
/// threads.
pub(super) struct Process {
    pub(super) sub_tx: mpsc::UnboundedSender<SubReq>,
    pub(super) chans: RefCell<HashMap<usize, Rc<Chan>>>,
    /// Semaphore runs: the live entry per key.
    pub(super) sem: RefCell<HashMap<usize, Rc<SemEntry>>>,
    /// Semaphore runs: per key, the entries whose SUBSCRIBE is not yet
    /// confirmed, in the order sent.
    pub(super) sem_pending: RefCell<HashMap<usize, std::collections::VecDeque<Rc<SemEntry>>>>,
}

impl Process {
    /// `PublishSubscribe.subscribe`: joins the process's entry for `key`, or
    /// makes one and subscribes; waits until the subscription is confirmed.
    pub(super) async fn sem_subscribe(&self, key: usize) -> io::Result<Rc<SemEntry>> {
        let existing = self.sem.borrow().get(&key).cloned();
        let entry = match existing {
            Some(e) => {
                e.acquired.set(e.acquired.get() + 1);
                e
            }
            None => {
                let e = Rc::new(SemEntry {
                    acquired: Cell::new(1),
                    latch: tokio::sync::Semaphore::new(0),
                    ready: Cell::new(false),
                    ready_notify: Notify::new(),
                });
                self.sem.borrow_mut().insert(key, e.clone());
                self.sem_pending
                    .borrow_mut()
                    .entry(key)
                    .or_default()
                    .push_back(e.clone());
                self.sub_tx
                    .send(SubReq::Subscribe(key))
                    .map_err(|_| io::Error::other("pub/sub connection closed"))?;
                e
            }
        };
        while !entry.ready.get() {
            entry.ready_notify.notified().await;
        }
        Ok(entry)
    }

    /// `PublishSubscribe.unsubscribe`: leaves the entry; the last thread
    /// out drops it and unsubscribes the connection. (Redisson waits for
    /// the UNSUBSCRIBE's answer before a new SUBSCRIBE of the channel; here
    /// a SUBSCRIBE right after is pipelined behind it.)
    pub(super) fn sem_unsubscribe(&self, key: usize, entry: &Rc<SemEntry>) {
        let left = entry.acquired.get().saturating_sub(1);
        entry.acquired.set(left);
        if left == 0 {
            let mut map = self.sem.borrow_mut();
            if map.get(&key).is_some_and(|e| Rc::ptr_eq(e, entry)) {
                map.remove(&key);
                let _ = self.sub_tx.send(SubReq::Unsubscribe(key));
            }
        }
    }

    fn chan(&self, key: usize) -> Rc<Chan> {
        self.chans.borrow_mut().entry(key).or_default().clone()
    }

    /// Subscribes this process to `key`'s channel if no thread did yet, and
    /// waits until the subscription is confirmed.
    pub(super) async fn subscribe(&self, key: usize) -> io::Result<Rc<Chan>> {
        let chan = self.chan(key);
        if chan.state.get() == 0 {
            chan.state.set(1);
            self.sub_tx
                .send(SubReq::Subscribe(key))
                .map_err(|_| io::Error::other("pub/sub connection closed"))?;
        }
        while chan.state.get() != 2 {
            chan.ready.notified().await;
        }
        Ok(chan)
    }
}

pub(super) async fn pubsub_task(
    mut conn: Conn,
    mut rx: mpsc::UnboundedReceiver<SubReq>,
    process: Rc<Process>,
    shared: Rc<Shared>,
) {
    if let Err(e) = pubsub_loop(&mut conn, &mut rx, &process, &shared).await {
        if !shared.stopping.get() {
            shared
                .errors
                .note(format!("redisson pub/sub connection: {e}"));
        }
    }
}

async fn pubsub_loop(
    conn: &mut Conn,
    rx: &mut mpsc::UnboundedReceiver<SubReq>,
    process: &Process,
    shared: &Shared,
) -> io::Result<()> {
    loop {
        tokio::select! {
            biased;
            reply = conn.read() => {
                let reply = reply?;
                let Reply::Array(items) = &reply else {
                    return Err(io::Error::other(format!("unexpected pub/sub reply {reply:?}")));
                };
                match items.as_slice() {
                    [Reply::BulkString(kind), Reply::BulkString(ch), payload] => {
                        let Some(&key) = shared.channel_index.get(ch) else {
                            continue;
                        };
                        if shared.sem.is_some() {
                            sem_pubsub_reply(process, key, kind, payload)?;
                            continue;
                        }
                        let chan = process.chan(key);
                        if kind == b"message" {
                            if *payload == Reply::BulkString(b"1".to_vec()) {
                                chan.wake.notify_waiters();
                            } else {
                                chan.wake.notify_one();
                            }
                        } else if kind == b"subscribe" {
                            chan.state.set(2);
                            chan.ready.notify_waiters();
                        }
                    }
                    _ => return Err(io::Error::other(format!("unexpected pub/sub reply {reply:?}"))),
                }
            }
            req = rx.recv() => match req {
                Some(SubReq::Subscribe(key)) => {
                    conn.push(&[b"SUBSCRIBE", &shared.channels[key]]);
                    conn.flush().await?;
                }
                Some(SubReq::Unsubscribe(key)) => {
                    conn.push(&[b"UNSUBSCRIBE", &shared.channels[key]]);
                    conn.flush().await?;
                }
                None => return Ok(()),
            },
        }
    }
}

/// A semaphore channel's message or (un)subscribe confirmation for a
/// process: a message `v` (the available count) releases `min(acquired, v)`
/// permits of the live entry's latch; a subscribe confirmation makes the
/// oldest pending entry ready.
fn sem_pubsub_reply(process: &Process, key: usize, kind: &[u8], payload: &Reply) -> io::Result<()> {
    match kind {
        b"message" => {
            let v = payload
                .int()
                .ok_or_else(|| unexpected("a semaphore channel's message", payload))?;
            if let Some(e) = process.sem.borrow().get(&key) {
                let n = e.acquired.get().min(v.max(0) as usize);
                e.latch.add_permits(n);
            }
        }
        b"subscribe" => {
            let e = process
                .sem_pending
                .borrow_mut()
                .get_mut(&key)
                .and_then(|q| q.pop_front());
            if let Some(e) = e {
                e.ready.set(true);
                e.ready_notify.notify_waiters();
            }
        }
        _ => {}
    }
    Ok(())
}
#[cfg(test)]
mod tests {
    use super::*;

    /// `SemaphorePubSub.onMessage`: a message `v` releases min(threads
    /// subscribed, v) permits of the process's latch; a subscribe
    /// confirmation readies the oldest entry waiting for one.
    #[test]
    fn semaphore_message_wakes_at_most_the_subscribed_threads() {
        let (tx, _rx) = mpsc::unbounded_channel();
        let p = Process {
            sub_tx: tx,
            chans: RefCell::new(HashMap::new()),
            sem: RefCell::new(HashMap::new()),
            sem_pending: RefCell::new(HashMap::new()),
        };
        let e = Rc::new(SemEntry {
            acquired: Cell::new(3),
            latch: tokio::sync::Semaphore::new(0),
            ready: Cell::new(false),
            ready_notify: Notify::new(),
        });
        p.sem.borrow_mut().insert(0, e.clone());
        p.sem_pending
            .borrow_mut()
            .entry(0)
            .or_default()
            .push_back(e.clone());
        sem_pubsub_reply(&p, 0, b"subscribe", &Reply::Int(1)).unwrap();
        assert!(e.ready.get());
        sem_pubsub_reply(&p, 0, b"message", &Reply::BulkString(b"2".to_vec())).unwrap();
        assert_eq!(e.latch.available_permits(), 2);
        sem_pubsub_reply(&p, 0, b"message", &Reply::BulkString(b"10".to_vec())).unwrap();
        assert_eq!(e.latch.available_permits(), 5);
        // No entry for the key: nobody of the process waits, nothing kept.
        sem_pubsub_reply(&p, 1, b"message", &Reply::BulkString(b"4".to_vec())).unwrap();
        assert!(sem_pubsub_reply(&p, 0, b"message", &Reply::BulkString(b"x".to_vec())).is_err());
    }
}
