//! Blocking, FIFO order and hand-off: LOCK.ACQUIRE ... BLOCK waiters and
//! every way a lock they wait for can end.
//!
//! Waiters use [`Waiter`], a bare socket with a tiny RESP reader, instead of
//! a `redis::Connection`: checking that a reply has *not* arrived needs a
//! read timeout, and after one `redis::Connection` silently drops the next
//! reply (it counts the timed-out one as "to skip").

use crate::common;
use common::*;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

/// A reply as the waiter saw it: a value, or an error line (`CODE message`).
type Reply = Result<Value, String>;

/// How long a waiter must stay silent when nothing should reach it.
const QUIET: Duration = Duration::from_millis(150);

/// A client connection read by hand, for callers that block.
struct Waiter {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Waiter {
    fn connect(server: &Server) -> Waiter {
        let stream = TcpStream::connect(server.addr()).expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        Waiter {
            stream,
            buf: Vec::new(),
        }
    }

    fn send(&mut self, args: &[&str]) {
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        self.stream
            .write_all(&cmd.get_packed_command())
            .expect("send");
    }

    fn call(&mut self, args: &[&str]) -> Reply {
        self.send(args);
        self.reply()
    }

    /// `CLIENT ID` of this connection.
    fn id(&mut self) -> String {
        match self.call(&["CLIENT", "ID"]) {
            Ok(Value::Int(id)) => id.to_string(),
            other => panic!("CLIENT ID replied {other:?}"),
        }
    }

    /// The next reply; panics after [`PATIENCE`].
    fn reply(&mut self) -> Reply {
        self.reply_within(PATIENCE)
            .unwrap_or_else(|| panic!("no reply within {PATIENCE:?}"))
    }

    /// The next reply if it arrives within `wait`.
    fn reply_within(&mut self, wait: Duration) -> Option<Reply> {
        let deadline = Instant::now() + wait;
        loop {
            if let Some((reply, used)) = parse(&self.buf) {
                self.buf.drain(..used);
                return Some(reply);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || !self.fill(Some(left)) {
                return None;
            }
        }
    }

    /// Whether a reply is already here, without waiting.
    fn has_reply_now(&mut self) -> bool {
        self.stream.set_nonblocking(true).expect("nonblocking");
        let got = self.fill(None);
        self.stream.set_nonblocking(false).expect("blocking");
        got || !self.buf.is_empty()
    }

    /// Reads what is there (waiting up to `timeout`); false if nothing came.
    fn fill(&mut self, timeout: Option<Duration>) -> bool {
        if timeout.is_some() {
            self.stream.set_read_timeout(timeout).expect("read timeout");
        }
        let mut chunk = [0u8; 4096];
        match self.stream.read(&mut chunk) {
            Ok(0) => panic!("server closed the connection (buffered: {:?})", self.buf),
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => false,
            Err(e) => panic!("read: {e}"),
        }
    }

    /// Asserts nothing arrives for `wait`.
    fn assert_silent(&mut self, wait: Duration, why: &str) {
        if let Some(reply) = self.reply_within(wait) {
            panic!("{why}: the waiter was answered {reply:?}");
        }
    }

    /// Waits until the server closes this connection; returns what had
    /// arrived before (nothing, normally).
    fn wait_closed(&mut self) -> Vec<u8> {
        self.stream
            .set_read_timeout(Some(PATIENCE))
            .expect("read timeout");
        let mut chunk = [0u8; 4096];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => return std::mem::take(&mut self.buf),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::ConnectionReset => {
                    return std::mem::take(&mut self.buf)
                }
                Err(e) => panic!("waiting for the connection to close: {e}"),
            }
        }
    }
}

