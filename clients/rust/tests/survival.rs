//! A wait survives the loss of its connection while the server can still be reached: the
//! broken wait's owner is cleaned up as a cancel does (`LOCK.CANCEL`, then the release), and
//! a fresh owner queues again on a new connection within the caller's timeout. Idle pooled
//! connections the server reaps (`CONFIG SET timeout`) are replaced. A server that cannot
//! be reached any more is `Error::Unavailable`, not an endless retry. Real servers
//! (REDIS_SERVER, LOCK_MODULE).

#[path = "../../../tests/common/mod.rs"]
mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{lock_info, q, raw, wait_until, Server, Value};
use redis_lock_client::proto::int_field;
use redis_lock_client::{Error, Session, Wait};

fn client(server: &Server) -> redis::Client {
    redis::Client::open(server.url()).expect("client")
}

fn owner_of(con: &mut redis::Connection, key: &str) -> Option<String> {
    common::field(&lock_info(con, key), "owner")
}

/// The owners queued for `key` (`LOCK.WAITERS key COUNT 0`), in queue order.
fn waiting_owners(con: &mut redis::Connection, key: &str) -> Vec<String> {
    match raw(con, &["LOCK.WAITERS", key, "COUNT", "0"]).expect("LOCK.WAITERS") {
        Value::Array(items) => items
            .iter()
            .map(|w| match redis_lock_client::proto::field(w, "owner") {
                Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
                other => panic!("a waiter without an owner: {other:?}"),
            })
            .collect(),
        other => panic!("LOCK.WAITERS replied {other:?}"),
    }
}

fn sem_waiters(con: &mut redis::Connection, key: &str) -> i64 {
    int_field(&raw(con, &["SEM.INFO", key]).expect("SEM.INFO"), "waiters").unwrap_or(0)
}

/// The ids of the connections blocked in `command` (`CLIENT LIST`: `cmd=<command>`, a `b`
/// in `flags`).
fn blocked_in(con: &mut redis::Connection, command: &str) -> Vec<String> {
    let list: String = q(con, &["CLIENT", "LIST"]);
    list.lines()
        .filter_map(|line| {
            let field = |name: &str| {
                line.split(' ')
                    .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            };
            let blocked = field("flags").is_some_and(|f| f.contains('b'));
            (blocked && field("cmd") == Some(command)).then(|| field("id").unwrap().to_string())
        })
        .collect()
}

/// A connection to `url` whose reads cannot hang a test.
fn connect(url: &str) -> redis::Connection {
    let con = redis::Client::open(url)
        .expect("client")
        .get_connection_with_timeout(Duration::from_secs(5))
        .expect("connect");
    con.set_read_timeout(Some(common::PATIENCE))
        .expect("read timeout");
    con
}

/// Kills the connection blocked in `command` `kills` times, each time once a connection not
/// killed before waits there and `queued` says its owner is in line (given the owners).
fn kill_waiting_connection(
    url: &str,
    command: &str,
    kills: usize,
    mut queued: impl FnMut(&mut redis::Connection) -> bool,
) {
    let mut con = connect(url);
    let mut killed: Vec<String> = Vec::new();
    for _ in 0..kills {
        let mut id = None;
        wait_until("a new waiting connection", || {
            id = blocked_in(&mut con, command)
                .into_iter()
                .find(|id| !killed.contains(id));
            id.is_some() && queued(&mut con)
        });
        let id = id.unwrap();
        let n: i64 = q(&mut con, &["CLIENT", "KILL", "ID", &id]);
        assert_eq!(n, 1, "killed connection {id}");
        killed.push(id);
    }
}

