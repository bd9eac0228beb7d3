//! Registering commands: the dispatcher every command goes through, key
//! positions for 7.0's cluster routing, ACL categories, and the metadata of
//! COMMAND INFO and COMMAND DOCS (summary, arity, key specs, arguments).

use std::ffi::{c_int, CStr, CString};
use std::mem::ManuallyDrop;
use std::ptr::{self};

use super::{log_warning, OK};
use redis_module::{raw, Context, RedisResult, RedisString};

/// A command body: the context and the arguments, name first.
pub type CommandBody = fn(&Context, &[RedisString]) -> RedisResult;

pub trait CommandHandler: 'static {
    const BODY: CommandBody;
}

/// Up to this many arguments are passed without a heap allocation.
const INLINE_ARGS: usize = 8;

/// Views Redis's argument strings as `RedisString`s without retaining them
/// (the crate's own wrapper retains, frees and collects every argument).
/// `ManuallyDrop` keeps them from being freed: Redis owns them.
extern "C" fn on_command<H: CommandHandler>(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
) -> c_int {
    let context = Context::new(ctx);
    let argc = usize::try_from(argc).unwrap_or(0);
    let raw_args: &[*mut raw::RedisModuleString] = if argv.is_null() {
        &[]
    } else {
        // SAFETY: Redis passes `argc` argument strings that live for the
        // whole call.
        unsafe { std::slice::from_raw_parts(argv, argc) }
    };
    let view = |s: *mut raw::RedisModuleString| {
        ManuallyDrop::new(RedisString::from_redis_module_string(ctx, s))
    };
    let reply = if raw_args.len() <= INLINE_ARGS {
        let args: [ManuallyDrop<RedisString>; INLINE_ARGS] =
            std::array::from_fn(|i| view(raw_args.get(i).copied().unwrap_or(ptr::null_mut())));
        H::BODY(&context, as_strings(&args[..raw_args.len()]))
    } else {
        let args: Vec<ManuallyDrop<RedisString>> = raw_args.iter().map(|s| view(*s)).collect();
        H::BODY(&context, as_strings(&args))
    };
    context.reply(reply) as c_int
}

/// Whether Redis calls a `getkeys-api` command only to learn its keys
/// (cluster routing on 7.0 asks this way; key specs serve the rest).
pub fn is_keys_position_request(ctx: &Context) -> bool {
    // SAFETY: ctx is the live context of the command call.
    api!(RedisModule_IsKeysPositionRequest).is_some_and(|f| unsafe { f(ctx.ctx) } != 0)
}

/// Reports argument `pos` as a key, in a keys position request.
pub fn key_at_pos(ctx: &Context, pos: usize) {
    if let (Some(f), Ok(pos)) = (api!(RedisModule_KeyAtPos), c_int::try_from(pos)) {
        // SAFETY: ctx is the live context of a keys position request.
        unsafe { f(ctx.ctx, pos) };
    }
}

fn as_strings(args: &[ManuallyDrop<RedisString>]) -> &[RedisString] {
    // SAFETY: ManuallyDrop<T> is repr(transparent) over T, so the slices
    // have the same layout; the borrow keeps `args` alive.
    unsafe { std::slice::from_raw_parts(args.as_ptr().cast::<RedisString>(), args.len()) }
}

/// Adds the ACL category `name` (RM_AddACLCategory: Redis 7.4+, Valkey 8+,
/// during OnLoad only). False where the server has no such call or refuses.
pub fn add_acl_category(ctx: &Context, name: &CStr) -> bool {
    // SAFETY: OnLoad context; the name is NUL-terminated and copied.
    api!(RedisModule_AddACLCategory).is_some_and(|f| unsafe { f(ctx.ctx, name.as_ptr()) } == OK)
}