/// One RESP reply from the front of `buf`, and its length; `None` while
/// incomplete.
fn parse(buf: &[u8]) -> Option<(Reply, usize)> {
    let end = buf.windows(2).position(|w| w == b"\r\n")?;
    let line = String::from_utf8_lossy(&buf[1..end]).into_owned();
    let after = end + 2;
    let reply = match *buf.first()? {
        b'+' => Ok(Value::SimpleString(line)),
        b'-' => Err(line),
        b':' => Ok(Value::Int(line.parse().expect("integer reply"))),
        b'_' => Ok(Value::Nil),
        b'$' => {
            let len: i64 = line.parse().expect("bulk length");
            if len < 0 {
                return Some((Ok(Value::Nil), after));
            }
            let len = len as usize;
            if buf.len() < after + len + 2 {
                return None;
            }
            let data = buf[after..after + len].to_vec();
            return Some((Ok(Value::BulkString(data)), after + len + 2));
        }
        b'*' => {
            let n: i64 = line.parse().expect("array length");
            if n < 0 {
                return Some((Ok(Value::Nil), after));
            }
            let mut items = Vec::new();
            let mut at = after;
            for _ in 0..n {
                let (item, used) = parse(&buf[at..])?;
                at += used;
                items.push(item.unwrap_or_else(|e| Value::SimpleString(format!("-{e}"))));
            }
            return Some((Ok(Value::Array(items)), at));
        }
        other => panic!("unexpected RESP type {:?}", other as char),
    };
    Some((reply, after))
}

impl BlockingClient for Waiter {
    fn open(server: &Server) -> Self {
        Waiter::connect(server)
    }

    fn send_command(&mut self, args: &[&str]) {
        self.send(args)
    }
}

fn owner(con: &mut Connection, key: &str) -> Option<String> {
    lock_field(con, key, "owner")
}

fn ttl(con: &mut Connection, key: &str) -> i64 {
    lock_field(con, key, "ttl")
        .unwrap_or_else(|| panic!("{key} is not locked"))
        .parse()
        .expect("ttl")
}

// ---------------------------------------------------------------------------
// FIFO and mutual exclusion

#[test]
fn fifty_waiters_are_served_in_arrival_order() {
    let server = Server::start();
    let mut con = server.client();
    assert_eq!(acquire(&mut con, "k", "holder", &[]), Value::Int(1));
    let mut queued: Vec<Waiter> = (0..50)
        .map(|i| {
            let owner = format!("w{i}");
            queue_waiter(&server, &mut con, "k", &owner, &["BLOCK", "0"], i + 1)
        })
        .collect();
    let handed_before = server.stat("handed_off");

    let mut previous = "holder".to_string();
    for i in 0..queued.len() {
        let left: i64 = q(&mut con, &["LOCK.RELEASE", "k", &previous]);
        assert_eq!(left, 0);
        assert_eq!(queued[i].reply(), Ok(Value::Int(1)), "waiter w{i}");
        if let Some(next) = queued.get_mut(i + 1) {
            assert!(
                !next.has_reply_now(),
                "w{} answered before w{i} released",
                i + 1
            );
        }
        previous = format!("w{i}");
        assert_eq!(owner(&mut con, "k").as_deref(), Some(previous.as_str()));
        assert_eq!(waiters(&mut con, "k"), 49 - i as i64);
    }
    let left: i64 = q(&mut con, &["LOCK.RELEASE", "k", &previous]);
    assert_eq!(left, 0);
    assert!(lock_info(&mut con, "k").is_empty());
    assert_eq!(server.stat("handed_off") - handed_before, 50);
    assert_eq!(server.stat("waiters"), 0);
}

#[test]
fn hundred_clients_never_overlap() {
    let server = Server::start();
    let inside = AtomicBool::new(false);
    let start = Barrier::new(100);
    thread::scope(|s| {
        for i in 0..100 {
            let (server, inside, start) = (&server, &inside, &start);
            s.spawn(move || {
                let mut con = server.client();
                let me = format!("c{i}");
                start.wait();
                let got = acquire(&mut con, "k", &me, &["PX", "10000", "BLOCK", "0"]);
                assert_eq!(got, Value::Int(1), "{me} acquire");
                assert!(!inside.swap(true, Ordering::SeqCst), "{me}: overlap (flag)");
                let fresh: Option<String> = q(&mut con, &["SET", "inside", &me, "NX"]);
                assert!(fresh.is_some(), "{me}: overlap (inside key already set)");
                let _: i64 = q(&mut con, &["INCR", "count"]);
                let _: i64 = q(&mut con, &["DEL", "inside"]);
                inside.store(false, Ordering::SeqCst);
                let left: i64 = q(&mut con, &["LOCK.RELEASE", "k", &me]);
                assert_eq!(left, 0, "{me} release");
            });
        }
    });
    let mut con = server.client();
    let count: i64 = q(&mut con, &["GET", "count"]);
    assert_eq!(count, 100);
    assert!(lock_info(&mut con, "k").is_empty());
    assert_eq!(server.stat("acquired"), 100);
    assert_eq!(server.stat("waiters"), 0);
}

