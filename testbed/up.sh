#!/usr/bin/env bash
# Tally test bed: bring up a loopback Slurm cluster on this machine (as root): Slurm 22.05 on
# Debian 12, 24.11 on Debian 13 (the chroot of testbed/trixie.sh: own run dir and ports).
#
#   munged -> mariadbd (127.0.0.1) -> slurmdbd -> sacctmgr (cluster, accounts, users)
#          -> slurmctld -> one `slurmd -N nK` per node, then wait until every node is idle.
#
# Idempotent: when the cluster is already up with the same settings (and the same plugin files
# in TALLY_PLUGIN_DIR, and the same scripts) it only verifies it. Otherwise it stops whatever
# is left (as down.sh does) and starts afresh: slurmctld's saved state (jobs, usage, node
# states) is wiped, job ids continue after the last one in the accounting database.
# Configs go to /etc/slurm (slurm.conf, gres.conf, slurmdbd.conf), so plain squeue, sbatch,
# sprio, sshare work; all runtime state, logs and pid files go under TALLY_RUN_DIR.
#
# Environment (all optional):
#   TALLY_NODES          number of nodes n[1-N], each 64 CPUs and 8 fake GPUs (default 4)
#   TALLY_GPU_TYPES      GPU types, space-separated, cycled over the nodes (node nK gets type
#                        number (K-1) mod <count>), e.g. "h100 b200"; default "fake". With more
#                        than one, gres.conf has a line per type and AccountingStorageTRES lists
#                        gres/gpu:<type> for each
#   TALLY_DEBUG_PARTITION=1  a second partition "debug" with node n1 only, MaxTime=30
#   TALLY_SMALL_NODE_GPUS=G  one more node, n<N+1>, with G fake GPUs (1-8; default none) of the
#                        first type, in the partition "gpu" like the others: a small node a
#                        Tally config can name as its debug capacity ([priority] debug_nodes)
#   TALLY_PRIORITY_TYPE  PriorityType (default priority/multifactor; e.g. priority/tally)
#   TALLY_PLUGIN_DIR     folder searched for plugins before Slurm's own
#                        (PluginDir=<dir>:/usr/lib/x86_64-linux-gnu/slurm-wlm)
#   TALLY_ACCOUNTS       file with the account tree and users, one entry a line:
#                            account <name> <parent>     (parent "root" for top level)
#                            user <name> <account>       (first account of a user = default)
#                            qos <name>                  (a QOS, created when missing)
#                        '#' comments and blank lines ignored. Unix users are created when
#                        missing. Default: accounts teama, teamb under root; alice->teama,
#                        bob->teamb. Associations not in the file are removed (QOS are not).
#                        Optional key=value words after an entry are sacctmgr settings of its
#                        association (or QOS), applied on every fresh start, e.g.
#                            qos scavenger
#                            qos high priority=1 preempt=scavenger
#                            account pretrain llm fairshare=40
#                            user pretrain-u1 pretrain qos=normal,high,scavenger defaultqos=normal
#                        (QOS come first: settings may name them.) Settings dropped from the file
#                        keep their last value in the database.
#   TALLY_SLURM_EXTRA    lines appended verbatim to slurm.conf; a Key=... line there replaces
#                        the default line for that key
#   TALLY_ENV            environment assignments for slurmctld, shell-quoted words,
#                        e.g. "TALLY_CONFIG=/x/tally.toml TALLY_LOG=debug"
#   TALLY_RUN_DIR        run dir (default /var/tmp/tally-testbed; on 24.11 /var/tmp/tally-testbed-24.11)
#   TALLY_KEEP_STATE=1   keep slurmctld's saved state on a fresh start
set -euo pipefail
# shellcheck source=testbed/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[[ $(id -u) == 0 ]] || die "up.sh must run as root"

NODES=${TALLY_NODES:-4}
PRIORITY_TYPE=${TALLY_PRIORITY_TYPE:-priority/multifactor}
PLUGIN_DIR=${TALLY_PLUGIN_DIR:-}
ACCOUNTS_FILE=${TALLY_ACCOUNTS:-}
SLURM_EXTRA=${TALLY_SLURM_EXTRA:-}
CTLD_ENV=${TALLY_ENV:-}
GPU_TYPES_SPEC=${TALLY_GPU_TYPES:-fake}
DEBUG_PARTITION=${TALLY_DEBUG_PARTITION:-0}
SMALL_GPUS=${TALLY_SMALL_NODE_GPUS:-0}
HOST=$(hostname -s)
NODE_CPUS=64
NODE_MEM=512000
GPUS_PER_NODE=8

