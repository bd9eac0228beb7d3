//! Which lock: a key in a database. Every layer names locks this way: the
//! waiter registry, the KEEPALIVE bindings, the module's deferred work.

use std::borrow::Cow;

/// A lock is a key in a database. Commands borrow the key from their
/// arguments; what is kept (queues, timers, deferred work) owns it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockId<'k> {
    pub db: i32,
    pub key: Cow<'k, [u8]>,
}

impl LockId<'_> {
    pub fn to_owned(&self) -> LockId<'static> {
        LockId {
            db: self.db,
            key: Cow::Owned(self.key.to_vec()),
        }
    }
}
