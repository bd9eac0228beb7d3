//! Fuzzes the command surface against a live server: random argument vectors
//! for every command the module registers (`COMMAND LIST FILTERBY MODULE
//! lock`, matched by name to [`Cmd`]: the test fails naming a registered
//! command it has no grammar for), today LOCK.ACQUIRE, RACQUIRE, WACQUIRE,
//! MACQUIRE, MRELEASE, RELEASE, RENEW, FORCERELEASE, INFO, WAITERS, QUEUES,
//! SESSION and CANCEL, SEM.INIT, ACQUIRE, RELEASE, RENEW, ADD, TAKE, GIVE and
//! INFO, LATCH.INIT, COUNTDOWN, AWAIT and INFO, ELECT.CAMPAIGN, RESIGN,
//! PROCLAIM, LEADER and OBSERVE
//! (0 to 10 arguments of random bytes, NUL, CR/LF,
//! non-UTF-8, boundary and huge numbers, option words in any case, unknown
//! options, keys of every other type, 1 MB owners), sent as raw RESP over a
//! TCP socket so every byte reaches the server unmodified.
//!
//! Every reply must be an error whose first word is an upper-case code or a
//! valid answer for the command. An error (and a nil acquire of any kind, a
//! LOCK.INFO, a FORCERELEASE that removed nothing) must change nothing:
//! `DEBUG DIGEST` and the key's `PEXPIRETIME` are compared before and after.
//! Where the pure rules (`lock_rules::args`, `multilock`, `keys`) predict an
//! error (arity, numkeys, a key named twice, empty owner, options, permit
//! counts and amounts, a FENCE name whose token key, a read hold's lease key
//! or a semaphore's permit set is in another slot) the reply must be exactly
//! that error, and an owner a read-write lock reserves never gets an answer;
//! an error that depends on the data must be one the command may give.
//!
//! Elections: after a vector (every ELECT.* one, every one naming a name
//! that may be an election, 1 in 8 of the others) each leader record
//! (`{key}:leader`, a hash) must name, with a term above 0, a candidate
//! that holds its election's lock (exclusively: a lock hash of one field,
//! the candidate), and expire with that lock (same `PEXPIRETIME`): no
//! record outlives its leadership, whatever the path. A term ELECT.CAMPAIGN
//! or ELECT.PROCLAIM answers is the record's, with the value given; what
//! ELECT.LEADER and ELECT.OBSERVE answer is the record (nobody when there
//! is none), and an ELECT.OBSERVE answered nil saw the term it named. The
//! fuzz connection names a session at each reset (`SESSION` in a campaign
//! names it, or not), and a lock may be named like an election's record.
//!
//! The server must answer PING at the end and its log must hold
//! no crash report or caught panic. One vector in 16 is sent inside
//! MULTI/EXEC (where `BLOCK` must answer at once), and each epoch speaks
//! RESP2 or RESP3 (LOCK.INFO as an array or a map).
//!
//! `LOCK_FUZZ_VECTORS` (default 40000, about 7 s; `make fuzz` runs 1M) and
//! `LOCK_FUZZ_SEED` (decimal or 0x hex; printed at the start and on failure)
//! override the run. The vectors of a seed are always the same;
//! `LOCK_FUZZ_TRACE=1` prints each vector and its reply.
//!
//! To keep the check exact and the run bounded, three things are held fixed:
//! - Leases never run out during a run: the default lease is 10^12 ms and a
//!   valid `PX`/`EX` value under an hour is sent an hour longer, so no key
//!   (a lock, a read hold's lease key) expires (lazily, inside an erroring
//!   call) between two digests.
//! - A valid `BLOCK` value is sent as 1 to 5 ms (`BLOCK 0` would wait
//!   forever on a held lock); invalid ones (negative, huge, not numbers) are
//!   sent as generated and must fail at once.
//! - A valid `PERMITS` value over 100 is sent as 1 to 100 (each permit an
//!   owner holds is a member of the semaphore's sorted set, which `DEBUG
//!   DIGEST` reads after every vector); invalid ones are sent as generated.
//! - The data set is reset (FLUSHALL, then the fixtures) every
//!   `EPOCH` vectors and after each vector with a 1 MB argument, so
//!   `DEBUG DIGEST` stays cheap.

use crate::common;
use common::*;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Instant;

use common::commands::{self, Cmd};
use lock_rules::args::{
    parse_acquire_options, parse_amount, parse_block_option, parse_campaign_options, parse_i64,
    parse_lease_option, parse_observe_options, parse_permits_option, parse_renew_options,
    parse_semaphore_acquire_options, parse_take_options, parse_view_options, MAX_DURATION_MS,
    MAX_PERMITS_PER_CALL,
};
use lock_rules::error::{printable, LockError};
use lock_rules::keepalive::check_lease;
use lock_rules::keys::{
    elections_of_leader_key, leader_key, leader_key_in_slot, permits_key_in_slot,
    read_lease_key_in_slot, token_key_in_slot,
};
use lock_rules::latch::MAX_COUNT;
use lock_rules::multilock::{check_distinct, parse_numkeys};
use lock_rules::read_write::check_owner;
use lock_rules::request::KeepAlive;
use lock_rules::semaphore::MAX_PERMITS;

/// `lock.default-lease-ms` of the fuzzed server: no lease runs out in a run.
const DEFAULT_LEASE_MS: i64 = 1_000_000_000_000;
/// Vectors between two resets of the data set.
const EPOCH: u64 = 500;
/// Vectors sent in one write (pipelined).
const BATCH: usize = 64;
/// 1 MB arguments: 1 option argument in N, 1 owner in N/2, and 1 vector in
/// N is a valid call with a 1 MB owner or key.
const HUGE_ONE_IN: u64 = 4000;
const HUGE_LEN: usize = 1 << 20;

// ------------------------------------------------------------------ RESP

#[derive(Clone, PartialEq)]
enum Reply {
    Status(Vec<u8>),
    Error(Vec<u8>),
    Int(i64),
    Bulk(Vec<u8>),
    Nil,
    Array(Vec<Reply>),
    /// RESP3 map, flattened to key, value, key, value...
    Map(Vec<Reply>),
    /// Any other RESP3 type: its type byte and line.
    Other(u8, Vec<u8>),
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reply::Status(s) => write!(f, "+\"{}\"", show(s)),
            Reply::Error(e) => write!(f, "-\"{}\"", show(e)),
            Reply::Int(n) => write!(f, ":{n}"),
            Reply::Bulk(b) => write!(f, "b\"{}\"", show(b)),
            Reply::Nil => write!(f, "nil"),
            Reply::Array(items) => f.debug_list().entries(items).finish(),
            Reply::Map(items) => write!(f, "map {items:?}"),
            Reply::Other(kind, line) => write!(f, "{}\"{}\"", char::from(*kind), show(line)),
        }
    }
}

struct Conn {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

fn encode(out: &mut Vec<u8>, args: &[Vec<u8>]) {
    let _ = write!(out, "*{}\r\n", args.len());
    for a in args {
        let _ = write!(out, "${}\r\n", a.len());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

impl Conn {
    fn open(server: &Server) -> Conn {
        let stream = TcpStream::connect(server.addr()).expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        // A vector that blocks for good fails the test instead of hanging it.
        stream.set_read_timeout(Some(PATIENCE)).expect("timeout");
        Conn {
            reader: BufReader::with_capacity(1 << 16, stream.try_clone().expect("clone")),
            writer: stream,
        }
    }

    fn line(&mut self) -> io::Result<Vec<u8>> {
        let mut line = Vec::new();
        self.reader.read_until(b'\n', &mut line)?;
        if !line.ends_with(b"\r\n") {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("connection closed or bad line {:?}", show(&line)),
            ));
        }
        line.truncate(line.len() - 2);
        Ok(line)
    }

    fn number(line: &[u8]) -> io::Result<i64> {
        std::str::from_utf8(line)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| io::Error::other(format!("bad number {:?}", show(line))))
    }

    fn read(&mut self) -> io::Result<Reply> {
        let line = self.line()?;
        let Some((&kind, rest)) = line.split_first() else {
            return Err(io::Error::other("empty reply line"));
        };
        Ok(match kind {
            b'+' => Reply::Status(rest.to_vec()),
            b'-' => Reply::Error(rest.to_vec()),
            b':' => Reply::Int(Self::number(rest)?),
            b'_' => Reply::Nil,
            b'$' | b'=' => {
                let n = Self::number(rest)?;
                if n < 0 {
                    Reply::Nil
                } else {
                    let mut body = vec![0; n as usize + 2];
                    self.reader.read_exact(&mut body)?;
                    body.truncate(n as usize);
                    Reply::Bulk(body)
                }
            }
            b'*' | b'~' | b'>' => {
                let n = Self::number(rest)?;
                if n < 0 {
                    Reply::Nil
                } else {
                    let items = (0..n).map(|_| self.read()).collect::<io::Result<_>>()?;
                    Reply::Array(items)
                }
            }
            b'%' => {
                let n = Self::number(rest)?;
                let items = (0..2 * n).map(|_| self.read()).collect::<io::Result<_>>()?;
                Reply::Map(items)
            }
            other => Reply::Other(other, rest.to_vec()),
        })
    }

    fn send(&mut self, buf: &[u8]) -> io::Result<()> {
        self.writer.write_all(buf)
    }

    /// One command, for the set-up: the reply must not be an error.
    fn call(&mut self, args: &[&[u8]]) -> Reply {
        let args: Vec<Vec<u8>> = args.iter().map(|a| a.to_vec()).collect();
        let mut buf = Vec::new();
        encode(&mut buf, &args);
        self.send(&buf).expect("send");
        let reply = self.read().expect("reply");
        assert!(
            !matches!(reply, Reply::Error(_)),
            "{:?} -> {reply:?}",
            args.iter().map(|a| show(a)).collect::<Vec<_>>()
        );
        reply
    }
}

/// Bytes as a Rust byte-string body: printable ASCII as is, the rest
/// escaped; long values abbreviated.
fn show(raw: &[u8]) -> String {
    let mut out = String::new();
    for &b in raw.iter().take(80) {
        match b {
            b'"' | b'\\' => {
                out.push('\\');
                out.push(char::from(b));
            }
            0x20..=0x7e => out.push(char::from(b)),
            _ => {
                let _ = write!(out, "\\x{b:02x}");
            }
        }
    }
    if raw.len() > 80 {
        let _ = write!(out, "...({} bytes)", raw.len());
    }
    out
}

fn show_vector(args: &[Vec<u8>]) -> String {
    let parts: Vec<String> = args.iter().map(|a| format!("b\"{}\"", show(a))).collect();
    format!("[{}]", parts.join(", "))
}

// ------------------------------------------------------------- fixtures

const HOLDER: &[u8] = b"holder";
/// The session the fuzz connection names at the start of each epoch.
const SESSION: &[u8] = b"fuzz-session";

