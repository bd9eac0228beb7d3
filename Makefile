# make run   build the module, start redis-server with it on 127.0.0.1:$(PORT)
# make test  build the module, run unit and integration tests
# make fmt / make lint / make bench
# make bench  build module + lock-bench, run every scenario (~10 min, BENCH_ARGS=--quick for a smoke run) into bench/results/, then the rules' criterion benchmark

PORT ?= 6379
REDIS_SERVER ?= redis-server
MODULE := target/release/liblock.so

.PHONY: build run test fmt lint deps clean bench

build: deps
	cargo build --release

deps:
	@scripts/deps.sh

run: build
	@mkdir -p data
	$(REDIS_SERVER) redis.conf --port $(PORT) --loadmodule $(CURDIR)/$(MODULE)

# Integration tests start their own servers on free ports with $(MODULE).
test: build
	cargo test

fmt:
	cargo fmt --all

lint: deps
	cargo clippy --workspace --all-targets -- -D warnings

clean:
	cargo clean
	rm -rf data

# Starts its own redis-servers on free ports (server on core 0, generator on
# core 1); see bench/README.md. Options: BENCH_ARGS="--only S2 --reps 5" etc.
BENCH_ARGS ?=
bench: deps
	cargo build --release -p redis-lock -p lock-bench
	target/release/lock-bench $(BENCH_ARGS)
	cargo bench -p lock-bench --bench rules
