//! A `redis-cli` process holding one connection, for tests that kill a
//! client process (kill -9) rather than close its connection politely.

use std::io::Write;
use std::process::{Child, Command, Stdio};

use super::Server;

/// A `redis-cli` process holding a connection: each line written to its
/// standard input runs as a command while it stays open. Killing it closes
/// the connection as a crashed client's would.
pub struct Cli {
    child: Child,
}

impl Cli {
    pub fn start(program: &[&str], host: &str, port: u16) -> Cli {
        let port = port.to_string();
        let mut args: Vec<&str> = program.to_vec();
        args.extend(["redis-cli", "-h", host, "-p", &port]);
        let child = Command::new(args[0])
            .args(&args[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-cli");
        Cli { child }
    }

    pub fn local(server: &Server) -> Cli {
        Cli::start(&[], "127.0.0.1", server.port)
    }

    pub fn run(&mut self, line: &str) {
        let stdin = self.child.stdin.as_mut().expect("redis-cli stdin");
        writeln!(stdin, "{line}").expect("write to redis-cli");
        stdin.flush().expect("flush to redis-cli");
    }

    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill {signal}");
    }

    /// kill -9, and wait for it to be gone.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Cli {
    fn drop(&mut self) {
        self.kill();
    }
}
