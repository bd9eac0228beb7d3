//! `redis-lock run`: take the lock(s), run the command while holding them,
//! release, and exit with the command's status.

use std::process::Child;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread;
use std::time::{Duration, Instant};

use redis::{ConnectionInfo, RedisResult, Value};
use redis_lock_client::proto;

use crate::args::{OnLost, RunArgs};
use crate::child::{self, Received};
use crate::commands::{self, Acquire, Wait};
use crate::conn::{self, Conn};
use crate::duration::{millis, spec};
use crate::exit::{self, Failure};
use crate::owner;
use crate::reply;
use crate::term::StatusLine;
use crate::waiting::{self, Progress};
use crate::watch::{Running, Watch};
use crate::words;

/// How often the waiting status line is redrawn.
const STATUS_TICK: Duration = Duration::from_millis(200);
/// How long each reply to the cancel and release of a wait given up may take.
const ABANDON_PATIENCE: Duration = Duration::from_secs(2);
/// Margin on top of `--wait` for the reply to a blocked acquire.
const WAIT_MARGIN: Duration = Duration::from_secs(10);

enum Event {
    Acquired(Box<Conn>, RedisResult<Value>),
    Signal(Received),
    ChildExited,
    Lost(String),
}

fn say(quiet: bool, msg: &str) {
    if !quiet {
        eprintln!("redis-lock: {msg}");
    }
}

pub fn run(url: &str, args: RunArgs) -> Result<u8, Failure> {
    let owner = match &args.owner {
        Some(o) => o.clone(),
        None => owner::generate(),
    };
    let acquire = args.acquire(owner).map_err(Failure::Usage)?;
    let target = conn::target(url).map_err(Failure::Usage)?;
    let mut holder = Conn::connect(&target).map_err(|e| words::connect_failure(&target, &e))?;
    init_semaphore(&acquire, &mut holder)?;

    let (tx, rx) = mpsc::channel::<Event>();
    child::listen(tx.clone(), Event::Signal)
        .map_err(|e| Failure::Internal(format!("cannot handle signals: {e}")))?;

    let (holder, tokens) = wait_for_lock(&args, &acquire, &target, holder, &tx, &rx)?;
    let Some(tokens) = tokens else {
        say(args.quiet, &not_acquired(&acquire));
        return Ok(args.conflict_exit_code);
    };

    let mut env = vec![
        ("LOCK_NAME", acquire.names.join(" ")),
        ("LOCK_OWNER", acquire.owner.clone()),
    ];
    if acquire.fence {
        let t: Vec<String> = tokens.iter().map(i64::to_string).collect();
        env.push(("LOCK_TOKEN", t.join(" ")));
    }
    // The command inherits the holder connection (LOCK_FD): should
    // redis-lock die, the connection stays open, and the server keeps the
    // hold alive, for as long as a process of the command has it open.
    if let Some(fd) = holder.fd() {
        env.push(("LOCK_FD", fd.to_string()));
    }
    let mut child = match child::spawn(&args.command, &env, holder.fd()) {
        Ok(c) => c,
        Err(e) => {
            let mut holder = Some(holder);
            let _ = release(&mut holder, &target, &acquire);
            eprintln!(
                "redis-lock: cannot run {}: {}",
                args.command
                    .first()
                    .map(|c| c.to_string_lossy())
                    .unwrap_or_default(),
                child::spawn_error(&e)
            );
            return Ok(exit::spawn_status(&e));
        }
    };
    let pid = child.id();
    child::notify_exit(pid, tx.clone(), Event::ChildExited)
        .map_err(|e| Failure::Internal(format!("cannot watch the command: {e}")))?;
    let watch = Watch::new(acquire.clone(), holder)
        .start(tx.clone(), Event::Lost)
        .map_err(|e| Failure::Internal(format!("cannot watch the lock: {e}")))?;

    let lost = supervise(&args, acquire.what(), pid, &rx);
    finish(&args, &acquire, &target, &mut child, watch, lost)
}

/// For `--semaphore NAME:N`: `SEM.INIT NAME N`, which sets the total once. If the
/// semaphore exists with another total, says so on stderr (even with `-q`: the runs do not
/// get the N asked for) and goes on.
fn init_semaphore(acquire: &Acquire, holder: &mut Conn) -> Result<(), Failure> {
    let (Some(init), Some(total)) = (acquire.init(), acquire.semaphore) else {
        return Ok(());
    };
    let set = holder
        .call(&init)
        .map_err(|e| words::command_failure(holder.info(), &init, &e))?;
    if set == Value::Int(1) {
        return Ok(());
    }
    let name = &acquire.names[0];
    let info = proto::sem_info(name);
    if let Ok(v) = holder.call(&info) {
        match proto::int_field(&v, "permits") {
            Some(has) if has != i64::from(total) => eprintln!(
                "redis-lock: semaphore {name} has {has} permits, not {total} (SEM.INIT sets the \
                 total once; SEM.ADD changes it): going on with {has}"
            ),
            _ => {}
        }
    }
    Ok(())
}

