//! Holds every hand-kept list of the module's commands, configs and `INFO
//! lock` fields to what a live server registers, so that adding one means
//! its rule, its handler with its spec and its docs, and a test names
//! whatever was forgotten:
//!
//! - the commands (`COMMAND LIST FILTERBY MODULE lock`) against the tests'
//!   table of them (tests/common/commands.rs, through which the fuzzer and
//!   the ACL tests take their lists from the server), the `##` headings and
//!   syntax lines of docs/commands.md (the arity they give against `COMMAND
//!   INFO`), and the command table of README.md;
//! - the configs (`CONFIG GET lock.*`) against the table of docs/commands.md
//!   (the default `CONFIG GET` answers on a fresh server, and the range
//!   `CONFIG SET` accepts) and the configs README.md names;
//! - the `INFO lock` fields against the table of docs/commands.md.

use crate::common;
use common::commands::{self, Cmd};
use common::*;

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

fn doc(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    fs::read_to_string(&full).unwrap_or_else(|e| panic!("read {}: {e}", full.display()))
}

/// The lines of the `## title` section of a markdown text (up to the next
/// `## ` heading).
fn section<'a>(text: &'a str, title: &str) -> Vec<&'a str> {
    text.lines()
        .skip_while(|l| l.trim_end() != format!("## {title}"))
        .skip(1)
        .take_while(|l| !l.starts_with("## "))
        .collect()
}

/// The first cell of each row of the markdown tables in `lines`, header
/// and rule rows left out.
fn first_cells<'a>(lines: &[&'a str]) -> Vec<&'a str> {
    table_rows(lines)
        .into_iter()
        .filter_map(|cells| cells.first().copied())
        .collect()
}

/// The cells of each row of the markdown tables in `lines` (without the
/// header row and the rule under it).
fn table_rows<'a>(lines: &[&'a str]) -> Vec<Vec<&'a str>> {
    let mut rows = Vec::new();
    let mut previous_was_table = false;
    for line in lines {
        let is_table = line.starts_with('|');
        let is_rule = line.starts_with("|--") || line.starts_with("| --");
        if is_table && previous_was_table && !is_rule {
            let cells: Vec<&str> = line.trim().trim_matches('|').split(" | ").collect();
            rows.push(cells.into_iter().map(str::trim).collect());
        }
        // A table's first line is its header: no table line before it.
        previous_was_table = is_table;
    }
    rows
}

/// The registered commands, upper case (as the docs write them).
fn registered_commands(con: &mut Connection) -> BTreeSet<String> {
    commands::registered(con)
        .iter()
        .map(|n| n.to_ascii_uppercase())
        .collect()
}

/// `what` in both directions: registered but missing from `list`, and in
/// `list` but not registered.
fn compare(
    registered: &BTreeSet<String>,
    listed: &BTreeSet<String>,
    missing: impl Fn(&str) -> String,
    unknown: impl Fn(&str) -> String,
) -> Vec<String> {
    registered
        .difference(listed)
        .map(|n| missing(n))
        .chain(listed.difference(registered).map(|n| unknown(n)))
        .collect()
}