#[test]
fn holder_reentry_is_granted_while_others_wait() {
    let server = Server::start();
    let mut con = server.client();
    acquire(&mut con, "k", "holder", &[]);
    let mut w: Waiter = queue_waiter(&server, &mut con, "k", "w", &["BLOCK", "0"], 1);

    assert_eq!(acquire(&mut con, "k", "holder", &[]), Value::Int(2));
    // Even with BLOCK the holder is not queued behind w.
    assert_eq!(
        acquire(&mut con, "k", "holder", &["BLOCK", "0"]),
        Value::Int(3)
    );
    assert_eq!(lock_field(&mut con, "k", "holds").as_deref(), Some("3"));
    assert_eq!(waiters(&mut con, "k"), 1);

    for left in [2, 1] {
        let n: i64 = q(&mut con, &["LOCK.RELEASE", "k", "holder"]);
        assert_eq!(n, left);
        assert!(!w.has_reply_now(), "answered while the holder still holds");
    }
    let n: i64 = q(&mut con, &["LOCK.RELEASE", "k", "holder"]);
    assert_eq!(n, 0);
    assert_eq!(w.reply(), Ok(Value::Int(1)));
    assert_eq!(owner(&mut con, "k").as_deref(), Some("w"));
}

#[test]
fn newcomer_does_not_overtake_a_waiter() {
    let server = Server::start();
    let mut con = server.client();
    acquire(&mut con, "k", "holder", &[]);
    let mut w: Waiter = queue_waiter(&server, &mut con, "k", "w", &["BLOCK", "0"], 1);

    let _: () = q(&mut con, &["MULTI"]);
    let _: () = q(&mut con, &["DEL", "k"]);
    let _: () = q(&mut con, &["LOCK.ACQUIRE", "k", "newcomer"]);
    let replies: Vec<Value> = q(&mut con, &["EXEC"]);
    assert_eq!(replies, vec![Value::Int(1), Value::Nil]);

    assert_eq!(w.reply(), Ok(Value::Int(1)));
    assert_eq!(owner(&mut con, "k").as_deref(), Some("w"));
}

// ---------------------------------------------------------------------------
// Waiting ends without the lock

#[test]
fn block_timeout_returns_nil_on_time() {
    // hz 1: Redis's own blocked-client timeouts would be about 1 s coarse.
    let server = Config::default().arg("hz", "1").start();
    let mut con = server.client();
    acquire(&mut con, "k", "holder", &[]);
    let timeouts_before = server.stat("wait_timeouts");

    let mut w = Waiter::connect(&server);
    let started = Instant::now();
    w.send(&["LOCK.ACQUIRE", "k", "w", "BLOCK", "100"]);
    assert_eq!(w.reply(), Ok(Value::Nil));
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(100) && elapsed < Duration::from_millis(400),
        "BLOCK 100 ended after {elapsed:?}"
    );

    assert_eq!(owner(&mut con, "k").as_deref(), Some("holder"));
    assert_eq!(waiters(&mut con, "k"), 0);
    assert_eq!(server.stat("wait_timeouts"), timeouts_before + 1);
    assert_eq!(server.stat("waiters"), 0);
    // The connection is usable again.
    assert_eq!(w.call(&["PING"]), Ok(Value::SimpleString("PONG".into())));
}

