//! `redis-lock top`: a live table of the locks that have waiters
//! (`LOCK.QUEUES`), longest wait first, redrawn in place and sized to the
//! terminal, until Ctrl-C.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::args::TopArgs;
use crate::commands;
use crate::conn::{self, Conn};
use crate::duration::human_ms;
use crate::exit::{self, is_unusable, Failure};
use crate::reply::{self, Fields};
use crate::term::{fit, size};
use crate::words;

const WAITERS_W: usize = 7;
const WAIT_W: usize = 12;
const TTL_W: usize = 10;
/// Lines that are not rows: the title, the column names.
const HEADER_LINES: usize = 2;

/// The screen for `rows` (LOCK.QUEUES entries), `cols` x `lines`, title
/// first. `more`: the server had more rows than fit.
pub fn render(title: &str, rows: &[Fields], more: bool, cols: usize, lines: usize) -> Vec<String> {
    let cols = cols.max(40);
    let fixed = WAITERS_W + WAIT_W + TTL_W + 4 * 2;
    let free = cols.saturating_sub(fixed).max(10);
    let key_w = free * 3 / 5;
    let owner_w = free - key_w;
    let row = |key: &str, waiters: &str, wait: &str, owner: &str, ttl: &str| {
        let line = format!(
            "{:<key_w$}  {:>WAITERS_W$}  {:>WAIT_W$}  {:<owner_w$}  {:>TTL_W$}",
            fit(key, key_w),
            waiters,
            wait,
            fit(owner, owner_w),
            ttl
        );
        fit(line.trim_end(), cols)
    };
    let mut out = vec![
        fit(title, cols),
        row("KEY", "WAITERS", "LONGEST WAIT", "OWNER", "TTL"),
    ];
    let room = lines.saturating_sub(HEADER_LINES).max(1);
    let shown = if more || rows.len() > room {
        room.saturating_sub(1)
    } else {
        rows.len()
    };
    for r in rows.iter().take(shown) {
        out.push(row(
            &r.text("key").unwrap_or_default(),
            &r.int("waiters").map_or("-".into(), |n| n.to_string()),
            &r.int("longest_wait").map_or("-".into(), human_ms),
            &r.text("owner").unwrap_or_else(|| "(free)".into()),
            &match r.int("ttl") {
                Some(t) if t >= 0 => human_ms(t),
                Some(_) => "no lease".into(),
                None => "-".into(),
            },
        ));
    }
    if shown < rows.len() || more {
        out.push(fit("... more locks with waiters than fit", cols));
    }
    if rows.is_empty() {
        out.push(fit("(no lock has waiters)", cols));
    }
    out
}

/// The title line; `live`: redrawn until Ctrl-C (not `--once`).
fn title(server: &str, rows: usize, more: bool, every: Option<Duration>, note: &str) -> String {
    let locks = if rows == 1 && !more { "lock" } else { "locks" };
    let mut t = format!(
        "redis-lock top  {server}  {}{rows} {locks} with waiters",
        if more { "over " } else { "" },
    );
    if let Some(every) = every {
        t.push_str(&format!(
            "  every {:.1} s  Ctrl-C quits",
            every.as_secs_f64()
        ));
    }
    t.push_str(note);
    t
}

