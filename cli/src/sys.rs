//! The operating-system calls the standard library does not offer: every
//! `unsafe` of redis-lock is here (the rest of the crate denies it).

use std::io;

/// Blocks until process `pid` (a child of ours) has exited, and leaves it
/// unreaped: its pid cannot be reused while we may still signal it.
/// Retries when a signal interrupts the wait.
pub fn wait_exited_unreaped(pid: u32) -> io::Result<()> {
    let id = libc::id_t::from(pid);
    loop {
        // SAFETY: a zeroed siginfo_t is a valid out-parameter.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid only writes into `info`; WNOWAIT leaves the child
        // waitable, so its pid stays ours until it is reaped.
        let rc = unsafe { libc::waitid(libc::P_PID, id, &mut info, libc::WEXITED | libc::WNOWAIT) };
        if rc == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Sends `signal` to process `pid`; a pid out of range is ignored.
pub fn kill(pid: u32, signal: i32) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        // SAFETY: kill(2) touches no memory of ours; callers pass a child
        // they have not reaped, so the pid is not another process's.
        unsafe {
            libc::kill(pid, signal);
        }
    }
}

/// This host's name, or `None` if it cannot be read.
pub fn hostname() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|b| *b == 0).unwrap_or(buf.len());
    Some(String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// Columns and rows of the terminal on `fd`, if it is one.
pub fn terminal_size(fd: i32) -> Option<(usize, usize)> {
    // SAFETY: a zeroed winsize is a valid out-parameter for TIOCGWINSZ.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ only writes into `ws`.
    let rc = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) };
    (rc == 0 && ws.ws_col > 0 && ws.ws_row > 0).then_some((ws.ws_col as usize, ws.ws_row as usize))
}