#[test]
fn block_times_end_in_deadline_order_whatever_the_queue_order() {
    let server = Config::default().arg("hz", "1").start();
    let mut con = server.client();
    acquire(&mut con, "k", "holder", &[]);
    acquire(&mut con, "o", "x", &[]);
    let started = Instant::now();
    // Queued first, times out last; queued later with an earlier deadline;
    // one that never times out; one served before its deadline.
    let mut long: Waiter = queue_waiter(&server, &mut con, "k", "long", &["BLOCK", "600"], 1);
    let mut short: Waiter = queue_waiter(&server, &mut con, "k", "short", &["BLOCK", "150"], 2);
    let mut forever: Waiter = queue_waiter(&server, &mut con, "k", "forever", &["BLOCK", "0"], 3);
    let mut other: Waiter = queue_waiter(&server, &mut con, "o", "other", &["BLOCK", "300"], 1);

    assert_eq!(short.reply(), Ok(Value::Nil));
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(150) && elapsed < Duration::from_millis(450),
        "BLOCK 150 ended after {elapsed:?}"
    );
    assert!(!long.has_reply_now(), "BLOCK 600 ended with BLOCK 150");
    assert_eq!(waiters(&mut con, "k"), 2);

    // "o" is freed before its waiter's deadline: granted, and never told nil.
    assert_eq!(q::<i64>(&mut con, &["LOCK.FORCERELEASE", "o"]), 1);
    assert_eq!(other.reply(), Ok(Value::Int(1)));

    assert_eq!(long.reply(), Ok(Value::Nil));
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(600) && elapsed < Duration::from_millis(900),
        "BLOCK 600 ended after {elapsed:?}"
    );
    other.assert_silent(
        Duration::from_millis(50),
        "a served waiter was timed out too",
    );
    assert_eq!(waiters(&mut con, "k"), 1);
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "k", "holder"]), 0);
    assert_eq!(forever.reply(), Ok(Value::Int(1)));
    assert_eq!(server.stat("wait_timeouts"), 2);
}

#[test]
fn disconnected_waiters_leave_the_queue() {
    let server = Server::start();
    let mut con = server.client();
    acquire(&mut con, "k", "holder", &[]);
    let w1: Waiter = queue_waiter(&server, &mut con, "k", "w1", &["BLOCK", "0"], 1);
    let mut w2: Waiter = queue_waiter(&server, &mut con, "k", "w2", &["BLOCK", "0"], 2);
    let mut w3 = Waiter::connect(&server);
    let w3_id = w3.id();
    w3.send(&["LOCK.ACQUIRE", "k", "w3", "BLOCK", "0"]);
    wait_for_waiters(&mut con, "k", 3);
    let mut w4: Waiter = queue_waiter(&server, &mut con, "k", "w4", &["BLOCK", "0"], 4);
    let before = server.stat("waiters_disconnected");

    drop(w1);
    wait_for_waiters(&mut con, "k", 3);
    let killed: i64 = q(&mut con, &["CLIENT", "KILL", "ID", &w3_id]);
    assert_eq!(killed, 1);
    wait_for_waiters(&mut con, "k", 2);
    assert_eq!(server.stat("waiters_disconnected"), before + 2);

    let _: i64 = q(&mut con, &["LOCK.RELEASE", "k", "holder"]);
    assert_eq!(w2.reply(), Ok(Value::Int(1)));
    assert_eq!(owner(&mut con, "k").as_deref(), Some("w2"));
    let _: i64 = q(&mut con, &["LOCK.RELEASE", "k", "w2"]);
    assert_eq!(w4.reply(), Ok(Value::Int(1)));
    assert_eq!(owner(&mut con, "k").as_deref(), Some("w4"));
    assert_eq!(waiters(&mut con, "k"), 0);
    assert_eq!(server.stat("waiters"), 0);
}

#[test]
fn client_unblock_removes_the_waiter() {
    let server = Server::start();
    let mut con = server.client();
    acquire(&mut con, "k", "holder", &[]);
    let mut ids = Vec::new();
    let mut ws: Vec<Waiter> = (1..=3)
        .map(|i| {
            let mut w = Waiter::connect(&server);
            ids.push(w.id());
            w.send(&["LOCK.ACQUIRE", "k", &format!("w{i}"), "BLOCK", "0"]);
            wait_for_waiters(&mut con, "k", i);
            w
        })
        .collect();

    let n: i64 = q(&mut con, &["CLIENT", "UNBLOCK", &ids[0]]);
    assert_eq!(n, 1);
    assert_eq!(ws[0].reply(), Ok(Value::Nil));
    assert_eq!(waiters(&mut con, "k"), 2);

    let n: i64 = q(&mut con, &["CLIENT", "UNBLOCK", &ids[1], "ERROR"]);
    assert_eq!(n, 1);
    assert_eq!(
        ws[1].reply(),
        Err("UNBLOCKED client unblocked via CLIENT UNBLOCK".into())
    );
    assert_eq!(waiters(&mut con, "k"), 1);

    // Both connections still work and hold nothing.
    assert_eq!(
        ws[0].call(&["PING"]),
        Ok(Value::SimpleString("PONG".into()))
    );
    assert_eq!(
        ws[1].call(&["PING"]),
        Ok(Value::SimpleString("PONG".into()))
    );
    let _: i64 = q(&mut con, &["LOCK.RELEASE", "k", "holder"]);
    assert_eq!(ws[2].reply(), Ok(Value::Int(1)));
    assert_eq!(owner(&mut con, "k").as_deref(), Some("w3"));
    assert_eq!(server.stat("waiters"), 0);
}

