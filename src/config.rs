//! The module's settings: one table, [`SETTINGS`], from which each is
//! registered with the server (`CONFIG GET/SET lock.<name>`, which checks
//! the range), read from the load arguments (`--loadmodule liblock.so
//! default-lease-ms 5000`, checked here as CONFIG SET checks a value, and
//! refused with the reason in the server log), and listed in
//! docs/commands.md (a unit test holds that table to this one).
//!
//! Offers: [`SETTINGS`], [`register`], and one reader per setting.

use std::ffi::CStr;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering::Relaxed};

use lock_rules::args::{parse_i64, MAX_DURATION_MS};
use lock_rules::error::printable;
use redis_module::Context;

use crate::ffi;

/// One setting of the module.
pub struct Setting {
    /// Its name without the `lock.` prefix the server adds.
    pub name: &'static CStr,
    pub kind: Kind,
}

/// What a setting holds, where the module reads it, and what it may be.
pub enum Kind {
    Integer {
        cell: &'static AtomicI64,
        default: i64,
        min: i64,
        max: i64,
    },
    YesNo {
        cell: &'static AtomicBool,
        default: bool,
    },
}

const DEFAULT_LEASE: i64 = 30_000;
const DEFAULT_DEAD_PEER_MS: i64 = 10_000;
const DEFAULT_TOKEN_TTL_MS: i64 = 3_600_000;

static DEFAULT_LEASE_MS: AtomicI64 = AtomicI64::new(DEFAULT_LEASE);
static REDISSON_NOTIFY: AtomicBool = AtomicBool::new(true);
static KEEPALIVE_DEAD_PEER_MS: AtomicI64 = AtomicI64::new(DEFAULT_DEAD_PEER_MS);
static KEEPALIVE_MAX_HOLD_MS: AtomicI64 = AtomicI64::new(0);
static TOKEN_TTL_MS: AtomicI64 = AtomicI64::new(DEFAULT_TOKEN_TTL_MS);
static DEADLOCK_CHECK_MS: AtomicI64 = AtomicI64::new(0);

/// The longest `lock.deadlock-check-ms`: every wait queued within it is
/// remembered until its check is due, so the list holds the waits of a
/// minute at most.
pub const MAX_DEADLOCK_CHECK_MS: i64 = 60_000;

/// Every setting, in the order of the docs.
pub static SETTINGS: [Setting; 6] = [
    // The lease of an acquire (or renewal) without PX/EX.
    Setting {
        name: c"default-lease-ms",
        kind: Kind::Integer {
            cell: &DEFAULT_LEASE_MS,
            default: DEFAULT_LEASE,
            min: 1,
            max: MAX_DURATION_MS,
        },
    },
    // Publish `0` on `redisson_lock__channel:{key}` when a lock is
    // released, so Redisson clients waiting on it wake up.
    Setting {
        name: c"redisson-notify",
        kind: Kind::YesNo {
            cell: &REDISSON_NOTIFY,
            default: true,
        },
    },
    // The connection of a KEEPALIVE holder whose host stops answering (a
    // crash, a network cut) is closed by the kernel within about this long
    // (TCP keepalive probes and TCP_USER_TIMEOUT on that connection), which
    // ends the renewals. At least a second: below that the kernel would cut
    // connections that are only slow.
    Setting {
        name: c"keepalive-dead-peer-ms",
        kind: Kind::Integer {
            cell: &KEEPALIVE_DEAD_PEER_MS,
            default: DEFAULT_DEAD_PEER_MS,
            min: 1000,
            max: 86_400_000,
        },
    },
    // Renewals of a KEEPALIVE hold stop this long after it was first bound
    // (0: never), so that a holder alive at the TCP level but stuck
    // (stopped, deadlocked) loses the lock after all.
    Setting {
        name: c"keepalive-max-hold-ms",
        kind: Kind::Integer {
            cell: &KEEPALIVE_MAX_HOLD_MS,
            default: 0,
            min: 0,
            max: MAX_DURATION_MS,
        },
    },
    // How long a fencing token key is kept after the latest token (and at
    // least until the lease it fenced ends). Tokens start from the clock
    // once it is gone, so this only bounds how far back a server's clock
    // may step without a token going back.
    Setting {
        name: c"token-ttl-ms",
        kind: Kind::Integer {
            cell: &TOKEN_TTL_MS,
            default: DEFAULT_TOKEN_TTL_MS,
            min: 1,
            max: MAX_DURATION_MS,
        },
    },
    // When a wait is checked against the waits-for graph: 0, before it is
    // queued; N, once it has lasted N ms (PostgreSQL's deadlock_timeout);
    // -1, never (a cycle waits until a BLOCK time or a lease ends it). A
    // wait that would close a cycle is answered DEADLOCK.
    Setting {
        name: c"deadlock-check-ms",
        kind: Kind::Integer {
            cell: &DEADLOCK_CHECK_MS,
            default: 0,
            min: -1,
            max: MAX_DEADLOCK_CHECK_MS,
        },
    },
];

