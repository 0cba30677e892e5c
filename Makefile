# Tally: the two commands of the README, and the pieces they are made of.
#
#   make demo   the main job: a real local Slurm with Tally and a demo (see README)
#   make test   every test (what CI runs through .ci/run)

CARGO ?= cargo
# Where cargo puts what it builds: $CARGO_TARGET_DIR when set, as cargo does.
TARGET_DIR := $(or $(CARGO_TARGET_DIR),$(CURDIR)/target)
TALLY := $(TARGET_DIR)/release/tally
CONFIG ?= examples/tally.toml
# Which Slurm the plugins are built for: `host` (the machine's, 22.05.8 on
# Debian 12) or `24.11` (Debian 13's, in the chroot testbed/trixie.sh makes
# at $(TRIXIE_ROOT)). Each release gets its own target dir and plugin dir,
# so switching does not rebuild the other.
SLURM ?= host
TRIXIE_ROOT ?= /var/tmp/tally-trixie
ifeq ($(SLURM),host)
PLUGIN_DIR := $(CURDIR)/target/plugins
PLUGIN_ENV :=
PLUGIN_TARGET := $(TARGET_DIR)
else ifeq ($(SLURM),24.11)
PLUGIN_DIR := $(CURDIR)/target/plugins-24.11
PLUGIN_TARGET := target/slurm-24.11
PLUGIN_ENV := SLURM_INCLUDE_DIR=$(TRIXIE_ROOT)/usr/include CARGO_TARGET_DIR=$(CURDIR)/$(PLUGIN_TARGET)
else
$(error SLURM=$(SLURM): supported are SLURM=host (the machine's Slurm) and SLURM=24.11 (the chroot of testbed/trixie.sh))
endif

.PHONY: demo rules down test test-unit fuzz-smoke e2e slurm-packages build plugins bindings fmt lint clean

## The main job: a real Slurm with priority/tally and a demo workload.
demo:
	bash scripts/demo.sh

## The rules without Slurm: the example's allocation tree and a walk-through.
rules: build
	$(TALLY) config check $(CONFIG)
	@echo
	$(TALLY) demo --config $(CONFIG)

## Stop the test bed (cancels jobs first).
down:
	bash testbed/down.sh

## Every test: pure, fake host, and end to end against a real Slurm.
test: slurm-packages test-unit fuzz-smoke e2e

## Slurm 22.05.8 from Debian 12 (pinned), MariaDB, munge: the fake-host test
## loads the real libslurmfull.so; the end-to-end tests run the daemons.
slurm-packages:
	bash testbed/install.sh

## Pure tests, and the plugin in a fake slurmctld (needs libslurmfull.so).
test-unit:
	$(CARGO) test --workspace --locked

## The fuzz targets' bodies over their seeds and mutations (stable), and each
## libFuzzer target for 20 s when nightly and cargo-fuzz are installed.
fuzz-smoke:
	bash fuzz/smoke.sh

## Real slurmctld + slurmd + slurmdbd + MariaDB on loopback (brings the test
## bed up and down itself).
e2e:
	bash tests/e2e/run.sh

build:
	$(CARGO) build --release --locked -p tally-cli

## The plugins, named as Slurm loads them, in $(PLUGIN_DIR) (the test bed
## puts that folder first in PluginDir).
plugins:
	$(PLUGIN_ENV) $(CARGO) build --release --locked -p tally-priority -p tally-job-submit -p tally-preempt
	mkdir -p $(PLUGIN_DIR)
	for p in priority_tally job_submit_tally preempt_tally; do \
	    install -m 0755 $(PLUGIN_TARGET)/release/lib$$p.so $(PLUGIN_DIR)/$$p.so; done

## Regenerate slurm-sys/src/bindings.rs from the Slurm source (needs libclang).
bindings:
	bash scripts/gen-bindings.sh

fmt:
	$(CARGO) fmt --all

lint:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

clean:
	$(CARGO) clean