/// Keys present before every epoch, one of each type and each kind of
/// not-a-lock hash, a held lock and token keys of every awkward kind.
fn load_fixtures(con: &mut Conn) {
    let setup: &[&[&[u8]]] = &[
        &[b"LOCK.SESSION", SESSION],
        &[b"FLUSHALL"],
        &[b"SET", b"str", b"value"],
        &[b"RPUSH", b"list", b"a", b"b"],
        &[b"SADD", b"set", b"a"],
        &[b"ZADD", b"zset", b"1", b"a"],
        &[b"XADD", b"stream", b"*", b"f", b"v"],
        &[b"HSET", b"hash2", b"a", b"1", b"b", b"2"],
        &[b"HSET", b"hashbad", HOLDER, b"notanumber"],
        &[b"HSET", b"hashzero", HOLDER, b"0"],
        &[b"HSET", b"hashneg", HOLDER, b"-3"],
        &[b"HSET", b"hashhuge", HOLDER, b"99999999999999999999"],
        &[b"HSET", b"hashlead0", HOLDER, b"01"],
        &[b"HSET", b"hashplus", HOLDER, b"+1"],
        // Locks written by others: an empty owner field, no lease.
        &[b"HSET", b"emptyowner", b"", b"1"],
        &[b"PEXPIRE", b"emptyowner", b"3600000000"],
        &[b"HSET", b"nottl", HOLDER, b"3"],
        // Not locks, with bytes an error line must escape when it quotes them.
        &[b"HSET", b"hashweird", b"\r\n\x00\xff", b"x\r\ny\x00"],
        &[b"HSET", b"hashlong", &[b'\n'; 300], &[0xff; 300]],
        &[b"LOCK.ACQUIRE", b"held", HOLDER, b"PX", b"3600000000"],
        &[
            b"LOCK.ACQUIRE",
            b"fenced",
            HOLDER,
            b"PX",
            b"3600000000",
            b"FENCE",
        ],
        &[b"HSET", b"maxheld", HOLDER, b"9223372036854775807"],
        &[b"PEXPIRE", b"maxheld", b"3600000000"],
        &[b"SET", b"redisson_lock_token:{tokstr}", b"abc"],
        &[b"RPUSH", b"redisson_lock_token:{toklist}", b"x"],
        &[
            b"SET",
            b"redisson_lock_token:{tokmax}",
            b"9223372036854775807",
        ],
        &[b"SET", b"redisson_lock_token:{tokneg}", b"-5"],
        // Read-write locks: two readers; a writer that also reads (its
        // RELEASE must name READ or WRITE); a hash with a mode and no holder.
        &[b"LOCK.RACQUIRE", b"rwread", HOLDER, b"PX", b"3600000000"],
        &[b"LOCK.RACQUIRE", b"rwread", b"o1", b"PX", b"3600000000"],
        &[b"LOCK.WACQUIRE", b"rwwrite", HOLDER, b"PX", b"3600000000"],
        &[b"LOCK.RACQUIRE", b"rwwrite", HOLDER, b"PX", b"3600000000"],
        &[b"HSET", b"rwbad", b"mode", b"read"],
        // Semaphores: 1 of 3 permits left (the holder has 2); none left;
        // a counter at 0 and no permit set; 1 below zero (SEM.ADD took away
        // a permit the holder has); a Redisson permit (its random id, no
        // lease); a permit set of the wrong type; the most permits there
        // may be.
        &[b"SEM.INIT", b"sem", b"3"],
        &[
            b"SEM.ACQUIRE",
            b"sem",
            HOLDER,
            b"PERMITS",
            b"2",
            b"PX",
            b"3600000000",
        ],
        &[b"SEM.INIT", b"semfull", b"1"],
        &[
            b"SEM.ACQUIRE",
            b"semfull",
            HOLDER,
            b"PX",
            b"3600000000",
            b"FENCE",
        ],
        &[b"SET", b"semzero", b"0"],
        &[b"SEM.INIT", b"semneg", b"2"],
        &[
            b"SEM.ACQUIRE",
            b"semneg",
            HOLDER,
            b"PERMITS",
            b"2",
            b"PX",
            b"3600000000",
        ],
        &[b"SEM.ADD", b"semneg", b"-1"],
        &[b"SET", b"semredisson", b"1"],
        &[
            b"ZADD",
            b"{semredisson}:timeout",
            b"922337203685477",
            b"\x8f\x01\xaa\x00redisson:id",
        ],
        &[b"SET", b"semzbad", b"2"],
        &[b"RPUSH", b"{semzbad}:timeout", b"x"],
        &[b"SET", b"semmax", b"2147483647"],
        // Latches: a count of 3; one with an expiry; an open one (0) and
        // one Redisson's count-down of a missing latch left at -1.
        &[b"LATCH.INIT", b"latch", b"3"],
        &[b"LATCH.INIT", b"latchpx", b"5", b"PX", b"3600000000"],
        &[b"SET", b"latchzero", b"0"],
        &[b"SET", b"latchneg", b"-1"],
        // Elections: one led by the holder with a value, one without, their
        // counters set past the clock's floor so that their terms are
        // `TERMS`' (7000000000000001, ...); one nobody leads any more.
        &[
            b"SET",
            b"redisson_lock_token:{elected}",
            b"7000000000000000",
        ],
        &[
            b"ELECT.CAMPAIGN",
            b"elected",
            HOLDER,
            b"VALUE",
            b"10.0.0.5:8080",
            b"PX",
            b"3600000000",
            b"KEEPALIVE",
        ],
        &[
            b"SET",
            b"redisson_lock_token:{elnoval}",
            b"7000000000000010",
        ],
        &[
            b"ELECT.CAMPAIGN",
            b"elnoval",
            HOLDER,
            b"PX",
            b"3600000000",
            b"SESSION",
            SESSION,
        ],
        &[b"ELECT.CAMPAIGN", b"elresigned", HOLDER, b"KEEPALIVE"],
        &[b"ELECT.RESIGN", b"elresigned", HOLDER],
    ];
    // In one write: a reset costs one round trip.
    let mut buf = Vec::new();
    for args in setup {
        encode(
            &mut buf,
            &args.iter().map(|a| a.to_vec()).collect::<Vec<_>>(),
        );
    }
    con.send(&buf).expect("send the fixtures");
    for args in setup {
        let reply = con.read().expect("a fixture's reply");
        assert!(
            !matches!(reply, Reply::Error(_)),
            "{:?} -> {reply:?}",
            show_vector(&args.iter().map(|a| a.to_vec()).collect::<Vec<_>>())
        );
    }
}

const KEYS: &[&[u8]] = &[
    b"str",
    b"list",
    b"set",
    b"zset",
    b"stream",
    b"hash2",
    b"hashbad",
    b"hashzero",
    b"hashneg",
    b"hashhuge",
    b"hashlead0",
    b"hashplus",
    b"emptyowner",
    b"nottl",
    b"hashweird",
    b"hashlong",
    b"held",
    b"fenced",
    b"maxheld",
    b"tokstr",
    b"toklist",
    b"tokmax",
    b"tokneg",
    b"rwread",
    b"rwwrite",
    b"rwbad",
    b"free",
    b"free2",
    b"",
    b"{}x",
    b"a{b",
    b"{t}lock",
    b"k\x00nul",
    b"k\r\nx",
    b"\xff\xfe",
    b"redisson_lock_token:{fenced}",
    b"redisson_lock_token:{tokmax}",
];

/// The semaphores and latches of the fixtures (any command may be sent
/// one), a semaphore's permit set and a free name.
const SEM_KEYS: &[&[u8]] = &[
    b"sem",
    b"semfull",
    b"semzero",
    b"semneg",
    b"semredisson",
    b"semzbad",
    b"semmax",
    b"{sem}:timeout",
    b"free",
];
const LATCH_KEYS: &[&[u8]] = &[b"latch", b"latchpx", b"latchzero", b"latchneg", b"free"];
/// The elections of the fixtures, locks held outside ELECT.* (exclusive,
/// fenced, read-write), a string, free names, names whose record would
/// hash elsewhere, and the name of `elected`'s record (a lock may be
/// called so once `elected` is free).
const ELECT_KEYS: &[&[u8]] = &[
    b"elected",
    b"elnoval",
    b"elresigned",
    b"held",
    b"fenced",
    b"nottl",
    b"rwread",
    b"rwwrite",
    b"str",
    b"free",
    b"free2",
    b"{t}lock",
    b"{}x",
    b"a{b",
    b"{elected}:leader",
];
/// Terms ELECT.OBSERVE names: none seen, the fixtures' leaders' (and the
/// next ones of `elected`), any.
const TERMS: &[&[u8]] = &[
    b"0",
    b"7000000000000001",
    b"7000000000000002",
    b"7000000000000003",
    b"7000000000000011",
    b"1",
];
/// Tokens `SESSION` names: mostly the fuzz connection's.
const SESSION_TOKENS: &[&[u8]] = &[SESSION, SESSION, SESSION, b"held", b"free", b"other", b""];

const OWNERS: &[&[u8]] = &[
    HOLDER,
    b"HOLDER",
    b"holder\x00",
    b"o1",
    b"o2",
    b"",
    b"\x00",
    b"\r\n",
    b"\xff\xfe\xfd",
    b"uuid-1:42",
    // Reserved in a read-write lock.
    b"mode",
    b"x:write",
];

const OPTIONS: &[&str] = &["PX", "EX", "BLOCK", "FENCE", "KEEPALIVE"];

const UNKNOWN_OPTIONS: &[&[u8]] = &[
    // LOCK.RELEASE's kinds, unknown to the other commands.
    b"READ",
    b"write",
    b"NX",
    b"XX",
    b"KEEPTTL",
    b"PXAT",
    b"EXAT",
    b"GET",
    b"BLOCKING",
    b"FENCED",
    b"P",
    b"PXX",
    b"P X",
    b"PX\x00",
    b"\x00PX",
    b" PX",
    b"PX ",
    b"-PX",
    b"",
    b"\xef\xbc\xb0\xef\xbc\xb8", // fullwidth "PX"
    b"LEASE",
    b"TIMEOUT",
    // SEM.*'s, unknown to the others.
    b"PERMITS",
    b"permit",
    b"SESSIONS",
];

const NUMBERS: &[&[u8]] = &[
    b"0",
    b"-0",
    b"1",
    b"-1",
    b"2",
    b"5",
    b"20",
    // Around the shortest KEEPALIVE lease at hz 10.
    b"703",
    b"704",
    b"1000",
    b"30000",
    b"3600",
    b"3600000",
    b"9223372036854775807",
    b"-9223372036854775808",
    b"9223372036854775808",
    b"-9223372036854775809",
    b"18446744073709551615",
    b"18446744073709551616",
    b"99999999999999999999999999999999999999",
    b"1000000000000000",
    b"1000000000000001",
    b"9007199254740991",
    b"9007199254740992",
    b"999999999999999",
    b"1000000000000",
    b"1000000000001",
    b"9007199254741",
    b"9223372036854776",
    b"1e3",
    b" 5",
    b"5 ",
    b"+5",
    b"0x10",
    b"007",
    b"00",
    b"1.5",
    b"-1.5",
    b"1.0",
    b"",
    b"\x005",
    b"5\x00",
    b"\xd9\xa1\xd9\xa2", // Arabic-Indic digits
    b"inf",
    b"-inf",
    b"nan",
    b" ",
    b"5\r\n",
    b"--5",
    b"-",
];

/// A command name: one of `cmds` (the server's, by [`Cmd::weight`]), in any
/// case, and now and then one the server does not know.
fn command_name(rng: &mut Rng, cmds: &[Cmd]) -> Vec<u8> {
    if rng.one_in(200) {
        return rng
            .pick(&[
                &b"LOCK.ACQUIREX"[..],
                b"LOCK.",
                b"LOCK",
                b"LOCK.ACQUIRE\x00",
                b"LOCK.INF",
                b"LOCK.WAITER",
                b"LOCK.QUEUE",
                b"LOCK.RACQUIR",
                b"LOCK.MRELEASEX",
                b"LOCK.MACQUIRE\x00",
            ])
            .to_vec();
    }
    let total: u64 = cmds.iter().map(|c| c.weight()).sum();
    let mut at = rng.below(total);
    let cmd = cmds
        .iter()
        .find(|c| {
            let hit = at < c.weight();
            at = at.saturating_sub(c.weight());
            hit
        })
        .expect("a command");
    any_case(rng, cmd.name().to_ascii_uppercase().as_bytes())
}

fn any_case(rng: &mut Rng, word: &[u8]) -> Vec<u8> {
    match rng.below(4) {
        0 => word.to_ascii_lowercase(),
        1 => word
            .iter()
            .map(|b| {
                if rng.one_in(2) {
                    b.to_ascii_lowercase()
                } else {
                    b.to_ascii_uppercase()
                }
            })
            .collect(),
        _ => word.to_vec(),
    }
}

fn random_bytes(rng: &mut Rng) -> Vec<u8> {
    let len = if rng.one_in(10) {
        rng.below(300)
    } else {
        rng.below(16)
    } as usize;
    (0..len)
        .map(|_| match rng.below(8) {
            0 => *rng.pick(&[0u8, b'\r', b'\n', b' ', 0xff, 0x80, b'{', b'}']),
            1..=3 => rng.below(256) as u8,
            _ => *rng.pick(b"PXEBLOCKFNpxeblockfn0123456789-+"),
        })
        .collect()
}

fn number(rng: &mut Rng) -> Vec<u8> {
    match rng.below(6) {
        0 | 1 => rng.pick(NUMBERS).to_vec(),
        2 => (rng.range(0, 5100) as i64 - 100).to_string().into_bytes(),
        3 => (rng.next() as i64).to_string().into_bytes(),
        4 => {
            // Around the duration limit, in ms and in s.
            let base = *rng.pick(&[MAX_DURATION_MS, MAX_DURATION_MS / 1000, i64::MAX / 1000]);
            (base + rng.range(0, 4) as i64 - 2).to_string().into_bytes()
        }
        _ => {
            let digits = rng.range(1, 40) as usize;
            (0..digits)
                .map(|_| b'0' + rng.below(10) as u8)
                .collect::<Vec<u8>>()
        }
    }
}

fn option_word(rng: &mut Rng) -> Vec<u8> {
    if rng.one_in(5) {
        rng.pick(UNKNOWN_OPTIONS).to_vec()
    } else {
        let word = rng.pick(OPTIONS).as_bytes().to_vec();
        any_case(rng, &word)
    }
}

fn huge(rng: &mut Rng) -> Vec<u8> {
    let fill = *rng.pick(&[b'o', 0u8, 0xff]);
    vec![fill; HUGE_LEN]
}

fn key(rng: &mut Rng) -> Vec<u8> {
    match rng.below(20) {
        0 | 1 => random_bytes(rng),
        2 => any_arg(rng),
        3 => rng.pick(SEM_KEYS).to_vec(),
        4 => rng.pick(LATCH_KEYS).to_vec(),
        5 => rng.pick(ELECT_KEYS).to_vec(),
        _ => rng.pick(KEYS).to_vec(),
    }
}

fn owner(rng: &mut Rng) -> Vec<u8> {
    if rng.one_in(HUGE_ONE_IN / 2) {
        return huge(rng);
    }
    match rng.below(10) {
        0 => random_bytes(rng),
        1 => any_arg(rng),
        _ => rng.pick(OWNERS).to_vec(),
    }
}

