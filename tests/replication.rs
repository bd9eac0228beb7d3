//! Replication: the module's effects reach replicas (with or without the
//! module) and the AOF as native commands, replicas refuse lock writes, and
//! failover in either direction leaves a working server.

use crate::common;
use common::dataset::aof_matches;
use common::*;

use std::fs;
use std::path::{Path, PathBuf};

/// A master that starts a full sync at once instead of after the default
/// 5 s diskless-sync delay.
fn master_config() -> Config {
    Config::default().arg("repl-diskless-sync-delay", "0")
}

fn digest(server: &Server) -> String {
    q(&mut server.client(), &["DEBUG", "DIGEST"])
}

fn digest_value(server: &Server, key: &str) -> Vec<String> {
    q(&mut server.client(), &["DEBUG", "DIGEST-VALUE", key])
}

/// Waits until `n` replicas acknowledged everything the master wrote, from
/// any client or timer. WAIT only covers the offset of the calling client's
/// own last propagated command, so a fresh connection first propagates a
/// PUBLISH (no data change) to bring its offset to the master's current one.
fn sync_replicas(master: &Server, n: i64) {
    let mut con = master.client();
    let _: i64 = q(&mut con, &["PUBLISH", "test-sync-marker", "x"]);
    let acked: i64 = q(&mut con, &["WAIT", &n.to_string(), "5000"]);
    assert_eq!(acked, n, "replicas acknowledging the master's writes");
}

/// Lines that show the module or the server went wrong.
fn assert_clean_log(server: &Server) {
    let log = server.log();
    for bad in ["internal error caught", "ASSERTION", "crashed", "panicked"] {
        assert!(
            !log.contains(bad),
            "server {} log contains {bad:?}:\n{log}",
            server.port
        );
    }
}

/// `o1` takes `key`, `o2` queues for it, `o1` releases: `o2` is handed it.
fn hand_off_by_release(master: &Server, con: &mut Connection, key: &str) {
    assert_eq!(
        q::<i64>(con, &["LOCK.ACQUIRE", key, "o1", "PX", "60000"]),
        1
    );
    let wait = ["PX", "60000", "BLOCK", "0"];
    let mut w: Connection = queue_waiter(master, con, key, "o2", &wait, 1);
    assert_eq!(q::<i64>(con, &["LOCK.RELEASE", key, "o1"]), 0);
    assert_eq!(recv(&mut w).unwrap(), Value::Int(1));
}

