#!/usr/bin/env bash
# Install or remove Tally's Debian package for the test bed, for real (dpkg),
# on the host or inside the Debian 13 chroot of testbed/trixie.sh:
#
#   bash testbed/deb.sh install <deb> [<chroot>]
#   bash testbed/deb.sh remove  <deb> [<chroot>]
#
# install: dpkg -i (its Depends on the exact slurmctld release are checked
# by dpkg); the bed then loads the plugins from Slurm's own PluginDir
# (TALLY_PLUGIN_DIR empty). remove: dpkg -r, then checks that the package
# is gone and that none of its files is left.
set -euo pipefail
# shellcheck source=testbed/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

cmd=${1:-} deb=${2:-} root=${3:-}
[[ ($cmd == install || $cmd == remove) && -f $deb ]] || die "usage: testbed/deb.sh install|remove <deb> [<chroot>]"
pkg=$(dpkg-deb -f "$deb" Package)
in_root() { if [[ -n $root ]]; then chroot "$root" "$@"; else "$@"; fi; }

case $cmd in
install)
    staged=$deb
    if [[ -n $root ]]; then
        staged=/tmp/$(basename "$deb")
        cp "$deb" "$root$staged"
    fi
    in_root dpkg -i "$staged" >/dev/null || die "dpkg -i $(basename "$deb") failed${root:+ in $root}"
    [[ -z $root ]] || rm -f "$root$staged"
    log "deb: $pkg $(dpkg-deb -f "$deb" Version) installed${root:+ in $root} ($(dpkg-deb -f "$deb" Depends | grep -o 'slurmctld[^,]*' | head -n1)...)"
    ;;
remove)
    in_root dpkg -r "$pkg" >/dev/null || die "dpkg -r $pkg failed${root:+ in $root}"
    # shellcheck disable=SC2016 # (dpkg-query's format, not the shell's)
    status=$(in_root dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
    [[ -z $status || $status == not-installed || $status == config-files ]] || die "$pkg still $status after dpkg -r"
    [[ $status != config-files ]] || die "$pkg left config files after dpkg -r"
    left=()
    while read -r path; do
        path=${path#.}
        [[ -n $path && ! -d $root$path && -e $root$path ]] && left+=("$path")
    done < <(dpkg-deb -c "$deb" | awk '{ print $6 }')
    (( ${#left[@]} == 0 )) || die "$pkg removed, but its files are still there: ${left[*]}"
    log "deb: $pkg removed${root:+ from $root}, none of its files left"
    ;;
esac
