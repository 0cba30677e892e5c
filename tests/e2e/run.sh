#!/usr/bin/env bash
# End-to-end tests against a real Slurm: build the plugins, bring up the test
# bed (munge, MariaDB, slurmdbd, slurmctld with priority/tally, job_submit/tally
# and preempt/tally, 2 slurmd with 8 fake GPUs each), run tests/tests/e2e.rs,
# and always tear the bed down. Then the compressed replay of a trace window
# under multifactor and under Tally (tests/tests/replay.rs, ~10 minutes: each
# policy brings its own 6-node bed up and down). Then the other releases
# (docs/install.md, "Slurm releases"): the whole suite against Slurm 26.05,
# and the two scenarios whose code differs between releases against 25.11
# and 24.11 (tests/e2e/slurm-src.sh, tests/e2e/slurm-24.11.sh).
#
# Slurm 25.11 and 26.05 are built from source (testbed/slurm-src.sh, cached):
# in the background, at the lowest CPU priority, while the 22.05 bed mostly
# waits on its jobs.
set -euo pipefail
cd "$(dirname "$0")/../.."
RUN=${TALLY_RUN_DIR:-/var/tmp/tally-testbed}
# shellcheck source=testbed/lib.sh
source testbed/lib.sh
# A copy: the planner test turns [planner] on in it and reconfigures.
CONFIG=$RUN/e2e-tally.toml

# The plugins as a site installs them: Tally's Debian package for this
# Slurm, installed with dpkg; the bed loads them from Slurm's PluginDir.
make --no-print-directory deb
DEB=$(SLURM=host SLURM_HEADER=/usr/include/slurm/slurm_version.h bash scripts/mkdeb.sh --path)
bash testbed/deb.sh install "$DEB"
mkdir -p "$RUN"
cp tests/e2e/tally.toml "$CONFIG"
target/release/tally config check "$CONFIG" >/dev/null
target/release/tally config accounts "$CONFIG" >"$RUN/e2e-accounts"

# What the exporter's test reads it with: Prometheus, headless Chromium, Tesseract.
bash testbed/prometheus.sh install
bash testbed/screenshot.sh --install
bash testbed/ocr-check.sh --install

# The source builds, in the background (their log is printed if one fails).
SRC_LOG=$RUN/slurm-src-build.log
bash testbed/slurm-src.sh deps
( nice -n 19 bash testbed/slurm-src.sh ensure 26.05 && nice -n 19 bash testbed/slurm-src.sh ensure 25.11 ) >"$SRC_LOG" 2>&1 &
SRC_BUILD=$!

bed_with_tally "" "$RUN/e2e-accounts" "TALLY_CONFIG=$CONFIG"

t0=$(now)
status=0
TALLY_E2E_CONFIG=$CONFIG cargo test --locked -p tally-tests --features e2e --test e2e -- --test-threads=1 --nocapture || status=$?
if (( status != 0 )); then
    echo "---- slurmctld log (tally lines, last 60) ----"
    grep -E 'tally|error' "$RUN/log/slurmctld.log" | tail -n 60 || true
    exit "$status"
fi
bash testbed/down.sh
bash testbed/deb.sh remove "$DEB"
log "22.05: e2e suite passed [$(elapsed "$t0")s]"
t0=$(now)
cargo test --locked -p tally-tests --features e2e --test replay -- --nocapture || status=$?
if (( status != 0 )); then
    echo "---- slurmctld log (tally and fatal lines, last 60) ----"
    grep -E 'tally|fatal|error' "$RUN/log/slurmctld.log" | tail -n 60 || true
    exit "$status"
fi
log "22.05: replay passed [$(elapsed "$t0")s]"
t0=$(now)
if ! wait "$SRC_BUILD"; then
    tail -n 40 "$SRC_LOG"
    die "building Slurm 25.11 and 26.05 from source failed (log: $SRC_LOG)"
fi
log "25.11 and 26.05 built from source (waited $(elapsed "$t0")s after the replay)"
# The scenarios whose code differs between releases: sprio's factors, a
# debug job time-slicing through all three plugins, and the exporter read
# by Prometheus and Chromium (squeue's JSON, preempt/tally's notes).
RELEASE_SCENARIOS=(e2e_4_ e2e_8_ e2e_19_)
bash tests/e2e/slurm-src.sh 26.05
bash tests/e2e/slurm-src.sh 25.11 "${RELEASE_SCENARIOS[@]}"
bash tests/e2e/slurm-24.11.sh "${RELEASE_SCENARIOS[@]}"