#[test]
fn replicas_with_and_without_module_end_identical() {
    let master = master_config().start();
    let with_module = master.start_replica(Config::default());
    let without_module = master.start_replica(Config::default().without_module());
    let mut con = master.client();

    // Acquire, re-entry, partial and full release, then a new owner.
    assert_eq!(
        q::<i64>(&mut con, &["LOCK.ACQUIRE", "a", "o1", "PX", "60000"]),
        1
    );
    assert_eq!(
        q::<i64>(&mut con, &["LOCK.ACQUIRE", "a", "o1", "PX", "60000"]),
        2
    );
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "a", "o1"]), 1);
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "a", "o1"]), 0);
    assert_eq!(
        q::<i64>(&mut con, &["LOCK.ACQUIRE", "a", "o2", "PX", "60000"]),
        1
    );
    // Renew.
    assert_eq!(
        q::<i64>(&mut con, &["LOCK.RENEW", "a", "o2", "PX", "90000"]),
        90000
    );

    // Re-entered lock kept at 3 holds.
    for n in 1..=3 {
        assert_eq!(
            q::<i64>(&mut con, &["LOCK.ACQUIRE", "r", "o1", "EX", "70"]),
            n
        );
    }

    // Fencing tokens.
    let before = token_floor(&mut con);
    let f1: i64 = q(
        &mut con,
        &["LOCK.ACQUIRE", "f", "o1", "PX", "60000", "FENCE"],
    );
    assert_token_between(f1, before, token_floor(&mut con), 0, "f");
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "f", "o1"]), 0);
    let f2: i64 = q(
        &mut con,
        &["LOCK.ACQUIRE", "f", "o2", "PX", "60000", "FENCE"],
    );
    assert!(f2 > f1, "f: token {f2} after {f1}");

    // Force release, of a held and of a free lock.
    assert_eq!(
        q::<i64>(&mut con, &["LOCK.ACQUIRE", "x", "o1", "PX", "60000"]),
        1
    );
    assert_eq!(q::<i64>(&mut con, &["LOCK.FORCERELEASE", "x"]), 1);
    assert_eq!(q::<i64>(&mut con, &["LOCK.FORCERELEASE", "x"]), 0);

    // A waiter handed the lock by a release.
    hand_off_by_release(&master, &mut con, "h");

    // A fenced waiter handed the lock by lease expiry: it queues behind a
    // long lease, which is then shortened, so it is queued before expiry.
    let before = token_floor(&mut con);
    let e1: i64 = q(
        &mut con,
        &["LOCK.ACQUIRE", "e", "o1", "PX", "60000", "FENCE"],
    );
    assert_token_between(e1, before, token_floor(&mut con), 0, "e");
    let mut w = queue_waiter(
        &master,
        &mut con,
        "e",
        "o2",
        &["PX", "60000", "BLOCK", "0", "FENCE"],
        1,
    );
    assert_eq!(
        q::<i64>(&mut con, &["LOCK.RENEW", "e", "o1", "PX", "150"]),
        150
    );
    let e2 = match recv(&mut w).unwrap() {
        Value::Int(token) => token,
        other => panic!("fenced waiter of e replied {other:?}"),
    };
    assert!(e2 > e1, "e: token {e2} after {e1}");
    assert_eq!(lock_field(&mut con, "e", "owner").as_deref(), Some("o2"));
    // Handed over by the lease timer or by the server's expiry event.
    assert_eq!(master.stat("handed_off"), 2);

    // A waiter handed the lock after a DEL.
    assert_eq!(
        q::<i64>(&mut con, &["LOCK.ACQUIRE", "d", "o1", "PX", "60000"]),
        1
    );
    let mut w = queue_waiter(
        &master,
        &mut con,
        "d",
        "o2",
        &["PX", "60000", "BLOCK", "0"],
        1,
    );
    assert_eq!(q::<i64>(&mut con, &["DEL", "d"]), 1);
    assert_eq!(recv(&mut w).unwrap(), Value::Int(1));
    assert_eq!(lock_field(&mut con, "d", "owner").as_deref(), Some("o2"));

    // A lost grant: waiter 1 is handed the lock and killed in the same
    // transaction; the module releases its grant and hands to waiter 2.
    assert_eq!(
        q::<i64>(&mut con, &["LOCK.ACQUIRE", "g", "holder", "PX", "60000"]),
        1
    );
    let mut w1 = master.client();
    let w1_id = client_id(&mut w1);
    send(
        &mut w1,
        &["LOCK.ACQUIRE", "g", "w1", "PX", "60000", "BLOCK", "0"],
    );
    wait_for_waiters(&mut con, "g", 1);
    let mut w2 = queue_waiter(
        &master,
        &mut con,
        "g",
        "w2",
        &["PX", "60000", "BLOCK", "0"],
        2,
    );
    let lost_before = master.stat("lost_grants_released");
    let _: () = q(&mut con, &["MULTI"]);
    raw(&mut con, &["LOCK.RELEASE", "g", "holder"]).unwrap();
    raw(&mut con, &["CLIENT", "KILL", "ID", &w1_id.to_string()]).unwrap();
    let exec = raw(&mut con, &["EXEC"]).unwrap();
    assert_eq!(
        exec,
        Value::Array(vec![Value::Int(0), Value::Int(1)]),
        "EXEC of release + kill"
    );
    assert_eq!(recv(&mut w2).unwrap(), Value::Int(1));
    assert_eq!(lock_field(&mut con, "g", "owner").as_deref(), Some("w2"));
    assert_eq!(master.stat("lost_grants_released"), lost_before + 1);

    sync_replicas(&master, 2);
    let all = [&master, &with_module, &without_module];
    let expected = digest(&master);
    assert_ne!(expected, "0".repeat(40), "master holds data");
    for server in &all[1..] {
        assert_eq!(digest(server), expected, "DEBUG DIGEST of {}", server.port);
    }
    let lock_keys = ["a", "r", "f", "h", "e", "d", "g"];
    let token_keys = ["redisson_lock_token:{f}", "redisson_lock_token:{e}"];
    for key in lock_keys.iter().chain(&token_keys) {
        let value = digest_value(&master, key);
        for server in &all[1..] {
            assert_eq!(
                digest_value(server, key),
                value,
                "DIGEST-VALUE {key} on {}",
                server.port
            );
        }
    }
    for key in lock_keys {
        let at = pexpiretime(&mut master.client(), key);
        assert!(at > now_ms(), "{key} has a lease in the future: {at}");
        for server in &all[1..] {
            assert_eq!(
                pexpiretime(&mut server.client(), key),
                at,
                "PEXPIRETIME {key} on {}",
                server.port
            );
        }
    }
    for key in ["x", "w1"] {
        assert_eq!(q::<i64>(&mut with_module.client(), &["EXISTS", key]), 0);
    }
    for (key, want) in token_keys.into_iter().zip([f2, e2]) {
        // The token key's TTL (at least lock.token-ttl-ms, an hour, from
        // its last token; longer than the leases) is the same everywhere.
        let at = pexpiretime(&mut master.client(), key);
        let now = now_ms();
        assert!(
            at > now + 60_000 && at <= now + 3_600_000,
            "{key} kept about an hour: {at} at {now}"
        );
        for server in all {
            let token: i64 = q(&mut server.client(), &["GET", key]);
            assert_eq!(token, want, "{key} on {}", server.port);
            assert_eq!(
                pexpiretime(&mut server.client(), key),
                at,
                "PEXPIRETIME {key} on {}",
                server.port
            );
        }
    }
    let mut rcon = with_module.client();
    assert_eq!(lock_field(&mut rcon, "r", "holds").as_deref(), Some("3"));
    assert_eq!(lock_field(&mut rcon, "g", "owner").as_deref(), Some("w2"));
    for server in all {
        assert_clean_log(server);
    }
}

