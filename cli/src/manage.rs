//! `redis-lock status`, `release` and `force-release`: one command per name.

use crate::args::{check_owner, ForceReleaseArgs, ReleaseArgs, StatusArgs};
use crate::commands::{self, Kind};
use crate::conn::{self, Conn};
use crate::exit::{self, Failure};
use crate::reply::{self, Fields};
use crate::status;
use crate::words;

/// Prints to stdout; a closed pipe (`| head`) is not an error worth a panic.
fn out(text: &str) {
    use std::io::Write;
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

pub fn connect(url: &str) -> Result<Conn, Failure> {
    let target = conn::target(url).map_err(Failure::Usage)?;
    Conn::connect(&target).map_err(|e| words::connect_failure(&target, &e))
}

pub fn status(url: &str, args: StatusArgs) -> Result<u8, Failure> {
    let mut conn = connect(url)?;
    let locks = status::fetch(&mut conn, &args.names)?;
    if args.json {
        out(&format!("{}\n", status::json(&locks)));
    } else {
        out(&status::text(&locks));
    }
    Ok(0)
}

/// `1 hold left`, `2 holds left`.
pub fn holds_left(n: i64) -> String {
    format!("{n} {} left", if n == 1 { "hold" } else { "holds" })
}

/// Why `owner` has no hold of the kind asked for on `name`, from the lock's
/// `LOCK.INFO` (`None`: free): `not held by w as a reader: w holds the
/// write lock (use --write)`.
pub fn not_held(owner: &str, kind: Kind, info: Option<&Fields>) -> String {
    let writer = info
        .filter(|i| i.text("mode").as_deref() == Some("write"))
        .and_then(|i| i.text("writer"));
    let reads = info
        .and_then(|i| i.map("readers"))
        .and_then(|r| r.int(owner))
        .unwrap_or(0);
    match kind {
        Kind::Read if writer.as_deref() == Some(owner) => format!(
            "not held by {owner} as a reader: {owner} holds the write lock (release it with --write)"
        ),
        Kind::Write if reads > 0 => format!(
            "not held by {owner} as the writer: {owner} holds {} (release {} with --read)",
            if reads == 1 {
                "a read hold".to_string()
            } else {
                format!("{reads} read holds")
            },
            if reads == 1 { "it" } else { "them" }
        ),
        Kind::Read => format!("not held by {owner} as a reader"),
        Kind::Write => format!("not held by {owner} as the writer"),
        Kind::Exclusive => format!("not held by {owner}"),
    }
}

/// Drops one hold per name; 0 when every name had one, else 1 (and why).
pub fn release(url: &str, args: ReleaseArgs) -> Result<u8, Failure> {
    let Some(owner) = args.owner.clone() else {
        return Err(Failure::Usage(
            "release needs the owner whose hold to drop: --owner ID, or LOCK_OWNER in the \
             environment (redis-lock run gives it to its command)"
                .into(),
        ));
    };
    check_owner(&owner).map_err(Failure::Usage)?;
    let mut conn = connect(url)?;
    let mut code = 0;
    for name in &args.names {
        let cmd = commands::release_one(name, &owner, args.kind());
        match conn.call(&cmd) {
            Ok(v) => {
                let left = reply::int(&v).unwrap_or(0);
                if left == 0 {
                    out(&format!("{name}: released\n"));
                } else {
                    out(&format!("{name}: {}\n", holds_left(left)));
                }
            }
            Err(e) if e.code() == Some("NOTOWNER") => {
                let info = conn
                    .call(&commands::info(name))
                    .ok()
                    .and_then(|v| Fields::parse(&v));
                out(&format!(
                    "{name}: {}\n",
                    not_held(&owner, args.kind(), info.as_ref())
                ));
                code = exit::CONFLICT;
            }
            Err(e) => return Err(words::command_failure(conn.info(), &cmd, &e)),
        }
    }
    Ok(code)
}

/// Removes each lock; 0 when every name had one, else 1.
pub fn force_release(url: &str, args: ForceReleaseArgs) -> Result<u8, Failure> {
    let mut conn = connect(url)?;
    let mut code = 0;
    for name in &args.names {
        let cmd = commands::force_release(name);
        let v = conn
            .call(&cmd)
            .map_err(|e| words::command_failure(conn.info(), &cmd, &e))?;
        if reply::int(&v) == Some(1) {
            out(&format!("{name}: removed\n"));
        } else {
            out(&format!("{name}: was free\n"));
            code = exit::CONFLICT;
        }
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reply::tests::{bulk, flat};
    use redis::Value;

    #[test]
    fn holds_left_in_words() {
        assert_eq!(holds_left(1), "1 hold left");
        assert_eq!(holds_left(2), "2 holds left");
    }

    #[test]
    fn not_held_says_what_is() {
        let write = Fields::parse(&flat(&[("mode", bulk("write")), ("writer", bulk("w"))]));
        assert_eq!(
            not_held("w", Kind::Read, write.as_ref()),
            "not held by w as a reader: w holds the write lock (release it with --write)"
        );
        let read = Fields::parse(&flat(&[
            ("mode", bulk("read")),
            ("readers", flat(&[("r", Value::Int(2))])),
        ]));
        assert_eq!(
            not_held("r", Kind::Write, read.as_ref()),
            "not held by r as the writer: r holds 2 read holds (release them with --read)"
        );
        assert_eq!(not_held("x", Kind::Exclusive, None), "not held by x");
    }
}
