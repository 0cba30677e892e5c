#!/usr/bin/env bash
# The main job: a real Slurm 22.05 on this machine with Tally's priority plugin, and a short
# demo workload. Installs what it needs (Debian packages), builds the plugin and the CLI,
# brings up the loopback test bed (munge, MariaDB, slurmdbd with the example org tree,
# slurmctld with PriorityType=priority/tally, 4 nodes x 8 fake GPUs), then:
#   1. pretrain floods the cluster with allocated work,
#   2. six teams submit, over-budget pretrain first,
#   3. squeue shows the order Tally gives, sprio the factors, `tally share` the ledger,
#   4. one GPU block frees up and the most under-served team's job takes it.
# The cluster is left running for you to explore; `make down` stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# shellcheck source=testbed/lib.sh
source testbed/lib.sh

NODES=${TALLY_NODES:-4}
DEMO=$TB_RUN/demo
TALLY=$ROOT/target/release/tally

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
show() { printf '$ %s\n' "$*"; "$@"; }

step "Installing Slurm 22.05.8, MariaDB and munge (Debian packages, pinned)"
bash testbed/install.sh
step "Building priority_tally.so and the tally CLI (release)"
make --no-print-directory plugins build

step "Config: examples/tally.toml on a $((NODES * 8))-GPU test bed, re-ranking every 5 s"
mkdir -p "$DEMO"
sed -e "s/^gpus = .*/gpus = $((NODES * 8))/" -e 's/^calc_period = .*/calc_period = "5s"/' \
    examples/tally.toml >"$DEMO/tally.toml"
"$TALLY" config check "$DEMO/tally.toml" | head -n 3
"$TALLY" config accounts "$DEMO/tally.toml" >"$DEMO/accounts"

step "Bringing up the cluster (slurmctld with PriorityType=priority/tally)"
TALLY_NODES=$NODES TALLY_PRIORITY_TYPE=priority/tally TALLY_PLUGIN_DIR=$ROOT/target/plugins \
    TALLY_ACCOUNTS=$DEMO/accounts TALLY_ENV="TALLY_CONFIG=$DEMO/tally.toml" bash testbed/up.sh
scancel --quiet "$(squeue -h -o %i | tr '\n' ' ')" 2>/dev/null || true
wait_for 60 "an empty queue" queue_empty

step "1. pretrain (alice) fills all $((NODES * 8)) GPUs with allocated 8-GPU jobs (contract=2h)"
fillers=()
for (( i = 0; i < NODES; i++ )); do
    fillers+=("$(submit_as alice -N1 --gres=gpu:8 --comment "contract=2h" --wrap 'sleep 3600')")
done
all_running() { for j in "${fillers[@]}"; do [[ $(job_state "$j") == RUNNING ]] || return 1; done; }
wait_for 60 "pretrain's jobs to run" all_running
charged() { "$TALLY" share -P -c "$DEMO/tally.toml" 2>/dev/null | awk -F'|' '$1=="pretrain" && $4+0 > 0 {ok=1} END {exit !ok}'; }
wait_for 30 "the ledger to charge pretrain" charged

step "2. Six submissions, in this order"
submit() {   # user, GPUs, comment
    local id; id=$(submit_as "$1" -N1 --gres=gpu:"$2" ${3:+--comment "$3"} --wrap 'sleep 3600')
    printf '  job %s  %-6s %d GPUs  %s\n' "$id" "$1" "$2" "${3:-(no contract)}"
}
submit alice 8 "contract=1h"
submit dave 4 ""
submit bob 8 "contract=2h,resumable"
submit carol 2 "contract=30m"
submit erin 4 "contract=0"
submit frank 1 "contract=15m"
sleep 6   # one recalculation

step "3. The queue as Tally orders it (pending jobs, highest priority first)"
show squeue -t PD -S -p -o '%.6i %.11a %.6u %.3t %.12Q  %k'
echo
echo "Allocated work (a contract) before unallocated; inside each tier, teams by fair share:"
echo "pretrain, over its budget, waits behind every other team although it submitted first."
step "sprio: SITE = allocated tier, FAIRSHARE = team rank, QOS/NICE/AGE = inside the team"
show sprio -l
step "The ledger: tally share -a (7-day window, GPU-hours, rank 0 runs first)"
show "$TALLY" share -a -c "$DEMO/tally.toml"

step "4. One pretrain job ends: who gets its 8 GPUs?"
show scancel "${fillers[0]}"
started() { squeue -h -t R -o '%i %a' | grep -qvE ' pretrain$'; }
wait_for 60 "another team's job to start" started
show squeue -t R -o '%.6i %.11a %.6u %.3t %.10b  %k'
echo
echo "The cluster is still running: try squeue, sprio -l, sshare, $TALLY share -a -c $DEMO/tally.toml"
echo "Stop it with: make down"