/// Parses an AOF (RESP arrays of bulk strings, `#` annotation lines).
fn parse_aof(bytes: &[u8]) -> Vec<Vec<String>> {
    fn line<'a>(bytes: &'a [u8], pos: &mut usize) -> &'a [u8] {
        let start = *pos;
        let end = start
            + bytes[start..]
                .windows(2)
                .position(|w| w == b"\r\n")
                .expect("AOF line ends with CRLF");
        *pos = end + 2;
        &bytes[start..end]
    }
    fn number(s: &[u8]) -> usize {
        std::str::from_utf8(s).unwrap().parse().unwrap()
    }
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < bytes.len() {
        let header = line(bytes, &mut pos);
        match header.first() {
            Some(b'#') => continue,
            Some(b'*') => {}
            _ => panic!("unexpected AOF line {:?}", String::from_utf8_lossy(header)),
        }
        let n = number(&header[1..]);
        let mut args = Vec::with_capacity(n);
        for _ in 0..n {
            let len_line = line(bytes, &mut pos);
            assert_eq!(len_line[0], b'$');
            let len = number(&len_line[1..]);
            args.push(String::from_utf8_lossy(&bytes[pos..pos + len]).into_owned());
            pos += len + 2;
        }
        out.push(args);
    }
    out
}

