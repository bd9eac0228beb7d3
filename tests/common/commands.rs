//! The module's commands as the tests know them: one [`Cmd`] per `LOCK.*`,
//! `SEM.*`, `LATCH.*` and `ELECT.*` command, matched by name against what the
//! server registers (`COMMAND LIST FILTERBY MODULE lock`). The fuzzer (tests/fuzz.rs) and the
//! ACL tests (tests/acl_limits.rs) take their lists from the server through
//! [`known`], and match on `Cmd` without a catch-all, so a command added to
//! the module fails them (by name) until it is added here, and then fails to
//! compile until each has said how to call it; tests/catalog.rs holds this
//! table and the docs to the server's.

use redis::Connection;

/// A command of the module.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Cmd {
    Acquire,
    RAcquire,
    WAcquire,
    MAcquire,
    MRelease,
    Release,
    Renew,
    ForceRelease,
    Info,
    Waiters,
    Queues,
    Session,
    Cancel,
    SemInit,
    SemAcquire,
    SemRelease,
    SemRenew,
    SemAdd,
    SemTake,
    SemGive,
    SemInfo,
    LatchInit,
    LatchCountDown,
    LatchAwait,
    LatchInfo,
    ElectCampaign,
    ElectResign,
    ElectProclaim,
    ElectLeader,
    ElectObserve,
}

impl Cmd {
    pub const ALL: [Cmd; 30] = [
        Cmd::Acquire,
        Cmd::RAcquire,
        Cmd::WAcquire,
        Cmd::MAcquire,
        Cmd::MRelease,
        Cmd::Release,
        Cmd::Renew,
        Cmd::ForceRelease,
        Cmd::Info,
        Cmd::Waiters,
        Cmd::Queues,
        Cmd::Session,
        Cmd::Cancel,
        Cmd::SemInit,
        Cmd::SemAcquire,
        Cmd::SemRelease,
        Cmd::SemRenew,
        Cmd::SemAdd,
        Cmd::SemTake,
        Cmd::SemGive,
        Cmd::SemInfo,
        Cmd::LatchInit,
        Cmd::LatchCountDown,
        Cmd::LatchAwait,
        Cmd::LatchInfo,
        Cmd::ElectCampaign,
        Cmd::ElectResign,
        Cmd::ElectProclaim,
        Cmd::ElectLeader,
        Cmd::ElectObserve,
    ];

    /// The name as the server registers it (and words its arity error).
    pub fn name(self) -> &'static str {
        match self {
            Cmd::Acquire => "lock.acquire",
            Cmd::RAcquire => "lock.racquire",
            Cmd::WAcquire => "lock.wacquire",
            Cmd::MAcquire => "lock.macquire",
            Cmd::MRelease => "lock.mrelease",
            Cmd::Release => "lock.release",
            Cmd::Renew => "lock.renew",
            Cmd::ForceRelease => "lock.forcerelease",
            Cmd::Info => "lock.info",
            Cmd::Waiters => "lock.waiters",
            Cmd::Queues => "lock.queues",
            Cmd::Session => "lock.session",
            Cmd::Cancel => "lock.cancel",
            Cmd::SemInit => "sem.init",
            Cmd::SemAcquire => "sem.acquire",
            Cmd::SemRelease => "sem.release",
            Cmd::SemRenew => "sem.renew",
            Cmd::SemAdd => "sem.add",
            Cmd::SemTake => "sem.take",
            Cmd::SemGive => "sem.give",
            Cmd::SemInfo => "sem.info",
            Cmd::LatchInit => "latch.init",
            Cmd::LatchCountDown => "latch.countdown",
            Cmd::LatchAwait => "latch.await",
            Cmd::LatchInfo => "latch.info",
            Cmd::ElectCampaign => "elect.campaign",
            Cmd::ElectResign => "elect.resign",
            Cmd::ElectProclaim => "elect.proclaim",
            Cmd::ElectLeader => "elect.leader",
            Cmd::ElectObserve => "elect.observe",
        }
    }

    /// The command of a name, in any case.
    pub fn from_name(name: &[u8]) -> Option<Cmd> {
        Cmd::ALL
            .into_iter()
            .find(|c| c.name().as_bytes().eq_ignore_ascii_case(name))
    }
}

/// The module's commands as the server registers them, by name.
pub fn registered(con: &mut Connection) -> Vec<String> {
    let mut names: Vec<String> = redis::cmd("COMMAND")
        .arg(&["LIST", "FILTERBY", "MODULE", "lock"])
        .query(con)
        .expect("COMMAND LIST FILTERBY MODULE lock");
    names.sort();
    names
}

/// `registered` as commands; `Err` names every registered command this
/// table lacks and every entry the server does not register, for a test
/// (`who`: "the fuzzer", ...) to fail with.
pub fn known(registered: &[String], who: &str) -> Result<Vec<Cmd>, String> {
    let mut problems = Vec::new();
    let mut cmds = Vec::new();
    for name in registered {
        match Cmd::from_name(name.as_bytes()) {
            Some(cmd) => cmds.push(cmd),
            None => problems.push(format!(
                "{} is registered but {who} has no entry for it: add it to Cmd in \
                 tests/common/commands.rs, then give it what the compiler asks for \
                 (the fuzzer's grammar, the ACL tests' example call)",
                name.to_uppercase()
            )),
        }
    }
    for cmd in Cmd::ALL {
        if !cmds.contains(&cmd) {
            problems.push(format!(
                "{} is in Cmd (tests/common/commands.rs) but the server does not register it",
                cmd.name().to_uppercase()
            ));
        }
    }
    if problems.is_empty() {
        cmds.sort();
        Ok(cmds)
    } else {
        Err(problems.join("\n"))
    }
}
