//! The option grammar of the LOCK.* commands, parsed into typed requests.
//! Options are case-insensitive and may come in any order; each may be given
//! once.

use std::ops::Deref;

use super::error::LockError;
use super::request::KeepAlive;

/// Upper bound for every duration argument (PX, EX in ms, BLOCK) and for the
/// duration configs: 2^53 - 1 ms, about 285,000 years. The largest integer a
/// JavaScript number or a double holds exactly, so a client's "forever"
/// (`Number.MAX_SAFE_INTEGER / 10`, 3 times that for an extension) is taken;
/// and low enough that `now + duration` in ms, and in µs the server's timers
/// (9.0 × 10^18, with the clock added, against i64's 9.22 × 10^18), never
/// overflow.
pub const MAX_DURATION_MS: i64 = 9_007_199_254_740_991;

/// How long a caller is prepared to wait for a busy lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// `BLOCK 0`: until the lock is handed over or the client leaves.
    Forever,
    /// `BLOCK ms`
    Millis(i64),
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AcquireOptions {
    /// `None` means the configured default lease.
    pub lease_ms: Option<i64>,
    /// `None` means answer at once when the lock is busy.
    pub wait: Option<Wait>,
    pub fence: bool,
    /// `KEEPALIVE` (the caller's connection) or `SESSION token` (the
    /// session's): the server renews the lease while that connection lives.
    pub keepalive: Option<KeepAlive>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RenewOptions {
    pub lease_ms: Option<i64>,
    /// `KEEPALIVE` or `SESSION token`: bind the holds to this connection, or
    /// to the session's, from now on.
    pub keepalive: Option<KeepAlive>,
}

/// Parses the options after `key owner` of LOCK.ACQUIRE.
/// Arguments are anything that derefs to bytes: `&[u8]`, or the server's
/// own argument strings, so a command parses without copying them.
pub fn parse_acquire_options<A: Deref<Target = [u8]>>(
    args: &[A],
) -> Result<AcquireOptions, LockError> {
    let mut parser = Options::new(args);
    let mut out = AcquireOptions::default();
    while let Some(name) = parser.next_name()? {
        if name == "FENCE" {
            out.fence = true;
        } else if name == "KEEPALIVE" || name == "SESSION" {
            keep_alive(&mut parser, name, &mut out.keepalive)?;
        } else if name == "BLOCK" {
            out.wait = Some(wait(&mut parser)?);
        } else {
            out.lease_ms = Some(parser.lease(name)?);
        }
    }
    Ok(out)
}

/// Parses the options after `key owner` of LOCK.RENEW.
pub fn parse_renew_options<A: Deref<Target = [u8]>>(args: &[A]) -> Result<RenewOptions, LockError> {
    let mut parser = Options::new(args).only(&["PX", "EX", "KEEPALIVE", "SESSION"]);
    let mut out = RenewOptions::default();
    while let Some(name) = parser.next_name()? {
        if name == "KEEPALIVE" || name == "SESSION" {
            keep_alive(&mut parser, name, &mut out.keepalive)?;
        } else {
            out.lease_ms = Some(parser.lease(name)?);
        }
    }
    Ok(out)
}

/// The most permits one SEM.* call takes or gives back: each permit an
/// owner holds is one member of the semaphore's sorted set (Redisson's
/// layout), written and replicated one by one.
pub const MAX_PERMITS_PER_CALL: i64 = 100_000;

/// `PERMITS n` of the SEM.* commands: 1 to [`MAX_PERMITS_PER_CALL`].
fn permits<A: Deref<Target = [u8]>>(parser: &mut Options<'_, A>) -> Result<u32, LockError> {
    let raw = parser.value("PERMITS")?;
    let n = parse_i64(raw).ok_or_else(|| {
        LockError::invalid_value("PERMITS", raw, "not an integer or out of range")
    })?;
    if n < 1 {
        return Err(LockError::invalid_value("PERMITS", raw, "must be positive"));
    }
    if n > MAX_PERMITS_PER_CALL {
        return Err(LockError::invalid_value("PERMITS", raw, "too large"));
    }
    u32::try_from(n).map_err(|_| LockError::invalid_value("PERMITS", raw, "too large"))
}

/// SEM.ACQUIRE's options: LOCK.ACQUIRE's and `PERMITS n` (1 without it).
pub fn parse_semaphore_acquire_options<A: Deref<Target = [u8]>>(
    args: &[A],
) -> Result<(AcquireOptions, u32), LockError> {
    let mut parser = Options::new(args).only(&[
        "PX",
        "EX",
        "BLOCK",
        "FENCE",
        "KEEPALIVE",
        "SESSION",
        "PERMITS",
    ]);
    let mut out = AcquireOptions::default();
    let mut n = 1;
    while let Some(name) = parser.next_name()? {
        match name {
            "FENCE" => out.fence = true,
            "KEEPALIVE" | "SESSION" => keep_alive(&mut parser, name, &mut out.keepalive)?,
            "BLOCK" => out.wait = Some(wait(&mut parser)?),
            "PERMITS" => n = permits(&mut parser)?,
            _ => out.lease_ms = Some(parser.lease(name)?),
        }
    }
    Ok((out, n))
}

/// SEM.TAKE's options: `PERMITS n`, `BLOCK ms`.
pub fn parse_take_options<A: Deref<Target = [u8]>>(
    args: &[A],
) -> Result<(u32, Option<Wait>), LockError> {
    let mut parser = Options::new(args).only(&["PERMITS", "BLOCK"]);
    let (mut n, mut until) = (1, None);
    while let Some(name) = parser.next_name()? {
        match name {
            "PERMITS" => n = permits(&mut parser)?,
            _ => until = Some(wait(&mut parser)?),
        }
    }
    Ok((n, until))
}

/// `PERMITS n` alone (SEM.RELEASE, SEM.GIVE); `None` without it.
pub fn parse_permits_option<A: Deref<Target = [u8]>>(args: &[A]) -> Result<Option<u32>, LockError> {
    let mut parser = Options::new(args).only(&["PERMITS"]);
    let mut n = None;
    while parser.next_name()?.is_some() {
        n = Some(permits(&mut parser)?);
    }
    Ok(n)
}

/// `BLOCK ms` alone (LATCH.AWAIT); `None` without it.
pub fn parse_block_option<A: Deref<Target = [u8]>>(args: &[A]) -> Result<Option<Wait>, LockError> {
    let mut parser = Options::new(args).only(&["BLOCK"]);
    let mut until = None;
    while parser.next_name()?.is_some() {
        until = Some(wait(&mut parser)?);
    }
    Ok(until)
}

/// `PX ms` or `EX s` alone (LATCH.INIT); `None` without either.
pub fn parse_lease_option<A: Deref<Target = [u8]>>(args: &[A]) -> Result<Option<i64>, LockError> {
    let mut parser = Options::new(args).only(&["PX", "EX"]);
    let mut lease = None;
    while let Some(name) = parser.next_name()? {
        lease = Some(parser.lease(name)?);
    }
    Ok(lease)
}

/// ELECT.CAMPAIGN's options: LOCK.ACQUIRE's but FENCE (always on: the
/// term is the leadership's fencing token), and `VALUE value`. KEEPALIVE
/// or SESSION is required: a leadership not bound to a connection would
/// outlive its leader.
pub fn parse_campaign_options<A: Deref<Target = [u8]>>(
    args: &[A],
) -> Result<(AcquireOptions, Option<Vec<u8>>), LockError> {
    let mut parser =
        Options::new(args).only(&["PX", "EX", "BLOCK", "KEEPALIVE", "SESSION", "VALUE"]);
    let mut out = AcquireOptions {
        fence: true,
        ..AcquireOptions::default()
    };
    let mut value = None;
    while let Some(name) = parser.next_name()? {
        match name {
            "KEEPALIVE" | "SESSION" => keep_alive(&mut parser, name, &mut out.keepalive)?,
            "BLOCK" => out.wait = Some(wait(&mut parser)?),
            "VALUE" => value = Some(parser.value(name)?.to_vec()),
            _ => out.lease_ms = Some(parser.lease(name)?),
        }
    }
    if out.keepalive.is_none() {
        return Err(LockError::campaign_without_keepalive());
    }
    Ok((out, value))
}

/// ELECT.OBSERVE's options: `TERM term` (0 without it: nothing seen yet)
/// and `BLOCK ms`.
pub fn parse_observe_options<A: Deref<Target = [u8]>>(
    args: &[A],
) -> Result<(i64, Option<Wait>), LockError> {
    let mut parser = Options::new(args).only(&["TERM", "BLOCK"]);
    let (mut term, mut until) = (0, None);
    while let Some(name) = parser.next_name()? {
        match name {
            "TERM" => {
                let raw = parser.value(name)?;
                term = parse_i64(raw)
                    .filter(|t| *t >= 0)
                    .ok_or_else(|| LockError::invalid_value("TERM", raw, "not a term"))?;
            }
            _ => until = Some(wait(&mut parser)?),
        }
    }
    Ok((term, until))
}

/// `BLOCK ms`'s value: 0 waits for ever.
fn wait<A: Deref<Target = [u8]>>(parser: &mut Options<'_, A>) -> Result<Wait, LockError> {
    Ok(match parser.duration("BLOCK", 0)? {
        0 => Wait::Forever,
        ms => Wait::Millis(ms),
    })
}

/// An integer argument of a SEM.*/LATCH.* command (`permits`, `delta`,
/// `count`, `n`) within `min..=max`.
pub fn parse_amount(name: &str, raw: &[u8], min: i64, max: i64) -> Result<i64, LockError> {
    let n = parse_i64(raw)
        .ok_or_else(|| LockError::invalid_value(name, raw, "not an integer or out of range"))?;
    if n < min {
        let why = match min {
            1 => "must be positive",
            0 => "must not be negative",
            _ => "too small",
        };
        return Err(LockError::invalid_value(name, raw, why));
    }
    if n > max {
        return Err(LockError::invalid_value(name, raw, "too large"));
    }
    Ok(n)
}

/// `KEEPALIVE`, or `SESSION token`, which is KEEPALIVE bound to the
/// session's connection and wins over a plain `KEEPALIVE` beside it.
fn keep_alive<A: Deref<Target = [u8]>>(
    parser: &mut Options<'_, A>,
    name: &str,
    out: &mut Option<KeepAlive>,
) -> Result<(), LockError> {
    if name == "KEEPALIVE" {
        out.get_or_insert(KeepAlive::Caller);
        return Ok(());
    }
    let token = parse_session_token(parser.value(name)?)?;
    *out = Some(KeepAlive::Session(token.into()));
    Ok(())
}

/// Parses `LOCK.SESSION token`'s token.
pub fn parse_session_token(raw: &[u8]) -> Result<&[u8], LockError> {
    if raw.is_empty() {
        return Err(LockError::empty_session());
    }
    Ok(raw)
}

/// How many entries LOCK.WAITERS and LOCK.QUEUES show: `COUNT n` (at
/// most n, 10 without COUNT), `COUNT 0` (all, as LPOS ... COUNT 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    All,
    AtMost(usize),
}

