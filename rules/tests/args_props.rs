//! Property tests of the option parsers (`lock_rules::args`): they never
//! panic, whatever bytes they are given; every error renders as one line of
//! printable ASCII starting with an error code; and on any argument list they
//! agree with a reference parser written from the README's grammar:
//!
//! ```text
//! LOCK.ACQUIRE key owner [PX milliseconds | EX seconds] [BLOCK milliseconds] [FENCE] [KEEPALIVE] [SESSION token]
//! LOCK.RENEW   key owner [PX milliseconds | EX seconds] [KEEPALIVE] [SESSION token]
//! ```
//!
//! (`SESSION token`, a non-empty token, is KEEPALIVE bound to the session
//! and wins over a `KEEPALIVE` beside it.)
//!
//! ```text
//! ```
//!
//! Options are case-insensitive, in any order, each at most once; durations
//! are integers as Redis reads them, `PX`/`EX` positive, `BLOCK` not
//! negative, at most 2^53 - 1 ms. Errors quote what the client sent as
//! printable ASCII, any other byte as `\xNN`, cut after 64 bytes.
//!
//! 256 cases per property by default; `PROPTEST_CASES=100000` for a long run.

use lock_rules::args::{
    parse_acquire_options, parse_i64, parse_owner, parse_renew_options, AcquireOptions,
    RenewOptions, Wait, MAX_DURATION_MS,
};
use lock_rules::request::KeepAlive;
use proptest::prelude::*;

// ------------------------------------------------------------ reference

/// The README's quoting of client bytes in an error line.
fn quoted(raw: &[u8]) -> String {
    let mut out = String::new();
    for &b in raw.iter().take(64) {
        if (0x20..=0x7e).contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    if raw.len() > 64 {
        out.push_str("...");
    }
    out
}

/// An integer as Redis reads one: exactly the canonical decimal form of an
/// i64 (no sign but `-`, no leading zero, no spaces, no `-0`).
fn reference_i64(raw: &[u8]) -> Option<i64> {
    let n: i64 = std::str::from_utf8(raw).ok()?.parse().ok()?;
    (n.to_string().as_bytes() == raw).then_some(n)
}

/// The options after `key owner`, parsed from the README's grammar alone;
/// `allowed` is the command's option set.
fn reference(args: &[Vec<u8>], allowed: &[&'static str]) -> Result<AcquireOptions, String> {
    let mut out = AcquireOptions::default();
    let mut seen: Vec<&str> = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let raw = &args[i];
        i += 1;
        let Some(&name) = allowed
            .iter()
            .find(|name| name.as_bytes().eq_ignore_ascii_case(raw))
        else {
            return Err(format!(
                "ERR syntax error: unknown option '{}'",
                quoted(raw)
            ));
        };
        if seen.contains(&name) {
            return Err(format!("ERR syntax error: {name} given more than once"));
        }
        let lease = |n: &str| n == "PX" || n == "EX";
        if lease(name) && seen.iter().any(|s| lease(s)) {
            return Err("ERR syntax error: PX and EX cannot be combined".into());
        }
        seen.push(name);
        if name == "FENCE" {
            out.fence = true;
            continue;
        }
        if name == "KEEPALIVE" {
            out.keepalive.get_or_insert(KeepAlive::Caller);
            continue;
        }
        let Some(value) = args.get(i) else {
            return Err(format!("ERR syntax error: {name} needs a value"));
        };
        i += 1;
        if name == "SESSION" {
            if value.is_empty() {
                return Err("ERR the session token must not be empty".into());
            }
            out.keepalive = Some(KeepAlive::Session(value.as_slice().into()));
            continue;
        }
        let invalid = |why: &str| format!("ERR invalid {name} '{}': {why}", quoted(value));
        let Some(n) = reference_i64(value) else {
            return Err(invalid("not an integer or out of range"));
        };
        if name == "BLOCK" && n < 0 {
            return Err(invalid("must not be negative"));
        }
        if name != "BLOCK" && n < 1 {
            return Err(invalid("must be positive"));
        }
        let ms = if name == "EX" {
            n.checked_mul(1000)
        } else {
            Some(n)
        };
        let Some(ms) = ms.filter(|ms| *ms <= MAX_DURATION_MS) else {
            return Err(invalid("too large"));
        };
        if name == "BLOCK" {
            out.wait = Some(if ms == 0 {
                Wait::Forever
            } else {
                Wait::Millis(ms)
            });
        } else {
            out.lease_ms = Some(ms);
        }
    }
    Ok(out)
}

fn acquire(args: &[Vec<u8>]) -> Result<AcquireOptions, String> {
    parse_acquire_options(args).map_err(|e| e.to_string())
}

fn renew(args: &[Vec<u8>]) -> Result<RenewOptions, String> {
    parse_renew_options(args).map_err(|e| e.to_string())
}

/// `CODE message`: an upper-case code, a space, then printable ASCII only
/// (one line, no NUL), of bounded length whatever was quoted.
fn assert_well_formed(error: &str) {
    let (code, message) = error.split_once(' ').unwrap_or((error, ""));
    assert!(
        !code.is_empty() && code.bytes().all(|b| b.is_ascii_uppercase()),
        "no error code: {error:?}"
    );
    assert!(!message.is_empty(), "no message: {error:?}");
    assert!(
        error.bytes().all(|b| (0x20..=0x7e).contains(&b)),
        "not printable ASCII: {error:?}"
    );
    // The longest: a 64-byte quote of \xNN escapes and its "...".
    assert!(error.len() <= 64 * 4 + 100, "too long: {error:?}");
}

// ----------------------------------------------------------- strategies

/// `word` in a random mix of upper and lower case.
fn any_case(word: &'static str) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<bool>(), word.len()).prop_map(move |upper| {
        word.bytes()
            .zip(upper)
            .map(|(b, up)| {
                if up {
                    b.to_ascii_uppercase()
                } else {
                    b.to_ascii_lowercase()
                }
            })
            .collect()
    })
}