fn option_arg(rng: &mut Rng) -> Vec<u8> {
    if rng.one_in(HUGE_ONE_IN) {
        return huge(rng);
    }
    match rng.below(20) {
        0..=8 => option_word(rng),
        9..=16 => number(rng),
        _ => random_bytes(rng),
    }
}

fn any_arg(rng: &mut Rng) -> Vec<u8> {
    match rng.below(6) {
        0 => rng.pick(KEYS).to_vec(),
        1 => rng.pick(OWNERS).to_vec(),
        2 => option_word(rng),
        3 => number(rng),
        _ => random_bytes(rng),
    }
}

fn lease_word(rng: &mut Rng) -> &'static [u8] {
    if rng.one_in(2) {
        b"PX"
    } else {
        b"EX"
    }
}

/// An option as the grammar has it (a name and, but for FENCE, a value),
/// often with a value the parser accepts.
fn option_group(rng: &mut Rng, cmd: Cmd, out: &mut Vec<Vec<u8>>) {
    let own = cmd.options().unwrap_or_default();
    let word = if cmd == Cmd::Renew && rng.one_in(2) {
        let word = lease_word(rng);
        any_case(rng, word)
    } else if cmd == Cmd::ElectCampaign && !rng.one_in(6) {
        // Mostly a value and a wait, now and then a second KEEPALIVE or
        // SESSION (see `vector`).
        let word = rng.pick(&[
            "VALUE",
            "VALUE",
            "PX",
            "EX",
            "BLOCK",
            "BLOCK",
            "BLOCK",
            "KEEPALIVE",
            "SESSION",
        ]);
        any_case(rng, word.as_bytes())
    } else if (cmd.is_semaphore() || cmd.is_latch() || cmd.is_election()) && !rng.one_in(4) {
        // The SEM.*, LATCH.* and ELECT.* commands get their own options,
        // mostly.
        let word = rng.pick(own).as_bytes();
        any_case(rng, word)
    } else {
        option_word(rng)
    };
    let value = match word.to_ascii_uppercase().as_slice() {
        b"FENCE" | b"KEEPALIVE" => return out.push(word),
        b"VALUE" if !rng.one_in(4) => owner(rng),
        b"SESSION" if !rng.one_in(4) => rng.pick(SESSION_TOKENS).to_vec(),
        b"TERM" if !rng.one_in(4) => rng.pick(TERMS).to_vec(),
        b"PERMITS" if !rng.one_in(3) => rng.range(1, 4).to_string().into_bytes(),
        b"PX" if rng.one_in(2) => rng.range(1, 100_000).to_string().into_bytes(),
        b"EX" if rng.one_in(2) => rng.range(1, 1_000).to_string().into_bytes(),
        b"BLOCK" if rng.one_in(2) => rng.range(0, 10).to_string().into_bytes(),
        _ if rng.one_in(5) => option_arg(rng),
        _ => number(rng),
    };
    out.push(word);
    out.push(value);
}

/// `COUNT n` (LOCK.WAITERS, LOCK.QUEUES), n mostly a count, any case.
fn count_group(rng: &mut Rng, out: &mut Vec<Vec<u8>>) {
    out.push(any_case(rng, b"COUNT"));
    let value = match rng.below(4) {
        0 | 1 => rng.range(0, 20).to_string().into_bytes(),
        2 => number(rng),
        _ => option_arg(rng),
    };
    out.push(value);
}

/// Locks the fixtures give to `HOLDER`.
const HELD: &[&[u8]] = &[
    b"held", b"fenced", b"maxheld", b"nottl", b"rwread", b"rwwrite", b"elected", b"elnoval",
];

/// Semaphores the fixtures give `HOLDER` permits of.
const SEM_HELD: &[&[u8]] = &[b"sem", b"semfull", b"semneg"];

/// A key for `cmd`: a semaphore or a latch for their commands half the
/// time, else any.
fn key_for(rng: &mut Rng, cmd: Cmd) -> Vec<u8> {
    if cmd.is_semaphore() && rng.one_in(2) {
        return rng.pick(SEM_KEYS).to_vec();
    }
    if cmd.is_latch() && rng.one_in(2) {
        return rng.pick(LATCH_KEYS).to_vec();
    }
    if cmd.is_election() && rng.one_in(2) {
        return rng.pick(ELECT_KEYS).to_vec();
    }
    key(rng)
}

/// The integer after the key (see [`Cmd::amount`]): mostly a small valid
/// one.
fn amount(rng: &mut Rng, cmd: Cmd) -> Vec<u8> {
    if rng.one_in(4) {
        return number(rng);
    }
    let n = match cmd {
        Cmd::SemInit => rng.range(0, 5) as i64,
        Cmd::SemAdd => rng.range(0, 8) as i64 - 3,
        _ => rng.range(1, 3) as i64,
    };
    n.to_string().into_bytes()
}

/// `numkeys key [key ...] owner` (LOCK.MACQUIRE, LOCK.MRELEASE): mostly the
/// count of the keys that follow, now and then a key named twice or keys
/// all held by `HOLDER`, named with it.
fn multi_keys(rng: &mut Rng, out: &mut Vec<Vec<u8>>) {
    let n = rng.range(1, 3) as usize;
    let (keys, owner) = if rng.one_in(3) {
        let mut keys: Vec<Vec<u8>> = Vec::new();
        while keys.len() < n {
            let k = rng.pick(HELD).to_vec();
            if !keys.contains(&k) || rng.one_in(8) {
                keys.push(k);
            }
        }
        (keys, HOLDER.to_vec())
    } else {
        ((0..n).map(|_| key(rng)).collect(), owner(rng))
    };
    let numkeys = match rng.below(10) {
        0 => number(rng),
        1 => (n + 1).to_string().into_bytes(),
        2 => n.saturating_sub(1).to_string().into_bytes(),
        _ => n.to_string().into_bytes(),
    };
    out.push(numkeys);
    out.extend(keys);
    out.push(owner);
}

/// A command name and 0 to 10 arguments: mostly shaped like the grammar
/// (key, owner, options), sometimes with too few or too many, sometimes
/// anything anywhere.
fn vector(rng: &mut Rng, cmds: &[Cmd]) -> Vec<Vec<u8>> {
    let name = command_name(rng, cmds);
    let cmd = Cmd::from_name(&name);
    let mut args = vec![name];
    match cmd {
        Some(cmd) if rng.one_in(HUGE_ONE_IN) => {
            // A valid call with a 1 MB owner or key name.
            let (key, owner) = if rng.one_in(3) {
                (huge(rng), HOLDER.to_vec())
            } else {
                (
                    rng.pick(&[&b"free"[..], b"held", b"str"]).to_vec(),
                    huge(rng),
                )
            };
            if cmd.is_multi() {
                args.push(b"1".to_vec());
            }
            if cmd != Cmd::Queues {
                args.push(key);
            }
            if cmd.takes_owner() {
                args.push(owner);
            }
            if cmd.amount().is_some() {
                args.push(b"1".to_vec());
            }
            if cmd == Cmd::ElectProclaim {
                args.push(huge(rng));
            }
            if cmd.options().is_some_and(|o| o.contains(&"PX")) && rng.one_in(2) {
                args.extend([b"PX".to_vec(), b"100000".to_vec()]);
            }
            if cmd == Cmd::ElectCampaign {
                args.push(b"KEEPALIVE".to_vec());
            }
        }
        Some(cmd) if !rng.one_in(4) => {
            if cmd.is_multi() {
                multi_keys(rng, &mut args);
            } else {
                let key = key_for(rng, cmd);
                let held = HELD.contains(&&key[..]) || SEM_HELD.contains(&&key[..]);
                if cmd != Cmd::Queues {
                    args.push(key);
                }
                if cmd.takes_owner() {
                    // The holder, often, where there is one: renewals,
                    // releases and re-entries get past the owner check.
                    let owner = if held && rng.one_in(2) {
                        HOLDER.to_vec()
                    } else {
                        owner(rng)
                    };
                    args.push(owner);
                }
                if cmd.amount().is_some() && (cmd != Cmd::LatchCountDown || !rng.one_in(3)) {
                    args.push(amount(rng, cmd));
                }
                if cmd == Cmd::ElectProclaim {
                    // The leader's new value.
                    args.push(owner(rng));
                }
            }
            if cmd.takes_options() {
                let groups = rng.below(4);
                // ELECT.CAMPAIGN needs KEEPALIVE or SESSION: mostly there,
                // anywhere among the options.
                let keep_at =
                    (cmd == Cmd::ElectCampaign && !rng.one_in(5)).then(|| rng.below(groups + 1));
                for i in 0..=groups {
                    if keep_at == Some(i) {
                        if rng.one_in(3) {
                            args.push(any_case(rng, b"SESSION"));
                            args.push(rng.pick(SESSION_TOKENS).to_vec());
                        } else {
                            args.push(any_case(rng, b"KEEPALIVE"));
                        }
                    }
                    if i == groups {
                        break;
                    }
                    if rng.one_in(6) {
                        args.push(option_arg(rng));
                    } else {
                        option_group(rng, cmd, &mut args);
                    }
                }
            }
            if cmd == Cmd::Release && rng.one_in(3) {
                let side = *rng.pick(&[&b"READ"[..], b"WRITE"]);
                args.push(any_case(rng, side));
            }
            if matches!(cmd, Cmd::Waiters | Cmd::Queues) {
                for _ in 0..rng.below(3) {
                    if rng.one_in(6) {
                        args.push(option_arg(rng));
                    } else {
                        count_group(rng, &mut args);
                    }
                }
            }
            if rng.one_in(6) {
                // Arity errors: cut anywhere, or add anything.
                if rng.one_in(2) {
                    args.truncate(1 + rng.below(args.len() as u64) as usize);
                } else {
                    for _ in 0..rng.range(1, 4) {
                        args.push(option_arg(rng));
                    }
                }
            }
        }
        _ => {
            for _ in 0..rng.below(11) {
                args.push(any_arg(rng));
            }
        }
    }
    args.truncate(11);
    sanitize(rng, &mut args);
    args
}

// ------------------------------------------------------------ the oracle

/// A command name up to its first NUL. Redis 7.0 looks command names up in
/// a dict that hashes all their bytes but compares them with `strcasecmp`,
/// so `GET\0xyz` runs GET whenever the two hashes fall in the same bucket
/// (about 1 name in 200, depending on the server's hash seed), and is an
/// unknown command otherwise.
fn before_nul(name: &[u8]) -> &[u8] {
    name.split(|&b| b == 0).next().unwrap_or_default()
}

/// An unknown-command error in any server's words: `ERR unknown command
/// ...`, and from a script `ERR Unknown Redis command called from script`
/// (Redis) or `ERR Unknown command called from script` (Valkey 9).
fn is_unknown_command(error: &[u8]) -> bool {
    let text = String::from_utf8_lossy(error).to_ascii_lowercase();
    text.starts_with("err unknown command")
        || (text.starts_with("err unknown ") && text.contains("command called from script"))
}

/// The fuzzer's grammar of each command (the names are the server's: see
/// [`commands::known`]).
impl Cmd {
    /// How often it is sent, relative to the others.
    fn weight(self) -> u64 {
        match self {
            Cmd::Acquire => 8,
            Cmd::MAcquire => 6,
            Cmd::RAcquire | Cmd::WAcquire | Cmd::MRelease => 4,
            Cmd::Release | Cmd::Renew | Cmd::Info => 4,
            Cmd::ForceRelease | Cmd::Waiters | Cmd::Queues | Cmd::Session | Cmd::Cancel => 2,
            Cmd::SemAcquire => 3,
            Cmd::SemRelease => 2,
            Cmd::SemInit | Cmd::SemRenew | Cmd::SemAdd | Cmd::SemTake | Cmd::SemGive => 1,
            Cmd::SemInfo => 1,
            Cmd::LatchInit | Cmd::LatchCountDown | Cmd::LatchAwait | Cmd::LatchInfo => 1,
            Cmd::ElectCampaign => 3,
            Cmd::ElectResign | Cmd::ElectProclaim | Cmd::ElectLeader | Cmd::ElectObserve => 2,
        }
    }

    /// Whether `n` arguments (after the name) fit the command.
    fn arity_ok(self, n: usize) -> bool {
        match self {
            Cmd::Acquire | Cmd::RAcquire | Cmd::WAcquire | Cmd::Renew => n >= 2,
            // numkeys key owner at least
            Cmd::MAcquire | Cmd::MRelease => n >= 3,
            // LOCK.RELEASE key owner [READ | WRITE]
            Cmd::Release => n == 2 || n == 3,
            // LOCK.SESSION token
            Cmd::ForceRelease | Cmd::Info | Cmd::Session => n == 1,
            // LOCK.CANCEL key owner
            Cmd::Cancel => n == 2,
            // LOCK.WAITERS key [COUNT n]; LOCK.QUEUES [COUNT n]
            Cmd::Waiters => n >= 1,
            Cmd::Queues => true,
            // SEM.INIT key permits; SEM.ADD key delta
            Cmd::SemInit | Cmd::SemAdd => n == 2,
            Cmd::SemAcquire | Cmd::SemRelease | Cmd::SemRenew => n >= 2,
            // SEM.TAKE key [PERMITS n] [BLOCK ms]; SEM.GIVE key [PERMITS n]
            Cmd::SemTake | Cmd::SemGive => n >= 1,
            Cmd::SemInfo | Cmd::LatchInfo => n == 1,
            // LATCH.INIT key count [PX ms | EX s]
            Cmd::LatchInit => n >= 2,
            // LATCH.COUNTDOWN key [n]: registered with arity -2, the module
            // refuses more itself (in the same words).
            Cmd::LatchCountDown => n == 1 || n == 2,
            // LATCH.AWAIT key [BLOCK ms]
            Cmd::LatchAwait => n >= 1,
            // ELECT.CAMPAIGN key candidate option...: KEEPALIVE or SESSION
            // at least (the module says which is missing).
            Cmd::ElectCampaign => n >= 3,
            Cmd::ElectResign => n == 2,
            // ELECT.PROCLAIM key candidate value
            Cmd::ElectProclaim => n == 3,
            Cmd::ElectLeader => n == 1,
            // ELECT.OBSERVE key [TERM term] [BLOCK ms]
            Cmd::ElectObserve => n >= 1,
        }
    }