/// The entries LOCK.WAITERS and LOCK.QUEUES show without `COUNT`.
pub const DEFAULT_VIEW_COUNT: usize = 10;

impl Limit {
    pub fn of(count: usize) -> Self {
        if count == 0 {
            Self::All
        } else {
            Self::AtMost(count)
        }
    }

    pub fn max(self) -> usize {
        match self {
            Self::All => usize::MAX,
            Self::AtMost(n) => n,
        }
    }
}

/// Parses `[COUNT count]` (LOCK.WAITERS after the key, LOCK.QUEUES).
pub fn parse_view_options<A: Deref<Target = [u8]>>(args: &[A]) -> Result<Limit, LockError> {
    let mut parser = Options::new(args).only(&["COUNT"]);
    let mut limit = Limit::AtMost(DEFAULT_VIEW_COUNT);
    while let Some(name) = parser.next_name()? {
        let raw = parser.value(name)?;
        let n = parse_i64(raw)
            .ok_or_else(|| LockError::invalid_value(name, raw, "not an integer or out of range"))?;
        let n = usize::try_from(n)
            .map_err(|_| LockError::invalid_value(name, raw, "must not be negative"))?;
        limit = Limit::of(n);
    }
    Ok(limit)
}

pub fn parse_owner(raw: &[u8]) -> Result<&[u8], LockError> {
    if raw.is_empty() {
        return Err(LockError::empty_owner());
    }
    Ok(raw)
}

