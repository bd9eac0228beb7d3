//! Semaphores and latches against real servers with the module loaded (REDIS_SERVER,
//! LOCK_MODULE): permits bound to the session, FIFO waiting, cancelled waits leaving
//! nothing behind, re-attach and loss, latches opening and ending (GONE); both faces.

#[path = "../../../tests/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{q, raw, Server, Value};
use redis_lock_client::proto::{int_field, sem_holders, SemHolder};
use redis_lock_client::{Error, Options, Reason, Session, Wait};

fn client(server: &Server) -> redis::Client {
    redis::Client::open(server.url()).expect("client")
}

fn sem_info(con: &mut redis::Connection, key: &str) -> Value {
    raw(con, &["SEM.INFO", key]).expect("SEM.INFO")
}

fn holders(con: &mut redis::Connection, key: &str) -> Vec<SemHolder> {
    sem_holders(&sem_info(con, key))
}

fn sem_waiters(con: &mut redis::Connection, key: &str) -> i64 {
    int_field(&sem_info(con, key), "waiters").unwrap_or(0)
}

fn latch_waiters(con: &mut redis::Connection, key: &str) -> i64 {
    int_field(
        &raw(con, &["LATCH.INFO", key]).expect("LATCH.INFO"),
        "waiters",
    )
    .unwrap_or(0)
}

/// The id of the session's connection (`CLIENT SETNAME lock-session:<token>`).
fn session_conn(con: &mut redis::Connection, token: &str) -> i64 {
    let list: String = q(con, &["CLIENT", "LIST"]);
    let line = list
        .lines()
        .find(|l| l.contains(&format!(" name=lock-session:{token} ")))
        .expect("the session connection");
    line.strip_prefix("id=")
        .and_then(|r| r.split(' ').next())
        .and_then(|id| id.parse().ok())
        .expect("its id")
}

