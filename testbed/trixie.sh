#!/usr/bin/env bash
# Tally test bed on Slurm 24.11: a Debian 13 (trixie) chroot in which testbed/up.sh, down.sh,
# restart-ctld.sh and the end-to-end tests run unchanged (as root), next to the host's 22.05 bed.
# Inside, lib.sh picks Slurm 24.11.5 and its own run dir and ports, so both beds can be up at
# the same time; the chroot shares the host's network, /proc and /dev.
#
# Usage: bash testbed/trixie.sh <command> [args...]
#   ensure      create the chroot when missing (debootstrap --variant=minbase trixie) and install
#               the bed's packages in it (testbed/install.sh run inside: Slurm pinned to
#               24.11.5-4+deb13u1, munge, MariaDB, ...); installs debootstrap on the host when
#               missing. Idempotent: a fast no-op when done. Leaves the mounts as it found them.
#   mount       mount what the chroot needs (idempotent): proc on /proc, sysfs (read-only) on
#               /sys, the host's /dev and /dev/pts, a tmpfs on /dev/shm, and the repository (this
#               script's ..) at its own absolute path, so host-built binaries and plugins under
#               <repo>/target are reachable at the same paths; also each dir of TALLY_TRIXIE_BIND.
#               /run and /tmp are the chroot's own (its munged's socket is in its /run/munge).
#   umount      unmount what `mount` mounted (safe when nothing is); refuses while processes run
#               inside the chroot (bring the bed down first: `run bash testbed/down.sh`)
#   run CMD...  mount, then run CMD inside the chroot as root, in the repository, with only:
#               PATH (Debian's), HOME=/root, LANG=C.UTF-8, TERM, RUST_BACKTRACE, RUST_LOG, the
#               caller's TALLY_* (not TALLY_TRIXIE_*), and TALLY_RUN_DIR=$TALLY_TRIXIE_RUN_DIR.
#               The mounts stay (daemons started inside need them): `umount` when done.
#   purge       umount, then delete the chroot (refuses while anything is mounted inside it)
#
# Examples (from the repository, as root):
#   bash testbed/trixie.sh ensure
#   bash testbed/trixie.sh run bash testbed/up.sh          # the 24.11 bed, up.sh's TALLY_* apply
#   bash testbed/trixie.sh run squeue
#   bash testbed/trixie.sh run bash testbed/down.sh
#   bash testbed/trixie.sh umount
# Never `rm -rf` the chroot while it is mounted (it would descend into /dev and the
# repository): use `purge`.
#
# Environment:
#   TALLY_TRIXIE_ROOT     the chroot (default /var/tmp/tally-trixie)
#   TALLY_TRIXIE_MIRROR   Debian mirror for debootstrap (default http://deb.debian.org/debian)
#   TALLY_TRIXIE_BIND     more host dirs to mount at the same path inside, space-separated
#                         (e.g. a CARGO_TARGET_DIR outside the repository)
#   TALLY_TRIXIE_RUN_DIR  the bed's run dir inside the chroot, passed as TALLY_RUN_DIR
#                         (default /var/tmp/tally-testbed-24.11; on the host it is
#                         $TALLY_TRIXIE_ROOT/var/tmp/tally-testbed-24.11)
set -euo pipefail
# shellcheck source=testbed/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