pub fn run(url: &str, args: TopArgs) -> Result<u8, Failure> {
    let target = conn::target(url).map_err(Failure::Usage)?;
    let server = conn::describe(&target);
    let conn = Conn::connect(&target).map_err(|e| words::connect_failure(&target, &e))?;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .map_err(|e| Failure::Internal(format!("cannot handle signals: {e}")))?;
    }
    let tty = std::io::stdout().is_terminal();
    let mut out = std::io::stdout().lock();
    if tty && !args.once {
        // The alternate screen, without a cursor, like top(1).
        let _ = write!(out, "\x1b[?1049h\x1b[?25l");
    }
    let mut conn = Some(conn);
    let result = (|| -> Result<u8, Failure> {
        loop {
            let (cols, lines) = if tty {
                size(1).unwrap_or((80, 24))
            } else {
                (100, 1000)
            };
            let room = lines.saturating_sub(HEADER_LINES).max(1);
            let mut note = String::new();
            if conn.is_none() {
                match Conn::connect(&target) {
                    Ok(c) => conn = Some(c),
                    Err(e) => {
                        let f = words::connect_failure(&target, &e);
                        if f.code() != exit::UNAVAILABLE {
                            return Err(f);
                        }
                        note = format!("  (reconnecting: {f})");
                    }
                }
            }
            let mut rows = Vec::new();
            if let Some(c) = conn.as_mut() {
                let cmd = commands::queues(room + 1);
                match c.call(&cmd) {
                    Ok(v) => rows = reply::entries(&v),
                    Err(e) if is_unusable(&e) => {
                        note = format!("  (reconnecting: {})", words::reason(c.info(), &cmd, &e));
                        conn = None;
                    }
                    Err(e) => return Err(words::command_failure(c.info(), &cmd, &e)),
                }
            }
            let more = rows.len() > room;
            let screen = render(
                &title(
                    &server,
                    rows.len().min(room),
                    more,
                    (!args.once).then_some(args.interval),
                    &note,
                ),
                &rows,
                more,
                cols,
                lines,
            );
            if tty && !args.once {
                let mut frame = String::from("\x1b[H");
                for l in &screen {
                    frame.push_str(l);
                    frame.push_str("\x1b[K\r\n");
                }
                frame.push_str("\x1b[J");
                let _ = out.write_all(frame.as_bytes());
            } else {
                let _ = writeln!(out, "{}", screen.join("\n"));
            }
            let _ = out.flush();
            if args.once {
                return Ok(0);
            }
            let next = Instant::now() + args.interval;
            while Instant::now() < next {
                if stop.load(Ordering::Relaxed) {
                    return Ok(0);
                }
                std::thread::sleep(Duration::from_millis(20).min(args.interval));
            }
            if !tty {
                let _ = writeln!(out);
            }
        }
    })();
    if tty && !args.once {
        let _ = write!(out, "\x1b[?25h\x1b[?1049l");
        let _ = out.flush();
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reply::tests::{bulk, flat};
    use redis::Value;

    fn q(key: &str, waiters: i64, wait: i64, owner: Option<&str>, ttl: i64) -> Fields {
        Fields::parse(&flat(&[
            ("key", bulk(key)),
            ("waiters", Value::Int(waiters)),
            ("longest_wait", Value::Int(wait)),
            ("owner", owner.map_or(Value::Nil, bulk)),
            ("ttl", Value::Int(ttl)),
        ]))
        .expect("fields")
    }

    #[test]
    fn table() {
        let rows = vec![
            q("job", 3, 1200, Some("web-1:1:ab"), 29_000),
            q("b", 1, 5, None, -1),
        ];
        let s = render("title", &rows, false, 80, 10);
        assert_eq!(s.len(), 4);
        assert_eq!(s[0], "title");
        assert!(s[1].starts_with("KEY"), "{}", s[1]);
        assert!(
            s[1].contains("WAITERS") && s[1].ends_with("TTL"),
            "{}",
            s[1]
        );
        assert!(s[2].starts_with("job "), "{}", s[2]);
        assert!(
            s[2].contains("      3         1.2 s  web-1:1:ab"),
            "{}",
            s[2]
        );
        assert!(s[2].ends_with("29.0 s"), "{}", s[2]);
        assert!(
            s[3].contains("(free)") && s[3].ends_with("no lease"),
            "{}",
            s[3]
        );
        assert!(s.iter().all(|l| l.chars().count() <= 80));
    }

    #[test]
    fn sized_to_the_terminal() {
        let rows: Vec<Fields> = (0..30)
            .map(|i| q(&format!("k{i}"), 1, 1, None, 1))
            .collect();
        let s = render("t", &rows, true, 50, 10);
        assert_eq!(s.len(), 10);
        assert!(s[9].starts_with("... more"));
        assert!(s.iter().all(|l| l.chars().count() <= 50));
        let long = vec![q(&"x".repeat(300), 1, 1, Some(&"o".repeat(300)), 1)];
        assert!(render("t", &long, false, 60, 5)
            .iter()
            .all(|l| l.chars().count() <= 60));
    }

    #[test]
    fn titles() {
        let every = Some(Duration::from_secs(1));
        assert_eq!(
            title("h:1", 2, false, every, ""),
            "redis-lock top  h:1  2 locks with waiters  every 1.0 s  Ctrl-C quits"
        );
        assert_eq!(
            title("h:1", 1, false, None, ""),
            "redis-lock top  h:1  1 lock with waiters"
        );
        assert_eq!(
            title("h:1", 5, true, None, ""),
            "redis-lock top  h:1  over 5 locks with waiters"
        );
    }

    #[test]
    fn empty() {
        let s = render("t", &[], false, 80, 24);
        assert_eq!(s[2], "(no lock has waiters)");
    }
}