fn aof_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let aof_dir = dir.join("appendonlydir");
    if let Ok(entries) = fs::read_dir(&aof_dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if name.ends_with(".aof") && !name.ends_with(".manifest") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

fn aof_commands(server: &Server) -> Vec<Vec<String>> {
    aof_files(&server.dir)
        .iter()
        .filter(|p| p.to_string_lossy().ends_with(".incr.aof"))
        .flat_map(|p| parse_aof(&fs::read(p).expect("read AOF")))
        .collect()
}

/// The commands between each MULTI and its EXEC, without SELECT: where a
/// transaction needs one, Redis 7.2 and later write it inside, 7.0 before.
fn transactions(commands: &[Vec<String>]) -> Vec<Vec<Vec<String>>> {
    let mut out = Vec::new();
    let mut current: Option<Vec<Vec<String>>> = None;
    for cmd in commands {
        match cmd[0].to_ascii_uppercase().as_str() {
            "MULTI" => current = Some(Vec::new()),
            "EXEC" => out.push(current.take().expect("EXEC after MULTI")),
            "SELECT" => {}
            _ => {
                if let Some(tx) = current.as_mut() {
                    tx.push(cmd.clone());
                }
            }
        }
    }
    out
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

#[test]
fn aof_holds_handoff_as_one_native_transaction() {
    let master = Config::default().aof().start();
    let mut con = master.client();
    hand_off_by_release(&master, &mut con, "k");
    let at = pexpiretime(&mut master.client(), "k");
    // Rewritten in place: the key never disappears.
    let handoff = vec![
        strings(&["HSET", "k", "o2", "1"]),
        strings(&["HDEL", "k", "o1"]),
        strings(&["PEXPIREAT", "k", &at.to_string()]),
    ];
    let mut commands = Vec::new();
    wait_until("hand-off in the AOF", || {
        commands = aof_commands(&master);
        transactions(&commands).contains(&handoff)
    });
    // The first acquire is one transaction too.
    let first = transactions(&commands)[0].clone();
    assert_eq!(first.len(), 2, "first acquire: {first:?}");
    assert_eq!(first[0], strings(&["HSET", "k", "o1", "1"]));
    assert_eq!(first[1][0], "PEXPIREAT");
    for file in aof_files(&master.dir) {
        let text = String::from_utf8_lossy(&fs::read(&file).unwrap()).to_ascii_uppercase();
        assert!(
            !text.contains("LOCK."),
            "{} mentions a LOCK. command",
            file.display()
        );
    }
    for cmd in &commands {
        assert!(
            !cmd[0].to_ascii_uppercase().starts_with("LOCK."),
            "AOF holds {cmd:?}"
        );
    }
}

#[test]
fn replica_refuses_lock_writes_and_reports_info() {
    let master = master_config().start();
    let replica = master.start_replica(Config::default());
    let mut con = master.client();
    assert_eq!(
        q::<i64>(&mut con, &["LOCK.ACQUIRE", "k", "o1", "PX", "60000"]),
        1
    );
    assert_eq!(
        q::<i64>(&mut con, &["LOCK.ACQUIRE", "k", "o1", "PX", "60000"]),
        2
    );
    let _w: Connection = queue_waiter(&master, &mut con, "k", "o2", &["BLOCK", "0"], 1);
    sync_replicas(&master, 1);

    let mut rcon = replica.client();
    let refused: [&[&str]; 6] = [
        &["LOCK.ACQUIRE", "k", "o1"],
        &["LOCK.ACQUIRE", "free", "o1"],
        &["LOCK.ACQUIRE", "k", "o3", "BLOCK", "0"],
        &["LOCK.RELEASE", "k", "o1"],
        &["LOCK.RENEW", "k", "o1", "PX", "1000"],
        &["LOCK.FORCERELEASE", "k"],
    ];
    for args in refused {
        let e = err(&mut rcon, args);
        assert!(e.starts_with("READONLY"), "{args:?} on a replica: {e}");
    }
    let info = lock_info(&mut rcon, "k");
    let names: Vec<&str> = info.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(names, ["owner", "holds", "ttl", "waiters"]);
    assert_eq!(field(&info, "owner").as_deref(), Some("o1"));
    assert_eq!(field(&info, "holds").as_deref(), Some("2"));
    assert_eq!(field(&info, "waiters").as_deref(), Some("0"));
    let ttl: i64 = field(&info, "ttl").expect("ttl").parse().unwrap();
    assert!(ttl > 0 && ttl <= 60000, "ttl {ttl}");
    assert_eq!(lock_info(&mut rcon, "free"), Vec::new());
    // Nothing changed anywhere.
    assert_eq!(lock_field(&mut con, "k", "holds").as_deref(), Some("2"));
    assert_eq!(waiters(&mut con, "k"), 1);
    sync_replicas(&master, 1);
    assert_eq!(digest(&replica), digest(&master));
}

#[test]
fn promoted_replica_serves_replicated_locks() {
    let master = master_config().start();
    let replica = master.start_replica(Config::default());
    let mut con = master.client();
    assert_eq!(
        q::<i64>(&mut con, &["LOCK.ACQUIRE", "k", "o1", "PX", "60000"]),
        1
    );
    // A counter ahead of the clock goes on by exactly one: a promoted
    // replica without it would start again from its clock, far below.
    let ahead: i64 = 9_000_000_000_000_000;
    let _: () = q(
        &mut con,
        &["SET", "redisson_lock_token:{k2}", &ahead.to_string()],
    );
    assert_eq!(
        q::<i64>(
            &mut con,
            &["LOCK.ACQUIRE", "k2", "o1", "PX", "60000", "FENCE"]
        ),
        ahead + 1
    );
    sync_replicas(&master, 1);

    let mut rcon = replica.client();
    let _: () = q(&mut rcon, &["REPLICAOF", "NO", "ONE"]);
    wait_until("replica promoted", || {
        replica.info_field("replication", "role").as_deref() == Some("master")
    });

    // The owner releases the replicated lock.
    assert_eq!(q::<i64>(&mut rcon, &["LOCK.RELEASE", "k", "o1"]), 0);
    assert_eq!(q::<i64>(&mut rcon, &["EXISTS", "k"]), 0);
    // A new waiter is handed the replicated lock; its token continues.
    let mut w = queue_waiter(
        &replica,
        &mut rcon,
        "k2",
        "o2",
        &["PX", "60000", "BLOCK", "0", "FENCE"],
        1,
    );
    let e = err(&mut rcon, &["LOCK.RELEASE", "k2", "o2"]);
    assert!(e.starts_with("NOTOWNER"), "{e}");
    assert_eq!(q::<i64>(&mut rcon, &["LOCK.RELEASE", "k2", "o1"]), 0);
    assert_eq!(recv(&mut w).unwrap(), Value::Int(ahead + 2));
    let info = lock_info(&mut rcon, "k2");
    assert_eq!(field(&info, "owner").as_deref(), Some("o2"));
    assert_eq!(field(&info, "token"), Some((ahead + 2).to_string()));
    assert_clean_log(&replica);
}

#[test]
fn demoted_master_answers_its_waiters_and_stays_healthy() {
    let a = Server::start();
    let b = master_config().start();
    let mut con = a.client();
    assert_eq!(
        q::<i64>(&mut con, &["LOCK.ACQUIRE", "k", "o1", "PX", "60000"]),
        1
    );
    let mut w = queue_waiter(&a, &mut con, "k", "o2", &["BLOCK", "0"], 1);
    // Valkey 9 (not 8.0) leaves module-blocked clients that announced
    // CLIENT CAPA redirect blocked on a demotion: the module answers them.
    // Elsewhere CLIENT CAPA is refused and they are plain waiters again.
    let mut redirectable = Vec::new();
    for args in [
        &["LOCK.ACQUIRE", "k", "o3", "BLOCK", "0"][..],
        &["LOCK.MACQUIRE", "2", "k2", "k", "o4", "BLOCK", "0"],
    ] {
        let mut c = a.client();
        let _ = raw(&mut c, &["CLIENT", "CAPA", "redirect"]);
        send(&mut c, args);
        redirectable.push(c);
        wait_for_waiters(&mut con, "k", 1 + redirectable.len() as i64);
    }
    // A place in each queue: the multi-lock caller has two.
    assert_eq!(a.stat("waiters"), 4);

    let _: () = q(&mut con, &["REPLICAOF", "127.0.0.1", &b.port.to_string()]);
    for w in std::iter::once(&mut w).chain(&mut redirectable) {
        let e = recv_error(w);
        assert!(e.starts_with("UNBLOCKED "), "waiter answered {e}");
    }
    wait_until("demoted node in sync", || {
        a.info_field("replication", "master_link_status").as_deref() == Some("up")
    });
    let mut con = a.client();
    assert_eq!(q::<String>(&mut con, &["PING"]), "PONG");
    assert_eq!(a.stat("waiters"), 0);
    assert_eq!(a.stat("locks_with_waiters"), 0);
    // It now mirrors b, which has no lock.
    assert_eq!(lock_info(&mut con, "k"), Vec::new());
    // b's new locks replicate to it.
    assert_eq!(
        q::<i64>(&mut b.client(), &["LOCK.ACQUIRE", "k", "o3", "PX", "60000"]),
        1
    );
    sync_replicas(&b, 1);
    assert_eq!(lock_field(&mut con, "k", "owner").as_deref(), Some("o3"));
    assert_eq!(digest(&a), digest(&b));
    assert_clean_log(&a);
}

#[test]
fn replica_timers_do_nothing_expiry_comes_from_master() {
    let master = master_config().start();
    let with_module = master.start_replica(Config::default());
    let without_module = master.start_replica(Config::default().without_module());
    let mut con = master.client();
    // The master expires keys only when they are touched: until then a
    // replica keeps the logically expired lock, whatever its module does.
    let _: () = q(&mut con, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]);

    assert_eq!(
        q::<i64>(&mut con, &["LOCK.ACQUIRE", "idle", "o1", "PX", "100"]),
        1
    );
    // A lock with a waiter: the master's lease timer hands it over.
    assert_eq!(
        q::<i64>(&mut con, &["LOCK.ACQUIRE", "busy", "o1", "PX", "60000"]),
        1
    );
    let mut w = queue_waiter(
        &master,
        &mut con,
        "busy",
        "o2",
        &["PX", "60000", "BLOCK", "0"],
        1,
    );
    assert_eq!(
        q::<i64>(&mut con, &["LOCK.RENEW", "busy", "o1", "PX", "100"]),
        100
    );
    assert_eq!(recv(&mut w).unwrap(), Value::Int(1));
    sync_replicas(&master, 2);

    let mut rcon = with_module.client();
    let idle_deadline = pexpiretime(&mut with_module.client(), "idle");
    wait_until("idle lease over on the replica", || {
        now_ms() > idle_deadline + 5 && q::<i64>(&mut rcon, &["EXISTS", "idle"]) == 0
    });
    // Logically expired, but still stored: the replica did not delete it.
    assert_eq!(q::<i64>(&mut rcon, &["DBSIZE"]), 2);
    assert_eq!(lock_info(&mut rcon, "idle"), Vec::new());
    assert_eq!(
        lock_field(&mut rcon, "busy", "owner").as_deref(),
        Some("o2")
    );
    sync_replicas(&master, 2);
    assert_eq!(digest(&with_module), digest(&master));
    assert_eq!(digest(&without_module), digest(&master));

    // The master's expiry (on access) sends the DEL.
    assert_eq!(q::<i64>(&mut con, &["EXISTS", "idle"]), 0);
    sync_replicas(&master, 2);
    for replica in [&with_module, &without_module] {
        assert_eq!(q::<i64>(&mut replica.client(), &["DBSIZE"]), 1);
    }
    assert_eq!(digest(&with_module), digest(&master));
    assert_eq!(digest(&without_module), digest(&master));
    assert_clean_log(&with_module);
    assert_clean_log(&master);
}

#[test]
fn release_message_reaches_subscribers_on_replicas() {
    // Redisson clients may subscribe on replicas; a standalone master sends
    // PUBLISH down the replication stream, and so does the module.
    let master = master_config().start();
    let replica = master.start_replica(Config::default().without_module());
    let mut sub = replica.client();
    let channel = "redisson_lock__channel:{k}";
    send(&mut sub, &["SUBSCRIBE", channel]);
    assert_eq!(
        recv(&mut sub).unwrap(),
        Value::Array(vec![
            Value::BulkString(b"subscribe".to_vec()),
            Value::BulkString(channel.into()),
            Value::Int(1)
        ])
    );
    let mut con = master.client();
    assert_eq!(q::<i64>(&mut con, &["LOCK.ACQUIRE", "k", "o1"]), 1);
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "k", "o1"]), 0);
    assert_eq!(
        recv(&mut sub).unwrap(),
        Value::Array(vec![
            Value::BulkString(b"message".to_vec()),
            Value::BulkString(channel.into()),
            Value::BulkString(b"0".to_vec())
        ])
    );
    sync_replicas(&master, 1);
    assert_eq!(digest(&master), digest(&replica));
}

