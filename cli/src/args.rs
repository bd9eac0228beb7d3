//! The command line (clap derive) and what a `run` asks for.

use std::ffi::OsString;
use std::time::Duration;

use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};

use crate::commands::{Acquire, Kind, Wait};
use crate::conn::DEFAULT_URL;
use crate::duration;

/// Exit codes, as `--help` lists them.
const EXIT_CODES: &str = "\
Exit codes:
  the command's    run, elect: its exit status (128+N when signal N killed it)
  1                the lock was not acquired (-E changes it); release: nothing to release;
                   elect: not leading within --wait (-E changes it); leader: nobody leads
  64               usage error
  69               the server cannot be reached, the connection was lost, or it is not ready
  70               internal error of redis-lock
  75               run: the lock was lost while the command ran; elect: the leadership was lost
  76               an error reply from the server, or the peer is not a Redis server
  77               refused by the server: login, password, ACL permission, database
  78               the lock module is not loaded on the server
  79               run, elect: the server refused the wait (DEADLOCK: it would close a
                   cycle of waits); not acquired, the command not run
  126, 127         run: the command cannot be executed / was not found
  128+N            run, elect: redis-lock got signal N while waiting";

const MAIN_EXAMPLES: &str = "\
Examples:
  redis-lock run -n nightly-report -- /opt/app/bin/report
  redis-lock run --wait 10m --fence deploy:prod -- ./deploy.sh prod
  redis-lock -u redis://:secret@locks.internal:6379/0 status deploy:prod
  redis-lock top";

const RUN_EXAMPLES: &str = "\
Examples:
  # skip a busy turn quietly (exit 1), as flock -n does
  redis-lock run -n -q report -- /opt/app/bin/report
  # wait up to 10 minutes, exit 3 if not acquired, give the script LOCK_TOKEN
  redis-lock run --wait 10m -E 3 --fence deploy:prod -- ./deploy.sh prod
  # two locks at once (a cluster needs one {hash tag}); a shared read hold
  redis-lock run '{db}:orders' '{db}:stock' -- ./reconcile
  redis-lock run --read config -- ./read-config.sh
  # at most 3 at once across every host (a semaphore of 3 permits)
  redis-lock run --semaphore backups:3 -- ./backup.sh

The command gets LOCK_NAME, LOCK_OWNER, LOCK_TOKEN (--fence) and LOCK_FD: the
descriptor of the connection that keeps the lock. It must leave that
descriptor alone. If redis-lock is killed, the kernel kills the command
(SIGKILL); processes it started keep the connection, and the server keeps the
lock, until the last of them exits (as with flock). A lost lock ends the
command (--on-lost) and redis-lock exits 75.";

const ELECT_EXAMPLES: &str = "\
Examples:
  # one scheduler at a time across every host; the next one takes over
  redis-lock elect scheduler --value \"$(hostname):8080\" -- ./scheduler
  # a short lease: a killed leader is replaced within 2s; run again after a loss
  redis-lock elect --lease 2s --again scheduler -- ./scheduler

The command gets LOCK_NAME, LOCK_CANDIDATE, LOCK_TERM and LOCK_TOKEN (the
term: a fencing token). redis-lock prints to stderr, MS being unix ms:
  redis-lock: leading NAME term T at MS
  redis-lock: lost NAME term T at MS (REASON)
  redis-lock: resigned NAME term T at MS
A lost leadership (forced, gone, idle, maxhold, moved, demoted, connection,
deadline) stops the command (SIGTERM, SIGKILL after --grace) and exits 75,
or campaigns again with --again. When the command exits, or on SIGTERM /
SIGINT (passed on to it), redis-lock resigns and exits with its status.";

const LEADER_EXAMPLES: &str = "\
Examples:
  redis-lock leader scheduler            # CANDIDATE TERM [VALUE], or (none): exit 1
  redis-lock leader --json scheduler     # {\"candidate\":..,\"term\":..,\"value\":..,\"ttl_ms\":..}
  redis-lock leader --watch scheduler    # one line now and one per change, until killed";

const STATUS_EXAMPLES: &str = "\
Examples:
  redis-lock status deploy:prod
  redis-lock status --json job other | jq .job.owner";

