//! The command run under the lock: starting it, noticing its exit without
//! reaping it (so its pid cannot be reused while we may still signal it),
//! signalling it, and the signals redis-lock itself receives.

use std::ffi::OsString;
use std::io;
use std::process::{Child, Command};
use std::sync::mpsc::Sender;
use std::thread;

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::exfiltrator::WithOrigin;
use signal_hook::iterator::SignalsInfo;
use signal_hook::low_level::siginfo::Cause;

use crate::sys;

/// The signals forwarded to the command.
pub const FORWARDED: [i32; 3] = [SIGINT, SIGTERM, SIGHUP];

/// A signal redis-lock received.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Received {
    pub signal: i32,
    /// Sent by the kernel: a terminal's Ctrl-C, Ctrl-\ or hangup, which the
    /// kernel sends to the whole foreground process group, the command
    /// included (it stays in ours), so it must not be sent to it again.
    pub from_terminal: bool,
}

/// Starts a thread that turns SIGINT, SIGTERM and SIGHUP into `event(..)`
/// on `tx` (instead of ending redis-lock).
pub fn listen<E: Send + 'static>(tx: Sender<E>, event: fn(Received) -> E) -> io::Result<()> {
    let mut signals = SignalsInfo::<WithOrigin>::new(FORWARDED)?;
    thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for origin in signals.forever() {
                let received = Received {
                    signal: origin.signal,
                    from_terminal: origin.cause == Cause::Kernel,
                };
                if tx.send(event(received)).is_err() {
                    return;
                }
            }
        })?;
    Ok(())
}

/// Whether a received signal is to be sent on to the command.
pub fn forward(received: Received) -> bool {
    !received.from_terminal
}

/// Starts `command` with `env` added to redis-lock's environment. It stays in
/// redis-lock's process group, so it keeps the terminal. It inherits the
/// descriptor `keep` (the holder connection; every other descriptor of
/// redis-lock is close-on-exec), and the kernel kills it (SIGKILL) if
/// redis-lock dies first (see `sys::inherit_and_die_with_parent`). Called
/// from the main thread: the parent-death signal follows the thread that
/// starts the child.
pub fn spawn(command: &[OsString], env: &[(&str, String)], keep: Option<i32>) -> io::Result<Child> {
    let (program, args) = command
        .split_first()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no command"))?;
    let mut cmd = Command::new(program);
    cmd.args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    sys::inherit_and_die_with_parent(&mut cmd, keep);
    cmd.spawn()
}

/// Starts `command` as [`spawn`] does (no descriptor inherited), but as the leader of a
/// process group of its own (whose id is its pid), so that [`kill_group`] reaches every
/// process it starts. Off the terminal's foreground group: signals from the terminal reach
/// redis-lock only, which passes them on.
pub fn spawn_group(command: &[OsString], env: &[(&str, String)]) -> io::Result<Child> {
    use std::os::unix::process::CommandExt;
    let (program, args) = command
        .split_first()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no command"))?;
    let mut cmd = Command::new(program);
    cmd.args(args).process_group(0);
    for (k, v) in env {
        cmd.env(k, v);
    }
    sys::inherit_and_die_with_parent(&mut cmd, None);
    cmd.spawn()
}

/// Sends `signal` to the process group `pgid` (a child started by [`spawn_group`], not
/// yet reaped, so the group's id is not another's).
pub fn kill_group(pgid: u32, signal: i32) {
    sys::kill_group(pgid, signal);
}

/// Why a command could not be started, in words.
pub fn spawn_error(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::NotFound => "no such command".into(),
        io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => {
            let text = e.to_string();
            match text.rfind(" (os error ") {
                Some(at) => text[..at].to_lowercase(),
                None => text,
            }
        }
    }
}

/// Starts a thread that sends `event` once the process `pid` has exited,
/// leaving it to be reaped (`Child::wait`) by the caller.
pub fn notify_exit<E: Send + 'static>(pid: u32, tx: Sender<E>, event: E) -> io::Result<()> {
    thread::Builder::new().name("child".into()).spawn(move || {
        let _ = sys::wait_exited_unreaped(pid);
        let _ = tx.send(event);
    })?;
    Ok(())
}

/// Sends `signal` to the process `pid` (not yet reaped).
pub fn kill(pid: u32, signal: i32) {
    sys::kill(pid, signal);
}

/// `SIGTERM` and the like, for messages.
pub fn signal_name(signal: i32) -> String {
    match signal {
        SIGINT => "SIGINT".into(),
        SIGTERM => "SIGTERM".into(),
        SIGHUP => "SIGHUP".into(),
        libc::SIGKILL => "SIGKILL".into(),
        n => format!("signal {n}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_signals_are_not_sent_twice() {
        assert!(forward(Received {
            signal: SIGTERM,
            from_terminal: false
        }));
        assert!(!forward(Received {
            signal: SIGINT,
            from_terminal: true
        }));
    }

    #[test]
    fn names() {
        assert_eq!(signal_name(SIGTERM), "SIGTERM");
        assert_eq!(signal_name(libc::SIGKILL), "SIGKILL");
        assert_eq!(signal_name(10), "signal 10");
    }

    #[test]
    fn exit_is_noticed_before_the_child_is_reaped() {
        let mut child =
            spawn(&["sh".into(), "-c".into(), "exit 3".into()], &[], None).expect("spawn");
        let (tx, rx) = std::sync::mpsc::channel();
        notify_exit(child.id(), tx, ()).expect("thread");
        rx.recv_timeout(std::time::Duration::from_secs(10))
            .expect("exit noticed");
        let status = child.wait().expect("reaped after");
        assert_eq!(status.code(), Some(3));
    }
}
