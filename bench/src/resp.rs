//! A small RESP2 codec: commands are encoded into a byte buffer, replies are
//! parsed out of a read buffer. `Conn` is a tokio TCP connection (TCP_NODELAY)
//! with both buffers; `SyncConn` is the same over a blocking std socket (used
//! only by `--compare-models`).

use std::fmt;
use std::io::{self, Read, Write};
use std::time::Duration;

use tokio::io::Interest;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const CLEAR_READINESS: bool = true;

#[derive(Clone, PartialEq, Eq)]
pub enum Reply {
    Status(Vec<u8>),
    Error(String),
    Int(i64),
    Nil,
    Bulk(Vec<u8>),
    Array(Vec<Reply>),
}

impl fmt::Debug for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reply::Status(s) => write!(f, "+{}", String::from_utf8_lossy(s)),
            Reply::Error(e) => write!(f, "-{e}"),
            Reply::Int(n) => write!(f, "(integer) {n}"),
            Reply::Nil => write!(f, "(nil)"),
            Reply::Bulk(b) => write!(f, "{:?}", String::from_utf8_lossy(b)),
            Reply::Array(items) => f.debug_list().entries(items).finish(),
        }
    }
}

impl Reply {
    pub fn text(&self) -> String {
        match self {
            Reply::Status(b) | Reply::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
            other => format!("{other:?}"),
        }
    }

    pub fn int(&self) -> Option<i64> {
        match self {
            Reply::Int(n) => Some(*n),
            Reply::Bulk(b) | Reply::Status(b) => std::str::from_utf8(b).ok()?.parse().ok(),
            _ => None,
        }
    }
}

/// Appends `*N $len arg ...` for `args` to `out`.
pub fn encode(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.push(b'*');
    push_usize(out, args.len());
    out.extend_from_slice(b"\r\n");
    for a in args {
        out.push(b'$');
        push_usize(out, a.len());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// A whole command, encoded.
pub fn command(args: &[&[u8]]) -> Vec<u8> {
    let mut v = Vec::with_capacity(64);
    encode(&mut v, args);
    v
}

fn push_usize(out: &mut Vec<u8>, mut n: usize) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

fn bad(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// Where a reply line ends (index of '\r'), searching from `from`.
fn line_end(buf: &[u8], from: usize) -> Option<usize> {
    let rel = buf.get(from..)?.windows(2).position(|w| w == b"\r\n")?;
    Some(from + rel)
}

fn parse_int(s: &[u8]) -> io::Result<i64> {
    std::str::from_utf8(s)
        .ok()
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| bad(format!("bad integer {:?}", String::from_utf8_lossy(s))))
}

/// Parses one reply from `buf[pos..]`: `Ok(Some((reply, next_pos)))`,
/// `Ok(None)` when incomplete, `Err` on a protocol violation.
pub fn parse(buf: &[u8], pos: usize) -> io::Result<Option<(Reply, usize)>> {
    let Some(&kind) = buf.get(pos) else {
        return Ok(None);
    };
    let Some(end) = line_end(buf, pos + 1) else {
        return Ok(None);
    };
    let line = &buf[pos + 1..end];
    let next = end + 2;
    match kind {
        b'+' => Ok(Some((Reply::Status(line.to_vec()), next))),
        b'-' => Ok(Some((
            Reply::Error(String::from_utf8_lossy(line).into_owned()),
            next,
        ))),
        b':' => Ok(Some((Reply::Int(parse_int(line)?), next))),
        b'$' => {
            let len = parse_int(line)?;
            if len < 0 {
                return Ok(Some((Reply::Nil, next)));
            }
            let len = len as usize;
            if buf.len() < next + len + 2 {
                return Ok(None);
            }
            Ok(Some((
                Reply::Bulk(buf[next..next + len].to_vec()),
                next + len + 2,
            )))
        }
        b'*' => {
            let n = parse_int(line)?;
            if n < 0 {
                return Ok(Some((Reply::Nil, next)));
            }
            let mut items = Vec::with_capacity(n.min(1024) as usize);
            let mut at = next;
            for _ in 0..n {
                match parse(buf, at)? {
                    Some((item, after)) => {
                        items.push(item);
                        at = after;
                    }
                    None => return Ok(None),
                }
            }
            Ok(Some((Reply::Array(items), at)))
        }
        other => Err(bad(format!("unexpected reply type byte {other:#04x}"))),
    }
}

/// Read buffer: `buf[start..end]` holds bytes not yet parsed.
pub struct ReadBuf {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl Default for ReadBuf {
    fn default() -> Self {
        Self {
            buf: vec![0; 16 * 1024],
            start: 0,
            end: 0,
        }
    }
}

impl ReadBuf {
    pub fn take(&mut self) -> io::Result<Option<Reply>> {
        match parse(&self.buf[..self.end], self.start)? {
            Some((reply, next)) => {
                self.start = next;
                if self.start == self.end {
                    self.start = 0;
                    self.end = 0;
                }
                Ok(Some(reply))
            }
            None => Ok(None),
        }
    }

    /// Free space to read into (compacting or growing as needed).
    fn space(&mut self) -> &mut [u8] {
        if self.end == self.buf.len() {
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            } else {
                let n = self.buf.len() * 2;
                self.buf.resize(n, 0);
            }
        }
        &mut self.buf[self.end..]
    }

    pub async fn fill<R: AsyncRead + Unpin>(&mut self, r: &mut R) -> io::Result<()> {
        let n = r.read(self.space()).await?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "server closed the connection",
            ));
        }
        self.end += n;
        Ok(())
    }

    /// Reads until one reply is complete. Cancel-safe: bytes are only
    /// consumed when a whole reply has been parsed.
    pub async fn read<R: AsyncRead + Unpin>(&mut self, r: &mut R) -> io::Result<Reply> {
        loop {
            if let Some(reply) = self.take()? {
                return Ok(reply);
            }
            self.fill(r).await?;
        }
    }

    pub fn read_sync<R: Read>(&mut self, r: &mut R) -> io::Result<Reply> {
        loop {
            if let Some(reply) = self.take()? {
                return Ok(reply);
            }
            let n = r.read(self.space())?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "server closed the connection",
                ));
            }
            self.end += n;
        }
    }
}

