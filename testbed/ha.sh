#!/usr/bin/env bash
# Controller fail-over on a running test bed (as root): a backup slurmctld beside the primary,
# both on one StateSaveLocation, the way a site runs `SlurmctldHost` twice. Opt-in: up.sh
# brings up one controller, and stays exactly that; `ha.sh on` turns a running bed into a
# pair, `ha.sh off` turns it back. Used by the end-to-end test of fail-over (e2e_24).
#
#   ha.sh on             slurm.conf gets a second SlurmctldHost, the backup <host>-backup at
#                        127.0.0.2, with SlurmctldTimeout=6 and
#                        CommunicationParameters=NoCtldInAddrAny (each controller listens on
#                        its own address, the port being one for both); slurmctld (its state
#                        kept) and the slurmd's restart on it (their jobs run on), then the
#                        backup starts and waits in standby
#   ha.sh kill-primary   kill -9 the primary (no fini, no last save: a crash); wait until the
#                        backup has taken control
#   ha.sh start-primary  start the primary again; wait until the backup has handed control back
#   ha.sh off            stop the backup (a clean stop: the controller in control saves), the
#                        single-controller slurm.conf back, slurmctld and the slurmd's restart on it
#   ha.sh status         each controller: running or not, in control or in standby
#
# One host plays two: the backup runs in UTS and mount namespaces of its own (unshare), where
# the hostname is <host>-backup (slurmctld picks its SlurmctldHost entry by its hostname),
# /etc/hosts maps that name to 127.0.0.2 (NoCtldInAddrAny binds the address of the hostname),
# and its SlurmctldPidFile and SlurmctldLogFile are files of its own bind-mounted on the
# primary's paths, as two hosts have two local disks: the backup logs to
# $TB_LOG/slurmctld-backup.log. Both read the same slurm.conf, tally.toml and environment
# (TALLY_ENV). down.sh stops the backup with the rest (it carries the bed's tag); a fresh
# up.sh starts single-controller again (`on` drops the bed's fingerprint).
set -euo pipefail
# shellcheck source=testbed/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[[ $(id -u) == 0 ]] || die "ha.sh must run as root"
cmd=${1:-}
case $cmd in
    on|off|kill-primary|start-primary|status) ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "usage: ha.sh on|kill-primary|start-primary|off|status (got '$cmd')" ;;
