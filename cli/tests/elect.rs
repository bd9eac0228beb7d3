//! `redis-lock elect` and `redis-lock leader` against a real server with the module, with
//! real child processes: the command runs while leading (LOCK_TERM), the next candidate
//! takes over in turn when it exits (resigned), a killed leader process hands over within
//! the lease, a force-released or cut-off leader stops its command and says `lost`,
//! `leader --json` / `--watch` print the changes in order.

#[path = "../../tests/common/mod.rs"]
mod common;
mod util;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{exists, now_ms, q, waiters, Cluster, Config, Server};
use util::{cli, output, path, read, scratch, wait_file, Runner};

/// A redis-lock process whose stderr (and stdout) go to files.
struct Proc {
    runner: Runner,
    err: PathBuf,
    out: PathBuf,
}

fn start(s: &Server, dir: &Path, tag: &str, args: &[&str]) -> Proc {
    let err = dir.join(format!("{tag}.err"));
    let out = dir.join(format!("{tag}.out"));
    let child = cli(s, args)
        .stdout(Stdio::from(fs::File::create(&out).expect("stdout file")))
        .stderr(Stdio::from(fs::File::create(&err).expect("stderr file")))
        .spawn()
        .expect("spawn redis-lock");
    Proc {
        runner: Runner(Some(child)),
        err,
        out,
    }
}

/// One `redis-lock: WORD NAME term T at MS [(REASON)]` line.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Said {
    word: String,
    name: String,
    term: i64,
    ms: i64,
    reason: Option<String>,
}

fn parse(line: &str) -> Option<Said> {
    let rest = line.strip_prefix("redis-lock: ")?;
    let w: Vec<&str> = rest.split(' ').collect();
    if w.len() < 6 || w[2] != "term" || w[4] != "at" {
        return None;
    }
    if !["leading", "lost", "resigned"].contains(&w[0]) {
        return None;
    }
    let reason = match w.get(6) {
        Some(r) => Some(r.strip_prefix('(')?.strip_suffix(')')?.to_string()),
        None => None,
    };
    Some(Said {
        word: w[0].into(),
        name: w[1].into(),
        term: w[3].parse().ok()?,
        ms: w[5].parse().ok()?,
        reason,
    })
}

impl Proc {
    /// The leading / lost / resigned lines said so far, in order.
    fn said(&self) -> Vec<Said> {
        read(&self.err).lines().filter_map(parse).collect()
    }

    /// Waits until `n` such lines were said; they.
    fn wait_said(&self, n: usize) -> Vec<Said> {
        common::wait_until(&format!("{n} lines in {}", self.err.display()), || {
            self.said().len() >= n
        });
        self.said()
    }

    fn stdout_lines(&self) -> Vec<String> {
        read(&self.out).lines().map(String::from).collect()
    }
}

/// A command that records its environment, says it started, and runs until `go` exists,
/// then exits with `code`.
fn leader_script(dir: &Path, tag: &str, code: i32) -> String {
    format!(
        "echo \"$LOCK_NAME|$LOCK_CANDIDATE|$LOCK_TERM|$LOCK_TOKEN\" > {env}; touch {started}; \
         while [ ! -e {go} ]; do sleep 0.02; done; exit {code}",
        env = path(&dir.join(format!("{tag}.env"))),
        started = path(&dir.join(format!("{tag}.started"))),
        go = path(&dir.join(format!("{tag}.go"))),
    )
}

fn json_line(candidate: Option<&str>, term: i64, value: Option<&str>) -> serde_json::Value {
    serde_json::json!({"candidate": candidate, "term": term, "value": value})
}

/// The JSON lines printed, without `ttl_ms` (which changes).
fn without_ttl(lines: &[String]) -> Vec<serde_json::Value> {
    lines
        .iter()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).expect("a JSON line");
            let o = v.as_object_mut().expect("an object");
            assert!(o.remove("ttl_ms").is_some_and(|t| t.is_i64()), "{l}");
            v
        })
        .collect()
}