/// Everything the server is told about a command: how to register it, its
/// ACL categories, and what COMMAND INFO and COMMAND DOCS show.
pub struct CommandSpec {
    pub name: &'static CStr,
    /// RM_CreateCommand's flags (`write deny-oom blocking`...).
    pub flags: &'static CStr,
    /// Space-separated ACL categories (Redis 7.2+, Valkey).
    pub acl_categories: &'static str,
    pub summary: &'static CStr,
    pub complexity: &'static CStr,
    pub since: &'static CStr,
    pub arity: c_int,
    /// Key spec flags of the key at argv[1], or of the keys after numkeys.
    pub key_flags: u64,
    pub keys: KeyArgs,
    pub args: &'static [ArgDoc],
}

/// Where a command's keys are.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum KeyArgs {
    /// One key, at argv[1].
    One,
    /// `numkeys key [key ...]` from argv[1] (declared with a key spec, and
    /// to 7.0's cluster routing through `getkeys-api`, since the legacy
    /// first/last/step cannot say it).
    NumKeys,
    /// None: the command runs on whichever node it is sent to.
    None,
}

impl CommandSpec {
    /// The name as text, for error replies.
    pub fn name(&self) -> &'static str {
        self.name.to_str().unwrap_or("lock")
    }
}

#[derive(Clone, Copy)]
pub enum ArgKind {
    /// The lock's key (key spec 0).
    Key,
    String,
    Integer,
    /// A bare keyword such as `FENCE`.
    Flag,
    /// Exactly one of the sub-arguments.
    OneOf,
}

pub struct ArgDoc {
    pub name: &'static CStr,
    pub kind: ArgKind,
    pub token: Option<&'static CStr>,
    pub optional: bool,
    /// May be repeated (`key [key ...]`).
    pub multiple: bool,
    pub subargs: &'static [ArgDoc],
}

/// Lays out `args` (and their sub-arguments) as the zero-terminated C
/// arrays Redis reads; `arrays` keeps every level alive until the call.
fn c_args(
    args: &[ArgDoc],
    arrays: &mut Vec<Vec<raw::RedisModuleCommandArg>>,
) -> *mut raw::RedisModuleCommandArg {
    if args.is_empty() {
        return ptr::null_mut();
    }
    let mut out = Vec::with_capacity(args.len() + 1);
    for arg in args {
        // SAFETY: all-zero is a valid empty RedisModuleCommandArg.
        let mut c: raw::RedisModuleCommandArg = unsafe { std::mem::zeroed() };
        c.name = arg.name.as_ptr();
        c.type_ = match arg.kind {
            ArgKind::Key => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY,
            ArgKind::String => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
            ArgKind::Integer => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
            ArgKind::Flag => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN,
            ArgKind::OneOf => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_ONEOF,
        };
        c.key_spec_index = if matches!(arg.kind, ArgKind::Key) {
            0
        } else {
            -1
        };
        c.token = arg.token.map_or(ptr::null(), CStr::as_ptr);
        c.flags = if arg.optional {
            raw::REDISMODULE_CMD_ARG_OPTIONAL as c_int
        } else {
            raw::REDISMODULE_CMD_ARG_NONE as c_int
        };
        if arg.multiple {
            c.flags |= raw::REDISMODULE_CMD_ARG_MULTIPLE as c_int;
        }
        c.subargs = c_args(arg.subargs, arrays);
        out.push(c);
    }
    // SAFETY: the zeroed entry terminates the array.
    out.push(unsafe { std::mem::zeroed() });
    let p = out.as_mut_ptr();
    // Moving the Vec into `arrays` keeps its heap buffer (and `p`) valid.
    arrays.push(out);
    p
}

pub const KEY_RW_UPDATE: u64 = (raw::REDISMODULE_CMD_KEY_RW
    | raw::REDISMODULE_CMD_KEY_ACCESS
    | raw::REDISMODULE_CMD_KEY_UPDATE) as u64;
pub const KEY_RW_DELETE: u64 =
    (raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_DELETE) as u64;
pub const KEY_RO_ACCESS: u64 =
    (raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS) as u64;

