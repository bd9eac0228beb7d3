#!/usr/bin/env bash
# Benchmark of the library vs bare commands and vs node-redlock v5, on a redis-server with the
# module (release build) that it starts on a free port. Usage: bench.sh [--out FILE]
# Env: REDIS_SERVER (default redis-server), LOCK_MODULE (default <repo>/target/release/liblock.so),
# BENCH_OUT (same as --out), BENCH_REPS (7), BENCH_RUN_SECONDS (1.5), BENCH_WARM_SECONDS (0.2),
# BENCH_SECONDS (per row of (c), default 2); --only ioredis|node-redis|pairs runs a part.
set -euo pipefail
cd "$(dirname "$0")"
[ -d node_modules ] || npm ci --no-audit --no-fund
npm run --silent build:test
export LOCK_MODULE="${LOCK_MODULE:-$(cd ../.. && pwd)/target/release/liblock.so}"
exec node build/bench/bench.js "$@"
