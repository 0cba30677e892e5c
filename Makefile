# Tally: the two commands of the README, and the pieces they are made of.
#
#   make demo   the main job (see README)
#   make test   every test (what CI runs through .ci/run)

CARGO ?= cargo
TALLY := target/release/tally
CONFIG ?= examples/tally.toml

.PHONY: demo test test-unit slurm-packages build bindings fmt lint clean

## The main job: validate the example config, show its allocation tree and
## walk through the rules.
demo: build
	$(TALLY) config check $(CONFIG)
	@echo
	$(TALLY) demo --config $(CONFIG)

## Every test.
test: slurm-packages test-unit

## Slurm 22.05.8 from Debian 12 (pinned), MariaDB, munge: the fake-host test
## loads the real libslurmfull.so; the end-to-end tests run the daemons.
slurm-packages:
	bash testbed/install.sh

## Pure tests, and the plugin in a fake slurmctld (needs libslurmfull.so).
test-unit:
	$(CARGO) test --workspace --locked

build:
	$(CARGO) build --release --locked -p tally-cli

## Regenerate slurm-sys/src/bindings.rs from the Slurm source (needs libclang).
bindings:
	bash scripts/gen-bindings.sh

fmt:
	$(CARGO) fmt --all

lint:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

clean:
	$(CARGO) clean
