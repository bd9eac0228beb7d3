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

/// Sends `signal` to every process of group `pgid`; an id out of range is ignored.
pub fn kill_group(pgid: u32, signal: i32) {
    if let Ok(pgid) = libc::pid_t::try_from(pgid) {
        if pgid > 1 {
            // SAFETY: killpg(2) touches no memory of ours; callers pass the group of a
            // child they have not reaped, so the id is not another group's.
            unsafe {
                libc::killpg(pgid, signal);
            }
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

/// Where a connected socket leads: a TCP port, or a Unix socket's path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Peer {
    Tcp(u16),
    Unix(std::path::PathBuf),
}

/// The peer of socket `fd`, if it is a connected TCP or Unix stream socket.
pub fn peer(fd: i32) -> Option<Peer> {
    // SAFETY: a zeroed sockaddr_storage is a valid out-parameter.
    let mut addr: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: getpeername writes at most `len` bytes into `addr` and the
    // length it wrote into `len`; an fd that is not a socket is an error.
    let rc = unsafe {
        libc::getpeername(
            fd,
            (&mut addr as *mut libc::sockaddr_storage).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return None;
    }
    match i32::from(addr.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in, and
            // sockaddr_storage is large and aligned enough for it.
            let a =
                unsafe { &*(&addr as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            Some(Peer::Tcp(u16::from_be(a.sin_port)))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, for a sockaddr_in6.
            let a =
                unsafe { &*(&addr as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            Some(Peer::Tcp(u16::from_be(a.sin6_port)))
        }
        libc::AF_UNIX => {
            // SAFETY: as above, for a sockaddr_un.
            let a =
                unsafe { &*(&addr as *const libc::sockaddr_storage).cast::<libc::sockaddr_un>() };
            let path: Vec<u8> = a
                .sun_path
                .iter()
                .take_while(|c| **c != 0)
                .map(|c| *c as u8)
                .collect();
            use std::os::unix::ffi::OsStringExt;
            Some(Peer::Unix(std::ffi::OsString::from_vec(path).into()))
        }
        _ => None,
    }
}

/// Prepares `cmd` so that the process it starts (1) inherits descriptor
/// `keep` (the holder connection, close-on-exec in redis-lock) at the same
/// number, and (2) is sent SIGKILL by the kernel when redis-lock's thread
/// that starts it (the main thread, which lives as long as redis-lock) ends,
/// however it ends (PR_SET_PDEATHSIG). A child whose parent died before the
/// signal was armed does not run the command.
#[cfg(target_os = "linux")]
pub fn inherit_and_die_with_parent(cmd: &mut std::process::Command, keep: Option<i32>) {
    use std::os::unix::process::CommandExt;
    let parent = std::process::id();
    let pre_exec = move || -> io::Result<()> {
        if let Some(fd) = keep {
            // SAFETY: fcntl on an fd number touches no memory; it fails
            // harmlessly if the fd is not open.
            let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
            // SAFETY: as above.
            if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) } < 0
            {
                return Err(io::Error::last_os_error());
            }
        }
        // SAFETY: prctl(PR_SET_PDEATHSIG) only sets a flag of this process.
        if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // The parent may have died before the signal was armed.
        // SAFETY: getppid has no preconditions.
        let ppid = unsafe { libc::getppid() };
        if u32::try_from(ppid).ok() != Some(parent) {
            return Err(io::Error::from(io::ErrorKind::BrokenPipe));
        }
        Ok(())
    };
    // SAFETY: the closure runs in the forked child before exec and calls
    // only async-signal-safe functions (fcntl, prctl, getppid); it
    // allocates nothing (an OS error or a simple io::Error is no
    // allocation).
    unsafe {
        cmd.pre_exec(pre_exec);
    }
}

/// Elsewhere: the descriptor is inherited, but there is no parent-death
/// signal (see docs/cli.md).
#[cfg(not(target_os = "linux"))]
pub fn inherit_and_die_with_parent(cmd: &mut std::process::Command, keep: Option<i32>) {
    use std::os::unix::process::CommandExt;
    let pre_exec = move || -> io::Result<()> {
        if let Some(fd) = keep {
            // SAFETY: fcntl on an fd number touches no memory.
            let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
            // SAFETY: as above.
            if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) } < 0
            {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    };
    // SAFETY: the closure calls only fcntl, async-signal-safe, and
    // allocates nothing.
    unsafe {
        cmd.pre_exec(pre_exec);
    }
}
