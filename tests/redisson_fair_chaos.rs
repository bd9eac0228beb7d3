//! Redisson fair-lock clients (tests/common/fair.rs, running Redisson's
//! RFairLock scripts) and LOCK.* callers on one name, under holders that
//! die (issue 28).
//!
//! - Mixed contention: fair clients and `LOCK.ACQUIRE ... BLOCK` callers loop
//!   lock / critical section / unlock on one name while some holders die
//!   (a module holder's connection killed, a fair holder that drops its
//!   connections without unlocking; their short leases then end) and a
//!   module waiter's connection is killed. Never two holders at once,
//!   every caller served in its turn, fair clients do not spin, nothing left.
//! - A replica (with and without the module), the AOF and a restart from
//!   the AOF agree after the module kept a free lock for a dead fair waiter,
//!   pruned it at its deadline and granted its own waiter.

use crate::common;
use common::dataset::{aof_matches, differences, replica_matches, visible_data};
use common::fair::*;
use common::*;

use std::sync::Mutex;
use std::thread;

/// The name every caller of the mixed test contends for.
const NAME: &str = "chaos";
/// Set (NX) by whoever is in the critical section, deleted on the way out.
const MARKER: &str = "inside:{chaos}";

/// Lock / critical section / unlock rounds per caller.
const ROUNDS: usize = 10;
/// The round in which the first fair client and the first module caller
/// die holding the lock, and the second module caller's extra waiter is
/// killed.
const DEATH_ROUND: usize = 4;
/// Lease of a holder that dies: how long the lock stays with a dead owner.
const DYING_LEASE_MS: i64 = 400;
/// Lease of every other hold: longer than the test, so that a caller that
/// is never woken shows as a failure (a BLOCK or a fair wait running out),
/// never as a slow pass.
const LEASE_MS: i64 = 60_000;
/// How long a module caller waits for its turn.
const BLOCK_MS: &str = "10000";
const FAIR_CALLERS: usize = 3;
const MODULE_CALLERS: usize = 3;
/// Module callers' numbers in the grant log come after the fair callers'.
const MODULE: usize = FAIR_CALLERS;

/// A Redisson owner: a client uuid (one per caller and life) and a thread id.
fn fair_owner(caller: usize, life: usize) -> String {
    format!("5f0c1d2e-0000-4000-8000-{:06}{:06}:1", caller, life)
}

fn module_owner(caller: usize, life: usize) -> String {
    format!("module-{caller}-life-{life}")
}

/// Everything one caller saw.
#[derive(Default, Debug)]
struct Tally {
    grants: usize,
    /// Fair clients: script runs of their lock() calls, in all and at most
    /// in one call.
    attempts: u32,
    max_attempts: u32,
    unlocks: u32,
    /// For each grant: the length of the grant log when the caller asked,
    /// and its own place in it.
    windows: Vec<(usize, usize)>,
}

/// Whoever holds `NAME` runs this: nobody else is inside (the marker), the
/// lock is `owner`'s alone with one hold (as its hash and as LOCK.INFO
/// say), and the grant is logged (in lock order: the log is written inside
/// the critical section). Returns the grant's place in the log.
fn critical_section(
    con: &mut Connection,
    owner: &str,
    caller: usize,
    log: &Mutex<Vec<usize>>,
    violations: &Mutex<Vec<String>>,
) -> usize {
    let mut seen = Vec::new();
    let entered: Option<String> = q(con, &["SET", MARKER, owner, "NX"]);
    if entered.is_none() {
        let inside: Option<String> = q(con, &["GET", MARKER]);
        seen.push(format!("{owner} got the lock while {inside:?} was inside"));
    }
    let seq = {
        let mut log = log.lock().expect("grant log");
        log.push(caller);
        log.len() - 1
    };
    let hash = hgetall(con, NAME);
    if hash != [(owner.to_string(), "1".to_string())] {
        seen.push(format!("{owner} holds the lock but its hash is {hash:?}"));
    }
    let info_owner = lock_field(con, NAME, "owner");
    if info_owner.as_deref() != Some(owner) {
        seen.push(format!(
            "{owner} holds the lock but LOCK.INFO says {info_owner:?}"
        ));
    }
    if entered.is_some() {
        let left: Option<String> = q(con, &["GETDEL", MARKER]);
        if left.as_deref() != Some(owner) {
            seen.push(format!("{owner} left, the marker was {left:?}"));
        }
    }
    if !seen.is_empty() {
        violations.lock().expect("violations").extend(seen);
    }
    seq
}

fn log_len(log: &Mutex<Vec<usize>>) -> usize {
    log.lock().expect("grant log").len()
}

