#!/usr/bin/env bash
# End-to-end tests against a real Slurm: build the plugins, bring up the test
# bed (munge, MariaDB, slurmdbd, slurmctld with priority/tally, job_submit/tally
# and preempt/tally, 2 slurmd with 8 fake GPUs each), run tests/tests/e2e.rs,
# and always tear the bed down. Then the compressed replay of a trace window
# under multifactor and under Tally (tests/tests/replay.rs, ~10 minutes: each
# policy brings its own 6-node bed up and down).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
RUN=${TALLY_RUN_DIR:-/var/tmp/tally-testbed}
# shellcheck source=testbed/lib.sh
source testbed/lib.sh
# A copy: the planner test turns [planner] on in it and reconfigures.
CONFIG=$RUN/e2e-tally.toml

make --no-print-directory plugins build
mkdir -p "$RUN"
cp tests/e2e/tally.toml "$CONFIG"
target/release/tally config check "$CONFIG" >/dev/null
target/release/tally config accounts "$CONFIG" >"$RUN/e2e-accounts"

bed_with_tally "$ROOT/target/plugins" "$RUN/e2e-accounts" "TALLY_CONFIG=$CONFIG"

status=0
TALLY_E2E_CONFIG=$CONFIG cargo test --locked -p tally-tests --features e2e --test e2e -- --test-threads=1 --nocapture || status=$?
if (( status != 0 )); then
    echo "---- slurmctld log (tally lines, last 60) ----"
    grep -E 'tally|error' "$RUN/log/slurmctld.log" | tail -n 60 || true
    exit "$status"
fi
bash testbed/down.sh
cargo test --locked -p tally-tests --features e2e --test replay -- --nocapture || status=$?
if (( status != 0 )); then
    echo "---- slurmctld log (tally and fatal lines, last 60) ----"
    grep -E 'tally|fatal|error' "$RUN/log/slurmctld.log" | tail -n 60 || true
fi
exit "$status"
