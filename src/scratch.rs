//! A byte buffer reused from one call to the next for the names built on a
//! lock's fast path (a fair queue's key, an unlock channel, a semaphore's
//! permit set): writing into it allocates only when a name is longer than
//! any before. Nested use (a name built while another is in use) gets a
//! fresh buffer.

use std::cell::RefCell;

thread_local! {
    static BUFFER: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Runs `use_name` on the bytes `write` puts into the buffer (cleared
/// first by `write`'s contract: every `write_*` name builder of the rules
/// clears it).
pub fn with_name<R>(write: impl FnOnce(&mut Vec<u8>), use_name: impl FnOnce(&[u8]) -> R) -> R {
    BUFFER.with(|buffer| match buffer.try_borrow_mut() {
        Ok(mut bytes) => {
            write(&mut bytes);
            use_name(&bytes)
        }
        Err(_) => {
            let mut bytes = Vec::new();
            write(&mut bytes);
            use_name(&bytes)
        }
    })
}
