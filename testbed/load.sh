#!/usr/bin/env bash
# Tally load test (docs/reliability.md, "## Load"): JOBS pending jobs (default 10,000) over 200
# accounts in a real slurmctld with 64 emulated nodes x 8 fake GPUs, one queue measured under
# several scheduling set-ups in interleaved rounds. Run as root:
#
#   bash testbed/load.sh                          # 10,000 jobs, 3 rounds: ~45 min
#   TALLY_LOAD_JOBS=100000 TALLY_LOAD_RUNS=2 bash testbed/load.sh   # ~45 min
#
# The set-ups (TALLY_LOAD_POLICIES, in this order in round 1, rotated by one each round):
#   multifactor       PriorityType=priority/multifactor, no preemption (PreemptType=preempt/none)
#   multifactor+qos   priority/multifactor with preempt/qos, PreemptMode=REQUEUE: the set-up a
#                     site uses today to get preemption (QOS high may preempt QOS normal)
#   tally             priority/tally with preempt/tally, PreemptMode=REQUEUE
#   tally-before      the same with the plugins in TALLY_LOAD_BEFORE (an earlier build), so a
#                     change is measured in the same run as the code before it
# Every set-up has PriorityCalcPeriod=1 (minute; Tally's calc_period is 60 s) and
# PreemptExemptTime=04:00:00: nothing is ever preempted (the fill jobs are 4 h jobs, and inside
# Tally's 4 h contracts), so the queue stays the same and every cell measures the same load.
#
#   1. Builds the plugins once (`make plugins`, retried once after 3 minutes: others may be
#      mid-edit) and the CLI, copies the plugins to $WORK/plugins (later rebuilds do not change
#      the run), compiles testbed/load-probe.c.
#   2. Generates (seeded) a tally.toml with 10 programmes x 20 teams (equal shares, gpus = 512,
#      [log] debug = true, calc_period 60s), the bed's accounts file (from `tally config
#      accounts`, plus 10 users, one per programme, in its 20 team accounts, with QOS normal and
#      high, and QOS high allowed to preempt normal) and the job list: 64 fill jobs (8 GPUs
#      each, 4 h, QOS normal, they take all 512 GPUs) and JOBS pending jobs, random account,
#      1/2/4/8 GPUs, comment contract=30m/1h/2h/4h (10% without), time limit >= the contract,
#      10% in QOS high.
#   3. Starts one bed (testbed/up.sh, 64 nodes, own run dir $WORK/bed, so the default bed's
#      accounting database is not touched), submits the fill jobs (waits until all 64 run) and
#      the pending jobs (one RPC each from load-probe, as the accounts' users).
#   4. Each round, each set-up: rewrites PriorityType/PreemptType/PreemptMode/PluginDir in
#      slurm.conf, restarts slurmctld (testbed/restart-ctld.sh: the jobs are kept in its saved
#      state and keep running on the slurmds), settles SETTLE s, then one window of WINDOW s.
#      In each window: load-probe calls slurm_load_job (answered under the job READ lock, so it
#      waits out every job write lock) every PROBE_MS ms and records the latency, the
#      recalculation thread's CPU time (/proc/<ctld>/task/<decay|tally-recalc>/schedstat) and
#      multifactor's decay marks (mtime of StateSaveLocation/priority_last_decay_ran);
#      `sdiag -r` before, `sdiag` after; Tally's own "tick: ... lock waited A us, held B us"
#      lines from slurmctld's log; preempt/tally's thread CPU; the machine's and slurmctld's CPU.
#   5. Sets the partition DOWN, cancels the running jobs, stops slurmctld with the pending jobs
#      in it (its next start wipes them) and runs testbed/down.sh, also on error or interrupt
#      (trap); then removes the bed's configs from /etc/slurm (they name $WORK/bed, which a
#      later plain up.sh would otherwise reuse).
#   Prints a table, per set-up the median [min-max] of the rounds, and the ratios of the
#   medians (tally / multifactor+qos, the targets' baseline); writes it, with every raw file, to
#   $WORK/results; with TALLY_LOAD_DOCS=1 (the default) also into docs/reliability.md between
#   the markers for its JOBS (10000 or 100000), which is how that page's tables are made.
#
# Environment (all optional):
#   TALLY_LOAD_DIR      work dir (default /var/tmp/tally-load)
#   TALLY_LOAD_JOBS     pending jobs (default 10000; 1000-200000)
#   TALLY_LOAD_RUNS     rounds (default 3; 1-10)
#   TALLY_LOAD_POLICIES set-ups, from the list above (default "multifactor multifactor+qos
#                       tally", plus tally-before when TALLY_LOAD_BEFORE is set)
#   TALLY_LOAD_BEFORE   a directory with priority_tally.so, preempt_tally.so, job_submit_tally.so
#                       of an earlier build: adds the set-up tally-before
#   TALLY_LOAD_SEED     seed of the generated queue (default 1)
#   TALLY_LOAD_WINDOW   measurement window per cell, s (default 180: three recalculations)
#   TALLY_LOAD_SETTLE   pause after each restart, s (default 45; 30 more from 50,000 jobs)
#   TALLY_LOAD_PROBE_MS probe interval (default 20)
#   TALLY_LOAD_DOCS     1 (default): write the table into docs/reliability.md; 0: do not
#   TALLY_LOAD_PLUGINS  use the plugins already built in this dir (no build; e.g. when the tree
#                       does not compile mid-edit); the CLI from TALLY_LOAD_CLI (default
#                       <dir>/tally)
set -euo pipefail
ROOT=${TALLY_LOAD_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$ROOT"
WORK=${TALLY_LOAD_DIR:-/var/tmp/tally-load}
# Run from a copy: bash reads a script as it goes, and this one runs for 17-20 minutes.
if [[ -z ${TALLY_LOAD_ROOT:-} ]]; then
    mkdir -p "$WORK" && cp "$ROOT/testbed/load.sh" "$WORK/load.sh.run"
    TALLY_LOAD_ROOT=$ROOT exec bash "$WORK/load.sh.run" "$@"
fi
export TALLY_RUN_DIR=$WORK/bed
# shellcheck source=testbed/lib.sh
source "$ROOT/testbed/lib.sh"
[[ $(id -u) == 0 ]] || die "load.sh must run as root"

# number <name> <value> <min> <max>: the value, or exit 2 saying what is allowed
number() {
    [[ $2 =~ ^[0-9]+$ ]] && (( $2 >= $3 && $2 <= $4 )) \
        || { echo "load.sh: $1 must be a whole number from $3 to $4, not '$2'" >&2; exit 2; }
    echo "$2"
}
JOBS=$(number TALLY_LOAD_JOBS "${TALLY_LOAD_JOBS:-10000}" 1000 200000)
RUNS=$(number TALLY_LOAD_RUNS "${TALLY_LOAD_RUNS:-3}" 1 10)
SEED=$(number TALLY_LOAD_SEED "${TALLY_LOAD_SEED:-1}" 0 4294967295)
WINDOW=$(number TALLY_LOAD_WINDOW "${TALLY_LOAD_WINDOW:-180}" 60 3600)
SETTLE=$(number TALLY_LOAD_SETTLE "${TALLY_LOAD_SETTLE:-45}" 0 3600)
PROBE_MS=$(number TALLY_LOAD_PROBE_MS "${TALLY_LOAD_PROBE_MS:-20}" 1 10000)
DOCS=$(number TALLY_LOAD_DOCS "${TALLY_LOAD_DOCS:-1}" 0 1)
BEFORE=${TALLY_LOAD_BEFORE:-}
if [[ -n $BEFORE ]]; then
    for f in priority_tally job_submit_tally preempt_tally; do
        [[ -r $BEFORE/$f.so ]] || { echo "load.sh: TALLY_LOAD_BEFORE=$BEFORE has no $f.so" >&2; exit 2; }
    done
fi
read -r -a POLICIES <<<"${TALLY_LOAD_POLICIES:-multifactor multifactor+qos tally${BEFORE:+ tally-before}}"
for p in "${POLICIES[@]}"; do
    case $p in
        multifactor|multifactor+qos|tally) ;;
        tally-before) [[ -n $BEFORE ]] || { echo "load.sh: tally-before needs TALLY_LOAD_BEFORE (a plugin dir)" >&2; exit 2; } ;;
        *) echo "load.sh: unknown set-up '$p' in TALLY_LOAD_POLICIES (allowed: multifactor multifactor+qos tally tally-before)" >&2; exit 2 ;;
    esac
