//! S10 (cli-cost): what `redis-lock run NAME -- true` costs over `true`
//! alone, uncontended: the wall time of each, run one after the other
//! (alternating, so the machine's drift hits both alike) against the
//! scenario's server, `RUNS` pairs per repetition. The bar is on the
//! difference of the medians.

use std::io;
use std::process::{Command, Stdio};
use std::time::Instant;

use serde_json::json;

use crate::report::{Bar, Section};
use crate::stats::{median, percentile};
use crate::Ctx;

/// Pairs of runs (`true`, then `redis-lock run ... -- true`) per repetition.
const RUNS: usize = 40;
const RUNS_QUICK: usize = 15;
/// The most `redis-lock run` may add to a command, in ms.
const LIMIT_MS: f64 = 10.0;

fn timed(cmd: &mut Command) -> io::Result<(f64, bool)> {
    let t0 = Instant::now();
    let status = cmd.status()?;
    Ok((t0.elapsed().as_secs_f64() * 1000.0, status.success()))
}

pub async fn s10(ctx: &Ctx) -> io::Result<Section> {
    let mut section = Section::new(
        "S10",
        "redis-lock run NAME -- true against true alone, uncontended (wall time per run)",
    );
    let cli = &ctx.opts.cli;
    if !cli.is_file() {
        return Err(io::Error::other(format!(
            "redis-lock not found: {} (build it with `cargo build --release -p redis-lock-cli`)",
            cli.display()
        )));
    }
    let url = format!("redis://{}", ctx.addr);
    let runs = if ctx.opts.quick { RUNS_QUICK } else { RUNS };
    let reps = ctx.opts.reps(crate::options::REPS_S10);
    let (mut plain_meds, mut cli_meds, mut diffs) = (Vec::new(), Vec::new(), Vec::new());
    let mut all = Vec::new();
    for rep in 0..reps {
        let (mut plain, mut locked) = (Vec::with_capacity(runs), Vec::with_capacity(runs));
        for _ in 0..runs {
            let (t, ok) = timed(Command::new("true").stdin(Stdio::null()))?;
            if !ok {
                section.errors.push("`true` failed".into());
            }
            plain.push(t);
            let (t, ok) = timed(
                Command::new(cli)
                    .args(["-u", &url, "run", "bench:cli", "--", "true"])
                    .stdin(Stdio::null()),
            )?;
            if !ok {
                section
                    .errors
                    .push("`redis-lock run bench:cli -- true` did not exit 0".into());
            }
            locked.push(t);
        }
        let (p, l) = (median(&plain), median(&locked));
        ctx.progress(&format!(
            "S10 rep {}/{reps}: true {p:.2} ms, redis-lock run {l:.2} ms (medians of {runs})",
            rep + 1
        ));
        plain_meds.push(p);
        cli_meds.push(l);
        diffs.push(l - p);
        all.push(json!({"true_ms": plain, "redis_lock_run_ms": locked}));
        section.line(format!(
            "rep {}: true median {p:.2} ms (p90 {:.2}), redis-lock run median {l:.2} ms (p90 {:.2}), difference {:.2} ms",
            rep + 1,
            percentile(&plain, 90.0),
            percentile(&locked, 90.0),
            l - p
        ));
    }
    section.line(format!(
        "medians over {reps} repetitions of {runs} pairs: true {:.2} ms, redis-lock run {:.2} ms",
        median(&plain_meds),
        median(&cli_meds)
    ));
    section.bars.push(
        Bar::at_most_ms(
            "redis-lock run NAME -- true minus true (medians)",
            median(&diffs),
            LIMIT_MS,
        )
        .with_range(&diffs),
    );
    section.json = json!({"runs_per_rep": runs, "reps": all,
                          "true_median_ms": plain_meds, "redis_lock_run_median_ms": cli_meds});
    Ok(section)
}