    fn takes_owner(self) -> bool {
        match self {
            Cmd::Acquire | Cmd::RAcquire | Cmd::WAcquire | Cmd::MAcquire => true,
            Cmd::MRelease | Cmd::Release | Cmd::Renew => true,
            Cmd::ForceRelease | Cmd::Info | Cmd::Waiters | Cmd::Queues => false,
            Cmd::Session => false,
            Cmd::Cancel => true,
            Cmd::SemAcquire | Cmd::SemRelease | Cmd::SemRenew => true,
            Cmd::SemInit | Cmd::SemAdd | Cmd::SemTake | Cmd::SemGive | Cmd::SemInfo => false,
            Cmd::LatchInit | Cmd::LatchCountDown | Cmd::LatchAwait | Cmd::LatchInfo => false,
            Cmd::ElectCampaign | Cmd::ElectResign | Cmd::ElectProclaim => true,
            Cmd::ElectLeader | Cmd::ElectObserve => false,
        }
    }

    /// An election's command: its leader record must be in its slot.
    fn is_election(self) -> bool {
        matches!(
            self,
            Cmd::ElectCampaign
                | Cmd::ElectResign
                | Cmd::ElectProclaim
                | Cmd::ElectLeader
                | Cmd::ElectObserve
        )
    }

    /// A semaphore's command: its permit set must be in its slot.
    fn is_semaphore(self) -> bool {
        matches!(
            self,
            Cmd::SemInit
                | Cmd::SemAcquire
                | Cmd::SemRelease
                | Cmd::SemRenew
                | Cmd::SemAdd
                | Cmd::SemTake
                | Cmd::SemGive
                | Cmd::SemInfo
        )
    }

    fn is_latch(self) -> bool {
        matches!(
            self,
            Cmd::LatchInit | Cmd::LatchCountDown | Cmd::LatchAwait | Cmd::LatchInfo
        )
    }

    /// The integer argument after the key (SEM.INIT's permits, SEM.ADD's
    /// delta, LATCH.INIT's count, LATCH.COUNTDOWN's optional n): its name
    /// in errors and its range.
    fn amount(self) -> Option<(&'static str, i64, i64)> {
        match self {
            Cmd::SemInit => Some(("permits", 0, MAX_PERMITS)),
            Cmd::SemAdd => Some(("delta", -MAX_PERMITS, MAX_PERMITS)),
            Cmd::LatchInit => Some(("count", 1, MAX_COUNT)),
            Cmd::LatchCountDown => Some(("n", 1, MAX_COUNT)),
            _ => None,
        }
    }

    /// `numkeys key [key ...]` instead of `key`.
    fn is_multi(self) -> bool {
        matches!(self, Cmd::MAcquire | Cmd::MRelease)
    }

    /// Lease options after the owner: the acquires' (`OPTIONS`) or
    /// LOCK.RENEW's.
    fn options(self) -> Option<&'static [&'static str]> {
        match self {
            Cmd::Acquire | Cmd::RAcquire | Cmd::WAcquire | Cmd::MAcquire => Some(OPTIONS),
            Cmd::Renew | Cmd::SemRenew => Some(&["PX", "EX", "KEEPALIVE"]),
            Cmd::MRelease | Cmd::Release | Cmd::ForceRelease => None,
            Cmd::Info | Cmd::Waiters | Cmd::Queues | Cmd::Session | Cmd::Cancel => None,
            Cmd::SemAcquire => Some(&["PX", "EX", "BLOCK", "FENCE", "KEEPALIVE", "PERMITS"]),
            Cmd::SemRelease | Cmd::SemGive => Some(&["PERMITS"]),
            Cmd::SemTake => Some(&["PERMITS", "BLOCK"]),
            Cmd::LatchInit => Some(&["PX", "EX"]),
            Cmd::LatchAwait => Some(&["BLOCK"]),
            Cmd::SemInit | Cmd::SemAdd | Cmd::SemInfo => None,
            Cmd::LatchCountDown | Cmd::LatchInfo => None,
            Cmd::ElectCampaign => Some(&["VALUE", "PX", "EX", "KEEPALIVE", "SESSION", "BLOCK"]),
            Cmd::ElectObserve => Some(&["TERM", "BLOCK"]),
            Cmd::ElectResign | Cmd::ElectProclaim | Cmd::ElectLeader => None,
        }
    }

    fn takes_options(self) -> bool {
        self.options().is_some()
    }
}

/// Where the options of a command start in `args` (the name first): after
/// `key owner`, `key count` (LATCH.INIT), `key` (SEM.TAKE, SEM.GIVE,
/// LATCH.AWAIT) or `numkeys key [key ...] owner`; `None` when numkeys is
/// not a count of the keys that follow.
fn options_start(cmd: Cmd, args: &[Vec<u8>]) -> Option<usize> {
    if !cmd.is_multi() {
        let positional = usize::from(cmd.takes_owner()) + usize::from(cmd == Cmd::LatchInit);
        return Some(2 + positional);
    }
    let raw: Vec<&[u8]> = args.get(1..)?.iter().map(Vec::as_slice).collect();
    parse_numkeys(&raw).ok().map(|n| 3 + n)
}

/// The lock key a vector names: its first key (after numkeys for the
/// multi-lock commands), whose `PEXPIRETIME` is compared.
fn watched_key(args: &[Vec<u8>]) -> Vec<u8> {
    let multi = Cmd::from_name(before_nul(&args[0])).is_some_and(Cmd::is_multi);
    args.get(if multi { 2 } else { 1 })
        .cloned()
        .unwrap_or_default()
}

/// Rewrites valid duration values the way the module doc above says
/// (leases an hour longer, waits 1 to 5 ms), walking the options exactly as
/// the parser does; anything after the first bad option is left alone.
fn sanitize(rng: &mut Rng, args: &mut [Vec<u8>]) {
    let Some(cmd) = Cmd::from_name(before_nul(&args[0])) else {
        return;
    };
    let Some(allowed) = cmd.options() else {
        return;
    };
    let Some(mut i) = options_start(cmd, args) else {
        return;
    };
    while i < args.len() {
        let Some(name) = allowed
            .iter()
            .find(|o| o.as_bytes().eq_ignore_ascii_case(&args[i]))
        else {
            return;
        };
        if *name == "FENCE" || *name == "KEEPALIVE" {
            i += 1;
            continue;
        }
        let Some(value) = args.get_mut(i + 1) else {
            return;
        };
        if let Some(n) = parse_i64(value) {
            match *name {
                "BLOCK" if (0..=MAX_DURATION_MS).contains(&n) && !(1..=5).contains(&n) => {
                    *value = rng.range(1, 5).to_string().into_bytes();
                }
                "PX" if (1..3_600_000).contains(&n) => {
                    *value = (n + 3_600_000).to_string().into_bytes();
                }
                "EX" if (1..3_600).contains(&n) => {
                    *value = (n + 3_600).to_string().into_bytes();
                }
                "PERMITS" if (101..=MAX_PERMITS_PER_CALL).contains(&n) => {
                    *value = rng.range(1, 100).to_string().into_bytes();
                }
                _ => {}
            }
        }
        i += 2;
    }
}

/// What the pure rules say of a vector before any key is read.
enum Expect {
    /// Exactly this error line.
    Error(String),
    /// An unknown command: an `ERR unknown command ...` error.
    Unknown,
    /// Arguments are valid: a valid answer, or an error that depends on
    /// the data.
    Valid {
        cmd: Cmd,
        fence: bool,
        /// The lease a RENEW must answer.
        lease_ms: i64,
        blocks: bool,
        /// The keys it names: a multi-lock answer has one entry per key.
        keys: usize,
        /// The permits a SEM.ACQUIRE or SEM.TAKE asks for.
        permits: i64,
        /// The error it must get unless the data refuses it first: an
        /// owner a read-write lock reserves.
        refused: Option<String>,
        /// ELECT.CAMPAIGN's VALUE, ELECT.OBSERVE's TERM.
        value: Option<Vec<u8>>,
        term: i64,
    },
}

/// `in_script`: run by a script, whose client has no connection of its own
/// (KEEPALIVE is refused there); `session`: the token the fuzz connection
/// names (`SESSION token` names no other).
fn expect(args: &[Vec<u8>], in_script: bool, session: &[u8]) -> Expect {
    let Some(cmd) = Cmd::from_name(&args[0]) else {
        return Expect::Unknown;
    };
    let rest = &args[1..];
    let arity = || {
        Expect::Error(format!(
            "ERR wrong number of arguments for '{}' command",
            cmd.name()
        ))
    };
    if !cmd.arity_ok(rest.len()) {
        return arity();
    }
    // numkeys key [key ...] owner: checked before the owner and options.
    let (keys, owner_at) = if cmd.is_multi() {
        let raw: Vec<&[u8]> = rest.iter().map(Vec::as_slice).collect();
        match parse_numkeys(&raw) {
            Ok(n) => (&rest[1..1 + n], 1 + n),
            Err(e) => return Expect::Error(e.to_string()),
        }
    } else if cmd == Cmd::Queues {
        (&rest[..0], 1)
    } else {
        (&rest[..1], 1)
    };
    if cmd.takes_owner() && rest[owner_at].is_empty() {
        return Expect::Error("ERR owner must not be empty".into());
    }
    if cmd.is_multi() {
        let names: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
        if let Err(e) = check_distinct(&names) {
            return Expect::Error(e.to_string());
        }
    }
    // LOCK.SESSION's token (where the others have a key): any but empty,
    // from a connection of its own.
    if cmd == Cmd::Session && rest[0].is_empty() {
        return Expect::Error(LockError::empty_session().to_string());
    }
    if cmd == Cmd::Session && in_script {
        return Expect::Error(LockError::session_without_connection().to_string());
    }
    let options = &rest[rest.len().min(owner_at + 1)..];
    // The integer after the key, then the options after it (LATCH.INIT).
    if let (Some((name, min, max)), Some(raw)) = (cmd.amount(), rest.get(1)) {
        if let Err(e) = parse_amount(name, raw, min, max) {
            return Expect::Error(e.to_string());
        }
    }
    let after_key = rest.get(1..).unwrap_or_default();
    let mut permits = 1;
    let (mut value, mut term) = (None, 0);
    // An election's leader record, checked after the options (CAMPAIGN's,
    // OBSERVE's) or the owner.
    let record_in_slot = || leader_key_in_slot(&rest[0]).err().map(|e| e.to_string());
    let (fence, lease, blocks, keepalive) = match cmd {
        Cmd::MRelease if !options.is_empty() => return arity(),
        Cmd::Acquire | Cmd::RAcquire | Cmd::WAcquire | Cmd::MAcquire => {
            match parse_acquire_options(options) {
                Ok(o) => (o.fence, o.lease_ms, o.wait.is_some(), o.keepalive),
                Err(e) => return Expect::Error(e.to_string()),
            }
        }
        Cmd::Renew => match parse_renew_options(options) {
            Ok(o) => (false, o.lease_ms, false, o.keepalive),
            Err(e) => return Expect::Error(e.to_string()),
        },
        Cmd::Waiters | Cmd::Queues => {
            let skip = usize::from(cmd == Cmd::Waiters);
            if let Err(e) = parse_view_options(&rest[skip..]) {
                return Expect::Error(e.to_string());
            }
            (false, None, false, None)
        }
        Cmd::Release => match options {
            [kind]
                if !kind.eq_ignore_ascii_case(b"READ") && !kind.eq_ignore_ascii_case(b"WRITE") =>
            {
                return Expect::Error(format!(
                    "ERR syntax error: expected READ or WRITE, got '{}'",
                    printable(kind)
                ))
            }
            _ => (false, None, false, None),
        },
        Cmd::MRelease | Cmd::ForceRelease | Cmd::Info | Cmd::Session | Cmd::Cancel => {
            (false, None, false, None)
        }
        Cmd::SemAcquire => match parse_semaphore_acquire_options(options) {
            Ok((o, n)) => {
                permits = i64::from(n);
                (o.fence, o.lease_ms, o.wait.is_some(), o.keepalive)
            }
            Err(e) => return Expect::Error(e.to_string()),
        },
        Cmd::SemRenew => match parse_renew_options(options) {
            Ok(o) => (false, o.lease_ms, false, o.keepalive),
            Err(e) => return Expect::Error(e.to_string()),
        },
        Cmd::SemRelease | Cmd::SemGive => {
            let options = if cmd == Cmd::SemRelease {
                options
            } else {
                after_key
            };
            if let Err(e) = parse_permits_option(options) {
                return Expect::Error(e.to_string());
            }
            (false, None, false, None)
        }
        Cmd::SemTake => match parse_take_options(after_key) {
            Ok((n, wait)) => {
                permits = i64::from(n);
                (false, None, wait.is_some(), None)
            }
            Err(e) => return Expect::Error(e.to_string()),
        },
        Cmd::LatchInit => match parse_lease_option(&after_key[1..]) {
            Ok(_) => (false, None, false, None),
            Err(e) => return Expect::Error(e.to_string()),
        },
        Cmd::LatchAwait => match parse_block_option(after_key) {
            Ok(wait) => (false, None, wait.is_some(), None),
            Err(e) => return Expect::Error(e.to_string()),
        },
        Cmd::SemInit | Cmd::SemAdd | Cmd::SemInfo | Cmd::LatchCountDown | Cmd::LatchInfo => {
            (false, None, false, None)
        }
        // Always fenced: the token key's slot is checked after the
        // session's, the record's before.
        Cmd::ElectCampaign => match parse_campaign_options(options) {
            Ok((o, given)) => {
                if let Some(e) = record_in_slot() {
                    return Expect::Error(e);
                }
                value = given;
                (o.fence, o.lease_ms, o.wait.is_some(), o.keepalive)
            }
            Err(e) => return Expect::Error(e.to_string()),
        },
        Cmd::ElectObserve => match parse_observe_options(after_key) {
            Ok((seen, wait)) => {
                if let Some(e) = record_in_slot() {
                    return Expect::Error(e);
                }
                term = seen;
                (false, None, wait.is_some(), None)
            }
            Err(e) => return Expect::Error(e.to_string()),
        },
        Cmd::ElectResign | Cmd::ElectProclaim | Cmd::ElectLeader => {
            if let Some(e) = record_in_slot() {
                return Expect::Error(e);
            }
            (false, None, false, None)
        }
    };
    // KEEPALIVE's lease is checked first (the fuzzed server runs at the
    // default hz 10), then its connection, or the session (ELECT.CAMPAIGN's
    // grammar names the fuzz connection's or another; the others' have no
    // SESSION option).
    if keepalive.is_some() {
        if let Err(e) = check_lease(lease.unwrap_or(DEFAULT_LEASE_MS), 10) {
            return Expect::Error(e.to_string());
        }
    }
    // The session's connection keeps what a script binds to it.
    if let Some(KeepAlive::Session(token)) = &keepalive {
        if **token != *session {
            return Expect::Error(LockError::no_session(token).to_string());
        }
    }
    if matches!(keepalive, Some(KeepAlive::Caller)) && in_script {
        return Expect::Error(
            "ERR KEEPALIVE needs the caller's own connection: not from a script, a function or a module's call"
                .into(),
        );
    }
    for key in keys {
        if fence {
            if let Err(e) = token_key_in_slot(key) {
                return Expect::Error(e.to_string());
            }
        }
        if cmd == Cmd::RAcquire {
            if let Err(e) = read_lease_key_in_slot(key, &rest[owner_at]) {
                return Expect::Error(e.to_string());
            }
        }
        if cmd.is_semaphore() {
            if let Err(e) = permits_key_in_slot(key) {
                return Expect::Error(e.to_string());
            }
        }
    }
    let refused = match cmd {
        Cmd::RAcquire | Cmd::WAcquire => check_owner(&rest[owner_at]).err().map(|e| e.to_string()),
        _ => None,
    };
    Expect::Valid {
        cmd,
        fence,
        lease_ms: lease.unwrap_or(DEFAULT_LEASE_MS),
        blocks,
        keys: keys.len(),
        permits,
        refused,
        value,
        term,
    }
}

