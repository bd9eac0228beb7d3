//! Socket options on a client's connection, set by the module on the
//! connections of KEEPALIVE holders: TCP keepalive probes and
//! TCP_USER_TIMEOUT, so that the kernel closes a connection whose peer has
//! stopped answering (its host crashed, the network is cut) instead of
//! keeping it open, and renewing its holds, for good.

/// Makes the kernel close the TCP connection on `fd` once its peer has not
/// answered for about `dead_peer_ms`: keepalive probes start after half of
/// that idle, and TCP_USER_TIMEOUT closes the connection when data or
/// probes stay unacknowledged for `dead_peer_ms`. False where the options
/// cannot be set (not a TCP socket: a unix socket).
#[cfg(target_os = "linux")]
pub fn close_when_peer_is_gone(fd: i32, dead_peer_ms: i64) -> bool {
    let secs = |ms: i64| i32::try_from((ms / 1000).max(1)).unwrap_or(i32::MAX);
    let user_timeout = u32::try_from(dead_peer_ms.max(1)).unwrap_or(u32::MAX);
    let set = |level: i32, name: i32, value: i32| -> bool {
        // SAFETY: `fd` is the socket of a client that is alive for this
        // whole callback (Redis owns it and closes it only when it frees the
        // client); the option value is a live c_int of the size given.
        unsafe {
            libc::setsockopt(
                fd,
                level,
                name,
                (&value as *const i32).cast(),
                std::mem::size_of::<i32>() as libc::socklen_t,
            ) == 0
        }
    };
    set(libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1)
        && set(
            libc::IPPROTO_TCP,
            libc::TCP_KEEPIDLE,
            secs(dead_peer_ms / 2),
        )
        && set(
            libc::IPPROTO_TCP,
            libc::TCP_KEEPINTVL,
            secs(dead_peer_ms / 6),
        )
        && set(libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 3)
        && set(
            libc::IPPROTO_TCP,
            libc::TCP_USER_TIMEOUT,
            i32::try_from(user_timeout).unwrap_or(i32::MAX),
        )
}

#[cfg(not(target_os = "linux"))]
pub fn close_when_peer_is_gone(_fd: i32, _dead_peer_ms: i64) -> bool {
    false
}