#[test]
fn candidates_lead_in_turn_and_leader_shows_each_change() {
    let s = Server::start();
    let mut con = s.client();
    let dir = scratch();
    let none = output(&s, &["leader", "job"]);
    assert_eq!(none.status.code(), Some(1));
    assert_eq!(String::from_utf8_lossy(&none.stdout), "(none)\n");
    let watch = start(&s, &dir, "watch", &["leader", "--watch", "--json", "job"]);
    common::wait_until("the watcher printed who leads", || {
        !watch.stdout_lines().is_empty()
    });

    let a_script = leader_script(&dir, "a", 3);
    let mut a = start(
        &s,
        &dir,
        "a",
        &[
            "elect",
            "--candidate",
            "cand-a",
            "--value",
            "10.0.0.1:80",
            "job",
            "--",
            "sh",
            "-c",
            &a_script,
        ],
    );
    wait_file(&dir.join("a.started"));
    let led = a.wait_said(1);
    assert_eq!(
        (led[0].word.as_str(), led[0].name.as_str()),
        ("leading", "job")
    );
    let term_a = led[0].term;
    assert_eq!(
        read(&dir.join("a.env")).trim(),
        format!("job|cand-a|{term_a}|{term_a}")
    );
    let shown = output(&s, &["leader", "job"]);
    assert_eq!(shown.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&shown.stdout),
        format!("cand-a {term_a} 10.0.0.1:80\n")
    );

    let b_script = leader_script(&dir, "b", 0);
    let mut b = start(
        &s,
        &dir,
        "b",
        &[
            "elect",
            "--candidate",
            "cand-b",
            "job",
            "--",
            "sh",
            "-c",
            &b_script,
        ],
    );
    common::wait_until("b waits", || waiters(&mut con, "job") == 1);
    assert!(!dir.join("b.started").exists(), "b ran while a led");

    fs::write(dir.join("a.go"), "").unwrap();
    assert_eq!(a.runner.wait_code(), 3, "a exits with its command's status");
    let a_said = a.said();
    assert_eq!(a_said.len(), 2, "{a_said:?}");
    assert_eq!(
        (
            a_said[1].word.as_str(),
            a_said[1].term,
            a_said[1].reason.as_deref()
        ),
        ("resigned", term_a, None)
    );
    assert!(a_said[1].ms >= a_said[0].ms);
    wait_file(&dir.join("b.started"));
    let term_b = b.wait_said(1)[0].term;
    assert!(term_b > term_a, "{term_b} after {term_a}");
    assert!(read(&dir.join("b.env")).starts_with(&format!("job|cand-b|{term_b}|")));

    fs::write(dir.join("b.go"), "").unwrap();
    assert_eq!(b.runner.wait_code(), 0);
    assert_eq!(b.wait_said(2)[1].word, "resigned");

    common::wait_until("the watcher saw nobody lead again", || {
        watch.stdout_lines().len() >= 4
    });
    assert_eq!(
        without_ttl(&watch.stdout_lines()),
        vec![
            json_line(None, 0, None),
            json_line(Some("cand-a"), term_a, Some("10.0.0.1:80")),
            json_line(Some("cand-b"), term_b, None),
            json_line(None, 0, None),
        ]
    );
    assert!(!exists(&mut con, "job") && !exists(&mut con, "{job}:leader"));
}