/// Gives up a wait for good (a signal, a connection lost or silent): `LOCK.CANCEL` ends
/// the owner's wait in the server, after which no grant can reach it, then the release
/// gives back a grant that crossed the cancel (`NOTOWNER` / `EXPIRED`: there was none). On
/// a new connection: the holder connection may still be waiting.
fn abandon(target: &ConnectionInfo, acquire: &Acquire) {
    let Ok(mut conn) = Conn::connect(target) else {
        return;
    };
    // A server that does not answer must not hold the exit up for long.
    let patience = Some(ABANDON_PATIENCE);
    match conn.call_waiting(&acquire.cancel(), patience) {
        // Silent or gone: the release would be too.
        Err(e) if exit::is_unusable(&e) => {}
        // Done, or refused (a module without LOCK.CANCEL): release anyway.
        _ => {
            let _ = conn.call_waiting(&acquire.release(), patience);
        }
    }
}

/// Sends the acquire (on a thread, so that signals and the status line are
/// served meanwhile) and waits for its reply: the holder connection and the
/// tokens (hold counts without `--fence`), `None` if not acquired.
fn wait_for_lock(
    args: &RunArgs,
    acquire: &Acquire,
    target: &ConnectionInfo,
    mut holder: Conn,
    tx: &Sender<Event>,
    rx: &Receiver<Event>,
) -> Result<(Conn, Option<Vec<i64>>), Failure> {
    let cmd = acquire.command();
    let sent = cmd.clone();
    let patience = match acquire.wait {
        Wait::No => Some(conn::REPLY_TIMEOUT),
        Wait::Forever => None,
        Wait::For(d) => Some(d + WAIT_MARGIN),
    };
    let sender = tx.clone();
    thread::Builder::new()
        .name("acquire".into())
        .spawn(move || {
            let reply = holder.call_waiting(&sent, patience);
            let _ = sender.send(Event::Acquired(Box::new(holder), reply));
        })
        .map_err(|e| Failure::Internal(format!("cannot start: {e}")))?;

    let started = Instant::now();
    let mut line = StatusLine::new(!args.quiet);
    let mut progress = line.enabled().then(|| Progress::new(target.clone()));
    loop {
        let event = if line.enabled() {
            match rx.recv_timeout(STATUS_TICK) {
                Ok(e) => e,
                Err(RecvTimeoutError::Timeout) => {
                    if let Some(p) = progress.as_mut() {
                        let (ahead, holder) = p.poll(acquire);
                        line.draw(&waiting::line(
                            &acquire.names,
                            ahead,
                            holder.as_deref(),
                            started.elapsed(),
                        ));
                    }
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(Failure::Internal("the acquire thread ended".into()))
                }
            }
        } else {
            rx.recv()
                .map_err(|_| Failure::Internal("the acquire thread ended".into()))?
        };
        match event {
            Event::Acquired(holder, reply) => {
                line.clear();
                let holder = *holder;
                return match reply {
                    Ok(v) => reply::acquired(&v)
                        .map(|tokens| (holder, tokens))
                        .map_err(|_| {
                            Failure::Server(format!(
                                "{} answered {} with something other than a lock's reply",
                                conn::describe(target),
                                cmd.first().map_or("", String::as_str)
                            ))
                        }),
                    Err(e) => {
                        if exit::is_unusable(&e) {
                            // The wait may live on in the server (no answer in
                            // time), or a grant may have been sent just before
                            // the connection broke: end it, give it back.
                            abandon(target, acquire);
                        }
                        Err(words::command_failure(holder.info(), &cmd, &e))
                    }
                };
            }
            Event::Signal(s) => {
                // End the wait in the server and give back a grant that
                // crossed the signal (leaving would close the connection,
                // but a grant already written to it would live out its
                // lease).
                line.clear();
                abandon(target, acquire);
                say(
                    args.quiet,
                    &format!(
                        "{} while waiting for the {}",
                        child::signal_name(s.signal),
                        acquire.what()
                    ),
                );
                return Err(Failure::Code(exit::child_status(None, Some(s.signal))));
            }
            Event::ChildExited | Event::Lost(_) => {}
        }
    }
}