#[test]
fn a_replica_that_accepts_writes_still_refuses_lock_writes() {
    let master = master_config().start();
    let replica = master.start_replica(Config::default().arg("replica-read-only", "no"));
    let mut rcon = replica.client();
    let _: () = q(&mut rcon, &["SET", "plain", "writes work here"]);
    for args in [
        &["LOCK.ACQUIRE", "k", "o1", "BLOCK", "0"][..],
        &["LOCK.RELEASE", "k", "o1"],
        &["LOCK.RENEW", "k", "o1"],
        &["LOCK.FORCERELEASE", "k"],
    ] {
        assert_eq!(
            err(&mut rcon, args),
            "READONLY lock commands cannot run on a replica",
            "{args:?}"
        );
    }
    assert_eq!(waiters(&mut rcon, "k"), 0);
    assert!(!exists(&mut rcon, "k"));
}

#[test]
fn token_key_with_a_ttl_keeps_it_on_master_and_replicas() {
    // The token write is `SET key <token> PXAT <at>` (no longer an INCR
    // that kept the TTL): `at` is the key's TTL if longer, else an hour
    // (lock.token-ttl-ms) from now, and the replica and the AOF get the
    // same absolute `at`. Counters set ahead of the clock, so that the
    // tokens are exact (one more).
    let master = master_config().aof().start();
    let replica = master.start_replica(Config::default().without_module());
    let mut con = master.client();
    let ahead: i64 = 9_000_000_000_000_000;
    // k's token key has two hours left: kept. k2's has ten minutes: an hour.
    for (key, px) in [("k", "7200000"), ("k2", "600000")] {
        let token_key = format!("redisson_lock_token:{{{key}}}");
        let _: () = q(&mut con, &["SET", &token_key, &ahead.to_string(), "PX", px]);
        let set_at = pexpiretime(&mut con, &token_key);
        let floor = now_ms() + 3_600_000;
        assert_eq!(
            q::<i64>(&mut con, &["LOCK.ACQUIRE", key, "o1", "FENCE"]),
            ahead + 1
        );
        let at = pexpiretime(&mut con, &token_key);
        if key == "k" {
            assert_eq!(at, set_at, "{token_key}: the longer TTL kept");
        } else {
            assert!(
                at >= floor && at <= now_ms() + 3_600_000,
                "{token_key}: an hour from the grant: {at}"
            );
        }
        sync_replicas(&master, 1);
        let mut on_replica = replica.client();
        assert_eq!(pexpiretime(&mut on_replica, &token_key), at);
        assert_eq!(q::<i64>(&mut on_replica, &["GET", &token_key]), ahead + 1);
        // The AOF holds the same write, as this exact native command.
        let want = strings(&[
            "SET",
            &token_key,
            &(ahead + 1).to_string(),
            "PXAT",
            &at.to_string(),
        ]);
        let mut commands = Vec::new();
        wait_until("the token write in the AOF", || {
            commands = aof_commands(&master);
            commands.contains(&want)
        });
        let fenced = transactions(&commands)
            .into_iter()
            .find(|tx| tx.contains(&want))
            .unwrap_or_else(|| panic!("{want:?} outside a transaction: {commands:?}"));
        assert_eq!(fenced.len(), 3, "the fenced acquire: {fenced:?}");
        assert_eq!(fenced[0], strings(&["HSET", key, "o1", "1"]));
        assert_eq!(fenced[1][..2], strings(&["PEXPIREAT", key]));
        assert!(
            !commands.iter().any(|c| c[0].eq_ignore_ascii_case("INCR")),
            "an INCR in the AOF: {commands:?}"
        );
    }
    assert_eq!(digest(&master), digest(&replica));
    // Reloaded from the AOF, the token keys come back with the same TTLs.
    for key in ["k", "k2"] {
        assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", key, "o1"]), 0);
    }
    assert_eq!(aof_matches(&master), Ok(()));
}

