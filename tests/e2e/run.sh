#!/usr/bin/env bash
# End-to-end tests against a real Slurm: build the plugins, bring up the test
# bed (munge, MariaDB, slurmdbd, slurmctld with priority/tally, job_submit/tally
# and preempt/tally, 2 slurmd with 8 fake GPUs each), run tests/tests/e2e.rs,
# and always tear the bed down. Then the compressed replay of a trace window
# under multifactor and under Tally (tests/tests/replay.rs, ~10 minutes: each
# policy brings its own 6-node bed up and down). Then the same end-to-end
# suite against Slurm 24.11 in a Debian 13 chroot (tests/e2e/slurm-24.11.sh).
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
bash tests/e2e/slurm-24.11.sh
