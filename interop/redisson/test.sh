#!/usr/bin/env bash
# Runs the Redisson suite (real Redisson clients beside LOCK.* / SEM.* / LATCH.* callers) once
# per Redisson line against real servers: REDIS_SERVER (default redis-server) with LOCK_MODULE
# (default <repo>/target/release/liblock.so). Maven fetches Redisson, Jedis and JUnit itself.
# REDISSON_VERSIONS="3.52.0 4.7.0" (the newest of each line) by default; extra arguments go to
# Maven (-Dtest=LockTest, say).
set -euo pipefail
cd "$(dirname "$0")"
export REDIS_SERVER="${REDIS_SERVER:-redis-server}"
export LOCK_MODULE="${LOCK_MODULE:-$(cd ../.. && pwd)/target/release/liblock.so}"
versions=${REDISSON_VERSIONS:-3.52.0 4.7.0}
echo "server: $REDIS_SERVER ($("$REDIS_SERVER" --version | cut -d' ' -f1-3)), module: $LOCK_MODULE"
status=0
for version in $versions; do
    echo "==> Redisson $version"
    # -Dredisson.line: the 4.x line has tests of its own (src/test/redisson4).
    if ! mvn -B -ntp -q -Dredisson.version="$version" -Dredisson.line="${version%%.*}" test "$@"; then
        echo "==> Redisson $version: FAILED"
        status=1
    fi
done
exit $status
