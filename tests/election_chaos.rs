//! Leader election under faults, with real candidate processes: each is
//! `redis-lock elect chaos --lease 1s -- sleep 60` (the CLI built by cargo
//! from cli/), an observer long-polls ELECT.OBSERVE, and the leader is
//! killed (kill -9), stopped (SIGSTOP of its process group, then SIGCONT),
//! cut off by the network (a namespace whose link goes down) or told to
//! resign (SIGTERM).
//!
//! What is checked comes from the candidates' own stderr lines (`leading
//! NAME term T at MS`, `lost NAME term T at MS (why)`, `resigned ...`): at
//! every moment at most one process believes it leads (the intervals from
//! `leading` to `lost`/`resigned`, or to its kill, never overlap); terms
//! only grow; each new leader's term is what ELECT.LEADER says and what the
//! observer saw, in order, with nothing missed; and each new leader began
//! within the documented bound after the fault (resign: at once; kill -9:
//! within the lease; stop or cut: within 1.5 leases + 2 s), plus slack for
//! a loaded machine.

use crate::common;
use common::netns::{self, Netns};
use common::*;

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime};

const NAME: &str = "chaos";
const LEASE_MS: i64 = 1000;
/// Scheduling slack on top of each documented bound: generous (two cores
/// shared with other test processes), never part of the logic.
const SLACK_MS: i64 = 2000;
/// The exit code of a candidate that lost its leadership (EX_TEMPFAIL).
const LOST_EXIT: i32 = 75;

/// The redis-lock binary: `REDIS_LOCK_BIN`, else the one cargo built next
/// to this test (target/<profile>/redis-lock: `cargo test` of the
/// workspace builds it for the CLI's own tests), refused when older than
/// the CLI's or the client library's sources.
fn redis_lock_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("REDIS_LOCK_BIN") {
        return bin.into();
    }
    let exe = std::env::current_exe().expect("this test's path");
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .map(|dir| dir.join("redis-lock"))
        .expect("target/<profile>");
    let built = std::fs::metadata(&bin)
        .and_then(|m| m.modified())
        .unwrap_or_else(|_| {
            panic!(
                "{} is missing: `cargo test` of the workspace builds it (or `cargo build -p \
                 redis-lock-cli`), or name one with REDIS_LOCK_BIN",
                bin.display()
            )
        });
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for dir in ["cli/src", "clients/rust/src"] {
        if let Some(newer) = newest_source(&root.join(dir)).filter(|(t, _)| *t > built) {
            panic!(
                "{} is older than {}: rebuild it (`cargo build -p redis-lock-cli`, or run the \
                 whole `cargo test`)",
                bin.display(),
                newer.1.display()
            );
        }
    }
    bin
}

/// The most recently modified file under `dir`.
fn newest_source(dir: &Path) -> Option<(SystemTime, PathBuf)> {
    let mut newest: Option<(SystemTime, PathBuf)> = None;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        let found = if path.is_dir() {
            newest_source(&path)
        } else {
            entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .map(|t| (t, path))
        };
        if let Some(f) = found {
            if newest.as_ref().is_none_or(|n| f.0 > n.0) {
                newest = Some(f);
            }
        }
    }
    newest
}

/// One of a candidate's stderr lines that matter.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Said {
    Leading { term: i64, at: i64 },
    Lost { term: i64, at: i64, why: String },
    Resigned { term: i64, at: i64 },
}

/// `redis-lock: leading NAME term T at MS` and the like; `None` for other
/// lines.
fn parse_line(line: &str) -> Option<Said> {
    let rest = line.strip_prefix("redis-lock: ")?;
    let (kind, rest) = rest.split_once(' ')?;
    let rest = rest.strip_prefix(NAME)?.strip_prefix(" term ")?;
    let (term, rest) = rest.split_once(" at ")?;
    let term: i64 = term.parse().ok()?;
    let (at, why) = match rest.split_once(' ') {
        Some((at, why)) => (at, why.trim_start_matches('(').trim_end_matches(')')),
        None => (rest, ""),
    };
    let at: i64 = at.parse().ok()?;
    match kind {
        "leading" => Some(Said::Leading { term, at }),
        "lost" => Some(Said::Lost {
            term,
            at,
            why: why.to_string(),
        }),
        "resigned" => Some(Said::Resigned { term, at }),
        _ => None,
    }
}

