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
# Debian 12), `24.11` (Debian 13's, in the chroot testbed/trixie.sh makes
# at $(TRIXIE_ROOT)), or `25.11` / `26.05` (built from SchedMD's sources
# into $(SLURM_PREFIX): by default the test bed's build of
# testbed/slurm-src.sh). Each release gets its own target dir and plugin
# dir, so switching does not rebuild the other.
#
# SLURM_PREFIX=DIR: a Slurm installed under its own prefix, as sites that
# build Slurm from source install it: headers from DIR/include, plugins
# installed into DIR/lib/slurm (with SLURM=host: whatever release it is;
# the build refuses one Tally has no bindings for).
SLURM ?= host
SLURM_PREFIX ?=
TRIXIE_ROOT ?= /var/tmp/tally-trixie
ifeq ($(SLURM),host)
PLUGIN_DIR := $(CURDIR)/target/plugins$(if $(SLURM_PREFIX),-prefix)
PLUGIN_TARGET := $(if $(SLURM_PREFIX),target/slurm-prefix,$(TARGET_DIR))
PLUGIN_ENV := $(if $(SLURM_PREFIX),SLURM_INCLUDE_DIR=$(SLURM_PREFIX)/include CARGO_TARGET_DIR=$(CURDIR)/$(PLUGIN_TARGET))
SLURM_INCLUDE := $(if $(SLURM_PREFIX),$(SLURM_PREFIX)/include,$(or $(SLURM_INCLUDE_DIR),/usr/include))
else ifeq ($(SLURM),24.11)
PLUGIN_DIR := $(CURDIR)/target/plugins-24.11
PLUGIN_TARGET := target/slurm-24.11
SLURM_INCLUDE := $(TRIXIE_ROOT)/usr/include
PLUGIN_ENV := SLURM_INCLUDE_DIR=$(SLURM_INCLUDE) CARGO_TARGET_DIR=$(CURDIR)/$(PLUGIN_TARGET)
else ifneq ($(filter 25.11 26.05,$(SLURM)),)
SLURM_PREFIX := $(or $(SLURM_PREFIX),$(shell bash testbed/slurm-src.sh prefix $(SLURM)))
PLUGIN_DIR := $(CURDIR)/target/plugins-$(SLURM)
PLUGIN_TARGET := target/slurm-$(SLURM)
SLURM_INCLUDE := $(SLURM_PREFIX)/include
PLUGIN_ENV := SLURM_INCLUDE_DIR=$(SLURM_INCLUDE) CARGO_TARGET_DIR=$(CURDIR)/$(PLUGIN_TARGET)
else
$(error SLURM=$(SLURM): supported are SLURM=host (the machine's Slurm, or the one under SLURM_PREFIX), SLURM=24.11 (the chroot of testbed/trixie.sh), SLURM=25.11 and SLURM=26.05 (built from source by testbed/slurm-src.sh, or under SLURM_PREFIX))
endif
# The slurm_version.h the plugins of $(SLURM) are built against.
SLURM_HEADER := $(SLURM_INCLUDE)/slurm/slurm_version.h
PLUGINS := priority_tally job_submit_tally preempt_tally

# `make install`: the usual names. DESTDIR stages (packaging, tests).
DESTDIR ?=
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
MANDIR ?= $(PREFIX)/share/man
SYSCONFDIR ?= /etc
# tally.toml.example goes here; the plugins and tally read /etc/slurm/tally.toml
# (or $TALLY_CONFIG): copying the example there is the admin's step.
EXAMPLEDIR ?= $(SYSCONFDIR)/tally
# The exporter's systemd unit (installed, never enabled) and the Grafana
# dashboard with its provisioning file.
SYSTEMDDIR ?= $(PREFIX)/lib/systemd/system
DATADIR ?= $(PREFIX)/share/tally
# Where slurmctld loads plugins from (Debian 12 and 13: slurm-wlm's
# PluginDir; a Slurm under SLURM_PREFIX: its lib/slurm).
PLUGINDIR ?= $(if $(SLURM_PREFIX),$(SLURM_PREFIX)/lib/slurm,/usr/lib/x86_64-linux-gnu/slurm-wlm)
INSTALL ?= install
INSTALL_PROGRAM ?= $(INSTALL) -m 0755
# Shared objects are dlopen()ed, not run: 0644, as Debian ships Slurm's own.
INSTALL_LIB ?= $(INSTALL) -m 0644
INSTALL_DATA ?= $(INSTALL) -m 0644

.PHONY: demo rules down results test sources test-unit fuzz-smoke dashboard-check e2e slurm-packages build plugins bindings fmt lint clean \
	install install-strip uninstall installable install-check deb deb-check

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

## Measure Tally against FIFO and multifactor (simulator, real Slurm, planner,
## speed) and rewrite docs/results.md and the README's table (~35 min; needs
## the GPU traces: TALLY_TRACES).
results:
	bash scripts/results.sh

## Every test: the lints, pure, fake host, end to end against a real Slurm,
## and make install/uninstall into a scratch DESTDIR.
test: sources slurm-packages lint test-unit fuzz-smoke dashboard-check e2e install-check

## What make test needs from outside the repository (SchedMD's Slurm tarballs,
## the GPU traces), checked against scripts/sources.lock: from ../shared, the
## cache, or downloaded (scripts/fetch.sh; TALLY_FETCH=0: never download).
sources:
	bash scripts/fetch.sh check

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

## The Grafana dashboard against Grafana's published schema (@grafana/schema,
## from npm; node and npm from Debian when missing), and its self-test.
dashboard-check:
	bash scripts/dashboard-check.sh --self-test

## Real slurmctld + slurmd + slurmdbd + MariaDB on loopback (brings the test
## bed up and down itself).
e2e:
	bash tests/e2e/run.sh

build:
	$(CARGO) build --release --locked -p tally-cli

## The plugins, named as Slurm loads them, in $(PLUGIN_DIR) (the test bed
## puts that folder first in PluginDir).
plugins:
	@if [ "$(SLURM)$(SLURM_PREFIX)" != host ] && [ ! -r $(SLURM_HEADER) ]; then \
	    echo "make plugins: $(SLURM_HEADER) not found: the headers of SLURM=$(SLURM)$(if $(SLURM_PREFIX), under $(SLURM_PREFIX)) are needed ($(if $(filter 24.11,$(SLURM)),bash testbed/trixie.sh ensure,$(if $(filter 25.11 26.05,$(SLURM)),bash testbed/slurm-src.sh ensure $(SLURM) builds them,install Slurm's headers under SLURM_PREFIX)))" >&2; exit 1; fi
	$(PLUGIN_ENV) $(CARGO) build --release --locked -p tally-priority -p tally-job-submit -p tally-preempt
	mkdir -p $(PLUGIN_DIR)
	for p in priority_tally job_submit_tally preempt_tally; do \
	    install -m 0755 $(PLUGIN_TARGET)/release/lib$$p.so $(PLUGIN_DIR)/$$p.so; done

## Install what `make build` and `make plugins` built: the three plugins into
## $(PLUGINDIR), tally into $(BINDIR), its man pages and tally.toml(5) into
## $(MANDIR), tally.toml.example into $(EXAMPLEDIR) (a tally.toml is never
## written), the exporter's unit into $(SYSTEMDDIR) (not enabled), the
## Grafana dashboard into $(DATADIR)/grafana. Compiles nothing, so `sudo make install` after a build as
## yourself does not rebuild as root elsewhere; SLURM=24.11 installs that
## release's plugins.
install: installable
	$(INSTALL) -d $(DESTDIR)$(PLUGINDIR) $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man5 $(DESTDIR)$(EXAMPLEDIR) \
	    $(DESTDIR)$(SYSTEMDDIR) $(DESTDIR)$(DATADIR)/grafana
	for p in $(PLUGINS); do $(INSTALL_LIB) $(PLUGIN_DIR)/$$p.so $(DESTDIR)$(PLUGINDIR)/$$p.so || exit 1; done
	$(INSTALL_PROGRAM) $(TALLY) $(DESTDIR)$(BINDIR)/tally
	pages=$$(mktemp -d) && trap 'rm -rf "$$pages"' EXIT && \
	    $(TALLY) man --out "$$pages" >/dev/null && $(INSTALL_DATA) "$$pages"/*.1 $(DESTDIR)$(MANDIR)/man1/
	$(INSTALL_DATA) docs/man/tally.toml.5 $(DESTDIR)$(MANDIR)/man5/tally.toml.5
	$(INSTALL_DATA) examples/tally.toml $(DESTDIR)$(EXAMPLEDIR)/tally.toml.example
	sed 's|@BINDIR@|$(BINDIR)|g' packaging/systemd/tally-exporter.service.in >$(DESTDIR)$(SYSTEMDDIR)/tally-exporter.service
	chmod 0644 $(DESTDIR)$(SYSTEMDDIR)/tally-exporter.service
	$(INSTALL_DATA) packaging/grafana/tally.json packaging/grafana/provisioning.yaml $(DESTDIR)$(DATADIR)/grafana/

## The same, with the symbols and debug information stripped (106 MB -> 15 MB).
install-strip:
	$(MAKE) install INSTALL_PROGRAM='$(INSTALL) -m 0755 -s' INSTALL_LIB='$(INSTALL) -m 0644 -s'

## Remove exactly what `make install` (same variables) put there. The man
## pages are the ones the installed tally writes (else the built one).
uninstall:
	@bin=$(DESTDIR)$(BINDIR)/tally; [ -x "$$bin" ] || bin=$(TALLY); \
	pages=$$(mktemp -d) && trap 'rm -rf "$$pages"' EXIT && \
	if ! "$$bin" man --out "$$pages" >/dev/null 2>&1; then \
	    echo "make uninstall: cannot list the manual pages: neither $(DESTDIR)$(BINDIR)/tally nor $(TALLY) runs \`tally man\`;" \
	        "remove $(DESTDIR)$(MANDIR)/man1/tally.1 and tally-*.1 by hand, or run make build first" >&2; exit 1; fi; \
	for f in "$$pages"/*.1; do echo "rm -f $(DESTDIR)$(MANDIR)/man1/$${f##*/}"; rm -f "$(DESTDIR)$(MANDIR)/man1/$${f##*/}"; done
	for p in $(PLUGINS); do rm -f $(DESTDIR)$(PLUGINDIR)/$$p.so; done
	rm -f $(DESTDIR)$(BINDIR)/tally $(DESTDIR)$(MANDIR)/man5/tally.toml.5 $(DESTDIR)$(EXAMPLEDIR)/tally.toml.example
	if [ -d $(DESTDIR)$(EXAMPLEDIR) ]; then rmdir --ignore-fail-on-non-empty $(DESTDIR)$(EXAMPLEDIR); fi
	rm -f $(DESTDIR)$(SYSTEMDDIR)/tally-exporter.service $(DESTDIR)$(DATADIR)/grafana/tally.json $(DESTDIR)$(DATADIR)/grafana/provisioning.yaml
	for d in $(DESTDIR)$(DATADIR)/grafana $(DESTDIR)$(DATADIR); do if [ -d $$d ]; then rmdir --ignore-fail-on-non-empty $$d; fi; done

## What install needs, with what to run when it is missing; the plugins must
## carry the plugin_version of the headers they are for (Slurm checks it).
installable:
	@test -x $(TALLY) || { echo "make install: $(TALLY) is missing: run \`make build\` first (make install builds nothing; if cargo builds elsewhere, pass CARGO_TARGET_DIR=DIR)" >&2; exit 1; }
	@for p in $(PLUGINS); do test -f $(PLUGIN_DIR)/$$p.so || { \
	    echo "make install: $(PLUGIN_DIR)/$$p.so is missing: run \`make plugins$(if $(filter host,$(SLURM)),, SLURM=$(SLURM))$(if $(SLURM_PREFIX), SLURM_PREFIX=$(SLURM_PREFIX))\` first" >&2; exit 1; }; done
	@if [ -r $(SLURM_HEADER) ]; then \
	    bash scripts/plugin-version.sh --header $(SLURM_HEADER) $(foreach p,$(PLUGINS),$(PLUGIN_DIR)/$(p).so) >/dev/null || { \
	        echo "make install: the plugins in $(PLUGIN_DIR) are not for the Slurm of $(SLURM_HEADER): run \`make plugins$(if $(filter host,$(SLURM)),, SLURM=$(SLURM))$(if $(SLURM_PREFIX), SLURM_PREFIX=$(SLURM_PREFIX))\`" >&2; exit 1; }; \
	else echo "make install: $(SLURM_HEADER) not found: the plugins' Slurm version was not checked" >&2; fi

## `make install` into a scratch DESTDIR, each file checked, then `make
## uninstall` must leave no file behind.
install-check: build plugins
	bash scripts/install-check.sh

## The Debian package for $(SLURM)'s Slurm release:
## target/deb/tally-slurm-<major.minor>_<version>_<arch>.deb (scripts/mkdeb.sh).
deb: build plugins
	SLURM=$(SLURM) SLURM_HEADER=$(SLURM_HEADER) bash scripts/mkdeb.sh

## The package in a throwaway root (dpkg --root; the host's dpkg database is
## not touched): files, Depends, plugin_version, refusal by another Slurm,
## clean removal.
deb-check: deb
	bash scripts/deb-check.sh --header $(SLURM_HEADER) "$$(SLURM=$(SLURM) SLURM_HEADER=$(SLURM_HEADER) bash scripts/mkdeb.sh --path)"

## Regenerate the bindings of $(SLURM)'s release (slurm-sys/src/bindings/,
## from its source; needs libclang).
bindings:
	bash scripts/gen-bindings.sh $(filter-out host,$(SLURM))

fmt:
	$(CARGO) fmt --all

## The lints CI holds the code to: rustfmt, clippy with every warning an
## error (the end-to-end tests' feature too), rustdoc's warnings (broken
## intra-doc links) as errors. An allowed lint says why where it is allowed.
lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings
	$(CARGO) clippy -p tally-tests --features e2e --all-targets --locked -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --workspace --no-deps --locked

clean:
	$(CARGO) clean
