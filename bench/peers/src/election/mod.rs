//! S14 (election): leader hand-over time. Two candidates, each a real
//! process, for one election name: the first leads, the second waits; then
//! a fault hits the leader, and the time from the fault to the moment the
//! standby leads is measured (the arrival, through a pipe, of its first
//! line: for `redis-lock elect` the line of the command it starts, for
//! `etcdctl elect` its own first line, for the other candidates their
//! `leading` line; see candidate/). Faults: a clean exit (SIGTERM: the
//! candidate resigns), kill -9 of the leader process, and a network cut (the
//! leader runs in a network namespace joined to the host by a veth pair,
//! whose host side is set down; root only).
//!
//! Systems: the module through `redis-lock elect NAME --lease 2s`; etcd
//! (a single node this scenario starts) through `etcdctl elect` (session TTL
//! 60 s) and through its election API with a lease of 2 s (`etcd-client`,
//! gRPC); and a Kubernetes-style lease (client-go's leaderelection with
//! its default timings) on a record in Redis, as a reference.
//!
//! Offers: [`s14`], [`SYSTEMS`], [`FAULTS`]. The parts: `system` (the
//! systems, the faults, their timings), `process` (a candidate process and
//! its lines), `netns` (the network namespace a cut cuts off), `env` (what
//! the scenario runs against: the servers, the namespace, the candidates'
//! command lines) and `sample` (one hand-over: the leader, the standby, the
//! fault, the times).

mod env;
mod netns;
mod process;
mod sample;
mod system;

use std::io;
use std::time::Instant;

use serde_json::json;

use self::env::{unavailable, Env};
use self::netns::Netns;
use self::sample::sample;
use self::system::{Fault, System, K8S_LEASE_MS, K8S_RENEW_MS, K8S_RETRY_MS, LEASE_MS};
pub use self::system::{FAULTS, SYSTEMS};
use crate::etcd::Etcd;
use lock_bench::report::{Bar, Section};
use lock_bench::server::ServerSpec;
use lock_bench::stats::median;
use lock_bench::Opts;
use lock_harness::find;

