//! A candidate process ([`Proc`]): started with its stdout and stderr read
//! line by line by two threads ([`Line`]: what it wrote and when it
//! arrived), waited on for a line, signalled, stopped (SIGTERM, then
//! SIGKILL, and the command `redis-lock elect` ran, if it outlived it).

use std::fs;
use std::io::{self, BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use lock_harness::tie_to_parent;

/// A line a process wrote, with its arrival time.
pub(super) struct Line {
    pub(super) at: Instant,
    pub(super) stderr: bool,
    pub(super) text: String,
}

/// A candidate process: its stdout and stderr read line by line by two
/// threads; killed (SIGKILL) when dropped.
pub(super) struct Proc {
    child: Child,
    rx: mpsc::Receiver<Line>,
    pub(super) lines: Vec<Line>,
}

impl Proc {
    pub(super) fn spawn(argv: &[String]) -> io::Result<Proc> {
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .env("ETCDCTL_API", "3");
        tie_to_parent(&mut cmd, None);
        let mut child = cmd
            .spawn()
            .map_err(|e| io::Error::new(e.kind(), format!("start {}: {e}", argv[0])))?;
        let (tx, rx) = mpsc::channel();
        let out = child.stdout.take().expect("piped");
        let err = child.stderr.take().expect("piped");
        for (stream, stderr) in [
            (Box::new(out) as Box<dyn io::Read + Send>, false),
            (Box::new(err), true),
        ] {
            let tx = tx.clone();
            thread::spawn(move || {
                for text in BufReader::new(stream).lines().map_while(Result::ok) {
                    let line = Line {
                        at: Instant::now(),
                        stderr,
                        text,
                    };
                    if tx.send(line).is_err() {
                        return;
                    }
                }
            });
        }
        Ok(Proc {
            child,
            rx,
            lines: Vec::new(),
        })
    }

    fn pid(&self) -> libc::pid_t {
        self.child.id() as libc::pid_t
    }

    pub(super) fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill on our own child's pid (not yet waited for).
        unsafe {
            libc::kill(self.pid(), sig);
        }
    }

    pub(super) fn drain(&mut self) {
        while let Ok(l) = self.rx.try_recv() {
            self.lines.push(l);
        }
    }

    /// The first line (already read or arriving before `deadline`) that
    /// `want` accepts.
    pub(super) fn wait_line(
        &mut self,
        deadline: Instant,
        want: impl Fn(&Line) -> bool,
    ) -> Option<Instant> {
        self.drain();
        if let Some(l) = self.lines.iter().find(|l| want(l)) {
            return Some(l.at);
        }
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(l) => {
                    let hit = want(&l).then_some(l.at);
                    self.lines.push(l);
                    if hit.is_some() {
                        return hit;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => return None,
                // Both streams closed: the process is gone.
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    if Instant::now() >= deadline {
                        return None;
                    }
                    thread::sleep(left.min(Duration::from_millis(20)));
                    if self.exited() {
                        return None;
                    }
                }
            }
        }
    }

    pub(super) fn exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// Everything it wrote, for an error message.
    pub(super) fn transcript(&mut self) -> String {
        self.drain();
        self.lines
            .iter()
            .map(|l| format!("{}{}", if l.stderr { "[err] " } else { "" }, l.text))
            .collect::<Vec<_>>()
            .join(" | ")
    }

    /// SIGTERM, then SIGKILL if it is still there after `grace`; waits for it.
    pub(super) fn stop(&mut self, grace: Duration) {
        if !self.exited() {
            self.signal(libc::SIGTERM);
            let end = Instant::now() + grace;
            while Instant::now() < end && !self.exited() {
                thread::sleep(Duration::from_millis(10));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.drain();
        // The command `redis-lock elect` ran (`started <pid> ...`), if it
        // outlived it.
        for l in &self.lines {
            if let Some(pid) = l
                .text
                .strip_prefix("started ")
                .and_then(|r| r.split_whitespace().next())
                .and_then(|p| p.parse::<libc::pid_t>().ok())
            {
                let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                if String::from_utf8_lossy(&cmdline).contains("--s14-child") {
                    // SAFETY: plain kill of a process checked to be ours.
                    unsafe {
                        libc::kill(pid, libc::SIGKILL);
                    }
                }
            }
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop(Duration::ZERO);
    }
}
