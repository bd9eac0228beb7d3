#!/usr/bin/env bash
# Benchmark: library vs bare commands vs redis-py's Lock, on its own server
# (REDIS_SERVER with LOCK_MODULE, a release build). Usage: bench.sh [--out FILE]
# (or BENCH_OUT=FILE). Env: BENCH_REPS (7), BENCH_RUN_SECONDS (1.5), BENCH_WARM_SECONDS (0.2),
# BENCH_SECONDS per row of (c) (2).
set -euo pipefail
cd "$(dirname "$0")"
repo=$(cd ../.. && pwd)
export REDIS_SERVER=${REDIS_SERVER:-redis-server}
if [ -z "${LOCK_MODULE:-}" ]; then
    export LOCK_MODULE="$repo/target/release/liblock.so"
    [ -f "$LOCK_MODULE" ] || (cd "$repo" && cargo build --release)
fi
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check -e .
exec .venv/bin/python bench.py "$@"