fn option_name() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        any_case("PX"),
        any_case("EX"),
        any_case("BLOCK"),
        any_case("FENCE"),
        any_case("KEEPALIVE"),
        any_case("SESSION"),
    ]
}

/// Texts around every boundary the parsers have.
fn number_text() -> impl Strategy<Value = Vec<u8>> {
    let edges = [
        0,
        1,
        -1,
        i64::MAX,
        i64::MIN,
        MAX_DURATION_MS,
        MAX_DURATION_MS / 1000,
        i64::MAX / 1000,
    ];
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string().into_bytes()),
        (-5i64..5000).prop_map(|n| n.to_string().into_bytes()),
        (proptest::sample::select(edges.to_vec()), -2i64..=2)
            .prop_map(|(e, d)| e.saturating_add(d).to_string().into_bytes()),
        "[-+ 0]?[0-9]{1,25}[ .e]?[0-9]?".prop_map(String::into_bytes),
        proptest::sample::select(vec![
            "-0",
            "+5",
            " 5",
            "5 ",
            "007",
            "1e3",
            "0x10",
            "1.5",
            "",
            "-",
            "9223372036854775808",
            "-9223372036854775809",
            "18446744073709551616",
        ])
        .prop_map(|s| s.as_bytes().to_vec()),
    ]
}

/// Any bytes: NUL, CR/LF, high bytes, invalid UTF-8, sometimes long.
fn junk() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => proptest::collection::vec(any::<u8>(), 0..12),
        1 => proptest::collection::vec(any::<u8>(), 60..300),
    ]
}

/// One argument of an option list, shaped like the grammar most of the time.
fn token() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => option_name(),
        4 => number_text(),
        1 => proptest::sample::select(vec!["NX", "PXAT", "KEEPTTL", "P X", "PX\0", "", "BLOCKS"])
            .prop_map(|s| s.as_bytes().to_vec()),
        2 => junk(),
    ]
}

