#!/usr/bin/env bash
# Restart only slurmctld of a running test bed, keeping its saved state (jobs, Tally's ledger
# under StateSaveLocation/tally/) and the environment up.sh gave it. Jobs keep running on the
# slurmds meanwhile. Used by the end-to-end tests ("a restart keeps usage").
#   TALLY_KILL=1   kill -9 instead of a clean stop (no fini, no last save: a crash)
set -euo pipefail
# shellcheck source=testbed/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[[ $(id -u) == 0 ]] || die "restart-ctld.sh must run as root"
[[ -f $TB_RUN/slurmctld.env ]] || die "no test bed under $TB_RUN (run testbed/up.sh first)"
eval "CTLD_ENV_ARGS=($(cat "$TB_RUN/slurmctld.env"))"
# Without TALLY_ENV up.sh's `printf '%q '` wrote a lone '' (an empty word, not a command for env).
[[ ${#CTLD_ENV_ARGS[@]} != 1 || -n ${CTLD_ENV_ARGS[0]} ]] || CTLD_ENV_ARGS=()

t=$(now)
if pid=$(pid_of "$TB_PID/slurmctld.pid"); then
    if [[ ${TALLY_KILL:-0} == 1 ]]; then
        kill -9 "$pid"
        wait_for 30 "slurmctld $pid to die" bash -c "! kill -0 $pid 2>/dev/null"
        log "slurmctld $pid killed with SIGKILL"
    else
        stop_pids slurmctld 30 "$pid"
    fi
fi
launch slurmctld "${CTLD_ENV_ARGS[@]}" slurmctld -D
start_wait slurmctld 60 "slurmctld to answer (scontrol ping)" ctld_up
log "slurmctld restarted [$(elapsed "$t")s]"
