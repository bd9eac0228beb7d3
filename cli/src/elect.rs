//! `redis-lock elect`: campaign to lead an election (`ELECT.CAMPAIGN ... SESSION token`)
//! with a session connection of its own (`LOCK.SESSION`, `SUBSCRIBE` to its loss channel,
//! `PING` every lease/4), run the command while leading, stop it when leadership is lost,
//! resign when it exits.

use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::{ConnectionInfo, RedisResult, Value};
use redis_lock_client::proto::{self, Binding, Message, Reason, Wait};

use crate::args::ElectArgs;
use crate::child::{self, Received};
use crate::conn::{self, Conn};
use crate::duration::{millis, spec};
use crate::exit::{self, Failure};
use crate::owner;
use crate::words;

/// Margin on top of `--wait` for the reply to a waiting campaign.
const WAIT_MARGIN: Duration = Duration::from_secs(10);
/// How long each reply to the cancel and resign of a campaign given up may take.
const ABANDON_PATIENCE: Duration = Duration::from_secs(2);
/// The longest the session thread reads before it looks at its stop flag.
const STOP_CHECK: Duration = Duration::from_millis(100);

enum Event {
    /// Round `0`'s session connection answered a PING sent at `1`.
    Alive(u64, Instant),
    /// Round `0`'s session ended: a loss message for the candidate, `demoted`, or the
    /// connection broke; noticed at `2`.
    Ended(u64, Reason, Instant),
    /// Round `0`'s campaign was answered.
    Campaigned(u64, Box<Conn>, RedisResult<Value>),
    Signal(Received),
    ChildExited,
}

/// Wall-clock unix milliseconds at the monotonic instant `at`.
fn unix_ms(at: Instant) -> u128 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let here = Instant::now();
    let wall = if at <= here {
        now.saturating_sub(here - at)
    } else {
        now + (at - here)
    };
    wall.as_millis()
}

fn say(msg: &str) {
    eprintln!("redis-lock: {msg}");
}