pub fn default_lease_ms() -> i64 {
    DEFAULT_LEASE_MS.load(Relaxed)
}

pub fn redisson_notify() -> bool {
    REDISSON_NOTIFY.load(Relaxed)
}

pub fn keepalive_dead_peer_ms() -> i64 {
    KEEPALIVE_DEAD_PEER_MS.load(Relaxed)
}

pub fn keepalive_max_hold_ms() -> i64 {
    KEEPALIVE_MAX_HOLD_MS.load(Relaxed)
}

pub fn token_ttl_ms() -> i64 {
    TOKEN_TTL_MS.load(Relaxed)
}

pub fn deadlock_check_ms() -> i64 {
    DEADLOCK_CHECK_MS.load(Relaxed)
}

impl Setting {
    pub fn name(&self) -> &'static str {
        self.name.to_str().unwrap_or_default()
    }

    /// Whether `arg` names this setting: its name or `lock.` and its name,
    /// in any case (as the server matches config names).
    fn is_named(&self, arg: &[u8]) -> bool {
        let name = self.name.to_bytes();
        let arg = match arg.get(..5) {
            Some(prefix) if prefix.eq_ignore_ascii_case(b"lock.") => &arg[5..],
            _ => arg,
        };
        arg.eq_ignore_ascii_case(name)
    }

    /// The values it accepts, as the docs write them.
    pub fn range(&self) -> String {
        match self.kind {
            Kind::Integer { min, max, .. } => format!("{} to {}", number(min), number(max)),
            Kind::YesNo { .. } => "yes or no".to_string(),
        }
    }

    /// Its default, as the docs write it.
    #[cfg(test)]
    fn default_text(&self) -> String {
        match self.kind {
            Kind::Integer { default, .. } => number(default),
            Kind::YesNo { default, .. } => yes_no(default).to_string(),
        }
    }

    /// `raw`, given at load, as this setting's value.
    fn parse(&self, raw: &[u8]) -> Result<Value, String> {
        let name = self.name();
        match self.kind {
            Kind::Integer { min, max, .. } => {
                let value = parse_i64(raw).ok_or_else(|| {
                    format!(
                        "load argument {name} '{}' is not an integer ({})",
                        printable(raw),
                        self.range()
                    )
                })?;
                if !(min..=max).contains(&value) {
                    return Err(format!(
                        "load argument {name} {value} is out of range ({})",
                        self.range()
                    ));
                }
                Ok(Value::Integer(value))
            }
            Kind::YesNo { .. } if raw.eq_ignore_ascii_case(b"yes") => Ok(Value::YesNo(true)),
            Kind::YesNo { .. } if raw.eq_ignore_ascii_case(b"no") => Ok(Value::YesNo(false)),
            Kind::YesNo { .. } => Err(format!(
                "load argument {name} '{}' must be yes or no",
                printable(raw)
            )),
        }
    }
}

#[cfg(test)]
fn yes_no(value: bool) -> &'static str {
    if value {
        "yes"
    } else {
        "no"
    }
}

