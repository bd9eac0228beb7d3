//! redis-lock: run a command while holding a lock of the lock module, or while
//! leading an election, and look at locks and their queues. See docs/cli.md.

#![deny(unsafe_code)]

mod args;
mod child;
mod commands;
mod conn;
mod duration;
mod elect;
mod exit;
mod hold;
mod leader;
mod manage;
mod owner;
mod reply;
mod run;
mod status;
#[allow(unsafe_code)]
mod sys;
mod term;
mod top;
mod waiting;
mod watch;
mod words;

use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            if !e.use_stderr() || e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                // --help, --version, or no subcommand: the help text.
                let _ = e.print();
                return ExitCode::from(if e.use_stderr() { exit::USAGE } else { 0 });
            }
            let raw: Vec<String> = std::env::args().skip(1).collect();
            eprintln!("redis-lock: {}", args::usage_error(&e, &raw));
            return ExitCode::from(exit::USAGE);
        }
    };
    let url = cli.url;
    let result = match cli.command {
        Command::Run(a) => run::run(&url, a),
        Command::Elect(a) => elect::elect(&url, a),
        Command::Leader(a) => leader::leader(&url, a),
        Command::Status(a) => manage::status(&url, a),
        Command::Top(a) => top::run(&url, a),
        Command::Release(a) => manage::release(&url, a),
        Command::ForceRelease(a) => manage::force_release(&url, a),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(f) => {
            if let Some(message) = f.message() {
                eprintln!("redis-lock: {message}");
            }
            ExitCode::from(f.code())
        }
    }
}
