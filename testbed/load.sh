#!/usr/bin/env bash
# Tally load test (docs/reliability.md, "## Load"): 10,000 pending jobs over 200 accounts in a
# real slurmctld with 64 emulated nodes x 8 fake GPUs, measured under priority/multifactor and
# then priority/tally, on the same queue, in one invocation. Run as root:
#
#   bash testbed/load.sh     # ~17 min (~20 min on a fresh work dir: the first account sync)
#
#   1. Builds the plugins once (`make plugins`, retried once after 3 minutes: others may be
#      mid-edit) and the CLI, copies the plugins to $WORK/plugins (later rebuilds do not change
#      the run), compiles testbed/load-probe.c.
#   2. Generates (seeded) a tally.toml with 10 programmes x 20 teams (equal shares, gpus = 512,
#      [log] debug = true, calc_period 1m), the bed's accounts file (from `tally config
#      accounts`, plus 10 users, one per programme, in its 20 team accounts) and the job list:
#      64 fill jobs (8 GPUs each, 4 h, they take all 512 GPUs) and JOBS pending jobs, random
#      account, 1/2/4/8 GPUs, comment contract=30m/1h/2h/4h (10% without), time limit >= the
#      contract. The SAME list is submitted under both plugins.
#   3. For priority/multifactor, then priority/tally: testbed/up.sh with 64 nodes (own run dir
#      $WORK/bed, so the default bed's accounting database is not touched), the fill jobs
#      (waits until all 64 run), the pending jobs (one RPC each from load-probe, no process
#      per job, as the accounts' users), a settle pause, then the measurement windows:
#        multifactor  PriorityCalcPeriod=1 (minute), one window of MF_WINDOW s
#        tally        calc_period 60s (window 300 s), then 10s, 2s, 1s (tally.toml edited,
#                     `scontrol reconfigure`; the window starts after the first tick that follows)
#      In each window: load-probe calls slurm_load_job (answered under the job READ lock, so it
#      waits out every job write lock) every PROBE_MS ms and records the latency, the
#      recalculation thread's CPU time (/proc/<ctld>/task/<decay|tally-recalc>/schedstat) and
#      multifactor's decay marks (mtime of StateSaveLocation/priority_last_decay_ran);
#      `sdiag -r` before, `sdiag` after; Tally's own "tick: ... lock waited A us, held B us"
#      lines from slurmctld's log; the machine's and slurmctld's CPU use over the window.
#   4. Cancels the jobs (pending first, then running; bounded waits) and runs testbed/down.sh,
#      also on error or interrupt (trap); then removes the bed's configs from /etc/slurm (they
#      name $WORK/bed, which a later plain up.sh would otherwise reuse).
#   Prints a side-by-side table (ratio tally / multifactor) and writes it, with every raw file,
#   to $WORK/results.
#
# Both runs: same slurm.conf apart from PriorityType (PriorityCalcPeriod=1, MaxJobCount=20000),
# no JobSubmitPlugins and no PreemptType (job_submit/tally would only normalise the comments,
# which are already in its one spelling; preemption is off so that both queues stay identical).
# With TALLY_LOAD_PREEMPT=1 Tally's run adds PreemptType=preempt/tally (PreemptMode=REQUEUE),
# whose thread copies the jobs every second: nothing can be preempted (every running job is
# inside its 4 h contract), so the queue stays the same and the windows measure that copy too.
#
# Environment (all optional):
#   TALLY_LOAD_DIR      work dir (default /var/tmp/tally-load)
#   TALLY_LOAD_JOBS     pending jobs (default 10000)
#   TALLY_LOAD_SEED     seed of the generated queue (default 1)
#   TALLY_LOAD_MF_WINDOW   multifactor window in s (default 300: five decay runs)
#   TALLY_LOAD_PERIODS  Tally's periods and windows, "period:window ..." in s
#                       (default "60:300 10:120 2:60 1:60"; 1 s is the shortest calc_period)
#   TALLY_LOAD_PROBE_MS probe interval (default 20)
#   TALLY_LOAD_SETTLE   pause after the submissions, s (default 30)
#   TALLY_LOAD_ONLY     "multifactor" or "tally": run one policy only (for trying things out)
#   TALLY_LOAD_PREEMPT  1: Tally's run with PreemptType=preempt/tally (see above)
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