/// `CODE` or `CODE message`, the code in upper case, on one line.
fn well_formed_error(line: &[u8]) -> bool {
    let code = line.split(|&b| b == b' ').next().unwrap_or_default();
    !code.is_empty()
        && code.iter().all(u8::is_ascii_uppercase)
        && (line.len() == code.len() || line.len() > code.len() + 1)
        && !line.contains(&b'\r')
        && !line.contains(&b'\n')
}

/// An error line without what it quotes: `ERR invalid PX`.
fn label(line: &str) -> &str {
    line.split([':', '\''])
        .next()
        .unwrap_or_default()
        .trim_end()
}

/// Error lines a valid vector may get, depending on the data.
fn data_error_allowed(cmd: Cmd, line: &str) -> bool {
    let wrong_type = "WRONGTYPE Operation against a key holding the wrong kind of value";
    if cmd.is_semaphore() || cmd.is_latch() {
        return line == wrong_type || semaphore_or_latch_error_allowed(cmd, line);
    }
    let key_errors = [
        wrong_type,
        "WRONGTYPE key holds a hash that is not a lock: ",
    ];
    let owner_errors = ["NOTOWNER the owner holds no hold on this lock"];
    let read_write_lock = "WRONGTYPE key holds a read-write lock: ";
    let exclusive_lock = "WRONGTYPE key holds an exclusive lock: ";
    let shared_errors = [
        exclusive_lock,
        "DEADLOCK the owner holds read holds and other readers hold the lock",
        "ERR an owner may take at most ",
    ];
    let acquire_errors = [
        "ERR fencing token key holds a value that is not an integer or out of range",
        "WRONGTYPE fencing token key holds the wrong kind of value",
        "ERR fencing token would overflow",
        "ERR hold count would overflow",
    ];
    let starts = |list: &[&str]| list.iter().any(|p| line.starts_with(p));
    // An election's writes refuse a `{key}:leader` that holds something
    // else (the fixtures' `{elected}:leader` is a lock of its own).
    let foreign_record = line.starts_with("WRONGTYPE leader record key '")
        && line.ends_with("' holds a key that is not a leader record");
    let election_write = matches!(
        cmd,
        Cmd::ElectCampaign | Cmd::ElectResign | Cmd::ElectProclaim
    );
    starts(&key_errors)
        || (election_write && foreign_record)
        || match cmd {
            Cmd::Acquire | Cmd::MAcquire => {
                starts(&acquire_errors) || line.starts_with(read_write_lock)
            }
            Cmd::RAcquire | Cmd::WAcquire => starts(&acquire_errors) || starts(&shared_errors),
            Cmd::Release => {
                starts(&owner_errors)
                    || line.starts_with(exclusive_lock)
                    || line.starts_with("ERR the owner holds both read and write holds")
            }
            Cmd::MRelease => starts(&owner_errors) || line.starts_with(read_write_lock),
            Cmd::Renew => starts(&owner_errors),
            Cmd::ForceRelease | Cmd::Info | Cmd::Waiters | Cmd::Queues | Cmd::Session => false,
            Cmd::Cancel => false,
            // A candidate waits like an exclusive acquire, always fenced; one
            // that holds the lock with LOCK.ACQUIRE has no term.
            Cmd::ElectCampaign => {
                starts(&acquire_errors)
                    || line.starts_with(read_write_lock)
                    || line == LockError::held_outside_election().to_string()
            }
            Cmd::ElectProclaim => starts(&owner_errors),
            Cmd::ElectResign | Cmd::ElectLeader | Cmd::ElectObserve => false,
            _ => unreachable!("answered above"),
        }
}

/// [`data_error_allowed`] for the SEM.* and LATCH.* commands, besides a key
/// of another type. No lease runs out in a run, so no EXPIRED.
fn semaphore_or_latch_error_allowed(cmd: Cmd, line: &str) -> bool {
    let not_a_semaphore = "WRONGTYPE key holds a string that is not a semaphore's permit count";
    let not_a_latch = "WRONGTYPE key holds a string that is not a latch's count";
    let fewer = |line: &str| {
        line.strip_prefix("NOTOWNER the owner holds ")
            .and_then(|rest| rest.split_once(" permits of this semaphore, fewer than "))
            .is_some_and(|(held, asked)| {
                matches!((held.parse::<u32>(), asked.parse::<u32>()), (Ok(h), Ok(a)) if h >= 1 && h < a)
            })
    };
    let out_of_range = |command: &str| {
        line.strip_prefix(&format!("ERR {command} would leave the semaphore "))
            .and_then(|rest| rest.strip_suffix(" permits: must be 0 to 2147483647"))
            .and_then(|total| total.parse::<i128>().ok())
            .is_some_and(|total| !(0..=i128::from(MAX_PERMITS)).contains(&total))
    };
    let no_permits = "NOTOWNER the owner holds no permits of this semaphore";
    let token_errors = [
        "ERR fencing token key holds a value that is not an integer or out of range",
        "WRONGTYPE fencing token key holds the wrong kind of value",
        "ERR fencing token would overflow",
    ];
    match cmd {
        Cmd::SemInit | Cmd::SemTake | Cmd::SemInfo => line == not_a_semaphore,
        Cmd::SemAcquire => line == not_a_semaphore || token_errors.contains(&line),
        Cmd::SemRelease => line == not_a_semaphore || line == no_permits || fewer(line),
        Cmd::SemRenew => line == not_a_semaphore || line == no_permits,
        Cmd::SemAdd => line == not_a_semaphore || out_of_range("SEM.ADD"),
        Cmd::SemGive => line == not_a_semaphore || out_of_range("SEM.GIVE"),
        // Any key that exists answers 0.
        Cmd::LatchInit => false,
        Cmd::LatchCountDown | Cmd::LatchAwait | Cmd::LatchInfo => line == not_a_latch,
        _ => false,
    }
}

/// The field names of a map (a flat array in RESP2): every other item.
fn field_names(items: &[Reply]) -> Vec<&[u8]> {
    items
        .iter()
        .step_by(2)
        .map(|k| match k {
            Reply::Bulk(b) | Reply::Status(b) => &b[..],
            _ => &b"?"[..],
        })
        .collect()
}

/// A LOCK.INFO answer: owner, holds, ttl, waiters and maybe token, in order
/// (a read-write lock's: see [`valid_read_write_info`]).
/// `from_lua`: the answer went through a script, where integers past 2^53
/// are rounded (a hold count of i64::MAX comes back as i64::MIN).
fn valid_info(reply: &Reply, from_lua: bool) -> bool {
    let items = match reply {
        Reply::Nil => return true,
        Reply::Array(items) | Reply::Map(items) => items,
        _ => return false,
    };
    let names = field_names(items);
    if names.first() == Some(&&b"mode"[..]) {
        return valid_read_write_info(items, &names);
    }
    // The fields always there, then `token` (a counter exists) and
    // `keepalive_client` (a KEEPALIVE hold), each only when it applies.
    let (base, extra) = names.split_at(names.len().min(4));
    let extra_ok = matches!(
        extra,
        [] | [b"token"] | [b"keepalive_client"] | [b"token", b"keepalive_client"]
    );
    let shape = base == [&b"owner"[..], b"holds", b"ttl", b"waiters"] && extra_ok;
    let int = |i: usize| match items.get(i) {
        Some(Reply::Int(n)) => Some(*n),
        _ => None,
    };
    shape
        && items.len() == names.len() * 2
        // A hash written by others can have an empty owner field.
        && matches!(&items[1], Reply::Bulk(_))
        && int(3).is_some_and(|h| h >= 1 || (from_lua && h.unsigned_abs() >= 1 << 53))
        && int(5).is_some_and(|t| t == -1 || t >= 0)
        // Only this connection sends commands: nobody is left waiting.
        && int(7) == Some(0)
        && (4..names.len()).all(|i| int(2 * i + 1).is_some())
}

/// A read-write lock's LOCK.INFO answer: mode, the writer and its holds in
/// write mode, the readers (a map of owner to holds, a flat array in RESP2
/// and from a script; never empty in read mode), ttl, waiters, then maybe
/// token and keepalive_clients (a map of owner to client id).
fn valid_read_write_info(items: &[Reply], names: &[&[u8]]) -> bool {
    let value = |name: &[u8]| {
        names
            .iter()
            .position(|n| *n == name)
            .and_then(|i| items.get(2 * i + 1))
    };
    let int = |name: &[u8]| match value(name) {
        Some(Reply::Int(n)) => Some(*n),
        _ => None,
    };
    let pairs = |name: &[u8], ok: &dyn Fn(i64) -> bool| match value(name) {
        Some(Reply::Array(kv) | Reply::Map(kv)) => {
            kv.len() % 2 == 0
                && kv.chunks(2).all(|p| {
                    matches!(&p[0], Reply::Bulk(o) if !o.is_empty())
                        && matches!(&p[1], Reply::Int(n) if ok(*n))
                })
        }
        _ => false,
    };
    let readers = match value(b"readers") {
        Some(Reply::Array(kv) | Reply::Map(kv)) => kv.len() / 2,
        _ => 0,
    };
    let (base, write): (&[&[u8]], bool) = match value(b"mode") {
        Some(Reply::Bulk(m)) if m == b"write" => (
            &[
                b"mode",
                b"writer",
                b"write_holds",
                b"readers",
                b"ttl",
                b"waiters",
            ],
            true,
        ),
        Some(Reply::Bulk(m)) if m == b"read" => (&[b"mode", b"readers", b"ttl", b"waiters"], false),
        _ => return false,
    };
    let (head, extra) = names.split_at(names.len().min(base.len()));
    head == base
        && matches!(
            extra,
            [] | [b"token"] | [b"keepalive_clients"] | [b"token", b"keepalive_clients"]
        )
        && items.len() == names.len() * 2
        && (!write || matches!(value(b"writer"), Some(Reply::Bulk(w)) if !w.is_empty()))
        && (!write || int(b"write_holds").is_some_and(|h| h >= 1))
        && pairs(b"readers", &|h| h >= 1)
        && (write || readers > 0)
        && int(b"ttl").is_some_and(|t| t == -1 || t >= 0)
        // Only this connection sends commands: nobody is left waiting.
        && int(b"waiters") == Some(0)
        && (!extra.contains(&&b"token"[..]) || int(b"token").is_some())
        && (!extra.contains(&&b"keepalive_clients"[..]) || pairs(b"keepalive_clients", &|c| c > 0))
}

