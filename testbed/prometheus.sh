#!/usr/bin/env bash
# Tally test bed: a real Prometheus (Debian 12's package, 2.42) on loopback that scrapes
# `tally exporter`, for the end-to-end tests (as root). Started directly in the background as the
# bed's daemons are, never as a system service (the package's postinst is kept from starting one).
#
# Usage: bash testbed/prometheus.sh <command> [args...]
#   install               apt-get install prometheus (and curl) without recommends; idempotent, a
#                         fast no-op when present. The other commands run it when needed.
#   start [OPTIONS] TARGET [INTERVAL]
#                         (re)start Prometheus scraping TARGET (host:port of the exporter,
#                         metrics path /metrics, job "tally") every INTERVAL (default 2s; also the
#                         evaluation interval); a running one is stopped first and its storage is
#                         wiped, so every start begins with no series. Waits (60 s) until /-/ready
#                         answers, then prints the base URL (http://127.0.0.1:PORT) on stdout.
#                         Options, for an exporter behind a web config (`--web-config`):
#                           --user USER --password-file FILE
#                                         basic authentication (the file holds the password)
#                           --ca-file FILE  scrape over https, trusting the CA (or self-signed
#                                         certificate) in FILE
#                           --server-name NAME
#                                         the name the certificate is checked against (default:
#                                         TARGET's host)
#   stop                  stop it (SIGTERM, bounded wait, SIGKILL); safe when none runs.
#                         testbed/down.sh stops it too (with the bed's other daemons).
#   query EXPR            print the JSON answer of GET /api/v1/query?query=EXPR (instant query);
#                         exits nonzero when Prometheus does not answer or rejects EXPR.
#   wait-series EXPR [TIMEOUT_S]
#                         wait (default 60 s) until EXPR gives at least one series; on timeout
#                         print the last answer and exit 1.
#
# Files, under the bed's run dir: $TB_RUN/prometheus/{prometheus.yml,data/,prometheus.pid},
# log in $TB_RUN/log/prometheus.log.
# Notes: a series stays visible to instant queries for 5 min (the lookback delta) after its last
# scrape; `up{job="tally"}` exists after the first scrape even when it failed (value 0).
#
# Environment:
#   TALLY_RUN_DIR           run dir of the test bed (see lib.sh)
#   TALLY_PROMETHEUS_PORT   port Prometheus listens on, on 127.0.0.1 (default 9099, away from
#                           Prometheus's usual 9090 and node exporter's 9100)
set -euo pipefail
# shellcheck source=testbed/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PROM_DIR=$TB_RUN/prometheus
PROM_PID=$PROM_DIR/prometheus.pid
PROM_LOG=$TB_LOG/prometheus.log
PROM_PORT=${TALLY_PROMETHEUS_PORT:-9099}
PROM_URL=http://127.0.0.1:$PROM_PORT
PKGS=(prometheus curl)

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

# ---- install -----------------------------------------------------------------------------------

# The package's postinst would start (and on systemd enable) its service on 0.0.0.0:9090: a
# policy-rc.d answering 101 (action forbidden) keeps invoke-rc.d / deb-systemd-invoke from it.
# Ours is put in place only when there is none or the one there allows starting prometheus,
# and the original is put back on exit.
POLICY=/usr/sbin/policy-rc.d
policy_restore() {
    if [[ -e $POLICY.tally-saved ]]; then mv -f "$POLICY.tally-saved" "$POLICY"
    elif [[ -e $POLICY ]] && grep -q 'tally-testbed' "$POLICY"; then rm -f "$POLICY"; fi
}
policy_forbid() {
    local rc=0
    if [[ -x $POLICY ]]; then
        "$POLICY" prometheus start >/dev/null 2>&1 || rc=$?
        (( rc == 101 )) && return 0
        mv -f "$POLICY" "$POLICY.tally-saved"
    fi
    trap policy_restore EXIT
    printf '#!/bin/sh\n# tally-testbed: no service starts while prometheus.sh installs\nexit 101\n' >"$POLICY"
    chmod 0755 "$POLICY"
}

do_install() {
    if [[ -n $(apt_missing "${PKGS[@]}") ]]; then
        [[ $(id -u) == 0 ]] || die "installing ${PKGS[*]} needs root"
        policy_forbid
        apt_ensure prometheus 0 "${PKGS[@]}"
        policy_restore
        trap - EXIT
    else
        apt_ensure prometheus "$([[ ${1:-} == -v ]] && echo 1 || echo 0)" "${PKGS[@]}"
    fi
}

# ---- daemon ------------------------------------------------------------------------------------
running_pids() {
    { pid_of "$PROM_PID" || true; pids_tagged prometheus; } | sort -u
}

do_stop() {
    # shellcheck disable=SC2046  # pid list
    stop_pids prometheus 30 $(running_pids)
    rm -f "$PROM_PID"
}

# For wait_for: ready, or dead (DIED=1, succeeds at once so the wait ends).
prom_ready() {
    pid_of "$PROM_PID" >/dev/null || { DIED=1; return 0; }
    curl -sf --max-time 2 "$PROM_URL/-/ready"
}

