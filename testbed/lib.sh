# shellcheck shell=bash disable=SC2034,SC2046
# (SC2034: the constants are used by the scripts sourcing this; SC2046: pid lists are words)
# Tally test bed: shared helpers, sourced by install.sh, up.sh, down.sh and selftest.sh.
# Not meant to be executed.
#
# Provides (tests may source this file too):
#   log / warn / die                         messages on stderr, prefixed with the time (die exits)
#   wait_for <timeout_s> <description> <command...>
#                                            poll <command> (every 0.25 s, each try bounded) until
#                                            it succeeds; return 1 after <timeout_s> seconds
#   dump_logs [component...]                 print the tail of the test bed's logs
#   submit_as <user> <sbatch args...>        submit a batch job as <user>, print its job id
#   job_state <job id>                       print the job's state (RUNNING, PENDING, ...)
#   wait_job_state <timeout_s> <job id> <state>
#   ctld_up / queue_empty                    slurmctld answers / no job in the queue
#   tb_stop                                  stop the whole loopback cluster, a backup slurmctld of
#                                            testbed/ha.sh too (used by up.sh/down.sh)
#
# Environment:
#   TALLY_RUN_DIR   run dir of the test bed (default /var/tmp/tally-testbed on Debian 12,
#                   /var/tmp/tally-testbed-24.11 on Debian 13, /var/tmp/tally-testbed-<release>
#                   with TALLY_SLURM_PREFIX; when unset and a test bed config exists in the
#                   Slurm's config dir, the run dir recorded there is used)
#   TALLY_SLURM_PREFIX  a Slurm built from source under this prefix (testbed/slurm-src.sh):
#                   its commands, daemons and plugins are the bed's (its config dir is
#                   /etc/slurm, as for the host's Slurm: one of these beds runs at a time)
#
# Slurm releases: by default the distribution's, Debian 12 (the host) has Slurm 22.05.8, Debian 13
# (the chroot of testbed/trixie.sh) 24.11.5; with TALLY_SLURM_PREFIX the one built there (25.11,
# 26.05). Each release's bed has its own run dir and ports; the 24.11 bed (in its chroot) can
# run beside the host's.

TB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# ---- constants -------------------------------------------------------------------------------
TB_DEBIAN=$(sed -n 's/^VERSION_ID="\{0,1\}\([0-9]*\).*/\1/p' /etc/os-release 2>/dev/null || true)
TB_PREFIX=${TALLY_SLURM_PREFIX:-}
if [[ -n $TB_PREFIX ]]; then
    # A Slurm built from source: its release from its own slurm_version.h.
    # shellcheck source=scripts/deb-target.sh
    source "$TB_DIR/../scripts/deb-target.sh"
    if ! header_release "$TB_PREFIX/include/slurm/slurm_version.h" || [[ ! -x $TB_PREFIX/sbin/slurmctld ]]; then
        echo "testbed: TALLY_SLURM_PREFIX=$TB_PREFIX holds no Slurm build (bash testbed/slurm-src.sh ensure <release>)" >&2
        exit 1
    fi
    TB_SLURM_RELEASE=$HDR_RELEASE
    TB_SLURM_VERSION=$HDR_VERSION
    TB_RUN_DEFAULT=/var/tmp/tally-testbed-$TB_SLURM_RELEASE
    case $TB_SLURM_RELEASE in   # (22.05: 6817, 24.11: 6917, as below)
        25.11) _k=2 ;;
        26.05) _k=3 ;;
        *)     _k=4 ;;
    esac
    TB_CTLD_PORT=$(( 6817 + 100 * _k ))
    TB_DBD_PORT=$(( 6819 + 100 * _k ))
    TB_DB_PORT=$(( 13306 + 100 * _k ))
    TB_NODE_PORT0=$(( 17000 + 1000 * _k ))
    PATH=$TB_PREFIX/sbin:$TB_PREFIX/bin:$PATH
    export PATH
elif [[ $TB_DEBIAN == 13 ]]; then
    TB_SLURM_RELEASE=24.11
    TB_SLURM_VERSION=24.11.5-4+deb13u1
    TB_RUN_DEFAULT=/var/tmp/tally-testbed-24.11
    TB_CTLD_PORT=6917
    TB_DBD_PORT=6919
    TB_DB_PORT=13406
    TB_NODE_PORT0=18000