/// A SEM.INFO answer: permits, available, holders (each owner, permits,
/// ttl and maybe keepalive_client, ordered by owner), waiters, in order;
/// the permits are the available ones and the holders' together.
fn valid_semaphore_info(reply: &Reply, from_lua: bool) -> bool {
    let items = match reply {
        Reply::Nil => return true,
        Reply::Array(items) | Reply::Map(items) => items,
        _ => return false,
    };
    let int = |r: Option<&Reply>| match r {
        Some(Reply::Int(n)) => Some(*n),
        _ => None,
    };
    let names = field_names(items);
    if names != [&b"permits"[..], b"available", b"holders", b"waiters"] || items.len() != 8 {
        return false;
    }
    let (Some(total), Some(available)) = (int(items.get(1)), int(items.get(3))) else {
        return false;
    };
    let Reply::Array(holders) = &items[5] else {
        return false;
    };
    let mut held = 0i64;
    let mut owners: Vec<&[u8]> = Vec::new();
    for holder in holders {
        let fields = match holder {
            Reply::Array(f) | Reply::Map(f) => f,
            _ => return false,
        };
        let names = field_names(fields);
        let shape = matches!(
            names[..],
            [b"owner", b"permits", b"ttl"] | [b"owner", b"permits", b"ttl", b"keepalive_client"]
        );
        let owner = match fields.get(1) {
            Some(Reply::Bulk(o)) if !o.is_empty() => o,
            _ => return false,
        };
        let valid = shape
            && fields.len() == names.len() * 2
            && int(fields.get(5)).is_some_and(|ttl| ttl == -1 || ttl >= 0)
            && (names.len() == 3 || int(fields.get(7)).is_some_and(|client| client > 0));
        let Some(permits) = int(fields.get(3)).filter(|&n| valid && n >= 1) else {
            return false;
        };
        held = held.saturating_add(permits);
        owners.push(owner);
    }
    let ordered = owners.windows(2).all(|w| w[0] < w[1]);
    let big = |n: i64| n.unsigned_abs() >= 1 << 53;
    let adds_up =
        total == available.saturating_add(held) || (from_lua && (big(total) || big(available)));
    ordered
        && adds_up
        // Only this connection sends commands: nobody is left waiting.
        && int(items.get(7)) == Some(0)
}

/// A LATCH.INFO answer: count (above 0: an open latch is nil), ttl,
/// waiters, in order.
fn valid_latch_info(reply: &Reply, from_lua: bool) -> bool {
    let items = match reply {
        Reply::Nil => return true,
        Reply::Array(items) | Reply::Map(items) => items,
        _ => return false,
    };
    let int = |i: usize| match items.get(i) {
        Some(Reply::Int(n)) => Some(*n),
        _ => None,
    };
    field_names(items) == [&b"count"[..], b"ttl", b"waiters"]
        && items.len() == 6
        && int(1).is_some_and(|c| c >= 0 || (from_lua && c.unsigned_abs() >= 1 << 53))
        && int(3).is_some_and(|t| t == -1 || t >= 0)
        // Only this connection sends commands: nobody is left waiting.
        && int(5) == Some(0)
}

/// Who leads, with which term and value (nobody: `(None, 0, None)`).
type Leadership = (Option<Vec<u8>>, i64, Option<Vec<u8>>);

/// An ELECT.LEADER or ELECT.OBSERVE answer: candidate, term, value and
/// ttl, in order (a map in RESP3, a flat array in RESP2 and from a
/// script); a leader (candidate, term above 0, ttl -1 or more) or, for
/// ELECT.OBSERVE only, nobody (candidate and value nil, term 0, ttl -1).
fn leadership(reply: &Reply, nobody_allowed: bool) -> Option<Leadership> {
    let items = match reply {
        Reply::Array(items) | Reply::Map(items) => items,
        _ => return None,
    };
    if field_names(items) != [&b"candidate"[..], b"term", b"value", b"ttl"] || items.len() != 8 {
        return None;
    }
    let bulk = |r: &Reply| match r {
        Reply::Bulk(b) => Some(Some(b.clone())),
        Reply::Nil => Some(None),
        _ => None,
    };
    let (Some(candidate), Reply::Int(term), Some(value), Reply::Int(ttl)) =
        (bulk(&items[1]), &items[3], bulk(&items[5]), &items[7])
    else {
        return None;
    };
    let leads = candidate.is_some() && *term > 0 && (*ttl == -1 || *ttl >= 0);
    let nobody = candidate.is_none() && *term == 0 && value.is_none() && *ttl == -1;
    (leads || (nobody && nobody_allowed)).then_some((candidate, *term, value))
}

/// A lock the leader record `{key}:leader` may be the record of (see
/// `lock_rules::keys::elections_of_leader_key`), as the script read it.
struct Election {
    name: Vec<u8>,
    kind: Vec<u8>,
    fields: Vec<(Vec<u8>, Vec<u8>)>,
    expires_at: i64,
}

/// A leader record after a vector: its fields, its expiry and the locks
/// whose record it may be.
struct Record {
    name: Vec<u8>,
    fields: Vec<(Vec<u8>, Vec<u8>)>,
    expires_at: i64,
    elections: Vec<Election>,
}

impl Record {
    fn field(&self, name: &[u8]) -> Option<&[u8]> {
        self.fields
            .iter()
            .find(|(f, _)| f == name)
            .map(|(_, v)| &v[..])
    }

    fn term(&self) -> Option<i64> {
        self.field(b"term").and_then(parse_i64)
    }

    /// What is wrong with it, if anything: only `candidate`, `term` (above
    /// 0) and maybe `value`, a candidate holding one of its locks alone,
    /// the same expiry as that lock.
    fn problem(&self) -> Option<String> {
        let known = |f: &[u8]| matches!(f, b"candidate" | b"term" | b"value");
        if !self.fields.iter().all(|(f, _)| known(f)) || self.term().is_none_or(|t| t <= 0) {
            return Some(
                "a leader record with fields other than candidate, term (above 0) and value".into(),
            );
        }
        let Some(candidate) = self.field(b"candidate") else {
            return Some("a leader record without a candidate".into());
        };
        let holds = |e: &&Election| {
            e.kind == b"hash"
                && matches!(&e.fields[..], [(owner, holds)]
                    if owner == candidate && parse_i64(holds).is_some_and(|h| h >= 1))
        };
        match self.elections.iter().find(holds) {
            None => Some(format!(
                "a leader record whose candidate b\"{}\" does not hold its lock alone \
                 (its lock: {})",
                show(candidate),
                self.elections
                    .iter()
                    .map(|e| format!(
                        "b\"{}\" {} {:?} expires at {}",
                        show(&e.name),
                        show(&e.kind),
                        e.fields
                            .iter()
                            .map(|(f, v)| format!("{}={}", show(f), show(v)))
                            .collect::<Vec<_>>(),
                        e.expires_at
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            Some(e) if e.expires_at != self.expires_at => Some(format!(
                "a leader record that expires at {} while its lock b\"{}\" expires at {}",
                self.expires_at,
                show(&e.name),
                e.expires_at
            )),
            Some(_) => None,
        }
    }
}

/// Every leader record, with what [`Record::problem`] needs: each hash
/// named `*:leader` (those with a record's field: see [`records`]), the
/// locks it may be the record of (the names `elections_of_leader_key`
/// gives, found again here), their type, fields and expiry.
const RECORDS_SCRIPT: &[u8] = br"
local out = {}
for _, r in ipairs(redis.call('KEYS', '*:leader')) do
  if redis.call('TYPE', r)['ok'] == 'hash' then
    local prefix = string.sub(r, 1, -8)
    local names = {}
    if string.sub(prefix, 1, 1) == '{' and string.sub(prefix, -1) == '}' then
      local inner = string.sub(prefix, 2, -2)
      if not string.find(inner, '{', 1, true) then table.insert(names, inner) end
    end
    if string.find(prefix, '{', 1, true) then table.insert(names, prefix) end
    local locks = {}
    for _, n in ipairs(names) do
      local t = redis.call('TYPE', n)['ok']
      local f = {}
      if t == 'hash' then f = redis.call('HGETALL', n) end
      table.insert(locks, {n, t, f, redis.call('PEXPIRETIME', n)})
    end
    table.insert(out, {r, redis.call('HGETALL', r), redis.call('PEXPIRETIME', r), locks})
  end
end
return out
";

fn pairs_of(reply: &Reply) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    let Reply::Array(items) = reply else {
        return None;
    };
    items
        .chunks(2)
        .map(|p| match p {
            [Reply::Bulk(k), Reply::Bulk(v)] => Some((k.clone(), v.clone())),
            _ => None,
        })
        .collect()
}

/// [`RECORDS_SCRIPT`]'s answer; `Err` when it is not shaped as the script
/// writes it, or names other locks than `elections_of_leader_key`.
fn records(reply: &Reply) -> Result<Vec<Record>, String> {
    let bad = || format!("the records script answered {reply:?}");
    let Reply::Array(entries) = reply else {
        return Err(bad());
    };
    let mut out = Vec::new();
    for entry in entries {
        let Reply::Array(parts) = entry else {
            return Err(bad());
        };
        let [Reply::Bulk(name), fields, Reply::Int(at), Reply::Array(locks)] = &parts[..] else {
            return Err(bad());
        };
        let mut elections = Vec::new();
        for lock in locks {
            let Reply::Array(l) = lock else {
                return Err(bad());
            };
            let [Reply::Bulk(n), Reply::Bulk(kind), fields, Reply::Int(at)] = &l[..] else {
                return Err(bad());
            };
            elections.push(Election {
                name: n.clone(),
                kind: kind.clone(),
                fields: pairs_of(fields).ok_or_else(bad)?,
                expires_at: *at,
            });
        }
        let fields = pairs_of(fields).ok_or_else(bad)?;
        // A lock named like a record (an election `{x}:leader`), not one.
        let known = |f: &[u8]| matches!(f, b"candidate" | b"term" | b"value");
        if !fields.iter().any(|(f, _)| known(f)) {
            continue;
        }
        let names: Vec<&[u8]> = elections.iter().map(|e| &e.name[..]).collect();
        if names != elections_of_leader_key(name) {
            return Err(format!(
                "the records script read the locks {:?} for the record b\"{}\"",
                names.iter().map(|n| show(n)).collect::<Vec<_>>(),
                show(name)
            ));
        }
        out.push(Record {
            name: name.clone(),
            fields,
            expires_at: *at,
            elections,
        });
    }
    Ok(out)
}

// ------------------------------------------------------------- the check

#[derive(Default)]
struct Tally {
    vectors: u64,
    by_outcome: BTreeMap<String, u64>,
}

impl Tally {
    fn count(&mut self, what: String) {
        *self.by_outcome.entry(what).or_default() += 1;
    }

    fn seen(&self, prefix: &str) -> u64 {
        self.by_outcome
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(_, n)| n)
            .sum()
    }
}

/// What was sent for one vector and read back.
struct Outcome<'a> {
    index: u64,
    args: &'a [Vec<u8>],
    wrap: Wrap,
    expiry_before: Reply,
    reply: Reply,
    digest_before: &'a Reply,
    digest_after: &'a Reply,
    expiry_after: Reply,
    /// The leader records after the vector.
    records: &'a [Record],
}

struct Run {
    seed: u64,
    server: Server,
    /// The token the fuzz connection names now (LOCK.SESSION).
    session: std::cell::RefCell<Vec<u8>>,
}

impl Run {
    fn fail(&self, o: &Outcome<'_>, why: &str) -> ! {
        let log = self.server.log();
        let tail: Vec<&str> = log.lines().rev().take(20).collect();
        panic!(
            "fuzz vector #{} (LOCK_FUZZ_SEED={} to replay): {why}\n  vector: {}{}\n  reply: {:?}\n  \
             digest before {:?} after {:?}\n  key expiry before {:?} after {:?}\n  \
             leader records after: {}\n  server log tail:\n{}",
            o.index,
            self.seed,
            show_vector(o.args),
            o.wrap.label(),
            o.reply,
            o.digest_before,
            o.digest_after,
            o.expiry_before,
            o.expiry_after,
            o.records
                .iter()
                .map(|r| format!(
                    "b\"{}\" {:?} expires at {}",
                    show(&r.name),
                    r.fields
                        .iter()
                        .map(|(f, v)| format!("{}={}", show(f), show(v)))
                        .collect::<Vec<_>>(),
                    r.expires_at
                ))
                .collect::<Vec<_>>()
                .join("; "),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
        );
    }

