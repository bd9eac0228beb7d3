//! The tokio face against real servers with the module loaded (REDIS_SERVER, LOCK_MODULE):
//! exclusion, FIFO, waits and their cancel, leases, a killed holder process, re-attach,
//! loss signals, typed errors.

#[path = "../../../tests/common/mod.rs"]
mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{lock_info, q, raw, Config, Server, Value};
use redis_lock_client::{Error, Options, Reason, Session, Wait};

fn client(server: &Server) -> redis::Client {
    redis::Client::open(server.url()).expect("client")
}

fn owner_of(con: &mut redis::Connection, key: &str) -> Option<String> {
    common::field(&lock_info(con, key), "owner")
}

fn waiters_of(con: &mut redis::Connection, key: &str) -> usize {
    match raw(con, &["LOCK.WAITERS", key, "COUNT", "0"]).expect("LOCK.WAITERS") {
        Value::Array(items) => items.len(),
        other => panic!("LOCK.WAITERS replied {other:?}"),
    }
}

/// Polls (async) until `cond`, panicking after `common::PATIENCE`.
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + common::PATIENCE;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_lock_in_five_lines() {
    let server = Server::start();
    let mut con = server.client();
    let client = redis::Client::open(server.url()).unwrap();
    let session = Session::open(&client).await.unwrap();
    let hold = session
        .lock("invoice:7")
        .acquire(Wait::For(Duration::from_secs(5)))
        .await
        .unwrap();
    assert!(
        hold.token() > 1_000_000_000_000_000,
        "a fencing token: {}",
        hold.token()
    );
    assert!(hold.owner().starts_with(session.token()));
    assert_eq!(
        owner_of(&mut con, "invoice:7").as_deref(),
        Some(hold.owner())
    );
    // Bound to the session connection, not to the connection that took it.
    let bound =
        common::field(&lock_info(&mut con, "invoice:7"), "keepalive_client").expect("kept alive");
    let list: String = q(&mut con, &["CLIENT", "LIST"]);
    let line = list
        .lines()
        .find(|l| l.starts_with(&format!("id={bound} ")))
        .expect("bound client");
    assert!(
        line.contains(&format!("name=lock-session:{}", session.token())),
        "{line}"
    );
    assert!(hold.lost().borrow().is_none());
    hold.release().await.unwrap();
    assert_eq!(owner_of(&mut con, "invoice:7"), None);
    assert_eq!(session.holds(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_acquirers_never_two_inside() {
    let server = Server::start();
    let sessions: Vec<Arc<Session>> = futures_join((0..4).map(|_| {
        let c = client(&server);
        async move { Arc::new(Session::open(&c).await.unwrap()) }
    }))
    .await;
    let inside = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicUsize::new(0));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..1000 {
        let session = sessions[i % sessions.len()].clone();
        let (inside, served, tokens) = (inside.clone(), served.clone(), tokens.clone());
        tasks.push(tokio::spawn(async move {
            let hold = session.lock("hot").acquire(Wait::Forever).await.unwrap();
            assert!(
                !inside.swap(true, Ordering::SeqCst),
                "two holders inside at once"
            );
            tokens.lock().unwrap().push(hold.token());
            tokio::task::yield_now().await;
            inside.store(false, Ordering::SeqCst);
            served.fetch_add(1, Ordering::SeqCst);
            hold.release().await.unwrap();
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(served.load(Ordering::SeqCst), 1000);
    let tokens = tokens.lock().unwrap();
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens rise with every grant"
    );
    let mut con = server.client();
    assert_eq!(owner_of(&mut con, "hot"), None);
}

/// Joins futures (spawned) in order.
async fn futures_join<F, T>(futs: impl Iterator<Item = F>) -> Vec<T>
where
    F: std::future::Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let handles: Vec<_> = futs.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_waiters_are_served_in_arrival_order() {
    let server = Server::start();
    let session = Arc::new(Session::open(&client(&server)).await.unwrap());
    let mut con = server.client();
    let first = session.lock("fifo").acquire(Wait::No).await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..100 {
        let (session, order) = (session.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let hold = session.lock("fifo").acquire(Wait::Forever).await.unwrap();
            order.lock().unwrap().push(i);
            hold.release().await.unwrap();
        }));
        // The next one queues only once this one is in the queue.
        eventually(&format!("waiter {i} queued"), || {
            waiters_of(&mut con, "fifo") == i + 1
        })
        .await;
    }
    first.release().await.unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), (0..100).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_wait_is_busy_and_leaves_no_waiter() {
    let server = Server::start();
    let session = Session::open(&client(&server)).await.unwrap();
    let mut con = server.client();
    let hold = session.lock("t").acquire(Wait::No).await.unwrap();
    let started = Instant::now();
    let r = session
        .lock("t")
        .acquire(Wait::For(Duration::from_millis(300)))
        .await;
    assert!(matches!(r, Err(Error::Busy)), "{r:?}");
    assert!(started.elapsed() >= Duration::from_millis(290));
    assert_eq!(waiters_of(&mut con, "t"), 0);
    assert!(matches!(
        session.lock("t").acquire(Wait::No).await,
        Err(Error::Busy)
    ));
    assert_eq!(owner_of(&mut con, "t").as_deref(), Some(hold.owner()));
    hold.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_past_max_hold_is_lost_and_its_lease_ends() {
    let server = Config::default()
        .module_arg("keepalive-max-hold-ms", "1000")
        .start();
    let lease = Duration::from_millis(800);
    let session = Session::open_with(&client(&server), Options::default().lease(lease))
        .await
        .unwrap();
    let hold = session.lock("short").acquire(Wait::No).await.unwrap();
    let mut lost = hold.lost();
    let got = tokio::time::timeout(common::PATIENCE, lost.wait_for(Option::is_some))
        .await
        .expect("lost in time")
        .unwrap()
        .clone()
        .unwrap();
    assert_eq!(got.reason, Reason::MaxHold);
    assert_eq!(got.key, "short");
    // Not renewed any more: the lease ends and another owner gets the lock.
    let other = Session::open(&client(&server)).await.unwrap();
    let next = other
        .lock("short")
        .acquire(Wait::For(lease * 3))
        .await
        .expect("granted once the lease ended");
    assert!(next.token() > hold.token());
    assert!(matches!(hold.release().await, Err(Error::Lost(_))));
    next.release().await.unwrap();
}

/// The lease of a hold a test keeps alive past its lease: the server renews it at half the
/// lease, and a server held up for longer than the half left ends a kept hold, as it ends any
/// lease (docs/guarantees.md, KEEPALIVE). make test runs every suite at once on two cores, where a
/// server was held up past half a second: a 1 s hold could be gone. 3 s keeps it through a 1.5 s
/// hold-up.
const KEPT_LEASE: Duration = Duration::from_millis(3000);

/// Run as a child process by `a_killed_holder_process_frees_the_lock_within_its_lease`:
/// holds the lock named by LOCK_CHILD_KEY and says so, then waits to be killed.
#[tokio::test]
#[ignore = "a child process of another test"]
async fn child_holder() {
    let (Ok(url), Ok(key)) = (
        std::env::var("LOCK_CHILD_URL"),
        std::env::var("LOCK_CHILD_KEY"),
    ) else {
        return;
    };
    let c = redis::Client::open(url).unwrap();
    let session = Session::open_with(&c, Options::default().lease(KEPT_LEASE))
        .await
        .unwrap();
    let hold = session.lock(key).acquire(Wait::No).await.unwrap();
    println!("HELD {}", hold.owner());
    tokio::time::sleep(Duration::from_secs(60)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holder_process_frees_the_lock_within_its_lease() {
    let server = Server::start();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "child_holder",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env("LOCK_CHILD_URL", server.url())
        .env("LOCK_CHILD_KEY", "job")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let stdout = child.stdout.take().unwrap();
    let mut child = Kill(child);
    let owner = tokio::task::spawn_blocking(move || {
        for line in BufReader::new(stdout).lines() {
            let line = line.unwrap();
            // libtest writes "test child_holder ... " before it on the same line.
            if let Some((_, owner)) = line.split_once("HELD ") {
                return owner.trim().to_string();
            }
        }
        panic!("the child ended without holding the lock");
    })
    .await
    .unwrap();
    let mut con = server.client();
    assert_eq!(owner_of(&mut con, "job").as_deref(), Some(owner.as_str()));
    // Kept alive past its lease while the process lives.
    tokio::time::sleep(KEPT_LEASE + Duration::from_millis(500)).await;
    assert_eq!(owner_of(&mut con, "job").as_deref(), Some(owner.as_str()));
    let session = Session::open(&client(&server)).await.unwrap();
    let waiter = tokio::spawn(async move {
        let hold = session.lock("job").acquire(Wait::Forever).await.unwrap();
        (Instant::now(), hold, session)
    });
    eventually("the waiter queued", || waiters_of(&mut con, "job") == 1).await;
    child.0.kill().unwrap();
    let killed = Instant::now();
    let _ = child.0.wait();
    let (granted, hold, _session) = tokio::time::timeout(common::PATIENCE, waiter)
        .await
        .unwrap()
        .unwrap();
    let after = granted - killed;
    println!("served {after:?} after the holder was killed (lease {KEPT_LEASE:?})");
    assert!(
        after <= KEPT_LEASE + Duration::from_millis(500),
        "served after {after:?}"
    );
    hold.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_session_connection_is_reattached_and_kept_past_its_lease() {
    let server = Server::start();
    let lease = KEPT_LEASE;
    let session = Session::open_with(&client(&server), Options::default().lease(lease))
        .await
        .unwrap();
    let hold = session.lock("k").acquire(Wait::No).await.unwrap();
    let rw = session.rwlock("rw");
    let read = rw.read().acquire(Wait::No).await.unwrap();
    let mut con = server.client();
    let before = common::field(&lock_info(&mut con, "k"), "keepalive_client").expect("bound");
    let _: i64 = q(&mut con, &["CLIENT", "KILL", "ID", &before]);
    eventually("re-attached to a new session connection", || {
        common::field(&lock_info(&mut con, "k"), "keepalive_client").is_some_and(|id| id != before)
    })
    .await;
    eventually("the read hold re-attached too", || {
        let info = raw(&mut con, &["LOCK.INFO", "rw"]).unwrap();
        format!("{info:?}").contains("keepalive_clients")
    })
    .await;
    tokio::time::sleep(lease + Duration::from_millis(500)).await;
    assert_eq!(owner_of(&mut con, "k").as_deref(), Some(hold.owner()));
    assert!(!hold.is_lost() && !read.is_lost());
    hold.release().await.unwrap();
    read.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_release_fires_the_lost_watch() {
    let server = Server::start();
    let session = Session::open(&client(&server)).await.unwrap();
    let hold = session.lock("f").acquire(Wait::No).await.unwrap();
    let mut lost = hold.lost();
    let mut any = session.lost();
    let mut con = server.client();
    let t0 = Instant::now();
    let _: i64 = q(&mut con, &["LOCK.FORCERELEASE", "f"]);
    let got = tokio::time::timeout(common::PATIENCE, lost.wait_for(Option::is_some))
        .await
        .expect("lost in time")
        .unwrap()
        .clone()
        .unwrap();
    let delay = t0.elapsed();
    println!("LOCK.FORCERELEASE -> lost watch fired after {delay:?}");
    assert_eq!(got.reason, Reason::Forced);
    assert_eq!(got.owner, hold.owner());
    any.wait_for(Option::is_some).await.unwrap();
    assert!(matches!(hold.release().await, Err(Error::Lost(_))));
    assert_eq!(session.holds(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_acquire_leaves_no_waiter_and_no_hold() {
    let server = Server::start();
    let session = Arc::new(Session::open(&client(&server)).await.unwrap());
    let mut con = server.client();
    // A wait cancelled while the lock is held: the waiter leaves at once.
    let holder = session.lock("d").acquire(Wait::No).await.unwrap();
    let r = tokio::time::timeout(
        Duration::from_millis(100),
        session.lock("d").acquire(Wait::Forever),
    )
    .await;
    assert!(r.is_err(), "timed out");
    eventually("the waiter gone", || waiters_of(&mut con, "d") == 0).await;
    holder.release().await.unwrap();
    assert_eq!(owner_of(&mut con, "d"), None);
    // Cancels racing the grant: the holder releases as the waiter's future is dropped.
    for i in 0..30u64 {
        let holder = session.lock("d").acquire(Wait::No).await.unwrap();
        let s = session.clone();
        let waiting = tokio::spawn(async move { s.lock("d").acquire(Wait::Forever).await });
        eventually("queued", || waiters_of(&mut con, "d") == 1).await;
        let release = holder.release();
        tokio::time::sleep(Duration::from_micros(i * 37 % 400)).await;
        waiting.abort();
        release.await.unwrap();
        let _ = waiting.await;
        eventually("free: no hold left behind", || {
            owner_of(&mut con, "d").is_none() && waiters_of(&mut con, "d") == 0
        })
        .await;
    }
    assert_eq!(session.holds(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_multi_reentry_and_deadlock() {
    let server = Server::start();
    let session = Session::open(&client(&server)).await.unwrap();
    let mut con = server.client();
    let rw = session.rwlock("cfg");
    let r1 = rw.read().acquire(Wait::No).await.unwrap();
    let r2 = rw.read().acquire(Wait::No).await.unwrap();
    assert!(matches!(
        rw.write().acquire(Wait::No).await,
        Err(Error::Busy)
    ));
    // A writer queued keeps later readers out (FIFO); it is served when both read holds go.
    let w = rw.write();
    let writer = tokio::spawn(async move { w.acquire(Wait::For(Duration::from_secs(10))).await });
    eventually("writer queued", || waiters_of(&mut con, "cfg") == 1).await;
    assert!(matches!(
        rw.read().acquire(Wait::No).await,
        Err(Error::Busy)
    ));
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    let w = writer.await.unwrap().unwrap();
    w.release().await.unwrap();
    // Upgrade beside another reader: DEADLOCK.
    let a = rw.read().acquire(Wait::No).await.unwrap();
    let _b = rw.read().acquire(Wait::No).await.unwrap();
    let up = redis_lock_client::proto::Acquire {
        keys: &["cfg".to_string()],
        owner: a.owner(),
        kind: redis_lock_client::Kind::Write,
        lease: Duration::from_secs(5),
        wait: Wait::No,
        fence: false,
        binding: redis_lock_client::proto::Binding::None,
    };
    let e = raw(
        &mut con,
        &up.args().iter().map(String::as_str).collect::<Vec<_>>(),
    )
    .unwrap_err();
    assert!(matches!(Error::from(e), Error::Deadlock(_)));
    drop(a);
    // Multi-lock: all or none.
    let m = session
        .multi_lock(["{acct}1", "{acct}2"])
        .acquire(Wait::No)
        .await
        .unwrap();
    assert_eq!(m.tokens().len(), 2);
    assert!(matches!(
        session.lock("{acct}2").acquire(Wait::No).await,
        Err(Error::Busy)
    ));
    assert!(matches!(
        session
            .multi_lock(["{acct}2", "{acct}3"])
            .acquire(Wait::No)
            .await,
        Err(Error::Busy)
    ));
    assert_eq!(owner_of(&mut con, "{acct}3"), None);
    // Re-entry: the same owner, one more hold; the lock is free when both are released.
    let again = m.reenter().await.unwrap();
    assert_eq!(again.owner(), m.owner());
    m.release().await.unwrap();
    assert_eq!(
        owner_of(&mut con, "{acct}1").as_deref(),
        Some(again.owner())
    );
    again.release().await.unwrap();
    assert_eq!(owner_of(&mut con, "{acct}1"), None);
    // NotOwner: a hold released twice is told apart (here by a re-entry of a released one).
    let h = session.lock("x").acquire(Wait::No).await.unwrap();
    let h2 = h.reenter().await.unwrap();
    let _: i64 = q(&mut con, &["LOCK.RELEASE", "x", h.owner()]);
    let _: i64 = q(&mut con, &["LOCK.RELEASE", "x", h.owner()]);
    assert!(matches!(h2.release().await, Err(Error::NotOwner)));
    drop(h);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_holds_and_the_session_releases_them() {
    let server = Server::start();
    let mut con = server.client();
    let session = Session::open(&client(&server)).await.unwrap();
    let h = session.lock("a").acquire(Wait::No).await.unwrap();
    drop(h);
    eventually("a dropped hold released", || {
        owner_of(&mut con, "a").is_none()
    })
    .await;
    let _h1 = session.lock("b").acquire(Wait::No).await.unwrap();
    let _h2 = session.lock("c").acquire(Wait::No).await.unwrap();
    drop(session);
    eventually("a dropped session's holds released", || {
        owner_of(&mut con, "b").is_none() && owner_of(&mut con, "c").is_none()
    })
    .await;
    let session = Session::open(&client(&server)).await.unwrap();
    let _h = session.lock("e").acquire(Wait::No).await.unwrap();
    session.close().await;
    assert_eq!(owner_of(&mut con, "e"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_module_the_error_says_to_load_it() {
    let server = Config::default().without_module().start();
    let r = Session::open(&client(&server)).await;
    let Err(e) = r else { panic!("opened") };
    assert!(matches!(e, Error::ModuleNotLoaded(_)), "{e:?}");
    assert!(e.to_string().contains("--loadmodule"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_down_is_unavailable() {
    let port = common::free_port();
    let c = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let r = Session::open(&c).await;
    assert!(matches!(r, Err(Error::Unavailable(_))), "{:?}", r.err());
    let mut server = Server::start();
    let session = Session::open(&client(&server)).await.unwrap();
    let hold = session.lock("u").acquire(Wait::No).await.unwrap();
    server.kill();
    let r = session.lock("v").acquire(Wait::No).await;
    assert!(matches!(r, Err(Error::Unavailable(_))), "{:?}", r.err());
    let r = session
        .lock("v")
        .acquire(Wait::For(Duration::from_secs(1)))
        .await;
    assert!(matches!(r, Err(Error::Unavailable(_))), "{:?}", r.err());
    assert!(matches!(hold.release().await, Err(Error::Unavailable(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_down_longer_than_the_lease_loses_its_holds() {
    let mut server = Server::start();
    let lease = Duration::from_millis(1000);
    let session = Session::open_with(&client(&server), Options::default().lease(lease))
        .await
        .unwrap();
    let hold = session.lock("down").acquire(Wait::No).await.unwrap();
    let mut lost = hold.lost();
    let t0 = Instant::now();
    server.kill();
    let got = tokio::time::timeout(common::PATIENCE, lost.wait_for(Option::is_some))
        .await
        .expect("lost in time")
        .unwrap()
        .clone()
        .unwrap();
    assert_eq!(got.reason, Reason::SessionDown);
    assert!(
        t0.elapsed() >= lease,
        "not before the lease: {:?}",
        t0.elapsed()
    );
    assert_eq!(session.holds(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_closing_a_cycle_is_refused_and_the_other_served() {
    // Owner A holds x, owner B holds y; A waits for y (acquire_as); B asking for x would
    // close the cycle: Error::Deadlock at once, B keeps y, and A is served once B lets it go.
    let server = Server::start();
    let session = Session::open(&client(&server)).await.unwrap();
    let mut con = server.client();
    let a = session.lock("x").acquire(Wait::No).await.unwrap();
    let b = session.lock("y").acquire(Wait::No).await.unwrap();
    let (a_owner, b_owner) = (a.owner().to_string(), b.owner().to_string());
    let lock_y = session.lock("y");
    let a_waits = {
        let (lock_y, a) = (lock_y.clone(), a);
        tokio::spawn(async move {
            let r = lock_y
                .acquire_as(&a, Wait::For(Duration::from_secs(10)))
                .await;
            (r, a)
        })
    };
    eventually("A queued for y", || waiters_of(&mut con, "y") == 1).await;
    let r = session
        .lock("x")
        .acquire_as(&b, Wait::For(Duration::from_secs(10)))
        .await;
    let Err(Error::Deadlock(msg)) = r else {
        panic!("expected Error::Deadlock, got {r:?}");
    };
    for part in ["'x'", "'y'", a_owner.as_str(), b_owner.as_str()] {
        assert!(msg.contains(part), "{part} not in {msg}");
    }
    assert_eq!(waiters_of(&mut con, "x"), 0);
    assert_eq!(owner_of(&mut con, "y").as_deref(), Some(b_owner.as_str()));
    // The owner's own key again is a re-entry (Hold::reenter), not acquire_as.
    let again = session.lock("y").acquire_as(&b, Wait::No).await;
    assert!(matches!(again, Err(Error::Other(_))), "{again:?}");
    b.release().await.unwrap();
    let (r, a) = tokio::time::timeout(common::PATIENCE, a_waits)
        .await
        .unwrap()
        .unwrap();
    let ay = r.unwrap();
    assert_eq!(ay.owner(), a_owner);
    assert_eq!(owner_of(&mut con, "y").as_deref(), Some(a_owner.as_str()));
    ay.release().await.unwrap();
    assert_eq!(owner_of(&mut con, "x").as_deref(), Some(a_owner.as_str()));
    a.release().await.unwrap();
    assert_eq!(owner_of(&mut con, "x"), None);
    assert_eq!(owner_of(&mut con, "y"), None);
}