/// A fair caller: `lock()` (Redisson's loop, 5 minutes' queue wait), the
/// critical section, `unlock()`. In [`DEATH_ROUND`] caller 0 takes the lock
/// with a short lease and dies holding it (its connections dropped without
/// an unlock); it comes back as a new client (a new uuid).
fn fair_caller(
    server: &Server,
    caller: usize,
    log: &Mutex<Vec<usize>>,
    violations: &Mutex<Vec<String>>,
) -> Tally {
    let mut tally = Tally::default();
    let mut work = server.client();
    let mut life = 0;
    let mut client = FairClient::new(server, NAME, &fair_owner(caller, life));
    for round in 0..ROUNDS {
        let dies = caller == 0 && round == DEATH_ROUND;
        client.lease_ms = if dies { DYING_LEASE_MS } else { LEASE_MS };
        let asked = log_len(log);
        let wakes = client.lock();
        tally.attempts += wakes.attempts;
        tally.max_attempts = tally.max_attempts.max(wakes.attempts);
        let owner = client.owner.clone();
        let seq = critical_section(&mut work, &owner, caller, log, violations);
        tally.grants += 1;
        tally.windows.push((asked, seq));
        if dies {
            drop(client);
            life += 1;
            client = FairClient::new(server, NAME, &fair_owner(caller, life));
        } else {
            tally.unlocks += 1;
            let reply = client.unlock();
            if reply != Value::Int(1) {
                violations
                    .lock()
                    .expect("violations")
                    .push(format!("{owner}'s unlock replied {reply:?}"));
            }
        }
    }
    tally
}

/// `CLIENT KILL ID id` from `con`: that one connection closed.
fn kill_client(con: &mut Connection, id: i64) {
    let killed: i64 = q(con, &["CLIENT", "KILL", "ID", &id.to_string()]);
    assert_eq!(killed, 1, "CLIENT KILL ID {id}");
}

/// A module caller: `LOCK.ACQUIRE ... BLOCK`, the critical section,
/// `LOCK.RELEASE`. In [`DEATH_ROUND`] caller 0 takes the lock with a short
/// lease and its connection is killed while it holds it; caller 1 first
/// sends an extra `LOCK.ACQUIRE ... BLOCK` on a connection of its own and
/// kills it once the server has run the command (waiting, or granted: then
/// a dead holder too).
fn module_caller(
    server: &Server,
    caller: usize,
    log: &Mutex<Vec<usize>>,
    violations: &Mutex<Vec<String>>,
) -> Tally {
    let mut tally = Tally::default();
    let mut work = server.client();
    let mut con = server.client();
    let mut life = 0;
    for round in 0..ROUNDS {
        let dies = caller == 0 && round == DEATH_ROUND;
        if caller == 1 && round == DEATH_ROUND {
            let mut doomed = server.client();
            let id = client_id(&mut doomed);
            let owner = format!("{}-doomed", module_owner(caller, life));
            let px = DYING_LEASE_MS.to_string();
            send(
                &mut doomed,
                &["LOCK.ACQUIRE", NAME, &owner, "PX", &px, "BLOCK", BLOCK_MS],
            );
            let entry = format!("id={id} ");
            wait_until("the doomed LOCK.ACQUIRE ran", || {
                let list: String = q(&mut work, &["CLIENT", "LIST", "ID", &id.to_string()]);
                assert!(list.starts_with(&entry), "CLIENT LIST ID {id}: {list}");
                list.contains(" cmd=lock.acquire ")
            });
            kill_client(&mut work, id);
        }
        let owner = module_owner(caller, life);
        let px = if dies { DYING_LEASE_MS } else { LEASE_MS }.to_string();
        let asked = log_len(log);
        let reply: Value = q(
            &mut con,
            &["LOCK.ACQUIRE", NAME, &owner, "PX", &px, "BLOCK", BLOCK_MS],
        );
        assert_eq!(
            reply,
            Value::Int(1),
            "{owner} was not served in {BLOCK_MS} ms"
        );
        let seq = critical_section(&mut work, &owner, MODULE + caller, log, violations);
        tally.grants += 1;
        tally.windows.push((asked, seq));
        if dies {
            let id = client_id(&mut con);
            kill_client(&mut work, id);
            assert!(
                raw(&mut con, &["PING"]).is_err(),
                "{owner}'s connection outlived CLIENT KILL"
            );
            con = server.client();
            life += 1;
        } else {
            let left: i64 = q(&mut con, &["LOCK.RELEASE", NAME, &owner]);
            assert_eq!(left, 0, "{owner}'s release");
        }
    }
    tally
}

