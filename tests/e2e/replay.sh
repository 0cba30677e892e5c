#!/usr/bin/env bash
# Real-Slurm replay of a trace window (as root): build the plugins, the CLI and the
# driver, bring a fresh test bed up for one policy (6 nodes x 8 fake GPUs by default),
# submit every trace job at its compressed submit time, wait for the jobs (or a deadline),
# dump sacct, and always tear the bed down. See tests/src/replay.rs.
#
# Usage: tests/e2e/replay.sh <multifactor|tally> <trace.csv> [speedup]
#   speedup   trace seconds per real second (default 180: one trace hour = 20 s). The Tally
#             config (tests/e2e/replay-tally.toml) is scaled for 180: give another one with
#             REPLAY_CONFIG for another speedup.
# Environment (optional):
#   REPLAY_GPUS     GPUs of the bed, a multiple of 8 (default 48)
#   REPLAY_DRAIN    real seconds after the last submission before what is left is cancelled
#                   (default 600)
#   REPLAY_CONFIG   Tally config (default tests/e2e/replay-tally.toml)
#   REPLAY_PROBE=1  first measure the bed's scheduling latencies (a separate bring-up)
#   REPLAY_BUILD=0  do not build (use target/plugins, target/release/tally and the driver as
#                   they are)
#   REPLAY_BIN      the driver to run (default target/release/replay)
#   TALLY_RUN_DIR   the bed's run dir (default /var/tmp/tally-testbed); the results go to
#                   <run dir>/replay/<policy>/ (sacct.txt, idmap.tsv, summary.txt)
# The last line printed is the path of the sacct dump.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD

usage() { echo "usage: tests/e2e/replay.sh <multifactor|tally> <trace.csv> [speedup]  (see the header of this file)" >&2; exit 2; }
(( $# >= 2 && $# <= 3 )) || usage
POLICY=$1 TRACE=$2 SPEEDUP=${3:-180}
[[ $POLICY == multifactor || $POLICY == tally ]] || usage
[[ -r $TRACE ]] || { echo "cannot read $TRACE" >&2; exit 2; }
TRACE=$(cd "$(dirname "$TRACE")" && pwd)/$(basename "$TRACE")
RUN=${TALLY_RUN_DIR:-/var/tmp/tally-testbed}
CONFIG=${REPLAY_CONFIG:-$ROOT/tests/e2e/replay-tally.toml}
BIN=${REPLAY_BIN:-$ROOT/target/release/replay}
ARGS=(--speedup "$SPEEDUP" --gpus "${REPLAY_GPUS:-48}" --drain "${REPLAY_DRAIN:-600}"
      --config "$CONFIG" --run-dir "$RUN" --repo "$ROOT")

if [[ ${REPLAY_BUILD:-1} != 0 ]]; then
    make --no-print-directory plugins build
    cargo build --release --locked -p tally-tests --bin replay
fi

mkdir -p "$RUN"
t0=$SECONDS
down() {
    local t=$SECONDS
    TALLY_RUN_DIR=$RUN bash testbed/down.sh || true
    echo "[replay.sh] teardown took $(( SECONDS - t ))s; total $(( SECONDS - t0 ))s" >&2
}
trap down EXIT

if [[ ${REPLAY_PROBE:-0} == 1 ]]; then
    "$BIN" probe "$POLICY" "$TRACE" "${ARGS[@]}"
fi
"$BIN" "$POLICY" "$TRACE" "${ARGS[@]}" | tee "$RUN/replay-$POLICY.out"
