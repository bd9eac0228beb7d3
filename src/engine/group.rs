//! A multi-lock caller (LOCK.MACQUIRE with BLOCK) served once it is first
//! in line on every key it named: all its keys in one step, if each is free
//! or already its own (the rules' all-or-none decision, as the command's),
//! or an error if it can never have them. Looked at after each commit of a
//! lock whose queue has such a caller at its head.
//!
//! Offers: [`serve_group_at`].

use redis_module::{Context, RedisString};

use super::{lock_transition as lock, Origin};
use crate::deferred;
use crate::ffi;
use crate::placement::Placement;
use crate::stats;
use crate::waiters::{anyone_waits, registry, BlockedReply, Grant, GroupId};
use lock_rules::error::LockError;
use lock_rules::lock_id::LockId;
use lock_rules::multilock::{take_all, AllOrNone};
use lock_rules::request::Request;

/// For a lock with a multi-lock caller first in line (left free, or handed
/// to that caller's own owner): it may now have all its keys.
pub fn serve_group_at(ctx: &Context, lock: &LockId<'_>) {
    if let Some(group) = group_at_head(lock) {
        serve_group(ctx, group);
    }
}

fn group_at_head(lock: &LockId<'_>) -> Option<GroupId> {
    if !anyone_waits() {
        return None;
    }
    registry().ok()?.group_at_head(lock)
}

/// Grants a multi-lock caller all its keys, in one step, if it is first in
/// line on each and each is free or already its own (the rules' all-or-none
/// decision, as LOCK.MACQUIRE's); otherwise leaves it waiting, or answers
/// it the error if it can never have them.
fn serve_group(ctx: &Context, group: GroupId) {
    let Some((request, entries)) = registry().ok().and_then(|r| r.group(group)) else {
        return;
    };
    let placement = Placement::read(ctx);
    if entries.iter().any(|(lock, _)| !placement.serves(&lock.key)) {
        return fail_group(ctx, group, LockError::slot_not_served());
    }
    let names: Vec<RedisString> = entries
        .iter()
        .map(|(lock, _)| ffi::string(ctx, &lock.key))
        .collect();
    let mut opened = Vec::with_capacity(entries.len());
    let mut first_in_line = Vec::with_capacity(entries.len());
    for ((lock, first), name) in entries.iter().zip(&names) {
        match lock::begin(ctx, name, lock, Origin::Event) {
            Ok((key, tx)) => {
                opened.push((lock, key, tx));
                first_in_line.push(*first);
            }
            // Another type now: waiting on would never end.
            Err(e) => return fail_group(ctx, group, e),
        }
    }
    let held: Vec<bool> = opened
        .iter()
        .map(|(_, _, tx)| tx.state().held_by(&request.owner))
        .collect();
    let taken = take_all(
        opened.iter_mut().map(|(_, _, tx)| tx).zip(first_in_line),
        &request,
    );
    let replies = match taken {
        AllOrNone::Taken(replies) => replies,
        // Nothing was taken: the transitions are dropped unwritten.
        AllOrNone::Busy => return,
        AllOrNone::Refused(e) => return fail_group(ctx, group, e),
    };
    let Some((waiter, released)) = registry().ok().and_then(|mut r| r.take_group(group)) else {
        return;
    };
    deferred::after_queue_change(ctx, released);
    stats::record_wait(waiter.queued_at.elapsed());
    let mut grants = Vec::with_capacity(opened.len());
    for ((lock, key, mut tx), held) in opened.into_iter().zip(held) {
        tx.tally.handed_off += 1;
        grants.push(grant_of(lock, &request, held));
        lock::commit_only(ctx, lock, &key, tx);
    }
    ffi::unblock(waiter.bc, Some(BlockedReply::GrantedAll(grants, replies)));
    // The next caller in line on these keys may be a multi-lock caller of
    // the same owner.
    for (lock, _) in &entries {
        serve_group_at(ctx, lock);
    }
}

pub(super) fn grant_of(lock: &LockId<'_>, request: &Request, reentry: bool) -> Grant {
    Grant {
        lock: lock.to_owned(),
        side: request.kind.side(),
        permits: request.kind.permits(),
        owner: request.owner.clone(),
        lease_ms: request.lease_ms,
        keepalive: request.keepalive.clone(),
        reentry,
    }
}

/// Answers a multi-lock caller with an error and takes it out of every
/// queue.
fn fail_group(ctx: &Context, group: GroupId, error: LockError) {
    let Some((waiter, released)) = registry().ok().and_then(|mut r| r.remove(group)) else {
        return;
    };
    deferred::after_queue_change(ctx, released);
    ffi::unblock(waiter.bc, Some(BlockedReply::Failed(error.to_string())));
}