JOBS=${TALLY_LOAD_JOBS:-10000}
SEED=${TALLY_LOAD_SEED:-1}
MF_WINDOW=${TALLY_LOAD_MF_WINDOW:-300}
PERIODS=${TALLY_LOAD_PERIODS:-"60:300 10:120 2:60 1:60"}
PROBE_MS=${TALLY_LOAD_PROBE_MS:-20}
SETTLE=${TALLY_LOAD_SETTLE:-30}
PREEMPT=${TALLY_LOAD_PREEMPT:-0}
[[ $PREEMPT == 0 || $PREEMPT == 1 ]] || { echo "TALLY_LOAD_PREEMPT must be 0 or 1, not '$PREEMPT'" >&2; exit 2; }
ONLY=${TALLY_LOAD_ONLY:-}
NODES=64
FILL=64
RES=$WORK/results
PY=$(command -v python3) || die "python3 is needed"
USERS=(tload01 tload02 tload03 tload04 tload05 tload06 tload07 tload08 tload09 tload10)

T_START=$(now)
mkdir -p "$WORK"
rm -rf "$RES" && mkdir -p "$RES"
exec > >(tee "$RES/load.log") 2>&1
log "load: work dir $WORK, $JOBS pending jobs, $NODES nodes, periods '$PERIODS', probe every ${PROBE_MS} ms, preempt/tally ${PREEMPT}"

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
    f.write('[cluster]\ngpus = 512\ngpus_per_node = 8\n\n[priority]\ncalc_period = "1m"\n\n[log]\ndebug = true\n\n')
    for p in progs:
        f.write(f"[accounts.{p}]\nshare = 10\n")
    for t in teams:
        f.write(f'[accounts.{t}]\nparent = "{t[:3]}"\nshare = 5\n')
with open(f"{work}/users", "w") as f:
    for i, p in enumerate(progs):
        for t in teams:
            if t.startswith(p):
                f.write(f"user {users[i]} {t}\n")
def line(team, gpus, limit, comment, name):
    user = users[progs.index(team[:3])]
    return f"{user} {team} {gpus} {limit} {comment} {name}\n"
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
        f.write(line(team, gpus, limit, comment, f"load{i}"))
EOF
"$WORK/tally" config check "$WORK/tally.toml" >"$RES/config-check.txt" || die "tally config check failed"
{ "$WORK/tally" config accounts "$WORK/tally.toml"; cat "$WORK/users"; } >"$WORK/accounts"
log "generated: $(grep -c '^account' "$WORK/accounts") accounts, $(wc -l <"$WORK/users") user associations," \
    "$FILL fill jobs, $(wc -l <"$WORK/pending.jobs") pending jobs"

# ---- helpers ---------------------------------------------------------------------------------
count_state() { timeout 60 squeue -h -t "$1" -o %i 2>/dev/null | wc -l; }
_all_running() { [[ $(count_state RUNNING) -ge $1 ]]; }
_none_running() { [[ $(timeout 60 squeue -h -t RUNNING,COMPLETING -o %i 2>/dev/null | wc -l) == 0 ]]; }
_queue_at_least() { [[ $(queue_len) -ge $1 ]]; }
_quiet_queue_empty() { local out; out=$(timeout 60 squeue -h -o %i) && [[ -z $out ]]; }
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