const TOP_EXAMPLES: &str = "\
Examples:
  redis-lock top
  redis-lock top --interval 250ms
  redis-lock top --once > queues.txt";

const RELEASE_EXAMPLES: &str = "\
Examples:
  redis-lock release job --owner web-1:812:0a1b2c3d
  LOCK_OWNER=web-1:812:0a1b2c3d redis-lock release --write config

It prints NAME: released, NAME: N holds left, or why the owner had nothing
to release (exit 1).";

const FORCE_RELEASE_EXAMPLES: &str = "\
Examples:
  redis-lock force-release job
  redis-lock force-release deploy:prod deploy:staging

A redis-lock run holding a lock removed this way sees it lost (exit 75).";

#[derive(Debug, Parser)]
#[command(
    name = "redis-lock",
    version,
    about = "Run a command while holding a lock of the lock module (LOCK.* commands), \
             and look at locks and their queues",
    after_help = format!("{MAIN_EXAMPLES}\n\n{EXIT_CODES}")
)]
pub struct Cli {
    /// Server: redis://[user:pass@]host:port/db, rediss:// for TLS, or unix:///path.
    #[arg(
        short = 'u',
        long,
        env = "REDIS_URL",
        default_value = DEFAULT_URL,
        global = true,
        hide_env_values = true
    )]
    pub url: String,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Take the lock(s), run COMMAND while holding them, release, exit with its status.
    #[command(after_help = format!("{RUN_EXAMPLES}\n\n{EXIT_CODES}"))]
    Run(RunArgs),
    /// Campaign to lead NAME; run COMMAND while leading; resign when it exits.
    #[command(after_help = format!("{ELECT_EXAMPLES}\n\n{EXIT_CODES}"))]
    Elect(ElectArgs),
    /// Print who leads NAME (--watch: and every change).
    #[command(after_help = LEADER_EXAMPLES)]
    Leader(LeaderArgs),
    /// Show holder, holds, lease left, token and waiters of each lock.
    #[command(after_help = STATUS_EXAMPLES)]
    Status(StatusArgs),
    /// A live table of the locks that have waiters (Ctrl-C quits).
    #[command(after_help = TOP_EXAMPLES)]
    Top(TopArgs),
    /// Drop one hold of OWNER on each lock (LOCK.RELEASE).
    #[command(after_help = RELEASE_EXAMPLES)]
    Release(ReleaseArgs),
    /// Remove each lock whoever holds it (LOCK.FORCERELEASE).
    #[command(after_help = FORCE_RELEASE_EXAMPLES)]
    ForceRelease(ForceReleaseArgs),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OnLost {
    /// SIGTERM, then SIGKILL after --grace.
    Term,
    /// SIGKILL at once.
    Kill,
    /// Let the command run on (the exit code is still 75).
    Ignore,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Wait at most this long for the lock (500ms, 30s, 2m; a bare number is
    /// seconds; 0 = do not wait). Default: wait as long as it takes.
    #[arg(short = 'w', long, value_parser = duration::parse, conflicts_with = "nonblock")]
    pub wait: Option<Duration>,

    /// Do not wait: fail at once if the lock is busy.
    #[arg(short = 'n', long)]
    pub nonblock: bool,

    /// Lease of the hold; the server renews it while redis-lock's connection
    /// lives (KEEPALIVE), so it bounds how long a lock outlives a vanished runner.
    #[arg(long, value_parser = duration::parse_positive, default_value = "30s")]
    pub lease: Duration,

    /// Owner id to hold the lock as (default: HOST:PID:RANDOM, unique per run).
    #[arg(long)]
    pub owner: Option<String>,

    /// Take a fencing token (FENCE) and give it to the command as LOCK_TOKEN.
    #[arg(long)]
    pub fence: bool,

    /// A read hold of a read-write lock (LOCK.RACQUIRE): shared with other readers.
    #[arg(long, conflicts_with = "write")]
    pub read: bool,

    /// The write hold of a read-write lock (LOCK.WACQUIRE).
    #[arg(long)]
    pub write: bool,

    /// Hold one permit of semaphore NAME, whose total is N (SEM.INIT NAME N, once), instead
    /// of a lock: at most N runs at once. NAME:N replaces the lock names.
    #[arg(
        long,
        value_name = "NAME:N",
        value_parser = parse_semaphore,
        conflicts_with_all = ["names", "read", "write"]
    )]
    pub semaphore: Option<(String, u32)>,

    /// Exit code when the lock is not acquired.
    #[arg(short = 'E', long, default_value_t = crate::exit::CONFLICT)]
    pub conflict_exit_code: u8,

    /// What to do to the command when the lock is lost while it runs.
    #[arg(long, value_enum, default_value_t = OnLost::Term)]
    pub on_lost: OnLost,

    /// With --on-lost term: how long after SIGTERM to send SIGKILL.
    #[arg(long, value_parser = duration::parse, default_value = "10s")]
    pub grace: Duration,

    /// No waiting status line and no messages but errors.
    #[arg(short, long)]
    pub quiet: bool,

    /// The lock(s); several are taken all at once (LOCK.MACQUIRE).
    #[arg(required_unless_present = "semaphore", value_name = "NAME")]
    pub names: Vec<String>,

    /// The command to run, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