done
(( ${#POLICIES[@]} )) || { echo "load.sh: TALLY_LOAD_POLICIES is empty" >&2; exit 2; }
(( JOBS >= 50000 )) && SETTLE=$(( SETTLE + 30 ))   # a restart recovers the jobs, then Tally ranks them all
NODES=64
FILL=64
RES=$WORK/results
PY=$(command -v python3) || die "python3 is needed"
USERS=(tload01 tload02 tload03 tload04 tload05 tload06 tload07 tload08 tload09 tload10)

T_START=$(now)
mkdir -p "$WORK"
rm -rf "$RES" && mkdir -p "$RES"
exec > >(tee "$RES/load.log") 2>&1
log "load: work dir $WORK, $JOBS pending jobs, $NODES nodes, set-ups '${POLICIES[*]}', $RUNS rounds," \
    "window ${WINDOW}s after ${SETTLE}s, probe every ${PROBE_MS} ms"

# ---- 1. build once ---------------------------------------------------------------------------
build() {
    local try
    for try in 1 2; do
        if make --no-print-directory plugins build >"$WORK/build.log" 2>&1; then return 0; fi
        (( try == 2 )) && { tail -n 30 "$WORK/build.log"; die "make plugins build failed twice"; }
        warn "make plugins build failed (others may be mid-edit); retrying in 3 minutes"
        tail -n 10 "$WORK/build.log"
        sleep 180
    done
}
SRC_PLUGINS=target/plugins SRC_TALLY=target/release/tally
if [[ -n ${TALLY_LOAD_PLUGINS:-} ]]; then
    SRC_PLUGINS=$TALLY_LOAD_PLUGINS SRC_TALLY=${TALLY_LOAD_CLI:-$TALLY_LOAD_PLUGINS/tally}
    log "not building: plugins from $SRC_PLUGINS, CLI $SRC_TALLY"
else
    t=$(now); build; log "built plugins and CLI [$(elapsed "$t")s]"
fi
grep -qa 'lock waited' "$SRC_PLUGINS/priority_tally.so" || die "priority_tally.so lacks the tick timing line"
rm -rf "$WORK/plugins" && mkdir -p "$WORK/plugins"
cp -p "$SRC_PLUGINS"/*.so "$WORK/plugins/"
rm -rf "$WORK/plugins-before"
if [[ -n $BEFORE ]]; then
    mkdir -p "$WORK/plugins-before" && cp -p "$BEFORE"/{priority_tally,job_submit_tally,preempt_tally}.so "$WORK/plugins-before/"
    (cd "$WORK/plugins-before" && sha256sum ./*.so) >"$RES/plugins-before.sha256"
fi
cp -p "$SRC_TALLY" "$WORK/tally.bin" && mv -f "$WORK/tally.bin" "$WORK/tally"
cc -O2 -Wall -o "$WORK/load-probe" testbed/load-probe.c -lslurm || die "cannot compile testbed/load-probe.c"
PROBE=$WORK/load-probe
(cd "$WORK/plugins" && sha256sum ./*.so) >"$RES/plugins.sha256"
{   # what was built: the commit and, when the tree had uncommitted edits, their digest
    date -u +%FT%TZ
    git -C "$ROOT" log -1 --format='%h %s' 2>/dev/null || true
    git -C "$ROOT" status --short 2>/dev/null | wc -l | sed 's/$/ files with uncommitted changes/'
    git -C "$ROOT" diff 2>/dev/null | sha256sum | sed 's/ .*/ (sha256 of git diff)/'
} >"$RES/commit"

# ---- 2. config, accounts, queue --------------------------------------------------------------
"$PY" - "$WORK" "$JOBS" "$SEED" "$FILL" "${USERS[@]}" <<'EOF'
import random, sys
work, jobs, seed, fill, users = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:]
rng = random.Random(seed)
progs = [f"p{p:02d}" for p in range(1, 11)]
teams = [f"{p}t{t:02d}" for p in progs for t in range(1, 21)]
with open(f"{work}/tally.toml", "w") as f:
    f.write("# Written by testbed/load.sh: 10 programmes x 20 teams, equal shares.\n")
    f.write('[cluster]\ngpus = 512\ngpus_per_node = 8\n\n[priority]\ncalc_period = "60s"\n\n[log]\ndebug = true\n\n')
    for p in progs:
        f.write(f"[accounts.{p}]\nshare = 10\n")
    for t in teams:
        f.write(f'[accounts.{t}]\nparent = "{t[:3]}"\nshare = 5\n')
with open(f"{work}/users", "w") as f:
    # preempt/qos's set-up: QOS high may preempt QOS normal (PreemptExemptTime keeps it from
    # happening); every user may use both, normal by default.
    f.write("qos high preempt=normal\n")
    for i, p in enumerate(progs):
        for t in teams:
            if t.startswith(p):
                f.write(f"user {users[i]} {t} qos=normal,high defaultqos=normal\n")
def line(team, gpus, limit, comment, name, qos="normal"):
    user = users[progs.index(team[:3])]
    return f"{user} {team} {gpus} {limit} {comment} {name} {qos}\n"
qos_rng = random.Random(seed + 1)   # its own stream: the rest of the queue is as without it
with open(f"{work}/fill.jobs", "w") as f:
    for i in range(fill):   # every third team: 64 of the 200 run something
        f.write(line(teams[(i * 3) % len(teams)], 8, 240, "contract=4h", f"fill{i}"))
contracts = [("30m", 30), ("1h", 60), ("2h", 120), ("4h", 240)]
limits = [30, 60, 120, 240, 480]
with open(f"{work}/pending.jobs", "w") as f:
    for i in range(jobs):
        team = rng.choice(teams)
        gpus = rng.choice([1, 2, 4, 8])
        if rng.random() < 0.1:
            comment, least = "-", 30
        else:
            c, least = rng.choice(contracts)
            comment = f"contract={c}"
        limit = rng.choice([l for l in limits if l >= least])
        f.write(line(team, gpus, limit, comment, f"load{i}", "high" if qos_rng.random() < 0.1 else "normal"))
EOF
"$WORK/tally" config check "$WORK/tally.toml" >"$RES/config-check.txt" || die "tally config check failed"
{ "$WORK/tally" config accounts "$WORK/tally.toml"; cat "$WORK/users"; } >"$WORK/accounts"
log "generated: $(grep -c '^account' "$WORK/accounts") accounts, $(grep -c '^user' "$WORK/users") user associations," \
    "$FILL fill jobs, $(wc -l <"$WORK/pending.jobs") pending jobs ($(grep -c ' high$' "$WORK/pending.jobs") in QOS high)"

# ---- helpers ---------------------------------------------------------------------------------
count_state() { timeout 60 squeue -h -t "$1" -o %i 2>/dev/null | wc -l; }
_all_running() { [[ $(count_state RUNNING) -ge $1 ]]; }
_none_running() { [[ $(timeout 60 squeue -h -t RUNNING,COMPLETING -o %i 2>/dev/null | wc -l) == 0 ]]; }
_queue_at_least() { [[ $(queue_len) -ge $1 ]]; }
ctld_pid() { tr -dc '0-9' <"$TALLY_RUN_DIR/pid/slurmctld.pid"; }
# cpu_snapshot: "<machine busy ticks> <machine total ticks> <slurmctld utime+stime ticks>"
cpu_snapshot() {
    local pid; pid=$(ctld_pid)
    awk '/^cpu / { t = 0; for (i = 2; i <= NF; i++) t += $i; printf "%d %d ", t - $5 - $6, t }' /proc/stat
    awk '{ print $14 + $15 }' "/proc/$pid/stat" 2>/dev/null || echo 0
}
ctld_log() { echo "$TALLY_RUN_DIR/log/slurmctld.log"; }
# thread_stat <name>: /proc/<ctld>/task/<tid>/schedstat of slurmctld's thread called <name>
thread_stat() {
    local pid t
    pid=$(ctld_pid)
    for t in /proc/"$pid"/task/*; do
        [[ $(cat "$t/comm" 2>/dev/null) == "$1" ]] && { echo "$t/schedstat"; return 0; }
    done
    return 1
}

# The bed is the load test's own and up.sh wipes its saved state on the next start, so only
# the running jobs are cancelled (the partition set DOWN first: nothing starts on the GPUs they
# free), and waited for while slurmd still runs (no orphaned slurmstepd); then slurmctld is
# stopped with the pending jobs in it (cancelling 100,000 of them one RPC each takes longer than
# the whole measurement, and times out on a busy slurmctld).
cancel_all() {
    ctld_up || return 0
    local u t0=$SECONDS
    log "teardown: partition gpu DOWN, the running jobs cancelled; the pending ones are left to the saved state the next up.sh wipes"
    timeout 60 scontrol update partitionname=gpu state=down || warn "cannot set the partition DOWN"
    for u in "${USERS[@]}"; do timeout 120 scancel --quiet --state=RUNNING -u "$u" || true; done
    if wait_for 300 "running jobs to end" _none_running; then
        log "running jobs ended in $(( SECONDS - t0 ))s"
    else
        warn "running jobs still there; down.sh goes on"
    fi
    stop_pids slurmctld 60 $(pids_tagged slurmctld)
}
teardown() {
    local t0=$SECONDS
    cancel_all || true
    TALLY_DRAIN_TIMEOUT=120 bash "$ROOT/testbed/down.sh" || warn "down.sh failed"
    # The configs in /etc/slurm name this run dir, and up.sh/down.sh without TALLY_RUN_DIR use
    # the run dir named there: remove them (as `down.sh --purge` does, keeping the run dir), so
    # that the next plain up.sh is back on its default run dir and accounting database.
    if grep -qxF "$TB_CONF_MARKER $TALLY_RUN_DIR" "$TB_SLURM_CONF" 2>/dev/null; then
        rm -f "$TB_SLURM_CONF" "$TB_SLURM_ETC/gres.conf" "$TB_SLURM_ETC/slurmdbd.conf"
    fi
    log "teardown took $(( SECONDS - t0 ))s"
}
on_exit() {
    local rc=$?
    if (( rc != 0 )); then
        warn "load.sh failed (exit $rc): tearing the bed down"
        grep -E 'error|fatal' "$(ctld_log)" 2>/dev/null | tail -n 20 || true
        teardown
    fi
}
trap on_exit EXIT
trap 'exit 130' INT TERM

# ---- 3. one measurement window ----------------------------------------------------------------
# measure <policy> <round> <probe job id>
measure() {
    local policy=$1 round=$2 probe_id=$3
    local dir=$RES/cells/r$round-$policy thread mark stat offset
    mkdir -p "$dir"
    case $policy in
        multifactor*) thread=decay; mark=$TALLY_RUN_DIR/state/priority_last_decay_ran ;;
        tally*)       thread=tally-recalc; mark=$TALLY_RUN_DIR/state/tally/ledger.state ;;
    esac
    stat=$(thread_stat "$thread") || { warn "no '$thread' thread in slurmctld"; stat=-; }
    offset=$(stat -c %s "$(ctld_log)")
    timeout 60 sdiag -r >/dev/null || warn "sdiag -r failed"
    local cpu0; cpu0=$(cpu_snapshot)
    # preempt/tally's thread: its CPU time over the window.
    local pstat pre0=- pre1=-
    if pstat=$(thread_stat tally-preempt); then pre0=$(awk '{ print $1 }' "$pstat"); fi
    log "measure: round $round, $policy, window ${WINDOW}s (probe job $probe_id, thread $thread)"
    local t0; t0=$(date +%s.%N)
    timeout $(( WINDOW + 60 )) "$PROBE" probe "$probe_id" "$PROBE_MS" "$WINDOW" "$dir/probe.txt" "$mark" "$stat" \
        || warn "probe exited with an error"
    local t1; t1=$(date +%s.%N)
    local cpu1; cpu1=$(cpu_snapshot)
    if [[ $pre0 != - ]]; then pre1=$(awk '{ print $1 }' "$pstat" 2>/dev/null || echo -); fi
    timeout 60 sdiag >"$dir/sdiag-after.txt" || true
    tail -c +"$(( offset + 1 ))" "$(ctld_log)" >"$dir/slurmctld.log"
    printf 'policy=%s\nround=%s\nperiod=60\nwindow=%s\nstart=%s\nend=%s\npending=%s\nrunning=%s\ncpu0=%s\ncpu1=%s\nhz=%s\npreempt0=%s\npreempt1=%s\n' \
        "$policy" "$round" "$WINDOW" "$t0" "$t1" "$(count_state PENDING)" "$(count_state RUNNING)" \
        "${cpu0// /,}" "${cpu1// /,}" "$(getconf CLK_TCK)" "$pre0" "$pre1" >"$dir/meta"
    "$PY" "$WORK/analyse.py" phase "$dir" >"$dir/summary.txt"
    grep -E 'probe_p99_ms|recalc_cpu_mean_ms|bf mean cycle|pending_end' "$dir/summary.txt" | tr -s ' ' | paste -sd ';' \
        | sed "s/^/[$policy] /"
}

# The slurm.conf lines that make a set-up (PluginDir: the plugins of this build or the earlier).
policy_conf() {
    local dir=$WORK/plugins
    case $1 in
        multifactor)     printf '%s\n' PriorityType=priority/multifactor PreemptType=preempt/none PreemptMode=OFF ;;
        multifactor+qos) printf '%s\n' PriorityType=priority/multifactor PreemptType=preempt/qos PreemptMode=REQUEUE ;;
        tally)           printf '%s\n' PriorityType=priority/tally PreemptType=preempt/tally PreemptMode=REQUEUE ;;
        tally-before)    printf '%s\n' PriorityType=priority/tally PreemptType=preempt/tally PreemptMode=REQUEUE
                         dir=$WORK/plugins-before ;;
    esac
    echo "PluginDir=$dir:$TB_SLURM_LIBDIR"
}

# use_policy <policy>: rewrite its lines in slurm.conf, restart slurmctld (the jobs are kept),
# settle.
use_policy() {
    local policy=$1 t line key lines
    t=$(now)
    while IFS= read -r line; do
        key=${line%%=*}
        grep -q "^$key=" "$TB_SLURM_CONF" || die "slurm.conf has no $key= line"
        sed -i "s|^$key=.*|$line|" "$TB_SLURM_CONF"
    done < <(policy_conf "$policy")
    lines=$(wc -l <"$(ctld_log)")
    timeout 300 bash "$ROOT/testbed/restart-ctld.sh" >/dev/null 2>&1 || die "slurmctld did not restart under $policy"
    # The loaded plugin must be the one asked for.
    wait_for 60 "slurmctld to run $policy" bash -c "tail -n +$(( lines + 1 )) '$(ctld_log)' | grep -q 'slurmctld version .* started'" \
        || warn "no 'started' line in slurmctld's log"
    local prio; prio=$(timeout 30 scontrol show config | awk -F' = ' '/^PriorityType/ { print $2 }')
    [[ $prio == "$(policy_conf "$policy" | sed -n 's/^PriorityType=//p')" ]] || die "slurmctld runs PriorityType $prio under $policy"
    log "[$policy] slurmctld restarted [$(elapsed "$t")s]; settling ${SETTLE}s"
    sleep "$SETTLE"
}

# ---- 4. the bed, the queue, the rounds ---------------------------------------------------------
run_all() {
    local t
    export TALLY_NODES=$NODES TALLY_PRIORITY_TYPE=priority/multifactor TALLY_PLUGIN_DIR=$WORK/plugins
    export TALLY_ACCOUNTS=$WORK/accounts TALLY_ENV="TALLY_CONFIG=$WORK/tally.toml"
    export TALLY_SLURM_EXTRA="PriorityCalcPeriod=1
MaxJobCount=$(( JOBS + FILL + 10000 ))
PreemptType=preempt/none
PreemptMode=OFF
PreemptExemptTime=04:00:00
DebugFlags=NO_CONF_HASH"
    t=$(now)
    timeout 900 bash "$ROOT/testbed/up.sh" || die "up.sh failed"
    log "bed up [$(elapsed "$t")s]"
    local log_from; log_from=$(stat -c %s "$(ctld_log)")   # errors are counted from here on
    cp /etc/slurm/slurm.conf "$RES/slurm.conf"

    t=$(now)
    "$PROBE" submit "$WORK/fill.jobs" "$TALLY_RUN_DIR/jobs" 300 >"$RES/fill.ids" \
        || die "fill jobs not all submitted"
    wait_for 300 "$FILL fill jobs running" _all_running "$FILL" \
        || die "fill jobs not running: $(count_state RUNNING) of $FILL"
    log "$FILL fill jobs running [$(elapsed "$t")s]"

    t=$(now)
    "$PROBE" submit "$WORK/pending.jobs" "$TALLY_RUN_DIR/jobs" 3600 >"$RES/pending.ids" 2>"$RES/submit.txt" \
        || { cat "$RES/submit.txt"; die "pending jobs not all submitted"; }
    local submit_s; submit_s=$(elapsed "$t")
    cat "$RES/submit.txt"
    wait_for 600 "$(( JOBS + FILL )) jobs in the queue" _queue_at_least $(( JOBS + FILL )) \
        || die "queue has $(queue_len) jobs, expected $(( JOBS + FILL ))"
    local running pending
    running=$(count_state RUNNING); pending=$(count_state PENDING)
    log "$JOBS jobs submitted in ${submit_s}s; queue: $running running, $pending pending"
    (( running == FILL )) || warn "$running jobs run, expected $FILL"
    echo "$submit_s" >"$RES/submit-seconds"
    # The probe's job: one in the middle of the pending list (it stays pending).
    local probe_id; probe_id=$(sed -n "$(( JOBS / 2 ))p" "$RES/pending.ids")

    local round i n=${#POLICIES[@]}
    for (( round = 1; round <= RUNS; round++ )); do
        for (( i = 0; i < n; i++ )); do
            local policy=${POLICIES[$(( (i + round - 1) % n ))]}
            use_policy "$policy"
            measure "$policy" "$round" "$probe_id"
        done
    done
    tail -c +"$(( log_from + 1 ))" "$(ctld_log)" | grep -F 'tick: ' >"$RES/tally-ticks.log" || true
    tail -c +"$(( log_from + 1 ))" "$(ctld_log)" | grep -E 'error|fatal' | sed 's/^\[[^]]*\] //' | sort | uniq -c | sort -rn | head -n 20 \
        >"$RES/ctld-errors.txt" || true
    t=$(now)
    teardown
    log "done; teardown [$(elapsed "$t")s]"
}

# ---- analysis (written out, run per window and at the end) ------------------------------------
cat >"$WORK/analyse.py" <<'EOF'
import json, os, re, statistics, sys, datetime

def pct(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    k = max(0, min(len(xs) - 1, int(round(p / 100 * len(xs) + 0.5)) - 1))
    return xs[k]

def log_time(line):
    m = re.match(r"\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)\]", line)
    return datetime.datetime.fromisoformat(m.group(1)).timestamp() if m else None

def sdiag(path):
    out, sect = {}, None
    try:
        text = open(path).read()
    except OSError:
        return out
    for line in text.splitlines():
        if line.startswith("Main schedule statistics"):
            sect = "main"
        elif line.startswith("Backfilling stats"):
            sect = "bf"
        elif line and not line[0].isspace():
            sect = None
        m = re.match(r"\s+(Max cycle|Mean cycle|Total cycles|Last queue length|Last depth cycle):\s+(\d+)", line)
        if sect and m:
            out[f"{sect} {m.group(1).lower()}"] = int(m.group(2))
    return out

def phase(d):
    meta = dict(l.split("=", 1) for l in open(f"{d}/meta").read().split())
    samples, marks, cpu = [], [], []
    for l in open(f"{d}/probe.txt"):
        w = l.split()
        if w[0] == "S":
            samples.append((float(w[1]), float(w[2]) / 1e3, int(w[3])))  # start, ms, rc
        elif w[0] == "M":
            marks.append(float(w[1]))
        elif w[0] == "C":
            cpu.append((float(w[1]), int(w[2])))
    ticks = []
    for l in open(f"{d}/slurmctld.log", errors="replace"):
        m = re.search(r"tick: (\d+) jobs, (\d+) GPU-s charged, (\d+) priorities changed; lock waited (\d+) us, held (\d+) us", l)
        if m:
            rl = re.search(r"read lock waited (\d+) us, held (\d+) us", l)
            ticks.append((log_time(l), *map(int, m.groups()), int(rl.group(2)) if rl else None))
    # Recalculation events: Tally's tick lines (logged just before the lock is released);
    # multifactor's decay marks (the file is written after its two lock holds).
    events = [t[0] for t in ticks] if meta["policy"].startswith("tally") else marks
    # CPU bursts of the recalculation thread: changes less than 1 s apart are one recalculation.
    bursts, prev, cur = [], None, None
    for t, ns in cpu:
        if prev is not None and ns > prev[1]:
            if cur and t - cur[0] < 1.0:
                cur = (t, cur[1] + ns - prev[1])
            else:
                if cur:
                    bursts.append(cur[1])
                cur = (t, ns - prev[1])
        prev = (t, ns)
    if cur:
        bursts.append(cur[1])
    lat = [s[1] for s in samples]
    # The probe in flight when a recalculation released the job write lock (Tally: the tick
    # line, logged just before the release; multifactor: the decay mark, written just after
    # its second release), within 3 ms: its latency is the wait that recalculation caused
    # (plus whatever writer held the lock just before it, e.g. backfill: hence the median).
    at = []
    for e in events:
        fl = [ms for (st, ms, _) in samples if st <= e + 0.003 and st + ms / 1e3 >= e - 0.003]
        if fl:
            at.append(max(fl))
    held = [t[5] / 1e3 for t in ticks]
    c0, c1 = [list(map(int, meta[k].split(","))) for k in ("cpu0", "cpu1")]
    secs = float(meta["end"]) - float(meta["start"])
    waited = [t[4] / 1e3 for t in ticks]
    r = {
        "policy": meta["policy"], "round": int(meta.get("round", 1)), "period_s": int(meta["period"]), "window_s": int(meta["window"]),
        "pending_end": int(meta["pending"]), "running_end": int(meta["running"]),
        "probes": len(samples), "probe_errors": sum(1 for s in samples if s[2]),
        "probe_p50_ms": pct(lat, 50), "probe_p99_ms": pct(lat, 99), "probe_max_ms": max(lat) if lat else None,
        "probes_over_50ms": sum(1 for x in lat if x > 50),
        "recalcs": len(events),
        "recalcs_caught": len(at),
        "stall_at_recalc_median_ms": statistics.median(at) if at else None,
        "stall_at_recalc_max_ms": max(at) if at else None,
        "recalc_cpu_bursts": len(bursts),
        "recalc_cpu_mean_ms": statistics.mean(bursts) / 1e6 if bursts else None,
        "recalc_cpu_max_ms": max(bursts) / 1e6 if bursts else None,
        "ticks": len(ticks),
        "tick_jobs": ticks[-1][1] if ticks else None,
        "tick_changed_median": statistics.median([t[3] for t in ticks]) if ticks else None,
        "tick_held_median_ms": statistics.median(held) if held else None,
        "tick_held_max_ms": max(held) if held else None,
        "tick_read_held_median_ms": statistics.median(rh) if (rh := [t[6] / 1e3 for t in ticks if t[6] is not None]) else None,
        "tick_read_held_max_ms": max(rh) if rh else None,
        "tick_waited_max_ms": max(waited) if waited else None,
        "ticks_waited": sum(1 for w in waited if w > 1.0),
        "machine_busy_pct": 100.0 * (c1[0] - c0[0]) / max(1, c1[1] - c0[1]),
        "ctld_cpu_pct": 100.0 * (c1[2] - c0[2]) / int(meta["hz"]) / secs if secs > 0 else None,
        "sdiag": sdiag(f"{d}/sdiag-after.txt"),
        # preempt/tally's thread (its copy every second), CPU ms per second of the window.
        "preempt_thread_cpu_ms_per_s": (int(meta["preempt1"]) - int(meta["preempt0"])) / 1e6 / secs
        if meta.get("preempt1", "-") != "-" and meta.get("preempt0", "-") != "-" and secs > 0 else None,
    }
    json.dump(r, open(f"{d}/summary.json", "w"), indent=1)
    for k, v in r.items():
        print(f"  {k}: {round(v, 2) if isinstance(v, float) else v}")

ORDER = ["multifactor", "multifactor+qos", "tally", "tally-before"]
NAMES = {"multifactor": "multifactor", "multifactor+qos": "multifactor + preempt/qos",
         "tally": "Tally + preempt/tally", "tally-before": "Tally + preempt/tally, earlier build"}
# (label, value of one cell's summary, digits, target ratio against multifactor+qos or None)
ROWS = [
    ("client probe (`slurm_load_job`) p50, ms", lambda r: r["probe_p50_ms"], 2, None),
    ("client probe p99, ms", lambda r: r["probe_p99_ms"], 1, 1.10),
    ("client probe max, ms", lambda r: r["probe_max_ms"], 0, None),
    ("probes over 50 ms", lambda r: r["probes_over_50ms"], 0, None),
    ("recalculation thread CPU per recalculation, ms", lambda r: r["recalc_cpu_mean_ms"], 2, 1.00),
    ("backfill cycle mean, ms (sdiag)", lambda r: r["sdiag"].get("bf mean cycle", 0) / 1e3 or None, 0, 1.10),
    ("backfill cycle max, ms (sdiag)", lambda r: r["sdiag"].get("bf max cycle", 0) / 1e3 or None, 0, None),
    ("main scheduler cycle mean, ms (sdiag)", lambda r: r["sdiag"].get("main mean cycle", 0) / 1e3 or None, 1, None),
    ("job write lock held per tick, median, ms (Tally's log)", lambda r: r["tick_held_median_ms"], 2, None),
    ("job read lock held per tick (the copy), median, ms (Tally's log)", lambda r: r["tick_read_held_median_ms"], 2, None),
    ("preempt/tally's thread CPU, ms per second", lambda r: r["preempt_thread_cpu_ms_per_s"], 2, None),
    ("slurmctld CPU, % of one core", lambda r: r["ctld_cpu_pct"], 0, None),
    ("machine CPU busy, % of all cores", lambda r: r["machine_busy_pct"], 0, None),
]

def fmt(v, nd):
    return "–" if v is None else f"{v:,.{nd}f}"

def spread(vals, nd):
    vals = [v for v in vals if v is not None]
    if not vals:
        return None, "–"
    m = statistics.median(vals)
    if len(vals) == 1:
        return m, fmt(m, nd)
    return m, f"{fmt(m, nd)} [{fmt(min(vals), nd)}–{fmt(max(vals), nd)}]"

def report(res, jobs, runs, window):
    cells = {}
    for name in sorted(os.listdir(f"{res}/cells")):
        p = f"{res}/cells/{name}/summary.json"
        if os.path.exists(p):
            r = json.load(open(p))
            cells.setdefault(r["policy"], []).append(r)
    pols = [p for p in ORDER if p in cells]
    base = "multifactor+qos" if "multifactor+qos" in cells else None
    ratios = [(a, b) for a, b in (("tally", "multifactor+qos"), ("tally", "multifactor"), ("tally", "tally-before")) if a in cells and b in cells]
    head = "| | " + " | ".join(NAMES[p] for p in pols) + "".join(f" | {NAMES[a].split(' +')[0]} / {NAMES[b]}" for a, b in ratios) + " |"
    out = [head, "|---" * (1 + len(pols) + len(ratios)) + "|"]
    verdicts = []
    for label, get, nd, target in ROWS:
        meds, cellsout = {}, []
        for p in pols:
            m, txt = spread([get(r) for r in cells[p]], nd)
            meds[p] = m
            cellsout.append(txt)
        if all(m is None for m in meds.values()):
            continue
        rs = []
        for a, b in ratios:
            if meds.get(a) is None or not meds.get(b):
                rs.append("–")
                continue
            q = meds[a] / meds[b]
            mark = ""
            if target is not None and b == base:
                mark = " ✓" if q <= target else " ✗"
                verdicts.append(f"{label.split(',')[0]}: {q:.2f}× (target ≤ {target:.2f}×){' met' if q <= target else ', missed by ' + format((q / target - 1) * 100, '.0f') + '%'}")
            rs.append(f"{q:.2f}{mark}")
        out.append(f"| {label} | " + " | ".join(cellsout + rs) + " |")
    n = {p: len(cells[p]) for p in pols}
    q = [f"{statistics.median([r['pending_end'] for r in cells[p]]):.0f} pending / {statistics.median([r['running_end'] for r in cells[p]]):.0f} running" for p in pols]
    out.append("| queue at the end of the window | " + " | ".join(q) + " |" * (1 + len(ratios)))
    out.append("")
    count = f"{min(n.values())}" if min(n.values()) == max(n.values()) else f"{min(n.values())}–{max(n.values())}"
    out.append(f"Each cell: the median of {count} window{'' if count == '1' else 's'} of {window} s [the smallest–the largest]; "
               "the ratios are of the medians; ✓/✗ against the targets, which are ratios to multifactor + preempt/qos.")
    if verdicts:
        out.append("")
        out.append("Against multifactor + preempt/qos (medians): " + "; ".join(verdicts) + ".")
    return "\n".join(out)

def write_docs(path, jobs, block):
    begin = f"<!-- testbed/load.sh TALLY_LOAD_JOBS={jobs}: begin -->"
    end = f"<!-- testbed/load.sh TALLY_LOAD_JOBS={jobs}: end -->"
    text = open(path).read()
    if begin not in text or end not in text:
        print(f"load.sh: {path} has no markers for TALLY_LOAD_JOBS={jobs}; not written (the table is in results/table.md)")
        return
    a = text.index(begin) + len(begin)
    b = text.index(end)
    tmp = path + ".tmp"
    open(tmp, "w").write(text[:a] + "\n" + block + "\n" + text[b:])
    os.replace(tmp, path)
    print(f"load.sh: wrote the table into {path}")

if sys.argv[1] == "phase":
    phase(sys.argv[2])
else:   # report <results> <jobs> <runs> <window> <provenance> [<docs file>]
    res, jobs, runs, window, prov = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
    table = report(res, jobs, runs, window)
    open(f"{res}/table.md", "w").write(prov + "\n\n" + table + "\n")
    print(prov + "\n\n" + table)
    if len(sys.argv) > 7:
        write_docs(sys.argv[7], jobs, prov + "\n\n" + table)
EOF

# ---- 5. run, report -----------------------------------------------------------------------------
run_all
trap - EXIT

if pids_tagged slurmctld | grep -q . || pids_tagged slurmd | grep -q .; then
    warn "slurm daemons still running after down.sh"
fi
echo
log "results (raw files in $RES):"
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' "$ROOT/Cargo.toml")
if [[ -n ${TALLY_LOAD_PLUGINS:-} ]]; then
    built=", plugins built beforehand"
elif ! grep -q '^0 files with uncommitted changes' "$RES/commit"; then
    # As the tree was when the plugins were built (it may have changed since).
    built=", built with uncommitted changes"
else
    built=""
fi
cmd="bash testbed/load.sh"   # as it was run (the knobs that differ from the defaults)
[[ $WINDOW == 180 ]] || cmd="TALLY_LOAD_WINDOW=$WINDOW $cmd"
[[ -z ${TALLY_LOAD_POLICIES:-} ]] || cmd="TALLY_LOAD_POLICIES=\"${POLICIES[*]}\" $cmd"
[[ -z $BEFORE ]] || cmd="TALLY_LOAD_BEFORE=<plugins of the earlier build> $cmd"
[[ $RUNS == 3 ]] || cmd="TALLY_LOAD_RUNS=$RUNS $cmd"
[[ $JOBS == 10000 ]] || cmd="TALLY_LOAD_JOBS=$JOBS $cmd"
prov="\`$cmd\`: $(date -u '+%F %H:%M') UTC, tally $version$built, $(slurmctld -V), $(nproc) cores;"
prov+=" $JOBS pending jobs submitted in $(cat "$RES/submit-seconds") s, $RUNS rounds of ${WINDOW}-s windows."
docs=()
(( DOCS )) && docs=("$ROOT/docs/reliability.md")
"$PY" "$WORK/analyse.py" report "$RES" "$JOBS" "$RUNS" "$WINDOW" "$prov" "${docs[@]}"
[[ -s $RES/ctld-errors.txt ]] && { echo "slurmctld error lines (count, message):"; cat "$RES/ctld-errors.txt"; }
log "load: done in $(elapsed "$T_START")s"
