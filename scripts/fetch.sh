#!/usr/bin/env bash
# What `make test` needs from outside the repository, found or fetched with pinned checksums
# (docs/testbed.md, "What make test needs from outside"): SchedMD's Slurm release tarballs, which
# testbed/slurm-src.sh builds, and the public GPU traces the real-Slurm replay
# (tests/tests/replay.rs) and `make results` run. The pins are in scripts/sources.lock.
#
# Each is looked for, in this order:
#   1. the explicit variable: TALLY_SLURM_SRC (a folder with slurm-<release>.<micro>.tar.gz) or
#      TALLY_TRACES (the folder of the cluster CSVs), used as it is (not checked: it may be
#      another release or other traces on purpose);
#   2. ../shared beside the repository (slurm-src/, traces/elasticflow-itp/), an offline cache:
#      checked against the pins, byte for byte; a file there that differs is an error, never used;
#   3. the cache, $TALLY_CACHE (default ${XDG_CACHE_HOME:-$HOME/.cache}/tally): checked (an entry
#      that fails its check is removed and fetched again);
#   4. its upstream address (GitHub, at a pinned commit), downloaded (curl, else wget) into the
#      cache and checked before it is kept; unless TALLY_FETCH=0.
# When none has it: one line saying what is missing, where it was looked for, how to provide it.
#
# Pins. A Slurm tarball in ../shared is SchedMD's `git archive` of the release tag: its sha256 is
# pinned. A download is GitHub's archive of the tag's commit, whose bytes GitHub does not promise
# to keep: what is pinned is its tree, the sha256 of the sorted lines `<sha256>  <path>` of its
# regular files, `executable <path>` of those with the owner's x bit and `symlink <path> -> <target>`
# of its symlinks, paths below the archive's top folder. The download is repacked as
# slurm-<version>.tar.gz with the top folder slurm-<version>/ (the layout of ../shared's), a
# sidecar slurm-<version>.tar.gz.sha256 beside it ("<tarball sha256> <tree sha256>"). The traces:
# each file's sha256 (the CSVs are the members of the upstream archive with those checksums).
#
# Usage:
#   fetch.sh check                every pin of scripts/sources.lock found or fetched, one line each
#                                 on stderr; exits 1 with one line per missing thing. `make test`
#                                 runs it first (seconds when ../shared or the cache has all).
#   fetch.sh ensure NAME          NAME (slurm-25.11, slurm-26.05, any slurm-<release> with
#                                 TALLY_SLURM_SRC, or traces) found or fetched; its path on stdout:
#                                 the tarball, or the traces' folder
#   fetch.sh tree-sha256 TARBALL  the tree pin of a source tarball (to pin a new release)
#
# Environment:
#   TALLY_SLURM_SRC, TALLY_TRACES   as above
#   TALLY_CACHE           the cache (default ${XDG_CACHE_HOME:-$HOME/.cache}/tally)
#   TALLY_FETCH=0         never download (the lookup stops at the cache)
#   TALLY_FETCH_MANIFEST  another manifest than scripts/sources.lock (tests)
#   TALLY_FETCH_BASE_URL  replaces the scheme and host of the manifest's addresses (tests: a local
#                         HTTP server)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MANIFEST=${TALLY_FETCH_MANIFEST:-$ROOT/scripts/sources.lock}
SHARED=$(cd "$ROOT/.." && pwd)/shared
# The cache; none without a home (nor TALLY_CACHE, XDG_CACHE_HOME): then nothing is kept.
CACHE=${TALLY_CACHE:-${XDG_CACHE_HOME:-${HOME:+$HOME/.cache}}}
[[ -n $CACHE && -z ${TALLY_CACHE:-} ]] && CACHE=$CACHE/tally
FETCH=${TALLY_FETCH:-1}
# A download failed for want of a network: the next ones are not tried (`check` stays fast).
NET_DOWN=
# Temporary folders, removed on exit (also when set -e stops the script).
CLEAN=()
trap 'rm -rf "${CLEAN[@]}"' EXIT
# What a lookup found (its path), or why it found nothing (one line).
FOUND=
MISSING=

