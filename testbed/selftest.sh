#!/usr/bin/env bash
# Tally test bed: self test. Proves that the bed works end to end (as root):
#   install.sh; up.sh with priority/multifactor, 2 nodes and the default accounts; as user alice
#   (account teama) submit three `--gres=gpu:2 sleep 30` jobs and one with --comment
#   "contract=2h"; check that all four run, that `scontrol show job` shows the comment and the
#   gres/gpu TRES, that sacct stores the comment (once the job ended), that `sshare -a` lists teama/alice; down.sh.
# On failure: prints what failed and the log tails, tears the cluster down, exits non-zero.
# Prints a summary with timings.
#
# Environment: TALLY_RUN_DIR (see up.sh). The other TALLY_* settings are fixed here.
set -euo pipefail
# shellcheck source=testbed/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

export TALLY_NODES=2 TALLY_PRIORITY_TYPE=priority/multifactor
unset TALLY_ACCOUNTS TALLY_SLURM_EXTRA TALLY_ENV TALLY_PLUGIN_DIR TALLY_KEEP_STATE

T0=$(now)
declare -a SUMMARY=()
step() {   # step <name> <command...>: run a step, record its time
    local name=$1 t; shift
    t=$(now)
    log "selftest: $name"
    "$@"
    SUMMARY+=("$(printf '%-34s %6ss' "$name" "$(elapsed "$t")")")
}

CLUSTER_UP=0   # after up.sh: a failure also prints the queue and the log tails
on_exit() {
    local rc=$?
    if (( rc != 0 )); then
        log "selftest: FAILED (exit $rc)"
        if (( CLUSTER_UP )); then
            timeout 15 squeue -o '%.8i %.8u %.8a %.10T %.12b %R' >&2 || true
            dump_logs
        fi
        bash "$TB_DIR/down.sh" || true
    fi
}
trap on_exit EXIT

check() {   # check <description> <command...>
    local what=$1; shift
    if "$@"; then log "  ok: $what"; else die "check failed: $what"; fi
}

JOBS=()
submit_jobs() {
    local i id
    for i in 1 2 3; do
        id=$(submit_as alice --account=teama --gres=gpu:2 --job-name="gpu$i" --wrap 'sleep 30')
        JOBS+=("$id")
    done
    COMMENT_JOB=$(submit_as alice --account=teama --gres=gpu:1 --job-name=contract \
                  --comment "contract=2h" --wrap 'sleep 30')
    JOBS+=("$COMMENT_JOB")
    log "  submitted ${JOBS[*]} (comment job $COMMENT_JOB)"
}

all_running() {
    local states
    states=$(squeue -h -j "$(IFS=,; echo "${JOBS[*]}")" -o '%T' | sort -u)
    [[ $states == RUNNING ]]
}
wait_running() {
    wait_for 60 "jobs ${JOBS[*]} running" all_running || die "jobs not all running within 60s"
}

job_has() { scontrol show job "$1" | grep -q -- "$2"; }
jobs_are_alices() { [[ $(squeue -h -j "$(IFS=,; echo "${JOBS[*]}")" -o '%u/%a' | sort -u) == alice/teama ]]; }
comment_in_job() { job_has "$COMMENT_JOB" 'Comment=contract=2h'; }
gpu_tres_in_job() { job_has "${JOBS[0]}" 'gres/gpu=2' && job_has "$COMMENT_JOB" 'gres/gpu=1'; }
sacct_comment() { [[ $(sacct -n -X -P -j "$COMMENT_JOB" -o Comment 2>/dev/null | head -n1) == contract=2h ]]; }
# slurmdbd stores the comment only when the job ends (jobacct_storage_p_job_complete).
sacct_has_comment() {
    timeout 10 scancel "$COMMENT_JOB"
    wait_for 30 "sacct to show the comment of the ended job" sacct_comment
}
# sshare indents the account names by tree depth, even with -P.
sshare_lists_alice() { sshare -a -n -P -o Account,User | sed 's/^ *//' | grep -qx 'teama|alice'; }
sprio_runs() { sprio >/dev/null; }

checks() {
    check "jobs belong to alice/teama" jobs_are_alices
    check "scontrol show job shows Comment=contract=2h" comment_in_job
    check "scontrol show job shows the gres/gpu TRES" gpu_tres_in_job
    check "sacct stores the comment once the job ended" sacct_has_comment
    check "sshare -a lists teama/alice" sshare_lists_alice
    check "sprio runs" sprio_runs
}

step "install.sh"                   bash "$TB_DIR/install.sh"
step "up.sh (2 nodes, multifactor)" bash "$TB_DIR/up.sh"
CLUSTER_UP=1
step "submit 4 jobs as alice"       submit_jobs
step "wait until all RUNNING"       wait_running
step "checks"                       checks
CLUSTER_UP=0
step "down.sh"                      bash "$TB_DIR/down.sh"

printf '\nselftest summary\n' >&2
printf '  %s\n' "${SUMMARY[@]}" >&2
printf '  %-34s %6ss\n\n' "total" "$(elapsed "$T0")" >&2
log "selftest: PASSED"