fn assert_none(problems: Vec<String>) {
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

/// A name of the module's command families, as the docs write them.
fn is_command_name(word: &str) -> bool {
    ["LOCK.", "SEM.", "LATCH.", "ELECT."]
        .iter()
        .any(|family| word.starts_with(family))
}

/// Whichever test starts a server: Debian's redis-server by default,
/// `REDIS_SERVER` for another.
fn server() -> (Server, Connection) {
    let server = Server::start();
    let con = server.client();
    (server, con)
}

#[test]
fn the_tests_table_of_commands_is_the_servers() {
    let (_server, mut con) = server();
    let registered = commands::registered(&mut con);
    assert!(
        !registered.is_empty(),
        "COMMAND LIST FILTERBY MODULE lock answered {registered:?}"
    );
    if let Err(problems) = commands::known(&registered, "tests/common/commands.rs") {
        panic!("\n{problems}");
    }
}

/// The check above names what it finds missing, either way.
#[test]
fn a_command_missing_from_the_table_is_named() {
    let mut names: Vec<String> = Cmd::ALL.iter().map(|c| c.name().to_string()).collect();
    assert!(commands::known(&names, "the fuzzer").is_ok());
    names.push("lock.foo".into());
    names.retain(|n| n != "lock.queues");
    let problems = commands::known(&names, "the fuzzer").expect_err("two problems");
    assert!(
        problems.contains("LOCK.FOO is registered but the fuzzer has no entry for it"),
        "{problems}"
    );
    assert!(
        problems.contains(
            "LOCK.QUEUES is in Cmd (tests/common/commands.rs) but the server does not register it"
        ),
        "{problems}"
    );
}

/// docs/commands.md heads each command (or a family of them) with
/// `## LOCK.X` or `## LOCK.X, LOCK.Y` (`SEM.X`, `LATCH.X` alike), and gives
/// each one's syntax in a code block under it: `LOCK.X key owner [...]`.
#[test]
fn every_command_has_a_heading_and_a_syntax_line_in_the_command_reference() {
    let (_server, mut con) = server();
    let registered = registered_commands(&mut con);
    let reference = doc("docs/commands.md");
    let mut headed = BTreeSet::new();
    let mut problems = Vec::new();
    for heading in reference.lines().filter_map(|l| l.strip_prefix("## ")) {
        let names: Vec<&str> = heading.split(", ").map(str::trim).collect();
        if !names.iter().any(|n| is_command_name(n)) {
            continue;
        }
        let body = section(&reference, heading);
        for name in names {
            headed.insert(name.to_string());
            // The syntax line, in the code block that opens the section.
            let syntax = body
                .iter()
                .skip_while(|l| !l.starts_with("```"))
                .skip(1)
                .take_while(|l| !l.starts_with("```"))
                .find(|l| l.split(' ').next() == Some(name));
            let Some(syntax) = syntax else {
                problems.push(format!(
                    "docs/commands.md: the section '## {heading}' has no syntax line for {name}"
                ));
                continue;
            };
            if registered.contains(name) {
                let arity = documented_arity(syntax);
                let registered = command_arity(&mut con, name);
                if arity != registered {
                    problems.push(format!(
                        "docs/commands.md: {name}'s syntax `{syntax}` gives arity {arity}, \
                         the server registers {registered}"
                    ));
                }
            }
        }
    }
    problems.extend(compare(
        &registered,
        &headed,
        |n| format!("{n} is registered but has no heading in docs/commands.md (`## {n}`)"),
        |n| format!("docs/commands.md has a heading for {n}, which the server does not register"),
    ));
    assert_none(problems);
}

/// The arity a syntax line gives, as Redis counts it: the command name and
/// every argument outside brackets, negative when there can be more. A
/// required choice `(A | B c)` counts as its shortest alternative, and
/// makes the arity negative when the alternatives differ in length.
fn documented_arity(syntax: &str) -> i64 {
    let mut depth = 0;
    let mut required = 0;
    let mut more = false;
    // Inside `( ... )` at bracket depth 0: the alternatives' lengths.
    let mut choice: Option<Vec<i64>> = None;
    for word in syntax.split_whitespace() {
        let opens = word.matches('[').count();
        if depth == 0 && opens == 0 {
            if let Some(stripped) = word.strip_prefix('(') {
                choice = Some(vec![0]);
                if stripped.is_empty() {
                    continue;
                }
            }
            if let Some(alternatives) = choice.as_mut() {
                if word == "|" {
                    alternatives.push(0);
                } else if let Some(last) = alternatives.last_mut() {
                    *last += 1;
                }
                if word.ends_with(')') {
                    let shortest = alternatives.iter().copied().min().unwrap_or(0);
                    more |= alternatives.iter().any(|&n| n != shortest);
                    required += shortest;
                    choice = None;
                }
                continue;
            }
            if word != "|" {
                required += 1;
            }
        }
        more |= opens > 0;
        depth += opens;
        depth -= word.matches(']').count();
    }
    if more {
        -required
    } else {
        required
    }
}

fn command_arity(con: &mut Connection, name: &str) -> i64 {
    match q::<Value>(con, &["COMMAND", "INFO", name]) {
        Value::Array(infos) => match infos.first() {
            Some(Value::Array(info)) => match info.get(1) {
                Some(Value::Int(arity)) => *arity,
                other => panic!("COMMAND INFO {name}: arity {other:?}"),
            },
            other => panic!("COMMAND INFO {name}: {other:?}"),
        },
        other => panic!("COMMAND INFO {name}: {other:?}"),
    }
}

#[test]
fn documented_arity_counts_as_redis_does() {
    for (syntax, arity) in [
        ("LOCK.FORCERELEASE key", 2),
        ("LOCK.QUEUES [COUNT count]", -1),
        (
            "LOCK.ACQUIRE key owner [PX milliseconds | EX seconds] [BLOCK milliseconds]",
            -3,
        ),
        ("LOCK.MRELEASE numkeys key [key ...] owner", -4),
        ("LOCK.RELEASE key owner [READ | WRITE]", -3),
        (
            "ELECT.CAMPAIGN key candidate [VALUE value] (KEEPALIVE | SESSION token) [BLOCK ms]",
            -4,
        ),
        ("X.Y key (A | B) c", 4),
        ("X.Y key ( A | B C )", -3),
    ] {
        assert_eq!(documented_arity(syntax), arity, "{syntax}");
    }
}

/// README.md's command table: a row per command, its syntax in the first
/// cell.
#[test]
fn every_command_has_a_row_in_the_readme() {
    let (_server, mut con) = server();
    let registered = registered_commands(&mut con);
    let readme = doc("README.md");
    let listed: BTreeSet<String> = first_cells(&section(&readme, "Commands"))
        .into_iter()
        .filter_map(|cell| cell.trim_matches('`').split(' ').next())
        .filter(|name| is_command_name(name))
        .map(String::from)
        .collect();
    assert_none(compare(
        &registered,
        &listed,
        |n| format!("{n} is registered but has no row in README.md's command table"),
        |n| format!("README.md's command table has {n}, which the server does not register"),
    ));
}

/// `CONFIG GET lock.*` as (name, value), by name.
fn configs(con: &mut Connection) -> Vec<(String, String)> {
    let flat: Vec<String> = q(con, &["CONFIG", "GET", "lock.*"]);
    let mut pairs: Vec<(String, String)> = flat
        .chunks(2)
        .map(|kv| (kv[0].clone(), kv[1].clone()))
        .collect();
    pairs.sort();
    pairs
}

/// A bound as docs/commands.md writes it: `1000`, `2^53-1`.
fn bound(text: &str) -> Option<i64> {
    let Some((base, exp)) = text.split_once('^') else {
        return text.parse().ok();
    };
    let (exp, minus) = exp.split_once('-').unwrap_or((exp, "0"));
    base.parse::<i64>()
        .ok()?
        .checked_pow(exp.parse().ok()?)?
        .checked_sub(minus.parse().ok()?)
}

/// The `a to b` range of a config's description (`1 to 2^53-1`, `0 (never)
/// to 2^53-1`, `1000 to 86400000 (1 s to 24 h)`), its first one.
fn range(description: &str) -> Option<(i64, i64)> {
    let words: Vec<&str> = description
        .split(|c: char| c.is_whitespace() || c == ';' || c == ',')
        .filter(|w| !w.is_empty())
        .collect();
    let to = words.iter().position(|w| *w == "to")?;
    let high = bound(words.get(to + 1)?)?;
    // The low bound may be followed by a note in parentheses.
    let low = words[..to].iter().rev().find_map(|w| bound(w))?;
    Some((low, high))
}

/// docs/commands.md's configuration table and README.md name every config
/// the server has and no other; the documented default is what `CONFIG GET`
/// answers on a fresh server, and `CONFIG SET` takes the documented range,
/// its ends included, and nothing past them.
#[test]
fn every_config_is_documented_with_its_default_and_range() {
    let (_server, mut con) = server();
    let server_configs = configs(&mut con);
    let registered: BTreeSet<String> = server_configs.iter().map(|(n, _)| n.clone()).collect();
    let reference = doc("docs/commands.md");
    let rows = table_rows(&section(&reference, "Configuration"));
    let documented: BTreeSet<String> = rows
        .iter()
        .filter_map(|cells| cells.first())
        .map(|c| c.trim_matches('`').to_string())
        .collect();
    let mut problems = compare(
        &registered,
        &documented,
        |n| format!("{n} is registered but has no row in docs/commands.md's configuration table"),
        |n| {
            format!(
                "docs/commands.md's configuration table has {n}, which the server does not have"
            )
        },
    );
    let readme = doc("README.md");
    for name in &registered {
        if !readme.contains(&format!("`{name}`")) {
            problems.push(format!(
                "{name} is registered but README.md does not name it"
            ));
        }
    }
    for (name, value) in &server_configs {
        let Some(row) = rows
            .iter()
            .find(|cells| cells.first().map(|c| c.trim_matches('`')) == Some(name))
        else {
            continue;
        };
        let default = row.get(1).map(|c| c.trim_matches('`')).unwrap_or_default();
        if default != value {
            problems.push(format!(
                "docs/commands.md gives {name} the default {default}, CONFIG GET answers {value}"
            ));
        }
        let description = row.get(2).copied().unwrap_or_default();
        if value == "yes" || value == "no" {
            for (v, ok) in [("no", true), ("yes", true), ("maybe", false)] {
                if raw(&mut con, &["CONFIG", "SET", name, v]).is_ok() != ok {
                    problems.push(format!("CONFIG SET {name} {v} should be accepted: {ok}"));
                }
            }
        } else if let Some((low, high)) = range(description) {
            for (v, ok) in [
                (low, true),
                (high, true),
                (low - 1, false),
                (high + 1, false),
            ] {
                if raw(&mut con, &["CONFIG", "SET", name, &v.to_string()]).is_ok() != ok {
                    problems.push(format!(
                        "docs/commands.md gives {name} the range {low} to {high}, but CONFIG SET \
                         {name} {v} is {}",
                        if ok { "refused" } else { "accepted" }
                    ));
                }
            }
        } else {
            problems.push(format!(
                "docs/commands.md gives {name} no range ('a to b'): {description:?}"
            ));
        }
        let _: () = q(&mut con, &["CONFIG", "SET", name, value]);
    }
    assert_eq!(configs(&mut con), server_configs, "defaults restored");
    assert_none(problems);
}

#[test]
fn ranges_are_read_as_written() {
    assert_eq!(
        range("lease when `PX`/`EX` is not given; 1 to 2^53-1"),
        Some((1, 9_007_199_254_740_991))
    );
    assert_eq!(
        range("...before the kernel closes it; 1000 to 86400000 (1 s to 24 h)"),
        Some((1000, 86_400_000))
    );
    assert_eq!(
        range("renewals stop this long after it was bound; 0 (never) to 2^53-1"),
        Some((0, 9_007_199_254_740_991))
    );
    assert_eq!(range("publish `0` on release"), None);
}

/// docs/commands.md's `INFO lock` table lists every field `INFO lock`
/// prints, and no other (a row may list several: `a`, `b`, `c`).
#[test]
fn every_info_field_is_documented() {
    let (_server, mut con) = server();
    let info: String = q(&mut con, &["INFO", "lock"]);
    let fields: BTreeSet<String> = info
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(name, _)| name.to_string())
        .collect();
    assert!(fields.len() > 10, "INFO lock: {info}");
    let reference = doc("docs/commands.md");
    let documented: BTreeSet<String> = first_cells(&section(&reference, "INFO lock"))
        .into_iter()
        .flat_map(|cell| cell.split(", "))
        .map(|f| f.trim().trim_matches('`').to_string())
        .collect();
    assert_none(compare(
        &fields,
        &documented,
        |f| format!("INFO lock has {f} but docs/commands.md's INFO lock table does not"),
        |f| format!("docs/commands.md's INFO lock table has {f}, which INFO lock does not print"),
    ));
}
