//! The benchmark's run: every scenario wanted, in order (the peers' through
//! [`Peers`], the rest on a fresh server each), each section printed as it
//! ends; then the table with the header and the summary on stdout and in
//! `latest.txt`, every run in `latest.json`, and the charts.

use std::fs;
use std::io;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde_json::json;

use crate::ctx::Ctx;
use crate::header::{header, loadavg, probe, utc};
use crate::options::{Opts, SCENARIOS};
use crate::report::{self, Section};
use crate::{
    benchmark, chart, cli_cost, deadlock, expiry, fair, keepalive, keepalive_floor, latch, scale,
    throughput, Peers, WITHOUT_PEERS,
};

fn wanted(opts: &Opts, id: &str) -> bool {
    opts.only.as_ref().is_none_or(|l| l.iter().any(|s| s == id))
}

pub(crate) async fn run(opts: Opts, peers: Option<&dyn Peers>) -> io::Result<bool> {
    if !opts.module.is_file() {
        return Err(io::Error::other(format!(
            "module not found: {} (build it with `cargo build --release -p redis-lock`)",
            opts.module.display()
        )));
    }
    let started = Instant::now();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let date = utc(now);
    let probe_start = probe(&opts);
    let mut head = header(&opts, &date, &loadavg());
    head.text
        .push_str(&format!("cpu probe: {}\n", probe_start.0));
    head.json["cpu_probe_start"] = probe_start.1;
    eprint!("{}", head.text);

    let mut sections: Vec<Section> = Vec::new();
    let mut chart_data = None;
    let mut peers_chart = None;
    for (id, _) in SCENARIOS {
        if !wanted(&opts, id) {
            continue;
        }
        let t0 = Instant::now();
        let result: io::Result<Section> = async {
            if id == "S6" {
                return benchmark::s6(&opts, started).await;
            }
            if id == "S14" || id == "S16" {
                let Some(p) = peers else {
                    let mut s = Section::new(id, "not run");
                    s.line(WITHOUT_PEERS);
                    return Ok(s);
                };
                if id == "S14" {
                    return p.s14(&opts, started).await;
                }
                let (s, c) = p.s16(&opts, started).await?;
                peers_chart = c;
                return Ok(s);
            }
            if id == "S17" {
                return fair::s17(&opts, started).await;
            }
            let ctx = Ctx::new(&opts, id, started).await?;
            let section = match id {
                "S1" => throughput::s1(&ctx).await,
                "S1b" => benchmark::s1b(&ctx).await,
                "S2" => {
                    let (s, c) = throughput::s2(&ctx).await?;
                    chart_data = Some(c);
                    Ok(s)
                }
                "S3" => expiry::s3(&ctx).await,
                "S4" => scale::s4(&ctx).await,
                "S7" => throughput::s7(&ctx).await,
                "S8" => throughput::s8(&ctx).await,
                "S9" => keepalive::s9(&ctx).await,
                "S10" => cli_cost::s10(&ctx).await,
                "S11" => keepalive_floor::s11(&ctx).await,
                "S12" => throughput::s12(&ctx).await,
                "S13" => latch::s13(&ctx).await,
                "S15" => deadlock::s15(&ctx).await,
                _ => throughput::s5(&ctx).await,
            };
            let mut ctx = ctx;
            if !ctx.server.alive() {
                return Err(io::Error::other(format!(
                    "redis-server died during {id}; log:\n{}",
                    ctx.server.log_tail(20)
                )));
            }
            section
        }
        .await;
        let mut section = match result {
            Ok(s) => s,
            Err(e) => {
                let mut s = Section::new(id, "did not complete");
                s.errors.push(e.to_string());
                s
            }
        };
        section.line(format!(
            "scenario time: {:.0} s",
            t0.elapsed().as_secs_f64()
        ));
        eprint!("{}", section.render());
        sections.push(section);
    }

    let probe_end = probe(&opts);
    head.json["cpu_probe_end"] = probe_end.1;
    let total = started.elapsed().as_secs_f64();
    let bars: Vec<&report::Bar> = sections.iter().flat_map(|s| s.bars.iter()).collect();
    let passed = bars.iter().filter(|b| b.pass()).count();
    let violations: usize = sections.iter().map(|s| s.violations.len()).sum();
    let errors: usize = sections.iter().map(|s| s.errors.len()).sum();
    let mut text = head.text.clone();
    text.push('\n');
    for s in &sections {
        text.push_str(&s.render());
        text.push('\n');
    }
    text.push_str(&format!("cpu probe at the end: {}\n", probe_end.0));
    text.push_str(&format!(
        "summary: {passed} of {} bars PASS, {} FALL SHORT; mutual-exclusion violations: {violations}; errors: {errors}; total time {:.0} s; load average at end {}\n",
        bars.len(),
        bars.len() - passed,
        total,
        loadavg()
    ));
    print!("{text}");

    fs::create_dir_all(&opts.out)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", opts.out.display())))?;
    let doc = json!({
        "header": head.json,
        "scenarios": sections.iter().map(Section::to_json).collect::<Vec<_>>(),
        "bars": sections.iter().flat_map(|s| s.bars.iter().map(move |b| {
            let mut j = b.json();
            j["scenario"] = json!(s.id);
            j
        })).collect::<Vec<_>>(),
        "summary": {"bars": bars.len(), "pass": passed, "violations": violations,
                    "errors": errors, "total_s": total},
    });
    let write = |name: &str, body: &[u8]| -> io::Result<()> {
        let p = opts.out.join(name);
        fs::write(&p, body).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))
    };
    write("latest.txt", text.as_bytes())?;
    let compact = serde_json::to_string(&doc).map_err(io::Error::other)?;
    write("latest.json", compact.as_bytes())?;
    let mut files = vec!["latest.txt", "latest.json"];
    if let Some(c) = &chart_data {
        let p = opts.out.join("chart.svg");
        chart::draw(c, &p, &date).map_err(|e| io::Error::other(format!("chart: {e}")))?;
        files.push("chart.svg");
    }
    if let Some(c) = &peers_chart {
        // chart.svg is S2's when S2 ran.
        let name = if chart_data.is_some() {
            "peers.svg"
        } else {
            "chart.svg"
        };
        chart::draw_peers(c, &opts.out.join(name), &date)
            .map_err(|e| io::Error::other(format!("chart: {e}")))?;
        files.push(name);
    }
    eprintln!("wrote {} in {}", files.join(", "), opts.out.display());
    Ok(violations == 0 && errors == 0)
}