/// Overwrites with another type fire no event the module listens to (that
/// would tax every SET on the server); the lease timer notices them.
#[test]
fn overwritten_key_answers_waiters_with_wrongtype_at_the_lease_deadline() {
    let server = Server::start();
    let mut con = server.client();
    acquire(&mut con, "k", "holder", &["PX", "300"]);
    let mut w1: Waiter = queue_waiter(&server, &mut con, "k", "w1", &["BLOCK", "0"], 1);
    let mut w2: Waiter = queue_waiter(&server, &mut con, "k", "w2", &["BLOCK", "0"], 2);

    let _: () = q(&mut con, &["SET", "k", "x"]);
    let wrongtype = Err("WRONGTYPE Operation against a key holding the wrong kind of value".into());
    assert_eq!(w1.reply(), wrongtype);
    assert_eq!(w2.reply(), wrongtype);
    let v: String = q(&mut con, &["GET", "k"]);
    assert_eq!(v, "x");
    assert_eq!(server.stat("waiters"), 0);
}

// ---------------------------------------------------------------------------
// Each waiter's own lease, fencing, lost grants

#[test]
fn each_waiter_gets_its_own_lease() {
    let server = Server::start();
    let mut con = server.client();
    acquire(&mut con, "k", "holder", &[]);
    let mut short: Waiter = queue_waiter(
        &server,
        &mut con,
        "k",
        "short",
        &["PX", "300", "BLOCK", "0"],
        1,
    );
    let mut long: Waiter = queue_waiter(
        &server,
        &mut con,
        "k",
        "long",
        &["PX", "4000", "BLOCK", "0"],
        2,
    );

    let _: i64 = q(&mut con, &["LOCK.RELEASE", "k", "holder"]);
    assert_eq!(short.reply(), Ok(Value::Int(1)));
    assert_eq!(owner(&mut con, "k").as_deref(), Some("short"));
    let t = ttl(&mut con, "k");
    assert!(0 < t && t <= 300, "short's ttl {t}");

    // Nobody releases: short's lease runs out and long is handed the lock.
    assert_eq!(long.reply(), Ok(Value::Int(1)));
    assert_eq!(owner(&mut con, "k").as_deref(), Some("long"));
    let t = ttl(&mut con, "k");
    assert!(3000 < t && t <= 4000, "long's ttl {t}");
}

#[test]
fn fenced_waiter_gets_a_newer_token() {
    let server = Server::start();
    let mut con = server.client();
    let first = match acquire(&mut con, "k", "holder", &["FENCE"]) {
        Value::Int(t) => t,
        other => panic!("FENCE replied {other:?}"),
    };
    let mut w: Waiter = queue_waiter(&server, &mut con, "k", "w", &["BLOCK", "0", "FENCE"], 1);
    let _: i64 = q(&mut con, &["LOCK.RELEASE", "k", "holder"]);
    let token = match w.reply() {
        Ok(Value::Int(t)) => t,
        other => panic!("fenced waiter replied {other:?}"),
    };
    assert!(token > first, "token {token} after {first}");
    assert_eq!(owner(&mut con, "k").as_deref(), Some("w"));
    assert_eq!(lock_field(&mut con, "k", "holds").as_deref(), Some("1"));
    assert_eq!(lock_field(&mut con, "k", "token"), Some(token.to_string()));
}

#[test]
fn lost_grant_is_released_to_the_next_waiter() {
    let server = Server::start();
    let mut con = server.client();
    acquire(&mut con, "k", "holder", &[]);
    let mut w1 = Waiter::connect(&server);
    let w1_id = w1.id();
    w1.send(&["LOCK.ACQUIRE", "k", "w1", "BLOCK", "0"]);
    wait_for_waiters(&mut con, "k", 1);
    let mut w2: Waiter = queue_waiter(&server, &mut con, "k", "w2", &["BLOCK", "0"], 2);

    // W1 is granted inside EXEC and killed before it can hear it.
    let _: () = q(&mut con, &["MULTI"]);
    let _: () = q(&mut con, &["LOCK.RELEASE", "k", "holder"]);
    let _: () = q(&mut con, &["CLIENT", "KILL", "ID", &w1_id]);
    let replies: Vec<Value> = q(&mut con, &["EXEC"]);
    assert_eq!(replies, vec![Value::Int(0), Value::Int(1)]);

    assert_eq!(w2.reply(), Ok(Value::Int(1)));
    assert_eq!(owner(&mut con, "k").as_deref(), Some("w2"));
    assert_eq!(server.stat("lost_grants_released"), 1);
    assert_eq!(w1.wait_closed(), b"", "w1 was answered before it died");
}

