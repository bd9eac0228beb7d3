#!/usr/bin/env bash
# Installs the locked dependencies, builds, and runs the suite against $REDIS_SERVER
# (default redis-server) with $LOCK_MODULE (default <repo>/target/release/liblock.so).
set -euo pipefail
cd "$(dirname "$0")"
npm ci --no-audit --no-fund
npm run build
npm run build:test
export LOCK_MODULE="${LOCK_MODULE:-$(cd ../.. && pwd)/target/release/liblock.so}"
export REDIS_SERVER="${REDIS_SERVER:-redis-server}"
echo "server: $REDIS_SERVER, module: $LOCK_MODULE"
exec node --test --test-concurrency=1 build/test/*.test.js
