#!/usr/bin/env bash
# `make results`: measure Tally against FIFO and Slurm's multifactor and
# rewrite docs/results.md, and the summary table between the results
# markers of README.md, from this one run. A new run replaces the old
# figures; nothing is appended.
#
# What it runs (each command is printed in the file beside its figures):
#   1. the benchmark suite in the simulator (`tally sim suite`, the shared
#      GPU traces at 0.8-3x demand, five synthetic cases and the gaming
#      family), then the same under Tally with one debug node;
#   2. the real-Slurm replay (tests/tests/replay.rs: a trace window under
#      multifactor, then under Tally, on the local test bed), RUNS times,
#      since real runs vary by a few points: the file gives the range;
#   3. the planner on 40 generated instances against full mode's bounds;
#   4. speed: the suite's wall time, `tally plan` on every shipped scenario
#      (median of 5), the plugin's tick at 100,000 jobs, the simulator's
#      replay of 60 days and `tally explain` on a 10,000-job queue (benches).
#
# As root on the machine `make test` runs on (it brings the test bed up and
# down). Needs the GPU traces: TALLY_TRACES (default: as scripts/fetch.sh
# finds them, ../shared/traces/elasticflow-itp or its cache, or fetches them
# pinned). Environment:
#   TALLY_RESULTS_RUNS        real-Slurm replays (default 2)
#   TALLY_RESULTS_PLAN_LIMIT  full mode's time limit per instance (default 30s)
# About 35 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=testbed/lib.sh
source testbed/lib.sh

TRACES=${TALLY_TRACES:-$(bash scripts/fetch.sh ensure traces)} || exit 1
# As docs/results.md names the folder: ../shared's by its relative path, the cache's under ~.
[[ $TRACES -ef ../shared/traces/elasticflow-itp ]] && TRACES=../shared/traces/elasticflow-itp
SHOWN_TRACES=$TRACES
[[ -n ${HOME:-} && $HOME != / ]] && SHOWN_TRACES=${TRACES/#$HOME\//\~/}
RUNS=${TALLY_RESULTS_RUNS:-2}
LIMIT=${TALLY_RESULTS_PLAN_LIMIT:-30s}
[[ -d $TRACES ]] || die "results: no traces at $TRACES (set TALLY_TRACES to the folder of the ElasticFlow cluster CSVs)"
[[ $RUNS =~ ^[1-9]$ ]] || die "results: TALLY_RESULTS_RUNS=$RUNS: give 1 to 9 replays"
WORK=$(mktemp -d /var/tmp/tally-results.XXXXXX)
log "results: raw outputs in $WORK"

t0=$(now)
make --no-print-directory build plugins
bash testbed/install.sh >/dev/null
cargo build --release --locked -p tally-tests --bin results
TALLY=target/release/tally
log "results: built [$(elapsed "$t0")s]"

# `timed OUT CMD...`: CMD's output into OUT; prints its wall time in
# seconds, with two decimals.
timed() {
    local out=$1 s e
    shift
    s=$(date +%s.%N)
    "$@" >"$out"
    e=$(date +%s.%N)
    awk -v s="$s" -v e="$e" 'BEGIN { printf "%.4f", e - s }'
}

# The importer against the traces' own table, before they are used.
cargo test --locked -p tally-sim --features shared-traces --test shared_traces >/dev/null 2>&1 ||
    die "results: the traces in ../shared/traces do not match their README's table (cargo test -p tally-sim --features shared-traces --test shared_traces)"

# 1. The suite.
SUITE_CMD="tally sim suite --config examples/tally.toml --traces $SHOWN_TRACES --json"
t0=$(now)
suite_s=$(timed "$WORK/suite.json" "$TALLY" sim suite --config examples/tally.toml --traces "$TRACES" --json --quiet)
log "results: suite [$(elapsed "$t0")s]"
# The same cases under Tally with one debug node (the debug capacity and its cost).
t0=$(now)
"$TALLY" sim suite --config examples/tally.toml --traces "$TRACES" --json --quiet --policies tally --debug-nodes 1 >"$WORK/suite-debug-node.json"
log "results: suite with one debug node [$(elapsed "$t0")s]"

# 2. The real-Slurm replay, RUNS times.
REPLAY_CMD="cargo test --locked -p tally-tests --features e2e --test replay -- --nocapture"
for i in $(seq 1 "$RUNS"); do
    t0=$(now)
    status=passed
    TALLY_REPLAY_JSON="$WORK/replay-$i.json" cargo test --locked -p tally-tests --features e2e --test replay -- --nocapture \
        >"$WORK/replay-$i.log" 2>&1 || status=failed
    bash testbed/down.sh >/dev/null 2>&1 || true
    [[ -s $WORK/replay-$i.json ]] || die "results: replay $i wrote no figures; its output: $WORK/replay-$i.log"
    echo "$status" >"$WORK/replay-$i.status"
    log "results: real-Slurm replay $i of $RUNS $status [$(elapsed "$t0")s]"
done

# 3. The planner on generated instances.
PLAN_CMD="tally plan --instances 40 --mode full --time-limit $LIMIT"
t0=$(now)
"$TALLY" plan --instances 40 --mode full --time-limit "$LIMIT" --quiet >"$WORK/instances.txt"
log "results: planner instances [$(elapsed "$t0")s]"

# 4. Speed: every scenario's plan (whole process, 5 times each), then the benches.
t0=$(now)
for scenario in examples/scenarios/*.toml; do
    name=$(basename "$scenario" .toml)
    : >"$WORK/plan-$name.txt"
    for _ in 1 2 3 4 5; do
        echo "$(timed /dev/null "$TALLY" plan --scenario "$scenario")" >>"$WORK/plan-$name.txt"
    done
done
cargo bench --locked -p tally-engine --bench tick >"$WORK/tick.txt" 2>/dev/null
cargo bench --locked -p tally-sim --bench replay >"$WORK/replay-bench.txt" 2>/dev/null
cargo bench --locked -p tally-cli --bench explain >"$WORK/explain.txt" 2>/dev/null
log "results: speed [$(elapsed "$t0")s]"

cores=$(nproc)
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)
slurm=$(slurmctld -V 2>/dev/null | head -n1 || echo "slurm ?")
# The version, not the commit (`tally --version` names it; user documents carry no hash).
version=$("$TALLY" --version | sed 's/ (.*//')
dirty=$(git status --porcelain --untracked-files=no | head -c1)
[[ -z $dirty ]] || version="$version, built with uncommitted changes"
target/release/results \
    --work "$WORK" --runs "$RUNS" \
    --date "$(date -u '+%Y-%m-%d %H:%M UTC')" --version "$version" \
    --machine "$cores cores ($cpu), $(. /etc/os-release && echo "$PRETTY_NAME"), $slurm" \
    --traces "$SHOWN_TRACES" --suite-cmd "$SUITE_CMD" --suite-s "$suite_s" \
    --replay-cmd "$REPLAY_CMD" --plan-cmd "$PLAN_CMD" \
    --out docs/results.md --readme README.md
log "results: wrote docs/results.md and README.md's summary"