#[test]
fn a_killed_leader_process_hands_over_within_its_lease() {
    let s = Server::start();
    let dir = scratch();
    let lease_ms = 1000;
    // The first leader's command records its pid; the next one's checks it is gone.
    let pid_file = dir.join("a.pid");
    let a_script = format!(
        "echo $$ > {pid}; touch {started}; exec sleep 60",
        pid = path(&pid_file),
        started = path(&dir.join("a.started"))
    );
    let b_script = format!(
        "st=$(sed -n 's/^State:[[:space:]]*\\(.\\).*/\\1/p' /proc/$(cat {pid})/status 2>/dev/null); \
         if [ -n \"$st\" ] && [ \"$st\" != Z ]; then echo overlap > {bad}; fi; touch {started}; \
         exec sleep 60",
        pid = path(&pid_file),
        bad = path(&dir.join("overlap")),
        started = path(&dir.join("b.started"))
    );
    let mut a = start(
        &s,
        &dir,
        "a",
        &["elect", "--lease", "1s", "job", "--", "sh", "-c", &a_script],
    );
    wait_file(&dir.join("a.started"));
    let mut b = start(
        &s,
        &dir,
        "b",
        &["elect", "--lease", "1s", "job", "--", "sh", "-c", &b_script],
    );
    common::wait_until("b waits", || waiters(&mut s.client(), "job") == 1);
    let killed = now_ms();
    a.runner.signal(libc::SIGKILL);
    a.runner.wait_code();
    wait_file(&dir.join("b.started"));
    let led = b.wait_said(1)[0].clone();
    let after = led.ms - killed;
    println!("b led {after} ms after a was killed (lease {lease_ms} ms)");
    assert!(
        after <= 2 * lease_ms,
        "handed over {after} ms after the kill"
    );
    assert!(
        !dir.join("overlap").exists(),
        "a's command still ran when b's started"
    );
    b.runner.signal(libc::SIGTERM);
    assert_eq!(b.runner.wait_code(), 128 + libc::SIGTERM);
    assert_eq!(b.wait_said(2)[1].word, "resigned");
}

#[test]
fn force_release_stops_the_command_and_exits_75_or_campaigns_again() {
    let s = Server::start();
    let mut con = s.client();
    let dir = scratch();
    // Counts its starts, says when SIGTERM stopped it. The trap is set
    // before the start is written: a SIGTERM sent once the start is seen
    // must find it (else sh dies of it, status 143).
    let script = |tag: &str| {
        format!(
            "trap 'touch {term}; exit 0' TERM; echo start >> {starts}; \
             while true; do sleep 0.02; done",
            starts = path(&dir.join(format!("{tag}.starts"))),
            term = path(&dir.join(format!("{tag}.term")))
        )
    };
    let once_script = script("once");
    let again_script = script("again");
    let mut once = start(
        &s,
        &dir,
        "once",
        &[
            "elect",
            "--lease",
            "5s",
            "one",
            "--",
            "sh",
            "-c",
            &once_script,
        ],
    );
    let mut again = start(
        &s,
        &dir,
        "again",
        &[
            "elect",
            "--lease",
            "5s",
            "--again",
            "two",
            "--",
            "sh",
            "-c",
            &again_script,
        ],
    );
    let t_once = once.wait_said(1)[0].term;
    let t_again = again.wait_said(1)[0].term;
    wait_file(&dir.join("once.starts"));
    wait_file(&dir.join("again.starts"));

    let before = now_ms();
    let _: i64 = q(&mut con, &["LOCK.FORCERELEASE", "one"]);
    assert_eq!(once.runner.wait_code(), 75);
    assert!(dir.join("once.term").exists(), "the command got SIGTERM");
    let said = once.said();
    assert_eq!(said.len(), 2, "{said:?}");
    assert_eq!(
        (
            said[1].word.as_str(),
            said[1].term,
            said[1].reason.as_deref()
        ),
        ("lost", t_once, Some("forced"))
    );
    assert!(said[1].ms >= before);

    let _: i64 = q(&mut con, &["LOCK.FORCERELEASE", "two"]);
    let said = again.wait_said(3);
    assert_eq!(
        (
            said[1].word.as_str(),
            said[1].term,
            said[1].reason.as_deref()
        ),
        ("lost", t_again, Some("forced"))
    );
    assert_eq!(said[2].word, "leading");
    assert!(said[2].term > t_again);
    common::wait_until("the command started again", || {
        read(&dir.join("again.starts")).lines().count() == 2
    });
    assert!(
        dir.join("again.term").exists(),
        "stopped before it ran again"
    );
    again.runner.signal(libc::SIGTERM);
    assert_eq!(
        again.runner.wait_code(),
        0,
        "the command's status (its trap)"
    );
    let said = again.wait_said(4);
    assert_eq!(
        (said[3].word.as_str(), said[3].term),
        ("resigned", said[2].term)
    );
    assert!(!exists(&mut con, "one") && !exists(&mut con, "two"));
    assert!(!exists(&mut con, "{two}:leader"));
}