/// Lock writes on a master with no AOF and no replica are not built as
/// replicated commands (nothing would receive them). A replica that
/// attaches later, including one whose sync starts while lock commands run,
/// must still end identical, and never see a LOCK.* command.
#[test]
fn replica_attached_later_ends_identical() {
    // The full sync waits 1 s after the replica connects: commands run in
    // that window, before the fork that starts the snapshot.
    let master = Config::default()
        .arg("repl-diskless-sync-delay", "1")
        .start();
    let mut con = master.client();
    let lock = |con: &mut Connection, key: &str, owner: &str| -> i64 {
        q(con, &["LOCK.ACQUIRE", key, owner, "PX", "60000"])
    };
    assert_eq!(lock(&mut con, "before", "o1"), 1);
    assert_eq!(lock(&mut con, "before", "o1"), 2);
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "before", "o1"]), 1);
    let before = token_floor(&mut con);
    let fenced: i64 = q(&mut con, &["LOCK.ACQUIRE", "f", "o1", "FENCE"]);
    assert_token_between(fenced, before, token_floor(&mut con), 0, "f");

    let replica = Config::default()
        .without_module()
        .arg("replicaof", &format!("127.0.0.1 {}", master.port))
        .start();
    wait_until("replica connected, sync not started", || {
        master
            .info_field("replication", "connected_slaves")
            .as_deref()
            == Some("1")
    });
    assert_eq!(lock(&mut con, "window", "o2"), 1);
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "f", "o1"]), 0);
    assert_eq!(lock(&mut con, "f", "o3"), 1);
    wait_until("replica link up", || {
        replica
            .info_field("replication", "master_link_status")
            .as_deref()
            == Some("up")
    });

    assert_eq!(lock(&mut con, "after", "o4"), 1);
    hand_off_by_release(&master, &mut con, "handed");
    let before = token_floor(&mut con);
    let fenced: i64 = q(&mut con, &["LOCK.ACQUIRE", "f2", "o1", "FENCE"]);
    assert_token_between(fenced, before, token_floor(&mut con), 0, "f2");
    sync_replicas(&master, 1);

    assert_eq!(digest(&replica), digest(&master));
    for key in [
        "before",
        "window",
        "f",
        "after",
        "handed",
        "f2",
        "redisson_lock_token:{f}",
        "redisson_lock_token:{f2}",
    ] {
        assert_eq!(
            digest_value(&replica, key),
            digest_value(&master, key),
            "{key}"
        );
    }
    assert_clean_log(&replica);
    assert!(
        !replica.log().contains("unknown command"),
        "replica got a LOCK.* command:\n{}",
        replica.log()
    );
}

