//! The FIFO of callers waiting for one lock.
//!
//! Waiters leave from the head when they are handed the lock, but also from
//! anywhere in the middle when they time out or disconnect, so this is a
//! doubly linked list threaded through a map: push, pop and removal by id are
//! all O(1).

use crate::ids::IdMap;

/// Identifies one waiting caller. Ids are handed out by the caller of
/// [`Fifo::push_back`] and must be unique among the queued entries.
pub type WaiterId = u64;

struct Node<T> {
    value: T,
    prev: Option<WaiterId>,
    next: Option<WaiterId>,
}

pub struct Fifo<T> {
    nodes: IdMap<WaiterId, Node<T>>,
    head: Option<WaiterId>,
    tail: Option<WaiterId>,
}

impl<T> Default for Fifo<T> {
    fn default() -> Self {
        Self {
            nodes: IdMap::default(),
            head: None,
            tail: None,
        }
    }
}

impl<T> Fifo<T> {
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    #[cfg(test)]
    pub fn contains(&self, id: WaiterId) -> bool {
        self.nodes.contains_key(&id)
    }

    /// Appends `value` at the tail. Returns false (and changes nothing) if
    /// `id` is already queued.
    pub fn push_back(&mut self, id: WaiterId, value: T) -> bool {
        if self.nodes.contains_key(&id) {
            return false;
        }
        let node = Node {
            value,
            prev: self.tail,
            next: None,
        };
        match self.tail.and_then(|t| self.nodes.get_mut(&t)) {
            Some(tail) => tail.next = Some(id),
            None => self.head = Some(id),
        }
        self.tail = Some(id);
        self.nodes.insert(id, node);
        true
    }

    pub fn front(&self) -> Option<(WaiterId, &T)> {
        let id = self.head?;
        self.nodes.get(&id).map(|n| (id, &n.value))
    }

    pub fn pop_front(&mut self) -> Option<(WaiterId, T)> {
        let id = self.head?;
        self.remove(id).map(|v| (id, v))
    }

    pub fn get(&self, id: WaiterId) -> Option<&T> {
        self.nodes.get(&id).map(|n| &n.value)
    }

    pub fn remove(&mut self, id: WaiterId) -> Option<T> {
        let node = self.nodes.remove(&id)?;
        match node.prev.and_then(|p| self.nodes.get_mut(&p)) {
            Some(prev) => prev.next = node.next,
            None => self.head = node.next,
        }
        match node.next.and_then(|n| self.nodes.get_mut(&n)) {
            Some(next) => next.prev = node.prev,
            None => self.tail = node.prev,
        }
        Some(node.value)
    }

    /// Every entry, in no particular order.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut T> + '_ {
        self.nodes.values_mut().map(|n| &mut n.value)
    }

    /// Ids from head to tail.
    pub fn ids(&self) -> impl Iterator<Item = WaiterId> + '_ {
        std::iter::successors(self.head, move |id| self.nodes.get(id).and_then(|n| n.next))
    }

    /// Entries from head to tail.
    pub fn iter(&self) -> impl Iterator<Item = (WaiterId, &T)> + '_ {
        self.ids()
            .filter_map(move |id| self.nodes.get(&id).map(|n| (id, &n.value)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order<T>(q: &Fifo<T>) -> Vec<WaiterId> {
        q.ids().collect()
    }

    #[test]
    fn pops_in_push_order() {
        let mut q = Fifo::default();
        for id in 1..=5 {
            assert!(q.push_back(id, id * 10));
        }
        assert_eq!(q.len(), 5);
        assert_eq!(q.front(), Some((1, &10)));
        let popped: Vec<_> = std::iter::from_fn(|| q.pop_front()).collect();
        assert_eq!(popped, vec![(1, 10), (2, 20), (3, 30), (4, 40), (5, 50)]);
        assert_eq!(q.iter().count(), 0);
        assert!(q.is_empty());
        assert_eq!(q.front(), None);
    }

    #[test]
    fn removes_head_middle_and_tail() {
        let mut q = Fifo::default();
        for id in 1..=5 {
            q.push_back(id, ());
        }
        assert_eq!(q.remove(3), Some(()));
        assert_eq!(order(&q), vec![1, 2, 4, 5]);
        let entries: Vec<_> = q.iter().map(|(id, _)| id).collect();
        assert_eq!(entries, vec![1, 2, 4, 5]);
        assert_eq!(q.remove(1), Some(()));
        assert_eq!(order(&q), vec![2, 4, 5]);
        assert_eq!(q.remove(5), Some(()));
        assert_eq!(order(&q), vec![2, 4]);
        assert_eq!(q.remove(5), None);
        q.push_back(6, ());
        assert_eq!(order(&q), vec![2, 4, 6]);
        assert_eq!(q.remove(2), Some(()));
        assert_eq!(q.remove(4), Some(()));
        assert_eq!(q.remove(6), Some(()));
        assert!(q.is_empty());
        q.push_back(7, ());
        assert_eq!(order(&q), vec![7]);
        assert_eq!(q.pop_front(), Some((7, ())));
    }

    #[test]
    fn refuses_duplicate_ids() {
        let mut q = Fifo::default();
        assert!(q.push_back(1, "a"));
        assert!(!q.push_back(1, "b"));
        assert_eq!(q.len(), 1);
        assert_eq!(q.get(1), Some(&"a"));
        assert!(q.contains(1));
        assert!(!q.contains(2));
    }
}
