#!/usr/bin/env bash
# Runs the Python client's tests against real servers:
#   REDIS_SERVER (default redis-server) with LOCK_MODULE (default
#   <repo>/target/release/liblock.so, built with cargo if missing).
# Installs its own dependencies in clients/python/.venv. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")"
repo=$(cd ../.. && pwd)
export REDIS_SERVER=${REDIS_SERVER:-redis-server}
if [ -z "${LOCK_MODULE:-}" ]; then
    export LOCK_MODULE="$repo/target/release/liblock.so"
    if [ ! -f "$LOCK_MODULE" ]; then
        (cd "$repo" && cargo build --release)
    fi
fi
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check -e '.[test]'
exec .venv/bin/python -m pytest -q "$@"