fn tokens() -> impl Strategy<Value = Vec<Vec<u8>>> {
    proptest::collection::vec(token(), 0..10)
}

/// A valid option set: (lease as PX ms or EX s, BLOCK ms, FENCE, KEEPALIVE).
#[derive(Debug, Clone)]
enum Lease {
    Px(i64),
    Ex(i64),
}

fn valid_options() -> impl Strategy<Value = (Option<Lease>, Option<i64>, Flags)> {
    let lease = prop_oneof![
        Just(None),
        (1..=MAX_DURATION_MS).prop_map(|n| Some(Lease::Px(n))),
        (1..=MAX_DURATION_MS / 1000).prop_map(|s| Some(Lease::Ex(s))),
    ];
    let block = prop_oneof![
        Just(None),
        Just(Some(0)),
        (0..=MAX_DURATION_MS).prop_map(Some)
    ];
    (lease, block, (any::<bool>(), any::<bool>()))
}

/// (FENCE, KEEPALIVE)
type Flags = (bool, bool);

/// The options as argument groups, each name in a random case.
fn groups(
    lease: &Option<Lease>,
    block: Option<i64>,
    (fence, keepalive): Flags,
) -> impl Strategy<Value = Vec<Vec<Vec<u8>>>> {
    let mut parts: Vec<BoxedStrategy<Vec<Vec<u8>>>> = Vec::new();
    let with_value = |name: &'static str, n: i64| {
        any_case(name)
            .prop_map(move |w| vec![w, n.to_string().into_bytes()])
            .boxed()
    };
    match lease {
        Some(Lease::Px(n)) => parts.push(with_value("PX", *n)),
        Some(Lease::Ex(s)) => parts.push(with_value("EX", *s)),
        None => {}
    }
    if let Some(ms) = block {
        parts.push(with_value("BLOCK", ms));
    }
    if fence {
        parts.push(any_case("FENCE").prop_map(|w| vec![w]).boxed());
    }
    if keepalive {
        parts.push(any_case("KEEPALIVE").prop_map(|w| vec![w]).boxed());
    }
    parts
}

fn expected(
    lease: &Option<Lease>,
    block: Option<i64>,
    (fence, keepalive): Flags,
) -> AcquireOptions {
    AcquireOptions {
        lease_ms: match lease {
            Some(Lease::Px(n)) => Some(*n),
            Some(Lease::Ex(s)) => Some(s * 1000),
            None => None,
        },
        wait: block.map(|ms| {
            if ms == 0 {
                Wait::Forever
            } else {
                Wait::Millis(ms)
            }
        }),
        fence,
        keepalive: keepalive.then_some(KeepAlive::Caller),
    }
}

// ----------------------------------------------------------- properties

