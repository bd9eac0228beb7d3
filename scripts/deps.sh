#!/bin/sh
# Makes sure what the build and tests need is installed: redis-server and
# redis-cli (Debian's redis-server / redis-tools, 7.0 on Debian 12) and
# libclang (bindgen, used by the redis-module crate, loads it at build time).
# As root with apt-get it installs what is missing; otherwise it says what to
# install and fails.
set -eu

missing=""
command -v "${REDIS_SERVER:-redis-server}" >/dev/null 2>&1 || missing="$missing redis-server"
command -v redis-cli >/dev/null 2>&1 || missing="$missing redis-tools"
if [ -z "${LIBCLANG_PATH:-}" ] && ! ldconfig -p 2>/dev/null | grep -q 'libclang[-.0-9]*\.so'; then
    missing="$missing libclang-dev"
fi
[ -z "$missing" ] && exit 0

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing:$missing"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
else
    echo "missing:$missing" >&2
    echo "install with: sudo apt-get install -y$missing" >&2
    echo "(or set REDIS_SERVER / LIBCLANG_PATH to where they are)" >&2
    exit 1
fi
