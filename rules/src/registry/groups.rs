//! Multi-lock callers (LOCK.MACQUIRE) in the registry: one caller with an
//! entry in the queue of each of its keys, served only when it heads every
//! one of them, queued and removed as a unit; and what the other callers of
//! those keys see of it (nobody behind it is served before it).

use std::hash::Hash;
use std::time::Instant;

use super::{OwnerEntries, Registry, Released, Waiter};
use crate::lock_id::LockId;
use crate::queue::WaiterId;
use crate::request::{FieldName, Request};

/// A multi-lock caller: the id of its first entry. It has one entry in
/// the queue of each of its keys.
pub type GroupId = WaiterId;

pub(super) struct Group {
    pub(super) request: Request,
    pub(super) members: Vec<(LockId<'static>, WaiterId)>,
    /// The caller's BLOCK deadline (also on its first entry).
    pub(super) deadline: Option<Instant>,
}

impl<H: Copy + Eq + Hash> Registry<H> {
    /// Queues a multi-lock caller on every lock of `locks`, under fresh ids
    /// (from [`Registry::next_serial`], one per lock, the first one naming
    /// the group).
    pub fn enqueue_group(&mut self, locks: &[LockId<'_>], ids: &[WaiterId], waiter: Waiter<H>) {
        let Some(&group) = ids.first() else {
            return;
        };
        let mut members = Vec::with_capacity(ids.len());
        for (i, (lock, &id)) in locks.iter().zip(ids).enumerate() {
            let entry = Waiter {
                request: waiter.request.clone(),
                bc: waiter.bc,
                deadline: if i == 0 { waiter.deadline } else { None },
                group: Some(group),
                queued_at: waiter.queued_at,
                fair_ahead: Box::default(),
            };
            self.enqueue(lock, id, entry);
            members.push((lock.to_owned(), id));
        }
        self.groups.insert(
            group,
            Group {
                request: waiter.request,
                members,
                deadline: waiter.deadline,
            },
        );
    }

    /// Every key a multi-lock caller waits for, in the order named.
    pub fn group_locks(&self, group: GroupId) -> Vec<LockId<'static>> {
        self.groups.get(&group).map_or_else(Vec::new, |g| {
            g.members.iter().map(|(lock, _)| lock.clone()).collect()
        })
    }

    /// Whether a multi-lock caller waits for any lock.
    pub fn groups_wait(&self) -> bool {
        !self.groups.is_empty()
    }

    /// The multi-lock caller first in the queue of `lock`, if it is one.
    pub fn group_at_head(&self, lock: &LockId<'_>) -> Option<GroupId> {
        if self.groups.is_empty() {
            return None;
        }
        self.queue(lock)?.fifo.front().and_then(|(_, w)| w.group)
    }

    /// The owner of the multi-lock caller queued nearest ahead of `owner`'s
    /// first entry for `lock` (nearest the tail if `owner` has none there):
    /// nobody behind a multi-lock caller is served before it.
    pub fn multi_ahead(&self, lock: &LockId<'_>, owner: &[u8]) -> Option<FieldName> {
        if self.groups.is_empty() {
            return None;
        }
        let queue = self.queue(lock)?;
        let own_entry = self
            .by_owner
            .get(owner)
            .into_iter()
            .flat_map(OwnerEntries::iter)
            .find(|id| self.locations.get(id).is_some_and(|at| at == lock));
        let ahead = match own_entry {
            Some(&entry) => queue.multi_entries.range(..entry).next_back(),
            None => queue.multi_entries.last(),
        }?;
        Some(queue.fifo.get(*ahead)?.request.owner.clone())
    }

    /// A multi-lock caller's entries and request, and for each entry
    /// whether it heads its queue.
    pub fn group(&self, group: GroupId) -> Option<(Request, Vec<(LockId<'static>, bool)>)> {
        let group = self.groups.get(&group)?;
        let entries = group
            .members
            .iter()
            .map(|(lock, id)| {
                let front = self.queue(lock).and_then(|q| q.fifo.front());
                (lock.clone(), front.is_some_and(|(head, _)| head == *id))
            })
            .collect();
        Some((group.request.clone(), entries))
    }

    /// Takes every entry of `group` but `except` out of its queue. With
    /// `resettle`, their keys are listed for whoever is first there now.
    pub(super) fn remove_group_except(
        &mut self,
        group: GroupId,
        except: WaiterId,
        resettle: bool,
    ) -> Released {
        let mut released = Released::default();
        let Some(Group { members, .. }) = self.groups.remove(&group) else {
            return released;
        };
        for (lock, id) in members {
            if id == except {
                continue;
            }
            self.locations.remove(&id);
            let Some(queue) = self.queue_mut(&lock) else {
                continue;
            };
            if let Some(waiter) = queue.fifo.remove(id) {
                // Only a caller's first entry is known by its handle.
                self.forget_entry(&lock, id, &waiter, id == group);
            }
            released.merge(self.drop_if_empty(&lock));
            if resettle {
                released.resettle.push(lock);
            }
        }
        released
    }

    /// Takes a multi-lock caller out of every queue to grant it its keys.
    pub fn take_group(&mut self, group: GroupId) -> Option<(Waiter<H>, Released)> {
        let (&(ref lock, first), _) = self.groups.get(&group)?.members.split_first()?;
        let lock = lock.clone();
        let waiter = self.queue_mut(&lock)?.fifo.remove(first)?;
        self.forget_entry(&lock, first, &waiter, true);
        let mut released = self.drop_if_empty(&lock);
        released.merge(self.remove_group_except(group, first, false));
        released.wait_timer = self.idle_wait_timer();
        Some((waiter, released))
    }
}