/// A `redis-lock elect` process in a process group of its own (with the
/// command it runs), its stderr read line by line.
struct Candidate {
    id: String,
    child: Child,
    said: Arc<Mutex<Vec<Said>>>,
    lines: Arc<Mutex<Vec<String>>>,
    reader: Option<JoinHandle<()>>,
    /// When the test killed it (kill -9): it believed nothing after.
    killed_at: Option<i64>,
}

impl Candidate {
    /// Campaigns as `id` on the server at `url`, from the network
    /// namespace `netns` if given.
    fn start(url: &str, id: &str, netns: Option<&str>) -> Candidate {
        let bin = redis_lock_bin();
        let mut cmd = match netns {
            Some(ns) => {
                let mut cmd = Command::new("ip");
                cmd.args(["netns", "exec", ns]).arg(&bin);
                cmd
            }
            None => Command::new(&bin),
        };
        cmd.args(["elect", NAME, "--candidate", id, "--lease", "1s", "--"])
            .args(["sleep", "60"])
            .env("REDIS_URL", url)
            .env_remove("LOCK_OWNER")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0);
        let mut child = cmd.spawn().expect("start redis-lock elect");
        let stderr = child.stderr.take().expect("stderr");
        let said = Arc::new(Mutex::new(Vec::new()));
        let lines = Arc::new(Mutex::new(Vec::new()));
        let reader = {
            let (said, lines) = (said.clone(), lines.clone());
            thread::spawn(move || {
                for line in BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    if let Some(s) = parse_line(&line) {
                        said.lock().unwrap().push(s);
                    }
                    lines.lock().unwrap().push(line);
                }
            })
        };
        Candidate {
            id: id.to_string(),
            child,
            said,
            lines,
            reader: Some(reader),
            killed_at: None,
        }
    }

    fn said(&self) -> Vec<Said> {
        self.said.lock().unwrap().clone()
    }

    fn stderr(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    /// Waits for the `n`-th (from 0) of its lines that `pick` takes.
    fn wait_for<T>(&self, what: &str, n: usize, pick: impl Fn(&Said) -> Option<T>) -> T {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(found) = self.said().iter().filter_map(&pick).nth(n) {
                return found;
            }
            assert!(
                Instant::now() < deadline,
                "{} never said {what}; its stderr:\n{}",
                self.id,
                self.stderr()
            );
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// (term, at) of its `leading` line.
    fn leading(&self) -> (i64, i64) {
        self.wait_for("leading", 0, |s| match s {
            Said::Leading { term, at } => Some((*term, *at)),
            _ => None,
        })
    }

    /// (term, at, why) of its `lost` line.
    fn lost(&self) -> (i64, i64, String) {
        self.wait_for("lost", 0, |s| match s {
            Said::Lost { term, at, why } => Some((*term, *at, why.clone())),
            _ => None,
        })
    }

    /// (term, at) of its `resigned` line.
    fn resigned(&self) -> (i64, i64) {
        self.wait_for("resigned", 0, |s| match s {
            Said::Resigned { term, at } => Some((*term, *at)),
            _ => None,
        })
    }

    /// The process groups of redis-lock (made by this test) and of the
    /// command it runs (redis-lock gives it one of its own).
    fn groups(&self) -> Vec<i32> {
        let pid = self.child.id() as i32;
        let mut groups = vec![pid];
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
            .into_iter()
            .flatten();
        for task in tasks.flatten() {
            let children =
                std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            for child in children.split_whitespace() {
                // `pid (comm) state ppid pgrp ...`: comm may hold spaces.
                let stat =
                    std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
                let pgrp = stat
                    .rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(2))
                    .and_then(|g| g.parse::<i32>().ok());
                if let Some(g) = pgrp.filter(|g| !groups.contains(g)) {
                    groups.push(g);
                }
            }
        }
        groups
    }

    /// `sig` to its whole process tree: redis-lock's group and its
    /// command's.
    fn signal_group(&self, sig: i32) {
        for group in self.groups() {
            // SAFETY: groups of this test's own unreaped child and of its
            // children.
            let rc = unsafe { libc::kill(-group, sig) };
            assert_eq!(rc, 0, "kill -{sig} the group {group} of {}", self.id);
        }
    }

    /// `sig` to redis-lock alone.
    fn signal(&self, sig: i32) {
        // SAFETY: our own unreaped child.
        let rc = unsafe { libc::kill(self.child.id() as i32, sig) };
        assert_eq!(rc, 0, "kill -{sig} {}", self.id);
    }

    /// kill -9 of the whole group; notes when.
    fn kill9(&mut self) {
        self.killed_at = Some(now_ms());
        self.signal_group(libc::SIGKILL);
        let _ = self.child.wait();
    }

    /// Its exit code (128 + signal if killed); panics after PATIENCE.
    fn exit_code(&mut self) -> i32 {
        use std::os::unix::process::ExitStatusExt;
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status
                    .code()
                    .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
            }
            assert!(
                Instant::now() < deadline,
                "{} did not exit; its stderr:\n{}",
                self.id,
                self.stderr()
            );
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// Its belief interval [leading, end] with the term, if it led: the
    /// end is its `lost`/`resigned` line, or its kill.
    fn belief(&self) -> Option<(i64, i64, i64)> {
        let said = self.said();
        let (term, from) = said.iter().find_map(|s| match s {
            Said::Leading { term, at } => Some((*term, *at)),
            _ => None,
        })?;
        let end = said
            .iter()
            .find_map(|s| match s {
                Said::Lost { at, .. } | Said::Resigned { at, .. } => Some(*at),
                Said::Leading { .. } => None,
            })
            .or(self.killed_at)
            .unwrap_or_else(|| {
                panic!(
                    "{} led and never stopped believing it; its stderr:\n{}",
                    self.id,
                    self.stderr()
                )
            });
        Some((from, end, term))
    }
}

