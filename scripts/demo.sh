#!/usr/bin/env bash
# The main job: a real Slurm 22.05 on this machine with Tally's priority plugin, and a short
# demo workload. Installs what it needs (Debian packages), builds the plugin and the CLI,
# brings up the loopback test bed (munge, MariaDB, slurmdbd with the example org tree,
# slurmctld with PriorityType=priority/tally, 4 nodes x 8 fake GPUs), then:
#   1. pretrain floods the cluster with allocated work,
#   2. six teams submit, over-budget pretrain first,
#   3. squeue shows the order Tally gives, sprio the factors, `tally share` the ledger,
#      `tally explain` why the first submission waits,
#   4. one GPU block frees up and the most under-served team's job takes it,
#   5. job_submit/tally refuses a bad contract at the door,
#   6. a debug job of an under-served team meets a full cluster: preempt/tally requeues
#      unallocated work and leaves every job inside its contract alone,
#   7. the planner thread is turned on by a reconfigure: the job that fits the hole a
#      running job leaves goes first,
#   8. `tally exporter` serves the figures for Prometheus and a page per account; the page
#      of the llm subtree is shot in headless Chromium.
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
# A command and its output (Tally's binary shown as `tally`, as installed).
show() { local shown="$*"; printf '$ %s\n' "${shown//"$TALLY"/tally}"; "$@"; }

step "Installing Slurm 22.05.8, MariaDB and munge (Debian packages, pinned)"
bash testbed/install.sh
step "Building priority_tally.so and the tally CLI (release)"
make --no-print-directory plugins build

step "Config: examples/tally.toml on a $((NODES * 8))-GPU test bed, re-ranking every 5 s"
mkdir -p "$DEMO"
sed -e "s/^gpus = .*/gpus = $((NODES * 8))/" -e 's/^calc_period = .*/calc_period = "5s"/' \
    examples/tally.toml >"$DEMO/tally.toml"
"$TALLY" config check "$DEMO/tally.toml" | sed -n 1,3p
"$TALLY" config accounts "$DEMO/tally.toml" >"$DEMO/accounts"

step "Bringing up the cluster (priority/tally, job_submit/tally, preempt/tally)"
TALLY_NODES=$NODES TALLY_PRIORITY_TYPE=priority/tally TALLY_PLUGIN_DIR=$ROOT/target/plugins \
    TALLY_ACCOUNTS=$DEMO/accounts TALLY_ENV="TALLY_CONFIG=$DEMO/tally.toml" \
    TALLY_SLURM_EXTRA=$'JobSubmitPlugins=tally\nPreemptType=preempt/tally\nPreemptMode=REQUEUE' \
    bash testbed/up.sh
scancel --quiet "$(squeue -h -o %i | tr '\n' ' ')" 2>/dev/null || true
wait_for 60 "an empty queue" queue_empty
scontrol update PartitionName=gpu State=UP   # a run stopped in step 7 may have left it DOWN

step "tally exporter: Tally's figures for Prometheus, and a page per account"
# Started beside the bed's daemons (stopped with them by make down). The example config
# has [reports] private = true: every account is served to the holder of a password (basic
# authentication, as a site's admin exporter; loopback alone is not private on a shared machine).
EXPORTER=127.0.0.1:${TALLY_EXPORTER_PORT:-9817}
stop_pids "the last demo's exporter" 10 $(pids_tagged tally)
DEMO_PASSWORD=$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')
( umask 077
  printf '%s\n' "$DEMO_PASSWORD" >"$DEMO/exporter-password"
  printf 'basic_auth_users:\n  demo: %s\n' "$(printf '%s\n' "$DEMO_PASSWORD" | "$TALLY" exporter hash-password)" >"$DEMO/exporter-web.yml" )
launch exporter "$TALLY" exporter --listen "$EXPORTER" --interval 5s --show-accounts --web-config "$DEMO/exporter-web.yml" -c "$DEMO/tally.toml"
exporter_up() { curl -sf -u "demo:$DEMO_PASSWORD" -o /dev/null "http://$EXPORTER/metrics"; }
wait_for 30 "the exporter to serve" exporter_up
echo "serving http://$EXPORTER/metrics (OpenMetrics) and the page http://$EXPORTER/"

