//! A waiter whose connection breaks while the lock is being handed to it.
//! The hand-off is written in the releasing command; the answer is sent in
//! the server's before-sleep step. If the connection is already broken then,
//! the answer is never delivered and the module must release the hold again.

use crate::common;
use common::*;

use std::io::Write;
use std::net::TcpStream;
use std::thread;
use std::time::Duration;

/// A waiter on a raw socket that can be reset (RST), the way a crashed
/// process or a dropped network path ends a connection.
fn raw_waiter(server: &Server, args: &[&str]) -> TcpStream {
    let mut stream = TcpStream::connect(server.addr()).expect("connect");
    let mut cmd = format!("*{}\r\n", args.len());
    for a in args {
        cmd.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    stream.write_all(cmd.as_bytes()).expect("send");
    stream
}

fn reset(stream: TcpStream) {
    let socket = socket2::Socket::from(stream);
    socket
        .set_linger(Some(Duration::ZERO))
        .expect("SO_LINGER 0");
    drop(socket);
}

#[test]
fn an_answer_that_cannot_be_delivered_releases_the_grant() {
    let server = Server::start();
    let mut holder = server.client();
    let n: i64 = q(&mut holder, &["LOCK.ACQUIRE", "k", "holder", "PX", "60000"]);
    assert_eq!(n, 1);
    let dying = raw_waiter(
        &server,
        &["LOCK.ACQUIRE", "k", "dying", "PX", "60000", "BLOCK", "0"],
    );
    wait_for_waiters(&mut holder, "k", 1);
    let wait = ["PX", "60000", "BLOCK", "0"];
    let mut next: Connection = queue_waiter(&server, &mut holder, "k", "next", &wait, 2);

    // The release hands the lock to `dying`, then the server sleeps inside
    // the same transaction. The reset arrives during that sleep, after the
    // server read its events for this turn: it finds out only when it tries
    // to send the answer.
    let _: () = q(&mut holder, &["MULTI"]);
    let _: String = q(&mut holder, &["LOCK.RELEASE", "k", "holder"]);
    let _: String = q(&mut holder, &["DEBUG", "SLEEP", "0.5"]);
    send(&mut holder, &["EXEC"]);
    // No event tells that the server entered the sleep; 100 ms is far inside
    // its 500. Either way `next` must end up with the lock.
    thread::sleep(Duration::from_millis(100));
    reset(dying);
    let exec = recv(&mut holder).expect("EXEC");
    assert_eq!(
        exec,
        Value::Array(vec![Value::Int(0), Value::Okay]),
        "release inside EXEC"
    );

    assert_eq!(recv(&mut next).expect("next's reply"), Value::Int(1));
    assert_eq!(
        lock_field(&mut holder, "k", "owner").as_deref(),
        Some("next")
    );
    assert_eq!(server.stat("lost_grants_released"), 1);
    assert_eq!(server.stat("handed_off"), 2);
}

#[test]
fn a_waiter_that_disconnects_after_its_answer_keeps_the_lock() {
    // The owner id, not the connection, holds a lock: a client may take it
    // and release it from another connection.
    let server = Server::start();
    let mut holder = server.client();
    let n: i64 = q(&mut holder, &["LOCK.ACQUIRE", "k", "holder", "PX", "60000"]);
    assert_eq!(n, 1);
    let wait = ["PX", "60000", "BLOCK", "0"];
    let mut w: Connection = queue_waiter(&server, &mut holder, "k", "w", &wait, 1);
    let left: i64 = q(&mut holder, &["LOCK.RELEASE", "k", "holder"]);
    assert_eq!(left, 0);
    assert_eq!(recv(&mut w).expect("w's reply"), Value::Int(1));
    drop(w);
    // A later command on the server runs after the disconnect was handled.
    wait_until("w's connection closed", || {
        q::<String>(&mut holder, &["CLIENT", "LIST"])
            .lines()
            .count()
            == 1
    });
    assert_eq!(lock_field(&mut holder, "k", "owner").as_deref(), Some("w"));
    assert_eq!(server.stat("lost_grants_released"), 0);
    let left: i64 = q(&mut server.client(), &["LOCK.RELEASE", "k", "w"]);
    assert_eq!(left, 0);
}

#[test]
fn a_waiter_that_pipelined_quit_keeps_the_lock_it_was_answered() {
    // QUIT behind the blocked acquire closes the connection in the same
    // event loop turn as the answer, but only after writing it.
    let server = Server::start();
    let mut holder = server.client();
    let n: i64 = q(&mut holder, &["LOCK.ACQUIRE", "k", "holder", "PX", "60000"]);
    assert_eq!(n, 1);
    let mut w = TcpStream::connect(server.addr()).expect("connect");
    w.write_all(b"*5\r\n$12\r\nLOCK.ACQUIRE\r\n$1\r\nk\r\n$1\r\nw\r\n$5\r\nBLOCK\r\n$1\r\n0\r\n*1\r\n$4\r\nQUIT\r\n")
        .expect("send");
    wait_for_waiters(&mut holder, "k", 1);
    let left: i64 = q(&mut holder, &["LOCK.RELEASE", "k", "holder"]);
    assert_eq!(left, 0);
    let mut answer = Vec::new();
    std::io::Read::read_to_end(&mut w, &mut answer).expect("read until closed");
    assert_eq!(answer, b":1\r\n+OK\r\n");
    let pong: String = q(&mut holder, &["PING"]);
    assert_eq!(pong, "PONG");
    assert_eq!(lock_field(&mut holder, "k", "owner").as_deref(), Some("w"));
    assert_eq!(server.stat("lost_grants_released"), 0);
}
