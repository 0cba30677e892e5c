#!/usr/bin/env bash
# Tally test bed: tear the loopback Slurm cluster down (as root). Safe when nothing is up.
#
#   scancel every job, wait (bounded) for the queue to drain, then stop the slurmd's, slurmctld
#   (and a backup slurmctld of testbed/ha.sh), slurmdbd, mariadbd and munged (SIGTERM, bounded
#   wait, SIGKILL), then leftover slurmstepd.
#   The run dir (logs, accounting database) is kept, so failures can be read afterwards.
#
# Usage: down.sh [--purge]
#   --purge   also delete the run dir and the configs up.sh wrote to /etc/slurm
#
# Environment:
#   TALLY_RUN_DIR         run dir (default: the one recorded in /etc/slurm/slurm.conf,
#                         else /var/tmp/tally-testbed; /var/tmp/tally-testbed-24.11 on Debian 13)
#   TALLY_DRAIN_TIMEOUT   seconds to wait for cancelled jobs to leave the queue (default 90)
set -euo pipefail
# shellcheck source=testbed/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

purge=0
for arg in "$@"; do
    case $arg in
        --purge) purge=1 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument: $arg (usage: down.sh [--purge])" ;;
    esac
done
[[ $(id -u) == 0 ]] || die "down.sh must run as root"

t0=$(now)
tb_stop "${TALLY_DRAIN_TIMEOUT:-90}"
rm -f "$TB_RUN/fingerprint"
if (( purge )); then
    [[ $TB_RUN == /* && $TB_RUN != / ]] || die "refusing to purge run dir '$TB_RUN'"
    log "down: purging $TB_RUN and the test bed's configs in $TB_SLURM_ETC"
    rm -rf -- "$TB_RUN"
    if grep -qF "$TB_CONF_MARKER" "$TB_SLURM_CONF" 2>/dev/null; then
        rm -f "$TB_SLURM_CONF" "$TB_SLURM_ETC/gres.conf" "$TB_SLURM_ETC/slurmdbd.conf"
        [[ $TB_SLURM_RELEASE == 22.05 ]] || rm -f "$TB_SLURM_ETC/cgroup.conf"
    fi
fi
log "down: done in $(elapsed "$t0")s"