step "1. pretrain (alice) fills all $((NODES * 8)) GPUs with allocated 8-GPU jobs (contract=2h)"
fillers=()
for (( i = 0; i < NODES; i++ )); do
    fillers+=("$(submit_as alice -N1 --gres=gpu:8 --comment "contract=2h" --wrap 'sleep 3600')")
done
all_running() { for j in "${fillers[@]}"; do [[ $(job_state "$j") == RUNNING ]] || return 1; done; }
wait_for 60 "pretrain's jobs to run" all_running
charged() { "$TALLY" share -P -n -A pretrain -o Used7d -c "$DEMO/tally.toml" 2>/dev/null | awk '$1+0 > 0 {ok=1} END {exit !ok}'; }
wait_for 30 "the ledger to charge pretrain" charged

step "2. Six submissions, in this order"
submitted=()
submit() {   # user, GPUs, comment
    local id; id=$(submit_as "$1" -N1 --gres=gpu:"$2" ${3:+--comment "$3"} --wrap 'sleep 3600')
    printf '  job %s  %-6s %d GPUs  %s\n' "$id" "$1" "$2" "${3:-(no contract)}"
    submitted+=("$id")
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
echo "Allocated work (a contract) before unallocated; inside the allocated tier, first the jobs whose"
echo "team is owed GPUs now (running below its rate), the least served first; pretrain already runs all"
echo "32 GPUs, far above its rate, so it waits behind every other team although it submitted first."
step "sprio: SITE = allocated tier, FAIRSHARE = owed now, level and 7-day team rank, QOS/NICE = inside the team"
show sprio -l
step "The ledger: tally share -a (7-day window, GPU-hours, rank 0 runs first; owed and delivered so far)"
show "$TALLY" share -a -c "$DEMO/tally.toml"
step "Why does pretrain's new job wait? tally explain"
show "$TALLY" explain "${submitted[0]}" -c "$DEMO/tally.toml"

step "4. One pretrain job ends: who gets its 8 GPUs?"
show scancel "${fillers[0]}"
started() { squeue -h -t R -o '%i %a' | grep -qvE ' pretrain$'; }
wait_for 60 "another team's job to start" started
show squeue -t R -o '%.6i %.11a %.6u %.3t %.10b  %k'

step "5. Contracts at the door: job_submit/tally"
printf '$ sbatch --comment "contract=9h" ... (as bob)\n'
submit_as bob -N1 --gres=gpu:1 --comment "contract=9h" --wrap 'sleep 60' 2>&1 | grep -v '^\[testbed' || true

step "6. A debug job meets a full cluster: preempt/tally"
busy_gpus() { squeue -h -t R -o '%b' | sed -n 's/.*gpu:\([0-9]*\).*/\1/p' | awk '{s += $1} END {print s + 0}'; }
sleep 11   # two backfill cycles: let the scheduler place what fits
free=$(( NODES * 8 - $(busy_gpus) ))
if (( free > 0 )); then
    echo "multimodal (erin) soaks up the $free idle GPUs with unallocated work (contract=0):"
    soak=$(submit_as erin -N1 --gres=gpu:"$free" --comment "contract=0" --wrap 'sleep 3600')
    soaking() { [[ $(job_state "$soak") == RUNNING ]]; }
    wait_for 60 "the unallocated job to start" soaking
fi
show squeue -t R -o '%.6i %.11a %.6u %.3t %.10b  %k'
echo
echo "vision (dave) submits a 2-GPU debug job with contract=15m and a 15-minute time limit:"
t0=$(now)
debug=$(submit_as dave -N1 --gres=gpu:2 --comment "contract=15m" --time=15 --wrap 'sleep 600')
debug_running() { [[ $(job_state "$debug") == RUNNING ]]; }
wait_for 60 "the debug job to start" debug_running
echo "debug job $debug started after $(elapsed "$t0") s"
show squeue -o '%.6i %.11a %.6u %.9T %.10b  %k'
echo
echo "Unallocated work was requeued to make room; every job inside its contract kept running."
step "Owed and delivered so far, measured by the plugin tick by tick (and the chart: $DEMO/owed.svg)"
show "$TALLY" share -c "$DEMO/tally.toml" --svg "$DEMO/owed.svg"

step "7. The planner (Dharma's rolling horizon), turned on by a reconfigure"
scancel --quiet $(squeue -h -o %i | tr '\n' ' ') 2>/dev/null || true
wait_for 60 "an empty queue" queue_empty
sed -i -e 's/^enabled = false/enabled = true/' -e 's/^interval = "30m"/interval = "5s"/' "$DEMO/tally.toml"
grep -E '^(enabled|interval) =' "$DEMO/tally.toml"
show scontrol reconfigure
# These jobs give a time limit (2 h) within the contract maximum: without one, pretrain's job of the
# hole would be a long job that cannot checkpoint, which Tally starts only on its team's fair share
# while another team is owed (docs/design.md, "Jobs that cannot checkpoint"): here the plan decides.
echo "pretrain (alice) takes $(( (NODES - 1) * 8 + 4 )) GPUs: $(( NODES - 1 )) whole nodes and half of the last one"
busy=()
for (( i = 1; i < NODES; i++ )); do
    busy+=("$(submit_as alice -N1 --gres=gpu:8 --comment "contract=2h" --time=120 --wrap 'sleep 3600')")
done
busy+=("$(submit_as alice -N1 --gres=gpu:4 --comment "contract=2h" --time=120 --wrap 'sleep 3600')")
busy_running() { for j in "${busy[@]}"; do [[ $(job_state "$j") == RUNNING ]] || return 1; done; }
wait_for 60 "pretrain's jobs to run" busy_running
echo "The partition is set DOWN for a moment so the queue can be read before anything starts:"
show scontrol update PartitionName=gpu State=DOWN
whole=$(submit_as carol -N1 --gres=gpu:8 --comment "contract=1h" --time=120 --wrap 'sleep 3600')
hole=$(submit_as alice -N1 --gres=gpu:4 --comment "contract=1h" --time=120 --wrap 'sleep 3600')
echo "  job $whole  carol (climate, under-served)  8 GPUs: needs a whole node, none is free"
echo "  job $hole  alice (pretrain, over budget)  4 GPUs: fits the 4 GPUs left on the last node"
planned() { (( ( $(squeue -h -j "$hole" -o %Q) >> 30 ) & 1 )); }
wait_for 30 "the planner to start the job that fits" planned
show squeue -t PD -S -p -o '%.6i %.11a %.6u %.3t %.12Q  %k'
show sprio -l -j "$whole,$hole"
grep -o 'priority/tally: plan: .*' "$TB_RUN/log/slurmctld.log" | tail -n 1
echo
echo "The plan starts pretrain's 4-GPU job now (PARTITION = the plan bit, 2^30), ahead of climate's"
echo "8-GPU job that cannot start within the plan's horizon, though climate ranks better; nothing crosses the"
echo "allocated/unallocated tier. Reopening the partition:"
show scontrol update PartitionName=gpu State=UP
hole_running() { [[ $(job_state "$hole") == RUNNING ]]; }
wait_for 60 "the planned job to start" hole_running
show squeue -o '%.6i %.11a %.6u %.9T %.10b  %k'

step "Where sites look: the exporter and the page"
series='^tally_account_(delivered|owed|used)_gpu_seconds\{account="(pretrain|climate)"\}'
printf "\$ curl -s -u demo:PASSWORD http://%s/metrics | grep -E '%s'\n" "$EXPORTER" "$series"
curl -s -u "demo:$DEMO_PASSWORD" "http://$EXPORTER/metrics" | grep -E "$series"
sleep 11   # a recalculation and a refresh of the exporter: the page shows the last step's jobs
bash testbed/screenshot.sh "http://demo:$DEMO_PASSWORD@$EXPORTER/account/llm" "$DEMO/page.png" 1280 1300 >/dev/null
echo "The page of the llm subtree, in headless Chromium: $DEMO/page.png"
echo
echo "The cluster is still running: try squeue, sprio -l, sshare, $TALLY share -a -c $DEMO/tally.toml"
echo "  Prometheus metrics: http://$EXPORTER/metrics   (user demo, password in $DEMO/exporter-password)"
echo "  the page:           http://$EXPORTER/   (one per account: http://$EXPORTER/account/NAME)"
echo "Stop it with: make down"