/// The session connection of one round: its thread pings it every lease/4 and reads its
/// loss channel; stopped (the connection closed) when the round ends.
struct Session {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Session {
    /// `LOCK.SESSION token` and `SUBSCRIBE __lock__:session:<token>` on a new connection,
    /// then the thread. Events of round `round` go to `tx`.
    fn open(
        target: &ConnectionInfo,
        token: &str,
        round: u64,
        watched: (&str, &str),
        lease: Duration,
        tx: &Sender<Event>,
    ) -> Result<Session, Failure> {
        let mut conn = Conn::connect(target).map_err(|e| words::connect_failure(target, &e))?;
        let _ = conn.call(&[
            "CLIENT".into(),
            "SETNAME".into(),
            format!("lock-session:{token}"),
        ]);
        let sent = Instant::now();
        let cmd = proto::session(token);
        conn.call(&cmd)
            .map_err(|e| words::command_failure(conn.info(), &cmd, &e))?;
        let _ = tx.send(Event::Alive(round, sent));
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = mpsc::channel::<RedisResult<()>>();
        let channel = proto::channel(token);
        let (name, candidate) = (watched.0.to_string(), watched.1.to_string());
        let every = (lease / 4).max(Duration::from_millis(10));
        let tx = tx.clone();
        let flag = stop.clone();
        let info = conn.info().clone();
        let thread = thread::Builder::new()
            .name("session".into())
            .spawn(move || {
                let mut ps = conn.connection().as_pubsub();
                match ps.subscribe(&channel) {
                    Ok(()) => {
                        let _ = ready_tx.send(Ok(()));
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                }
                let ended = |reason: Reason| {
                    let _ = tx.send(Event::Ended(round, reason, Instant::now()));
                };
                let mut next_ping = Instant::now() + every;
                loop {
                    if flag.load(Ordering::SeqCst) {
                        return;
                    }
                    let now = Instant::now();
                    if now >= next_ping {
                        let sent = Instant::now();
                        next_ping = sent + every;
                        // An answer later than half a lease is past the deadline anyway.
                        let _ = ps.set_read_timeout(Some((lease / 2).max(STOP_CHECK)));
                        match ps.ping::<Value>() {
                            Ok(_) => {
                                let _ = tx.send(Event::Alive(round, sent));
                            }
                            Err(_) => return ended(Reason::ConnectionLost),
                        }
                        continue;
                    }
                    let wait = (next_ping - now)
                        .min(STOP_CHECK)
                        .max(Duration::from_millis(1));
                    let _ = ps.set_read_timeout(Some(wait));
                    match ps.get_message() {
                        Ok(msg) => match proto::message(msg.get_payload_bytes()) {
                            Some(Message::Demoted) => return ended(Reason::Demoted),
                            Some(Message::Lost { reason, owner, key })
                                if owner == candidate && key == name =>
                            {
                                return ended(reason)
                            }
                            _ => {}
                        },
                        Err(e) if e.is_timeout() => {}
                        Err(_) => return ended(Reason::ConnectionLost),
                    }
                }
            })
            .map_err(|e| Failure::Internal(format!("cannot start: {e}")))?;
        let session = Session {
            stop,
            thread: Some(thread),
        };
        match ready_rx.recv_timeout(conn::REPLY_TIMEOUT) {
            Ok(Ok(())) => Ok(session),
            Ok(Err(e)) => Err(words::command_failure(
                &info,
                &["SUBSCRIBE".to_string(), proto::channel(token)],
                &e,
            )),
            Err(_) => Err(Failure::Unreachable(format!(
                "{} did not answer SUBSCRIBE in time",
                conn::describe(&info)
            ))),
        }
    }

    /// Stops the thread, which closes the session connection.
    fn close(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// How a round ended.
enum Outcome {
    /// Exit with this code.
    Exit(u8),
    /// Leadership was lost (or the session ended while waiting, with `--again`).
    Lost,
}

pub fn elect(url: &str, args: ElectArgs) -> Result<u8, Failure> {
    if args.name.is_empty() {
        return Err(Failure::Usage(
            "the election's name must not be empty".into(),
        ));
    }
    let candidate = match &args.candidate {
        Some(c) if c.is_empty() => {
            return Err(Failure::Usage("the candidate id must not be empty".into()))
        }
        Some(c) => c.clone(),
        None => owner::generate(),
    };
    let target = conn::target(url).map_err(Failure::Usage)?;
    let (tx, rx) = mpsc::channel::<Event>();
    child::listen(tx.clone(), Event::Signal)
        .map_err(|e| Failure::Internal(format!("cannot handle signals: {e}")))?;
    let mut round = 0;
    loop {
        round += 1;
        match one_round(&args, &target, &candidate, round, &tx, &rx)? {
            Outcome::Exit(code) => return Ok(code),
            Outcome::Lost if args.again => continue,
            Outcome::Lost => return Ok(exit::LOST),
        }
    }
}

/// Ends a campaign given up (a signal, the session gone): `LOCK.CANCEL` ends the wait in
/// the server, then `ELECT.RESIGN` ends a leadership that crossed it. On a new connection:
/// the campaign's may still be waiting.
fn abandon(target: &ConnectionInfo, name: &str, candidate: &str) {
    let Ok(mut conn) = Conn::connect(target) else {
        return;
    };
    let patience = Some(ABANDON_PATIENCE);
    let cancel = vec!["LOCK.CANCEL".to_string(), name.into(), candidate.into()];
    match conn.call_waiting(&cancel, patience) {
        Err(e) if exit::is_unusable(&e) => {}
        _ => {
            let _ = conn.call_waiting(&proto::elect_resign(name, candidate), patience);
        }
    }
}

/// `ELECT.RESIGN` on `conn` if it still works, else on a new connection: whether it led,
/// or why it could not be told.
fn resign(
    conn: &mut Option<Conn>,
    target: &ConnectionInfo,
    name: &str,
    candidate: &str,
) -> Result<bool, String> {
    let cmd = proto::elect_resign(name, candidate);
    if let Some(c) = conn.as_mut() {
        match c.call(&cmd) {
            Ok(v) => return Ok(v == Value::Int(1)),
            Err(e) if !exit::is_unusable(&e) => return Err(words::reason(c.info(), &cmd, &e)),
            Err(_) => {}
        }
    }
    let mut c =
        Conn::connect(target).map_err(|e| words::connect_failure(target, &e).to_string())?;
    c.call(&cmd)
        .map(|v| v == Value::Int(1))
        .map_err(|e| words::reason(c.info(), &cmd, &e))
}

/// After a loss: `ELECT.RESIGN`, best effort and quick (the server may still have the
/// leadership: the deadline passed, the connection broke), so that the next candidate
/// leads at once. A server that does not answer in time is not asked again: cut off, a new
/// connection would not reach it either.
fn resign_after_loss(
    conn: &mut Option<Conn>,
    target: &ConnectionInfo,
    name: &str,
    candidate: &str,
) {
    let cmd = proto::elect_resign(name, candidate);
    if let Some(c) = conn.as_mut() {
        match c.call_waiting(&cmd, Some(ABANDON_PATIENCE)) {
            Ok(_) => return,
            Err(e) if exit::is_connection_error(&e) && e.is_timeout() => return,
            Err(e) if !exit::is_unusable(&e) => return,
            Err(_) => {}
        }
    }
    if let Ok(mut c) = Conn::connect(target) {
        let _ = c.call_waiting(&cmd, Some(ABANDON_PATIENCE));
    }
}

fn one_round(
    args: &ElectArgs,
    target: &ConnectionInfo,
    candidate: &str,
    round: u64,
    tx: &Sender<Event>,
    rx: &Receiver<Event>,
) -> Result<Outcome, Failure> {
    let name = args.name.as_str();
    let lease = args.lease;
    let half = lease / 2;
    let token = owner::token();
    let mut conn = Conn::connect(target).map_err(|e| words::connect_failure(target, &e))?;
    // On a cluster this moves the connection to the node serving NAME (MOVED), where the
    // session must be named; a module without elections, or a key of another kind, is
    // told here before anything else.
    let probe = proto::elect_leader(name);
    conn.call(&probe)
        .map_err(|e| words::command_failure(conn.info(), &probe, &e))?;
    let node = conn.info().clone();
    let session = Session::open(&node, &token, round, (name, candidate), lease, tx)?;

    let wait = args.wait();
    let cmd = proto::elect_campaign(
        name,
        candidate,
        args.value.as_deref(),
        lease,
        Binding::Session(&token),
        wait,
    );
    let patience = match wait {
        Wait::No => Some(conn::REPLY_TIMEOUT),
        Wait::Forever => None,
        Wait::For(d) => Some(d + WAIT_MARGIN),
    };
    let sent_cmd = cmd.clone();
    let sender = tx.clone();
    // Before the campaign is sent: the server's lease starts no earlier.
    let campaign_sent = Instant::now();
    thread::Builder::new()
        .name("campaign".into())
        .spawn(move || {
            let reply = conn.call_waiting(&sent_cmd, patience);
            let _ = sender.send(Event::Campaigned(round, Box::new(conn), reply));
        })
        .map_err(|e| Failure::Internal(format!("cannot start: {e}")))?;

    // Waiting to lead.
    let mut alive = campaign_sent;
    let (conn, term) = loop {
        let event = rx
            .recv()
            .map_err(|_| Failure::Internal("the campaign thread ended".into()))?;
        match event {
            Event::Alive(r, s) if r == round => alive = alive.max(s),
            Event::Ended(r, reason, _) if r == round => {
                abandon(target, name, candidate);
                session.close();
                let why = format!(
                    "the session connection to {} ended while waiting to lead {name} ({})",
                    conn::describe(target),
                    reason.word()
                );
                if args.again {
                    say(&format!("{why}: campaigning again"));
                    thread::sleep(conn::RECONNECT_DELAY);
                    return Ok(Outcome::Lost);
                }
                return Err(Failure::Unreachable(why));
            }
            Event::Campaigned(r, conn, reply) if r == round => match reply {
                Ok(v) => match proto::campaigned(&v) {
                    Ok(Some(term)) => break (*conn, term),
                    Ok(None) => {
                        session.close();
                        let waited = match wait {
                            Wait::For(d) => format!("waited {}, ", spec(millis(d))),
                            Wait::No | Wait::Forever => String::new(),
                        };
                        say(&format!(
                            "{name} is led by another candidate: {waited}not leading"
                        ));
                        return Ok(Outcome::Exit(args.conflict_exit_code));
                    }
                    Err(_) => {
                        abandon(target, name, candidate);
                        return Err(Failure::Server(format!(
                            "{} answered ELECT.CAMPAIGN with something other than a term",
                            conn::describe(target)
                        )));
                    }
                },
                Err(e) => {
                    if exit::is_unusable(&e) {
                        abandon(target, name, candidate);
                    }
                    return Err(words::command_failure(conn.info(), &cmd, &e));
                }
            },
            Event::Signal(s) => {
                abandon(target, name, candidate);
                session.close();
                say(&format!(
                    "{} while waiting to lead {name}",
                    child::signal_name(s.signal)
                ));
                return Err(Failure::Code(exit::child_status(None, Some(s.signal))));
            }
            _ => {}
        }
    };
    let mut conn = Some(conn);
    say(&format!(
        "leading {name} term {term} at {}",
        unix_ms(Instant::now())
    ));
    let mut deadline = alive + half;
    let lost_line = |at: Instant, reason: &Reason| {
        say(&format!(
            "lost {name} term {term} at {} ({})",
            unix_ms(at),
            reason.word()
        ));
    };
    if Instant::now() >= deadline {
        lost_line(deadline, &Reason::Deadline);
        resign_after_loss(&mut conn, target, name, candidate);
        session.close();
        return Ok(Outcome::Lost);
    }

    let term_text = term.to_string();
    let env = vec![
        ("LOCK_NAME", name.to_string()),
        ("LOCK_CANDIDATE", candidate.to_string()),
        ("LOCK_TERM", term_text.clone()),
        ("LOCK_TOKEN", term_text),
    ];
    // In a process group of its own, stopped as a whole on a loss. It does not inherit the
    // session connection: killed, redis-lock's leadership must end with it.
    let mut child = match child::spawn_group(&args.command, &env) {
        Ok(c) => c,
        Err(e) => {
            let at = Instant::now();
            if let Ok(true) = resign(&mut conn, target, name, candidate) {
                say(&format!("resigned {name} term {term} at {}", unix_ms(at)));
            }
            session.close();
            say(&format!(
                "cannot run {}: {}",
                args.command
                    .first()
                    .map(|c| c.to_string_lossy())
                    .unwrap_or_default(),
                child::spawn_error(&e)
            ));
            return Ok(Outcome::Exit(exit::spawn_status(&e)));
        }
    };
    let pid = child.id();
    child::notify_exit(pid, tx.clone(), Event::ChildExited)
        .map_err(|e| Failure::Internal(format!("cannot watch the command: {e}")))?;

    // Leading: until the command exits.
    let mut lost = false;
    let mut kill_at: Option<Instant> = None;
    let lose = |at: Instant, reason: Reason, lost: &mut bool, kill_at: &mut Option<Instant>| {
        *lost = true;
        lost_line(at, &reason);
        child::kill_group(pid, libc::SIGTERM);
        *kill_at = Some(Instant::now() + args.grace);
    };
    loop {
        let now = Instant::now();
        // Past the deadline (also after a pause of this process): no longer leading,
        // whatever comes next.
        if !lost && now >= deadline {
            lose(deadline, Reason::Deadline, &mut lost, &mut kill_at);
            continue;
        }
        let until = match (lost, kill_at) {
            (false, _) => Some(deadline),
            (true, k) => k,
        };
        let event = match until {
            Some(at) => match rx.recv_timeout(at.saturating_duration_since(now)) {
                Ok(e) => e,
                Err(RecvTimeoutError::Timeout) => {
                    if lost && kill_at.is_some_and(|k| Instant::now() >= k) {
                        say("the command did not end after SIGTERM: sending SIGKILL");
                        child::kill_group(pid, libc::SIGKILL);
                        kill_at = None;
                    }
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => break,
            },
            None => match rx.recv() {
                Ok(e) => e,
                Err(_) => break,
            },
        };
        match event {
            Event::ChildExited => break,
            Event::Alive(r, s) if r == round && !lost => deadline = deadline.max(s + half),
            Event::Ended(r, reason, noticed) if r == round && !lost => {
                lose(noticed.min(deadline), reason, &mut lost, &mut kill_at)
            }
            // Its own process group does not get the terminal's signals: pass every one on.
            Event::Signal(s) => child::kill_group(pid, s.signal),
            _ => {}
        }
    }
    let code = reap(&mut child)?;
    if lost {
        // The server may still have it (the deadline, a broken connection): hand over now.
        resign_after_loss(&mut conn, target, name, candidate);
        session.close();
        return Ok(Outcome::Lost);
    }
    if Instant::now() >= deadline {
        lost_line(deadline, &Reason::Deadline);
        resign_after_loss(&mut conn, target, name, candidate);
        session.close();
        return Ok(Outcome::Lost);
    }
    // It stops believing it leads when it decides to resign, before the
    // server hands over inside ELECT.RESIGN: the time of its line.
    let at = Instant::now();
    let resigned = resign(&mut conn, target, name, candidate);
    session.close();
    match resigned {
        Ok(true) => {
            say(&format!("resigned {name} term {term} at {}", unix_ms(at)));
            Ok(Outcome::Exit(code))
        }
        Ok(false) => {
            // Not leading any more, and no loss was heard of.
            lost_line(at.min(deadline), &Reason::NotOwner);
            Ok(Outcome::Lost)
        }
        Err(why) => {
            say(&format!(
                "could not resign {name}: {why} (the server ends the leadership a lease after \
                 the session connection closed)"
            ));
            Ok(Outcome::Exit(code))
        }
    }
}

fn reap(child: &mut Child) -> Result<u8, Failure> {
    use std::os::unix::process::ExitStatusExt;
    let status = child
        .wait()
        .map_err(|e| Failure::Internal(format!("cannot wait for the command: {e}")))?;
    Ok(exit::child_status(status.code(), status.signal()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wall_clock_of_instants() {
        let now = Instant::now();
        let ms = unix_ms(now);
        let earlier = unix_ms(now - Duration::from_millis(500));
        assert!((495..=505).contains(&(ms - earlier)), "{ms} {earlier}");
    }
}