/// An integer as the docs write it: 2^53-1 for the largest duration.
fn number(n: i64) -> String {
    if n == MAX_DURATION_MS {
        "2^53-1".to_string()
    } else {
        n.to_string()
    }
}

/// A setting's value given at load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Value {
    Integer(i64),
    YesNo(bool),
}

/// The load arguments, `name value` pairs, as a value for some of
/// [`SETTINGS`] (by index); or why the module must not load: an unknown
/// name, a name without a value or given twice, a value CONFIG SET would
/// refuse.
fn parse_load_args<A: AsRef<[u8]>>(args: &[A]) -> Result<Vec<(usize, Value)>, String> {
    let mut values: Vec<(usize, Value)> = Vec::new();
    let mut args = args.iter().map(AsRef::as_ref);
    while let Some(name) = args.next() {
        let Some(index) = SETTINGS.iter().position(|s| s.is_named(name)) else {
            return Err(unknown_argument(name));
        };
        let setting = &SETTINGS[index];
        let Some(raw) = args.next() else {
            return Err(format!(
                "load argument {} has no value: give it as {} <{}>",
                printable(name),
                setting.name(),
                setting.range()
            ));
        };
        if values.iter().any(|(i, _)| *i == index) {
            return Err(format!("load argument {} is given twice", setting.name()));
        }
        values.push((index, setting.parse(raw)?));
    }
    Ok(values)
}

fn unknown_argument(name: &[u8]) -> String {
    let mut known = String::new();
    for (i, s) in SETTINGS.iter().enumerate() {
        let sep = match i {
            0 => "",
            i if i + 1 == SETTINGS.len() => " and ",
            _ => ", ",
        };
        let _ = write!(known, "{sep}{}", s.name());
    }
    format!(
        "unknown load argument '{}': the settings are {known} (each also as lock.<name>, \
         in any case), each followed by its value",
        printable(name)
    )
}

