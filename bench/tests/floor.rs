//! The floor module (bench/floor, libfloor.so: S2's module-floor row) hands
//! its token off as the row assumes, on a real server started with
//! `--loadmodule libfloor.so` through the workspace's harness: a free token
//! is taken at once; a waiter gets it when the holder releases, first come
//! first served; a wait that times out answers nil and leaves the queue; a
//! waiter whose connection ended is skipped; a release with no waiter frees
//! the token.
//!
//! Needs the module built (`make test` does not run the bench's tests):
//!
//! ```sh
//! cargo build --release -p lock-bench-floor && cargo test -p lock-bench --test floor
//! ```
//!
//! `LOCK_FLOOR_MODULE` names another libfloor.so, `REDIS_SERVER` another server.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::thread;
use std::time::{Duration, Instant};

use lock_harness::{fresh_dir, server_binary, Launch, Server};

/// A reply, as far as these commands go.
#[derive(Debug, PartialEq)]
enum Reply {
    Int(i64),
    Nil,
    Error(String),
    Status(String),
    Bulk(Vec<u8>),
}

/// A plain RESP2 connection: a command can be sent now and its reply read
/// later, so that a blocked caller needs no thread of its own.
struct Conn {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Conn {
    fn open(server: &Server) -> Conn {
        let writer = TcpStream::connect(server.socket_addr()).expect("connect");
        writer
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("read timeout");
        let reader = BufReader::new(writer.try_clone().expect("clone the socket"));
        Conn { reader, writer }
    }

    fn send(&mut self, args: &[&str]) {
        let mut out = format!("*{}\r\n", args.len());
        for a in args {
            out.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        self.writer.write_all(out.as_bytes()).expect("send");
    }

    fn reply(&mut self) -> Reply {
        let mut line = String::new();
        self.reader.read_line(&mut line).expect("read a reply");
        let line = line.trim_end_matches("\r\n");
        let (kind, rest) = line.split_at(1.min(line.len()));
        match kind {
            ":" => Reply::Int(rest.parse().expect("an integer")),
            "-" => Reply::Error(rest.to_string()),
            "+" => Reply::Status(rest.to_string()),
            "$" if rest == "-1" => Reply::Nil,
            "$" => {
                let n: usize = rest.parse().expect("a length");
                let mut data = vec![0; n + 2];
                self.reader.read_exact(&mut data).expect("bulk data");
                data.truncate(n);
                Reply::Bulk(data)
            }
            _ => panic!("unexpected reply line {line:?}"),
        }
    }

    fn call(&mut self, args: &[&str]) -> Reply {
        self.send(args);
        self.reply()
    }
}

fn floor_module() -> PathBuf {
    let path = std::env::var_os("LOCK_FLOOR_MODULE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/release/libfloor.so")
        });
    assert!(
        path.is_file(),
        "{} not found: cargo build --release -p lock-bench-floor",
        path.display()
    );
    std::fs::canonicalize(&path).expect("the module's path")
}

/// A server with the floor module alone.
fn server() -> Server {
    let launch = Launch {
        binary: server_binary(),
        args: Vec::new(),
        module: Some((floor_module(), Vec::new())),
        netns: None,
        core: None,
        tied: false,
    };
    Server::start(launch, fresh_dir("lock-bench-floor-test")).expect("server with libfloor.so")
}

/// Waits until the server counts `n` blocked clients.
fn until_blocked(admin: &mut Conn, n: usize) {
    let want = format!("blocked_clients:{n}");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let Reply::Bulk(info) = admin.call(&["INFO", "clients"]) else {
            panic!("INFO clients did not answer a bulk string");
        };
        let info = String::from_utf8_lossy(&info).into_owned();
        if info.lines().any(|l| l.trim() == want) {
            return;
        }
        assert!(Instant::now() < deadline, "never {want}:\n{info}");
        thread::sleep(Duration::from_millis(5));
    }
}

/// A server, an admin connection and three clients, the first (`a`)
/// holding `k`'s token.
fn a_holds_k() -> (Server, Conn, Conn, Conn, Conn) {
    let server = server();
    let admin = Conn::open(&server);
    let (mut a, b, c) = (
        Conn::open(&server),
        Conn::open(&server),
        Conn::open(&server),
    );
    assert_eq!(a.call(&["FLOOR.ACQUIRE", "k", "0"]), Reply::Int(1));
    (server, admin, a, b, c)
}

