//! 1,000 sessions come and go (tokio, then blocking) against a real server (REDIS_SERVER,
//! LOCK_MODULE): afterwards the server has no more connections than before and the process
//! no more threads (`/proc/self/task`) or file descriptors (`/proc/self/fd`). The only test
//! of its binary, so no other test's threads or sockets are counted.

#[path = "../../../tests/common/mod.rs"]
mod common;

use std::fs;
use std::time::{Duration, Instant};

use common::{q, wait_until, Server};
use redis_lock_client::{blocking, Session, Wait};

const SESSIONS: usize = 1000;

fn threads() -> usize {
    fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .count()
}

fn fds() -> usize {
    fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .count()
}

/// The server's connections, the asking one included.
fn server_connections(con: &mut redis::Connection) -> usize {
    let list: String = q(con, &["CLIENT", "LIST"]);
    list.lines().count()
}

/// Waits until the server's connections and the process's threads and descriptors are back
/// to `before` (closing is asynchronous: a tokio session closes on its runtime).
fn assert_back_to(before: (usize, usize, usize), con: &mut redis::Connection, face: &str) {
    let mut now = (0, 0, 0);
    let settled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_until("connections, threads and descriptors back", || {
            now = (server_connections(con), threads(), fds());
            now.0 <= before.0 && now.1 <= before.1 && now.2 <= before.2
        })
    }));
    if settled.is_err() {
        let list: String = q(con, &["CLIENT", "LIST"]);
        panic!(
            "{face}: (server connections, threads, fds) before {before:?}, after {now:?}:\n{list}"
        );
    }
}

#[test]
fn a_thousand_sessions_come_and_go_and_leave_nothing() {
    let server = Server::start();
    let client = redis::Client::open(server.url()).unwrap();
    let mut con = server.client();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let before = (server_connections(&mut con), threads(), fds());
    rt.block_on(async {
        for i in 0..SESSIONS {
            let session = Session::open(&client).await.unwrap();
            let lock = session.lock(format!("t{}", i % 7));
            // A wait (a pooled waiting connection) granted at once, a hold released.
            let hold = lock
                .acquire(Wait::For(Duration::from_secs(5)))
                .await
                .unwrap();
            match i % 3 {
                0 => {
                    hold.release().await.unwrap();
                    session.close().await;
                }
                // Released by the session's close, on the runtime.
                1 => drop((session, hold)),
                _ => {
                    // A wait cut short (its cleanup spawned), then the session dropped.
                    let again = lock.acquire(Wait::Forever);
                    let r = tokio::time::timeout(Duration::from_millis(1), again).await;
                    assert!(r.is_err(), "the lock is held: still waiting");
                    drop(hold);
                    drop(session);
                }
            }
        }
    });
    assert_back_to(before, &mut con, "tokio");
    drop(rt);
    // Closed as soon as opened, on a runtime of one thread: each session connection's task
    // first runs after its session closed (as on a busy machine with more threads).
    let one = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let before = (server_connections(&mut con), threads(), fds());
    one.block_on(async {
        for _ in 0..SESSIONS {
            Session::open(&client).await.unwrap().close().await;
        }
        // The sessions' tasks run only while this runtime runs.
        let deadline = Instant::now() + common::PATIENCE;
        while server_connections(&mut con) > before.0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    assert_back_to(before, &mut con, "tokio, closed at once");
    drop(one);
    let before = (server_connections(&mut con), threads(), fds());
    for i in 0..SESSIONS {
        let session = blocking::Session::open(&client).unwrap();
        let hold = session
            .lock(format!("b{}", i % 7))
            .acquire(Wait::For(Duration::from_secs(5)))
            .unwrap();
        if i % 2 == 0 {
            hold.release().unwrap();
            session.close();
        } else {
            drop(session); // releases the hold; the hold's drop then has nothing to do
            drop(hold);
        }
    }
    assert_back_to(before, &mut con, "blocking");
    for key in (0..7).flat_map(|i| [format!("t{i}"), format!("b{i}")]) {
        assert!(
            common::lock_info(&mut con, &key).is_empty(),
            "{key} is free"
        );
    }
}