# Cancel pending jobs first (else they start on the GPUs the running ones free), then the
# running ones, and wait for them to end while slurmd still runs (no orphaned slurmstepd).
cancel_all() {
    ctld_up || return 0
    local n u t0=$SECONDS
    n=$(queue_len)
    (( n > 0 )) || return 0
    log "cancelling $n jobs: pending first"
    for u in "${USERS[@]}"; do timeout 300 scancel --quiet --state=PENDING -u "$u" || true; done
    for u in "${USERS[@]}"; do timeout 300 scancel --quiet -u "$u" || true; done
    wait_for 300 "running jobs to end" _none_running || warn "running jobs still there"
    if wait_for 600 "the queue to drain" _quiet_queue_empty; then
        log "queue drained in $(( SECONDS - t0 ))s"
    else
        warn "queue still has $(queue_len) jobs; down.sh goes on"
    fi
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
# measure <policy> <period_s> <window_s> <probe job id>
measure() {
    local policy=$1 period=$2 window=$3 probe_id=$4
    local dir=$RES/$policy-${period}s thread mark stat offset
    mkdir -p "$dir"
    case $policy in
        multifactor) thread=decay; mark=$TALLY_RUN_DIR/state/priority_last_decay_ran ;;
        tally)       thread=tally-recalc; mark=$TALLY_RUN_DIR/state/tally/ledger.state ;;
    esac
    stat=$(thread_stat "$thread") || { warn "no '$thread' thread in slurmctld"; stat=-; }
    offset=$(stat -c %s "$(ctld_log)")
    timeout 30 sdiag -r >/dev/null || warn "sdiag -r failed"
    timeout 30 sdiag >"$dir/sdiag-before.txt" || true
    local cpu0; cpu0=$(cpu_snapshot)
    # preempt/tally's thread (TALLY_LOAD_PREEMPT=1): its CPU time over the window.
    local pstat pre0=- pre1=-
    if pstat=$(thread_stat tally-preempt); then pre0=$(awk '{ print $1 }' "$pstat"); fi
    log "measure: $policy, period ${period}s, window ${window}s (probe job $probe_id, thread $thread)"
    local t0; t0=$(date +%s.%N)
    timeout $(( window + 60 )) "$PROBE" probe "$probe_id" "$PROBE_MS" "$window" "$dir/probe.txt" "$mark" "$stat" \
        || warn "probe exited with an error"
    local t1; t1=$(date +%s.%N)
    local cpu1; cpu1=$(cpu_snapshot)
    if [[ $pre0 != - ]]; then pre1=$(awk '{ print $1 }' "$pstat" 2>/dev/null || echo -); fi
    timeout 30 sdiag >"$dir/sdiag-after.txt" || true
    tail -c +"$(( offset + 1 ))" "$(ctld_log)" >"$dir/slurmctld.log"
    printf 'policy=%s\nperiod=%s\nwindow=%s\nstart=%s\nend=%s\npending=%s\nrunning=%s\ncpu0=%s\ncpu1=%s\nhz=%s\npreempt0=%s\npreempt1=%s\n' \
        "$policy" "$period" "$window" "$t0" "$t1" "$(count_state PENDING)" "$(count_state RUNNING)" \
        "${cpu0// /,}" "${cpu1// /,}" "$(getconf CLK_TCK)" "$pre0" "$pre1" >"$dir/meta"
    "$PY" "$WORK/analyse.py" phase "$dir" | tee "$dir/summary.txt"
}

