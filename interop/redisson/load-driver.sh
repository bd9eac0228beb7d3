#!/bin/sh
# The real Redisson client as a benchmark load (lock.redisson.bench.LoadDriver, src/main): builds
# it with Maven (quietly; Maven's own output goes to stderr) and runs it in a JVM, one run per
# line on stdin, answers on stdout (the protocol is in LoadDriver's javadoc). make bench's S2,
# S12 and S13 and the Rust client library's benchmark start it. REDISSON_VERSION picks the
# Redisson (default 4.7.0, the newest); the JVM's pinning and priority are the caller's.
set -eu
cd "$(dirname "$0")"
version=${REDISSON_VERSION:-4.7.0}
build="target/redisson-$version"
mvn -B -ntp -q -Dredisson.version="$version" -Dredisson.line="${version%%.*}" \
    compile dependency:build-classpath -Dmdep.includeScope=runtime \
    -Dmdep.outputFile="$build/runtime.classpath" >&2
exec java -Dorg.slf4j.simpleLogger.defaultLogLevel=error \
    -cp "$build/classes:$(cat "$build/runtime.classpath")" lock.redisson.bench.LoadDriver
