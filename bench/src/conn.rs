//! The generator's connection: a tokio TCP socket (TCP_NODELAY) whose
//! commands are packed by the `redis` crate (`redis::Cmd`) and whose replies
//! are parsed by the `redis-protocol` crate (RESP2 frames, handed to the
//! scenarios as the `redis` crate's `Value`). The socket stays the generator's
//! own so that a task can queue several commands and send them in one write
//! (`push` + `flush`), read the replies one by one, and wait for a reply inside
//! `select!` (a pub/sub message, a timeout) without losing any.
//!
//! Why not the `redis` crate's own parser (`redis::Parser`): it costs about
//! 500 ns per reply on this machine against about 90 ns for
//! `redis_protocol::resp2::decode::decode` (and 45 ns for the hand-written
//! codec this replaced), in memory, the way `read` uses it; the generator
//! shares one core with every client's kernel work, and S1 keeps it 70-90%
//! busy. Blocking connections (setup, S14's processes, `--compare-models`'
//! threads) are the `redis` crate's (`blocking`).

use std::io;
use std::time::Duration;

use redis::io::tcp::TcpSettings;
use redis::{Cmd, IntoConnectionInfo, ServerError};
use redis_protocol::resp2::decode::decode;
use redis_protocol::resp2::types::OwnedFrame;
use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::TcpStream;

/// Room kept free to read into.
const READ_ROOM: usize = 16 * 1024;

/// A reply: the `redis` crate's `Value`, named so beside serde_json's.
pub use redis::Value as Reply;

/// Replies as the scenarios read them.
pub trait ReplyExt {
    /// The text of a simple or bulk string, else the value's debug form.
    fn text(&self) -> String;
    /// An integer, or a string holding one.
    fn int(&self) -> Option<i64>;
}

impl ReplyExt for Reply {
    fn text(&self) -> String {
        match self {
            Reply::SimpleString(s) => s.clone(),
            Reply::Okay => "OK".into(),
            Reply::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
            Reply::ServerError(e) => error_line(e),
            other => format!("{other:?}"),
        }
    }

    fn int(&self) -> Option<i64> {
        match self {
            Reply::Int(n) => Some(*n),
            Reply::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
            Reply::SimpleString(s) => s.parse().ok(),
            _ => None,
        }
    }
}

/// An error reply as the server sent it (`ERR no such key`): its code, then
/// its details.
pub fn error_line(e: &ServerError) -> String {
    match e.details() {
        Some(d) => format!("{} {d}", e.code()),
        None => e.code().to_string(),
    }
}

/// A reply a command must not answer, as an error naming the command.
pub fn unexpected(what: &str, r: &Reply) -> io::Error {
    io::Error::other(format!("{what} answered {r:?}"))
}

/// A whole command, packed, for sending many times (`Conn::raw`, `push_raw`).
pub fn command(args: &[&[u8]]) -> Vec<u8> {
    let mut cmd = Cmd::new();
    for a in args {
        cmd.arg(*a);
    }
    cmd.get_packed_command()
}

/// A frame as the `redis` crate's `Value`.
fn to_reply(frame: OwnedFrame) -> Reply {
    match frame {
        OwnedFrame::SimpleString(s) if s == b"OK" => Reply::Okay,
        OwnedFrame::SimpleString(s) => Reply::SimpleString(
            String::from_utf8(s)
                .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()),
        ),
        OwnedFrame::Error(line) => server_error(&line),
        OwnedFrame::Integer(n) => Reply::Int(n),
        OwnedFrame::BulkString(b) => Reply::BulkString(b),
        OwnedFrame::Array(items) => Reply::Array(items.into_iter().map(to_reply).collect()),
        OwnedFrame::Null => Reply::Nil,
    }
}

/// An error reply, as the `redis` crate reads the line (its `ServerError`
/// has no other public constructor; error replies are rare).
fn server_error(line: &str) -> Reply {
    redis::parse_redis_value(format!("-{line}\r\n").as_bytes())
        .unwrap_or_else(|_| Reply::SimpleString(format!("(error reply) {line}")))
}

/// A blocking connection of the `redis` crate to `addr` (`host:port`), with
/// TCP_NODELAY as `Conn` has, and `timeout` for connecting, reads and writes.
pub fn blocking(addr: &str, timeout: Duration) -> io::Result<redis::Connection> {
    let info = format!("redis://{addr}/")
        .into_connection_info()
        .map_err(|e| io::Error::other(format!("{addr}: {e}")))?
        .set_tcp_settings(TcpSettings::default().set_nodelay(true));
    let client = redis::Client::open(info).map_err(io::Error::other)?;
    let con = client
        .get_connection_with_timeout(timeout)
        .map_err(|e| io::Error::other(format!("connect to {addr}: {e}")))?;
    con.set_read_timeout(Some(timeout))
        .map_err(io::Error::other)?;
    con.set_write_timeout(Some(timeout))
        .map_err(io::Error::other)?;
    Ok(con)
}

/// Commands queued with `push` are sent by `flush`; `read` returns the next
/// reply.
pub struct Conn {
    stream: TcpStream,
    /// Bytes read; `rbuf[start..]` not parsed yet.
    rbuf: Vec<u8>,
    start: usize,
    wbuf: Vec<u8>,
    /// Reused for every command packed (keeps its allocations).
    scratch: Cmd,
}

