#!/usr/bin/env bash
# The `plugin_version` a built Slurm plugin carries, read from the file with binutils.
#
#   scripts/plugin-version.sh FILE.so...                   print FILE: 0x160508 (Slurm 22.05.8)
#   scripts/plugin-version.sh --header H FILE.so...        also fail unless each equals
#                                                          SLURM_VERSION_NUMBER of header H
#
# slurmctld refuses a plugin whose plugin_version is not exactly its own
# SLURM_VERSION_NUMBER (major, minor and micro: src/common/plugin.c masks with
# 0xffffff for every plugin type but SPANK), so a plugin is only good for the
# one Slurm release its headers came from. Used by `make install`, `make deb`
# and scripts/deb-check.sh.
set -euo pipefail

die() { echo "plugin-version.sh: $*" >&2; exit 1; }

# dotted 0x160508 -> 22.05.8
dotted() { printf '%d.%02d.%d' $(( ($1 >> 16) & 0xff )) $(( ($1 >> 8) & 0xff )) $(( $1 & 0xff )); }

# shellcheck source=scripts/deb-target.sh
source "$(dirname "${BASH_SOURCE[0]}")/deb-target.sh"

# header_version FILE: SLURM_VERSION_NUMBER of a slurm_version.h, as 0x......
header_version() {
    [[ -r $1 ]] || die "cannot read $1 (libslurm-dev's slurm/slurm_version.h)"
    header_release "$1" || die "$1 has no '#define SLURM_VERSION_NUMBER'"
    echo "$HDR_HEX"
}

# plugin_version FILE: the 4-byte object `plugin_version` of a shared object, as 0x......
plugin_version() {
    local f=$1 addr size type ndx sec hex
    [[ -r $f ]] || die "cannot read $f"
    for tool in readelf objdump; do
        command -v "$tool" >/dev/null || die "$tool not found (install binutils)"
    done
    read -r addr size type ndx < <(readelf -W --dyn-syms "$f" | awk '$8 == "plugin_version" { print $2, $3, $4, $7; exit }') ||
        die "$f exports no symbol plugin_version: not a Slurm plugin"
    [[ $type == OBJECT && $size == 4 ]] || die "$f: plugin_version is a $size-byte $type, not a 4-byte object"
    sec=$(readelf -SW "$f" | sed -n "s/^ *\[ *$ndx\] \([^ ]*\) .*/\1/p")
    [[ -n $sec ]] || die "$f: no section $ndx for plugin_version"
    hex=$(objdump -s -j "$sec" --start-address="0x$addr" --stop-address="$(printf '0x%x' $((0x$addr + 4)))" "$f" |
          awk '/^ [0-9a-f]+ [0-9a-f]{8}/ { print $2; exit }')
    [[ $hex =~ ^[0-9a-f]{8}$ ]] || die "$f: cannot read the 4 bytes of plugin_version in $sec"
    # Little-endian (x86-64, arm64).
    printf '0x%06x' "$((16#${hex:6:2}${hex:4:2}${hex:2:2}${hex:0:2}))"
}

header=
if [[ ${1:-} == --header ]]; then
    (( $# >= 2 )) || die "--header needs a file"
    header=$2
    shift 2
fi
(( $# > 0 )) || die "usage: plugin-version.sh [--header slurm_version.h] FILE.so..."

want=
[[ -z $header ]] || want=$(header_version "$header")
bad=0
for f in "$@"; do
    got=$(plugin_version "$f")
    if [[ -n $want && $got != "$want" ]]; then
        echo "$f: plugin_version $got (Slurm $(dotted "$got")), but $header says $want (Slurm $(dotted "$want")): slurmctld $(dotted "$want") refuses this plugin; rebuild it against those headers" >&2
        bad=1
    else
        echo "$f: plugin_version $got (Slurm $(dotted "$got"))"
    fi
done
exit "$bad"