#[test]
fn a_release_hands_the_token_to_the_waiters_in_turn() {
    let (_server, mut admin, mut a, mut b, mut c) = a_holds_k();
    b.send(&["FLOOR.ACQUIRE", "k", "10000"]);
    until_blocked(&mut admin, 1);
    c.send(&["FLOOR.ACQUIRE", "k", "0"]);
    until_blocked(&mut admin, 2);
    // Another key is free all along.
    assert_eq!(admin.call(&["FLOOR.ACQUIRE", "other", "0"]), Reply::Int(1));

    assert_eq!(a.call(&["FLOOR.RELEASE", "k"]), Reply::Int(1));
    assert_eq!(
        b.reply(),
        Reply::Int(1),
        "the first waiter is handed the token"
    );
    until_blocked(&mut admin, 1);
    assert_eq!(b.call(&["FLOOR.RELEASE", "k"]), Reply::Int(1));
    assert_eq!(c.reply(), Reply::Int(1), "then the second");
    until_blocked(&mut admin, 0);

    // No waiter: the release frees the token, the next acquire takes it.
    assert_eq!(c.call(&["FLOOR.RELEASE", "k"]), Reply::Int(1));
    assert_eq!(a.call(&["FLOOR.ACQUIRE", "k", "0"]), Reply::Int(1));
}

#[test]
fn a_wait_that_times_out_answers_nil_and_leaves_the_queue() {
    let (_server, mut admin, mut a, mut b, mut c) = a_holds_k();
    let t0 = Instant::now();
    assert_eq!(b.call(&["FLOOR.ACQUIRE", "k", "100"]), Reply::Nil);
    assert!(
        t0.elapsed() >= Duration::from_millis(90),
        "{:?}",
        t0.elapsed()
    );
    until_blocked(&mut admin, 0);

    // The release skips the waiter that timed out: c is next, and b, which
    // is not waiting, is not answered again.
    c.send(&["FLOOR.ACQUIRE", "k", "10000"]);
    until_blocked(&mut admin, 1);
    assert_eq!(a.call(&["FLOOR.RELEASE", "k"]), Reply::Int(1));
    assert_eq!(c.reply(), Reply::Int(1));
    assert_eq!(b.call(&["PING"]), Reply::Status("PONG".into()));
}

#[test]
fn a_waiter_whose_connection_ended_is_skipped() {
    let server = server();
    let mut admin = Conn::open(&server);
    let (mut a, mut c) = (Conn::open(&server), Conn::open(&server));
    assert_eq!(a.call(&["FLOOR.ACQUIRE", "k", "0"]), Reply::Int(1));
    let mut gone = Conn::open(&server);
    gone.send(&["FLOOR.ACQUIRE", "k", "0"]);
    until_blocked(&mut admin, 1);
    drop(gone);
    until_blocked(&mut admin, 0);

    c.send(&["FLOOR.ACQUIRE", "k", "10000"]);
    until_blocked(&mut admin, 1);
    assert_eq!(a.call(&["FLOOR.RELEASE", "k"]), Reply::Int(1));
    assert_eq!(
        c.reply(),
        Reply::Int(1),
        "handed past the closed connection"
    );
}

#[test]
fn bad_calls_are_errors_and_a_transaction_does_not_wait() {
    let server = server();
    let mut a = Conn::open(&server);
    for args in [
        &["FLOOR.ACQUIRE", "k"][..],
        &["FLOOR.ACQUIRE", "k", "0", "extra"],
        &["FLOOR.RELEASE"],
        &["FLOOR.RELEASE", "k", "extra"],
    ] {
        assert!(
            matches!(a.call(args), Reply::Error(e) if e.contains("wrong number of arguments")),
            "{args:?}"
        );
    }
    for timeout in ["-1", "1.5", "x", "99999999999999999999"] {
        assert!(
            matches!(a.call(&["FLOOR.ACQUIRE", "k", timeout]), Reply::Error(e) if e.starts_with("ERR")),
            "timeout {timeout}"
        );
    }
    assert_eq!(a.call(&["FLOOR.ACQUIRE", "k", "0"]), Reply::Int(1));
    // Held: in MULTI the acquire cannot wait, and answers nil as BLPOP does.
    let mut b = Conn::open(&server);
    assert_eq!(b.call(&["MULTI"]), Reply::Status("OK".into()));
    assert_eq!(
        b.call(&["FLOOR.ACQUIRE", "k", "0"]),
        Reply::Status("QUEUED".into())
    );
    b.send(&["EXEC"]);
    let mut line = String::new();
    b.reader.read_line(&mut line).expect("EXEC");
    assert_eq!(line, "*1\r\n");
    assert_eq!(b.reply(), Reply::Nil);
    // Still held by a: the release frees it for b.
    assert_eq!(a.call(&["FLOOR.RELEASE", "k"]), Reply::Int(1));
    assert_eq!(b.call(&["FLOOR.ACQUIRE", "k", "0"]), Reply::Int(1));
}
