#!/bin/sh
# Benchmarks the Rust client library (examples/bench.rs): on a redis-server with the module
# (release build) that it starts on a free port, (a) uncontended acquire+release through the
# library vs the same commands bare, (b) one hot lock at 16 clients, library vs bare, (c) the
# library vs Redisson itself (4.7.0, its Java client: interop/redisson/load-driver.sh, which
# needs java and mvn) at 1, 16 and 64 clients. Prints a markdown table and saves
# it to --out FILE (or $BENCH_OUT). REDIS_SERVER picks the server, BENCH_SECONDS the time
# per row (3).
set -eu
cd "$(dirname "$0")"
root=$(cd ../.. && pwd)
if [ -z "${LOCK_MODULE:-}" ]; then
    (cd "$root" && cargo build --release -p redis-lock)
    LOCK_MODULE="$root/target/release/liblock.so"
    export LOCK_MODULE
fi
cargo build --release -p redis-lock-client --example bench
exec "$root/target/release/examples/bench" "$@"