log() { echo "fetch.sh: $*" >&2; }
die() { echo "fetch.sh: $*" >&2; exit 1; }

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

sha256() { sha256sum -- "$1" | cut -c1-64; }

# A path as the messages show it: the home folder as ~.
shown() {
    local p=$1
    [[ -n ${HOME:-} && $HOME != / ]] && p=${p/#$HOME\//\~/}
    echo "$p"
}

# lock DIR: make the cache's folder DIR; one fetch.sh at a time writes the cache (entries are
# renamed into place, so readers need no lock). 1 when DIR cannot be made.
LOCKED=
lock() {
    mkdir -p "$1" 2>/dev/null || return 1
    [[ -n $LOCKED ]] && return 0
    exec 8>>"$CACHE/.lock" || return 1
    flock 8
    LOCKED=1
}

# ---- the manifest ---------------------------------------------------------------------------
# Lines (# comments):
#   slurm RELEASE VERSION COMMIT TARBALL_SHA256 TREE_SHA256 URL
#   traces-archive URL
#   traces NAME SHA256 [URL]     (no URL: a member of the traces-archive, found by its checksum)
declare -A SLURM_VERSION=() SLURM_COMMIT=() SLURM_TARBALL=() SLURM_TREE=() SLURM_URL=() TRACE_SHA=() TRACE_URL=()
declare -a SLURM_RELEASES=() TRACE_NAMES=()
TRACES_ARCHIVE=
read_manifest() {
    local kind a b c d e f rest lineno=0
    [[ -r $MANIFEST ]] || die "the manifest $MANIFEST is missing"
    while read -r kind a b c d e f rest || [[ -n ${kind:-} ]]; do
        lineno=$((lineno + 1))
        [[ -z ${kind:-} || $kind == \#* ]] && continue
        case $kind in
            slurm)
                [[ -n ${f:-} && -z ${rest:-} && $d =~ ^[0-9a-f]{64}$ && $e =~ ^[0-9a-f]{64}$ ]] ||
                    die "$MANIFEST:$lineno: expected 'slurm RELEASE VERSION COMMIT TARBALL_SHA256 TREE_SHA256 URL'"
                SLURM_RELEASES+=("$a"); SLURM_VERSION[$a]=$b; SLURM_COMMIT[$a]=$c
                SLURM_TARBALL[$a]=$d; SLURM_TREE[$a]=$e; SLURM_URL[$a]=$f ;;
            traces-archive)
                [[ -n ${a:-} && -z ${b:-} ]] || die "$MANIFEST:$lineno: expected 'traces-archive URL'"
                TRACES_ARCHIVE=$a ;;
            traces)
                [[ $a =~ ^[A-Za-z0-9._-]+$ && ${b:-} =~ ^[0-9a-f]{64}$ && -z ${d:-} ]] ||
                    die "$MANIFEST:$lineno: expected 'traces NAME SHA256 [URL]'"
                TRACE_NAMES+=("$a"); TRACE_SHA[$a]=$b; TRACE_URL[$a]=${c:-} ;;
            *) die "$MANIFEST:$lineno: unknown kind '$kind' (slurm, traces-archive, traces)" ;;
        esac
    done <"$MANIFEST"
}