/// Without replication, every lock write still counts towards the `save`
/// points, as the native commands would.
#[test]
fn unreplicated_lock_writes_count_for_save_points() {
    let master = Server::start();
    let mut con = master.client();
    let changes = |m: &Server| -> i64 {
        m.info_field("persistence", "rdb_changes_since_last_save")
            .and_then(|v| v.parse().ok())
            .expect("rdb_changes_since_last_save")
    };
    let before = changes(&master);
    assert_eq!(q::<i64>(&mut con, &["LOCK.ACQUIRE", "k", "o1"]), 1);
    let acquired = changes(&master);
    assert!(acquired > before, "{before} -> {acquired}");
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "k", "o1"]), 0);
    assert!(changes(&master) > acquired);
}

/// Redis's `DEBUG RELOAD` drops keys whose TTL has passed without sending
/// their DEL to replicas or the AOF (any key, not only locks). A lock taken
/// afresh under that name must not land downstream as a second field of
/// the stale hash.
#[test]
fn lock_taken_after_a_reload_dropped_its_expired_key_is_one_field_downstream() {
    let master = master_config().aof().start();
    let replica = master.start_replica(Config::default());
    let mut con = master.client();
    // The stale key stays until the reload drops it.
    let _: () = q(&mut con, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]);
    assert_eq!(
        q::<i64>(&mut con, &["LOCK.ACQUIRE", "k", "o1", "PX", "20"]),
        1
    );
    let deadline = pexpiretime(&mut con, "k");
    sync_replicas(&master, 1);
    wait_until("the lease is over", || now_ms() > deadline + 1);
    let _: () = q(&mut con, &["DEBUG", "RELOAD"]);
    assert_eq!(
        master
            .info_field("persistence", "rdb_last_load_keys_expired")
            .as_deref(),
        Some("1")
    );

    assert_eq!(
        q::<i64>(&mut con, &["LOCK.ACQUIRE", "k", "o2", "PX", "60000"]),
        1
    );
    sync_replicas(&master, 1);
    let one_field = vec![("o2".to_string(), "1".to_string())];
    assert_eq!(hgetall(&mut replica.client(), "k"), one_field);
    assert_eq!(digest(&master), digest(&replica));
    let _: () = q(&mut con, &["DEBUG", "LOADAOF"]);
    assert_eq!(hgetall(&mut con, "k"), one_field, "AOF replay");
    assert_clean_log(&master);
}