#[test]
fn a_leader_keeps_leading_while_answered_and_stops_at_its_deadline_when_not() {
    let s = Server::start();
    let dir = scratch();
    let script = format!(
        "trap 'touch {term}; exit 0' TERM; touch {started}; while true; do sleep 0.02; done",
        started = path(&dir.join("started")),
        term = path(&dir.join("term"))
    );
    let mut p = start(
        &s,
        &dir,
        "p",
        &["elect", "--lease", "1s", "job", "--", "sh", "-c", &script],
    );
    wait_file(&dir.join("started"));
    let term = p.wait_said(1)[0].term;
    // Leading across several leases while the server answers its PINGs (every lease/4).
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(p.said().len(), 1, "{:?}", p.said());
    assert!(!dir.join("term").exists());
    let pid = s.pid().expect("server pid") as i32;
    // SAFETY: the test's own server process.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let stopped = now_ms();
    let deadline = Instant::now() + common::PATIENCE;
    while p.said().len() < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let said = p.said();
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    assert!(
        said.len() >= 2,
        "no lost line while the server was stopped: {said:?}"
    );
    assert_eq!(
        (
            said[1].word.as_str(),
            said[1].term,
            said[1].reason.as_deref()
        ),
        ("lost", term, Some("deadline"))
    );
    // It stopped believing before the server could have handed over (a lease after the
    // last PING it answered, which was sent before the stop).
    assert!(
        said[1].ms < stopped + 1000,
        "{said:?}, stopped at {stopped}"
    );
    assert_eq!(p.runner.wait_code(), 75);
    assert!(dir.join("term").exists());
}

#[test]
fn on_a_cluster_the_session_is_named_on_the_node_serving_the_election() {
    let cluster = Cluster::start(3);
    // A name served by another node than the one the URL names.
    let name = (0..)
        .map(|i| format!("sched{i}"))
        .find(|k| cluster.node_for(k).port != cluster.nodes[0].port)
        .unwrap_or_default();
    let dir = scratch();
    let script = leader_script(&dir, "c", 0);
    let mut p = start(
        &cluster.nodes[0],
        &dir,
        "c",
        &["elect", "--value", "v", &name, "--", "sh", "-c", &script],
    );
    wait_file(&dir.join("c.started"));
    let term = p.wait_said(1)[0].term;
    let shown = output(&cluster.nodes[0], &["leader", &name]);
    let line = String::from_utf8_lossy(&shown.stdout).to_string();
    assert!(line.ends_with(&format!(" {term} v\n")), "{line:?}");
    // The loss message comes on the serving node's session channel.
    let mut con = cluster.node_for(&name).client();
    let _: i64 = q(&mut con, &["LOCK.FORCERELEASE", &name]);
    assert_eq!(p.runner.wait_code(), 75);
    let said = p.said();
    assert_eq!(
        (said[1].word.as_str(), said[1].reason.as_deref()),
        ("lost", Some("forced")),
        "{said:?}"
    );
}

#[test]
fn without_the_module_elect_and_leader_exit_78() {
    let s = Config::default().without_module().start();
    for args in [
        &["elect", "job", "--", "true"][..],
        &["leader", "job"],
        &["leader", "--watch", "job"],
    ] {
        let out = output(&s, args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(78), "{args:?}: {err}");
        assert!(err.contains("ELECT.LEADER"), "{err}");
    }
}