/// A tokio connection with a write buffer (commands queued with `push`, sent
/// by `flush`) and a read buffer.
pub struct Conn {
    pub stream: TcpStream,
    pub rbuf: ReadBuf,
    wbuf: Vec<u8>,
}

impl Conn {
    pub async fn connect(addr: &str) -> io::Result<Conn> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| io::Error::new(e.kind(), format!("connect to {addr}: {e}")))?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            rbuf: ReadBuf::default(),
            wbuf: Vec::with_capacity(256),
        })
    }

    pub fn push(&mut self, args: &[&[u8]]) {
        encode(&mut self.wbuf, args);
    }

    pub fn push_raw(&mut self, bytes: &[u8]) {
        self.wbuf.extend_from_slice(bytes);
    }

    pub async fn flush(&mut self) -> io::Result<()> {
        if !self.wbuf.is_empty() {
            self.stream.write_all(&self.wbuf).await?;
            self.wbuf.clear();
        }
        Ok(())
    }

    /// Reads one reply. When a read leaves the socket drained (it returned
    /// less than the free space), tokio's readiness flag is cleared at once, so
    /// the next read waits for epoll instead of first trying a read that
    /// would fail with EAGAIN: one syscall less per reply.
    pub async fn read(&mut self) -> io::Result<Reply> {
        loop {
            if let Some(reply) = self.rbuf.take()? {
                return Ok(reply);
            }
            let space = self.rbuf.space();
            let room = space.len();
            let n = self.stream.read(space).await?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "server closed the connection",
                ));
            }
            self.rbuf.end += n;
            if n < room && CLEAR_READINESS {
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

    /// Sends pre-encoded bytes (one command) and reads its reply.
    pub async fn raw(&mut self, encoded: &[u8]) -> io::Result<Reply> {
        self.stream.write_all(encoded).await?;
        self.read().await
    }

    /// `cmd` with string arguments; an error reply becomes an `Err`.
    pub async fn ok(&mut self, args: &[&str]) -> io::Result<Reply> {
        let bytes: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        match self.cmd(&bytes).await? {
            Reply::Error(e) => Err(io::Error::other(format!("{}: {e}", args.join(" ")))),
            r => Ok(r),
        }
    }
}

/// A blocking connection (std socket), for the client-model comparison.
pub struct SyncConn {
    stream: std::net::TcpStream,
    rbuf: ReadBuf,
}

impl SyncConn {
    pub fn connect(addr: &str) -> io::Result<SyncConn> {
        let stream = std::net::TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        Ok(SyncConn {
            stream,
            rbuf: ReadBuf::default(),
        })
    }

    pub fn raw(&mut self, encoded: &[u8]) -> io::Result<Reply> {
        self.stream.write_all(encoded)?;
        self.rbuf.read_sync(&mut self.stream)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_commands() {
        assert_eq!(
            command(&[b"SET", b"k", b"value"]),
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nvalue\r\n".to_vec()
        );
    }

    #[test]
    fn parses_every_kind_and_waits_for_more() {
        let all = b"+OK\r\n-ERR no\r\n:42\r\n$-1\r\n$3\r\nabc\r\n*2\r\n:1\r\n$1\r\nx\r\n*-1\r\n";
        let mut pos = 0;
        let mut got = Vec::new();
        while let Some((r, next)) = parse(all, pos).expect("parse") {
            got.push(r);
            pos = next;
        }
        assert_eq!(pos, all.len());
        assert_eq!(
            got,
            vec![
                Reply::Status(b"OK".to_vec()),
                Reply::Error("ERR no".into()),
                Reply::Int(42),
                Reply::Nil,
                Reply::Bulk(b"abc".to_vec()),
                Reply::Array(vec![Reply::Int(1), Reply::Bulk(b"x".to_vec())]),
                Reply::Nil,
            ]
        );
        for cut in 1..all.len() {
            // Every prefix parses to whole replies only, never garbage.
            let mut pos = 0;
            while let Some((_, next)) = parse(&all[..cut], pos).expect("parse") {
                pos = next;
            }
            assert!(pos <= cut);
        }
        assert!(parse(b"?x\r\n", 0).is_err());
    }
}
