//! Taking the module's mutexes. Every callback runs under `ffi::guard`, so
//! a panic is caught and may leave a mutex poisoned; the data behind each
//! one is changed in steps that complete before anything can panic, so a
//! poisoned mutex is taken as it is, never a second panic.
//!
//! Offers: [`lock`], [`try_lock`].

use std::sync::{Mutex, MutexGuard, TryLockError};

/// Takes `m`, waiting for it (the main thread and the lease alarm thread
/// hold each mutex only briefly).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Takes `m` if nobody holds it: for INFO, which also runs in crash
/// reports and must not block, and for the registry, which must not
/// deadlock if it is ever asked for again further up the same call stack.
pub fn try_lock<T>(m: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(guard) => Some(guard),
        Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}