/// `job is busy: waited 1s, not acquired`.
fn not_acquired(acquire: &Acquire) -> String {
    let waited = match acquire.wait {
        Wait::For(d) => format!("waited {}, ", spec(millis(d))),
        Wait::No | Wait::Forever => String::new(),
    };
    if let Some(total) = acquire.semaphore {
        format!(
            "{}: all {total} permits are held: {waited}not acquired",
            acquire.names[0]
        )
    } else if acquire.is_multi() {
        format!(
            "{}: not all free: {waited}none acquired",
            acquire.names.join(", ")
        )
    } else {
        format!("{} is busy: {waited}not acquired", acquire.names.join(" "))
    }
}

/// Until the command exits: forwards signals, and acts when the lock is
/// lost. Whether it was.
fn supervise(args: &RunArgs, what: &str, pid: u32, rx: &Receiver<Event>) -> bool {
    let mut lost = false;
    let mut kill_at: Option<Instant> = None;
    loop {
        let event = match kill_at {
            Some(at) => match rx.recv_timeout(at.saturating_duration_since(Instant::now())) {
                Ok(e) => e,
                Err(RecvTimeoutError::Timeout) => {
                    say(
                        args.quiet,
                        "the command did not end after SIGTERM: sending SIGKILL",
                    );
                    child::kill(pid, libc::SIGKILL);
                    kill_at = None;
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => return lost,
            },
            None => match rx.recv() {
                Ok(e) => e,
                Err(_) => return lost,
            },
        };
        match event {
            Event::ChildExited => return lost,
            Event::Signal(s) => {
                if child::forward(s) {
                    child::kill(pid, s.signal);
                }
            }
            Event::Lost(reason) => {
                lost = true;
                eprintln!("redis-lock: lost the {what}: {reason}");
                match args.on_lost {
                    OnLost::Term => {
                        child::kill(pid, libc::SIGTERM);
                        kill_at = Some(Instant::now() + args.grace);
                    }
                    OnLost::Kill => child::kill(pid, libc::SIGKILL),
                    OnLost::Ignore => {}
                }
            }
            Event::Acquired(..) => {}
        }
    }
}

/// Reaps the command, stops the watch, releases; the exit code.
fn finish(
    args: &RunArgs,
    acquire: &Acquire,
    target: &ConnectionInfo,
    child: &mut Child,
    watch: Running,
    mut lost: bool,
) -> Result<u8, Failure> {
    use std::os::unix::process::ExitStatusExt;
    let status = child
        .wait()
        .map_err(|e| Failure::Internal(format!("cannot wait for the command: {e}")))?;
    let code = exit::child_status(status.code(), status.signal());
    let mut holder = watch.stop();
    match release(&mut holder, target, acquire) {
        Released::Yes => {}
        Released::NotHeld => {
            if !lost {
                eprintln!(
                    "redis-lock: lost the {}: it was no longer held at release",
                    acquire.what()
                );
            }
            lost = true;
        }
        Released::Failed(e) => say(
            args.quiet,
            &format!(
                "could not release {}: {e} (the server ends the hold a lease after the \
                 connection closes)",
                acquire.names.join(", ")
            ),
        ),
    }
    Ok(if lost { exit::LOST } else { code })
}

enum Released {
    Yes,
    NotHeld,
    Failed(String),
}

/// Releases on the holder connection, or on a new one if it is gone. For
/// several names of which some are no longer held, each name still held is
/// released on its own (`LOCK.MRELEASE` releases all or none).
fn release(holder: &mut Option<Conn>, target: &ConnectionInfo, acquire: &Acquire) -> Released {
    let cmd = acquire.release();
    let attempt = |conn: &mut Conn| -> RedisResult<Released> {
        match conn.call(&cmd) {
            Ok(_) => Ok(Released::Yes),
            Err(e) if acquire.not_held(e.code()) => {
                if acquire.is_multi() {
                    for name in &acquire.names {
                        let _ =
                            conn.call(&commands::release_one(name, &acquire.owner, acquire.kind));
                    }
                }
                Ok(Released::NotHeld)
            }
            Err(e) => Err(e),
        }
    };
    if let Some(conn) = holder.as_mut() {
        match attempt(conn) {
            Ok(r) => return r,
            Err(e) if !exit::is_unusable(&e) => {
                return Released::Failed(words::reason(conn.info(), &cmd, &e))
            }
            Err(_) => {}
        }
    }
    match Conn::connect(target) {
        Ok(mut conn) => match attempt(&mut conn) {
            Ok(r) => r,
            Err(e) => Released::Failed(words::reason(conn.info(), &cmd, &e)),
        },
        Err(e) => Released::Failed(words::connect_failure(target, &e).to_string()),
    }
}