else
    TB_SLURM_RELEASE=22.05
    TB_SLURM_VERSION=22.05.8-4+deb12u3
    TB_RUN_DEFAULT=/var/tmp/tally-testbed
    TB_CTLD_PORT=6817           # SlurmctldPort
    TB_DBD_PORT=6819            # slurmdbd's DbdPort
    TB_DB_PORT=13306            # our own mariadbd, away from a system one on 3306
    TB_NODE_PORT0=17000         # node nK listens on TB_NODE_PORT0 + K
fi
TB_SLURM_ETC=/etc/slurm
TB_SLURM_CONF=$TB_SLURM_ETC/slurm.conf
TB_SLURM_LIBDIR=${TB_PREFIX:+$TB_PREFIX/lib/slurm}
TB_SLURM_LIBDIR=${TB_SLURM_LIBDIR:-/usr/lib/x86_64-linux-gnu/slurm-wlm}
TB_CLUSTER=tally
TB_DB_NAME=slurm_acct_db
TB_DB_USER=slurm
TB_DB_PASS=tally-testbed
TB_CONF_MARKER='# tally-testbed run dir:'
# The release whose bed wrote the config (the host's beds share /etc/slurm).
TB_RELEASE_MARKER='# tally-testbed release:'

# Run dir: explicit setting, else the one recorded in the current config when a bed of this
# release wrote it (a config without the release line is 22.05's), else the default.
if [[ -z "${TALLY_RUN_DIR:-}" ]]; then
    _recorded=$(sed -n "s|^$TB_RELEASE_MARKER ||p" "$TB_SLURM_CONF" 2>/dev/null | head -n1 || true)
    if [[ ${_recorded:-22.05} == "$TB_SLURM_RELEASE" ]]; then
        TALLY_RUN_DIR=$(sed -n "s|^$TB_CONF_MARKER ||p" "$TB_SLURM_CONF" 2>/dev/null | head -n1 || true)
    fi
    TALLY_RUN_DIR=${TALLY_RUN_DIR:-$TB_RUN_DEFAULT}
fi
export TALLY_RUN_DIR
TB_RUN=$TALLY_RUN_DIR
TB_LOG=$TB_RUN/log
TB_PID=$TB_RUN/pid
TB_DB_SOCK=$TB_RUN/mysql/run/mysqld.sock
# Every daemon up.sh starts carries TB_TAG in its environment, so leftovers are found without
# touching anybody else's processes (see is_tagged).
TB_TAG="TALLY_TESTBED_RUN=$TB_RUN"
# Our root directory (device:inode): a chroot sees the host's /proc, so processes are only ours
# when their root is ours too (the 24.11 bed in the chroot and the host's bed never stop each
# other's daemons, even with the same run dir).
TB_ROOT_ID=$(stat -c %d:%i /)

export DEBIAN_FRONTEND=noninteractive

# ---- messages --------------------------------------------------------------------------------
log()  { printf '[testbed %s] %s\n' "$(date +%T)" "$*" >&2; }
warn() { log "WARNING: $*"; }
die()  { log "ERROR: $*"; exit 1; }

# Seconds (with millis) since the epoch, for timings.
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# ---- waiting ---------------------------------------------------------------------------------
# wait_for <timeout_s> <description> <command...>
# Runs <command> until it exits 0. Executables are bounded by `timeout` per try; shell functions
# are run as they are (keep them fast). Output of the command is discarded.
wait_for() {
    local limit=$1 what=$2; shift 2
    local start=$SECONDS per=10
    while :; do
        if [[ $(type -t "$1") == function ]]; then
            "$@" >/dev/null 2>&1 && return 0
        else
            timeout "$per" "$@" >/dev/null 2>&1 && return 0
        fi
        if (( SECONDS - start >= limit )); then
            log "timed out after ${limit}s waiting for: $what"
            return 1
        fi
        sleep 0.25
    done
}