# ---- downloads ------------------------------------------------------------------------------
# url URL: the address to download, TALLY_FETCH_BASE_URL in place of its scheme and host.
url() {
    local u=$1 path
    if [[ -n ${TALLY_FETCH_BASE_URL:-} ]]; then
        path=${u#*://}; path=${path#*/}
        u=${TALLY_FETCH_BASE_URL%/}/$path
    fi
    echo "$u"
}

# download URL OUT: OUT is URL's bytes; on failure 1 and MISSING's reason in DL_ERR.
DL_ERR=
download() {
    local u=$1 out=$2 rc=0 err proto='=https'
    # Plain http only from the tests' local server.
    [[ -n ${TALLY_FETCH_BASE_URL:-} ]] && proto='=https,http'
    if [[ -n $NET_DOWN ]]; then DL_ERR="no download tried, since $NET_DOWN"; return 1; fi
    log "downloading $u"
    if command -v curl >/dev/null; then
        err=$(curl -fsSL --proto "$proto" --proto-redir "$proto" --connect-timeout 10 --retry 2 --retry-delay 1 \
                   --speed-limit 1024 --speed-time 60 -o "$out" -- "$u" 2>&1) || rc=$?
        (( rc == 0 )) && return 0
        err=${err//$'\n'/ }
        DL_ERR="downloading $u failed: ${err:-curl exit $rc}"
        # 5: proxy, 6: host, 7: connection, 28: time-out, 35: TLS: the network, not this address.
        case $rc in 5|6|7|28|35) NET_DOWN="a download failed ($err)" ;; esac
    elif command -v wget >/dev/null; then
        # (Debian's standard system has wget, not always curl.)
        err=$(wget -nv --timeout=10 --tries=3 -O "$out" -- "$u" 2>&1) || rc=$?
        (( rc == 0 )) && return 0
        err=${err//$'\n'/ }
        DL_ERR="downloading $u failed: ${err:-wget exit $rc}"
        # 4: the network.
        (( rc == 4 )) && NET_DOWN="a download failed ($err)"
    else
        DL_ERR="neither curl nor wget is installed (apt-get install curl)"
    fi
    return 1
}

# ---- trees ----------------------------------------------------------------------------------
# tree_of DIR: the tree pin of the files below DIR (see the header).
tree_of() {
    (
        cd "$1"
        {
            find . -type f -printf '%P\0' | LC_ALL=C sort -z | xargs -0 -r sha256sum --
            find . -type f -perm -u+x -printf 'executable %P\n'
            find . -type l -printf 'symlink %P -> %l\n'
        } | LC_ALL=C sort | sha256sum | cut -c1-64
    )
}

# unpack TARBALL DIR: TARBALL's one top folder, unpacked below DIR; its path in TOP.
TOP=
unpack() {
    local -a tops
    tar -xzf "$1" -C "$2" --no-same-owner 2>/dev/null || return 1
    mapfile -t tops < <(find "$2" -mindepth 1 -maxdepth 1)
    (( ${#tops[@]} == 1 )) && [[ -d ${tops[0]} && ! -L ${tops[0]} ]] || return 1
    TOP=${tops[0]}
}

# tree_of_tarball TARBALL: the tree pin of a tarball with one top folder.
tree_of_tarball() {
    local tmp sum
    tmp=$(mktemp -d)
    CLEAN+=("$tmp")
    if ! unpack "$1" "$tmp"; then rm -rf "$tmp"; return 1; fi
    sum=$(tree_of "$TOP")
    rm -rf "$tmp"
    echo "$sum"
}

# ---- Slurm's sources ------------------------------------------------------------------------
# find_slurm RELEASE: FOUND is the tarball, or MISSING says why. (Called as a plain command, so
# that set -e stops the script on an unexpected error, such as a full disk.)
find_slurm() {
    local release=$1 version name shared cached side tree sum tmp u rc=0
    local -a found
    FOUND=; MISSING=
    if [[ -n ${TALLY_SLURM_SRC:-} ]]; then
        # As given: exactly one slurm-<release>.<micro>.tar.gz there.
        if [[ ! -d $TALLY_SLURM_SRC ]]; then
            MISSING="Slurm $release's source: TALLY_SLURM_SRC=$TALLY_SLURM_SRC is no folder (unset it to use ../shared, the cache or the pinned download)"
            return 0
        fi
        mapfile -t found < <(find "$TALLY_SLURM_SRC" -maxdepth 1 -name "slurm-$release.*.tar.gz" | sort)
        if (( ${#found[@]} != 1 )); then
            MISSING="Slurm $release's source: expected one slurm-$release.<micro>.tar.gz in TALLY_SLURM_SRC=$TALLY_SLURM_SRC, found ${#found[@]}: ${found[*]:-none}"
            return 0
        fi
        FOUND=${found[0]}
        return 0
    fi
    if [[ -z ${SLURM_VERSION[$release]:-} ]]; then
        MISSING="Slurm $release's source: no pin for it in $MANIFEST (pinned: ${SLURM_RELEASES[*]:-none}); set TALLY_SLURM_SRC to a folder with slurm-$release.<micro>.tar.gz"
        return 0
    fi
    version=${SLURM_VERSION[$release]}
    name=slurm-$version.tar.gz

    # 2. ../shared: SchedMD's git archive, byte for byte.
    shared=$SHARED/slurm-src/$name
    if [[ -e $shared ]]; then
        sum=$(sha256 "$shared") || { MISSING="$shared cannot be read"; return 0; }
        if [[ $sum != "${SLURM_TARBALL[$release]}" ]]; then
            MISSING="$shared has sha256 $sum, not the pinned ${SLURM_TARBALL[$release]} ($MANIFEST): replace it with SchedMD's $name, or remove it (the pinned commit is then fetched)"
            return 0
        fi
        FOUND=$(cd "$(dirname "$shared")" && pwd)/$name
        return 0
    fi

    # 3. The cache: the sidecar names the tarball's sha256 and the tree it was checked against.
    cached=$CACHE/slurm-src/$name
    side=$cached.sha256
    if [[ -n $CACHE && -f $cached ]]; then
        sum=$(sha256 "$cached")
        if [[ -f $side && $(cat "$side") == "$sum ${SLURM_TREE[$release]}" ]]; then
            FOUND=$cached
            return 0
        fi
        # No sidecar (a tarball put there by hand), or one of another tarball: check the tree.
        tree=$(tree_of_tarball "$cached" || true)
        if [[ $tree == "${SLURM_TREE[$release]}" ]]; then
            echo "$sum $tree" >"$side.tmp" && mv -f "$side.tmp" "$side"
            FOUND=$cached
            return 0
        fi
        log "$(shown "$cached") is not the pinned tree (${tree:-unreadable}): removed, fetched again"
        rm -f "$cached" "$side"
    fi

    # 4. The download: GitHub's archive of the pinned commit, checked, repacked.
    u=$(url "${SLURM_URL[$release]}")
    local how="put SchedMD's $name in ../shared/slurm-src ($SHARED/slurm-src)${CACHE:+ or $(shown "$CACHE/slurm-src")}, or set TALLY_SLURM_SRC to a folder with it"
    local where="not in ../shared/slurm-src, not in the cache${CACHE:+ $(shown "$CACHE/slurm-src")}"
    if [[ $FETCH == 0 ]]; then
        MISSING="Slurm $version's source ($name) is missing: $where, and TALLY_FETCH=0 forbids downloading $u; $how"
        return 0
    fi
    if [[ -z $CACHE ]] || ! lock "$CACHE/slurm-src"; then
        MISSING="Slurm $version's source ($name) is missing: $where, and there is no cache to download $u into (${CACHE:-HOME unset}: set TALLY_CACHE to a writable folder); $how"
        return 0
    fi
    tmp=$(mktemp -d "$CACHE/slurm-src/.fetch.XXXXXX")
    CLEAN+=("$tmp")
    if ! download "$u" "$tmp/download.tar.gz"; then
        rm -rf "$tmp"
        MISSING="Slurm $version's source ($name) is missing: $where, and $DL_ERR; $how, or let this machine reach $u"
        return 0
    fi
    mkdir "$tmp/x"
    if ! unpack "$tmp/download.tar.gz" "$tmp/x"; then
        rm -rf "$tmp"
        MISSING="Slurm $version's source: $u is no tarball with one top folder; $how"
        return 0
    fi
    tree=$(tree_of "$TOP")
    if [[ $tree != "${SLURM_TREE[$release]}" ]]; then
        rm -rf "$tmp"
        MISSING="Slurm $version's source: the tree of $u has sha256 $tree, not the pinned ${SLURM_TREE[$release]} ($MANIFEST): nothing kept; $how"
        return 0
    fi
    mv "$TOP" "$tmp/slurm-$version"
    # Repacked the same way every time: names sorted, owner root, modes without the umask.
    tar --sort=name --format=gnu --owner=0 --group=0 --numeric-owner --mode='u+rwX,go+rX,go-w' \
        -C "$tmp" -cf - "slurm-$version" | gzip -n >"$tmp/$name" || rc=$?
    if (( rc != 0 )); then
        rm -rf "$tmp"
        MISSING="Slurm $version's source: repacking $u into $(shown "$CACHE/slurm-src") failed (disk full?)"
        return 0
    fi
    echo "$(sha256 "$tmp/$name") $tree" >"$tmp/$name.sha256"
    mv -f "$tmp/$name" "$cached"
    mv -f "$tmp/$name.sha256" "$side"
    rm -rf "$tmp"
    log "Slurm $version: $u (commit ${SLURM_COMMIT[$release]}) checked (tree $tree) and kept as $(shown "$cached")"
    FOUND=$cached
}

# ---- the traces -----------------------------------------------------------------------------
# traces_differ DIR: the pinned files DIR lacks or that differ, one "NAME (why)" a line.
traces_differ() {
    local n sum
    for n in "${TRACE_NAMES[@]}"; do
        if [[ ! -f $1/$n ]]; then
            echo "$n (missing)"
        else
            sum=$(sha256 "$1/$n")
            [[ $sum == "${TRACE_SHA[$n]}" ]] || echo "$n (sha256 $sum, pinned ${TRACE_SHA[$n]})"
        fi
    done
}

# find_traces: FOUND is the folder of the traces, or MISSING says why (as find_slurm).
find_traces() {
    local shared cached bad tmp u n sum f
    local -a wrong
    FOUND=; MISSING=
    if [[ -n ${TALLY_TRACES:-} ]]; then
        if [[ ! -d $TALLY_TRACES ]]; then
            MISSING="the GPU traces: TALLY_TRACES=$TALLY_TRACES is no folder (unset it to use ../shared, the cache or the pinned download)"
            return 0
        fi
        FOUND=$(cd "$TALLY_TRACES" && pwd)
        return 0
    fi
    (( ${#TRACE_NAMES[@]} )) || { MISSING="the GPU traces: $MANIFEST pins none"; return 0; }

    # 2. ../shared: every pinned file, byte for byte.
    shared=$SHARED/traces/elasticflow-itp
    if [[ -d $shared ]]; then
        bad=$(traces_differ "$shared")
        if [[ -n $bad ]]; then
            MISSING="$shared is not the pinned traces ($MANIFEST): ${bad//$'\n'/, }; fix or remove it (the pinned files are then fetched)"
            return 0
        fi
        FOUND=$(cd "$shared" && pwd)
        return 0
    fi

    # 3. The cache.
    cached=$CACHE/traces/elasticflow-itp
    if [[ -n $CACHE && -d $cached ]]; then
        bad=$(traces_differ "$cached")
        if [[ -z $bad ]]; then
            FOUND=$cached
            return 0
        fi
        log "$(shown "$cached") is not the pinned traces (${bad//$'\n'/, }): removed, fetched again"
        rm -rf "$cached"
    fi

    # 4. The download: the archive's members matched by checksum, the other files one by one.
    local how="put the pinned files (${TRACE_NAMES[*]}) in ../shared/traces/elasticflow-itp ($SHARED/traces/elasticflow-itp)${CACHE:+ or $(shown "$cached")}, or set TALLY_TRACES to a folder of the cluster CSVs"
    local where="not in ../shared/traces/elasticflow-itp, not in the cache${CACHE:+ $(shown "$cached")}"
    if [[ $FETCH == 0 ]]; then
        MISSING="the GPU traces are missing: $where, and TALLY_FETCH=0 forbids downloading them; $how"
        return 0
    fi
    if [[ -z $CACHE ]] || ! lock "$CACHE/traces"; then
        MISSING="the GPU traces are missing: $where, and there is no cache to download them into (${CACHE:-HOME unset}: set TALLY_CACHE to a writable folder); $how"
        return 0
    fi
    tmp=$(mktemp -d "$CACHE/traces/.fetch.XXXXXX")
    CLEAN+=("$tmp")
    mkdir "$tmp/out" "$tmp/x"
    if [[ -n $TRACES_ARCHIVE ]]; then
        u=$(url "$TRACES_ARCHIVE")
        if ! download "$u" "$tmp/archive.tar.gz"; then
            rm -rf "$tmp"
            MISSING="the GPU traces are missing: $where, and $DL_ERR; $how, or let this machine reach $u"
            return 0
        fi
        if ! tar -xzf "$tmp/archive.tar.gz" -C "$tmp/x" --no-same-owner 2>/dev/null; then
            rm -rf "$tmp"
            MISSING="the GPU traces: $u is no tar.gz archive; $how"
            return 0
        fi
        # Each member whose checksum is pinned, under the pinned name.
        while IFS= read -r -d '' f; do
            sum=$(sha256 "$f")
            for n in "${TRACE_NAMES[@]}"; do
                if [[ -z ${TRACE_URL[$n]} && ${TRACE_SHA[$n]} == "$sum" ]]; then
                    cp -- "$f" "$tmp/out/$n"
                fi
            done
        done < <(find "$tmp/x" -type f -print0)
    fi
    for n in "${TRACE_NAMES[@]}"; do
        [[ -n ${TRACE_URL[$n]} ]] || continue
        u=$(url "${TRACE_URL[$n]}")
        if ! download "$u" "$tmp/out/$n"; then
            rm -rf "$tmp"
            MISSING="the GPU traces are missing: $where, and $DL_ERR; $how, or let this machine reach $u"
            return 0
        fi
    done
    mapfile -t wrong < <(traces_differ "$tmp/out")
    if (( ${#wrong[@]} )); then
        rm -rf "$tmp"
        MISSING="the GPU traces: the download has no file with the pinned sha256 ($MANIFEST) for ${wrong[*]}: nothing kept; $how"
        return 0
    fi
    # SHA256SUMS as ../shared's folder has it: the archive's files.
    for n in "${TRACE_NAMES[@]}"; do
        [[ -n ${TRACE_URL[$n]} ]] || echo "${TRACE_SHA[$n]}  $n"
    done >"$tmp/out/SHA256SUMS"
    chmod 0644 "$tmp/out"/*
    rm -rf "$cached"
    mv "$tmp/out" "$cached"
    rm -rf "$tmp"
    log "the GPU traces: checked and kept in $(shown "$cached")"
    FOUND=$cached
}

# ---- commands -------------------------------------------------------------------------------
# find_thing NAME: find_slurm or find_traces by the name `ensure` takes.
find_thing() {
    case $1 in
        slurm-*) find_slurm "${1#slurm-}" ;;
        traces) find_traces ;;
        *) die "ensure: expected slurm-<release> (pinned: ${SLURM_RELEASES[*]/#/slurm-}) or traces, got '$1'" ;;
    esac
}

cmd=${1:-}
case $cmd in
    ensure)
        [[ $# == 2 ]] || die "usage: fetch.sh ensure slurm-<release>|traces"
        read_manifest
        find_thing "$2"
        [[ -z $MISSING ]] || die "$MISSING"
        echo "$FOUND"
        ;;
    check)
        [[ $# == 1 ]] || die "usage: fetch.sh check"
        read_manifest
        status=0
        for thing in "${SLURM_RELEASES[@]/#/slurm-}" traces; do
            find_thing "$thing"
            if [[ -z $MISSING ]]; then
                log "$thing: $(shown "$FOUND")"
            else
                echo "fetch.sh: $MISSING" >&2
                status=1
            fi
        done
        exit "$status"
        ;;
    tree-sha256)
        [[ $# == 2 && -f $2 ]] || die "usage: fetch.sh tree-sha256 TARBALL"
        tree_of_tarball "$2" || die "$2: not a tar.gz with one top folder"
        ;;
    -h|--help) usage ;;
    *) usage >&2; die "expected check, ensure or tree-sha256, got '${cmd}'" ;;
esac