/// With fewer good replicas than `min-replicas-to-write`, Redis refuses
/// write commands; the module's timers hold back too: a lease that ends
/// hands the lock to no queued caller and a KEEPALIVE hold is not renewed
/// (a master cut off from its replicas is about to be replaced; its grants
/// would race the new master's). Once the replicas are enough again, the
/// queued caller is served. The setting is changed with CONFIG SET, which
/// the module follows.
#[test]
fn too_few_replicas_hold_back_hand_offs_and_renewals_until_they_return() {
    let master = master_config()
        .arg("min-replicas-to-write", "1")
        .arg("min-replicas-max-lag", "10")
        .start();
    let replica = master.start_replica(Config::default());
    wait_until("the replica counted as good", || {
        master.info_field("replication", "min_slaves_good_slaves") == Some("1".into())
    });
    let mut con = master.client();
    assert_eq!(acquire(&mut con, "k", "a", &["PX", "300"]), Value::Int(1));
    let mut kept = master.client();
    assert_eq!(
        acquire(&mut kept, "kept", "c", &["PX", "800", "KEEPALIVE"]),
        Value::Int(1)
    );
    let mut waiter: Connection = queue_waiter(
        &master,
        &mut con,
        "k",
        "b",
        &["PX", "60000", "BLOCK", "0"],
        1,
    );

    // One good replica, two needed: writes refused from now on.
    let _: () = q(&mut con, &["CONFIG", "SET", "min-replicas-to-write", "2"]);
    assert_eq!(
        err_code(&mut con, &["LOCK.ACQUIRE", "x", "o"]),
        "NOREPLICAS"
    );
    // The lease of "k" ends (Redis expires the key) and the KEEPALIVE hold
    // is not renewed, so it ends at its lease too.
    wait_until("k's lease over", || !exists(&mut con, "k"));
    wait_until("the KEEPALIVE hold not renewed", || {
        !exists(&mut con, "kept")
    });
    // The queued caller is not served while writes are refused: no event
    // says so, so it is looked at after a window in which the module
    // retries 25 times (every 20 ms).
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(!exists(&mut con, "k"), "k handed on while too few replicas");
    assert_eq!(master.stat("waiters"), 1);

    let _: () = q(&mut con, &["CONFIG", "SET", "min-replicas-to-write", "1"]);
    assert_eq!(recv(&mut waiter).unwrap(), Value::Int(1));
    sync_replicas(&master, 1);
    let mut on_replica = replica.client();
    assert_eq!(
        lock_field(&mut on_replica, "k", "owner").as_deref(),
        Some("b")
    );
    assert_clean_log(&master);
}