do_start() {
    local user='' password_file='' ca_file='' server_name='' scheme=http extra=''
    while [[ ${1:-} == --* ]]; do
        (( $# >= 2 )) || die "start: $1 needs a value"
        case $1 in
            --user)          user=$2 ;;
            --password-file) password_file=$2 ;;
            --ca-file)       ca_file=$2 ;;
            --server-name)   server_name=$2 ;;
            *)               die "start: unknown option '$1' (--user, --password-file, --ca-file, --server-name)" ;;
        esac
        shift 2
    done
    local target=${1:-} interval=${2:-2s} t0
    if [[ -n $user || -n $password_file ]]; then
        [[ -n $user && -n $password_file ]] || die "start: --user and --password-file go together"
        [[ $user =~ ^[A-Za-z0-9._-]+$ ]] || die "start: --user must be letters, digits, '.', '_' or '-', got '$user'"
        [[ -r $password_file ]] || die "start: --password-file $password_file is not readable"
        extra+=$'    basic_auth:\n'"      username: $user"$'\n'"      password_file: '$(realpath "$password_file")'"$'\n'
    fi
    if [[ -n $ca_file ]]; then
        [[ -r $ca_file ]] || die "start: --ca-file $ca_file is not readable"
        scheme=https
        extra+=$'    tls_config:\n'"      ca_file: '$(realpath "$ca_file")'"$'\n'
        [[ -z $server_name ]] || extra+="      server_name: '$server_name'"$'\n'
    elif [[ -n $server_name ]]; then
        die "start: --server-name needs --ca-file"
    fi
    [[ $target =~ ^(\[[0-9a-fA-F:.]+\]|[^][[:space:]/:]+):[0-9]+$ ]] || die "start: TARGET must be host:port, got '$target'"
    [[ $interval =~ ^[0-9]+(ms|s|m|h)$ ]] || die "start: INTERVAL must be a duration like 2s, got '$interval'"
    do_install
    do_stop
    t0=$(now)
    mkdir -p "$PROM_DIR" "$TB_LOG"
    rm -rf "${PROM_DIR:?}/data"
    cat >"$PROM_DIR/prometheus.yml" <<EOF
# Written by testbed/prometheus.sh: scrapes tally exporter at $target.
global:
  scrape_interval: $interval
  evaluation_interval: $interval
scrape_configs:
  - job_name: tally
    metrics_path: /metrics
    scheme: $scheme
${extra}    static_configs:
      - targets: ['$target']
EOF
    printf '\n===== %s: prometheus start, target %s, interval %s =====\n' "$(date '+%F %T')" "$target" "$interval" >>"$PROM_LOG"
    setsid env -i -C "$PROM_DIR" PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "$TB_TAG" \
        /usr/bin/prometheus \
            --config.file="$PROM_DIR/prometheus.yml" \
            --storage.tsdb.path="$PROM_DIR/data" \
            --web.listen-address="127.0.0.1:$PROM_PORT" \
        </dev/null >>"$PROM_LOG" 2>&1 &
    echo $! >"$PROM_PID"
    DIED=
    if ! wait_for 60 "prometheus on $PROM_URL to be ready" prom_ready || [[ -n $DIED ]]; then
        [[ -n $DIED ]] && log "prometheus exited"
        printf '\n===== tail -n 30 %s =====\n' "$PROM_LOG" >&2
        tail -n 30 "$PROM_LOG" >&2 || true
        do_stop
        die "prometheus did not start (log: $PROM_LOG)"
    fi
    log "prometheus ready on $PROM_URL, scraping $scheme://$target every $interval${user:+ as $user} [$(elapsed "$t0")s]"
    echo "$PROM_URL"
}

# ---- queries -----------------------------------------------------------------------------------
do_query() {
    [[ -n ${1:-} ]] || die "query: no expression"
    command -v curl >/dev/null || do_install
    curl -sS --fail-with-body --max-time 10 -G "$PROM_URL/api/v1/query" --data-urlencode "query=$1"
}

# A successful answer with a non-empty result (vector/matrix: a series; scalar/string: a value).
has_series() {
    [[ $1 == *'"status":"success"'* && $1 == *'"result":'* && $1 != *'"result":[]'* ]]
}

do_wait_series() {
    local expr=${1:-} limit=${2:-60} out='' start=$SECONDS
    [[ -n $expr ]] || die "wait-series: no expression"
    [[ $limit =~ ^[0-9]+$ ]] || die "wait-series: TIMEOUT_S must be whole seconds, got '$limit'"
    while :; do
        out=$(do_query "$expr" 2>&1) || true
        has_series "$out" && return 0
        (( SECONDS - start >= limit )) && break
        sleep 0.5
    done
    log "timed out after ${limit}s waiting for a series of: $expr"
    printf '%s\n' "$out"
    return 1
}

cmd=${1:-}
(( $# )) && shift
case $cmd in
    install)     do_install -v ;;
    start)       do_start "$@" ;;
    stop)        do_stop ;;
    query)       rc=0; out=$(do_query "$@") || rc=$?; printf '%s\n' "$out"; exit "$rc" ;;
    wait-series) do_wait_series "$@" ;;
    -h|--help)   usage ;;
    *)           usage >&2; die "unknown command: '$cmd'" ;;
esac