[[ $NODES =~ ^[1-9][0-9]*$ ]] || die "TALLY_NODES must be a positive integer, got '$NODES'"
(( NODES <= 999 )) || die "TALLY_NODES too large: $NODES"
[[ $PRIORITY_TYPE == priority/* ]] || die "TALLY_PRIORITY_TYPE must be priority/<name>, got '$PRIORITY_TYPE'"
read -r -a GPU_TYPES <<<"$GPU_TYPES_SPEC" || true
(( ${#GPU_TYPES[@]} )) || die "TALLY_GPU_TYPES is empty"
for t in "${GPU_TYPES[@]}"; do
    [[ $t =~ ^[A-Za-z0-9_]+$ ]] || die "TALLY_GPU_TYPES: not a GPU type name: '$t'"
done
[[ $(printf '%s\n' "${GPU_TYPES[@]}" | sort | uniq -d) == "" ]] || die "TALLY_GPU_TYPES has a type twice: $GPU_TYPES_SPEC"
[[ $DEBUG_PARTITION == [01] ]] || die "TALLY_DEBUG_PARTITION must be 0 or 1, got '$DEBUG_PARTITION'"
[[ $SMALL_GPUS =~ ^[0-8]$ ]] || die "TALLY_SMALL_NODE_GPUS must be 0 to 8 (GPUs of the extra node; 0: none), got '$SMALL_GPUS'"
# Every node: n[1-NODES] of GPUS_PER_NODE GPUs, then the small one if any.
ALL_NODES=$(( NODES + (SMALL_GPUS > 0 ? 1 : 0) ))
if [[ -n $PLUGIN_DIR ]]; then
    [[ -d $PLUGIN_DIR ]] || die "TALLY_PLUGIN_DIR is not a directory: $PLUGIN_DIR"
    PLUGIN_DIR=$(cd "$PLUGIN_DIR" && pwd)
fi
[[ -z $ACCOUNTS_FILE || ( -f $ACCOUNTS_FILE && -r $ACCOUNTS_FILE ) ]] \
    || die "TALLY_ACCOUNTS is not a readable file: $ACCOUNTS_FILE"
[[ $TB_RUN == /* && $TB_RUN != / ]] || die "TALLY_RUN_DIR must be an absolute path, got '$TB_RUN'"

T0=$(now)

# ---- settings --------------------------------------------------------------------------------
# slurmctld's environment: parse TALLY_ENV as shell words, each NAME=value.
CTLD_ENV_ARGS=()
if [[ -n $CTLD_ENV ]]; then
    eval "CTLD_ENV_ARGS=($CTLD_ENV)" || die "TALLY_ENV is not valid shell words: $CTLD_ENV"
    for a in "${CTLD_ENV_ARGS[@]}"; do
        [[ $a =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || die "TALLY_ENV: not a NAME=value assignment: '$a'"
    done
fi

# Account spec -> ACC_NAME/ACC_PARENT (parents before children), USR_NAME/USR_ACCT (in order),
# QOS_NAME (in order); ACC_SET/USR_SET/QOS_SET: the optional settings of each ("k=v k=v" or "").
ACC_NAME=(); ACC_PARENT=(); USR_NAME=(); USR_ACCT=(); QOS_NAME=()
ACC_SET=(); USR_SET=(); QOS_SET=()
read_accounts() {
    local kind name parent rest lineno=0 src=${ACCOUNTS_FILE:-built-in default} w
    local -a names=() parents=() sets=() words=()
    local re='^[A-Za-z_][A-Za-z0-9_.-]*$' set_re='^[A-Za-z]+=[A-Za-z0-9_.,:+-]*$'
    local usage="expected 'account <name> <parent>', 'user <name> <account>' or 'qos <name>', each optionally followed by key=value settings"
    while IFS= read -r line || [[ -n $line ]]; do
        lineno=$(( lineno + 1 ))
        line=${line%%#*}
        read -r kind name parent rest <<<"$line" || true
        [[ -z ${kind:-} ]] && continue
        if [[ $kind == qos ]]; then   # qos <name> [settings]: no parent field
            rest="${parent:-} ${rest:-}"; parent=-
        fi
        read -r -a words <<<"${rest:-}" || true
        for w in "${words[@]}"; do
            [[ $w =~ $set_re ]] || die "$src:$lineno: not a key=value setting: '$w' ($usage)"
        done
        rest="${words[*]}"
        [[ -n ${name:-} && -n ${parent:-} && $name =~ $re && ( $parent == - || $parent =~ $re ) ]] \
            || die "$src:$lineno: $usage: $line"
        name=${name,,}; parent=${parent,,}    # Slurm stores account and user names in lower case
        case $kind in
            account) [[ $name != root ]] || die "$src:$lineno: account root is implicit"
                     [[ $parent != - ]] || die "$src:$lineno: $usage: $line"
                     names+=("$name"); parents+=("$parent"); sets+=("$rest") ;;
            user)    [[ $parent != - ]] || die "$src:$lineno: $usage: $line"
                     USR_NAME+=("$name"); USR_ACCT+=("$parent"); USR_SET+=("$rest") ;;
            qos)     QOS_NAME+=("$name"); QOS_SET+=("$rest") ;;
            *)       die "$src:$lineno: unknown entry '$kind'" ;;
        esac
    done < <(if [[ -n $ACCOUNTS_FILE ]]; then cat -- "$ACCOUNTS_FILE"; else
                 printf '%s\n' 'account teama root' 'account teamb root' 'user alice teama' 'user bob teamb'
             fi)
    # Order accounts so that parents come first; reject unknown parents and cycles.
    local -A placed=([root]=1) seen=()
    local i progress=1
    for i in "${!names[@]}"; do
        [[ -z ${seen[${names[$i]}]:-} ]] || die "$src: account ${names[$i]} defined twice"
        seen[${names[$i]}]=1
    done
    while (( ${#ACC_NAME[@]} < ${#names[@]} && progress )); do
        progress=0
        for i in "${!names[@]}"; do
            [[ -z ${placed[${names[$i]}]:-} && -n ${placed[${parents[$i]}]:-} ]] || continue
            ACC_NAME+=("${names[$i]}"); ACC_PARENT+=("${parents[$i]}"); ACC_SET+=("${sets[$i]}")
            placed[${names[$i]}]=1; progress=1
        done
    done
    (( ${#ACC_NAME[@]} == ${#names[@]} )) || die "$src: accounts with unknown parents or in a cycle"
    for i in "${!USR_NAME[@]}"; do
        [[ -n ${placed[${USR_ACCT[$i]}]:-} ]] \
            || die "$src: user ${USR_NAME[$i]} in unknown account ${USR_ACCT[$i]}"
    done
}
read_accounts
# (Entries without settings print as before, so the fingerprint of an old spec is unchanged.)
ACCOUNTS_SPEC=$(for i in "${!QOS_NAME[@]}"; do echo "qos ${QOS_NAME[$i]}${QOS_SET[$i]:+ ${QOS_SET[$i]}}"; done
                for i in "${!ACC_NAME[@]}"; do echo "account ${ACC_NAME[$i]} ${ACC_PARENT[$i]}${ACC_SET[$i]:+ ${ACC_SET[$i]}}"; done
                for i in "${!USR_NAME[@]}"; do echo "user ${USR_NAME[$i]} ${USR_ACCT[$i]}${USR_SET[$i]:+ ${USR_SET[$i]}}"; done)

# ---- config files ----------------------------------------------------------------------------
plugin_dir_value() { echo "${PLUGIN_DIR:+$PLUGIN_DIR:}$TB_SLURM_LIBDIR"; }

# GPU TRES in accounting: gres/gpu, and each type when there are several.
tres_value() {
    local t v=gres/gpu
    if (( ${#GPU_TYPES[@]} > 1 )); then
        for t in "${GPU_TYPES[@]}"; do v+=",gres/gpu:$t"; done
    fi
    echo "$v"
}

# ranges <int...> (ascending): "1-3,5".
ranges() {
    local out='' first='' last='' x
    for x in "$@" ''; do
        if [[ -n $x && -n $last ]] && (( x == last + 1 )); then last=$x; continue; fi
        if [[ -n $first ]]; then
            out+="${out:+,}$first"
            [[ $last == "$first" ]] || out+="-$last"
        fi
        first=$x; last=$x
    done
    echo "$out"
}

# nodes_of_type <index>: the node numbers of GPU type number <index> (0-based).
nodes_of_type() {
    local k
    for (( k = $1 + 1; k <= NODES; k += ${#GPU_TYPES[@]} )); do echo "$k"; done
}

# The NodeName lines: one for all nodes with one GPU type; else one per type; then the small node.
node_lines() {
    node_lines_full
    if (( SMALL_GPUS > 0 )); then
        echo "NodeName=n$ALL_NODES NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$(( TB_NODE_PORT0 + ALL_NODES ))" \
             "CPUs=$NODE_CPUS RealMemory=$NODE_MEM Gres=gpu:${GPU_TYPES[0]}:$SMALL_GPUS State=UNKNOWN"
    fi
}

node_lines_full() {
    local i t k
    local -a ks ports
    if (( ${#GPU_TYPES[@]} == 1 )); then
        echo "NodeName=n[1-$NODES] NodeHostname=$HOST NodeAddr=127.0.0.1" \
             "Port=$(( TB_NODE_PORT0 + 1 ))-$(( TB_NODE_PORT0 + NODES ))" \
             "CPUs=$NODE_CPUS RealMemory=$NODE_MEM Gres=gpu:${GPU_TYPES[0]}:$GPUS_PER_NODE State=UNKNOWN"
        return
    fi
    for i in "${!GPU_TYPES[@]}"; do
        t=${GPU_TYPES[$i]}
        mapfile -t ks < <(nodes_of_type "$i")
        (( ${#ks[@]} )) || continue
        mapfile -t ports < <(for k in "${ks[@]}"; do echo $(( TB_NODE_PORT0 + k )); done)
        echo "NodeName=n[$(ranges "${ks[@]}")] NodeHostname=$HOST NodeAddr=127.0.0.1" \
             "Port=$(ranges "${ports[@]}")" \
             "CPUs=$NODE_CPUS RealMemory=$NODE_MEM Gres=gpu:$t:$GPUS_PER_NODE State=UNKNOWN"
    done
}

# Default slurm.conf "Key=value" lines; a key set in TALLY_SLURM_EXTRA drops the default one.
base_conf() {
    cat <<EOF
ClusterName=$TB_CLUSTER
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
PluginDir=$(plugin_dir_value)
StateSaveLocation=$TB_RUN/state
SlurmdSpoolDir=$TB_RUN/spool/%n
SlurmctldPidFile=$TB_PID/slurmctld.pid
SlurmdPidFile=$TB_PID/slurmd-%n.pid
SlurmctldLogFile=$TB_LOG/slurmctld.log
SlurmdLogFile=$TB_LOG/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
SlurmctldPort=$TB_CTLD_PORT
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
MailProg=/bin/true
SwitchType=switch/none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
GresTypes=gpu
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=5,bf_interval=5,bf_resolution=60
MinJobAge=10
KillWait=5
InactiveLimit=0
Waittime=0
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$TB_DBD_PORT
AccountingStorageTRES=$(tres_value)
AccountingStorageEnforce=associations,limits
AccountingStoreFlags=job_comment
PriorityType=$PRIORITY_TYPE
PriorityDecayHalfLife=7-0
PriorityMaxAge=7-0
PriorityWeightFairshare=10000
PriorityWeightAge=1000
PriorityWeightJobSize=0
PriorityWeightPartition=0
PriorityWeightQOS=0
EOF
}

write_slurm_conf() {   # $1 = FirstJobId
    local extra_keys key
    extra_keys=$(printf '%s\n' "$SLURM_EXTRA" | sed -n 's/^[[:space:]]*\([A-Za-z]*\)[[:space:]]*=.*/\1/p' \
                 | grep -viE '^(NodeName|PartitionName|NodeSet|DownNodes|FrontendName)$' || true)
    {
        echo "# Written by testbed/up.sh of Tally: do not edit, it is rewritten on each start."
        echo "$TB_CONF_MARKER $TB_RUN"
        echo "$TB_RELEASE_MARKER $TB_SLURM_RELEASE"
        base_conf | while IFS= read -r line; do
            key=${line%%=*}
            grep -qixF -- "$key" <<<"$extra_keys" || echo "$line"
        done
        echo "FirstJobId=$1"
        node_lines
        echo "PartitionName=gpu Nodes=n[1-$ALL_NODES] Default=YES MaxTime=INFINITE State=UP" \
             "TRESBillingWeights=\"CPU=0,GRES/gpu=1.0\""
        if (( DEBUG_PARTITION )); then
            echo "PartitionName=debug Nodes=n1 Default=NO MaxTime=30 State=UP" \
                 "TRESBillingWeights=\"CPU=0,GRES/gpu=1.0\""
        fi
        if [[ -n $SLURM_EXTRA ]]; then
            echo "# TALLY_SLURM_EXTRA"
            printf '%s\n' "$SLURM_EXTRA"
        fi
    } >"$TB_SLURM_CONF.tmp"
    chmod 0644 "$TB_SLURM_CONF.tmp"
    mv -f "$TB_SLURM_CONF.tmp" "$TB_SLURM_CONF"
}

write_other_confs() {
    local files="File=$TB_RUN/gpu/nvidia[0-$(( GPUS_PER_NODE - 1 ))]" i k
    local -a ks
    {
        printf '%s\n' "# Written by testbed/up.sh of Tally." "AutoDetect=off"
        if (( ${#GPU_TYPES[@]} == 1 && SMALL_GPUS == 0 )); then
            echo "Name=gpu Type=${GPU_TYPES[0]} $files"
        elif (( ${#GPU_TYPES[@]} == 1 )); then
            echo "NodeName=n[1-$NODES] Name=gpu Type=${GPU_TYPES[0]} $files"
        else
            for i in "${!GPU_TYPES[@]}"; do
                mapfile -t ks < <(nodes_of_type "$i")
                (( ${#ks[@]} == 0 )) || echo "NodeName=n[$(ranges "${ks[@]}")] Name=gpu Type=${GPU_TYPES[$i]} $files"
            done
        fi
        if (( SMALL_GPUS > 0 )); then
            echo "NodeName=n$ALL_NODES Name=gpu Type=${GPU_TYPES[0]} File=$TB_RUN/gpu/nvidia[0-$(( SMALL_GPUS - 1 ))]"
        fi
    } >"$TB_SLURM_ETC/gres.conf"
    chmod 0644 "$TB_SLURM_ETC/gres.conf"
    if [[ $TB_SLURM_RELEASE == 22.05 ]]; then
        rm -f "$TB_SLURM_ETC/cgroup.conf"   # 22.05 slurmd must autodetect; a cgroup.conf breaks it here
    else
        # 24.11 slurmd initialises a cgroup plugin unless told not to; the chroot has no cgroup fs.
        printf '%s\n' "# Written by testbed/up.sh of Tally." "CgroupPlugin=disabled" >"$TB_SLURM_ETC/cgroup.conf"
        chmod 0644 "$TB_SLURM_ETC/cgroup.conf"
    fi
    (umask 077; cat >"$TB_SLURM_ETC/slurmdbd.conf" <<EOF
# Written by testbed/up.sh of Tally.
AuthType=auth/munge
DbdHost=$HOST
DbdAddr=127.0.0.1
DbdPort=$TB_DBD_PORT
SlurmUser=root
PidFile=$TB_PID/slurmdbd.pid
LogFile=$TB_LOG/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$TB_DB_PORT
StorageUser=$TB_DB_USER
StoragePass=$TB_DB_PASS
StorageLoc=$TB_DB_NAME
EOF
    )
    chmod 0600 "$TB_SLURM_ETC/slurmdbd.conf"
}

# Fingerprint of everything that needs a restart when it changes.
fingerprint() {
    {
        echo "run=$TB_RUN nodes=$NODES small=$SMALL_GPUS host=$HOST gpu_types=${GPU_TYPES[*]} debug_partition=$DEBUG_PARTITION"
        base_conf
        printf 'extra:\n%s\nenv:%s\naccounts:\n%s\n' "$SLURM_EXTRA" "${CTLD_ENV_ARGS[*]}" "$ACCOUNTS_SPEC"
        if [[ -n $PLUGIN_DIR ]]; then
            find -L "$PLUGIN_DIR" -maxdepth 1 -name '*.so' -printf '%f %s %T@\n' | sort
        fi
        cat "$TB_DIR/lib.sh" "$TB_DIR/up.sh"
    } | sha256sum | cut -d' ' -f1
}

# ---- health ----------------------------------------------------------------------------------
munge_ok() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }
db_ok() { mariadb-admin --socket="$TB_DB_SOCK" -uroot ping >/dev/null 2>&1; }
dbd_ok() { timeout 10 sacctmgr -nP show cluster format=cluster >/dev/null 2>&1; }

# Node states (short form) one a line, e.g. "n1 idle".
node_states() { timeout 10 sinfo -h -N -o '%N %t' 2>/dev/null | sort -u; }
# nodes_in <regex>: all ALL_NODES nodes are registered and in a state matching <regex>.
nodes_in() {
    local states
    states=$(node_states) || return 1
    (( $(wc -l <<<"$states") == ALL_NODES )) || return 1
    ! awk -v re="^($1)\$" '$2 !~ re { bad = 1 } END { exit !bad }' <<<"$states"
}

# alive <name>: the daemon we started under that name still runs.

healthy() {
    local k
    [[ -f $TB_RUN/fingerprint && $(cat "$TB_RUN/fingerprint") == "$FINGERPRINT" ]] || { log "settings differ from the running cluster (or none runs)"; return 1; }
    for k in mariadbd slurmdbd slurmctld; do alive "$k" || { log "$k is not running"; return 1; }; done
    for (( k = 1; k <= ALL_NODES; k++ )); do alive "slurmd-n$k" || { log "slurmd n$k is not running"; return 1; }; done
    munge_ok || { log "munge does not work"; return 1; }
    db_ok || { log "mariadbd does not answer"; return 1; }
    dbd_ok || { log "slurmdbd does not answer"; return 1; }
    ctld_up || { log "slurmctld does not answer"; return 1; }
    nodes_in 'idle|alloc|mix|comp' || { log "nodes not all up: $(node_states | tr '\n' ' ')"; return 1; }
}

# ---- start steps -----------------------------------------------------------------------------
prepare_dirs() {
    mkdir -p "$TB_RUN" "$TB_LOG" "$TB_PID" "$TB_RUN/state" "$TB_RUN/spool" "$TB_RUN/gpu" \
             "$TB_RUN/jobs" "$TB_RUN/mysql/data" "$TB_RUN/mysql/run" "$TB_SLURM_ETC"
    # The logs hold what slurmctld's 0600 log holds (refusals by uid, job
    # names): as private as Slurm keeps it.
    chmod 0755 "$TB_RUN"
    chmod 0700 "$TB_LOG"
    chmod 1777 "$TB_RUN/jobs"
    chown -R mysql:mysql "$TB_RUN/mysql"
    # Previous logs go to log.prev, so a failure can still be read after a restart.
    if compgen -G "$TB_LOG/*" >/dev/null; then
        rm -rf "$TB_RUN/log.prev" && mkdir -p -m 0700 "$TB_RUN/log.prev"
        mv "$TB_LOG"/* "$TB_RUN/log.prev/"
    fi
    if [[ ${TALLY_KEEP_STATE:-0} != 1 ]]; then
        rm -rf "${TB_RUN:?}/state"/* "${TB_RUN:?}/spool"/*
    fi
    local i
    for (( i = 0; i < GPUS_PER_NODE; i++ )); do ln -sfn /dev/null "$TB_RUN/gpu/nvidia$i"; done
    for (( i = 1; i <= ALL_NODES; i++ )); do mkdir -p "$TB_RUN/spool/n$i"; done
    mkdir -p /run/munge && chown munge:munge /run/munge && chmod 0755 /run/munge
}

ensure_unix_users() {
    local u
    for u in $(printf '%s\n' "${USR_NAME[@]}" | sort -u); do
        id -u "$u" >/dev/null 2>&1 && continue
        log "creating Unix user $u"
        useradd -M -N -s /bin/bash "$u"
    done
}

start_munge() {
    if munge_ok; then log "munged already answers; using it"; return; fi
    [[ -s /etc/munge/munge.key ]] || { log "creating munge key"; mungekey --create --keyfile=/etc/munge/munge.key; chown munge:munge /etc/munge/munge.key; chmod 0400 /etc/munge/munge.key; }
    launch munged setpriv --reuid=munge --regid=munge --init-groups munged --foreground
    start_wait munged 15 "munged to answer" munge_ok
}

db_sql() { mariadb --socket="$TB_DB_SOCK" -uroot -N -B "$@"; }

start_mariadb() {
    local data=$TB_RUN/mysql/data
    if [[ ! -d $data/mysql ]]; then
        log "initialising the MariaDB data dir"
        mariadb-install-db --no-defaults --user=mysql --datadir="$data" --skip-test-db \
            --auth-root-authentication-method=socket >"$TB_LOG/mariadb-install.log" 2>&1 \
            || fail "mariadb-install-db failed" mariadb-install
    fi
    launch mariadbd mariadbd --no-defaults --user=mysql --datadir="$data" \
        --socket="$TB_DB_SOCK" --pid-file="$TB_RUN/mysql/run/mariadbd.pid" \
        --bind-address=127.0.0.1 --port="$TB_DB_PORT" --skip-name-resolve \
        --innodb-buffer-pool-size=64M --innodb-flush-log-at-trx-commit=0 --innodb-doublewrite=0 \
        --skip-log-bin
    start_wait mariadbd 60 "mariadbd to answer" db_ok
    db_sql -e "CREATE USER IF NOT EXISTS '$TB_DB_USER'@'127.0.0.1' IDENTIFIED BY '$TB_DB_PASS';
               GRANT ALL ON \`$TB_DB_NAME\`.* TO '$TB_DB_USER'@'127.0.0.1';" \
        || fail "cannot create the database user for slurmdbd" mariadbd
    # 24.11 (Debian 13, libmariadb 11.8.9): when slurmdbd has to create the database itself, it
    # reconnects on the handle whose first connect failed, and every query with a result then
    # fails ("5027 Number of columns in result (=1) set execeeds maxmimum allowed number of
    # columns (=0)"): slurmdbd dies in _check_mysql_concat_is_sane. So the database exists first.
    if [[ $TB_SLURM_RELEASE != 22.05 ]]; then
        db_sql -e "CREATE DATABASE IF NOT EXISTS \`$TB_DB_NAME\`" \
            || fail "cannot create the database for slurmdbd" mariadbd
    fi
}

# Job ids continue after the last one recorded, so that sacct never sees two jobs with one id.
first_job_id() {
    local last
    last=$(db_sql -e "SELECT COALESCE(MAX(id_job), 0) FROM \`$TB_DB_NAME\`.\`${TB_CLUSTER}_job_table\`" 2>/dev/null) || last=0
    [[ $last =~ ^[0-9]+$ ]] || last=0
    echo $(( last + 1 ))
}

# On a fresh start slurmctld's saved state is wiped, so jobs the accounting database still holds
# as pending or running (a test that ended with jobs queued, a slurmctld killed with -9) can never
# end: they would keep their associations from being removed ("Job(s) active"). Close them the
# way `sacctmgr show runawayjobs` does (end = latest of start, eligible, submit; COMPLETED), which
# itself cannot run here because it asks the slurmctld that forgot them.
close_forgotten_jobs() {
    [[ ${TALLY_KEEP_STATE:-0} != 1 ]] || return 0
    local jt="\`$TB_DB_NAME\`.\`${TB_CLUSTER}_job_table\`" st="\`$TB_DB_NAME\`.\`${TB_CLUSTER}_step_table\`" n
    n=$(db_sql -e "SELECT COUNT(*) FROM $jt WHERE time_end = 0" 2>/dev/null) || return 0
    [[ $n =~ ^[0-9]+$ ]] && (( n > 0 )) || return 0
    log "closing $n job(s) the database holds as unfinished (slurmctld's state was wiped)"
    db_sql -e "UPDATE $st s JOIN $jt j ON s.job_db_inx = j.job_db_inx
                   SET s.time_end = GREATEST(s.time_start, j.time_start, j.time_eligible, j.time_submit),
                       s.state = 3
                 WHERE j.time_end = 0 AND s.time_end = 0;
               UPDATE $jt SET time_end = GREATEST(time_start, time_eligible, time_submit), state = 3
                 WHERE time_end = 0;" \
        || fail "cannot close the unfinished jobs in the accounting database" mariadbd
}

start_slurmdbd() {
    launch slurmdbd slurmdbd -D
    start_wait slurmdbd 120 "slurmdbd to answer (sacctmgr show cluster)" dbd_ok
}

sam() { timeout 30 sacctmgr -i "$@" >>"$TB_LOG/sacctmgr.log" 2>&1 || fail "sacctmgr $* failed" sacctmgr slurmdbd; }

# Make the accounting database hold exactly the cluster, accounts and users of the spec.
sync_accounts() {
    local -A want_acc=() want_usr=() have=() default=()
    local i a p u line
    echo "--- $(date +%T) sync" >>"$TB_LOG/sacctmgr.log"
    timeout 10 sacctmgr -nP show cluster format=cluster | grep -qx "$TB_CLUSTER" || sam add cluster "$TB_CLUSTER"
    # QOS of the spec: created when missing (never removed); settings at the end.
    if (( ${#QOS_NAME[@]} )); then
        local -A have_qos=()
        for a in $(timeout 10 sacctmgr -nP show qos format=name); do have_qos[$a]=1; done
        for a in "${QOS_NAME[@]}"; do
            [[ -n ${have_qos[$a]:-} ]] || sam add qos "$a"
        done
    fi
    # Existing associations: "account|parent|user", tree order.
    local -a assocs
    mapfile -t assocs < <(timeout 10 sacctmgr -nP show assoc cluster="$TB_CLUSTER" format=account,parentname,user)
    for line in "${assocs[@]}"; do
        IFS='|' read -r a p u <<<"$line"
        if [[ -n $u ]]; then have["u:$u:$a"]=1; else have["a:$a"]=$p; fi
    done
    for i in "${!ACC_NAME[@]}"; do want_acc[${ACC_NAME[$i]}]=${ACC_PARENT[$i]}; done
    for i in "${!USR_NAME[@]}"; do
        want_usr["${USR_NAME[$i]}:${USR_ACCT[$i]}"]=1
        [[ -n ${default[${USR_NAME[$i]}]:-} ]] || default[${USR_NAME[$i]}]=${USR_ACCT[$i]}
    done
    # Remove user associations, then accounts, that the spec does not have (children first).
    for (( i = ${#assocs[@]} - 1; i >= 0; i-- )); do
        IFS='|' read -r a p u <<<"${assocs[$i]}"
        [[ -n $u && $u != root && -z ${want_usr["$u:$a"]:-} ]] || continue
        log "removing association $u/$a"
        sam delete user name="$u" account="$a" cluster="$TB_CLUSTER"
    done
    for (( i = ${#assocs[@]} - 1; i >= 0; i-- )); do
        IFS='|' read -r a p u <<<"${assocs[$i]}"
        [[ -z $u && $a != root && -z ${want_acc[$a]:-} ]] || continue
        log "removing account $a"
        sam delete account name="$a" cluster="$TB_CLUSTER"
    done
    # Add accounts (one call per parent, parents first) or move them; then users (one call per
    # account).
    local -a order=(root)
    local -A group=()
    for i in "${!ACC_NAME[@]}"; do
        a=${ACC_NAME[$i]}; p=${ACC_PARENT[$i]}
        order+=("$a")
        if [[ -z ${have["a:$a"]+x} ]]; then
            group[$p]+="${group[$p]:+,}$a"
        elif [[ ${have["a:$a"]} != "$p" ]]; then
            sam modify account where name="$a" cluster="$TB_CLUSTER" set parent="$p"
        fi
    done
    for p in "${order[@]}"; do
        [[ -n ${group[$p]:-} ]] || continue
        sam add account "${group[$p]}" parent="$p" cluster="$TB_CLUSTER" organization=tally
    done
    group=()
    for i in "${!USR_NAME[@]}"; do
        u=${USR_NAME[$i]}; a=${USR_ACCT[$i]}
        [[ -n ${have["u:$u:$a"]:-} || ,${group[$a]:-}, == *",$u,"* ]] \
            || group[$a]+="${group[$a]:+,}$u"
    done
    for a in "${order[@]}"; do
        [[ -n ${group[$a]:-} ]] || continue
        sam add user "${group[$a]}" account="$a" cluster="$TB_CLUSTER"
    done
    # Default accounts.
    local -a defaults
    mapfile -t defaults < <(timeout 10 sacctmgr -nP show user format=user,defaultaccount)
    for line in "${defaults[@]}"; do
        IFS='|' read -r u a <<<"$line"
        if [[ -n ${default[$u]:-} && ${default[$u]} != "$a" ]]; then
            sam modify user where name="$u" set defaultaccount="${default[$u]}"
        fi
    done
    apply_settings
}

# The optional key=value settings of the spec's QOS, accounts and users (one sacctmgr call per
# QOS, per distinct account setting and per distinct user setting).
apply_settings() {
    local i k
    local -a words
    local -A group=()
    for i in "${!QOS_NAME[@]}"; do
        [[ -n ${QOS_SET[$i]} ]] || continue
        read -r -a words <<<"${QOS_SET[$i]}"
        sam modify qos where name="${QOS_NAME[$i]}" set "${words[@]}"
    done
    for i in "${!ACC_NAME[@]}"; do
        [[ -n ${ACC_SET[$i]} ]] || continue
        k=${ACC_SET[$i]}; group[$k]+="${group[$k]:+,}${ACC_NAME[$i]}"
    done
    for k in "${!group[@]}"; do
        read -r -a words <<<"$k"
        sam modify account where name="${group[$k]}" cluster="$TB_CLUSTER" set "${words[@]}"
    done
    # Users: one call per distinct setting (users x their accounts) when no other association
    # in that cross product has another setting; else one call per account and setting.
    local -A users=() accts=() has=() split=()
    local u a
    for i in "${!USR_NAME[@]}"; do
        k=${USR_SET[$i]}
        has["${USR_NAME[$i]}|${USR_ACCT[$i]}"]=$k
        [[ -n $k ]] || continue
        [[ ,${users[$k]:-}, == *",${USR_NAME[$i]},"* ]] || users[$k]+="${users[$k]:+,}${USR_NAME[$i]}"
        [[ ,${accts[$k]:-}, == *",${USR_ACCT[$i]},"* ]] || accts[$k]+="${accts[$k]:+,}${USR_ACCT[$i]}"
    done
    for k in "${!users[@]}"; do
        for u in ${users[$k]//,/ }; do
            for a in ${accts[$k]//,/ }; do
                [[ -z ${has["$u|$a"]+x} || ${has["$u|$a"]} == "$k" ]] || split[$k]=1
            done
        done
    done
    group=()
    for i in "${!USR_NAME[@]}"; do
        k=${USR_SET[$i]}
        [[ -n $k && -n ${split[$k]:-} ]] || continue
        k="${USR_ACCT[$i]}|$k"; group[$k]+="${group[$k]:+,}${USR_NAME[$i]}"
    done
    for k in "${!users[@]}"; do
        [[ -z ${split[$k]:-} ]] || continue
        read -r -a words <<<"$k"
        sam modify user where name="${users[$k]}" account="${accts[$k]}" cluster="$TB_CLUSTER" set "${words[@]}"
    done
    for k in "${!group[@]}"; do
        read -r -a words <<<"${k#*|}"
        sam modify user where name="${group[$k]}" account="${k%%|*}" cluster="$TB_CLUSTER" set "${words[@]}"
    done
}

start_slurmctld() {
    # restart-ctld.sh starts slurmctld again with the same environment.
    printf '%q ' "${CTLD_ENV_ARGS[@]}" >"$TB_RUN/slurmctld.env"
    launch slurmctld "${CTLD_ENV_ARGS[@]}" slurmctld -D
    start_wait slurmctld 60 "slurmctld to answer (scontrol ping)" ctld_up
}

start_slurmds() {
    local k
    for (( k = 1; k <= ALL_NODES; k++ )); do launch "slurmd-n$k" slurmd -D -N "n$k"; done
    for (( k = 1; k <= ALL_NODES; k++ )); do
        # (A slurmd rewrites its pid file as it starts: look twice, as ready does.)
        alive "slurmd-n$k" || { sleep 0.3; alive "slurmd-n$k"; } || fail "slurmd n$k exited" "slurmd-n$k"
    done
    DIED=
    if ! wait_for 60 "all $ALL_NODES nodes idle" nodes_in idle; then
        log "node states: $(node_states | tr '\n' ' ')"
        fail "nodes did not come up" slurmctld slurmd-n1
    fi
}

# ---- main ------------------------------------------------------------------------------------
# On a failure, leave no half cluster behind (the logs stay).
fail_hook() { log "stopping what was started"; tb_stop 30; }

FINGERPRINT=$(fingerprint)
if [[ -f $TB_SLURM_CONF ]] && grep -qF "$TB_CONF_MARKER $TB_RUN" "$TB_SLURM_CONF" && healthy; then
    log "up: already up with the same settings ($NODES nodes, $PRIORITY_TYPE); verified in $(elapsed "$T0")s"
    exit 0
fi

# Stop leftovers: those of a previous run dir too (recorded in the old config).
OLD_RUN=$(sed -n "s|^$TB_CONF_MARKER ||p" "$TB_SLURM_CONF" 2>/dev/null | head -n1 || true)
if [[ -n $OLD_RUN && $OLD_RUN != "$TB_RUN" ]]; then
    TALLY_RUN_DIR=$OLD_RUN bash "$TB_DIR/down.sh"
fi
tb_stop 90
rm -f "$TB_RUN/fingerprint"

log "up: starting $NODES nodes, $PRIORITY_TYPE${PLUGIN_DIR:+, plugins from $PLUGIN_DIR}, run dir $TB_RUN"
prepare_dirs
write_other_confs
write_slurm_conf 1          # clients (sacctmgr) need a slurm.conf before slurmctld runs
ensure_unix_users
t=$(now); start_munge;     log "munged ready [$(elapsed "$t")s]"
t=$(now); start_mariadb;   log "mariadbd ready [$(elapsed "$t")s]"
t=$(now); start_slurmdbd;  log "slurmdbd ready [$(elapsed "$t")s]"
close_forgotten_jobs
t=$(now); sync_accounts;   log "accounts synced: ${#ACC_NAME[@]} accounts, ${#USR_NAME[@]} user associations${QOS_NAME[0]:+, ${#QOS_NAME[@]} QOS} [$(elapsed "$t")s]"
write_slurm_conf "$(first_job_id)"
t=$(now); start_slurmctld; log "slurmctld ready [$(elapsed "$t")s]"
t=$(now); start_slurmds;   log "$NODES slurmd ready, all nodes idle [$(elapsed "$t")s]"
echo "$FINGERPRINT" >"$TB_RUN/fingerprint"
log "up: cluster '$TB_CLUSTER' up in $(elapsed "$T0")s (logs in $TB_LOG)"