impl Conn {
    pub async fn connect(addr: &str) -> io::Result<Conn> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| io::Error::new(e.kind(), format!("connect to {addr}: {e}")))?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            rbuf: Vec::with_capacity(READ_ROOM),
            start: 0,
            wbuf: Vec::with_capacity(256),
            scratch: Cmd::new(),
        })
    }

    pub fn push(&mut self, args: &[&[u8]]) {
        self.scratch.clear();
        for a in args {
            self.scratch.arg(*a);
        }
        self.scratch.write_packed_command(&mut self.wbuf);
    }

    /// Queues a command packed before (`command`).
    pub fn push_raw(&mut self, packed: &[u8]) {
        self.wbuf.extend_from_slice(packed);
    }

    pub async fn flush(&mut self) -> io::Result<()> {
        if !self.wbuf.is_empty() {
            self.stream.write_all(&self.wbuf).await?;
            self.wbuf.clear();
        }
        Ok(())
    }

    /// The next reply if the bytes read hold a whole one.
    fn take(&mut self) -> io::Result<Option<Reply>> {
        match decode(&self.rbuf[self.start..]) {
            Ok(Some((frame, used))) => {
                self.start += used;
                if self.start == self.rbuf.len() {
                    self.rbuf.clear();
                    self.start = 0;
                }
                Ok(Some(to_reply(frame)))
            }
            Ok(None) => Ok(None),
            Err(e) => Err(io::Error::new(io::ErrorKind::InvalidData, e.to_string())),
        }
    }

    /// Reads one reply. Cancel-safe: bytes are only consumed when a whole
    /// reply has been parsed, and a read cancelled reads nothing. When a
    /// read leaves the socket drained (it returned less than the room it
    /// had), tokio's readiness flag is cleared at once, so the next read
    /// waits for epoll instead of first trying a read that would fail with
    /// EAGAIN: one syscall less per reply.
    pub async fn read(&mut self) -> io::Result<Reply> {
        loop {
            if let Some(reply) = self.take()? {
                return Ok(reply);
            }
            if self.start > 0 {
                self.rbuf.drain(..self.start);
                self.start = 0;
            }
            if self.rbuf.capacity() - self.rbuf.len() < READ_ROOM / 4 {
                self.rbuf.reserve(READ_ROOM);
            }
            let room = self.rbuf.capacity() - self.rbuf.len();
            let n = self.stream.read_buf(&mut self.rbuf).await?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "server closed the connection",
                ));
            }
            if n < room {
                let _ = self.stream.try_io(Interest::READABLE, || {
                    Err::<(), _>(io::ErrorKind::WouldBlock.into())
                });
            }
        }
    }

    /// Sends one command and reads its reply.
    pub async fn cmd(&mut self, args: &[&[u8]]) -> io::Result<Reply> {
        self.push(args);
        self.flush().await?;
        self.read().await
    }

    /// Sends a command packed before (`command`) and reads its reply.
    pub async fn raw(&mut self, packed: &[u8]) -> io::Result<Reply> {
        self.stream.write_all(packed).await?;
        self.read().await
    }

    /// `cmd` with string arguments; an error reply becomes an `Err`.
    pub async fn ok(&mut self, args: &[&str]) -> io::Result<Reply> {
        let bytes: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        match self.cmd(&bytes).await? {
            Reply::ServerError(e) => Err(io::Error::other(format!(
                "{}: {}",
                args.join(" "),
                error_line(&e)
            ))),
            r => Ok(r),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn packs_binary_arguments() {
        assert_eq!(
            command(&[b"SET", b"k", b"v\r\n"]),
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$3\r\nv\r\n\r\n".to_vec()
        );
    }

    /// Replies cut at every byte and sent piecemeal over a real socket come
    /// out whole and in order, and the end of the stream is an error.
    #[test]
    fn reads_replies_cut_anywhere() {
        let all: &[u8] =
            b"+OK\r\n-ERR no\r\n:42\r\n$-1\r\n$3\r\nabc\r\n*2\r\n:1\r\n$1\r\nx\r\n*-1\r\n+PONG\r\n";
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let writer = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().expect("accept");
            s.set_nodelay(true).expect("nodelay");
            for b in all {
                s.write_all(&[*b]).expect("write");
                std::thread::sleep(Duration::from_micros(200));
            }
        });
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let got = rt.block_on(async {
            let mut c = Conn::connect(&addr).await.expect("connect");
            let mut got = Vec::new();
            for _ in 0..8 {
                got.push(c.read().await.expect("a reply"));
            }
            let end = c.read().await.expect_err("the end of the stream");
            assert_eq!(end.kind(), io::ErrorKind::UnexpectedEof, "{end}");
            got
        });
        writer.join().expect("writer");
        assert_eq!(got[0], Reply::Okay);
        assert_eq!(got[1].text(), "ERR no");
        assert_eq!(got[2], Reply::Int(42));
        assert_eq!(got[3], Reply::Nil);
        assert_eq!(got[4], Reply::BulkString(b"abc".to_vec()));
        assert_eq!(
            got[5],
            Reply::Array(vec![Reply::Int(1), Reply::BulkString(b"x".to_vec())])
        );
        assert_eq!(got[6], Reply::Nil);
        assert_eq!(got[7], Reply::SimpleString("PONG".into()));
    }
}