/// Registers every setting, starting from its value among the load
/// arguments or else its default, then applies what `redis.conf` or
/// `MODULE LOADEX ... CONFIG` gave. `Err` says why the module must not
/// load.
pub fn register<A: AsRef<[u8]>>(ctx: &Context, args: &[A]) -> Result<(), String> {
    let given = parse_load_args(args)?;
    for (index, setting) in SETTINGS.iter().enumerate() {
        let given = given.iter().find(|(i, _)| *i == index).map(|(_, v)| *v);
        let registered = match (&setting.kind, given) {
            (
                &Kind::Integer {
                    cell,
                    default,
                    min,
                    max,
                },
                given,
            ) => {
                let start = match given {
                    Some(Value::Integer(v)) => v,
                    _ => default,
                };
                ffi::register_i64_config(ctx, setting.name, cell, start, min, max)
            }
            (&Kind::YesNo { cell, default }, given) => {
                let start = match given {
                    Some(Value::YesNo(v)) => v,
                    _ => default,
                };
                ffi::register_bool_config(ctx, setting.name, cell, start)
            }
        };
        if !registered {
            return Err(format!("could not register lock.{}", setting.name()));
        }
    }
    if !ffi::load_configs(ctx) {
        return Err("a lock.* setting of the configuration was refused (see above)".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Vec<(usize, Value)>, String> {
        parse_load_args(args)
    }

    fn index(name: &str) -> usize {
        SETTINGS
            .iter()
            .position(|s| s.name() == name)
            .unwrap_or(usize::MAX)
    }

    #[test]
    fn load_arguments_take_either_name_in_any_case() {
        assert_eq!(parse(&[]), Ok(vec![]));
        for name in [
            "default-lease-ms",
            "DEFAULT-LEASE-MS",
            "lock.default-lease-ms",
            "LOCK.Default-Lease-Ms",
        ] {
            assert_eq!(
                parse(&[name, "7000"]),
                Ok(vec![(index("default-lease-ms"), Value::Integer(7000))]),
                "{name}"
            );
        }
        assert_eq!(
            parse(&["redisson-notify", "NO", "token-ttl-ms", "5"]),
            Ok(vec![
                (index("redisson-notify"), Value::YesNo(false)),
                (index("token-ttl-ms"), Value::Integer(5)),
            ])
        );
        assert_eq!(
            parse(&["lock.redisson-notify", "Yes"]),
            Ok(vec![(index("redisson-notify"), Value::YesNo(true))])
        );
    }

    #[test]
    fn load_arguments_are_refused_with_the_reason() {
        let unknown = parse(&["bogus-option", "1"]).unwrap_err();
        assert!(
            unknown.starts_with("unknown load argument 'bogus-option'"),
            "{unknown}"
        );
        for s in &SETTINGS {
            assert!(unknown.contains(s.name()), "{unknown}");
        }
        for name in ["default_lease_ms", "lock.", "lock.lock.token-ttl-ms", ""] {
            let e = parse(&[name, "1"]).unwrap_err();
            assert_eq!(e, unknown_argument(name.as_bytes()));
            assert!(
                e.starts_with(&format!("unknown load argument '{name}':")),
                "{e}"
            );
        }
        for (args, want) in [
            (
                &["default-lease-ms"][..],
                "load argument default-lease-ms has no value: give it as default-lease-ms <1 to 2^53-1>",
            ),
            (
                &["token-ttl-ms", "5", "LOCK.TOKEN-TTL-MS", "6"],
                "load argument token-ttl-ms is given twice",
            ),
            (
                &["default-lease-ms", "abc"],
                "load argument default-lease-ms 'abc' is not an integer (1 to 2^53-1)",
            ),
            (
                &["default-lease-ms", "1.5"],
                "load argument default-lease-ms '1.5' is not an integer (1 to 2^53-1)",
            ),
            (
                &["keepalive-dead-peer-ms", "5"],
                "load argument keepalive-dead-peer-ms 5 is out of range (1000 to 86400000)",
            ),
            (
                &["default-lease-ms", "0"],
                "load argument default-lease-ms 0 is out of range (1 to 2^53-1)",
            ),
            (
                &["redisson-notify", "maybe"],
                "load argument redisson-notify 'maybe' must be yes or no",
            ),
            (
                &["redisson-notify", "1"],
                "load argument redisson-notify '1' must be yes or no",
            ),
        ] {
            assert_eq!(parse(args), Err(want.to_string()), "{args:?}");
        }
        // Bytes that are not text are quoted escaped.
        let raw: Vec<&[u8]> = vec![b"\xff\n", b"1"];
        assert_eq!(
            parse_load_args(&raw).unwrap_err().split(':').next(),
            Some("unknown load argument '\\xff\\x0a'")
        );
    }

    #[test]
    fn defaults_are_in_range_and_start_the_cells() {
        for s in &SETTINGS {
            if let Kind::Integer {
                cell,
                default,
                min,
                max,
            } = s.kind
            {
                assert!((min..=max).contains(&default), "{}", s.name());
                assert_eq!(cell.load(Relaxed), default, "{}", s.name());
            }
            if let Kind::YesNo { cell, default } = s.kind {
                assert_eq!(cell.load(Relaxed), default, "{}", s.name());
            }
        }
    }

    /// docs/commands.md's configuration table: a row per setting with its
    /// name, default and range, as the table here has them, and no other.
    #[test]
    fn the_docs_list_every_setting_as_the_table_has_it() {
        let docs = include_str!("../docs/commands.md");
        for s in &SETTINGS {
            let row = format!(
                "| `lock.{}` | {} | {} |",
                s.name(),
                match s.kind {
                    Kind::YesNo { .. } => format!("`{}`", s.default_text()),
                    Kind::Integer { .. } => s.default_text(),
                },
                s.range()
            );
            assert!(docs.contains(&row), "docs/commands.md has no row {row}");
        }
        let documented = docs.lines().filter(|l| l.starts_with("| `lock.")).count();
        assert_eq!(
            documented,
            SETTINGS.len(),
            "docs/commands.md lists other settings"
        );
    }
}