/// Kills the wait on lock `key` (blocked in `command`) five times, recording each owner
/// queued: exactly one at a time (the broken wait's owner is gone before a fresh one
/// queues). Then waits for the sixth owner in line and returns the five.
fn kill_five_times(url: &str, command: &str, key: &str) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    kill_waiting_connection(url, command, 5, |con| {
        let owners = waiting_owners(con, key);
        assert!(owners.len() <= 1, "one owner in line at a time: {owners:?}");
        match owners.first() {
            Some(o) if !seen.contains(o) => {
                seen.push(o.clone());
                true
            }
            _ => false,
        }
    });
    let mut con = connect(url);
    wait_until("queued again after the last kill", || {
        let owners = waiting_owners(&mut con, key);
        assert!(owners.len() <= 1, "one owner in line at a time: {owners:?}");
        owners.first().is_some_and(|o| !seen.contains(o))
    });
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_survives_its_connection_killed_five_times() {
    let server = Server::start();
    let holder_session = Session::open(&client(&server)).await.unwrap();
    let session = Arc::new(Session::open(&client(&server)).await.unwrap());
    let mut con = server.client();
    let holder = holder_session.lock("k").acquire(Wait::No).await.unwrap();
    let waiter = {
        let session = session.clone();
        tokio::spawn(async move { session.lock("k").acquire(Wait::For(common::PATIENCE)).await })
    };
    let url = server.url();
    let owners = tokio::task::spawn_blocking(move || kill_five_times(&url, "lock.acquire", "k"))
        .await
        .unwrap();
    assert_eq!(owners.len(), 5, "a fresh owner per wait: {owners:?}");
    assert_eq!(owner_of(&mut con, "k").as_deref(), Some(holder.owner()));
    holder.release().await.unwrap();
    let hold = tokio::time::timeout(common::PATIENCE, waiter)
        .await
        .expect("served in time")
        .unwrap()
        .expect("acquired after five broken waits");
    assert!(!owners.contains(&hold.owner().to_string()), "{owners:?}");
    assert_eq!(owner_of(&mut con, "k").as_deref(), Some(hold.owner()));
    assert!(waiting_owners(&mut con, "k").is_empty());
    hold.release().await.unwrap();
    assert!(lock_info(&mut con, "k").is_empty(), "no leftover owner");
    assert_eq!(session.holds(), 0);
}

