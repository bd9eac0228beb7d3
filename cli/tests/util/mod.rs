//! What the CLI tests share: running the built `redis-lock` against a test
//! server, bounded waits for its exit, marker files, a tmux session.

#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use super::common::{Server, PATIENCE};

pub const BIN: &str = env!("CARGO_BIN_EXE_redis-lock");

/// `redis-lock ARGS` against `server` (REDIS_URL), without an inherited
/// LOCK_OWNER.
pub fn cli(server: &Server, args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .env("REDIS_URL", server.url())
        .env_remove("LOCK_OWNER")
        .stdin(Stdio::null());
    cmd
}

/// Runs `redis-lock ARGS` to its end (bounded).
pub fn output(server: &Server, args: &[&str]) -> Output {
    let child = cli(server, args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn redis-lock");
    let mut runner = Runner(Some(child));
    runner.wait_code();
    runner
        .0
        .take()
        .expect("child")
        .wait_with_output()
        .expect("output")
}

pub fn code(server: &Server, args: &[&str]) -> i32 {
    output(server, args).status.code().unwrap_or(-1)
}

/// A redis-lock process, killed (by PID) if a test ends before it does.
pub struct Runner(pub Option<Child>);

impl Runner {
    pub fn start(server: &Server, args: &[&str]) -> Runner {
        Runner(Some(
            cli(server, args)
                .stdout(Stdio::null())
                .spawn()
                .expect("spawn redis-lock"),
        ))
    }

    pub fn pid(&self) -> i32 {
        self.0.as_ref().map_or(0, |c| c.id() as i32)
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: our own unreaped child.
        unsafe {
            libc::kill(self.pid(), sig);
        }
    }

    /// Exit code, or 128 + signal; panics after PATIENCE.
    pub fn wait_code(&mut self) -> i32 {
        use std::os::unix::process::ExitStatusExt;
        let child = self.0.as_mut().expect("running");
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                return status
                    .code()
                    .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
            }
            assert!(Instant::now() < deadline, "redis-lock did not exit");
            thread::sleep(Duration::from_millis(5));
        }
    }

    pub fn exited(&mut self) -> bool {
        self.0
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))))
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A fresh directory for a test's marker files.
pub fn scratch() -> PathBuf {
    super::common::fresh_dir()
}

pub fn path(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

pub fn read(p: &Path) -> String {
    fs::read_to_string(p).unwrap_or_default()
}

/// Waits until `p` exists (bounded).
/// A shell line for a command that runs until the test lets it end: it
/// creates `started`, then waits for `go` to exist.
pub fn held_until(started: &Path, go: &Path) -> String {
    format!(
        "touch {}; while [ ! -e {} ]; do sleep 0.02; done",
        path(started),
        path(go)
    )
}

pub fn wait_file(p: &Path) {
    super::common::wait_until(&format!("{} to exist", p.display()), || p.exists());
}

/// A tmux session on a server socket of its own, killed when dropped (also
/// when a test panics).
pub struct Tmux {
    socket: String,
    pub name: String,
}

impl Tmux {
    /// Runs `command` (a shell line) in a detached 120x30 session.
    pub fn start(command: &str) -> Tmux {
        static N: AtomicUsize = AtomicUsize::new(0);
        let t = Tmux {
            socket: format!("lock-cli-{}", std::process::id()),
            name: format!(
                "cli-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ),
        };
        let status = Command::new("tmux")
            .args([
                "-L",
                &t.socket,
                "new-session",
                "-d",
                "-x",
                "120",
                "-y",
                "30",
            ])
            .args(["-s", &t.name, command])
            .status()
            .expect("tmux");
        assert!(status.success(), "tmux new-session failed");
        t
    }

    pub fn capture(&self) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.socket, "capture-pane", "-p", "-t", &self.name])
            .output()
            .expect("tmux capture-pane");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits until the pane shows something `cond` accepts; the last capture.
    pub fn wait_for(&self, what: &str, cond: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let screen = self.capture();
            if cond(&screen) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; screen:\n{screen}"
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn send_keys(&self, keys: &str) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "send-keys", "-t", &self.name, keys])
            .status();
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-session", "-t", &self.name])
            .stderr(Stdio::null())
            .status();
    }
}