esac
[[ -f $TB_RUN/slurmctld.env ]] || die "no test bed under $TB_RUN (run testbed/up.sh first)"
eval "CTLD_ENV_ARGS=($(cat "$TB_RUN/slurmctld.env"))"
# (Without TALLY_ENV up.sh wrote a lone '': no assignment.)
[[ ${#CTLD_ENV_ARGS[@]} != 1 || -n ${CTLD_ENV_ARGS[0]} ]] || CTLD_ENV_ARGS=()

HOST=$(hostname -s)
BACKUP_HOST=$HOST-backup
BACKUP_ADDR=127.0.0.2
TIMEOUT=6
HA=$TB_RUN/ha
SINGLE_CONF=$HA/slurm.conf.single
PRIMARY_LOG=$TB_LOG/slurmctld.log
BACKUP_LOG=$TB_LOG/slurmctld-backup.log
# How long a controller may take to take control (the backup: SlurmctldTimeout, a ping
# period, then the state load).
CONTROL_WAIT=90

ha_on() { [[ -f $SINGLE_CONF ]]; }

# ---- controllers ---------------------------------------------------------------------------
# log_size <file>: its size in bytes (0 when missing), an offset to read from later.
log_size() { stat -c %s "$1" 2>/dev/null || echo 0; }

# mode <log> <offset>: the controller's last mode after <offset> of its log:
# "control" (Running as primary controller) or "standby" (running in background mode).
mode() {
    tail -c +$(( $2 + 1 )) "$1" 2>/dev/null \
        | sed -n -e 's/.*Running as primary controller.*/control/p' -e 's/.*slurmctld running in background mode.*/standby/p' \
        | tail -n1
}

# Jobs can be listed: some controller is in control (a standby backup refuses).
serving() { timeout 10 squeue -h -o %i >/dev/null 2>&1; }

# in_control <name> <log> <offset>: that controller runs, took control after <offset>, and
# the cluster answers.
in_control() { alive "$1" && [[ $(mode "$2" "$3") == control ]] && serving; }
in_standby() { alive "$1" && [[ $(mode "$2" "$3") == standby ]]; }

start_primary() {
    launch slurmctld "${CTLD_ENV_ARGS[@]}" slurmctld -D
}

start_backup() {
    mkdir -p "$HA"
    # Its own /etc/hosts (the host's names, and its own at its own address), pid file and log.
    { grep -v -w -- "$BACKUP_HOST" /etc/hosts || true; echo "$BACKUP_ADDR $BACKUP_HOST"; } >"$HA/hosts"
    : >>"$HA/slurmctld.pid"
    (umask 077; : >>"$BACKUP_LOG"); chmod 0600 "$BACKUP_LOG"
    : >>"$PRIMARY_LOG"; : >>"$TB_PID/slurmctld.pid"   # (the mount points)
    # (The script runs in the backup's namespaces: $1.. are its words.)
    # shellcheck disable=SC2016
    launch slurmctld-backup "${CTLD_ENV_ARGS[@]}" unshare --uts --mount --propagation private -- bash -c '
        set -e
        hostname "$1"
        mount --bind "$2" /etc/hosts
        mount --bind "$3" "$4"
        mount --bind "$5" "$6"
        shift 6
        exec "$@"' ha-backup "$BACKUP_HOST" "$HA/hosts" "$HA/slurmctld.pid" "$TB_PID/slurmctld.pid" \
        "$BACKUP_LOG" "$PRIMARY_LOG" slurmctld -D
}

# restart_slurmds: the slurmd's read SlurmctldHost at start-up; their jobs' slurmstepd run on.
restart_slurmds() {
    local f name pids=()
    local -a names=()
    for f in "$TB_PID"/slurmd-n*.pid; do
        [[ -e $f ]] || continue
        name=$(basename "$f" .pid)
        names+=("$name")
        pids+=("$(pid_of "$f" || true)")
    done
    (( ${#names[@]} )) || die "no slurmd pid files in $TB_PID"
    # shellcheck disable=SC2046
    stop_pids slurmd 20 $(printf '%s\n' "${pids[@]}" | grep -v '^$' || true)
    for name in "${names[@]}"; do launch "$name" slurmd -D -N "${name#slurmd-}"; done
    wait_for 60 "the nodes to register again" nodes_up || fail "the slurmd's did not come back" slurmctld "${names[0]}"
}

# Every node registered and usable (none down, none not responding).
nodes_up() {
    local states
    states=$(timeout 10 sinfo -h -N -o '%t' 2>/dev/null) && [[ -n $states ]] || return 1
    ! grep -qvE '^(idle|alloc|mix|comp)$' <<<"$states"
}

# write_ha_conf: the HA slurm.conf from the single one.
write_ha_conf() {
    awk -v host="$HOST" -v bhost="$BACKUP_HOST" -v baddr="$BACKUP_ADDR" -v timeout="$TIMEOUT" '
        /^SlurmctldHost=/ { print; print "SlurmctldHost=" bhost "(" baddr ")"; next }
        /^(SlurmctldTimeout|CommunicationParameters)=/ { next }
        { print }
        END { print "# testbed/ha.sh on"; print "SlurmctldTimeout=" timeout; print "CommunicationParameters=NoCtldInAddrAny" }
    ' "$SINGLE_CONF" >"$TB_SLURM_CONF.tmp"
    grep -q "^SlurmctldHost=$BACKUP_HOST(" "$TB_SLURM_CONF.tmp" || die "no SlurmctldHost line in $SINGLE_CONF"
    chmod 0644 "$TB_SLURM_CONF.tmp"
    mv -f "$TB_SLURM_CONF.tmp" "$TB_SLURM_CONF"
}

stop_primary() { local p; p=$(pid_of "$TB_PID/slurmctld.pid" || true); [[ -z $p ]] || stop_pids "slurmctld (primary)" 30 "$p"; }
stop_backup() { local p; p=$(pid_of "$TB_PID/slurmctld-backup.pid" || true); [[ -z $p ]] || stop_pids "slurmctld (backup)" 30 "$p"; }

wait_control() {   # <name> <log> <offset> <what>
    start_wait "$1" "$CONTROL_WAIT" "$4" in_control "$1" "$2" "$3"
}

# ---- commands -----------------------------------------------------------------------------
t0=$(now)
case $cmd in
on)
    ha_on && die "HA is on already (ha.sh off first)"
    alive slurmctld || die "slurmctld is not running"
    mkdir -p "$HA"
    cp -p "$TB_SLURM_CONF" "$SINGLE_CONF"
    # A later up.sh must start afresh (single-controller), not take this bed for its own.
    [[ ! -f $TB_RUN/fingerprint ]] || mv -f "$TB_RUN/fingerprint" "$HA/fingerprint"
    write_ha_conf
    stop_primary
    off=$(log_size "$PRIMARY_LOG")
    start_primary
    wait_control slurmctld "$PRIMARY_LOG" "$off" "the primary to take control"
    restart_slurmds
    boff=$(log_size "$BACKUP_LOG")
    start_backup
    start_wait slurmctld-backup 60 "the backup to wait in standby" in_standby slurmctld-backup "$BACKUP_LOG" "$boff"
    log "ha on: primary $HOST (127.0.0.1) in control, backup $BACKUP_HOST ($BACKUP_ADDR) in standby, SlurmctldTimeout=$TIMEOUT [$(elapsed "$t0")s]"
    ;;
kill-primary)
    ha_on || die "HA is off (ha.sh on first)"
    pid=$(pid_of "$TB_PID/slurmctld.pid") || die "the primary is not running"
    alive slurmctld-backup || die "the backup is not running"
    boff=$(log_size "$BACKUP_LOG")
    kill -9 "$pid"
    wait_for 30 "slurmctld $pid to die" bash -c "! kill -0 $pid 2>/dev/null" || die "slurmctld $pid survived SIGKILL"
    log "primary slurmctld $pid killed with SIGKILL"
    wait_control slurmctld-backup "$BACKUP_LOG" "$boff" "the backup to take control"
    log "the backup is in control [$(elapsed "$t0")s after the kill]"
    ;;
start-primary)
    ha_on || die "HA is off (ha.sh on first)"
    ! alive slurmctld || die "the primary is running already"
    off=$(log_size "$PRIMARY_LOG")
    boff=$(log_size "$BACKUP_LOG")
    start_primary
    wait_control slurmctld "$PRIMARY_LOG" "$off" "the primary to take control back"
    if alive slurmctld-backup; then
        start_wait slurmctld-backup 60 "the backup to go back to standby" in_standby slurmctld-backup "$BACKUP_LOG" "$boff"
    fi
    log "the primary is in control again, the backup in standby [$(elapsed "$t0")s]"
    ;;
off)
    ha_on || { log "ha off: HA is not on"; exit 0; }
    stop_backup
    stop_primary
    cp -p "$SINGLE_CONF" "$TB_SLURM_CONF"
    off=$(log_size "$PRIMARY_LOG")
    start_primary
    wait_control slurmctld "$PRIMARY_LOG" "$off" "slurmctld to take control"
    restart_slurmds
    rm -f "$SINGLE_CONF" "$TB_PID/slurmctld-backup.pid"
    [[ ! -f $HA/fingerprint ]] || mv -f "$HA/fingerprint" "$TB_RUN/fingerprint"
    log "ha off: one controller again [$(elapsed "$t0")s]"
    ;;
status)
    if ! ha_on; then echo "ha: off"; exit 0; fi
    for c in "slurmctld $HOST $PRIMARY_LOG" "slurmctld-backup $BACKUP_HOST $BACKUP_LOG"; do
        read -r name h logf <<<"$c"
        if alive "$name"; then echo "$name ($h): running, $(mode "$logf" 0)"; else echo "$name ($h): not running"; fi
    done
    ;;
esac
