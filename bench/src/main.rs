//! `lock-bench`: the benchmark without the scenarios that measure the
//! module against its peers (S14, S16; `lock-bench-peers` runs them too).

use std::process::ExitCode;

fn main() -> ExitCode {
    lock_bench::main(None)
}
