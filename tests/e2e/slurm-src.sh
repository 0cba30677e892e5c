#!/usr/bin/env bash
# The end-to-end suite (tests/tests/e2e.rs) against a Slurm release built from SchedMD's
# sources (25.11, 26.05): Slurm built into its own prefix by testbed/slurm-src.sh (cached by
# the tarball's checksum), Tally's package for that release (make deb SLURM=<release>)
# installed with dpkg beside a stand-in for SchedMD's slurm-smd-slurmctld (testbed/deb.sh),
# the test bed on the host with the release's own run dir, ports and config dir, brought up
# and down here.
#
# Usage: tests/e2e/slurm-src.sh <release> [test filters passed to the e2e tests (default: all)]
set -euo pipefail
cd "$(dirname "$0")/../.."
release=${1:?usage: tests/e2e/slurm-src.sh 25.11|26.05 [test filters]}
shift
start=$(date +%s.%N)
TALLY_SLURM_PREFIX=$(bash testbed/slurm-src.sh ensure "$release")
export TALLY_SLURM_PREFIX
export TALLY_RUN_DIR=/var/tmp/tally-testbed-$release
# shellcheck source=testbed/lib.sh
source testbed/lib.sh
RUN=$TB_RUN
CONFIG=$RUN/e2e-tally.toml

make --no-print-directory deb SLURM="$release"
DEB=$(SLURM=$release SLURM_HEADER="$TALLY_SLURM_PREFIX/include/slurm/slurm_version.h" bash scripts/mkdeb.sh --path)
log "$release: Slurm $TB_SLURM_VERSION in $TALLY_SLURM_PREFIX, package $(basename "$DEB") [$(elapsed "$start")s]"
mkdir -p "$RUN"
cp tests/e2e/tally.toml "$CONFIG"
target/release/tally config accounts "$CONFIG" >"$RUN/e2e-accounts"

bash testbed/deb.sh install "$DEB"
# shellcheck disable=SC2317 # (the EXIT trap's)
finish() {
    bash testbed/down.sh || true
    bash testbed/deb.sh remove "$DEB" || true
}
trap finish EXIT
# The package's plugins, where SchedMD's packages keep them, before the prefix's own.
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
export TALLY_NODES=2 TALLY_PRIORITY_TYPE=priority/tally TALLY_PLUGIN_DIR=/usr/lib/$multiarch/slurm
export TALLY_ACCOUNTS=$RUN/e2e-accounts TALLY_ENV="TALLY_CONFIG=$CONFIG"
export TALLY_GPU_TYPES="h100 b200" TALLY_DEBUG_PARTITION=1 TALLY_SLURM_EXTRA=$E2E_SLURM_EXTRA
bash testbed/up.sh
scontrol version
t0=$(now)
status=0
TALLY_E2E_CONFIG=$CONFIG cargo test --locked -p tally-tests --features e2e --test e2e -- --test-threads=1 --nocapture "$@" || status=$?
if (( status != 0 )); then
    echo "---- $release slurmctld log (tally and error lines, last 60) ----"
    grep -E 'tally|error|fatal' "$RUN/log/slurmctld.log" | tail -n 60 || true
fi
log "$release: e2e suite $( (( status == 0 )) && echo passed || echo FAILED) [$(elapsed "$t0")s; $(elapsed "$start")s in all]"
exit "$status"