REPO=$(cd "$TB_DIR/.." && pwd -P)
CHROOT=${TALLY_TRIXIE_ROOT:-/var/tmp/tally-trixie}
MIRROR=${TALLY_TRIXIE_MIRROR:-http://deb.debian.org/debian}
BINDS=${TALLY_TRIXIE_BIND:-}
INNER_RUN_DIR=${TALLY_TRIXIE_RUN_DIR:-/var/tmp/tally-testbed-24.11}
INNER_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
MOUNTS_FILE=.tally-trixie-mounts    # in the chroot: what `mount` mounted, one path a line

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

# ---- the chroot's path: never the host's root, nor one of its big folders ------------------------
check_root_path() {
    [[ $CHROOT == /* ]] || die "TALLY_TRIXIE_ROOT must be an absolute path, got '$CHROOT'"
    [[ $CHROOT != *[[:space:]\\]* ]] || die "TALLY_TRIXIE_ROOT must not contain blanks or backslashes: '$CHROOT'"
    CHROOT=$(realpath -m -- "$CHROOT")
    local depth
    depth=$(tr -cd / <<<"$CHROOT" | wc -c)
    if [[ $CHROOT == / ]] || (( depth < 2 )); then
        die "TALLY_TRIXIE_ROOT must be at least two levels below / (e.g. /var/tmp/tally-trixie), got '$CHROOT'"
    fi
    [[ $REPO/ != "$CHROOT"/* ]] || die "TALLY_TRIXIE_ROOT must not contain the repository: '$CHROOT'"
    [[ $INNER_RUN_DIR == /* && $INNER_RUN_DIR != / ]] \
        || die "TALLY_TRIXIE_RUN_DIR must be an absolute path, got '$INNER_RUN_DIR'"
}

# is_mounted <path>: <path> is a mount point (in /proc/self/mountinfo).
is_mounted() { awk -v p="$1" '$5 == p { f = 1 } END { exit !f }' /proc/self/mountinfo; }

# mounts_inside: every mount point under the chroot, deepest first.
mounts_inside() { awk -v p="$CHROOT/" 'index($5, p) == 1 { print $5 }' /proc/self/mountinfo | sort -r; }

# procs_inside: pids of the processes whose root directory is the chroot.
procs_inside() {
    local id p
    id=$(stat -L -c %d:%i "$CHROOT/" 2>/dev/null) || return 0
    for p in /proc/[0-9]*; do
        [[ $(stat -L -c %d:%i "$p/root/" 2>/dev/null) == "$id" ]] && echo "${p#/proc/}"
    done
    return 0
}

is_trixie() {
    [[ -x $CHROOT/usr/bin/apt-get && ! -e $CHROOT/debootstrap ]] \
        && grep -qx 'VERSION_ID="13"' "$CHROOT/etc/os-release" 2>/dev/null
}

lock() {   # one mount/umount/ensure at a time on this chroot
    mkdir -p "$(dirname "$CHROOT")"
    exec 9>>"$CHROOT.lock"
    flock -w 120 9 || die "another trixie.sh holds $CHROOT.lock"
}

# ---- mount / umount ------------------------------------------------------------------------------
# mnt <target-inside> <mount args...>: mount unless mounted, made private (no propagation to the
# host's mounts), recorded in the mounts file.
mnt() {
    local inside=$1 at=$CHROOT$1; shift
    is_mounted "$at" && return 0
    mkdir -p "$at"
    mount "$@" "$at" || die "mount $* $at failed"
    mount --make-private "$at"
    grep -qxF -- "$inside" "$CHROOT/$MOUNTS_FILE" 2>/dev/null || echo "$inside" >>"$CHROOT/$MOUNTS_FILE"
}

do_mount() {
    is_trixie || die "no trixie chroot at $CHROOT (run: bash testbed/trixie.sh ensure)"
    local d
    mnt /proc -t proc -o nosuid,nodev,noexec proc
    mnt /sys -t sysfs -o ro,nosuid,nodev,noexec sysfs
    mnt /dev --bind /dev
    mnt /dev/pts --bind /dev/pts
    mnt /dev/shm -t tmpfs -o nosuid,nodev,mode=1777 tmpfs
    mnt "$REPO" --bind "$REPO"
    for d in $BINDS; do
        [[ $d == /* && -d $d ]] || die "TALLY_TRIXIE_BIND: not an absolute path of a directory: '$d'"
        d=$(realpath -- "$d")
        [[ $d != / && $d/ != "$CHROOT"/* && $CHROOT/ != "$d"/* ]] || die "TALLY_TRIXIE_BIND: cannot bind '$d'"
        mnt "$d" --bind "$d"
    done
}

do_umount() {
    [[ -d $CHROOT ]] || return 0
    local -a procs paths
    mapfile -t procs < <(procs_inside)
    if (( ${#procs[@]} )); then
        ps -o pid=,args= -p "$(IFS=,; echo "${procs[*]}")" >&2 || true
        die "processes run inside $CHROOT (above): not unmounting (bring the bed down: bash testbed/trixie.sh run bash testbed/down.sh)"
    fi
    # What we mounted (the mounts file), deepest first; only paths under the chroot.
    [[ -f $CHROOT/$MOUNTS_FILE ]] || return 0
    mapfile -t paths < <(sort -ru "$CHROOT/$MOUNTS_FILE")
    local p n=0
    for p in "${paths[@]}"; do
        [[ $p == /* && $p != *..* ]] || continue
        if is_mounted "$CHROOT$p"; then
            umount "$CHROOT$p" || die "umount $CHROOT$p failed"
            n=$(( n + 1 ))
        fi
    done
    rm -f "${CHROOT:?}/$MOUNTS_FILE"
    (( n == 0 )) || log "trixie: unmounted $n mount(s) under $CHROOT"
}

# ---- run inside ----------------------------------------------------------------------------------
# in_chroot CMD...: CMD inside the (mounted) chroot, in the repository, with a chosen environment.
in_chroot() {
    local -a envs=(PATH="$INNER_PATH" HOME=/root LANG=C.UTF-8 TALLY_RUN_DIR="$INNER_RUN_DIR")
    local v
    for v in TERM RUST_BACKTRACE RUST_LOG; do
        [[ -n ${!v:-} ]] && envs+=("$v=${!v}")
    done
    for v in $(compgen -e); do
        [[ $v == TALLY_* && $v != TALLY_TRIXIE_* && $v != TALLY_RUN_DIR ]] && envs+=("$v=${!v}")
    done
    chroot "$CHROOT" /usr/bin/env -i -C "$REPO" "${envs[@]}" "$@"
}

# ---- ensure --------------------------------------------------------------------------------------
apt_host() {   # apt_host <package>: install on the host (refreshing the lists once if needed)
    apt-get install -y -qq --no-install-recommends "$1" >/dev/null 2>&1 && return 0
    apt-get update -qq || warn "apt-get update reported errors"
    apt-get install -y -qq --no-install-recommends "$1" || die "cannot install $1 on the host"
}

do_ensure() {
    local t0 t out was_mounted=0
    t0=$(now)
    if ! command -v debootstrap >/dev/null; then
        t=$(now); log "trixie: installing debootstrap on the host"
        apt_host debootstrap
        log "trixie: debootstrap installed [$(elapsed "$t")s]"
    fi
    if ! is_trixie; then
        if [[ -e $CHROOT && -n $(ls -A "$CHROOT" 2>/dev/null) ]]; then
            die "$CHROOT exists but is not a finished trixie chroot (an interrupted debootstrap?): remove it (bash testbed/trixie.sh purge) and run ensure again"
        fi
        t=$(now); log "trixie: debootstrap --variant=minbase trixie $CHROOT $MIRROR"
        out=$(mktemp)
        if ! debootstrap --variant=minbase trixie "$CHROOT" "$MIRROR" >"$out" 2>&1; then
            tail -n 30 "$out" >&2; rm -f "$out"
            die "debootstrap failed (the partial chroot is left at $CHROOT: bash testbed/trixie.sh purge)"
        fi
        rm -f "$out"
        log "trixie: debootstrap done [$(elapsed "$t")s]"
    fi
    # Package scripts must not start daemons in the chroot (the bed starts its own).
    if [[ ! -e $CHROOT/usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\n# Written by testbed/trixie.sh of Tally: no daemon starts from packages.\nexit 101\n' \
            >"$CHROOT/usr/sbin/policy-rc.d"
        chmod 0755 "$CHROOT/usr/sbin/policy-rc.d"
    fi
    [[ -s $CHROOT/etc/hosts ]] || cp /etc/hosts "$CHROOT/etc/hosts"
    cp -L /etc/resolv.conf "$CHROOT/etc/resolv.conf" 2>/dev/null || true   # for apt inside
    is_mounted "$CHROOT$REPO" && was_mounted=1
    do_mount
    t=$(now)
    in_chroot bash testbed/install.sh || die "testbed/install.sh failed inside $CHROOT"
    (( was_mounted )) || do_umount
    # shellcheck disable=SC2016
    log "trixie: ensure done: $CHROOT ($(chroot "$CHROOT" dpkg-query -W -f='slurmctld ${Version}' slurmctld)) [$(elapsed "$t0")s]"
}

# ---- main ----------------------------------------------------------------------------------------
cmd=${1:-}
(( $# )) && shift
case $cmd in
    -h|--help|help) usage; exit 0 ;;
    '') usage >&2; exit 2 ;;
esac
[[ $(id -u) == 0 ]] || die "trixie.sh must run as root"
check_root_path
case $cmd in
    ensure) lock; do_ensure ;;
    mount)  lock; do_mount ;;
    umount) [[ -d $CHROOT ]] || exit 0; lock; do_umount ;;
    run)
        (( $# )) || die "usage: trixie.sh run CMD [args...]"
        (lock; do_mount)
        in_chroot "$@" ;;
    purge)
        [[ -e $CHROOT ]] || exit 0
        lock
        do_umount
        left=$(mounts_inside)
        [[ -z $left ]] || die "still mounted under $CHROOT, not deleting:"$'\n'"$left"
        log "trixie: deleting $CHROOT"
        rm -rf --one-file-system -- "$CHROOT"
        rm -f -- "$CHROOT.lock" ;;
    *) die "unknown command: $cmd (ensure, mount, umount, run, purge; --help)" ;;
esac