impl RunArgs {
    /// The acquisition asked for, or a usage error.
    pub fn acquire(&self, owner: String) -> Result<Acquire, String> {
        if let Some((name, total)) = &self.semaphore {
            check_owner(&owner)?;
            return Ok(Acquire {
                names: vec![name.clone()],
                owner,
                kind: Kind::Exclusive,
                lease: self.lease,
                wait: self.wait(),
                fence: self.fence,
                keepalive: true,
                semaphore: Some(*total),
            });
        }
        let kind = match (self.read, self.write) {
            (true, _) => Kind::Read,
            (_, true) => Kind::Write,
            _ => Kind::Exclusive,
        };
        if kind != Kind::Exclusive && self.names.len() > 1 {
            return Err(
                "--read and --write take one name (several names are taken as exclusive locks, \
                 all at once)"
                    .into(),
            );
        }
        if self.names.iter().any(String::is_empty) {
            return Err("a lock name must not be empty".into());
        }
        for (i, n) in self.names.iter().enumerate() {
            if self.names[..i].contains(n) {
                return Err(format!("lock '{n}' is named more than once"));
            }
        }
        check_owner(&owner)?;
        Ok(Acquire {
            names: self.names.clone(),
            owner,
            kind,
            lease: self.lease,
            wait: self.wait(),
            fence: self.fence,
            keepalive: true,
            semaphore: None,
        })
    }

    fn wait(&self) -> Wait {
        match (self.nonblock, self.wait) {
            (true, _) => Wait::No,
            (false, Some(d)) => Wait::from_duration(d),
            (false, None) => Wait::Forever,
        }
    }
}

/// `NAME:N` of `--semaphore`: the name (which may hold colons: the last one splits) and a
/// total of 1 to 2147483647 permits.
pub fn parse_semaphore(s: &str) -> Result<(String, u32), String> {
    let Some((name, n)) = s.rsplit_once(':') else {
        return Err(format!(
            "'{s}' is not NAME:N (a semaphore's name and how many runs it lets in at once)"
        ));
    };
    if name.is_empty() {
        return Err("the semaphore's name must not be empty".into());
    }
    match n.parse::<u32>() {
        Ok(n) if (1..=i32::MAX as u32).contains(&n) => Ok((name.to_string(), n)),
        Ok(0) => Err("N must be at least 1 (N runs at once)".into()),
        _ => Err(format!(
            "'{n}' is not a number of permits (1 to 2147483647)"
        )),
    }
}

/// How `redis-lock run` is written, for messages.
pub const RUN_USAGE: &str = "redis-lock run [OPTIONS] NAME... -- COMMAND [ARGS...]";
/// How `redis-lock elect` is written, for messages.
pub const ELECT_USAGE: &str = "redis-lock elect [OPTIONS] NAME -- COMMAND [ARGS...]";