// ---------------------------------------------------------------------------
// Lease expiry

/// A holder with a short lease and a waiter with PX 5000: the waiter gets
/// the lock when the lease ends, nobody releasing.
fn check_lease_expiry_hand_off(server: &Server) {
    let mut con = server.client();
    let expired_before = server.stat("expired_with_waiters");
    let handed_before = server.stat("handed_off");
    // The lease must outlast queueing the waiter (else it simply acquires).
    let granted = Instant::now();
    acquire(&mut con, "k", "holder", &["PX", "300"]);
    let mut w: Waiter = queue_waiter(server, &mut con, "k", "w", &["PX", "5000", "BLOCK", "0"], 1);
    let deadline: i64 = q(&mut con, &["PEXPIRETIME", "k"]);
    assert!(
        granted.elapsed() < Duration::from_millis(300),
        "setup outlasted the lease; the test proves nothing"
    );

    assert_eq!(w.reply(), Ok(Value::Int(1)));
    assert_eq!(owner(&mut con, "k").as_deref(), Some("w"));
    let t = ttl(&mut con, "k");
    assert!(4000 < t && t <= 5000, "ttl after hand-off {t}");
    // The new lease started at the grant, and the old one lasted through
    // its deadline's millisecond (as Redis's own expiry has it): a holder
    // gets at least the lease it asked for, counted from its request.
    let new_deadline: i64 = q(&mut con, &["PEXPIRETIME", "k"]);
    assert!(
        new_deadline - 5000 > deadline,
        "granted at {} while the old lease ran to the end of {deadline}",
        new_deadline - 5000
    );
    assert_eq!(server.stat("handed_off"), handed_before + 1);
    assert_eq!(server.stat("expired_with_waiters"), expired_before + 1);
}

#[test]
fn lease_expiry_hands_off() {
    let server = Server::start();
    // Redis's active expiry may notice the expired key a moment before the
    // module's lease timer does: either way it is one expiry with waiters.
    check_lease_expiry_hand_off(&server);
}

#[test]
fn lease_expiry_hands_off_without_active_expire() {
    let server = Server::start();
    let _: () = q(&mut server.client(), &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]);
    check_lease_expiry_hand_off(&server);
}