pub async fn s14(opts: &Opts, started: Instant) -> io::Result<Section> {
    let progress = |msg: &str| eprintln!("[{:>6.1}s] {msg}", started.elapsed().as_secs_f64());
    let mut section = Section::new(
        "S14",
        "leader hand-over: fault on the leader -> the standby's command starts (ms)",
    );
    let systems: Vec<System> = SYSTEMS
        .into_iter()
        .filter(|s| {
            opts.systems
                .as_ref()
                .is_none_or(|l| l.iter().any(|n| n == s.name()))
        })
        .collect();
    let faults: Vec<Fault> = FAULTS
        .into_iter()
        .filter(|f| {
            opts.faults
                .as_ref()
                .is_none_or(|l| l.iter().any(|n| n == f.name()))
        })
        .collect();
    let netns = if faults.contains(&Fault::Cut) {
        match Netns::create() {
            Ok(ns) => Some(ns),
            Err(e) => {
                section.line(format!(
                    "network cut: skipped ({e}; it needs root for a network namespace and a veth pair)"
                ));
                None
            }
        }
    } else {
        None
    };
    // Reachable from the namespace too (no password: protected mode would
    // refuse connections from there).
    let mut extra: Vec<String> = ["--protected-mode", "no", "--bind", "127.0.0.1"]
        .map(String::from)
        .to_vec();
    if let Some(ns) = &netns {
        extra.push(ns.host_ip.clone());
    }
    let redis = lock_bench::server::start(
        &ServerSpec {
            binary: opts.redis_server.clone(),
            module: Some(opts.module.clone()),
            core: opts.pinning.server,
            extra,
        },
        "S14",
    )?;
    let etcd_bin = find(&opts.etcd);
    let etcd = match (
        &etcd_bin,
        systems
            .iter()
            .any(|s| matches!(s, System::Etcdctl | System::EtcdLease)),
    ) {
        (Some(bin), true) => {
            match Etcd::start(bin, netns.as_ref().map(|n| n.host_ip.as_str()), None) {
                Ok(e) => {
                    section.line(format!(
                        "etcd: {} ({}), one node on 127.0.0.1:{}",
                        bin.display(),
                        Etcd::version(bin),
                        e.port
                    ));
                    Some(e)
                }
                Err(e) => {
                    section.errors.push(e.to_string());
                    None
                }
            }
        }
        _ => None,
    };
    let env = Env {
        redis,
        etcd,
        netns,
        cli: opts.cli.clone(),
        etcdctl: find(&opts.etcdctl),
        etcd_bin: opts.etcd.clone(),
        etcdctl_bin: opts.etcdctl.clone(),
        exe: std::env::current_exe()?,
    };
    section.line(
        "hand-over = from the fault (SIGTERM / SIGKILL sent, or `ip link set down` returned) to the arrival of the standby's first line: \
         module: the line of the command redis-lock elect starts; etcdctl: its elected line; the others: their `leading` line"
    );
    for s in &systems {
        section.line(format!("{:<10} = {}", s.name(), s.describe()));
    }
    section.line(format!(
        "{:<10} {:<17} {:>3} {:>9} {:>9} {:>9}   {}",
        "system",
        "fault",
        "n",
        "median",
        "min",
        "max",
        "old leader stopped believing (median after the fault, by its own ms stamp)"
    ));
    let mut cells = Vec::new();
    let mut module_max = std::collections::HashMap::new();
    for &system in &systems {
        if let Some(why) = unavailable(&env, system) {
            section.line(format!("{:<10} skipped: {why}", system.name()));
            continue;
        }
        for &fault in &faults {
            if fault == Fault::Cut && env.netns.is_none() {
                continue;
            }
            if opts.quick && opts.reps_given.is_none() && system.slow(fault) {
                section.line(format!(
                    "{:<10} {:<17} skipped with --quick (a sample takes 20 s to a minute)",
                    system.name(),
                    fault.describe()
                ));
                continue;
            }
            let n = opts.reps_given.unwrap_or(if opts.quick {
                1
            } else {
                system.default_samples(fault)
            });
            let t_cell = Instant::now();
            let (mut hand, mut stop, mut errs) = (Vec::new(), Vec::new(), Vec::new());
            for i in 0..n {
                match sample(&env, system, fault, i) {
                    Ok(s) => {
                        progress(&format!(
                            "S14 {} {} {}/{n}: {:.1} ms",
                            system.name(),
                            fault.name(),
                            i + 1,
                            s.handover_ms
                        ));
                        hand.push(s.handover_ms);
                        if let Some(o) = s.old_stop_ms {
                            stop.push(o);
                        }
                    }
                    Err(e) => {
                        progress(&format!(
                            "S14 {} {} {}/{n}: {e}",
                            system.name(),
                            fault.name(),
                            i + 1
                        ));
                        errs.push(e.to_string());
                    }
                }
            }
            let lo = hand.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = hand.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            section.line(format!(
                "{:<10} {:<17} {:>3} {:>9} {:>9} {:>9}   {}",
                system.name(),
                fault.describe(),
                hand.len(),
                lock_bench::report::ms(median(&hand)),
                lock_bench::report::ms(lo),
                lock_bench::report::ms(hi),
                if stop.is_empty() {
                    "-".to_string()
                } else {
                    format!(
                        "{} ms (n {})",
                        lock_bench::report::ms(median(&stop)),
                        stop.len()
                    )
                }
            ));
            for e in &errs {
                section
                    .errors
                    .push(format!("{} {}: {e}", system.name(), fault.name()));
            }
            if system == System::Module && !hand.is_empty() {
                module_max.insert(fault.name(), hi);
            }
            cells.push(json!({"system": system.name(), "fault": fault.name(),
                              "handover_ms": hand, "old_leader_stopped_ms": stop,
                              "errors": errs, "cell_s": t_cell.elapsed().as_secs_f64()}));
        }
    }
    // The module's documented bounds (docs/commands.md, Liveness), with
    // 100 ms for the CLI to start its command.
    let l = LEASE_MS as f64;
    if let Some(&m) = module_max.get("kill9") {
        section.bars.push(Bar::at_most_ms(
            "module kill -9: slowest hand-over <= L (+100 ms)",
            m,
            l + 100.0,
        ));
    }
    if let Some(&m) = module_max.get("cut") {
        section.bars.push(Bar::at_most_ms(
            "module network cut: slowest <= 1.5 L + 2 s (+100 ms)",
            m,
            1.5 * l + 2000.0 + 100.0,
        ));
    }
    section.json = json!({"lease_ms": LEASE_MS, "k8s": {"lease_ms": K8S_LEASE_MS,
                          "renew_deadline_ms": K8S_RENEW_MS, "retry_ms": K8S_RETRY_MS},
                          "cells": cells});
    Ok(section)
}