/// A command-line error of clap in one line of our own: what is wrong, and
/// where the help is. `raw`: the arguments as given (without the program).
pub fn usage_error(e: &clap::Error, raw: &[String]) -> String {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let rendered = e.render().to_string();
    // The subcommand, if any: the first argument before `--` naming one.
    let sub = raw
        .iter()
        .take_while(|a| *a != "--")
        .find(|a| Cli::command().find_subcommand(a.as_str()).is_some())
        .cloned();
    let is_run = matches!(sub.as_deref(), Some("run") | Some("elect"));
    let missing: Vec<String> = match e.get(ContextKind::InvalidArg) {
        Some(ContextValue::Strings(v)) => v.clone(),
        Some(ContextValue::String(v)) => vec![v.clone()],
        _ => Vec::new(),
    };
    let no_separator = !raw.iter().any(|a| a == "--");
    let usage = if sub.as_deref() == Some("elect") {
        ELECT_USAGE
    } else {
        RUN_USAGE
    };
    if is_run
        && e.kind() == ErrorKind::MissingRequiredArgument
        && missing.iter().any(|m| m.contains("COMMAND"))
    {
        return format!("the command to run follows --: {usage}");
    }
    let mut message = rendered
        .lines()
        .next()
        .unwrap_or_default()
        .trim()
        .trim_start_matches("error:")
        .trim()
        .to_string();
    if is_run && e.kind() == ErrorKind::UnknownArgument && no_separator {
        message.push_str(&format!(" (the command to run follows --: {usage})"));
        return message;
    }
    let help = match sub {
        Some(sub) => format!("redis-lock {sub} --help"),
        None => "redis-lock --help".into(),
    };
    format!("{message} (see {help})")
}

pub fn check_owner(owner: &str) -> Result<(), String> {
    if owner.is_empty() {
        return Err("the owner must not be empty".into());
    }
    Ok(())
}

#[derive(Debug, Args)]
pub struct ElectArgs {
    /// Candidate id to campaign as (default: HOST:PID:RANDOM, unique per run).
    #[arg(long)]
    pub candidate: Option<String>,

    /// The value to publish while leading (ELECT.LEADER shows it), e.g. this host's address.
    #[arg(long)]
    pub value: Option<String>,

    /// Lease of the leadership: a killed leader is replaced within it; a leader stops
    /// believing it leads half a lease after its last answered PING (sent every lease/4).
    #[arg(long, value_parser = duration::parse_positive, default_value = "5s")]
    pub lease: Duration,

    /// Wait at most this long to lead (0 = do not wait). Default: as long as it takes.
    #[arg(short = 'w', long, value_parser = duration::parse)]
    pub wait: Option<Duration>,

    /// After a lost leadership, campaign again (instead of exiting 75).
    #[arg(long)]
    pub again: bool,

    /// How long after SIGTERM to send SIGKILL to the command when leadership is lost.
    #[arg(long, visible_alias = "kill-after", value_parser = duration::parse, default_value = "10s")]
    pub grace: Duration,

    /// Exit code when not leading within --wait.
    #[arg(short = 'E', long, default_value_t = crate::exit::CONFLICT)]
    pub conflict_exit_code: u8,

    /// The election.
    pub name: String,

