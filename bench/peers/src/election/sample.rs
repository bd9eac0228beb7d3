//! One hand-over sample: the first candidate leads, the second waits, a
//! fault hits the leader at a random point of its renewal period, and the
//! time until the standby's first line arrives is measured, with when the
//! old leader said it stopped leading.

use std::io;
use std::thread;
use std::time::{Duration, Instant};

use super::env::Env;
use super::process::{Line, Proc};
use super::system::{Fault, System};

/// Time the standby is left waiting before the fault (its keep-alives and
/// first polls run), plus a random part of up to `PHASE`: a leader renews
/// on a period (the module every L/2, etcd's keep-alives every TTL/3,
/// client-go every RetryPeriod) that would otherwise fall at the same place
/// before the fault in every sample.
const SETTLE: Duration = Duration::from_millis(300);
const PHASE: Duration = Duration::from_millis(2000);

/// Did this line say the candidate leads?
fn leads(system: System, l: &Line) -> bool {
    match system {
        System::Module => !l.stderr && l.text.starts_with("started "),
        System::Etcdctl => !l.stderr,
        System::EtcdLease | System::K8s => !l.stderr && l.text.starts_with("leading"),
    }
}

/// Did this line say the (old) leader stopped believing it leads?
fn stops(l: &Line) -> bool {
    l.stderr && (l.text.contains("lost") || l.text.contains("resigned"))
}

pub(super) struct Sample {
    pub(super) handover_ms: f64,
    /// When the old leader said it stopped leading (lost/resigned), after
    /// the fault.
    pub(super) old_stop_ms: Option<f64>,
}

/// The wall-clock unix ms a line states (`... at MS ...`): redis-lock's
/// `lost`/`resigned` lines say when it stopped believing it leads, which
/// may be before it printed them; so do the candidates of candidate/.
fn stated_ms(text: &str) -> Option<u128> {
    text.split(" at ")
        .nth(1)?
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// A number in [0, 1), different each call (xorshift seeded by the clock).
fn random_unit() -> f64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static STATE: AtomicU64 = AtomicU64::new(0);
    let mut x = STATE.load(Ordering::Relaxed);
    if x == 0 {
        x = (unix_ms() as u64) | 1;
    }
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    STATE.store(x, Ordering::Relaxed);
    (x >> 11) as f64 / (1u64 << 53) as f64
}

fn unix_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

fn ms_since(t0: Instant, t: Instant) -> f64 {
    t.saturating_duration_since(t0).as_secs_f64() * 1000.0
}

pub(super) fn sample(env: &Env, system: System, fault: Fault, i: usize) -> io::Result<Sample> {
    let name = format!(
        "s14-{}-{}-{i}-{}",
        system.name(),
        fault.name(),
        std::process::id()
    );
    let in_ns = fault == Fault::Cut;
    let mut leader = Proc::spawn(&env.argv(system, &name, "a", in_ns))?;
    let start_limit = Instant::now() + Duration::from_secs(20);
    if leader
        .wait_line(start_limit, |l| leads(system, l))
        .is_none()
    {
        return Err(io::Error::other(format!(
            "the first candidate did not lead within 20 s: {}",
            leader.transcript()
        )));
    }
    let mut standby = Proc::spawn(&env.argv(system, &name, "b", false))?;
    loop {
        if env.standby_waits(system, &name, &mut standby)? {
            break;
        }
        if Instant::now() > start_limit || standby.exited() {
            return Err(io::Error::other(format!(
                "the second candidate did not wait: {}",
                standby.transcript()
            )));
        }
        thread::sleep(Duration::from_millis(10));
    }
    thread::sleep(SETTLE + PHASE.mul_f64(random_unit()));
    standby.drain();
    if standby.lines.iter().any(|l| leads(system, l)) {
        return Err(io::Error::other(
            "the second candidate led before the fault",
        ));
    }
    let t0 = match fault {
        Fault::Clean | Fault::Kill => {
            let t0 = Instant::now();
            leader.signal(if fault == Fault::Clean {
                libc::SIGTERM
            } else {
                libc::SIGKILL
            });
            t0
        }
        Fault::Cut => {
            let ns = env.netns.as_ref().expect("netns");
            ns.cut()?;
            // After the link is down (`ip` has returned).
            Instant::now()
        }
    };
    // The fault on the wall clock, for the times the old leader states.
    let t0_wall = unix_ms() as f64 - t0.elapsed().as_secs_f64() * 1000.0;
    let got = standby.wait_line(t0 + system.limit(), |l| leads(system, l));
    // The old leader's own word, if it says it stopped (at most 1 s more).
    let old_stop = got.and_then(|t| {
        let arrived = leader.wait_line(t.max(Instant::now()) + Duration::from_secs(1), stops)?;
        let line = leader.lines.iter().find(|l| l.at == arrived)?;
        Some(match stated_ms(&line.text) {
            Some(ms) => ms as f64 - t0_wall,
            None => ms_since(t0, arrived),
        })
    });
    if fault == Fault::Cut {
        env.heal()?;
    }
    let handover = got.map(|t| ms_since(t0, t));
    leader.stop(Duration::ZERO);
    // The new leader resigns (its lease would end in the server anyway).
    standby.stop(Duration::from_secs(2));
    match handover {
        Some(h) => Ok(Sample {
            handover_ms: h,
            old_stop_ms: old_stop,
        }),
        None => Err(io::Error::other(format!(
            "no hand-over within {} s; new: {}; old: {}",
            system.limit().as_secs(),
            standby.transcript(),
            leader.transcript()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_stated_time() {
        assert_eq!(
            stated_ms("redis-lock: lost s14 term 7 at 1764185000123 (deadline)"),
            Some(1_764_185_000_123)
        );
        assert_eq!(stated_ms("resigned at 12"), Some(12));
        assert_eq!(stated_ms("waiting"), None);
    }
}
