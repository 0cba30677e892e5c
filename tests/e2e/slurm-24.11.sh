#!/usr/bin/env bash
# The end-to-end suite (tests/tests/e2e.rs) against Slurm 24.11.5: the
# plugins built against 24.11's headers (make plugins SLURM=24.11), the test
# bed inside the Debian 13 chroot of testbed/trixie.sh (its own run dir and
# ports: it can run beside the host's 22.05 bed), the test executable built
# on the host and run inside the chroot, where Slurm's 24.11 commands are.
# Brings the bed up and down itself; the chroot stays for the next run.
#
# Arguments: test filters passed to the test executable (default: all).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
# shellcheck source=testbed/lib.sh
source testbed/lib.sh

t0=$(now)
bash testbed/trixie.sh ensure
CHROOT=${TALLY_TRIXIE_ROOT:-/var/tmp/tally-trixie}
RUN=${TALLY_TRIXIE_RUN_DIR:-/var/tmp/tally-testbed-24.11}   # as the chroot sees it
# The plugins as a site installs them: Tally's package for 24.11, installed
# with dpkg inside the chroot; the bed loads them from Slurm's PluginDir.
make --no-print-directory deb SLURM=24.11 TRIXIE_ROOT="$CHROOT"
DEB=$(SLURM=24.11 SLURM_HEADER="$CHROOT/usr/include/slurm/slurm_version.h" bash scripts/mkdeb.sh --path)
exe=$(cargo test --locked --no-run -p tally-tests --features e2e --test e2e --message-format=json 2>/dev/null |
      sed -n 's/.*"target":{[^}]*"name":"e2e"[^}]*}.*"executable":"\([^"]*\)".*/\1/p' | tail -n1)
[[ -x $exe ]] || die "could not find the e2e test executable (cargo test --no-run)"
[[ $exe == "$ROOT"/* ]] || die "the e2e test executable $exe is outside the repository (CARGO_TARGET_DIR?): set TALLY_TRIXIE_BIND to its target dir"
log "24.11: built plugins, CLI and tests [$(elapsed "$t0")s]"

mkdir -p "$CHROOT$RUN"
cp tests/e2e/tally.toml "$CHROOT$RUN/e2e-tally.toml"
target/release/tally config accounts tests/e2e/tally.toml >"$CHROOT$RUN/e2e-accounts"

inside() { bash testbed/trixie.sh run "$@"; }
# shellcheck disable=SC2317 # (the EXIT trap's)
down() {
    inside bash testbed/down.sh || true
    bash testbed/trixie.sh umount || true
}
trap down EXIT
bash testbed/deb.sh install "$DEB" "$CHROOT"
# What the exporter's test reads it with, inside the chroot: Prometheus,
# headless Chromium, Tesseract (Debian 13's).
inside bash testbed/prometheus.sh install
inside bash testbed/screenshot.sh --install
inside bash testbed/ocr-check.sh --install
TALLY_NODES=2 TALLY_PRIORITY_TYPE=priority/tally TALLY_PLUGIN_DIR='' TALLY_GPU_TYPES="h100 b200" TALLY_DEBUG_PARTITION=1 \
    TALLY_ACCOUNTS=$RUN/e2e-accounts TALLY_ENV="TALLY_CONFIG=$RUN/e2e-tally.toml" \
    TALLY_SLURM_EXTRA=$E2E_SLURM_EXTRA \
    inside bash testbed/up.sh
inside scontrol version
status=0
TALLY_E2E_CONFIG=$RUN/e2e-tally.toml inside "$exe" --test-threads=1 --nocapture "$@" || status=$?
if (( status != 0 )); then
    echo "---- 24.11 slurmctld log (tally and error lines, last 60) ----"
    grep -E 'tally|error|fatal' "$CHROOT$RUN/log/slurmctld.log" | tail -n 60 || true
fi
inside bash testbed/down.sh
bash testbed/deb.sh remove "$DEB" "$CHROOT"
log "24.11: e2e suite $( (( status == 0 )) && echo passed || echo FAILED) [$(elapsed "$t0")s]"
exit "$status"
