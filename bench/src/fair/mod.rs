//! S17 (fair-lock): Redisson `RFairLock` clients and the module's callers on
//! one hot lock (issue 28: both kinds in one FIFO order).
//!
//! - **fair**: Redisson's `lock()` with our copies of its scripts
//!   (`scripts/redisson-fair-*.lua`, by `EVALSHA`): the acquire script
//!   (`ttl` variant, wait = Redisson's `fairLockWaitTimeout` default of
//!   300 s, lease = the watchdog's 30 s); nil is the grant. On a ttl the
//!   client subscribes to its own channel
//!   `redisson_lock__channel:{name}:<owner>` on its own pub/sub connection,
//!   tries again, and then loops: wait for a message or the ttl (a ttl of 0:
//!   retry at once, taking a message already there; below 0: a message
//!   only), try again. Unsubscribed (not waiting for the answer) once granted.
//!   `unlock()` = the release script (must answer 1), then `DEL` of its
//!   unlock latch, as Redisson does after the reply.
//! - **module**: `LOCK.ACQUIRE name owner PX 30000 BLOCK 0` (must answer 1)
//!   and `LOCK.RELEASE name owner` (must answer 0).
//!
//! Cells, 16 closed-loop clients on one lock, critical section one round
//! trip (`INCR` of the guarded counter `{name}:data`): all
//! module, all fair, mixed 8 + 8 (module loaded), and all fair on a plain
//! redis-server without the module (Redisson's own baseline). Measured per
//! kind: grants/s, share of the grants, wait (first acquire sent -> grant;
//! waits open at the end counted so far) p50/p99, acquire scripts per fair
//! grant (the spin measure), and how fair waits ended (a message on the
//! own channel or the ttl running out).
//!
//! Mutual exclusion: one holder slot for both kinds, taken when a grant
//! arrives and freed just before the release is sent; a grant that finds it
//! taken is a violation (the critical section's round trip is what lets a
//! second grant reach the generator meanwhile); every `INCR` must answer
//! the critical sections completed so far + 1, and the counter the total at
//! the end. Every reply is checked. At the end of the window
//! every waiter keeps waiting until granted (then releases and stops), for
//! at most `DRAIN`; a fair client still waiting then leaves the queue with
//! `acquireFailed` (an error: the lock was not handed on), a module caller
//! closes its connection. After each run the lock, its queue and its
//! timeout set must be gone and no module waiter left.
//!
//! Offers: [`s17`]. The parts: `cells` (who runs in each cell), `shared`
//! (one run's state: the holder slot, the counts, the lock's names),
//! `clients` (the module caller and Redisson's fair client), `run` (the
//! servers, one run and its figures, the check after it) and `report` (the
//! cells' medians, the table, the bar).

mod cells;
mod clients;
mod report;
mod run;
mod shared;

use std::io;
use std::time::Instant;

use self::cells::{Kind, CELLS, CLIENTS};
use self::report::CellRuns;
use self::run::{run_once, Target};
use crate::report::{ms, rate, Section, INTERFERENCE_PCT, RETRIES};
use crate::server;
use crate::Opts;

fn progress(started: Instant, msg: &str) {
    eprintln!("[{:>6.1}s] {msg}", started.elapsed().as_secs_f64());
}

pub async fn s17(opts: &Opts, started: Instant) -> io::Result<Section> {
    let reps = opts.reps(crate::options::REPS_S17);
    let mut section = Section::new(
        "S17",
        format!(
            "Redisson fair-lock clients and module callers on one hot lock, {CLIENTS} clients, critical section one INCR round trip: grants/s, share, wait p50/p99 per kind"
        ),
    );
    let module_target = Target::start(opts, true).await?;
    // The same redis-server without the module: Redisson's own baseline.
    let plain_target = Target::start(opts, false).await?;
    let mut cells: Vec<CellRuns> = CELLS
        .iter()
        .map(|&spec| CellRuns {
            spec,
            runs: Vec::new(),
        })
        .collect();
    let mut n = 0u64;
    for _ in 0..reps {
        for cell in cells.iter_mut() {
            let t = if cell.spec.with_module {
                &module_target
            } else {
                &plain_target
            };
            let mut attempt = 0;
            loop {
                n += 1;
                let r = run_once(opts, t, &cell.spec, n).await?;
                section.violations.extend(r.violations.iter().cloned());
                section.errors.extend(r.errors.iter().cloned());
                let kind_text = |k: Kind| {
                    r.kinds[k.index()].as_ref().map_or(String::new(), |x| {
                        format!(
                            ", {} {}/s share {:.2} p99 {} ms",
                            k.name(),
                            rate(x.rate),
                            x.share,
                            ms(x.lat.p99)
                        )
                    })
                };
                progress(
                    started,
                    &format!(
                        "S17 {}: {}/s p99 {} ms{}{} (server {:.0}%, gen {:.0}%, others {:.0}%)",
                        cell.spec.name,
                        rate(r.rate),
                        ms(r.lat.p99),
                        kind_text(Kind::Module),
                        kind_text(Kind::Fair),
                        r.server_cpu,
                        r.generator_cpu,
                        r.others_cpu
                    ),
                );
                if r.others_cpu > INTERFERENCE_PCT && attempt < RETRIES {
                    section.discarded.push(r.json());
                    let waited = server::wait_for_quiet(t.server.pid(), INTERFERENCE_PCT);
                    progress(
                        started,
                        &format!(
                            "  other processes were busy: waited {:.1} s for quiet, measuring again",
                            waited.as_secs_f64()
                        ),
                    );
                    attempt += 1;
                    continue;
                }
                if r.others_cpu > INTERFERENCE_PCT {
                    section.disturbed_kept += 1;
                }
                cell.runs.push(r);
                break;
            }
        }
    }
    for mut t in [module_target, plain_target] {
        if !t.server.alive() {
            section.errors.push(format!(
                "redis-server died during S17; log:\n{}",
                t.server.log_tail(20)
            ));
        }
    }
    report::write(&mut section, opts, reps, &cells);
    Ok(section)
}
