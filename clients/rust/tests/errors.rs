//! The error table on real servers (REDIS_SERVER, LOCK_MODULE): a refused password or
//! permission is `Error::Auth` (never `Unavailable`, never retried), a missing module says
//! to load it, and a lease below the server's floor is `Error::LeaseTooShort` before
//! anything is held.

#[path = "../../../tests/common/mod.rs"]
mod common;

use std::time::Duration;

use common::{lock_info, q, Config, Server};
use redis_lock_client::{Error, Options, Session, Wait};

fn client_as(server: &Server, userinfo: &str) -> redis::Client {
    redis::Client::open(format!("redis://{userinfo}@{}/", server.addr())).expect("client")
}

fn assert_auth<T>(r: Result<T, Error>, what: &str) {
    match r {
        Err(Error::Auth(_)) => {}
        Err(e) => panic!("{what}: expected Error::Auth, got {e:?}"),
        Ok(_) => panic!("{what}: expected Error::Auth, got Ok"),
    }
}

/// A server that asks for the password `secret` (set once it runs: the harness pings it
/// without one).
fn with_password() -> Server {
    let server = Server::start();
    q::<()>(
        &mut server.client(),
        &["CONFIG", "SET", "requirepass", "secret"],
    );
    server
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_or_missing_password_is_auth() {
    let server = with_password();
    assert_auth(
        Session::open(&client_as(&server, ":wrong")).await,
        "a wrong password",
    );
    assert_auth(
        Session::open(&client_as(&server, "nobody:secret")).await,
        "an unknown user",
    );
    let without = redis::Client::open(server.url()).unwrap();
    assert_auth(Session::open(&without).await, "no password (NOAUTH)");
    let session = Session::open(&client_as(&server, ":secret")).await.unwrap();
    let hold = session.lock("a").acquire(Wait::No).await.unwrap();
    hold.release().await.unwrap();
}

#[test]
fn a_wrong_password_is_auth_in_the_blocking_face() {
    let server = with_password();
    assert_auth(
        redis_lock_client::blocking::Session::open(client_as(&server, ":wrong")),
        "a wrong password",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_refusal_is_auth() {
    let server = Server::start();
    let mut admin = server.client();
    // May not open a session; may open one but not acquire.
    let _: String = q(
        &mut admin,
        &[
            "ACL",
            "SETUSER",
            "nosession",
            "on",
            ">pw",
            "~*",
            "&*",
            "+@all",
            "-lock.session",
        ],
    );
    let _: String = q(
        &mut admin,
        &[
            "ACL",
            "SETUSER",
            "noacquire",
            "on",
            ">pw",
            "~*",
            "&*",
            "+@all",
            "-lock.acquire",
        ],
    );
    assert_auth(
        Session::open(&client_as(&server, "nosession:pw")).await,
        "LOCK.SESSION refused",
    );
    let session = Session::open(&client_as(&server, "noacquire:pw"))
        .await
        .unwrap();
    assert_auth(
        session.lock("x").acquire(Wait::No).await,
        "LOCK.ACQUIRE refused",
    );
    // A refused wait is not a broken connection: no retry, nothing queued or held.
    assert_auth(
        session
            .lock("x")
            .acquire(Wait::For(Duration::from_secs(5)))
            .await,
        "LOCK.ACQUIRE BLOCK refused",
    );
    assert!(lock_info(&mut admin, "x").is_empty());
    assert_eq!(session.holds(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_module_the_error_says_to_load_it_not_to_upgrade() {
    let server = Config::default().without_module().start();
    let r = Session::open(&redis::Client::open(server.url()).unwrap()).await;
    let Err(e) = r else { panic!("opened") };
    assert!(matches!(e, Error::ModuleNotLoaded(_)), "{e:?}");
    let text = e.to_string();
    assert!(text.contains("not loaded"), "{text}");
    assert!(text.contains("--loadmodule /path/to/liblock.so"), "{text}");
    assert!(!text.contains("old"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_below_the_servers_floor_is_refused_in_its_words() {
    let server = Server::start();
    let floor = server.stat("keepalive_min_lease_ms") as u64;
    let short = Duration::from_millis(floor - 1);
    let client = redis::Client::open(server.url()).unwrap();
    let check = |e: Error, what: &str| {
        let Error::LeaseTooShort {
            lease_ms,
            min_lease_ms,
        } = e
        else {
            panic!("{what}: expected Error::LeaseTooShort, got {e:?}");
        };
        assert_eq!((lease_ms, min_lease_ms), (floor - 1, floor), "{what}");
        let text = e.to_string();
        assert!(
            text.contains(&format!("lease {} ms", floor - 1)) && text.contains("minimum"),
            "{what}: {text}"
        );
        assert!(!text.contains("KEEPALIVE"), "{what}: {text}");
    };
    // The session's lease: refused when it opens.
    let r = Session::open_with(&client, Options::default().lease(short)).await;
    check(r.err().expect("refused"), "a session");
    let blocking = {
        let client = client.clone();
        tokio::task::spawn_blocking(move || {
            redis_lock_client::blocking::Session::open_with(
                &client,
                Options::default().lease(short),
            )
            .err()
        })
    };
    check(
        blocking.await.unwrap().expect("refused"),
        "a blocking session",
    );
    let mut con = server.client();
    let sessions = || -> usize {
        let list: String = q(&mut server.client(), &["CLIENT", "LIST"]);
        list.lines()
            .filter(|l| l.contains("name=lock-session:"))
            .count()
    };
    common::wait_until("no session connection left", || sessions() == 0);
    // A lock's, a semaphore's, an election's: refused at the acquire, nothing sent.
    let session = Session::open(&client).await.unwrap();
    let r = session.lock("l").lease(short).acquire(Wait::No).await;
    check(r.expect_err("refused"), "a lock");
    let r = session
        .lock("l")
        .lease(Duration::ZERO)
        .acquire(Wait::For(Duration::from_secs(1)))
        .await;
    assert!(
        matches!(r, Err(Error::LeaseTooShort { lease_ms: 0, .. })),
        "{r:?}"
    );
    assert!(lock_info(&mut con, "l").is_empty());
    let sem = session.semaphore("s");
    sem.init(1).await.unwrap();
    let r = sem.clone().lease(short).acquire(Wait::No).await;
    check(r.expect_err("refused"), "a semaphore");
    assert_eq!(sem.available().await.unwrap(), 1);
    let r = session.election("e").lease(short).campaign(Wait::No).await;
    check(r.expect_err("refused"), "an election");
    // The floor itself is a lease the server keeps.
    let hold = session
        .lock("l")
        .lease(Duration::from_millis(floor))
        .acquire(Wait::No)
        .await
        .unwrap();
    hold.release().await.unwrap();
    assert_eq!(session.holds(), 0);
}
