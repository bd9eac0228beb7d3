# make run   build the module, start redis-server with it on 127.0.0.1:$(PORT)
# make test  build the module, run unit and integration tests
# make fmt / make lint / make bench

PORT ?= 6379
REDIS_SERVER ?= redis-server
MODULE := target/release/liblock.so

.PHONY: build run test fmt lint deps clean

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