async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + common::PATIENCE;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_are_bound_to_the_session_and_served_in_turn() {
    let server = Server::start();
    let mut con = server.client();
    let session = Arc::new(Session::open(&client(&server)).await.unwrap());
    let sem = session.semaphore("pool");
    assert!(sem.init(2).await.unwrap());
    assert!(!sem.init(3).await.unwrap(), "set once");
    assert_eq!(sem.total().await.unwrap(), Some(2));
    let p1 = sem.acquire(Wait::No).await.unwrap();
    let p2 = sem.acquire(Wait::No).await.unwrap();
    assert_eq!((p1.count(), p2.count()), (1, 1));
    assert_ne!(p1.owner(), p2.owner(), "a fresh owner per acquisition");
    assert!(p1.owner().starts_with(session.token()));
    let session_id = session_conn(&mut con, session.token());
    let held = holders(&mut con, "pool");
    assert_eq!(held.len(), 2, "{held:?}");
    assert!(
        held.iter().all(|h| h.keepalive_client == Some(session_id)),
        "bound to the session connection {session_id}: {held:?}"
    );
    assert_eq!(session.holds(), 2);
    // Full: a bounded wait runs out (Busy) and leaves no waiter.
    let r = sem.acquire(Wait::For(Duration::from_millis(100))).await;
    assert!(matches!(r, Err(Error::Busy)), "{r:?}");
    assert_eq!(sem_waiters(&mut con, "pool"), 0);
    assert!(matches!(
        sem.acquire_many(3, Wait::No).await,
        Err(Error::Busy)
    ));
    // A waiter is served when a permit comes back.
    let s = sem.clone();
    let waiting = tokio::spawn(async move { s.acquire(Wait::Forever).await });
    eventually("queued", || sem_waiters(&mut con, "pool") == 1).await;
    assert!(!waiting.is_finished());
    let p1_owner = p1.owner().to_string();
    p1.release().await.unwrap();
    let p3 = waiting.await.unwrap().unwrap();
    let owners: Vec<String> = holders(&mut con, "pool")
        .into_iter()
        .map(|h| h.owner)
        .collect();
    assert!(!owners.contains(&p1_owner), "{owners:?}");
    assert!(owners.iter().any(|o| o == p3.owner()), "{owners:?}");
    // Released behind the library's back: NOTOWNER.
    let _: i64 = q(&mut con, &["SEM.RELEASE", "pool", p2.owner()]);
    assert!(matches!(p2.release().await, Err(Error::NotOwner)));
    p3.release().await.unwrap();
    assert_eq!(sem.available().await.unwrap(), 2);
    assert!(holders(&mut con, "pool").is_empty());
    assert_eq!(session.holds(), 0);
    // Dropped permits are released too.
    drop(sem.acquire_many(2, Wait::No).await.unwrap());
    eventually("a dropped permit released", || {
        holders(&mut con, "pool").is_empty()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_waits_leave_no_waiter_and_no_permit() {
    let server = Server::start();
    let mut con = server.client();
    let session = Arc::new(Session::open(&client(&server)).await.unwrap());
    let sem = session.semaphore("c");
    sem.init(1).await.unwrap();
    // Cancels racing the grant: the holder releases as the waiter's future is dropped.
    for i in 0..20u64 {
        let holder = sem.acquire(Wait::No).await.unwrap();
        let s = sem.clone();
        let waiting = tokio::spawn(async move { s.acquire(Wait::Forever).await });
        eventually("queued", || sem_waiters(&mut con, "c") == 1).await;
        let release = holder.release();
        tokio::time::sleep(Duration::from_micros(i * 37 % 400)).await;
        waiting.abort();
        release.await.unwrap();
        let _ = waiting.await;
        eventually("no permit and no waiter left behind", || {
            holders(&mut con, "c").is_empty() && sem_waiters(&mut con, "c") == 0
        })
        .await;
    }
    assert_eq!(sem.available().await.unwrap(), 1);
    assert_eq!(session.holds(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_are_reattached_after_a_reconnect_and_lost_when_gone() {
    let server = Server::start();
    let mut con = server.client();
    let lease = Duration::from_millis(1000);
    let session = Session::open_with(&client(&server), Options::default().lease(lease))
        .await
        .unwrap();
    let sem = session.semaphore("r");
    sem.init(1).await.unwrap();
    let p = sem.acquire(Wait::No).await.unwrap();
    let before = session_conn(&mut con, session.token());
    let _: i64 = q(&mut con, &["CLIENT", "KILL", "ID", &before.to_string()]);
    eventually("re-attached to the new session connection", || {
        holders(&mut con, "r")
            .first()
            .and_then(|h| h.keepalive_client)
            .is_some_and(|id| id != before)
    })
    .await;
    assert!(!p.is_lost());
    // Deleted (both keys), then a reconnect: the re-attach finds nothing, or a renewal
    // found it gone first; either way the permit is reported lost.
    let mut lost = p.lost();
    let _: i64 = q(&mut con, &["DEL", "r", "{r}:timeout"]);
    let now = session_conn(&mut con, session.token());
    let _: i64 = q(&mut con, &["CLIENT", "KILL", "ID", &now.to_string()]);
    let got = tokio::time::timeout(common::PATIENCE, lost.wait_for(Option::is_some))
        .await
        .expect("lost in time")
        .unwrap()
        .clone()
        .unwrap();
    assert!(
        matches!(got.reason, Reason::NotOwner | Reason::Gone),
        "{got:?}"
    );
    assert_eq!(got.owner, p.owner());
    assert!(matches!(p.release().await, Err(Error::Lost(_))));
    assert_eq!(session.holds(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_latch_opens_at_zero_and_a_latch_that_ends_first_is_gone() {
    let server = Server::start();
    let mut con = server.client();
    let session = Session::open(&client(&server)).await.unwrap();
    let latch = session.latch("l");
    assert!(latch.init(2, None).await.unwrap());
    assert!(!latch.init(9, None).await.unwrap(), "set once");
    assert_eq!(latch.count().await.unwrap(), 2);
    assert!(!latch.wait(Wait::No).await.unwrap());
    let l = latch.clone();
    let waiting = tokio::spawn(async move { l.wait(Wait::Forever).await });
    eventually("waiting", || latch_waiters(&mut con, "l") == 1).await;
    assert_eq!(latch.count_down(1).await.unwrap(), 1);
    assert!(!waiting.is_finished());
    assert_eq!(latch.count_down(1).await.unwrap(), 0);
    assert!(waiting.await.unwrap().unwrap(), "opened");
    assert_eq!(latch.count().await.unwrap(), 0);
    assert!(latch.wait(Wait::No).await.unwrap());
    assert!(latch
        .wait(Wait::For(Duration::from_millis(50)))
        .await
        .unwrap());
    // Still closed when the bounded wait runs out.
    let closed = session.latch("closed");
    closed.init(1, None).await.unwrap();
    assert!(!closed
        .wait(Wait::For(Duration::from_millis(50)))
        .await
        .unwrap());
    // Expired before reaching zero.
    let expiring = session.latch("x");
    expiring
        .init(5, Some(Duration::from_millis(150)))
        .await
        .unwrap();
    let r = expiring.wait(Wait::Forever).await;
    assert!(matches!(r, Err(Error::Gone(_))), "{r:?}");
    // Deleted before reaching zero.
    let deleted = session.latch("d");
    deleted.init(1, None).await.unwrap();
    let d = deleted.clone();
    let waiting = tokio::spawn(async move { d.wait(Wait::Forever).await });
    eventually("waiting", || latch_waiters(&mut con, "d") == 1).await;
    let _: i64 = q(&mut con, &["DEL", "d"]);
    let r = waiting.await.unwrap();
    assert!(matches!(r, Err(Error::Gone(_))), "{r:?}");
}

#[test]
fn the_blocking_face() {
    use redis_lock_client::blocking::Session;
    let server = Server::start();
    let mut con = server.client();
    let session = Arc::new(Session::open(client(&server)).unwrap());
    let sem = session.semaphore("b");
    assert!(sem.init(1).unwrap());
    let p = sem.acquire(Wait::No).unwrap();
    let s = sem.clone();
    let waiting = std::thread::spawn(move || s.acquire(Wait::Forever).map(|p| p.release()));
    common::wait_until("queued", || sem_waiters(&mut con, "b") == 1);
    p.release().unwrap();
    waiting.join().unwrap().unwrap().unwrap();
    assert_eq!(sem.available().unwrap(), 1);
    let latch = session.latch("bl");
    latch.init(1, None).unwrap();
    let l = latch.clone();
    let waiting = std::thread::spawn(move || l.wait(Wait::Forever));
    common::wait_until("waiting", || latch_waiters(&mut con, "bl") == 1);
    assert_eq!(latch.count_down(1).unwrap(), 0);
    assert!(waiting.join().unwrap().unwrap());
}
