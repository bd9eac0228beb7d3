//! The blocking face on a real server: threads excluding each other, waits, loss, drop.

#[path = "../../../tests/common/mod.rs"]
mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{lock_info, q, wait_until, Config, Server};
use redis_lock_client::blocking::Session;
use redis_lock_client::{Error, Reason, Wait};

fn owner_of(con: &mut redis::Connection, key: &str) -> Option<String> {
    common::field(&lock_info(con, key), "owner")
}

#[test]
fn threads_exclude_each_other() {
    let server = Server::start();
    let client = redis::Client::open(server.url()).unwrap();
    let session = Arc::new(Session::open(&client).unwrap());
    let inside = Arc::new(AtomicBool::new(false));
    let served = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let (session, inside, served) = (session.clone(), inside.clone(), served.clone());
            thread::spawn(move || {
                for _ in 0..50 {
                    let hold = session.lock("b").acquire(Wait::Forever).unwrap();
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                    thread::yield_now();
                    inside.store(false, Ordering::SeqCst);
                    served.fetch_add(1, Ordering::SeqCst);
                    hold.release().unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(served.load(Ordering::SeqCst), 400);
    assert_eq!(owner_of(&mut server.client(), "b"), None);
}

#[test]
fn waits_loss_and_drop() {
    let server = Server::start();
    let client = redis::Client::open(server.url()).unwrap();
    let session = Session::open(&client).unwrap();
    let mut con = server.client();
    let hold = session.lock("w").acquire(Wait::No).unwrap();
    let t0 = Instant::now();
    let r = session
        .lock("w")
        .acquire(Wait::For(Duration::from_millis(200)));
    assert!(matches!(r, Err(Error::Busy)), "{:?}", r.err());
    assert!(t0.elapsed() >= Duration::from_millis(190));
    assert_eq!(common::waiters(&mut con, "w"), 0);
    let again = hold.reenter().unwrap();
    assert_eq!(again.owner(), hold.owner());
    drop(again); // released before drop returns
    assert_eq!(owner_of(&mut con, "w").as_deref(), Some(hold.owner()));
    let _: i64 = q(&mut con, &["LOCK.FORCERELEASE", "w"]);
    let lost = hold.wait_lost(common::PATIENCE).expect("lost");
    assert_eq!(lost.reason, Reason::Forced);
    assert!(matches!(hold.release(), Err(Error::Lost(_))));
    let rw = session.rwlock("rw");
    let r1 = rw.read().acquire(Wait::No).unwrap();
    assert!(matches!(rw.write().acquire(Wait::No), Err(Error::Busy)));
    drop(r1);
    let w = rw.write().acquire(Wait::No).unwrap();
    let m = session.multi_lock(["m1", "m2"]).acquire(Wait::No).unwrap();
    assert_eq!(m.tokens().len(), 2);
    drop(session); // releases every hold
    assert_eq!(owner_of(&mut con, "m1"), None);
    wait_until("the write hold released", || {
        lock_info(&mut con, "rw").is_empty()
    });
    drop((w, m));
}

#[test]
fn errors_without_module_or_server() {
    let server = Config::default().without_module().start();
    let client = redis::Client::open(server.url()).unwrap();
    assert!(matches!(
        Session::open(&client),
        Err(Error::ModuleNotLoaded(_))
    ));
    let client =
        redis::Client::open(format!("redis://127.0.0.1:{}/", common::free_port())).unwrap();
    assert!(matches!(Session::open(&client), Err(Error::Unavailable(_))));
}

#[test]
fn an_election_from_threads() {
    let server = Server::start();
    let client = redis::Client::open(server.url()).unwrap();
    let session = Arc::new(Session::open(&client).unwrap());
    let mut con = server.client();
    let leader = session.election("e").value("a").campaign(Wait::No).unwrap();
    let next = thread::spawn({
        let session = session.clone();
        move || session.election("e").campaign(Wait::Forever).unwrap()
    });
    wait_until("the next candidate queued", || {
        common::waiters(&mut con, "e") == 1
    });
    let _: i64 = q(&mut con, &["LOCK.FORCERELEASE", "e"]);
    let lost = leader.wait_lost(common::PATIENCE).expect("lost");
    assert_eq!(lost.reason, Reason::Forced);
    let next = next.join().unwrap();
    assert!(next.term() > leader.term());
    let seen = session.election("e").leader().unwrap().unwrap();
    assert_eq!(seen.candidate.as_deref(), Some(next.candidate()));
    drop(next); // resigned before drop returns
    assert_eq!(session.election("e").leader().unwrap(), None);
    assert!(!leader.resign().unwrap());
}