/// `cmdstat_eval` calls in INFO commandstats.
fn eval_calls(server: &Server) -> u64 {
    server
        .info_field("commandstats", "cmdstat_eval")
        .and_then(|v| {
            v.split(',')
                .find_map(|kv| kv.strip_prefix("calls="))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

/// Three fair clients and three LOCK.ACQUIRE BLOCK callers take one lock
/// [`ROUNDS`] times each while a fair holder and a module holder die holding
/// it and a module waiter is killed:
/// - never two holders: the critical section's marker is never found set,
///   and the lock's hash and LOCK.INFO name the one who entered;
/// - everyone is served in its turn: every caller gets its [`ROUNDS`]
///   grants, and while one waits, nobody else is served more than twice
///   (once if it was already queued, once more if its next request reached
///   the server before this one's);
/// - fair clients do not spin: their script runs per grant stay at what
///   Redisson's loop needs when woken in turn (see the bound below);
/// - nothing is left behind: no lock hash, fair queue, deadlines, unlock
///   latch or marker, no module waiter.
#[test]
fn fair_clients_and_module_callers_share_a_lock_while_holders_die() {
    let server = Server::start();
    let mut con = server.client();
    let _: () = q(&mut con, &["CONFIG", "RESETSTAT"]);
    let log = Mutex::new(Vec::new());
    let violations = Mutex::new(Vec::new());
    let (fair, module): (Vec<Tally>, Vec<Tally>) = thread::scope(|s| {
        let fair: Vec<_> = (0..FAIR_CALLERS)
            .map(|i| {
                let (server, log, violations) = (&server, &log, &violations);
                s.spawn(move || fair_caller(server, i, log, violations))
            })
            .collect();
        let module: Vec<_> = (0..MODULE_CALLERS)
            .map(|i| {
                let (server, log, violations) = (&server, &log, &violations);
                s.spawn(move || module_caller(server, i, log, violations))
            })
            .collect();
        let join = |h: thread::ScopedJoinHandle<'_, Tally>| h.join().expect("a caller failed");
        (
            fair.into_iter().map(join).collect(),
            module.into_iter().map(join).collect(),
        )
    });

    let violations = violations.into_inner().expect("violations");
    assert!(violations.is_empty(), "{}", violations.join("\n"));

    // Everyone served every round, in its turn.
    let log = log.into_inner().expect("grant log");
    let tallies: Vec<&Tally> = fair.iter().chain(module.iter()).collect();
    assert_eq!(log.len(), tallies.len() * ROUNDS);
    let mut worst = (0, 0, 0);
    for (me, tally) in tallies.iter().enumerate() {
        assert_eq!(tally.grants, ROUNDS, "caller {me}");
        for &(asked, got) in &tally.windows {
            let mut served = vec![0; tallies.len()];
            for &other in &log[asked..got] {
                served[other] += 1;
            }
            for (other, &n) in served.iter().enumerate() {
                if other != me && n > worst.0 {
                    worst = (n, me, other);
                }
            }
        }
    }
    // No spin. Redisson's loop runs its script once to queue, once after
    // subscribing, then once per wake: a fair client woken in its turn
    // needs about 3 runs per grant (measured on 2 cores over 40 runs, two
    // and four at a time: 3 to 18 per grant on average, 4 to 450 at most in
    // one lock()). More come from wakes that were not its turn
    // (a Redisson unlock messages the head of the fair queue even when a
    // module waiter queued before it is served instead; waiters behind a
    // dying holder wake when its lease ends) and from Redisson's own
    // retry-at-once (ttl 0) while a free lock is kept for another fair
    // client until that one's script takes it: one round trip of a woken
    // client, some 10-20 runs of each spinning one, more when the machine
    // is loaded and the woken client's thread waits for a core (a turn of
    // 30 ms is some 500 runs). 100 per grant on average, 5000 in one
    // lock(), leave room for several such slow turns; a lock kept free for
    // a waiter that never takes it spins the others for as long as it is
    // kept: 10 to 20 runs per ms each, over ten thousand in a second.
    let (fair_grants, fair_attempts, unlocks) = fair.iter().fold((0, 0, 0), |acc, t| {
        (
            acc.0 + t.grants as u32,
            acc.1 + t.attempts,
            acc.2 + t.unlocks,
        )
    });
    let max_attempts = fair.iter().map(|t| t.max_attempts).max().unwrap_or(0);
    eprintln!(
        "fair clients: {fair_grants} grants, {fair_attempts} script runs, at most {max_attempts} in one lock()"
    );
    assert!(
        fair_attempts <= 100 * fair_grants,
        "fair clients ran their script {fair_attempts} times for {fair_grants} grants"
    );
    assert!(
        max_attempts <= 5000,
        "a fair client ran its script {max_attempts} times for one grant"
    );
    // The server counted the same: every EVAL is a fair client's attempt or
    // unlock.
    assert_eq!(eval_calls(&server), u64::from(fair_attempts + unlocks));

    // Nothing left once the dead holders' leases have ended (the last grant
    // may have been a dying holder's).
    wait_until("every key gone", || q::<i64>(&mut con, &["DBSIZE"]) == 0);
    assert_eq!(waiters(&mut con, NAME), 0);
    assert_eq!(queued(&mut con, NAME), 0);

    // FIFO, checked last: the other checks hold even when it fails.
    let (most, waiter, other) = worst;
    eprintln!("at most {most} grants of one caller while another waited");
    assert!(
        most <= 2,
        "caller {other} was served {most} times while caller {waiter} waited \
         (callers 0-2 fair, 3-5 module); grant log {log:?}"
    );
}

// ---- A replica and the AOF agree --------------------------------------

const OWNER_A: &str = "8743c9c0-0795-4907-87fd-6c719a6b4586:1";
const OWNER_B: &str = "8743c9c0-0795-4907-87fd-6c719a6b4586:57";
const OWNER_C: &str = "0e5a2f61-3c1d-4a8b-9f0e-2b7d6c4e1a90:1";

/// Whether each replica has applied everything and readers see the same
/// keys and values on it as on the master.
fn replicas_match(master: &Server, replicas: &[&Server]) {
    for replica in replicas {
        if let Err(diff) = replica_matches(master, replica) {
            panic!("replica {} differs from its master:\n{diff}", replica.port);
        }
    }
}

/// A replica of `master`, started without waiting for its link (so that two
/// sync side by side).
fn replica_of(master: &Server, mut config: Config) -> Server {
    let (host, port) = (master.host().to_string(), master.port.to_string());
    config.args.extend(["--replicaof".into(), host, port]);
    config.start()
}

fn dbsize(server: &Server) -> i64 {
    q(&mut server.client(), &["DBSIZE"])
}

/// A master with the AOF on, a replica with the module and one without. On
/// the master:
/// 1. fair client A holds `res`; module-x waits (BLOCK); A's Redisson
///    unlock hands it to module-x (lease 600 ms);
/// 2. fair client B queues once (one tryLock with a 1 ms wait) and is never
///    heard of again: due 1 ms after module-x's lease; module-w then waits;
/// 3. LOCK.RELEASE of module-x: the lock is kept for B (B queued first), so
///    nobody else gets it, until B's deadline: the module prunes B and
///    grants module-w;
/// 4. fair client C queues once behind module-w (5 minutes' wait).
///
/// The replicas then hold what the master holds (module-w's hash, C's queue
/// entry and deadline); the AOF reloaded gives it back, and so does a
/// restart from it, after which module-w's release leaves the lock to C
/// (its channel gets `0`, LOCK.ACQUIRE gets nothing) and C takes it. In the
/// end nothing is left on any of them.
#[test]
fn replicas_and_aof_agree_after_a_dead_fair_waiter_is_pruned() {
    let mut master = Config::default().aof().start();
    let (replica, bare) = (
        replica_of(&master, Config::default()),
        replica_of(&master, Config::default().without_module()),
    );
    for r in [&replica, &bare] {
        wait_until("replica link up", || {
            r.info_field("replication", "master_link_status").as_deref() == Some("up")
        });
    }
    let mut con = master.client();

    // 1. A Redisson unlock hands the lock to the module's waiter.
    let mut a = FairClient::new(&master, "res", OWNER_A);
    a.lock();
    let mut x = module_waiter(&master, &mut con, "res", "module-x", "600", "10000");
    assert_eq!(a.unlock(), Value::Int(1));
    assert_served(&mut con, &mut x, "res", "module-x");

    // 2. B queues and dies; module-w queues after it.
    assert!(try_acquire(&mut con, "res", OWNER_B, LEASE_MS, 1).is_some());
    let due_b: i64 = q(&mut con, &["ZSCORE", &timeout_key("res"), OWNER_B]);
    let mut w = module_waiter(&master, &mut con, "res", "module-w", "120000", "10000");

    // 3. Free, kept for B until its deadline, then module-w's.
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "res", "module-x"]), 0);
    assert_eq!(
        acquire(&mut con, "res", "module-y", &["PX", "1000"]),
        Value::Nil,
        "LOCK.ACQUIRE took a lock kept for B or granted to module-w"
    );
    assert_eq!(recv(&mut w).expect("module-w's reply"), Value::Int(1));
    let granted_at = pexpiretime(&mut con, "res") - 120_000;
    assert!(
        granted_at >= due_b,
        "module-w got the lock at {granted_at}, before B's deadline {due_b}"
    );
    assert_eq!(hgetall(&mut con, "res"), [("module-w".into(), "1".into())]);
    assert!(!exists(&mut con, &queue_key("res")), "B not pruned");
    assert!(!exists(&mut con, &timeout_key("res")), "B's deadline left");

    // 4. C queues behind module-w.
    assert!(try_acquire(&mut con, "res", OWNER_C, LEASE_MS, DEFAULT_WAIT_MS).is_some());
    assert_eq!(dbsize(&master), 3, "res, C's queue entry and deadline");

    replicas_match(&master, &[&replica, &bare]);
    if let Err(diff) = aof_matches(&master) {
        panic!("the AOF reloaded differs:\n{diff}");
    }
    let before = visible_data(&master);
    drop((con, x, w));
    master.restart();
    let diff = differences(&before, &visible_data(&master), "the restart");
    assert!(diff.is_empty(), "{}", diff.join("\n"));

    // After the restart module-w's release leaves the lock to C.
    let mut con = master.client();
    let mut sub = master.client();
    let mut pubsub = sub.as_pubsub();
    pubsub
        .subscribe(own_channel("res", OWNER_C))
        .expect("subscribe");
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "res", "module-w"]), 0);
    let message = pubsub.get_message().expect("a message to C");
    assert_eq!(message.get_payload::<String>().expect("payload"), "0");
    assert_eq!(
        acquire(&mut con, "res", "module-y", &["PX", "1000"]),
        Value::Nil,
        "LOCK.ACQUIRE took a lock kept for C"
    );
    assert_eq!(
        try_acquire(&mut con, "res", OWNER_C, LEASE_MS, DEFAULT_WAIT_MS),
        None
    );
    assert_eq!(hgetall(&mut con, "res"), [(OWNER_C.into(), "1".into())]);
    assert_eq!(release(&mut con, "res", OWNER_C, LEASE_MS), Value::Int(1));

    assert_eq!(dbsize(&master), 0, "keys left behind");
    replicas_match(&master, &[&replica, &bare]);
    assert_eq!(dbsize(&replica), 0);
    assert_eq!(dbsize(&bare), 0);
}