    /// The command to run while leading, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

impl ElectArgs {
    pub fn wait(&self) -> Wait {
        match self.wait {
            Some(d) => Wait::from_duration(d),
            None => Wait::Forever,
        }
    }
}

#[derive(Debug, Args)]
pub struct LeaderArgs {
    /// The election.
    pub name: String,
    /// Print every change (ELECT.OBSERVE), one line each, until killed.
    #[arg(long)]
    pub watch: bool,
    /// One JSON object per line: {"candidate":..,"term":..,"value":..,"ttl_ms":..}.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[arg(required = true, value_name = "NAME")]
    pub names: Vec<String>,
    /// Print JSON: per name, LOCK.INFO's fields plus "queue" (LOCK.WAITERS).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct TopArgs {
    /// Time between refreshes.
    #[arg(short, long, value_parser = duration::parse_positive, default_value = "1s")]
    pub interval: Duration,
    /// Print the table once and exit.
    #[arg(long)]
    pub once: bool,
}

#[derive(Debug, Args)]
pub struct ReleaseArgs {
    #[arg(required = true, value_name = "NAME")]
    pub names: Vec<String>,
    /// The owner whose hold to drop (a run gives its command LOCK_OWNER).
    #[arg(long, env = "LOCK_OWNER")]
    pub owner: Option<String>,
    /// Drop a read hold of a read-write lock (LOCK.RELEASE ... READ).
    #[arg(long, conflicts_with = "write")]
    pub read: bool,
    /// Drop the write hold of a read-write lock (LOCK.RELEASE ... WRITE).
    #[arg(long)]
    pub write: bool,
}

impl ReleaseArgs {
    pub fn kind(&self) -> Kind {
        match (self.read, self.write) {
            (true, _) => Kind::Read,
            (_, true) => Kind::Write,
            _ => Kind::Exclusive,
        }
    }
}

#[derive(Debug, Args)]
pub struct ForceReleaseArgs {
    #[arg(required = true, value_name = "NAME")]
    pub names: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("redis-lock").chain(line.iter().copied()))
    }

    fn run(line: &[&str]) -> RunArgs {
        match parse(line).expect("parses").command {
            Command::Run(r) => r,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn run_defaults() {
        let r = run(&["run", "job", "--", "make", "-j2"]);
        assert_eq!(r.names, ["job"]);
        assert_eq!(r.command, ["make", "-j2"]);
        assert_eq!(r.lease, Duration::from_secs(30));
        assert_eq!(r.grace, Duration::from_secs(10));
        assert_eq!(r.on_lost, OnLost::Term);
        assert_eq!(r.conflict_exit_code, 1);
        let a = r.acquire("o".into()).expect("acquire");
        assert_eq!(a.wait, Wait::Forever);
        assert_eq!(a.kind, Kind::Exclusive);
        assert!(a.keepalive);
    }

    #[test]
    fn run_options() {
        let r = run(&[
            "run", "-n", "-E", "42", "--lease", "300ms", "--fence", "--owner", "me", "a", "b",
            "--", "sh", "-c", "exit 3",
        ]);
        let a = r.acquire("me".into()).expect("acquire");
        assert_eq!(a.wait, Wait::No);
        assert_eq!(a.names, ["a", "b"]);
        assert_eq!(r.conflict_exit_code, 42);
        assert_eq!(a.lease, Duration::from_millis(300));
        assert!(a.fence);
        let r = run(&["run", "--wait", "200ms", "--read", "x", "--", "true"]);
        let a = r.acquire("o".into()).expect("acquire");
        assert_eq!(a.wait, Wait::For(Duration::from_millis(200)));
        assert_eq!(a.kind, Kind::Read);
        let r = run(&["run", "-w", "0", "x", "--", "true"]);
        assert_eq!(r.acquire("o".into()).expect("acquire").wait, Wait::No);
        let r = run(&[
            "run",
            "--on-lost",
            "ignore",
            "--grace",
            "1s",
            "x",
            "--",
            "true",
        ]);
        assert_eq!(r.on_lost, OnLost::Ignore);
    }

    #[test]
    fn run_refuses() {
        assert!(parse(&["run", "job"]).is_err(), "no command");
        assert!(parse(&["run", "--", "true"]).is_err(), "no name");
        assert!(parse(&["run", "-n", "--wait", "1s", "x", "--", "true"]).is_err());
        assert!(parse(&["run", "--read", "--write", "x", "--", "true"]).is_err());
        assert!(parse(&["run", "--lease", "0", "x", "--", "true"]).is_err());
        assert!(parse(&["run", "--wait", "soon", "x", "--", "true"]).is_err());
        let r = run(&["run", "--read", "a", "b", "--", "true"]);
        assert!(r.acquire("o".into()).is_err());
        let r = run(&["run", "a", "a", "--", "true"]);
        assert!(r.acquire("o".into()).is_err());
        let r = run(&["run", "a", "--", "true"]);
        assert!(r.acquire(String::new()).is_err());
    }

    #[test]
    fn semaphore() {
        let r = run(&[
            "run",
            "--semaphore",
            "jobs:nightly:2",
            "-w",
            "5s",
            "--",
            "true",
        ]);
        assert!(r.names.is_empty());
        let a = r.acquire("o".into()).expect("acquire");
        assert_eq!(a.names, ["jobs:nightly"]);
        assert_eq!(a.semaphore, Some(2));
        assert_eq!(a.wait, Wait::For(Duration::from_secs(5)));
        assert!(a.keepalive);
        for bad in [
            "pool",
            "pool:0",
            ":2",
            "pool:x",
            "pool:-1",
            "pool:2147483648",
        ] {
            assert!(
                parse(&["run", "--semaphore", bad, "--", "true"]).is_err(),
                "{bad}"
            );
        }
        assert!(parse(&["run", "--semaphore", "p:2", "x", "--", "true"]).is_err());
        assert!(parse(&["run", "--semaphore", "p:2", "--read", "--", "true"]).is_err());
        assert!(parse(&["run", "--semaphore", "p:2147483647", "--", "true"]).is_ok());
    }

    fn usage(line: &[&str]) -> String {
        let raw: Vec<String> = line.iter().map(|s| s.to_string()).collect();
        match parse(line) {
            Ok(_) => panic!("{line:?} parses"),
            Err(e) => usage_error(&e, &raw),
        }
    }

    #[test]
    fn usage_errors_in_one_line() {
        let want = format!("the command to run follows --: {RUN_USAGE}");
        assert_eq!(usage(&["run", "job"]), want);
        assert_eq!(usage(&["run", "job", "make"]), want);
        assert_eq!(
            usage(&["run", "job", "ls", "-l"]),
            format!("unexpected argument '-l' found (the command to run follows --: {RUN_USAGE})")
        );
        for line in [
            &["run", "--lease", "0", "job", "--", "true"][..],
            &["status"],
            &["top", "--interval", "x"],
            &["nope"],
        ] {
            let m = usage(line);
            assert!(!m.contains('\n') && !m.starts_with("error"), "{m}");
            assert!(m.ends_with("--help)"), "{m}");
        }
        assert!(usage(&["status"]).ends_with("(see redis-lock status --help)"));
        assert!(
            usage(&["-u", "redis://h", "run", "--lease", "0", "j", "--", "true"])
                .ends_with("(see redis-lock run --help)")
        );
    }

    #[test]
    fn elect_and_leader() {
        let cli = parse(&["elect", "sched", "--", "./run", "-x"]).expect("parses");
        let Command::Elect(e) = cli.command else {
            panic!("not elect")
        };
        assert_eq!((e.name.as_str(), e.command.len()), ("sched", 2));
        assert_eq!(e.lease, Duration::from_secs(5));
        assert_eq!(e.grace, Duration::from_secs(10));
        assert_eq!(e.wait(), Wait::Forever);
        assert!(!e.again && e.candidate.is_none() && e.value.is_none());
        let cli = parse(&[
            "elect",
            "--candidate",
            "node a",
            "--value",
            "10.0.0.5:80",
            "--lease",
            "1s",
            "--wait",
            "0",
            "--again",
            "--kill-after",
            "2s",
            "sched",
            "--",
            "true",
        ])
        .expect("parses");
        let Command::Elect(e) = cli.command else {
            panic!("not elect")
        };
        assert_eq!(e.candidate.as_deref(), Some("node a"));
        assert_eq!(e.value.as_deref(), Some("10.0.0.5:80"));
        assert_eq!(
            (e.lease, e.grace),
            (Duration::from_secs(1), Duration::from_secs(2))
        );
        assert_eq!(e.wait(), Wait::No);
        assert!(e.again);
        assert!(
            parse(&["elect", "a", "b", "--", "true"]).is_err(),
            "one name"
        );
        assert!(parse(&["elect", "--lease", "0", "a", "--", "true"]).is_err());
        assert_eq!(
            usage(&["elect", "sched"]),
            format!("the command to run follows --: {ELECT_USAGE}")
        );
        let cli = parse(&["leader", "--watch", "--json", "sched"]).expect("parses");
        assert!(matches!(
            cli.command,
            Command::Leader(LeaderArgs {
                watch: true,
                json: true,
                ..
            })
        ));
    }

    #[test]
    fn global_url_and_other_commands() {
        let cli = parse(&["status", "--json", "a", "-u", "redis://h:1"]).expect("parses");
        assert_eq!(cli.url, "redis://h:1");
        assert!(matches!(
            cli.command,
            Command::Status(StatusArgs { json: true, .. })
        ));
        let cli = parse(&["release", "--owner", "o", "--write", "a"]).expect("parses");
        match cli.command {
            Command::Release(r) => {
                assert_eq!(r.kind(), Kind::Write);
                assert_eq!(r.owner.as_deref(), Some("o"));
            }
            other => panic!("{other:?}"),
        }
        assert!(parse(&["force-release", "a", "b"]).is_ok());
        assert!(parse(&["top", "--interval", "250ms"]).is_ok());
    }
}
