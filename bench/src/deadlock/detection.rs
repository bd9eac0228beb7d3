//! The server's deadlock detection as S15 sets and reads it: the check at
//! each wait, after a delay, or off (`lock.deadlock-check-ms`), the
//! `DEADLOCK` replies counted (`lock_deadlocks`) and the callers queued
//! (`lock_waiters`, waited for).

use std::io;
use std::time::{Duration, Instant};

use crate::conn::Conn;
use crate::info_field;

pub(super) fn err(msg: String) -> io::Error {
    io::Error::other(msg)
}

/// Detection on (checked at each wait, `lock.deadlock-check-ms 0`) or off
/// (-1).
pub(super) async fn set_detection(admin: &mut Conn, on: bool) -> io::Result<()> {
    set_check_ms(admin, if on { 0 } else { -1 }).await
}

pub(super) async fn set_check_ms(admin: &mut Conn, ms: i64) -> io::Result<()> {
    let ms = ms.to_string();
    admin
        .ok(&["CONFIG", "SET", "lock.deadlock-check-ms", &ms])
        .await
        .map(|_| ())
}

pub(super) async fn deadlocks_counted(admin: &mut Conn) -> io::Result<i64> {
    info_field(admin, "lock", "lock_deadlocks")
        .await?
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| err("INFO lock has no lock_deadlocks".into()))
}

pub(super) async fn lock_waiters(admin: &mut Conn) -> io::Result<usize> {
    info_field(admin, "lock", "lock_waiters")
        .await?
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| err("INFO lock has no lock_waiters".into()))
}

/// Polls `INFO lock` until `lock_waiters` is `n` (20 s at most).
pub(super) async fn wait_for_waiters(
    admin: &mut Conn,
    n: usize,
    pause: Duration,
) -> io::Result<()> {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let got = lock_waiters(admin).await?;
        if got == n {
            return Ok(());
        }
        if Instant::now() > until {
            return Err(err(format!(
                "lock_waiters is {got} after 20 s, expected {n}"
            )));
        }
        tokio::time::sleep(pause).await;
    }
}