const ACQUIRE_OPTIONS: &[&str] = &["PX", "EX", "BLOCK", "FENCE", "KEEPALIVE", "SESSION"];

struct Options<'a, A> {
    args: &'a [A],
    pos: usize,
    allowed: &'static [&'static str],
    /// Options given so far, as bits (see `bit`).
    seen: u32,
}

/// The bit of an option in `seen`: its index in `ACQUIRE_OPTIONS`.
fn bit(name: &str) -> u32 {
    match name {
        "PX" => 1,
        "EX" => 2,
        "BLOCK" => 4,
        "FENCE" => 8,
        "COUNT" => 32,
        "SESSION" => 64,
        "PERMITS" => 128,
        "VALUE" => 256,
        "TERM" => 512,
        _ => 16,
    }
}

impl<'a, A: Deref<Target = [u8]>> Options<'a, A> {
    fn new(args: &'a [A]) -> Self {
        Self {
            args,
            pos: 0,
            allowed: ACQUIRE_OPTIONS,
            seen: 0,
        }
    }

    fn only(mut self, allowed: &'static [&'static str]) -> Self {
        self.allowed = allowed;
        self
    }

    /// The next option name, canonical upper case, after checking that it is
    /// known, not repeated and not in conflict with an earlier one.
    fn next_name(&mut self) -> Result<Option<&'static str>, LockError> {
        let Some(raw) = self.args.get(self.pos) else {
            return Ok(None);
        };
        self.pos += 1;
        let name = self
            .allowed
            .iter()
            .find(|known| known.as_bytes().eq_ignore_ascii_case(&raw[..]))
            .copied()
            .ok_or_else(|| {
                LockError::syntax(format_args!(
                    "unknown option '{}'",
                    super::error::printable(&raw[..])
                ))
            })?;
        let this = bit(name);
        if self.seen & this != 0 {
            return Err(LockError::syntax(format_args!(
                "{name} given more than once"
            )));
        }
        const LEASE: u32 = 1 | 2;
        if this & LEASE != 0 && self.seen & LEASE != 0 {
            return Err(LockError::syntax("PX and EX cannot be combined"));
        }
        self.seen |= this;
        Ok(Some(name))
    }

    fn value(&mut self, name: &str) -> Result<&'a [u8], LockError> {
        let raw = self
            .args
            .get(self.pos)
            .ok_or_else(|| LockError::syntax(format_args!("{name} needs a value")))?;
        self.pos += 1;
        Ok(&raw[..])
    }

    /// A duration in ms, at least `min`; `EX` is read in seconds.
    fn duration(&mut self, name: &str, min: i64) -> Result<i64, LockError> {
        let raw = self.value(name)?;
        let n = parse_i64(raw)
            .ok_or_else(|| LockError::invalid_value(name, raw, "not an integer or out of range"))?;
        if n < min {
            let why = if min > 0 {
                "must be positive"
            } else {
                "must not be negative"
            };
            return Err(LockError::invalid_value(name, raw, why));
        }
        let scale = if name == "EX" { 1000 } else { 1 };
        n.checked_mul(scale)
            .filter(|ms| *ms <= MAX_DURATION_MS)
            .ok_or_else(|| LockError::invalid_value(name, raw, "too large"))
    }

    fn lease(&mut self, name: &str) -> Result<i64, LockError> {
        self.duration(name, 1)
    }
}

