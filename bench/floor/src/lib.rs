//! The floor of a hand-off through the Redis module API, as a module of its
//! own: `FLOOR.ACQUIRE key timeout-ms` / `FLOOR.RELEASE key`, a token per key
//! kept in module memory (no keyspace writes, no lease, no owner, no
//! replication), a waiter blocked with `RM_BlockClient` and handed the
//! token with `RM_UnblockClient`: block, unblock, nothing else. The bench
//! (lock-bench, S2's `module-floor` row; scripts/profile-floor.py) loads it
//! next to liblock.so, so that every run shows the lock module against what
//! the module API itself allows, beside Redis's own hand-off (`BLPOP`).
//!
//! A measuring stick, not a lock: it must not do more work than a hand-off
//! needs. As with BLPOP's token, a waiter whose connection ends after a
//! release handed it the token but before its reply went out takes the
//! token with it (the key stays held); keys are kept in memory once used.
//!
//! - `FLOOR.ACQUIRE key timeout-ms`: `:1` at once if the token is free;
//!   otherwise the caller waits (FIFO) and is answered `:1` when handed the
//!   token, or nil after `timeout-ms` (0: no timeout). In MULTI or a script,
//!   where a client cannot block, nil at once.
//! - `FLOOR.RELEASE key`: hands the token to the first waiter, or frees
//!   it; `:1`.
//!
//! Every `unsafe` is in [`ffi`]; the rules are here.

#![deny(unsafe_code)]

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};

mod ffi;

use ffi::{Args, BlockedRef, Ctx, Waiter};

/// One key's token and its waiters, first come first.
struct Token {
    held: bool,
    queue: VecDeque<Waiter>,
}

thread_local! {
    /// Every key's token. Redis calls the module on its main thread only.
    static TOKENS: RefCell<HashMap<Vec<u8>, Token>> = RefCell::new(HashMap::new());
}

/// `timeout-ms`: a non-negative integer that fits RM_BlockClient's.
fn timeout_ms(arg: &[u8]) -> Option<i64> {
    std::str::from_utf8(arg)
        .ok()?
        .parse::<i64>()
        .ok()
        .filter(|ms| *ms >= 0)
}

/// `FLOOR.ACQUIRE key timeout-ms`
fn acquire(ctx: &Ctx, args: &Args) {
    let (Some(key), Some(timeout), 3) = (args.get(1), args.get(2), args.len()) else {
        ctx.wrong_arity();
        return;
    };
    let Some(timeout) = timeout_ms(timeout) else {
        ctx.reply_error(c"ERR timeout-ms is not a non-negative integer");
        return;
    };
    // Blocking runs none of this module's callbacks before it returns, so
    // the map stays borrowed across it (one lookup per acquire).
    let outcome = TOKENS.with_borrow_mut(|tokens| {
        let Some(token) = tokens.get_mut(key) else {
            let token = Token {
                held: true,
                queue: VecDeque::new(),
            };
            tokens.insert(key.to_vec(), token);
            return Acquire::Granted;
        };
        if !token.held {
            token.held = true;
            return Acquire::Granted;
        }
        if ctx.deny_blocking() {
            return Acquire::CannotWait;
        }
        match ctx.block(timeout) {
            Some(waiter) => {
                token.queue.push_back(waiter);
                Acquire::Waiting
            }
            None => Acquire::NotBlocked,
        }
    });
    match outcome {
        Acquire::Granted => ctx.reply_int(1),
        // Answered by `granted` or `timed_out`.
        Acquire::Waiting => {}
        Acquire::CannotWait => ctx.reply_null(),
        Acquire::NotBlocked => ctx.reply_error(c"ERR the server did not block the client"),
    }
}

enum Acquire {
    Granted,
    Waiting,
    /// In MULTI or a script: nil at once, as BLPOP answers there.
    CannotWait,
    NotBlocked,
}

/// `FLOOR.RELEASE key`
fn release(ctx: &Ctx, args: &Args) {
    let (Some(key), 2) = (args.get(1), args.len()) else {
        ctx.wrong_arity();
        return;
    };
    let next = TOKENS.with_borrow_mut(|tokens| {
        let token = tokens.get_mut(key)?;
        let next = token.queue.pop_front();
        // Handed on, the token stays held (by the waiter).
        token.held = next.is_some();
        next
    });
    // Out of the queue before it is unblocked: a handle is unblocked once.
    if let Some(waiter) = next {
        waiter.unblock();
    }
    ctx.reply_int(1);
}

/// A waiter handed the token: its reply.
fn granted(ctx: &Ctx) {
    ctx.reply_int(1);
}

/// A waiter's timeout ran out (or CLIENT UNBLOCK ... TIMEOUT): out of its
/// key's queue, answered nil, its handle unblocked (which frees it).
fn timed_out(ctx: &Ctx, args: &Args, bc: BlockedRef) {
    let waiter = args.get(1).and_then(|key| {
        TOKENS.with_borrow_mut(|tokens| {
            let queue = &mut tokens.get_mut(key)?.queue;
            let at = queue.iter().position(|w| w.is(bc))?;
            queue.remove(at)
        })
    });
    ctx.reply_null();
    // Not queued: a release unblocked it already (Redis does not time out
    // such a client, but a handle must never be unblocked twice).
    if let Some(waiter) = waiter {
        waiter.unblock();
    }
}

/// A waiter's connection ended (or CLIENT UNBLOCK ... ERROR): out of its
/// queue (the keys are walked: the callback is not told the key; rare),
/// its handle unblocked. Not queued: a release already handed it the token.
fn disconnected(bc: BlockedRef) {
    let waiter = TOKENS.with_borrow_mut(|tokens| {
        tokens.values_mut().find_map(|token| {
            let at = token.queue.iter().position(|w| w.is(bc))?;
            token.queue.remove(at)
        })
    });
    if let Some(waiter) = waiter {
        waiter.unblock();
    }
}

#[cfg(test)]
mod tests {
    use super::timeout_ms;

    #[test]
    fn timeout_is_a_non_negative_integer() {
        assert_eq!(timeout_ms(b"0"), Some(0));
        assert_eq!(timeout_ms(b"10000"), Some(10_000));
        assert_eq!(timeout_ms(b"-1"), None);
        assert_eq!(timeout_ms(b"1.5"), None);
        assert_eq!(timeout_ms(b""), None);
        assert_eq!(timeout_ms(b"99999999999999999999"), None);
        assert_eq!(timeout_ms(b"\xff"), None);
    }
}