// ---- FIFO across a fair client's turns --------------------------------

/// A fair client that was served and queued again (the same owner, as
/// Redisson's `<uuid>:<thread id>` is) queued after a module waiter that
/// came while its first entry was queued: its new entry goes after that
/// waiter.
#[test]
fn a_fair_client_queued_again_goes_after_an_earlier_module_waiter() {
    let server = Server::start();
    let mut con = server.client();
    acquire(&mut con, "res", "module-x", &["PX", "60000"]);
    assert!(try_acquire(&mut con, "res", OWNER_A, LEASE_MS, DEFAULT_WAIT_MS).is_some());
    assert!(try_acquire(&mut con, "res", OWNER_B, LEASE_MS, DEFAULT_WAIT_MS).is_some());
    // module-w comes after A and B.
    let mut w = module_waiter(&server, &mut con, "res", "module-w", "60000", "5000");
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "res", "module-x"]), 0);
    // A, then B (both queued before module-w).
    assert_eq!(
        try_acquire(&mut con, "res", OWNER_A, LEASE_MS, DEFAULT_WAIT_MS),
        None
    );
    assert_eq!(release(&mut con, "res", OWNER_A, LEASE_MS), Value::Int(1));
    assert_eq!(
        try_acquire(&mut con, "res", OWNER_B, LEASE_MS, DEFAULT_WAIT_MS),
        None
    );
    // A asks again: queued after module-w.
    assert!(try_acquire(&mut con, "res", OWNER_A, LEASE_MS, DEFAULT_WAIT_MS).is_some());
    assert_eq!(release(&mut con, "res", OWNER_B, LEASE_MS), Value::Int(1));
    assert_eq!(recv(&mut w).expect("module-w's reply"), Value::Int(1));
    assert_eq!(hgetall(&mut con, "res"), [("module-w".into(), "1".into())]);
    assert_eq!(q::<i64>(&mut con, &["LOCK.RELEASE", "res", "module-w"]), 0);
    assert_eq!(
        try_acquire(&mut con, "res", OWNER_A, LEASE_MS, DEFAULT_WAIT_MS),
        None
    );
    assert_eq!(release(&mut con, "res", OWNER_A, LEASE_MS), Value::Int(1));
    assert_eq!(q::<i64>(&mut con, &["DBSIZE"]), 0, "keys left behind");
}