impl Drop for Candidate {
    fn drop(&mut self) {
        // Only a group whose leader was not reaped yet is surely ours.
        if matches!(self.child.try_wait(), Ok(None)) {
            // A SIGSTOPped one dies too.
            for group in self.groups() {
                // SAFETY: as in `signal_group`.
                unsafe {
                    libc::kill(-group, libc::SIGKILL);
                }
            }
            let _ = self.child.wait();
        }
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

/// A leadership as the observer saw it: candidate (`None`: nobody), term.
type Seen = (Option<String>, i64);

/// A thread in the follower's loop: `ELECT.OBSERVE chaos TERM t BLOCK
/// 200`, noting each (candidate, term) answered, until stopped.
struct Observer {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Vec<Seen>>>,
    thread: Option<JoinHandle<()>>,
}

impl Observer {
    fn start(server: &Server) -> Observer {
        let mut con = server.client();
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let thread = {
            let (stop, seen) = (stop.clone(), seen.clone());
            thread::spawn(move || {
                let mut term = 0i64;
                while !stop.load(Ordering::Relaxed) {
                    let t = term.to_string();
                    let reply: Value = q(
                        &mut con,
                        &["ELECT.OBSERVE", NAME, "TERM", &t, "BLOCK", "200"],
                    );
                    let Value::Array(items) = reply else {
                        assert_eq!(reply, Value::Nil, "OBSERVE's reply");
                        continue;
                    };
                    let field = |name: &str| {
                        items
                            .chunks(2)
                            .find(|kv| text(&kv[0]) == name)
                            .map(|kv| kv[1].clone())
                            .unwrap_or_else(|| panic!("no {name} in {items:?}"))
                    };
                    let candidate = match field("candidate") {
                        Value::Nil => None,
                        v => Some(text(&v)),
                    };
                    let Value::Int(new) = field("term") else {
                        panic!("term in {items:?}")
                    };
                    assert!(new == 0 || new > term, "term {new} after {term}");
                    term = new;
                    seen.lock().unwrap().push((candidate, term));
                }
            })
        };
        Observer {
            stop,
            seen,
            thread: Some(thread),
        }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Waits until it has seen nobody lead after all that happened, then
    /// stops it; what it saw.
    fn finish(mut self) -> Vec<Seen> {
        wait_until("the observer to see nobody lead", || {
            self.seen().last().is_some_and(|(_, t)| *t == 0)
        });
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().expect("the observer thread");
        }
        self.seen()
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// ELECT.LEADER's candidate and term.
fn server_leader(con: &mut Connection) -> Option<(String, i64)> {
    match q::<Value>(con, &["ELECT.LEADER", NAME]) {
        Value::Nil => None,
        Value::Array(items) => {
            let get = |name: &str| {
                items
                    .chunks(2)
                    .find(|kv| text(&kv[0]) == name)
                    .map(|kv| text(&kv[1]))
                    .expect("a field")
            };
            Some((get("candidate"), get("term").parse().expect("term")))
        }
        other => panic!("ELECT.LEADER: {other:?}"),
    }
}

/// `c` says it leads: returns (term, at), after checking that the server
/// names it as leader in that term.
fn now_leads(con: &mut Connection, c: &Candidate) -> (i64, i64) {
    let (term, at) = c.leading();
    assert_eq!(
        server_leader(con),
        Some((c.id.clone(), term)),
        "ELECT.LEADER while {} says it leads",
        c.id
    );
    (term, at)
}

/// Starts candidate `id` and waits until it is the `nth` queued.
fn queue(server_url: &str, con: &mut Connection, id: &str, nth: i64) -> Candidate {
    let c = Candidate::start(server_url, id, None);
    wait_for_waiters(con, NAME, nth);
    c
}

/// The checks on the whole history: belief intervals never overlap, terms
/// only grow in the order of leading, the observer saw exactly that
/// sequence of leaders and then nobody; and nothing is left on the server.
fn check_history(server: &Server, candidates: &[&Candidate], seen: &[Seen]) {
    let mut beliefs: Vec<(i64, i64, i64, &str)> = candidates
        .iter()
        .filter_map(|c| {
            c.belief()
                .map(|(from, to, term)| (from, to, term, c.id.as_str()))
        })
        .collect();
    beliefs.sort();
    for (from, to, _, id) in &beliefs {
        assert!(from <= to, "{id} believed from {from} to {to}");
    }
    for pair in beliefs.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        assert!(
            a.1 <= b.0,
            "{} believed it led until {}, {} from {}: {beliefs:?}",
            a.3,
            a.1,
            b.3,
            b.0
        );
        assert!(a.2 < b.2, "terms not growing: {beliefs:?}");
    }
    let led: Vec<Seen> = beliefs
        .iter()
        .map(|(_, _, term, id)| (Some(id.to_string()), *term))
        .collect();
    let (last, changes) = seen.split_last().expect("the observer saw something");
    assert_eq!(last, &(None, 0), "the observer's last answer: {seen:?}");
    assert_eq!(changes, &led[..], "the observer saw every leader in order");

    let mut con = server.client();
    assert_eq!(server_leader(&mut con), None);
    assert!(!exists(&mut con, NAME));
    assert!(!exists(&mut con, &format!("{{{NAME}}}:leader")));
    assert_eq!(server.stat("keepalive_holds"), 0);
    assert_eq!(server.stat("waiters"), 0);
    assert_eq!(server.stat("election_observers"), 0);
}

/// kill -9, SIGSTOP (then SIGCONT) and a resign, one after the other, with
/// candidates queued behind the leader each time; and kill -9 of a
/// candidate still waiting.
#[test]
fn leaders_killed_stopped_and_resigning_hand_over_safely_and_in_time() {
    let server = Server::start();
    let url = server.url();
    let mut con = server.client();
    let observer = Observer::start(&server);

    let mut c1 = Candidate::start(&url, "c1", None);
    let (t1, _) = now_leads(&mut con, &c1);
    let mut c2 = queue(&url, &mut con, "c2", 1);
    let c3 = queue(&url, &mut con, "c3", 2);

    // kill -9: the kernel closes its connections; the lease runs out.
    c1.kill9();
    let killed_at = c1.killed_at.expect("killed");
    let (t2, at2) = now_leads(&mut con, &c2);
    assert!(t2 > t1);
    assert!(
        at2 - killed_at <= LEASE_MS + SLACK_MS,
        "c2 led {} ms after c1 was killed",
        at2 - killed_at
    );
    let mut c4 = queue(&url, &mut con, "c4", 2);

    // SIGSTOP of c2's group: its connections stay open but silent.
    let stopped_at = now_ms();
    c2.signal_group(libc::SIGSTOP);
    let (t3, at3) = now_leads(&mut con, &c3);
    assert!(t3 > t2);
    assert!(
        at3 - stopped_at <= LEASE_MS * 3 / 2 + 2000 + SLACK_MS,
        "c3 led {} ms after c2 was stopped",
        at3 - stopped_at
    );
    c2.signal_group(libc::SIGCONT);
    let (lost_term, lost_at, _) = c2.lost();
    assert_eq!(lost_term, t2);
    assert!(
        lost_at <= at3,
        "c2 believed it led until {lost_at}, c3 led from {at3}"
    );
    assert_eq!(c2.exit_code(), LOST_EXIT, "c2: {}", c2.stderr());
    let mut c5 = queue(&url, &mut con, "c5", 2);
    // kill -9 of a candidate still waiting: the kernel closes its
    // connections, it leaves the queue at once and never leads.
    let mut cw = queue(&url, &mut con, "cw", 3);
    cw.kill9();
    wait_for_waiters(&mut con, NAME, 2);
    assert!(!cw.stderr().contains("leading"), "cw: {}", cw.stderr());

    // SIGTERM: c3 resigns, c4 leads at once.
    let asked_at = now_ms();
    c3.signal(libc::SIGTERM);
    let (t4, at4) = now_leads(&mut con, &c4);
    let (resigned_term, resigned_at) = c3.resigned();
    assert_eq!(resigned_term, t3);
    assert!(t4 > t3);
    assert!(
        at4 - asked_at <= SLACK_MS,
        "c4 led {} ms after c3 was asked to resign",
        at4 - asked_at
    );
    assert!(
        resigned_at <= at4,
        "c3 said it resigned at {resigned_at}, after c4 led from {at4}"
    );

    // The last two resign in turn.
    c4.signal(libc::SIGTERM);
    let (t5, _) = now_leads(&mut con, &c5);
    assert!(t5 > t4);
    assert_eq!(c4.resigned().0, t4);
    c5.signal(libc::SIGTERM);
    assert_eq!(c5.resigned().0, t5);
    for c in [&mut c4, &mut c5] {
        let code = c.exit_code();
        assert_ne!(code, LOST_EXIT, "{}: {}", c.id, c.stderr());
    }

    let seen = observer.finish();
    check_history(&server, &[&c1, &c2, &c3, &c4, &c5, &cw], &seen);
    // c2's (stopped: `idle`) was ended by the server while kept alive;
    // c1's (killed) ended with its connection, nobody to tell: not counted.
    assert_eq!(server.stat("elections_lost"), 1, "lock_elections_lost");
    assert_eq!(server.stat("elections_won"), 5, "lock_elections_won");
}

/// The leader is cut off by the network (its link down: no FIN, no RST):
/// it stops believing it leads half a lease after its last answered PING,
/// and the next candidate leads within 1.5 leases + 2 s, after that.
#[test]
fn a_leader_cut_off_by_the_network_hands_over_safely_and_in_time() {
    if let Some(why) = netns::unavailable() {
        eprintln!("SKIPPED: the network-cut case needs network namespaces ({why})");
        return;
    }
    let ns = Netns::create("10.212", "lkel").expect("a network namespace (root, ip present)");
    let mut config = Config::default().arg("protected-mode", "no");
    // Later than the harness's own --bind 127.0.0.1, so this one counts.
    config
        .args
        .extend(["--bind".into(), "127.0.0.1".into(), ns.host_ip.clone()]);
    let server = config.start();
    let mut con = server.client();
    let observer = Observer::start(&server);

    let remote_url = format!("redis://{}:{}/", ns.host_ip, server.port);
    let mut n1 = Candidate::start(&remote_url, "n1", Some(&ns.name));
    let (t1, _) = now_leads(&mut con, &n1);
    let url = server.url();
    let c2 = queue(&url, &mut con, "c2", 1);
    let c3 = queue(&url, &mut con, "c3", 2);

    let cut_at = now_ms();
    ns.cut();
    let (t2, at2) = now_leads(&mut con, &c2);
    assert!(t2 > t1);
    assert!(
        at2 - cut_at <= LEASE_MS * 3 / 2 + 2000 + SLACK_MS,
        "c2 led {} ms after n1 was cut off",
        at2 - cut_at
    );
    let (lost_term, lost_at, _) = n1.lost();
    assert_eq!(lost_term, t1);
    assert!(
        lost_at <= at2,
        "n1 believed it led until {lost_at}, c2 led from {at2}"
    );
    assert!(
        lost_at <= cut_at + LEASE_MS / 2 + SLACK_MS,
        "n1 believed it led {} ms after the cut",
        lost_at - cut_at
    );
    // It may still be trying to resign over the dead link: done with it.
    drop_group(&mut n1);

    c2.signal(libc::SIGTERM);
    assert_eq!(c2.resigned().0, t2);
    let (t3, _) = now_leads(&mut con, &c3);
    assert!(t3 > t2);
    c3.signal(libc::SIGTERM);
    assert_eq!(c3.resigned().0, t3);

    let seen = observer.finish();
    check_history(&server, &[&n1, &c2, &c3], &seen);
}

/// Kills a candidate that has already said all it will (its group).
fn drop_group(c: &mut Candidate) {
    c.signal_group(libc::SIGKILL);
    let _ = c.child.wait();
}