/// Registers the command `spec` describes, served by `H`
/// (RM_CreateCommand), then its ACL categories with `more_categories`
/// added, on servers that have them (Redis 7.2+, Valkey), and its docs.
pub fn register_command<H: CommandHandler>(
    ctx: &Context,
    spec: &CommandSpec,
    more_categories: &str,
) -> bool {
    let Some(create) = api!(RedisModule_CreateCommand) else {
        return false;
    };
    let keys: c_int = if spec.keys == KeyArgs::One { 1 } else { 0 };
    // SAFETY: OnLoad context; name and flags are NUL-terminated and copied
    // by Redis; the handler is monomorphised for H.
    let created = unsafe {
        create(
            ctx.ctx,
            spec.name.as_ptr(),
            Some(on_command::<H>),
            spec.flags.as_ptr(),
            keys,
            keys,
            keys,
        )
    } == OK;
    if !created {
        return false;
    }
    if let (Some(get), Some(set_categories)) = (
        api!(RedisModule_GetCommand),
        api!(RedisModule_SetCommandACLCategories),
    ) {
        let categories = format!("{}{more_categories}", spec.acl_categories);
        let categories = CString::new(categories).unwrap_or_default();
        // SAFETY: the command was just created; categories are copied.
        let set = unsafe {
            let command = get(ctx.ctx, spec.name.as_ptr());
            !command.is_null() && set_categories(command, categories.as_ptr()) == OK
        };
        if !set {
            log_warning(ctx, &format!("lock: no ACL categories for {}", spec.name()));
        }
    }
    set_command_doc(ctx, spec)
}

/// Registers summary, arity and key spec of an already created command.
/// Redis copies everything it is given, so nothing needs to outlive this.
fn set_command_doc(ctx: &Context, doc: &CommandSpec) -> bool {
    let (Some(get), Some(set)) = (
        api!(RedisModule_GetCommand),
        api!(RedisModule_SetCommandInfo),
    ) else {
        // Older than 7.0: commands still work, only COMMAND DOCS is poorer.
        return true;
    };
    // SAFETY: OnLoad context and a NUL-terminated name.
    let cmd = unsafe { get(ctx.ctx, doc.name.as_ptr()) };
    if cmd.is_null() {
        return false;
    }
    // SAFETY: all-zero is the documented "empty / terminator" value of these
    // plain C structs.
    let mut specs: [raw::RedisModuleCommandKeySpec; 2] = unsafe { std::mem::zeroed() };
    if doc.keys != KeyArgs::None {
        specs[0].flags = doc.key_flags;
        specs[0].begin_search_type =
            raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX;
        specs[0].bs.index.pos = 1;
    }
    if doc.keys == KeyArgs::NumKeys {
        // argv[1] is the key count, the keys follow it one by one.
        specs[0].find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_KEYNUM;
        specs[0].fk.keynum = raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_2 {
            keynumidx: 0,
            firstkey: 1,
            keystep: 1,
        };
    } else if doc.keys == KeyArgs::One {
        specs[0].find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE;
        specs[0].fk.range = raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_1 {
            lastkey: 0,
            keystep: 1,
            limit: 0,
        };
    }
    let version = raw::RedisModuleCommandInfoVersion {
        version: 1,
        sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
        sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
        sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
    };
    let mut arrays = Vec::new();
    let args = c_args(doc.args, &mut arrays);
    let info = raw::RedisModuleCommandInfo {
        version: &version,
        summary: doc.summary.as_ptr(),
        complexity: doc.complexity.as_ptr(),
        since: doc.since.as_ptr(),
        history: ptr::null_mut(),
        tips: ptr::null(),
        arity: doc.arity,
        key_specs: specs.as_mut_ptr(),
        args,
    };
    // SAFETY: `info` and everything it points to live until the call
    // returns, and Redis copies what it keeps.
    unsafe { set(cmd, &info) == OK }
}