fn thread_names(server: &Server) -> Vec<String> {
    let pid = server.pid().expect("server pid");
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|tasks| {
            tasks
                .flatten()
                .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
                .map(|name| name.trim().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// The lease-end wake-up thread starts at the first lease timer and is
/// stopped by MODULE UNLOAD, which is accepted once no timer is left.
#[test]
fn module_unloads_after_lease_hand_offs_and_stops_its_thread() {
    let server = Config::default()
        .arg("enable-module-command", "yes")
        .start();
    let mut con = server.client();
    assert!(!thread_names(&server).iter().any(|n| n == "lock-alarm"));
    acquire(&mut con, "k", "holder", &["PX", "200"]);
    let mut w: Waiter = queue_waiter(&server, &mut con, "k", "w", &["PX", "100", "BLOCK", "0"], 1);
    assert_eq!(w.reply(), Ok(Value::Int(1)));
    assert!(thread_names(&server).iter().any(|n| n == "lock-alarm"));

    // Refused while a timer of the module is armed, then accepted.
    wait_until("MODULE UNLOAD accepted", || {
        raw(&mut con, &["MODULE", "UNLOAD", "lock"]).is_ok()
    });
    assert!(!thread_names(&server).iter().any(|n| n == "lock-alarm"));
    // Other modules may be built in (Valkey's lua, Redis 8's vectorset).
    let modules: Vec<Vec<(String, Value)>> = q(&mut con, &["MODULE", "LIST"]);
    let names: Vec<String> = modules
        .iter()
        .filter_map(|m| m.iter().find(|(k, _)| k == "name").map(|(_, v)| text(v)))
        .collect();
    assert!(
        !names.iter().any(|n| n == "lock"),
        "still loaded: {names:?}"
    );
    assert_eq!(w.call(&["PING"]), Ok(Value::SimpleString("PONG".into())));
}

#[test]
fn no_hand_off_while_clients_are_paused() {
    let server = Server::start();
    let mut con = server.client();
    let granted = Instant::now();
    acquire(&mut con, "k", "holder", &["PX", "300"]);
    let mut w: Waiter = queue_waiter(
        &server,
        &mut con,
        "k",
        "w",
        &["PX", "5000", "BLOCK", "0"],
        1,
    );
    let _: () = q(&mut con, &["CLIENT", "PAUSE", "2000", "WRITE"]);
    assert!(
        granted.elapsed() < Duration::from_millis(300),
        "setup outlasted the lease; the test proves nothing"
    );

    // The lease ends during the pause: the hand-off must wait.
    let quiet_until = granted + Duration::from_millis(300) + QUIET * 2;
    w.assert_silent(
        quiet_until.saturating_duration_since(Instant::now()),
        "lease ended during CLIENT PAUSE WRITE",
    );
    let pong: String = q(&mut con, &["PING"]);
    assert_eq!(pong, "PONG");

    let _: () = q(&mut con, &["CLIENT", "UNPAUSE"]);
    assert_eq!(w.reply(), Ok(Value::Int(1)));
    assert_eq!(owner(&mut con, "k").as_deref(), Some("w"));
    assert_eq!(server.stat("expired_with_waiters"), 1);
    let pong: String = q(&mut con, &["PING"]);
    assert_eq!(pong, "PONG");
    assert!(
        !server.log().contains("ASSERTION"),
        "server log:\n{}",
        server.log()
    );
}

// ---------------------------------------------------------------------------
// The key vanishing in other ways

/// A server where `holder` holds `k` (30 s lease) and `w` waits for it with
/// BLOCK 0 PX 10000.
struct Scene {
    server: Server,
    con: Connection,
    w: Waiter,
}

impl Scene {
    fn new(config: Config) -> Scene {
        let server = config.start();
        let mut con = server.client();
        assert_eq!(
            acquire(&mut con, "k", "holder", &["PX", "30000"]),
            Value::Int(1)
        );
        let w = queue_waiter(
            &server,
            &mut con,
            "k",
            "w",
            &["PX", "10000", "BLOCK", "0"],
            1,
        );
        Scene { server, con, w }
    }

    fn run(&mut self, args: &[&str]) -> Value {
        q(&mut self.con, args)
    }

    /// The waiter is answered 1 and owns `k` in the current db, with its own
    /// lease.
    fn assert_handed_off(&mut self) {
        assert_eq!(self.w.reply(), Ok(Value::Int(1)));
        let info = lock_info(&mut self.con, "k");
        let get = |name: &str| {
            field(&info, name).unwrap_or_else(|| panic!("LOCK.INFO k has no {name}: {info:?}"))
        };
        assert_eq!(get("owner"), "w");
        assert_eq!(get("holds"), "1");
        assert_eq!(get("waiters"), "0");
        let t: i64 = get("ttl").parse().expect("ttl");
        assert!(9000 < t && t <= 10000, "ttl {t}");
        assert_eq!(self.server.stat("waiters"), 0);
    }

    /// LOCK.INFO k in db `db` (the connection returns to db 0).
    fn owner_in(&mut self, db: &str, key: &str) -> Option<String> {
        let _: () = q(&mut self.con, &["SELECT", db]);
        let o = owner(&mut self.con, key);
        let _: () = q(&mut self.con, &["SELECT", "0"]);
        o
    }
}

fn hands_off_after(args: &[&str]) {
    let mut s = Scene::new(Config::default());
    s.run(args);
    s.assert_handed_off();
}

#[test]
fn hand_off_on_del() {
    hands_off_after(&["DEL", "k"]);
}

#[test]
fn hand_off_on_unlink() {
    hands_off_after(&["UNLINK", "k"]);
}

#[test]
fn hand_off_on_hdel_of_the_owner() {
    hands_off_after(&["HDEL", "k", "holder"]);
}

#[test]
fn hand_off_on_expire_zero() {
    hands_off_after(&["EXPIRE", "k", "0"]);
}

#[test]
fn hand_off_on_pexpireat_in_the_past() {
    hands_off_after(&["PEXPIREAT", "k", "1000"]);
}

#[test]
fn hand_off_on_redisson_style_release() {
    const UNLOCK: &str = "if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then return nil end; \
        local n = redis.call('hincrby', KEYS[1], ARGV[1], -1); \
        if n > 0 then return 0 end; \
        redis.call('del', KEYS[1]); return 1";
    let mut s = Scene::new(Config::default());
    assert_eq!(s.run(&["EVAL", UNLOCK, "1", "k", "holder"]), Value::Int(1));
    s.assert_handed_off();
}

#[test]
fn hand_off_on_forcerelease() {
    let mut s = Scene::new(Config::default());
    assert_eq!(s.run(&["LOCK.FORCERELEASE", "k"]), Value::Int(1));
    s.assert_handed_off();
}

#[test]
fn hand_off_on_flushdb() {
    hands_off_after(&["FLUSHDB"]);
}

#[test]
fn hand_off_on_flushall() {
    hands_off_after(&["FLUSHALL"]);
}

#[test]
fn hand_off_on_swapdb_with_an_empty_db() {
    let mut s = Scene::new(Config::default());
    s.run(&["SWAPDB", "0", "1"]);
    s.assert_handed_off();
    assert_eq!(s.owner_in("1", "k").as_deref(), Some("holder"));
}

#[test]
fn swapdb_bringing_a_held_lock_keeps_the_waiter_waiting() {
    let mut s = Scene::new(Config::default());
    s.run(&["SELECT", "1"]);
    acquire(&mut s.con, "k", "other", &["PX", "30000"]);
    s.run(&["SELECT", "0"]);

    s.run(&["SWAPDB", "0", "1"]);
    s.w.assert_silent(QUIET, "SWAPDB brought in a lock held by another");
    assert_eq!(owner(&mut s.con, "k").as_deref(), Some("other"));
    assert_eq!(waiters(&mut s.con, "k"), 1);

    let left: i64 = q(&mut s.con, &["LOCK.RELEASE", "k", "other"]);
    assert_eq!(left, 0);
    s.assert_handed_off();
    assert_eq!(s.owner_in("1", "k").as_deref(), Some("holder"));
}

#[test]
fn hand_off_on_rename_away() {
    let mut s = Scene::new(Config::default());
    s.run(&["RENAME", "k", "k2"]);
    s.assert_handed_off();
    assert_eq!(owner(&mut s.con, "k2").as_deref(), Some("holder"));
}

#[test]
fn hand_off_on_move_to_another_db() {
    let mut s = Scene::new(Config::default());
    assert_eq!(s.run(&["MOVE", "k", "1"]), Value::Int(1));
    s.assert_handed_off();
    assert_eq!(s.owner_in("1", "k").as_deref(), Some("holder"));
}

#[test]
fn hand_off_on_eviction() {
    // The holder's owner name is 1 MB, so evicting its lock (the only key)
    // brings memory back under maxmemory: the small lock handed to the
    // waiter is not evicted in turn.
    let server = Server::start();
    let mut con = server.client();
    let big_owner = "h".repeat(1 << 20);
    {
        let mut holder = server.client();
        acquire(&mut holder, "k", &big_owner, &["PX", "30000"]);
    }
    let mut w: Waiter = queue_waiter(
        &server,
        &mut con,
        "k",
        "w",
        &["PX", "10000", "BLOCK", "0"],
        1,
    );
    let used: u64 = server
        .info_field("memory", "used_memory")
        .expect("used_memory")
        .parse()
        .expect("used_memory");
    let _: () = q(
        &mut con,
        &["CONFIG", "SET", "maxmemory-policy", "allkeys-random"],
    );
    let limit = (used - (256 << 10)).to_string();
    let _: () = q(&mut con, &["CONFIG", "SET", "maxmemory", &limit]);

    assert_eq!(w.reply(), Ok(Value::Int(1)));
    assert_eq!(
        server.info_field("stats", "evicted_keys").as_deref(),
        Some("1")
    );
    assert_eq!(owner(&mut con, "k").as_deref(), Some("w"));
    let t = ttl(&mut con, "k");
    assert!(9000 < t && t <= 10000, "ttl {t}");
}