proptest! {
    /// Arbitrary bytes: no panic, and every error is well formed.
    #[test]
    fn parsers_never_panic_and_errors_carry_a_code(
        args in proptest::collection::vec(junk(), 0..12),
    ) {
        if let Err(e) = acquire(&args) {
            assert_well_formed(&e);
        }
        if let Err(e) = renew(&args) {
            assert_well_formed(&e);
        }
        for arg in &args {
            match parse_owner(arg) {
                Ok(owner) => prop_assert_eq!(owner, &arg[..]),
                Err(e) => {
                    prop_assert!(arg.is_empty());
                    assert_well_formed(&e.to_string());
                }
            }
        }
    }

    /// Grammar-shaped arguments: exactly the reference parser's result,
    /// answer or error line.
    #[test]
    fn acquire_options_follow_the_grammar(args in tokens()) {
        let got = acquire(&args);
        if let Err(e) = &got {
            assert_well_formed(e);
        }
        prop_assert_eq!(got, reference(&args, &["PX", "EX", "BLOCK", "FENCE", "KEEPALIVE", "SESSION"]));
    }

    #[test]
    fn renew_options_follow_the_grammar(args in tokens()) {
        let got = renew(&args);
        if let Err(e) = &got {
            assert_well_formed(e);
        }
        let want = reference(&args, &["PX", "EX", "KEEPALIVE", "SESSION"])
            .map(|o| RenewOptions { lease_ms: o.lease_ms, keepalive: o.keepalive });
        prop_assert_eq!(got, want);
    }

    /// Redis's integers: the canonical decimal form of an i64 and nothing
    /// else, whatever the bytes.
    #[test]
    fn integers_are_exactly_canonical_decimals(raw in prop_oneof![number_text(), junk()]) {
        prop_assert_eq!(parse_i64(&raw), reference_i64(&raw));
    }

    #[test]
    fn every_i64_round_trips(n in any::<i64>()) {
        prop_assert_eq!(parse_i64(n.to_string().as_bytes()), Some(n));
    }

    /// A valid `PX n` is a lease of n ms, `EX s` of s*1000 ms; past the
    /// limit they are too large; zero and below are not positive.
    #[test]
    fn leases_round_trip_within_their_range(
        ms in 1..=MAX_DURATION_MS,
        s in 1..=MAX_DURATION_MS / 1000,
        too_many_ms in MAX_DURATION_MS + 1..=i64::MAX,
        too_many_s in MAX_DURATION_MS / 1000 + 1..=i64::MAX,
        not_positive in i64::MIN..=0,
    ) {
        let arg = |name: &str, n: i64| vec![name.as_bytes().to_vec(), n.to_string().into_bytes()];
        prop_assert_eq!(acquire(&arg("PX", ms)).map(|o| o.lease_ms), Ok(Some(ms)));
        prop_assert_eq!(renew(&arg("px", ms)).map(|o| o.lease_ms), Ok(Some(ms)));
        prop_assert_eq!(acquire(&arg("EX", s)).map(|o| o.lease_ms), Ok(Some(s * 1000)));
        prop_assert_eq!(renew(&arg("eX", s)).map(|o| o.lease_ms), Ok(Some(s * 1000)));
        for name in ["PX", "EX"] {
            let big = if name == "PX" { too_many_ms } else { too_many_s };
            prop_assert_eq!(
                acquire(&arg(name, big)),
                Err(format!("ERR invalid {name} '{big}': too large"))
            );
            prop_assert_eq!(
                renew(&arg(name, not_positive)).map(|o| o.lease_ms),
                Err(format!("ERR invalid {name} '{not_positive}': must be positive"))
            );
        }
        prop_assert_eq!(
            acquire(&arg("BLOCK", ms)).map(|o| o.wait),
            Ok(Some(Wait::Millis(ms)))
        );
        prop_assert_eq!(
            acquire(&arg("BLOCK", too_many_ms)),
            Err(format!("ERR invalid BLOCK '{too_many_ms}': too large"))
        );
        let negative = not_positive.min(-1);
        prop_assert_eq!(
            acquire(&arg("block", negative)),
            Err(format!("ERR invalid BLOCK '{negative}': must not be negative"))
        );
    }

    /// Any valid option set, in any order and any case, parses to the same
    /// options.
    #[test]
    fn order_and_case_of_options_do_not_matter(
        (lease, block, flags, args) in valid_options().prop_flat_map(|(lease, block, flags)| {
            let parts = groups(&lease, block, flags);
            (Just(lease), Just(block), Just(flags), parts.prop_shuffle())
        }),
    ) {
        let args: Vec<Vec<u8>> = args.into_iter().flatten().collect();
        prop_assert_eq!(acquire(&args), Ok(expected(&lease, block, flags)));
        let (fence, keepalive) = flags;
        if block.is_none() && !fence {
            prop_assert_eq!(
                renew(&args),
                Ok(RenewOptions {
                    lease_ms: expected(&lease, None, (false, false)).lease_ms,
                    keepalive: keepalive.then_some(KeepAlive::Caller),
                })
            );
        }
    }

    /// Giving an option a second time, anywhere, with any valid value, is an
    /// error; so is giving both PX and EX.
    #[test]
    fn a_repeated_or_conflicting_option_is_an_error(
        (args, extra, at) in valid_options().prop_flat_map(|(lease, block, flags)| {
            let parts = groups(&lease, block, flags);
            let extra = prop_oneof![
                (any_case("PX"), 1..=MAX_DURATION_MS)
                    .prop_map(|(w, n)| vec![w, n.to_string().into_bytes()]),
                (any_case("EX"), 1..=1000i64)
                    .prop_map(|(w, n)| vec![w, n.to_string().into_bytes()]),
                (any_case("BLOCK"), 0..=1000i64)
                    .prop_map(|(w, n)| vec![w, n.to_string().into_bytes()]),
                any_case("FENCE").prop_map(|w| vec![w]),
                any_case("KEEPALIVE").prop_map(|w| vec![w]),
            ];
            (parts.prop_shuffle(), extra, 0..4usize)
        }),
    ) {
        let extra_name = String::from_utf8_lossy(&extra[0]).to_ascii_uppercase();
        let present: Vec<String> = args
            .iter()
            .map(|g| String::from_utf8_lossy(&g[0]).to_ascii_uppercase())
            .collect();
        let mut all = args.clone();
        all.insert(at.min(all.len()), extra);
        let flat: Vec<Vec<u8>> = all.iter().flatten().cloned().collect();
        let got = acquire(&flat);
        let lease = |n: &str| n == "PX" || n == "EX";
        let clash = present
            .iter()
            .any(|p| *p == extra_name || (lease(p) && lease(&extra_name)));
        if clash {
            let e = got.expect_err("a repeated option must be refused");
            prop_assert!(
                e.ends_with("given more than once") || e.ends_with("PX and EX cannot be combined"),
                "{}", e
            );
        } else {
            prop_assert!(got.is_ok(), "{:?}", got);
        }
    }

    /// An unknown word where an option name belongs is refused, quoted.
    #[test]
    fn an_unknown_option_is_refused_and_quoted(
        word in junk().prop_filter("a known option", |w| {
            !["PX", "EX", "BLOCK", "FENCE", "KEEPALIVE", "SESSION"]
                .iter()
                .any(|o| o.as_bytes().eq_ignore_ascii_case(w))
        }),
        before in proptest::sample::select(vec![vec![], vec!["FENCE"], vec!["PX", "5"]]),
    ) {
        let mut args: Vec<Vec<u8>> = before.iter().map(|s| s.as_bytes().to_vec()).collect();
        args.push(word.clone());
        args.push(b"1".to_vec());
        let want = format!("ERR syntax error: unknown option '{}'", quoted(&word));
        prop_assert_eq!(acquire(&args), Err(want.clone()));
        if !before.contains(&"FENCE") {
            prop_assert_eq!(renew(&args), Err(want));
        }
    }
}

/// Rendered errors of a few hand-picked inputs, as the README shows them.
#[test]
fn readme_examples() {
    let args = |list: &[&[u8]]| list.iter().map(|a| a.to_vec()).collect::<Vec<_>>();
    assert_eq!(
        acquire(&args(&[b"XX"])),
        Err("ERR syntax error: unknown option 'XX'".into())
    );
    assert_eq!(
        acquire(&args(&[b"PX", b"a\0b\xff\r\n"])),
        Err("ERR invalid PX 'a\\x00b\\xff\\x0d\\x0a': not an integer or out of range".into())
    );
    let long = vec![b'z'; 1 << 20];
    let e = acquire(&args(&[&long])).expect_err("unknown");
    assert_eq!(
        e,
        format!("ERR syntax error: unknown option '{}...'", "z".repeat(64))
    );
    assert_eq!(
        acquire(&args(&[b"EX", b"9999999999999"])),
        Err("ERR invalid EX '9999999999999': too large".into())
    );
}