# run_policy multifactor|tally
run_policy() {
    local policy=$1 t cfg=$WORK/run-tally.toml p0=${PERIODS%%:*}
    # Tally starts with the first period of PERIODS (the later ones come by reconfigure).
    sed "s/^calc_period = .*/calc_period = \"${p0}s\"/" "$WORK/tally.toml" >"$cfg"
    export TALLY_NODES=$NODES TALLY_PRIORITY_TYPE=priority/$policy TALLY_PLUGIN_DIR=$WORK/plugins
    export TALLY_ACCOUNTS=$WORK/accounts TALLY_ENV="TALLY_CONFIG=$cfg"
    export TALLY_SLURM_EXTRA="PriorityCalcPeriod=1
MaxJobCount=20000"
    if [[ $policy == tally && $PREEMPT == 1 ]]; then
        TALLY_SLURM_EXTRA+="
PreemptType=preempt/tally
PreemptMode=REQUEUE"
    fi
    t=$(now)
    timeout 900 bash "$ROOT/testbed/up.sh" || die "up.sh failed for $policy"
    log "[$policy] bed up [$(elapsed "$t")s]"
    local log_from; log_from=$(stat -c %s "$(ctld_log)")   # errors are counted from here on
    cp /etc/slurm/slurm.conf "$RES/slurm-$policy.conf"

    t=$(now)
    "$PROBE" submit "$WORK/fill.jobs" "$TALLY_RUN_DIR/jobs" 300 >"$RES/$policy-fill.ids" \
        || die "fill jobs not all submitted"
    wait_for 300 "$FILL fill jobs running" _all_running "$FILL" \
        || die "fill jobs not running: $(count_state RUNNING) of $FILL"
    log "[$policy] $FILL fill jobs running [$(elapsed "$t")s]"

    t=$(now)
    "$PROBE" submit "$WORK/pending.jobs" "$TALLY_RUN_DIR/jobs" 1800 >"$RES/$policy-pending.ids" 2>"$RES/$policy-submit.txt" \
        || { cat "$RES/$policy-submit.txt"; die "pending jobs not all submitted"; }
    local submit_s; submit_s=$(elapsed "$t")
    cat "$RES/$policy-submit.txt"
    wait_for 300 "$(( JOBS + FILL )) jobs in the queue" _queue_at_least $(( JOBS + FILL )) \
        || die "queue has $(queue_len) jobs, expected $(( JOBS + FILL ))"
    local running pending
    running=$(count_state RUNNING); pending=$(count_state PENDING)
    log "[$policy] $JOBS jobs submitted in ${submit_s}s; queue: $running running, $pending pending"
    (( running == FILL )) || warn "$running jobs run, expected $FILL"
    echo "$submit_s" >"$RES/$policy-submit-seconds"
    # The probe's job: one in the middle of the pending list (it stays pending).
    local probe_id; probe_id=$(sed -n "$(( JOBS / 2 ))p" "$RES/$policy-pending.ids")
    log "[$policy] settling ${SETTLE}s"
    sleep "$SETTLE"

    if [[ $policy == multifactor ]]; then
        measure multifactor 60 "$MF_WINDOW" "$probe_id"
    else
        local pw period win first=1 lines
        for pw in $PERIODS; do
            period=${pw%%:*}; win=${pw##*:}
            if (( ! first )); then
                sed -i "s/^calc_period = .*/calc_period = \"${period}s\"/" "$cfg"
                lines=$(wc -l <"$(ctld_log)")
                t=$(now)
                timeout 120 scontrol reconfigure || die "scontrol reconfigure failed"
                # Wait for the reload, then for one tick after it (the window starts clean).
                wait_for 120 "Tally to reload $cfg" \
                    bash -c "tail -n +$(( lines + 1 )) '$(ctld_log)' | grep -q 'reloaded $cfg'" \
                    || die "Tally did not reload its config"
                lines=$(wc -l <"$(ctld_log)")
                wait_for $(( period * 3 + 60 )) "a tick after the reload" \
                    bash -c "tail -n +$(( lines + 1 )) '$(ctld_log)' | grep -q 'tick: '" \
                    || die "no tick after the reload"
                log "[tally] calc_period now ${period}s [$(elapsed "$t")s]"
            fi
            first=0
            measure tally "$period" "$win" "$probe_id"
        done
    fi
    tail -c +"$(( log_from + 1 ))" "$(ctld_log)" | grep -F 'tick: ' >"$RES/$policy-ticks.log" || true
    tail -c +"$(( log_from + 1 ))" "$(ctld_log)" | grep -E 'error|fatal' | sed 's/^\[[^]]*\] //' | sort | uniq -c | sort -rn | head -n 20 \
        >"$RES/$policy-ctld-errors.txt" || true
    t=$(now)
    teardown
    log "[$policy] done; teardown [$(elapsed "$t")s]"
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
    events = [t[0] for t in ticks] if meta["policy"] == "tally" else marks
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
        "policy": meta["policy"], "period_s": int(meta["period"]), "window_s": int(meta["window"]),
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

def f(v, nd=1):
    return "–" if v is None else (f"{v:.{nd}f}" if isinstance(v, float) else str(v))

def ratio(a, b):
    return "–" if a is None or b in (None, 0) else f"{a / b:.2f}"

def report(res):
    rs = []
    for name in sorted(os.listdir(res)):
        p = f"{res}/{name}/summary.json"
        if os.path.exists(p):
            rs.append(json.load(open(p)))
    mf = next((r for r in rs if r["policy"] == "multifactor"), None)
    ta = sorted((r for r in rs if r["policy"] == "tally"), key=lambda r: -r["period_s"])
    cols = ([("multifactor 1 min", mf)] if mf else []) + [(f"tally {r['period_s']} s" + (" + preempt/tally" if r.get("preempt_thread_cpu_ms_per_s") is not None else ""), r) for r in ta]
    t60 = next((r for r in ta if r["period_s"] == 60), None)
    rows = [
        ("window (s) / probes", lambda r: f"{r['window_s']} / {r['probes']}", None),
        ("probe latency p50 (ms)", lambda r: f(r["probe_p50_ms"], 2), "probe_p50_ms"),
        ("probe latency p99 (ms)", lambda r: f(r["probe_p99_ms"]), "probe_p99_ms"),
        ("probe latency max (ms)", lambda r: f(r["probe_max_ms"]), "probe_max_ms"),
        ("probes over 50 ms", lambda r: str(r["probes_over_50ms"]), None),
        ("recalculations with a probe in flight at the lock release", lambda r: f"{r['recalcs_caught']} of {r['recalcs']}", None),
        ("latency of that probe, median (ms)", lambda r: f(r["stall_at_recalc_median_ms"]), "stall_at_recalc_median_ms"),
        ("latency of that probe, max (ms)", lambda r: f(r["stall_at_recalc_max_ms"]), "stall_at_recalc_max_ms"),
        ("recalc thread CPU per recalculation, mean (ms)", lambda r: f(r["recalc_cpu_mean_ms"], 2), "recalc_cpu_mean_ms"),
        ("recalc thread CPU per recalculation, max (ms)", lambda r: f(r["recalc_cpu_max_ms"], 2), "recalc_cpu_max_ms"),
        ("job write lock held per tick, median / max (ms, Tally's log)", lambda r: "–" if r["policy"] != "tally" else f"{f(r['tick_held_median_ms'], 2)} / {f(r['tick_held_max_ms'], 2)}", None),
        ("job read lock held per tick (the copy), median / max (ms, Tally's log)", lambda r: "–" if r["policy"] != "tally" or r.get("tick_read_held_median_ms") is None else f"{f(r['tick_read_held_median_ms'], 2)} / {f(r['tick_read_held_max_ms'], 2)}", None),
        ("ticks that waited > 1 ms for the lock; longest wait (ms, Tally's log)", lambda r: "–" if r["policy"] != "tally" else f"{r['ticks_waited']} of {r['ticks']}; {f(r['tick_waited_max_ms'], 1)}", None),
        ("jobs seen / priorities changed per tick (median)", lambda r: "–" if r["policy"] != "tally" else f"{r['tick_jobs']} / {f(r['tick_changed_median'], 0)}", None),
        ("sdiag main scheduler max / mean cycle (ms)", lambda r: f"{f(r['sdiag'].get('main max cycle', 0) / 1e3)} / {f(r['sdiag'].get('main mean cycle', 0) / 1e3)}", None),
        ("sdiag backfill max / mean cycle (ms)", lambda r: f"{f(r['sdiag'].get('bf max cycle', 0) / 1e3)} / {f(r['sdiag'].get('bf mean cycle', 0) / 1e3)}", None),
        ("preempt/tally's thread CPU (ms per second)", lambda r: f(r.get("preempt_thread_cpu_ms_per_s"), 2), None),
        ("CPU busy: machine (% of 2 cores) / slurmctld (% of one core)", lambda r: f"{f(r.get('machine_busy_pct'), 0)} / {f(r.get('ctld_cpu_pct'), 0)}", None),
        ("queue at the end: pending / running", lambda r: f"{r['pending_end']} / {r['running_end']}", None),
    ]
    head = "| | " + " | ".join(c for c, _ in cols) + (" | ratio tally 60 s / multifactor |" if mf and t60 else " |")
    out = [head, "|" + "---|" * (len(cols) + 1 + (1 if mf and t60 else 0))]
    for label, fn, key in rows:
        cells = [fn(r) for _, r in cols]
        line = f"| {label} | " + " | ".join(cells)
        if mf and t60:
            line += " | " + (ratio(t60[key], mf[key]) if key else "")
        out.append(line + " |")
    print("\n".join(out))
    ticks = []
    if os.path.exists(f"{res}/tally-ticks.log"):
        for l in open(f"{res}/tally-ticks.log", errors="replace"):
            m = re.search(r"tick: (\d+) jobs, .* (\d+) priorities changed; lock waited (\d+) us, held (\d+) us", l)
            if m:
                ticks.append(tuple(map(int, m.groups())))
    if ticks:
        big = max(ticks, key=lambda t: (t[1], t[3]))
        held = sorted(t[3] for t in ticks if t[0] == big[0])
        print(f"\nTally, every tick of the run with {big[0]} jobs ({len(held)} ticks, all periods): job write lock held "
              f"median {held[len(held) // 2] / 1e3:.1f} ms, max {held[-1] / 1e3:.1f} ms; the tick that changed the most "
              f"priorities ({big[1]}) held it {big[3] / 1e3:.1f} ms.")

if sys.argv[1] == "phase":
    phase(sys.argv[2])
else:
    report(sys.argv[2])
EOF

# ---- 4. the two policies -----------------------------------------------------------------------
[[ -z $ONLY || $ONLY == multifactor ]] && run_policy multifactor
[[ -z $ONLY || $ONLY == tally ]] && run_policy tally
trap - EXIT

if pids_tagged slurmctld | grep -q . || pids_tagged slurmd | grep -q .; then
    warn "slurm daemons still running after down.sh"
fi
echo
log "results (raw files in $RES):"
"$PY" "$WORK/analyse.py" report "$RES" | tee "$RES/table.md"
for p in multifactor tally; do
    [[ -s $RES/$p-ctld-errors.txt ]] && { echo "slurmctld error lines under $p (count, message):"; cat "$RES/$p-ctld-errors.txt"; }
done
log "load: done in $(elapsed "$T_START")s"