    fn check(&self, o: &Outcome<'_>, tally: &mut Tally) {
        let unchanged = o.digest_before == o.digest_after && o.expiry_before == o.expiry_after;
        let unknown_command = matches!(&o.reply, Reply::Error(e) if is_unknown_command(e));
        // A name with a NUL is unknown, or the command before the NUL
        // (see `before_nul`).
        let mut oracle_args = o.args.to_vec();
        if o.args[0].contains(&0) && !unknown_command {
            oracle_args[0] = before_nul(&o.args[0]).to_vec();
        }
        let session = self.session.borrow().clone();
        let expected = expect(&oracle_args, o.wrap == Wrap::Script, &session);
        if matches!(&o.reply, Reply::Status(s) if s == b"OK")
            && Cmd::from_name(&oracle_args[0]) == Some(Cmd::Session)
        {
            // Naming another token drops the first.
            *self.session.borrow_mut() = oracle_args[1].clone();
        }
        let cmd_label = Cmd::from_name(&o.args[0]).map_or("unknown", Cmd::name);
        if o.args.iter().any(|a| a.len() >= HUGE_LEN) {
            let outcome = match &o.reply {
                Reply::Error(_) => "error",
                Reply::Nil => "nil",
                _ => "answer",
            };
            tally.count(format!("vectors with a 1 MB argument: {outcome}"));
        }
        if let Reply::Error(line) = &o.reply {
            if !well_formed_error(line) {
                self.fail(o, "error reply without an upper-case error code");
            }
            if !unchanged {
                self.fail(o, "an error reply changed the data");
            }
            let text = String::from_utf8_lossy(line);
            // Scripts refuse unknown commands and wrong arities with their
            // own messages before the command runs.
            let refused_by_script = o.wrap == Wrap::Script
                && match &expected {
                    Expect::Unknown => true,
                    Expect::Error(want) => want.starts_with("ERR wrong number of arguments"),
                    Expect::Valid { .. } => false,
                };
            match &expected {
                _ if refused_by_script => {
                    tally.count(format!("error from a script: {}", label(&text)))
                }
                Expect::Error(want) if *want != text => {
                    self.fail(o, &format!("expected the error {want:?}"))
                }
                Expect::Error(want) => tally.count(format!("error {cmd_label}: {}", label(want))),
                Expect::Unknown if !text.starts_with("ERR unknown command") => {
                    self.fail(o, "expected an unknown-command error")
                }
                Expect::Unknown => tally.count("error unknown command".into()),
                Expect::Valid { cmd, refused, .. } => {
                    if !data_error_allowed(*cmd, &text) && refused.as_deref() != Some(&*text) {
                        self.fail(o, "an error no valid vector may get");
                    }
                    if !line.iter().all(|b| (0x20..=0x7e).contains(b)) {
                        self.fail(o, "an error line that is not printable ASCII");
                    }
                    tally.count(format!("error {cmd_label}: {}", label(&text)));
                }
            }
            return;
        }
        let Expect::Valid {
            cmd,
            fence,
            lease_ms,
            blocks,
            keys,
            permits,
            refused,
            value,
            term,
        } = expected
        else {
            self.fail(o, "invalid arguments got an answer instead of an error");
        };
        if let Some(refused) = refused {
            self.fail(
                o,
                &format!("expected the error {refused:?} or a data error"),
            );
        }
        // Lua numbers are doubles: a script gets integers past 2^53
        // rounded, and i64::MAX - 1 comes back as i64::MIN.
        let from_lua = o.wrap == Wrap::Script;
        let rounded = |n: i64| from_lua && n.unsigned_abs() >= 1 << 53;
        // A hold count after an acquire, or its fencing token.
        let granted = |n: i64| rounded(n) || fence || n >= 1;
        let ints = |items: &[Reply], ok: &dyn Fn(i64) -> bool| {
            items.len() == keys && items.iter().all(|i| matches!(i, Reply::Int(n) if ok(*n)))
        };
        // The election's record after the vector, and the leadership it
        // says (nobody: no record).
        let record = o.args.get(1).and_then(|key| {
            let name = leader_key(key);
            o.records.iter().find(|r| r.name == name)
        });
        let recorded: Leadership = record.map_or((None, 0, None), |r| {
            (
                r.field(b"candidate").map(<[u8]>::to_vec),
                r.term().unwrap_or(0),
                r.field(b"value").map(<[u8]>::to_vec),
            )
        });
        // A term answered to `candidate`, with `value` if given: the record's.
        let leads = |n: i64, value: Option<&[u8]>| {
            let candidate = o.args.get(2).map(Vec::as_slice);
            (n > 0 || rounded(n))
                && recorded.0.as_deref() == candidate
                && (recorded.1 == n || rounded(n))
                && value.is_none_or(|v| recorded.2.as_deref() == Some(v))
        };
        let (valid, must_not_change) = match (cmd, &o.reply) {
            (Cmd::Acquire | Cmd::RAcquire | Cmd::WAcquire, Reply::Int(n)) => (granted(*n), false),
            (Cmd::MAcquire, Reply::Array(items)) => (ints(items, &granted), false),
            (Cmd::Acquire | Cmd::RAcquire | Cmd::WAcquire | Cmd::MAcquire, Reply::Nil) => {
                (true, true)
            }
            (Cmd::Release, Reply::Int(n)) => (rounded(*n) || *n >= 0, false),
            (Cmd::MRelease, Reply::Array(items)) => (ints(items, &|n| rounded(n) || n >= 0), false),
            (Cmd::Renew, Reply::Int(n)) => (*n == lease_ms, false),
            (Cmd::ForceRelease, Reply::Int(n)) => (*n == 0 || *n == 1, *n == 0),
            (Cmd::Info, reply) => (valid_info(reply, from_lua), true),
            // Only this connection sends commands: nobody is left waiting.
            (Cmd::Waiters | Cmd::Queues, Reply::Array(entries)) => (entries.is_empty(), true),
            (Cmd::Session, Reply::Status(s)) => (s == b"OK", true),
            // Only this connection sends commands: nobody waits to cancel.
            (Cmd::Cancel, Reply::Int(n)) => (*n == 0, true),
            // Set (1) or there already (0).
            (Cmd::SemInit | Cmd::LatchInit, Reply::Int(n)) => (*n == 0 || *n == 1, *n == 0),
            // The permits the owner holds now, the ones asked for among them.
            (Cmd::SemAcquire, Reply::Int(n)) => (rounded(*n) || fence || *n >= permits, false),
            (Cmd::SemTake, Reply::Int(n)) => (*n == permits, false),
            (Cmd::SemAcquire | Cmd::SemTake, Reply::Nil) => (true, true),
            (Cmd::SemRelease, Reply::Int(n)) => (*n >= 0, false),
            (Cmd::SemRenew, Reply::Int(n)) => (*n >= 1, false),
            // The permits available now.
            (Cmd::SemAdd | Cmd::SemGive, Reply::Int(n)) => {
                ((-MAX_PERMITS..=MAX_PERMITS).contains(n), false)
            }
            (Cmd::SemInfo, reply) => (valid_semaphore_info(reply, from_lua), true),
            // The count left (a count past 2^53 only where one was written by
            // hand, or from a script, rounded).
            (Cmd::LatchCountDown, Reply::Int(n)) => (*n >= 0 || rounded(*n), false),
            (Cmd::LatchAwait, Reply::Int(n)) => (*n == 0, true),
            (Cmd::LatchAwait, Reply::Nil) => (true, true),
            (Cmd::LatchInfo, reply) => (valid_latch_info(reply, from_lua), true),
            // The term, the record's; or nil (busy, BLOCK ran out).
            (Cmd::ElectCampaign, Reply::Int(n)) => (leads(*n, value.as_deref()), false),
            (Cmd::ElectCampaign, Reply::Nil) => (true, true),
            // 1 if it led, 0 if not (then nothing changed).
            (Cmd::ElectResign, Reply::Int(n)) => (*n == 0 || *n == 1, *n == 0),
            (Cmd::ElectProclaim, Reply::Int(n)) => {
                (leads(*n, o.args.get(3).map(Vec::as_slice)), false)
            }
            (Cmd::ElectLeader, Reply::Nil) => (record.is_none(), true),
            (Cmd::ElectLeader, reply) => (leadership(reply, false) == Some(recorded.clone()), true),
            // Nil: the term it named is the term now.
            (Cmd::ElectObserve, Reply::Nil) => (recorded.1 == term, true),
            (Cmd::ElectObserve, reply) => (
                recorded.1 != term && leadership(reply, true) == Some(recorded.clone()),
                true,
            ),
            _ => (false, false),
        };
        if !valid {
            self.fail(o, &format!("not a valid answer to {}", cmd.name()));
        }
        if must_not_change && !unchanged {
            self.fail(
                o,
                "a call that changes nothing by its answer changed the data",
            );
        }
        let what = match &o.reply {
            Reply::Nil if blocks && o.wrap != Wrap::Plain => "nil after BLOCK in MULTI or a script",
            Reply::Nil if blocks => "nil after BLOCK",
            Reply::Nil => "nil",
            _ if fence => "answer with FENCE",
            _ => "answer",
        };
        tally.count(format!("ok {}: {what}", cmd.name()));
    }

    /// Every leader record names a candidate holding its lock and expires
    /// with it, whatever the vector was.
    fn check_records(&self, o: &Outcome<'_>, tally: &mut Tally) {
        for record in o.records {
            if let Some(problem) = record.problem() {
                self.fail(o, &format!("{problem}: b\"{}\"", show(&record.name)));
            }
        }
        if !o.records.is_empty() {
            tally.count(format!(
                "leader records after a vector: {}",
                o.records.len().min(3)
            ));
        }
    }
}

fn env_u64(name: &str) -> Option<u64> {
    let raw = std::env::var(name).ok()?;
    let raw = raw.trim();
    match raw.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => raw.parse().ok(),
    }
    .or_else(|| panic!("{name}={raw:?} is not a number"))
}

/// How a vector is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wrap {
    Plain,
    /// `MULTI`, the vector, `EXEC`.
    Multi,
    /// `EVAL "return redis.pcall(unpack(ARGV))" 0 <vector>`.
    Script,
}

impl Wrap {
    fn pick(rng: &mut Rng) -> Wrap {
        match rng.below(32) {
            0 | 1 => Wrap::Multi,
            2 => Wrap::Script,
            _ => Wrap::Plain,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Wrap::Plain => "",
            Wrap::Multi => " inside MULTI/EXEC",
            Wrap::Script => " from a Lua script (EVAL, redis.pcall)",
        }
    }
}

const SCRIPT: &[u8] = b"return redis.pcall(unpack(ARGV))";

/// A vector and how it is sent.
struct Sent {
    args: Vec<Vec<u8>>,
    wrap: Wrap,
    /// Whether the leader records are read after it (see [`Elections`]).
    records: bool,
}

/// The names that may be elections in an epoch (the fixtures', and every
/// name an ELECT.CAMPAIGN vector named): the leader records are read after
/// every ELECT.* vector, every vector naming one of these, and 1 vector in
/// `RECORDS_EVERY` besides, so the check costs little where it cannot
/// fail.
struct Elections(std::collections::HashSet<Vec<u8>>);

const RECORDS_EVERY: u64 = 8;

impl Elections {
    fn new() -> Self {
        Elections(
            [&b"elected"[..], b"elnoval", b"elresigned"]
                .iter()
                .map(|n| n.to_vec())
                .collect(),
        )
    }

    /// Whether the records are read after `args`, the `index`th vector.
    fn note(&mut self, args: &[Vec<u8>], index: u64) -> bool {
        let cmd = Cmd::from_name(before_nul(&args[0]));
        if cmd == Some(Cmd::ElectCampaign) {
            if let Some(name) = args.get(1) {
                self.0.insert(name.clone());
            }
        }
        cmd.is_some_and(Cmd::is_election)
            || args[1..].iter().any(|a| self.0.contains(a))
            || index.is_multiple_of(RECORDS_EVERY)
    }
}

/// One pipelined batch: `PEXPIRETIME key`, the vector (see [`Wrap`]),
/// `DEBUG DIGEST`, `PEXPIRETIME key` and maybe the leader records
/// ([`RECORDS_SCRIPT`]) for each vector. The digest after a vector is the
/// digest before the next one.
fn send_batch(con: &mut Conn, batch: &[Sent]) -> io::Result<()> {
    let mut buf = Vec::new();
    for Sent {
        args,
        wrap,
        records,
    } in batch
    {
        let key = watched_key(args);
        encode(&mut buf, &[b"PEXPIRETIME".to_vec(), key.clone()]);
        match wrap {
            Wrap::Plain => encode(&mut buf, args),
            Wrap::Multi => {
                encode(&mut buf, &[b"MULTI".to_vec()]);
                encode(&mut buf, args);
                encode(&mut buf, &[b"EXEC".to_vec()]);
            }
            Wrap::Script => {
                let mut eval = vec![b"EVAL".to_vec(), SCRIPT.to_vec(), b"0".to_vec()];
                eval.extend(args.iter().cloned());
                encode(&mut buf, &eval);
            }
        }
        encode(&mut buf, &[b"DEBUG".to_vec(), b"DIGEST".to_vec()]);
        encode(&mut buf, &[b"PEXPIRETIME".to_vec(), key]);
        if *records {
            encode(
                &mut buf,
                &[b"EVAL".to_vec(), RECORDS_SCRIPT.to_vec(), b"0".to_vec()],
            );
        }
    }
    con.send(&buf)
}

