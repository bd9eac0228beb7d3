#!/usr/bin/env bash
# Runs the Python client's tests against real servers:
#   REDIS_SERVER (default redis-server) with LOCK_MODULE (default
#   <repo>/target/release/liblock.so, built with cargo if missing).
# Installs its own dependencies in clients/python/.venv (REDIS_PY='redis==5.0.*': that redis-py,
# in clients/python/.venv-compat). Extra arguments go to pytest (the library's suite).
# Then: mypy --strict on the package, and redis-py's own lock tests against the drop-in
# (upstream/run.py: the sdist of the redis-py installed, from PyPI, cached in .upstream/).
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
# Another redis-py, e.g. REDIS_PY='redis==5.0.*' (the oldest the package claims): its own venv.
venv=.venv
[ -z "${REDIS_PY:-}" ] || venv=.venv-compat
[ -x $venv/bin/python ] || python3 -m venv $venv
# (the default venv pins the redis-py whose lock tests upstream/inherent.py lists)
$venv/bin/pip install -q --disable-pip-version-check -e '.[test]' "${REDIS_PY:-redis==8.2.0}"
$venv/bin/python -c 'import redis; print("redis-py", redis.__version__)'
$venv/bin/python -m pytest -q "$@"
$venv/bin/python -m mypy --strict src/redis_lock_client upstream
$venv/bin/python upstream/run.py -q