#[test]
fn a_blocking_wait_survives_its_connection_killed_five_times() {
    let server = Server::start();
    let c = client(&server);
    let holder_session = redis_lock_client::blocking::Session::open(&c).unwrap();
    let session = Arc::new(redis_lock_client::blocking::Session::open(&c).unwrap());
    let mut con = server.client();
    let holder = holder_session.lock("k").acquire(Wait::No).unwrap();
    let waiter = {
        let session = session.clone();
        thread::spawn(move || session.lock("k").acquire(Wait::Forever))
    };
    let owners = kill_five_times(&server.url(), "lock.acquire", "k");
    holder.release().unwrap();
    let hold = waiter
        .join()
        .unwrap()
        .expect("acquired after five broken waits");
    assert!(!owners.contains(&hold.owner().to_string()), "{owners:?}");
    assert_eq!(owner_of(&mut con, "k").as_deref(), Some(hold.owner()));
    assert!(waiting_owners(&mut con, "k").is_empty());
    hold.release().unwrap();
    assert!(lock_info(&mut con, "k").is_empty(), "no leftover owner");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_lock_write_lock_and_semaphore_waits_survive_a_killed_connection() {
    let server = Server::start();
    let holder_session = Session::open(&client(&server)).await.unwrap();
    let session = Arc::new(Session::open(&client(&server)).await.unwrap());
    let mut con = server.client();
    let url = server.url();
    // A multi-lock (LOCK.MACQUIRE) waiting for one of its keys.
    let holder = holder_session.lock("{m}b").acquire(Wait::No).await.unwrap();
    let waiter = {
        let session = session.clone();
        tokio::spawn(async move {
            let m = session.multi_lock(["{m}a", "{m}b"]);
            m.acquire(Wait::For(common::PATIENCE)).await
        })
    };
    let u = url.clone();
    let owners = tokio::task::spawn_blocking(move || kill_five_times(&u, "lock.macquire", "{m}b"))
        .await
        .unwrap();
    holder.release().await.unwrap();
    let hold = waiter
        .await
        .unwrap()
        .expect("the multi-lock after broken waits");
    assert!(!owners.contains(&hold.owner().to_string()));
    assert_eq!(owner_of(&mut con, "{m}a").as_deref(), Some(hold.owner()));
    assert_eq!(owner_of(&mut con, "{m}b").as_deref(), Some(hold.owner()));
    hold.release().await.unwrap();
    assert!(lock_info(&mut con, "{m}a").is_empty() && lock_info(&mut con, "{m}b").is_empty());
    // The write side of a read-write lock waiting for a reader.
    let reader = holder_session
        .rwlock("rw")
        .read()
        .acquire(Wait::No)
        .await
        .unwrap();
    let waiter = {
        let session = session.clone();
        tokio::spawn(async move {
            let w = session.rwlock("rw").write();
            w.acquire(Wait::For(common::PATIENCE)).await
        })
    };
    let u = url.clone();
    let owners = tokio::task::spawn_blocking(move || kill_five_times(&u, "lock.wacquire", "rw"))
        .await
        .unwrap();
    reader.release().await.unwrap();
    let hold = waiter
        .await
        .unwrap()
        .expect("the write lock after broken waits");
    assert!(!owners.contains(&hold.owner().to_string()));
    hold.release().await.unwrap();
    assert!(lock_info(&mut con, "rw").is_empty());
    // A semaphore's permit.
    let sem = session.semaphore("s");
    sem.init(1).await.unwrap();
    let permit = holder_session
        .semaphore("s")
        .acquire(Wait::No)
        .await
        .unwrap();
    let waiter = {
        let sem = sem.clone();
        tokio::spawn(async move { sem.acquire(Wait::For(common::PATIENCE)).await })
    };
    let u = url.clone();
    tokio::task::spawn_blocking(move || {
        kill_waiting_connection(&u, "sem.acquire", 3, |con| sem_waiters(con, "s") == 1)
    })
    .await
    .unwrap();
    tokio::task::block_in_place(|| wait_until("queued again", || sem_waiters(&mut con, "s") == 1));
    permit.release().await.unwrap();
    let got = waiter.await.unwrap().expect("a permit after broken waits");
    assert_eq!(sem.available().await.unwrap(), 0);
    assert_eq!(sem_waiters(&mut con, "s"), 0);
    got.release().await.unwrap();
    assert_eq!(sem.available().await.unwrap(), 1, "no permit left behind");
    assert_eq!(session.holds(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_killed_over_and_over_until_the_holder_releases_is_served() {
    let server = Server::start();
    let holder_session = Session::open(&client(&server)).await.unwrap();
    let session = Arc::new(Session::open(&client(&server)).await.unwrap());
    let mut con = server.client();
    let holder = holder_session.lock("loop").acquire(Wait::No).await.unwrap();
    let waiter = {
        let session = session.clone();
        tokio::spawn(async move {
            session
                .lock("loop")
                .acquire(Wait::For(common::PATIENCE))
                .await
        })
    };
    // Kills whatever waits in LOCK.ACQUIRE, as soon as it shows, until told to stop.
    let stop = Arc::new(AtomicBool::new(false));
    let kills = Arc::new(AtomicUsize::new(0));
    let killer = {
        let (stop, kills, url) = (stop.clone(), kills.clone(), server.url());
        thread::spawn(move || {
            let mut con = connect(&url);
            while !stop.load(Ordering::SeqCst) {
                for id in blocked_in(&mut con, "lock.acquire") {
                    // An error: it was gone already (served, or broken by the last kill).
                    if let Ok(Value::Int(1)) = raw(&mut con, &["CLIENT", "KILL", "ID", &id]) {
                        kills.fetch_add(1, Ordering::SeqCst);
                    }
                }
                thread::sleep(Duration::from_millis(1));
            }
        })
    };
    let deadline = Instant::now() + common::PATIENCE;
    while kills.load(Ordering::SeqCst) < 10 {
        assert!(Instant::now() < deadline, "ten kills in time");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    holder.release().await.unwrap();
    let served = tokio::time::timeout(common::PATIENCE, waiter).await;
    stop.store(true, Ordering::SeqCst);
    killer.join().unwrap();
    let hold = served
        .expect("served in time")
        .unwrap()
        .expect("acquired while its waits were being killed");
    assert_eq!(owner_of(&mut con, "loop").as_deref(), Some(hold.owner()));
    assert!(
        waiting_owners(&mut con, "loop").is_empty(),
        "no leftover waiter"
    );
    hold.release().await.unwrap();
    assert!(lock_info(&mut con, "loop").is_empty(), "no leftover owner");
}

/// The connections of this test's session (everything but `keep`, the test's own).
fn client_count(url: &str) -> usize {
    let mut con = connect(url);
    let list: String = q(&mut con, &["CLIENT", "LIST"]);
    list.lines().count() - 1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pooled_connections_reaped_by_the_server_are_replaced() {
    let server = Server::start();
    let mut con = server.client();
    let session = Session::open(&client(&server)).await.unwrap();
    let other = Session::open(&client(&server)).await.unwrap();
    // Waiting connections go back to the pool, the command connection stays: then idle.
    let a = session.lock("r").acquire(Wait::No).await.unwrap();
    let waiting = {
        let l = other.lock("r");
        tokio::spawn(async move { l.acquire(Wait::For(common::PATIENCE)).await })
    };
    tokio::task::block_in_place(|| {
        wait_until("queued", || waiting_owners(&mut con, "r").len() == 1)
    });
    a.release().await.unwrap();
    let b = waiting.await.unwrap().unwrap();
    b.release().await.unwrap();
    let _: String = q(&mut con, &["CONFIG", "SET", "timeout", "1"]);
    // Two session connections (pub/sub, pinged: never reaped) remain.
    let url = server.url();
    tokio::task::block_in_place(|| {
        wait_until("idle connections reaped", || client_count(&url) == 2)
    });
    // Through the reaped command connection, and the reaped waiting connection.
    let a = session
        .lock("r")
        .acquire(Wait::No)
        .await
        .expect("acquire after the reaper");
    let waiting = {
        let l = other.lock("r");
        tokio::spawn(async move { l.acquire(Wait::For(common::PATIENCE)).await })
    };
    let mut con = server.client();
    tokio::task::block_in_place(|| {
        wait_until("queued", || waiting_owners(&mut con, "r").len() == 1)
    });
    a.release().await.expect("release after the reaper");
    let b = waiting.await.unwrap().expect("a wait after the reaper");
    b.release().await.unwrap();
    assert!(lock_info(&mut con, "r").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_whose_server_is_gone_is_unavailable() {
    let mut server = Server::start();
    let holder_session = Session::open(&client(&server)).await.unwrap();
    let session = Session::open(&client(&server)).await.unwrap();
    let mut con = server.client();
    let _holder = holder_session.lock("g").acquire(Wait::No).await.unwrap();
    let waiter = {
        let l = session.lock("g");
        tokio::spawn(async move { l.acquire(Wait::Forever).await })
    };
    tokio::task::block_in_place(|| {
        wait_until("queued", || waiting_owners(&mut con, "g").len() == 1)
    });
    server.kill();
    let r = tokio::time::timeout(common::PATIENCE, waiter)
        .await
        .expect("an answer in time, not an endless retry")
        .unwrap();
    assert!(matches!(r, Err(Error::Unavailable(_))), "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_and_a_latch_wait_survive_a_killed_connection() {
    let server = Server::start();
    let leader_session = Session::open(&client(&server)).await.unwrap();
    let session = Arc::new(Session::open(&client(&server)).await.unwrap());
    let mut con = server.client();
    let url = server.url();
    // A campaign waiting behind the leader (the election's queue is the lock's).
    let leader = leader_session
        .election("e")
        .campaign(Wait::No)
        .await
        .unwrap();
    let campaign = {
        let session = session.clone();
        tokio::spawn(async move {
            let e = session.election("e");
            e.campaign(Wait::For(common::PATIENCE)).await
        })
    };
    let u = url.clone();
    let candidates =
        tokio::task::spawn_blocking(move || kill_five_times(&u, "elect.campaign", "e"))
            .await
            .unwrap();
    assert!(leader.resign().await.unwrap());
    let leading = campaign.await.unwrap().expect("leads after broken waits");
    assert!(!candidates.contains(&leading.candidate().to_string()));
    assert!(waiting_owners(&mut con, "e").is_empty());
    assert!(leading.resign().await.unwrap());
    // A latch wait (it holds nothing: sent again on a new connection).
    let latch = session.latch("l");
    latch.init(1, None).await.unwrap();
    let waiting = {
        let latch = latch.clone();
        tokio::spawn(async move { latch.wait(Wait::For(common::PATIENCE)).await })
    };
    let latch_waiters = |con: &mut redis::Connection| {
        int_field(
            &raw(con, &["LATCH.INFO", "l"]).expect("LATCH.INFO"),
            "waiters",
        ) == Some(1)
    };
    let u = url.clone();
    tokio::task::spawn_blocking(move || {
        kill_waiting_connection(&u, "latch.await", 3, latch_waiters)
    })
    .await
    .unwrap();
    tokio::task::block_in_place(|| wait_until("waiting again", || latch_waiters(&mut con)));
    assert_eq!(latch.count_down(1).await.unwrap(), 0);
    assert!(waiting.await.unwrap().expect("opened after broken waits"));
    assert_eq!(session.holds(), 0);
}