fn digest(con: &mut Conn) -> Reply {
    con.call(&[b"DEBUG", b"DIGEST"])
}

#[test]
fn random_argument_vectors_get_an_error_code_or_a_valid_answer_and_errors_change_nothing() {
    let vectors = env_u64("LOCK_FUZZ_VECTORS").unwrap_or(40_000);
    let trace = std::env::var_os("LOCK_FUZZ_TRACE").is_some();
    let seed = env_u64("LOCK_FUZZ_SEED").unwrap_or(0x5EED_F022 ^ vectors);
    eprintln!("fuzz: {vectors} vectors, seed {seed} (LOCK_FUZZ_SEED to replay)");

    let run = Run {
        seed,
        // KEEPALIVE holds are bound but never renewed (each binding goes
        // at its first renewal): a renewal between two vectors would change
        // the digest an erroring vector must leave as it was.
        server: Config::default()
            .module_arg("default-lease-ms", &DEFAULT_LEASE_MS.to_string())
            .module_arg("keepalive-max-hold-ms", "1")
            .start(),
        session: std::cell::RefCell::new(SESSION.to_vec()),
    };
    // Every command the server registers, each with a grammar here.
    let registered = commands::registered(&mut run.server.client());
    let cmds = commands::known(&registered, "the fuzzer")
        .unwrap_or_else(|missing| panic!("fuzz: the commands are not all covered:\n{missing}"));
    let mut con = Conn::open(&run.server);
    let mut rng = Rng(seed);
    let mut tally = Tally::default();
    let started = Instant::now();

    let mut index = 0u64;
    let mut reset = true;
    let mut resp3 = false;
    let mut before = Reply::Nil;
    let mut elections = Elections::new();
    while index < vectors {
        if reset || index.is_multiple_of(EPOCH) {
            resp3 = rng.one_in(2);
            con.call(&[b"HELLO", if resp3 { b"3" } else { b"2" }]);
            load_fixtures(&mut con);
            *run.session.borrow_mut() = SESSION.to_vec();
            elections = Elections::new();
            before = digest(&mut con);
            reset = false;
        }
        // A batch ends at an epoch's end and after a 1 MB argument.
        let mut batch = Vec::new();
        while batch.len() < BATCH && index + (batch.len() as u64) < vectors {
            let args = vector(&mut rng, &cmds);
            let huge = args.iter().any(|a| a.len() >= HUGE_LEN);
            let wrap = Wrap::pick(&mut rng);
            let records = elections.note(&args, index + batch.len() as u64);
            batch.push(Sent {
                args,
                wrap,
                records,
            });
            if huge || (index + batch.len() as u64).is_multiple_of(EPOCH) {
                reset = huge;
                break;
            }
        }
        send_batch(&mut con, &batch).unwrap_or_else(|e| {
            panic!(
                "fuzz (LOCK_FUZZ_SEED={seed}): sending vectors #{index}.. failed: {e}\n{}",
                run.server.log()
            )
        });
        for Sent {
            args,
            wrap,
            records: with_records,
        } in &batch
        {
            let wrap = *wrap;
            let mut read = || {
                con.read().unwrap_or_else(|e| {
                    panic!(
                        "fuzz vector #{index} (LOCK_FUZZ_SEED={seed}): no reply ({e}); \
                         the server died or hung?\n  vector: {}{}\n  resp3: {resp3}\n  server log:\n{}",
                        show_vector(args),
                        wrap.label(),
                        run.server.log()
                    )
                })
            };
            let expiry_before = read();
            let reply = if wrap == Wrap::Multi {
                let multi = read();
                let queued = read();
                let exec = read();
                match (multi, queued, exec) {
                    // Arity and unknown commands are refused when queued,
                    // and the transaction with them.
                    (Reply::Status(ok), Reply::Error(e), Reply::Error(abort))
                        if ok == b"OK" && abort.starts_with(b"EXECABORT") =>
                    {
                        Reply::Error(e)
                    }
                    (Reply::Status(ok), Reply::Status(q), Reply::Array(mut items))
                        if ok == b"OK" && q == b"QUEUED" && items.len() == 1 =>
                    {
                        items.remove(0)
                    }
                    other => panic!(
                        "fuzz vector #{index} (LOCK_FUZZ_SEED={seed}) in MULTI: replies {other:?}\n  \
                         vector: {}",
                        show_vector(args)
                    ),
                }
            } else {
                read()
            };
            let after = read();
            let expiry_after = read();
            let records = if *with_records {
                records(&read())
                    .unwrap_or_else(|e| panic!("fuzz vector #{index} (LOCK_FUZZ_SEED={seed}): {e}"))
            } else {
                Vec::new()
            };
            if trace {
                eprintln!(
                    "#{index}{}: {} -> {reply:?}",
                    wrap.label(),
                    show_vector(args)
                );
            }
            let outcome = Outcome {
                index,
                args,
                wrap,
                expiry_before,
                reply,
                digest_before: &before,
                digest_after: &after,
                expiry_after,
                records: &records,
            };
            run.check(&outcome, &mut tally);
            run.check_records(&outcome, &mut tally);
            before = after;
            index += 1;
            tally.vectors += 1;
        }
    }
    let elapsed = started.elapsed();

    assert_eq!(
        con.call(&[b"PING"]),
        Reply::Status(b"PONG".to_vec()),
        "PING after the fuzz"
    );
    let log = run.server.log();
    for bad in [
        "crashed by signal",
        "BUG REPORT",
        "ASSERTION",
        "internal error",
        "panicked",
    ] {
        assert!(
            !log.contains(bad),
            "fuzz (LOCK_FUZZ_SEED={seed}): server log has {bad:?}:\n{log}"
        );
    }
    assert_eq!(run.server.stat("waiters"), 0, "waiters left behind");
    assert_eq!(
        run.server.stat("election_observers"),
        0,
        "observers left behind"
    );

    let mut summary = String::new();
    for (what, n) in &tally.by_outcome {
        let _ = writeln!(summary, "  {n:>9}  {what}");
    }
    eprintln!(
        "fuzz: {} vectors in {:.1?} ({:.0}/s), seed {seed}, by outcome:\n{summary}",
        tally.vectors,
        elapsed,
        tally.vectors as f64 / elapsed.as_secs_f64()
    );
    assert_eq!(tally.vectors, vectors);
    // The generator reaches every kind of outcome; a run too short to be
    // sure of that checks nothing more.
    if vectors >= 5000 {
        for kind in [
            "error lock.acquire: ERR syntax error",
            "error lock.acquire: ERR invalid",
            "error lock.acquire: ERR wrong number",
            "error lock.renew: ERR syntax error",
            "error lock.release: NOTOWNER",
            "error lock.acquire: WRONGTYPE",
            "error lock.info: WRONGTYPE",
            "error lock.release: ERR owner must not be empty",
            "ok lock.acquire: answer",
            "ok lock.acquire: nil",
            "ok lock.acquire: nil after BLOCK",
            "ok lock.renew: answer",
            "ok lock.release: answer",
            "ok lock.forcerelease: answer",
            "ok lock.info: answer",
            "ok lock.waiters: answer",
            "ok lock.queues: answer",
            "error lock.waiters: ERR invalid",
            "error lock.queues: ERR syntax error",
            "error lock.waiters: WRONGTYPE",
            "ok lock.racquire: answer",
            "ok lock.racquire: nil after BLOCK",
            "error lock.racquire: WRONGTYPE key holds an exclusive lock",
            "error lock.racquire: ERR owner",
            "ok lock.wacquire: answer",
            "ok lock.wacquire: nil",
            "error lock.wacquire: DEADLOCK",
            "error lock.wacquire: ERR syntax error",
            "ok lock.macquire: answer",
            "ok lock.macquire: nil",
            "ok lock.macquire: nil after BLOCK",
            "error lock.macquire: ERR numkeys",
            "error lock.macquire: ERR key",
            "error lock.macquire: ERR the owner is missing",
            "error lock.macquire: WRONGTYPE key holds a read-write lock",
            "ok lock.mrelease: answer",
            "error lock.mrelease: NOTOWNER",
            "error lock.mrelease: ERR wrong number",
            "error lock.release: ERR the owner holds both",
            "ok sem.init: answer",
            "ok sem.acquire: answer",
            "ok sem.acquire: nil",
            "ok sem.acquire: nil after BLOCK",
            "ok sem.acquire: answer with FENCE",
            "error sem.acquire: ERR invalid PERMITS",
            "error sem.acquire: CROSSSLOT",
            "error sem.acquire: WRONGTYPE",
            "ok sem.release: answer",
            "error sem.release: NOTOWNER",
            "ok sem.renew: answer",
            "ok sem.add: answer",
            "error sem.add: ERR SEM.ADD would leave",
            "ok sem.take: answer",
            "ok sem.take: nil after BLOCK",
            "ok sem.give: answer",
            "error sem.give: ERR SEM.GIVE would leave",
            "ok sem.info: answer",
            "error sem.info: WRONGTYPE",
            "ok latch.init: answer",
            "error latch.init: ERR invalid count",
            "ok latch.countdown: answer",
            "error latch.countdown: WRONGTYPE",
            "ok latch.await: answer",
            "ok latch.await: nil after BLOCK",
            "ok latch.info: answer",
            "ok elect.campaign: answer",
            "ok elect.campaign: nil",
            "ok elect.campaign: nil after BLOCK",
            "error elect.campaign: ERR ELECT.CAMPAIGN needs KEEPALIVE",
            "error elect.campaign: NOSESSION",
            "error elect.campaign: CROSSSLOT",
            "error elect.campaign: WRONGTYPE",
            "ok elect.resign: answer",
            "ok elect.proclaim: answer",
            "error elect.proclaim: NOTOWNER",
            "ok elect.leader: answer",
            "ok elect.leader: nil",
            "ok elect.observe: answer",
            "ok elect.observe: nil after BLOCK",
            "error elect.observe: ERR invalid TERM",
            "leader records after a vector",
        ] {
            assert!(
                tally.seen(kind) > 0,
                "the fuzz never produced {kind:?}:\n{summary}"
            );
        }
    }
}

/// The largest valid `BLOCK` and lease values (which the fuzz sends short)
/// queue a caller like any other: it is handed the lock, with a lease of up
/// to 2^53 - 1 ms, when the holder releases, or answered nil when unblocked,
/// and no deadline overflows.
#[test]
fn the_largest_valid_block_and_lease_values_wait_and_are_served() {
    let server = Server::start();
    let mut con = server.client();
    let max = MAX_DURATION_MS.to_string();
    let max_s = (MAX_DURATION_MS / 1000).to_string();
    let cases: [(&str, &[&str]); 4] = [
        ("BLOCK", &["PX", &max]),
        ("block", &["EX", &max_s, "FENCE"]),
        ("BLOCK", &["px", "999999999999999"]),
        ("Block", &[]),
    ];
    for (i, (block, lease)) in cases.into_iter().enumerate() {
        let key = format!("big-{i}");
        assert_eq!(
            acquire(&mut con, &key, "holder", &["PX", "600000"]),
            Value::Int(1)
        );
        let mut waiter = server.client();
        let id = client_id(&mut waiter);
        let mut args = vec!["LOCK.ACQUIRE", key.as_str(), "waiter", block, &max];
        args.extend_from_slice(lease);
        send(&mut waiter, &args);
        wait_for_waiters(&mut con, &key, 1);
        if i % 2 == 0 {
            let left: i64 = q(&mut con, &["LOCK.RELEASE", &key, "holder"]);
            assert_eq!(left, 0);
            assert_eq!(recv(&mut waiter).expect("reply"), Value::Int(1), "{args:?}");
            assert_eq!(
                lock_field(&mut con, &key, "owner").as_deref(),
                Some("waiter")
            );
            let ttl: i64 = lock_field(&mut con, &key, "ttl")
                .and_then(|t| t.parse().ok())
                .expect("ttl");
            assert!(ttl > 600_000, "{args:?}: lease {ttl}");
        } else {
            let unblocked: i64 = q(&mut con, &["CLIENT", "UNBLOCK", &id.to_string()]);
            assert_eq!(unblocked, 1);
            assert_eq!(recv(&mut waiter).expect("reply"), Value::Nil, "{args:?}");
            assert_eq!(
                lock_field(&mut con, &key, "owner").as_deref(),
                Some("holder")
            );
        }
        assert_eq!(waiters(&mut con, &key), 0);
    }
    assert_eq!(server.stat("waiters"), 0);
    let log = server.log();
    for bad in [
        "crashed by signal",
        "ASSERTION",
        "internal error",
        "panicked",
    ] {
        assert!(!log.contains(bad), "server log has {bad:?}:\n{log}");
    }
}