/// Parses an integer exactly as Redis does (`string2ll`): optional `-`,
/// digits, no `+`, no spaces, no leading zeros, within i64.
pub fn parse_i64(raw: &[u8]) -> Option<i64> {
    let (negative, digits) = match raw.split_first()? {
        (b'-', rest) => (true, rest),
        _ => (false, raw),
    };
    match digits {
        [] => return None,
        [b'0'] => return (!negative).then_some(0),
        [b'0', ..] => return None,
        _ => {}
    }
    let mut magnitude: u64 = 0;
    for &b in digits {
        if !b.is_ascii_digit() {
            return None;
        }
        magnitude = magnitude
            .checked_mul(10)?
            .checked_add(u64::from(b - b'0'))?;
    }
    if negative {
        0i64.checked_sub_unsigned(magnitude)
    } else {
        i64::try_from(magnitude).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acquire(args: &[&str]) -> Result<AcquireOptions, String> {
        let raw: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        parse_acquire_options(&raw).map_err(|e| e.to_string())
    }

    fn renew(args: &[&str]) -> Result<RenewOptions, String> {
        let raw: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        parse_renew_options(&raw).map_err(|e| e.to_string())
    }

    #[test]
    fn parses_every_acquire_option_in_any_order_and_case() {
        assert_eq!(acquire(&[]), Ok(AcquireOptions::default()));
        assert_eq!(
            acquire(&["fence", "block", "0", "Px", "1500"]),
            Ok(AcquireOptions {
                lease_ms: Some(1500),
                wait: Some(Wait::Forever),
                fence: true,
                keepalive: None,
            })
        );
        assert_eq!(
            acquire(&["EX", "3", "keepAlive", "BLOCK", "250"]),
            Ok(AcquireOptions {
                lease_ms: Some(3000),
                wait: Some(Wait::Millis(250)),
                fence: false,
                keepalive: Some(KeepAlive::Caller),
            })
        );
        // SESSION is KEEPALIVE bound to the session, before or after it.
        for args in [
            &["session", "s 1"][..],
            &["KEEPALIVE", "SESSION", "s 1"],
            &["SESSION", "s 1", "KEEPALIVE"],
        ] {
            assert_eq!(
                acquire(args).map(|o| o.keepalive),
                Ok(Some(KeepAlive::Session(b"s 1"[..].into()))),
                "{args:?}"
            );
        }
    }

    #[test]
    fn rejects_bad_acquire_options_with_a_reason() {
        let cases: &[(&[&str], &str)] = &[
            (&["PX"], "ERR syntax error: PX needs a value"),
            (&["BLOCK"], "ERR syntax error: BLOCK needs a value"),
            (&["SESSION"], "ERR syntax error: SESSION needs a value"),
            (&["SESSION", ""], "ERR the session token must not be empty"),
            (
                &["SESSION", "a", "session", "b"],
                "ERR syntax error: SESSION given more than once",
            ),
            (&["NX"], "ERR syntax error: unknown option 'NX'"),
            (
                &["PX", "1", "PX", "2"],
                "ERR syntax error: PX given more than once",
            ),
            (
                &["FENCE", "fence"],
                "ERR syntax error: FENCE given more than once",
            ),
            (
                &["KEEPALIVE", "FENCE", "keepalive"],
                "ERR syntax error: KEEPALIVE given more than once",
            ),
            (
                &["PX", "1", "EX", "2"],
                "ERR syntax error: PX and EX cannot be combined",
            ),
            (
                &["EX", "1", "PX", "2"],
                "ERR syntax error: PX and EX cannot be combined",
            ),
            (
                &["PX", "abc"],
                "ERR invalid PX 'abc': not an integer or out of range",
            ),
            (
                &["PX", "1.5"],
                "ERR invalid PX '1.5': not an integer or out of range",
            ),
            (&["PX", "0"], "ERR invalid PX '0': must be positive"),
            (&["PX", "-5"], "ERR invalid PX '-5': must be positive"),
            (&["EX", "0"], "ERR invalid EX '0': must be positive"),
            (
                &["PX", "99999999999999999999"],
                "ERR invalid PX '99999999999999999999': not an integer or out of range",
            ),
            (
                &["EX", "9223372036854775807"],
                "ERR invalid EX '9223372036854775807': too large",
            ),
            (
                &["PX", "9007199254740992"],
                "ERR invalid PX '9007199254740992': too large",
            ),
            (
                &["BLOCK", "-1"],
                "ERR invalid BLOCK '-1': must not be negative",
            ),
            (
                &["BLOCK", "x"],
                "ERR invalid BLOCK 'x': not an integer or out of range",
            ),
        ];
        for (args, want) in cases {
            assert_eq!(acquire(args), Err(want.to_string()), "{args:?}");
        }
    }

    #[test]
    fn renew_takes_only_a_lease_and_keepalive() {
        assert_eq!(renew(&[]), Ok(RenewOptions::default()));
        assert_eq!(
            renew(&["ex", "2"]),
            Ok(RenewOptions {
                lease_ms: Some(2000),
                keepalive: None,
            })
        );
        assert_eq!(
            renew(&["KEEPALIVE", "px", "7"]),
            Ok(RenewOptions {
                lease_ms: Some(7),
                keepalive: Some(KeepAlive::Caller),
            })
        );
        assert_eq!(
            renew(&["SESSION", "t", "px", "7"]),
            Ok(RenewOptions {
                lease_ms: Some(7),
                keepalive: Some(KeepAlive::Session(b"t"[..].into())),
            })
        );
        assert_eq!(
            renew(&["BLOCK", "1"]),
            Err("ERR syntax error: unknown option 'BLOCK'".to_string())
        );
        assert_eq!(
            renew(&["FENCE"]),
            Err("ERR syntax error: unknown option 'FENCE'".to_string())
        );
        assert_eq!(
            renew(&["PX", "1", "EX", "1"]),
            Err("ERR syntax error: PX and EX cannot be combined".to_string())
        );
    }

    #[test]
    fn view_options_take_a_count_zero_meaning_all() {
        let view = |args: &[&str]| {
            let raw: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
            parse_view_options(&raw).map_err(|e| e.to_string())
        };
        assert_eq!(view(&[]), Ok(Limit::AtMost(DEFAULT_VIEW_COUNT)));
        assert_eq!(view(&["COUNT", "3"]), Ok(Limit::AtMost(3)));
        assert_eq!(view(&["count", "0"]), Ok(Limit::All));
        assert_eq!(
            view(&["COUNT", "9223372036854775807"]),
            Ok(Limit::AtMost(i64::MAX as usize))
        );
        let errors: &[(&[&str], &str)] = &[
            (&["COUNT"], "ERR syntax error: COUNT needs a value"),
            (
                &["COUNT", "-1"],
                "ERR invalid COUNT '-1': must not be negative",
            ),
            (
                &["COUNT", "x"],
                "ERR invalid COUNT 'x': not an integer or out of range",
            ),
            (
                &["COUNT", "1.5"],
                "ERR invalid COUNT '1.5': not an integer or out of range",
            ),
            (
                &["COUNT", "1", "COUNT", "2"],
                "ERR syntax error: COUNT given more than once",
            ),
            (&["LIMIT", "1"], "ERR syntax error: unknown option 'LIMIT'"),
            (&["PX", "1"], "ERR syntax error: unknown option 'PX'"),
        ];
        for (args, want) in errors {
            assert_eq!(view(args), Err(want.to_string()), "{args:?}");
        }
        assert_eq!(Limit::of(0), Limit::All);
        assert_eq!(Limit::All.max(), usize::MAX);
        assert_eq!(Limit::of(4).max(), 4);
    }

    #[test]
    fn owner_must_not_be_empty() {
        assert!(parse_owner(b"").is_err());
        assert_eq!(parse_owner(b"a:1"), Ok(&b"a:1"[..]));
    }

    #[test]
    fn integers_follow_redis_rules() {
        let ok: &[(&str, i64)] = &[
            ("0", 0),
            ("7", 7),
            ("-7", -7),
            ("9223372036854775807", i64::MAX),
            ("-9223372036854775808", i64::MIN),
        ];
        for (s, n) in ok {
            assert_eq!(parse_i64(s.as_bytes()), Some(*n), "{s}");
        }
        for s in [
            "",
            "-",
            "-0",
            "+1",
            "01",
            " 1",
            "1 ",
            "1a",
            "9223372036854775808",
            "-9223372036854775809",
            "18446744073709551616",
        ] {
            assert_eq!(parse_i64(s.as_bytes()), None, "{s:?}");
        }
    }

    #[test]
    fn a_campaign_is_fenced_needs_keepalive_or_session_and_takes_a_value() {
        let campaign = |args: &[&str]| {
            let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
            parse_campaign_options(&args)
        };
        let (options, value) =
            campaign(&["VALUE", "10.0.0.5:80", "px", "5000", "KEEPALIVE"]).expect("valid");
        assert!(options.fence);
        assert_eq!(options.lease_ms, Some(5000));
        assert_eq!(options.keepalive, Some(KeepAlive::Caller));
        assert_eq!(value.as_deref(), Some(&b"10.0.0.5:80"[..]));
        let (options, value) = campaign(&["SESSION", "t", "BLOCK", "0"]).expect("valid");
        assert_eq!(options.keepalive, Some(KeepAlive::Session(b"t"[..].into())));
        assert_eq!(options.wait, Some(Wait::Forever));
        assert_eq!(value, None);
        for bad in [
            &["PX", "5000"][..],
            &["KEEPALIVE", "FENCE"],
            &["KEEPALIVE", "VALUE"],
            &["KEEPALIVE", "VALUE", "a", "VALUE", "b"],
            &["SESSION", ""],
        ] {
            let e = campaign(bad).expect_err("invalid");
            assert_eq!(e.code(), "ERR", "{bad:?}");
        }
    }

    #[test]
    fn an_observer_gives_a_term_and_a_block_time() {
        let observe = |args: &[&str]| {
            let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
            parse_observe_options(&args)
        };
        assert_eq!(observe(&[]), Ok((0, None)));
        assert_eq!(
            observe(&["term", "17", "BLOCK", "250"]),
            Ok((17, Some(Wait::Millis(250))))
        );
        for bad in [
            &["TERM", "-1"][..],
            &["TERM", "x"],
            &["TERM"],
            &["COUNT", "1"],
        ] {
            assert!(observe(bad).is_err(), "{bad:?}");
        }
    }
}
