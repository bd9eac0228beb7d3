//! `redis-lock status`, `top` and the waiting status line (in a terminal,
//! under tmux), and a run on a cluster node that does not own the key.

#[path = "../../tests/common/mod.rs"]
mod common;
mod util;

use std::fs;

use common::{field, lock_info, q, raw, send, wait_for_waiters, Cluster, Server, Value};
use util::{held_until, output, path, scratch, wait_file, Runner, Tmux, BIN};

/// LOCK.INFO as JSON, the way `status --json` should show it.
fn info_json(con: &mut redis::Connection, key: &str) -> serde_json::Value {
    fn conv(v: &Value, map: bool) -> serde_json::Value {
        match v {
            Value::Nil => serde_json::Value::Null,
            Value::Int(i) => serde_json::json!(i),
            Value::BulkString(b) => serde_json::json!(String::from_utf8_lossy(b)),
            Value::Array(items) if map => serde_json::Value::Object(
                items
                    .chunks(2)
                    .map(|kv| (common::text(&kv[0]), conv(&kv[1], true)))
                    .collect(),
            ),
            other => panic!("unexpected {other:?}"),
        }
    }
    conv(&raw(con, &["LOCK.INFO", key]).expect("LOCK.INFO"), true)
}

#[test]
fn status_json_matches_lock_info() {
    let s = Server::start();
    let mut con = s.client();
    q::<i64>(
        &mut con,
        &[
            "LOCK.ACQUIRE",
            "job",
            "holder",
            "PX",
            "60000",
            "FENCE",
            "KEEPALIVE",
        ],
    );
    // One caller queued on it.
    let mut waiter = s.client();
    send(
        &mut waiter,
        &["LOCK.ACQUIRE", "job", "queued", "PX", "5000", "BLOCK", "0"],
    );
    wait_for_waiters(&mut con, "job", 1);
    q::<i64>(&mut con, &["LOCK.RACQUIRE", "cfg", "r1", "PX", "60000"]);
    q::<i64>(&mut con, &["LOCK.RACQUIRE", "cfg", "r2", "PX", "60000"]);

    let out = output(&s, &["status", "--json", "job", "cfg", "free"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    for key in ["job", "cfg"] {
        let want = info_json(&mut con, key);
        let mut got = got[key].clone();
        let queue = got.as_object_mut().and_then(|o| o.remove("queue"));
        let queue = queue.unwrap_or_else(|| panic!("no queue in {got}"));
        let (want, got) = (
            want.as_object().expect("map"),
            got.as_object().expect("map"),
        );
        assert_eq!(
            want.keys().collect::<Vec<_>>(),
            got.keys().collect::<Vec<_>>(),
            "same fields in the same order"
        );
        for (k, v) in want {
            if k == "ttl" {
                let (a, b) = (v.as_i64().unwrap_or(0), got[k].as_i64().unwrap_or(0));
                assert!((a - b).abs() < 5_000, "ttl {a} vs {b}");
            } else {
                assert_eq!(&got[k], v, "field {k} of {key}");
            }
        }
        if key == "job" {
            assert_eq!(queue[0]["owner"], "queued", "{queue}");
            assert_eq!(queue[0]["kind"], "exclusive", "{queue}");
            assert_eq!(queue[0]["timeout"], -1, "{queue}");
        } else {
            assert_eq!(queue, serde_json::json!([]));
        }
    }
    assert_eq!(got["free"], serde_json::json!({"queue": []}));

    let out = output(&s, &["status", "job", "free"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("job: held by holder (1 hold), lease "),
        "{text}"
    );
    assert!(text.contains(", 1 waiting\n"), "{text}");
    assert!(text.contains("\nfree: free, 0 waiting\n"), "{text}");
    assert!(text.contains("    1  queued "), "{text}");
}

#[test]
fn top_draws_its_table_in_a_terminal() {
    let s = Server::start();
    let mut con = s.client();
    q::<i64>(
        &mut con,
        &["LOCK.ACQUIRE", "deploy:web", "holder", "PX", "60000"],
    );
    let mut waiters = Vec::new();
    for i in 0..3 {
        let mut w = s.client();
        let owner = format!("w{i}");
        send(
            &mut w,
            &[
                "LOCK.ACQUIRE",
                "deploy:web",
                &owner,
                "PX",
                "5000",
                "BLOCK",
                "0",
            ],
        );
        waiters.push(w);
    }
    wait_for_waiters(&mut con, "deploy:web", 3);
    let tmux = Tmux::start(&format!(
        "env REDIS_URL={} {BIN} top --interval 200ms",
        s.url()
    ));
    let screen = tmux.wait_for("the table", |screen| {
        screen.lines().any(|l| l.starts_with("deploy:web"))
    });
    let row = screen
        .lines()
        .find(|l| l.starts_with("deploy:web"))
        .unwrap_or_default();
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells.get(1), Some(&"3"), "waiters column: {screen}");
    assert!(row.contains("holder"), "{screen}");
    assert!(
        screen.contains("KEY") && screen.contains("WAITERS"),
        "{screen}"
    );
    // It follows changes: one waiter gives up.
    drop(waiters.pop());
    tmux.wait_for("2 waiters", |screen| {
        screen
            .lines()
            .find(|l| l.starts_with("deploy:web"))
            .is_some_and(|l| l.split_whitespace().nth(1) == Some("2"))
    });
    tmux.send_keys("C-c");
}

#[test]
fn the_waiting_line_shows_the_queue_and_is_erased() {
    let s = Server::start();
    let mut con = s.client();
    q::<i64>(&mut con, &["LOCK.ACQUIRE", "job", "first", "PX", "60000"]);
    let mut other = s.client();
    send(
        &mut other,
        &["LOCK.ACQUIRE", "job", "second", "PX", "60000", "BLOCK", "0"],
    );
    wait_for_waiters(&mut con, "job", 1);
    let dir = scratch();
    let done = dir.join("done");
    let tmux = Tmux::start(&format!(
        "env REDIS_URL={} {BIN} run job -- touch {}; sleep 30",
        s.url(),
        path(&done)
    ));
    let screen = tmux.wait_for("the status line", |screen| {
        screen.contains("waiting for job: 1 ahead, held by first, ")
    });
    assert!(screen.contains(" s"), "{screen}");
    q::<i64>(&mut con, &["LOCK.RELEASE", "job", "first"]);
    // `second` is served, then the runner.
    let _ = common::recv(&mut other);
    q::<i64>(&mut other, &["LOCK.RELEASE", "job", "second"]);
    wait_file(&done);
    tmux.wait_for("the line erased", |screen| !screen.contains("waiting for"));
}

#[test]
fn a_run_follows_moved_on_a_cluster() {
    let cluster = Cluster::start(3);
    // A key owned by another node than the first.
    let key = (0..)
        .map(|i| format!("job{i}"))
        .find(|k| cluster.node_for(k).port != cluster.nodes[0].port)
        .unwrap_or_default();
    let owner_node = cluster.node_for(&key);
    let dir = scratch();
    let (started, go) = (dir.join("started"), dir.join("go"));
    let script = held_until(&started, &go);
    let mut r = Runner::start(
        &cluster.nodes[0],
        &["run", "--owner", "c1", &key, "--", "sh", "-c", &script],
    );
    wait_file(&started);
    let mut con = owner_node.client();
    let info = lock_info(&mut con, &key);
    assert_eq!(field(&info, "owner").as_deref(), Some("c1"));
    assert!(field(&info, "keepalive_client").is_some(), "{info:?}");
    fs::write(&go, "").expect("go");
    assert_eq!(r.wait_code(), 0);
    assert!(lock_info(&mut con, &key).is_empty());
    let out = output(&cluster.nodes[0], &["status", "--json", &key]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}
