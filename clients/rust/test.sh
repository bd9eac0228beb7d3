#!/bin/sh
# Runs the Rust client library's tests (unit and integration, on real servers) against
# $REDIS_SERVER (default redis-server) with the module $LOCK_MODULE (default: the
# workspace's target/release/liblock.so, built here if missing), with every feature (tls,
# cluster, sentinel: the topology tests need the last two). Extra arguments go to
# `cargo test`. Exit status: pass/fail.
set -eu
cd "$(dirname "$0")"
root=$(cd ../.. && pwd)
if [ -z "${LOCK_MODULE:-}" ]; then
    LOCK_MODULE="$root/target/release/liblock.so"
    [ -f "$LOCK_MODULE" ] || (cd "$root" && cargo build --release -p redis-lock)
    export LOCK_MODULE
fi
export REDIS_SERVER="${REDIS_SERVER:-redis-server}"
exec cargo test -p redis-lock-client --all-features "$@"
