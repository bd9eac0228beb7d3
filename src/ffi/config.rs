//! The module's settings as the server sees them (`CONFIG GET/SET lock.*`):
//! registering an integer or a yes/no setting backed by an atomic the module
//! reads, and applying what `redis.conf` or `MODULE LOADEX ... CONFIG` gave
//! for them. Which settings exist is `config.rs`'s table.

use std::ffi::{c_char, c_int, c_longlong, c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering::Relaxed};

use super::OK;
use redis_module::{raw, Context};

extern "C" fn get_i64(_name: *const c_char, cell: *mut c_void) -> c_longlong {
    // SAFETY: `cell` is the `&'static AtomicI64` given at registration.
    let cell = unsafe { &*cell.cast::<AtomicI64>() };
    cell.load(Relaxed)
}

extern "C" fn set_i64(
    _name: *const c_char,
    value: c_longlong,
    cell: *mut c_void,
    _err: *mut *mut raw::RedisModuleString,
) -> c_int {
    // SAFETY: as in `get_i64`. The server has checked the range.
    let cell = unsafe { &*cell.cast::<AtomicI64>() };
    cell.store(value, Relaxed);
    OK
}

extern "C" fn get_bool(_name: *const c_char, cell: *mut c_void) -> c_int {
    // SAFETY: `cell` is the `&'static AtomicBool` given at registration.
    let cell = unsafe { &*cell.cast::<AtomicBool>() };
    c_int::from(cell.load(Relaxed))
}

extern "C" fn set_bool(
    _name: *const c_char,
    value: c_int,
    cell: *mut c_void,
    _err: *mut *mut raw::RedisModuleString,
) -> c_int {
    // SAFETY: as in `get_bool`.
    let cell = unsafe { &*cell.cast::<AtomicBool>() };
    cell.store(value != 0, Relaxed);
    OK
}

/// Registers the integer setting `lock.<name>`, `min` to `max`, starting at
/// `default` (written to `cell` too); CONFIG SET refuses values out of range.
pub fn register_i64_config(
    ctx: &Context,
    name: &CStr,
    cell: &'static AtomicI64,
    default: i64,
    min: i64,
    max: i64,
) -> bool {
    let Some(register) = api!(RedisModule_RegisterNumericConfig) else {
        return false;
    };
    cell.store(default, Relaxed);
    let cell: *const AtomicI64 = cell;
    // SAFETY: OnLoad context; the server copies the name; `cell` is 'static
    // and only read and written through atomics.
    unsafe {
        register(
            ctx.ctx,
            name.as_ptr(),
            default,
            raw::REDISMODULE_CONFIG_DEFAULT,
            min,
            max,
            Some(get_i64),
            Some(set_i64),
            None,
            cell.cast_mut().cast(),
        ) == OK
    }
}

/// Registers the yes/no setting `lock.<name>`, starting at `default`.
pub fn register_bool_config(
    ctx: &Context,
    name: &CStr,
    cell: &'static AtomicBool,
    default: bool,
) -> bool {
    let Some(register) = api!(RedisModule_RegisterBoolConfig) else {
        return false;
    };
    cell.store(default, Relaxed);
    let cell: *const AtomicBool = cell;
    // SAFETY: as in `register_i64_config`.
    unsafe {
        register(
            ctx.ctx,
            name.as_ptr(),
            c_int::from(default),
            raw::REDISMODULE_CONFIG_DEFAULT,
            Some(get_bool),
            Some(set_bool),
            None,
            cell.cast_mut().cast(),
        ) == OK
    }
}

/// Applies the values `redis.conf` (`lock.<name> value` lines) or
/// `MODULE LOADEX ... CONFIG` gave; false if the server refused one (it
/// logs which).
pub fn load_configs(ctx: &Context) -> bool {
    // SAFETY: OnLoad context, after every setting is registered.
    api!(RedisModule_LoadConfigs).is_none_or(|f| unsafe { f(ctx.ctx) } == OK)
}