# ---- logs ------------------------------------------------------------------------------------
# dump_logs [component...]: tail of the logs (<component>*.log, and <component>*.out when not
# empty) in $TB_LOG; components are e.g. munged mariadbd slurmdbd slurmctld slurmd-n1 sacctmgr.
dump_logs() {
    local lines=${TB_LOG_LINES:-40} f c
    (( $# )) || set -- munged mariadbd slurmdbd sacctmgr slurmctld slurmd-n1
    for c in "$@"; do
        for f in "$TB_LOG/$c"*.log "$TB_LOG/$c"*.out; do
            [[ -s $f ]] || continue
            # a daemon's .out repeats its .log: show it only when there is no .log
            [[ $f == *.out && -s ${f%.out}.log ]] && continue
            printf '\n===== tail -n %s %s =====\n' "$lines" "$f" >&2
            tail -n "$lines" "$f" >&2 || true
        done
    done
    printf '\n' >&2
}

# fail <message> [component...]: print the message, the log tails and the fatal lines, run
# the caller's fail_hook function if there is one, exit 1.
fail() {
    local msg=$1 fatal; shift
    log "ERROR: $msg"
    dump_logs "$@"
    fatal=$(grep -h 'fatal' "$TB_LOG"/*.log 2>/dev/null | tail -n 5 || true)
    [[ -z $fatal ]] || printf 'fatal lines in the logs:\n%s\n\n' "$fatal" >&2
    if [[ $(type -t fail_hook) == function ]]; then fail_hook || true; fi
    log "ERROR: $msg (logs in $TB_LOG)"
    exit 1
}

# ---- processes -------------------------------------------------------------------------------
# is_alive <pid>: the process exists and is not a zombie (pid 1 here may be slow to reap them).
is_alive() {
    local st
    kill -0 "$1" 2>/dev/null || return 1
    st=$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null) || return 1
    [[ -n $st && $st != Z && $st != X ]]
}

# pid_of <pidfile>: print the pid recorded in <pidfile> if that process is alive and ours.
pid_of() {
    local pid
    [[ -r $1 ]] || return 1
    pid=$(tr -dc '0-9' <"$1")
    [[ -n $pid ]] && is_alive "$pid" && is_tagged "$pid" || return 1
    echo "$pid"
}

# stop_pids <name> <timeout_s> <pid...>: SIGTERM, bounded wait, then SIGKILL.
stop_pids() {
    local name=$1 limit=$2 pid; shift 2
    local -a alive=()
    (( $# )) || return 0
    log "stopping $name (pid $*)"
    kill -TERM "$@" 2>/dev/null || true
    local deadline=$(( SECONDS + limit ))
    while :; do
        alive=()
        for pid in "$@"; do is_alive "$pid" && alive+=("$pid"); done
        (( ${#alive[@]} )) || return 0
        (( SECONDS >= deadline )) && break
        sleep 0.2
    done
    warn "$name did not stop within ${limit}s, sending SIGKILL to ${alive[*]}"
    kill -KILL "${alive[@]}" 2>/dev/null || true
    sleep 0.2
}

# is_tagged <pid>: the process has our root directory and carries TB_TAG, or (slurmstepd, whose
# process title overwrites its environment) has a file of the run dir open, e.g. its slurmd's log.
is_tagged() {
    [[ $(stat -L -c %d:%i "/proc/$1/root/" 2>/dev/null) == "$TB_ROOT_ID" ]] || return 1
    tr '\0' '\n' <"/proc/$1/environ" 2>/dev/null | grep -qxF -- "$TB_TAG" && return 0
    find "/proc/$1/fd" -mindepth 1 -maxdepth 1 -lname "$TB_RUN/*" 2>/dev/null | grep -q .
}

# pids_tagged <exe-name>: live processes of that exact name that carry TB_TAG.
pids_tagged() {
    local pid
    # (Debian 13 names the binaries slurmctld-wlm, ...: the process has that name when it
    # was started by its real path rather than the alternatives link.)
    for pid in $({ pgrep -x "$1"; pgrep -x "$1-wlm"; } 2>/dev/null || true); do
        is_alive "$pid" && is_tagged "$pid" && echo "$pid"
    done
    return 0
}

# descendants <pid...>: all live descendants of the given processes.
descendants() {
    ps -eo pid=,ppid= | awk -v roots="$*" '
        { parent[$1] = $2 }
        END {
            n = split(roots, r, " "); for (i = 1; i <= n; i++) mark[r[i]] = 1
            do { changed = 0
                 for (p in parent) if (!(p in mark) && (parent[p] in mark)) { mark[p] = 1; out[p] = 1; changed = 1 }
            } while (changed)
            for (p in out) print p
        }'
}

# ---- cluster queries -------------------------------------------------------------------------
# slurm.conf lines of the end-to-end beds, both Slurm releases: the three
# plugins, and a requeued job may start again cred_expire + 1 s later
# (default 121 s).
E2E_SLURM_EXTRA=$'JobSubmitPlugins=tally\nPreemptType=preempt/tally\nPreemptMode=REQUEUE\nAuthInfo=cred_expire=5'

# Bring up a 2-node bed with all three Tally plugins from $1 (a plugin
# dir), the accounts file $2 and slurmctld's extra environment $3
# (TALLY_ENV), and take it down when the calling script exits.
bed_with_tally() {
    export TALLY_NODES=2 TALLY_PRIORITY_TYPE=priority/tally TALLY_PLUGIN_DIR=$1
    export TALLY_ACCOUNTS=$2 TALLY_ENV=$3
    # Two GPU types (n1 H100s, n2 B200s) and a second partition (debug, on n1).
    export TALLY_GPU_TYPES="h100 b200" TALLY_DEBUG_PARTITION=1
    export TALLY_SLURM_EXTRA=$E2E_SLURM_EXTRA
    bash testbed/up.sh
    trap 'bash testbed/down.sh' EXIT
}

ctld_up() { timeout 10 scontrol ping 2>/dev/null | grep -q 'is UP'; }

# Number of jobs in the queue (pending, running, completing...).
queue_len() { timeout 15 squeue -h -o %i 2>/dev/null | wc -l; }
queue_empty() { local out; out=$(timeout 15 squeue -h -o %i) && [[ -z $out ]]; }

# ---- teardown (shared by up.sh and down.sh) ----------------------------------------------------
# tb_stop [drain_timeout_s]: cancel jobs and let the queue drain, then stop slurmd's, slurmctld,
# slurmdbd, mariadbd and munged (in that order), then leftover slurmstepd. Safe when nothing runs.
tb_stop() {
    local drain=${1:-90} t0 n
    if [[ -f $TB_SLURM_CONF ]] && ctld_up; then
        n=$(queue_len)
        if (( n > 0 )); then
            log "cancelling $n job(s)"
            timeout 30 squeue -h -o %i 2>/dev/null | xargs -r timeout 30 scancel --quiet || true
            t0=$SECONDS
            if [[ -z $(pids_tagged slurmd) ]]; then
                warn "no slurmd runs: not waiting for the queue to drain"
            elif wait_for "$drain" "the job queue to drain" queue_empty; then
                log "queue drained in $(( SECONDS - t0 ))s"
            else
                warn "queue still has $(queue_len) job(s); stopping anyway"
            fi
        fi
    fi
    # Our processes are found by their tag, so a lost pid file leaves nothing behind.
    stop_pids slurmd 20 $(pids_tagged slurmd)
    stop_pids slurmctld 30 $(pids_tagged slurmctld)
    stop_pids slurmdbd 30 $(pids_tagged slurmdbd)
    stop_pids mariadbd 60 $(pids_tagged mariadbd)
    stop_pids munged 10 $(pids_tagged munged)
    # The demo's `tally exporter`, and a Prometheus of testbed/prometheus.sh.
    stop_pids "tally exporter" 10 $(pids_tagged tally)
    stop_pids prometheus 30 $(pids_tagged prometheus)
    # Orphaned slurmstepd (slurmd gone before its jobs ended) ignore SIGTERM: kill their job
    # processes first, then them.
    local -a steps kids
    mapfile -t steps < <(pids_tagged slurmstepd)
    if (( ${#steps[@]} )); then
        warn "leftover slurmstepd: ${steps[*]}"
        mapfile -t kids < <(descendants "${steps[@]}")
        (( ${#kids[@]} == 0 )) || stop_pids "job processes" 5 "${kids[@]}"
        stop_pids slurmstepd 2 "${steps[@]}"
    fi
    rm -f "$TB_PID"/*.pid 2>/dev/null || true
    # A pair of controllers of testbed/ha.sh (the backup stopped above with the rest).
    rm -rf "${TB_RUN:?}/ha"
}

# ---- packages --------------------------------------------------------------------------------
# apt_missing <package...>: print those not installed.
apt_missing() {
    local p
    for p in "$@"; do
        dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null | grep -qx installed || echo "$p"
    done
}

# apt_ensure <who> <verbose: 0|1> <package...>: install those not installed (no recommends; stale
# lists refreshed once); a fast no-op when all are present. As root.
apt_ensure() {
    local who=$1 verbose=$2 t0; shift 2
    local -a todo
    t0=$(now)
    mapfile -t todo < <(apt_missing "$@")
    if (( ${#todo[@]} == 0 )); then
        (( verbose == 0 )) || log "$who: $* present [$(elapsed "$t0")s]"
        return 0
    fi
    [[ $(id -u) == 0 ]] || die "installing ${todo[*]} needs root"
    log "$who: installing ${todo[*]}"
    local -a apt=(apt-get install -y -qq --no-install-recommends
                  -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "${todo[@]}")
    if ! DEBIAN_FRONTEND=noninteractive "${apt[@]}" >/dev/null; then
        # Stale lists (a superseded security update gives 404): refresh once and retry.
        apt-get update -qq || warn "apt-get update reported errors"
        DEBIAN_FRONTEND=noninteractive "${apt[@]}" >/dev/null || die "apt-get install ${todo[*]} failed"
    fi
    mapfile -t todo < <(apt_missing "$@")
    (( ${#todo[@]} == 0 )) || die "still missing after install: ${todo[*]}"
    log "$who: installed [$(elapsed "$t0")s]"
}

# ---- jobs ------------------------------------------------------------------------------------
job_state() { timeout 10 scontrol show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }

_job_in_state() { [[ $(job_state "$1") == "$2" ]]; }
wait_job_state() { wait_for "$1" "job $2 to be $3" _job_in_state "$2" "$3"; }

# submit_as <user> <sbatch args...>
# Submits a batch job as <user> (root runs sbatch through `runuser -u <user>`, so munge
# authenticates the job as that user) and prints the job id. The job's working directory (and
# so its default slurm-<id>.out) is $TALLY_RUN_DIR/jobs, writable by every user, unless
# --chdir/-D is given. Example:
#   id=$(submit_as alice --account=teama --gres=gpu:2 --wrap 'sleep 30')
# (`sbatch --uid=alice` works for root on 22.05 too, but the job then runs with group root
# (gid 0) unless --gid is given as well; runuser gives it the user's own groups.)
submit_as() {
    local user=$1 out; shift
    [[ -n $user ]] || die "submit_as: no user"
    id -u "$user" >/dev/null 2>&1 || die "submit_as: no such Unix user: $user"
    mkdir -p "$TB_RUN/jobs" && chmod 1777 "$TB_RUN/jobs"
    out=$(cd "$TB_RUN/jobs" && timeout 60 runuser -u "$user" -- sbatch --parsable "$@") || {
        log "ERROR: sbatch as $user failed: sbatch $*"
        return 1
    }
    echo "${out%%;*}"
}

# ---- daemons (shared by up.sh and restart-ctld.sh) ---------------------------------------------
alive() { pid_of "$TB_PID/$1.pid" >/dev/null; }

# launch <name> <command...>: start a daemon in the foreground of its own session, its stdout
# and stderr appended to $TB_LOG/<name>.out, its pid in $TB_PID/<name>.pid.
# It runs in the run dir with a small fixed environment and TB_TAG, not the caller's
# (slurmctld gets TALLY_ENV on top).
launch() {
    local name=$1; shift
    # A daemon's stdout repeats its log: created 0600, as Slurm's own.
    (umask 077; : >>"$TB_LOG/$name.out"); chmod 0600 "$TB_LOG/$name.out"
    setsid env -i -C "$TB_RUN" PATH=${TB_PREFIX:+$TB_PREFIX/sbin:$TB_PREFIX/bin:}/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
        "$TB_TAG" "$@" \
        </dev/null >>"$TB_LOG/$name.out" 2>&1 &
    echo $! >"$TB_PID/$name.pid"
}

# ready <name> <command...>: for wait_for; succeeds at once, setting DIED, when the daemon died.
ready() {
    local name=$1; shift
    # A daemon rewrites its own pid file at start-up (truncate, then write):
    # an empty read is not a death. Look again before calling it one.
    if ! alive "$name"; then
        sleep 0.3
        alive "$name" || { DIED=$name; return 0; }
    fi
    "$@"
}

# start_wait <name> <timeout_s> <description> <check...>
start_wait() {
    local name=$1 limit=$2 what=$3; shift 3
    DIED=
    if ! wait_for "$limit" "$what" ready "$name" "$@" || [[ -n $DIED ]]; then
        [[ -n $DIED ]] && log "$name exited"
        fail "$what failed" "$name"
    fi
}
