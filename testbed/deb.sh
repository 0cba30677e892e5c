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
#
# A bed on a Slurm built from source (TALLY_SLURM_PREFIX, 25.11 and later)
# has no slurm-smd-slurmctld package for the .deb to depend on: install
# first builds and installs a stand-in package of that name at the bed's
# exact version (Maintainer "Tally test bed"), so that dpkg still checks the
# dependency range; remove takes it out again. The bed then loads the
# plugins from /usr/lib/<multiarch>/slurm, where SchedMD's packages keep
# them (TALLY_PLUGIN_DIR).
set -euo pipefail
# shellcheck source=testbed/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

cmd=${1:-} deb=${2:-} root=${3:-}
[[ ($cmd == install || $cmd == remove) && -f $deb ]] || die "usage: testbed/deb.sh install|remove <deb> [<chroot>]"
pkg=$(dpkg-deb -f "$deb" Package)
in_root() { if [[ -n $root ]]; then chroot "$root" "$@"; else "$@"; fi; }
# shellcheck source=scripts/deb-target.sh
source "$TB_DIR/../scripts/deb-target.sh"
deb_target "${pkg#tally-slurm-}"
STAND_IN_MAINTAINER='Tally test bed <root@localhost>'

# stand_in_install: the stand-in for $DEB_CTLD_PKG at the source-built bed's version.
stand_in_install() {
    [[ -n $TB_PREFIX && -z $root && $DEB_CTLD_PKG != slurmctld ]] || return 0
    dpkg-query -W -f='${db:Status-Status}' "$DEB_CTLD_PKG" 2>/dev/null | grep -qx installed && return 0
    local dir
    dir=$(mktemp -d)
    mkdir -p "$dir/pkg/DEBIAN"
    printf '%s\n' "Package: $DEB_CTLD_PKG" "Version: $TB_SLURM_VERSION-0tally" \
        "Architecture: $(dpkg --print-architecture)" "Maintainer: $STAND_IN_MAINTAINER" \
        "Description: stand-in for the test bed's Slurm $TB_SLURM_VERSION" \
        " Slurm $TB_SLURM_VERSION built from source in $TB_PREFIX by testbed/slurm-src.sh:" \
        " no package holds it, so this one stands for SchedMD's $DEB_CTLD_PKG." >"$dir/pkg/DEBIAN/control"
    dpkg-deb --root-owner-group --build "$dir/pkg" "$dir/stand-in.deb" >/dev/null
    dpkg -i "$dir/stand-in.deb" >/dev/null || die "dpkg -i of the $DEB_CTLD_PKG stand-in failed"
    rm -rf "$dir"
    log "deb: stand-in $DEB_CTLD_PKG $TB_SLURM_VERSION-0tally installed for the bed's Slurm in $TB_PREFIX"
}

# stand_in_remove: take out the stand-in, only if it is ours.
stand_in_remove() {
    [[ -z $root ]] || return 0
    [[ $(dpkg-query -W -f='${Maintainer}' "$DEB_CTLD_PKG" 2>/dev/null) == "$STAND_IN_MAINTAINER" ]] || return 0
    dpkg -r "$DEB_CTLD_PKG" >/dev/null || die "dpkg -r of the $DEB_CTLD_PKG stand-in failed"
    log "deb: stand-in $DEB_CTLD_PKG removed"
}

case $cmd in
install)
    stand_in_install
    staged=$deb
    if [[ -n $root ]]; then
        staged=/tmp/$(basename "$deb")
        cp "$deb" "$root$staged"
    fi
    in_root dpkg -i "$staged" >/dev/null || die "dpkg -i $(basename "$deb") failed${root:+ in $root}"
    [[ -z $root ]] || rm -f "$root$staged"
    log "deb: $pkg $(dpkg-deb -f "$deb" Version) installed${root:+ in $root} ($(dpkg-deb -f "$deb" Depends | grep -o "$DEB_CTLD_PKG[^,]*" | head -n1)...)"
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
    stand_in_remove
    ;;
esac
