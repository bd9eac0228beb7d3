//! `redis-lock status`, `release` and `force-release`: one command per name.

use crate::args::{check_owner, ForceReleaseArgs, ReleaseArgs, StatusArgs};
use crate::commands;
use crate::conn::{self, Conn};
use crate::exit::{self, Failure};
use crate::reply;
use crate::status;

/// Prints to stdout; a closed pipe (`| head`) is not an error worth a panic.
fn out(text: &str) {
    use std::io::Write;
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

fn connect(url: &str) -> Result<Conn, Failure> {
    let target = conn::target(url).map_err(Failure::Usage)?;
    Conn::connect(&target).map_err(|e| {
        Failure::Unreachable(format!(
            "cannot connect to {}: {e}",
            conn::describe(&target)
        ))
    })
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

/// Drops one hold per name; 0 when every name had one, else 1 (and why).
pub fn release(url: &str, args: ReleaseArgs) -> Result<u8, Failure> {
    check_owner(&args.owner).map_err(Failure::Usage)?;
    let mut conn = connect(url)?;
    let mut code = 0;
    for name in &args.names {
        match conn.call(&commands::release_one(name, &args.owner, args.kind())) {
            Ok(v) => {
                let left = reply::int(&v).unwrap_or(0);
                if left == 0 {
                    out(&format!("{name}: released\n"));
                } else {
                    out(&format!("{name}: {left} holds left\n"));
                }
            }
            Err(e) if e.code() == Some("NOTOWNER") => {
                out(&format!("{name}: not held by {}\n", args.owner));
                code = exit::CONFLICT;
            }
            Err(e) => return Err(Failure::from_redis(&format!("LOCK.RELEASE {name}"), &e)),
        }
    }
    Ok(code)
}

/// Removes each lock; 0 when every name had one, else 1.
pub fn force_release(url: &str, args: ForceReleaseArgs) -> Result<u8, Failure> {
    let mut conn = connect(url)?;
    let mut code = 0;
    for name in &args.names {
        let v = conn
            .call(&commands::force_release(name))
            .map_err(|e| Failure::from_redis(&format!("LOCK.FORCERELEASE {name}"), &e))?;
        if reply::int(&v) == Some(1) {
            out(&format!("{name}: removed\n"));
        } else {
            out(&format!("{name}: was free\n"));
            code = exit::CONFLICT;
        }
    }
    Ok(code)
}
