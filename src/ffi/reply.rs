//! Replies to the calling (or unblocked) client: integers, nil, errors, and
//! the maps LOCK.INFO, LOCK.WAITERS and LOCK.QUEUES answer with (RESP3 map,
//! RESP2 flat array).

use super::c_text;
use redis_module::{raw, Context};

/// An error reply; `line` starts with its code (`ERR ...`).
pub fn reply_error(ctx: &Context, line: &str) {
    let line = c_text(line);
    if let Some(f) = api!(RedisModule_ReplyWithError) {
        // SAFETY: ctx is a context that may reply; Redis copies the text.
        unsafe { f(ctx.ctx, line.as_ptr()) };
    }
}

pub fn reply_integer(ctx: &Context, n: i64) {
    if let Some(f) = api!(RedisModule_ReplyWithLongLong) {
        // SAFETY: ctx is a context that may reply.
        unsafe { f(ctx.ctx, n) };
    }
}

/// An array of integers.
pub fn reply_integers(ctx: &Context, values: &[i64]) {
    if let Some(f) = api!(RedisModule_ReplyWithArray) {
        // SAFETY: ctx is a context that may reply; exactly `len` elements follow.
        unsafe { f(ctx.ctx, values.len() as std::ffi::c_long) };
    }
    for n in values {
        reply_integer(ctx, *n);
    }
}

pub fn reply_null(ctx: &Context) {
    if let Some(f) = api!(RedisModule_ReplyWithNull) {
        // SAFETY: ctx is a context that may reply.
        unsafe { f(ctx.ctx) };
    }
}

fn reply_bulk(ctx: &Context, bytes: &[u8]) {
    if let Some(f) = api!(RedisModule_ReplyWithStringBuffer) {
        // SAFETY: ctx may reply; Redis copies `len` bytes from the pointer.
        unsafe { f(ctx.ctx, bytes.as_ptr().cast(), bytes.len()) };
    }
}

pub enum Field<'a> {
    Int(i64),
    Bulk(&'a [u8]),
    Null,
    /// A nested map of names to counts.
    Counts(Vec<(&'a [u8], i64)>),
    /// A nested array of maps.
    Maps(Vec<Vec<(&'a str, Field<'a>)>>),
    /// A nested array of strings.
    Bulks(Vec<&'a [u8]>),
}

/// A map header (RESP3) or the array header of `len` flat pairs (RESP2).
fn reply_map_header(ctx: &Context, len: usize) -> bool {
    let len = len as std::ffi::c_long;
    match (
        api!(RedisModule_ReplyWithMap),
        api!(RedisModule_ReplyWithArray),
    ) {
        // SAFETY: ctx may reply; the map header is followed by exactly
        // `len` key/value pairs.
        (Some(map), _) => unsafe { map(ctx.ctx, len) },
        // SAFETY: as above, as a flat array of twice as many elements.
        (None, Some(array)) => unsafe { array(ctx.ctx, len * 2) },
        (None, None) => return false,
    };
    true
}

/// A map reply (RESP3) or flat array of pairs (RESP2), in the given order.
pub fn reply_map(ctx: &Context, fields: &[(&str, Field)]) {
    if !reply_map_header(ctx, fields.len()) {
        return;
    }
    for (name, value) in fields {
        reply_bulk(ctx, name.as_bytes());
        match value {
            Field::Int(n) => reply_integer(ctx, *n),
            Field::Bulk(b) => reply_bulk(ctx, b),
            Field::Null => reply_null(ctx),
            Field::Maps(maps) => reply_maps(ctx, maps),
            Field::Bulks(items) => match api!(RedisModule_ReplyWithArray) {
                Some(array) => {
                    // SAFETY: ctx may reply; exactly `len` strings follow.
                    unsafe { array(ctx.ctx, items.len() as std::ffi::c_long) };
                    for item in items {
                        reply_bulk(ctx, item);
                    }
                }
                None => reply_null(ctx),
            },
            Field::Counts(counts) => {
                if reply_map_header(ctx, counts.len()) {
                    for (name, n) in counts {
                        reply_bulk(ctx, name);
                        reply_integer(ctx, *n);
                    }
                } else {
                    reply_null(ctx);
                }
            }
        }
    }
}

/// An array of maps (see [`reply_map`]), in the given order.
pub fn reply_maps(ctx: &Context, maps: &[Vec<(&str, Field)>]) {
    let Some(array) = api!(RedisModule_ReplyWithArray) else {
        return;
    };
    // SAFETY: ctx may reply; exactly `len` maps follow.
    unsafe { array(ctx.ctx, maps.len() as std::ffi::c_long) };
    for fields in maps {
        reply_map(ctx, fields);
    }
}
