#!/usr/bin/env bash
# Installs the locked dependencies, builds, and runs the suite against $REDIS_SERVER
# (default redis-server) with $LOCK_MODULE (default <repo>/target/release/liblock.so).
set -euo pipefail
cd "$(dirname "$0")"
npm ci --no-audit --no-fund
npm run build
# dist/ is committed, so that `npm install ./clients/node` needs no TypeScript (npm installs no
# devDependencies for a local folder): it must be what src/ builds to.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    if ! git diff --quiet -- dist || [ -n "$(git ls-files --others --exclude-standard -- dist)" ]; then
        echo "clients/node/dist/ is not what src/ builds to: run 'npm run build' and commit dist/" >&2
        exit 1
    fi
fi
npm run build:test
export LOCK_MODULE="${LOCK_MODULE:-$(cd ../.. && pwd)/target/release/liblock.so}"
export REDIS_SERVER="${REDIS_SERVER:-redis-server}"
echo "server: $REDIS_SERVER, module: $LOCK_MODULE"
node --test --test-concurrency=1 build/test/*.test.js
# The packed tarball installed into a clean project with the current ioredis and redis.
./pack-test.sh
