#!/usr/bin/env bash
# Build the Debian package of Tally for one Slurm release with dpkg-deb:
# target/deb/tally-slurm-<major.minor>_<version>_<arch>.deb. `make deb` (the
# host's Slurm) and `make deb SLURM=24.11` call it after `make build plugins`.
#
#   SLURM=host|24.11|25.11|26.05 SLURM_HEADER=.../slurm/slurm_version.h bash scripts/mkdeb.sh [--path]
#
# --path: only print the path the package gets (make deb-check uses it).
#
# The release comes from SLURM_VERSION_NUMBER of the headers the plugins were
# built against, never from a name: slurmctld loads a plugin only when its
# plugin_version equals its own version exactly (major.minor.micro;
# src/common/plugin.c), so the package depends on that one slurmctld release,
# `slurmctld (>= X.Y.Z), slurmctld (<< X.Y.Z+1~)` (Debian's package for 22.05 and
# 24.11; SchedMD's `slurm-smd-slurmctld` from 25.11: scripts/deb-target.sh), and the
# packages of two releases conflict (same files). The layout is `make install`'s (PREFIX=/usr,
# stripped), with the example under /usr/share/doc: no conffiles, no
# maintainer scripts (restarting slurmctld is the admin's call).
#
# Environment: SLURM, SLURM_HEADER (required); DEB_VERSION (default: the
# workspace version), DEB_MAINTAINER, DEB_OUT (default target/deb),
# SOURCE_DATE_EPOCH (default: the last commit's time, for reproducible files).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
die() { echo "mkdeb.sh: $*" >&2; exit 1; }

: "${SLURM:?SLURM=host, 24.11, 25.11 or 26.05 (run through make deb)}"
: "${SLURM_HEADER:?SLURM_HEADER=path of the slurm_version.h the plugins were built against}"
for tool in dpkg-deb dpkg-shlibdeps dpkg-architecture gzip md5sum strip; do
    command -v "$tool" >/dev/null || die "$tool not found: apt-get install dpkg-dev"
done
[[ -r $SLURM_HEADER ]] || die "cannot read $SLURM_HEADER: the Slurm headers of SLURM=$SLURM (libslurm-dev, or testbed/trixie.sh's chroot for 24.11)"

# shellcheck source=scripts/deb-target.sh
source "$ROOT/scripts/deb-target.sh"
header_release "$SLURM_HEADER" || die "$SLURM_HEADER has no '#define SLURM_VERSION_NUMBER'"
hex=$HDR_HEX release=$HDR_RELEASE slurm=$HDR_VERSION micro=${HDR_VERSION##*.}
pkg=tally-slurm-$release
deb_target "$release"

version=${DEB_VERSION:-$(sed -n '/^\[workspace.package\]/,/^\[/ s/^version = "\(.*\)"/\1/p' "$ROOT/Cargo.toml")}
[[ $version =~ ^[0-9][A-Za-z0-9.+~-]*$ ]] || die "version '$version' is not a Debian version (set DEB_VERSION)"
maintainer=${DEB_MAINTAINER:-Tally maintainers <tally@example.invalid>}
arch=$(dpkg --print-architecture)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null)
plugindir=/usr/lib/$multiarch/$DEB_PLUGIN_SUBDIR
out=${DEB_OUT:-$ROOT/target/deb}
deb=$out/${pkg}_${version}_${arch}.deb
if [[ ${1:-} == --path ]]; then echo "$deb"; exit 0; fi
if [[ -z ${SOURCE_DATE_EPOCH:-} ]]; then
    SOURCE_DATE_EPOCH=$(git -C "$ROOT" log -1 --format=%ct 2>/dev/null || date +%s)
fi
export SOURCE_DATE_EPOCH
commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
# (sed, not head: it reads to the end, so git gets no SIGPIPE under pipefail)
first=$(git -C "$ROOT" log --reverse --format=%cd --date=format:%Y 2>/dev/null | sed -n 1p)
last=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y)
years=${first:-$last}
[[ $years == "$last" ]] || years=$years-$last
dirty=$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null | sed -n 1p)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
stage=$work/root
doc=$stage/usr/share/doc/$pkg

# 1. The files, as make install lays them out (it checks the artifacts and
#    the plugins' plugin_version against SLURM_HEADER).
make --no-print-directory -s -C "$ROOT" install SLURM="$SLURM" DESTDIR="$stage" PREFIX=/usr \
    PLUGINDIR="$plugindir" EXAMPLEDIR="/usr/share/doc/$pkg" >/dev/null
# Stripped as dh_strip does (the dynamic symbols, plugin_version among them, stay).
strip --remove-section=.comment --remove-section=.note --strip-unneeded "$stage$plugindir"/*.so
strip --remove-section=.comment --remove-section=.note "$stage/usr/bin/tally"
bash "$ROOT/scripts/plugin-version.sh" --header "$SLURM_HEADER" "$stage$plugindir"/*.so >/dev/null
find "$stage/usr/share/man" -type f -exec gzip -9n {} +

# 2. Documentation: copyright, a README pointer, the changelog.
cat >"$doc/copyright" <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: tally
Comment: Tally's Slurm plugins and the tally command, built for Slurm $slurm.
 The binaries link Rust crates statically (MIT or Apache-2.0 licensed, listed
 by \`cargo tree\` in the source) and the tally command HiGHS (MIT).

Files: *
Copyright: $years the Tally contributors
License: GPL-2.0-or-later

License: GPL-2.0-or-later
 This program is free software; you can redistribute it and/or modify it
 under the terms of the GNU General Public License as published by the Free
 Software Foundation; either version 2 of the License, or (at your option)
 any later version.
 .
 This program is distributed in the hope that it will be useful, but WITHOUT
 ANY WARRANTY; without even the implied warranty of MERCHANTABILITY or
 FITNESS FOR A PARTICULAR PURPOSE. See the GNU General Public License for
 more details.
 .
 On Debian systems, the complete text of the GNU General Public License
 version 2 can be found in /usr/share/common-licenses/GPL-2.
EOF
cat >"$doc/README.Debian" <<EOF
$pkg
$(printf '%*s' ${#pkg} '' | tr ' ' '-')

Tally's three Slurm plugins, built for Slurm $slurm and only for it
(slurmctld refuses a plugin of any other version, so this package depends
on $DEB_CTLD_PKG $slurm, $DEB_SLURM_PACKAGING), and the tally command.

  $plugindir/priority_tally.so    PriorityType=priority/tally
  $plugindir/job_submit_tally.so  JobSubmitPlugins=tally
  $plugindir/preempt_tally.so     PreemptType=preempt/tally (with PreemptMode=REQUEUE)

The package installs no configuration and restarts nothing. To turn Tally on:

  cp /usr/share/doc/$pkg/tally.toml.example /etc/slurm/tally.toml
  \$EDITOR /etc/slurm/tally.toml      # [cluster] gpus and your accounts
  tally config check /etc/slurm/tally.toml

then add the lines above to slurm.conf and restart slurmctld. Before
removing this package, take them out again (slurmctld does not start with
a PriorityType whose plugin is missing).

tally.toml(5) describes every key; tally(1) the command. The source's
README.md and docs/install.md say more.
EOF
{
    echo "$pkg ($version) unstable; urgency=medium"
    echo
    echo "  * Built from commit $commit${dirty:+ (with uncommitted changes)} for Slurm $slurm."
    echo
    echo " -- $maintainer  $(date -u -R -d "@$SOURCE_DATE_EPOCH")"
} | gzip -9n >"$doc/changelog.gz"

# 3. Control: the Slurm release, the shared libraries (dpkg-shlibdeps), md5sums.
mkdir -p "$work/shlibs/debian" "$stage/DEBIAN"
printf 'Source: tally\n\nPackage: %s\nArchitecture: any\n' "$pkg" >"$work/shlibs/debian/control"
binaries=(-e"$stage/usr/bin/tally")
for so in "$stage$plugindir"/*.so; do binaries+=(-e"$so"); done
shlibs=$(cd "$work/shlibs" && dpkg-shlibdeps -O --warnings=0 "${binaries[@]}" | sed -n 's/^shlibs:Depends=//p')
[[ -n $shlibs ]] || die "dpkg-shlibdeps found no shared library dependencies (expected libc6 at least)"
depends="$DEB_CTLD_PKG (>= $slurm), $DEB_CTLD_PKG (<< $release.$((micro + 1))~), $shlibs"
installed_size=$(du -sk --apparent-size "$stage" | cut -f1)
cat >"$stage/DEBIAN/control" <<EOF
Package: $pkg
Version: $version
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $installed_size
Depends: $depends
Provides: tally-slurm
Conflicts: tally-slurm
Replaces: tally-slurm
Section: admin
Priority: optional
Description: fair-share GPU scheduling plugins for Slurm $slurm
 Tally gives every team of a GPU cluster what it was promised: budgets down
 an org tree (shares or GPU-hours per week), hierarchical fair share over a
 hard 7-day sliding window, and minimum-runtime contracts during which a job
 is never preempted. Slurm still places, starts and preempts jobs; Tally
 decides the order and who may give way.
 .
 This package holds the plugins priority/tally, job_submit/tally and
 preempt/tally built for Slurm $slurm exactly (Slurm refuses plugins of
 another version), and the tally command: config checks, sshare-like
 reports, why a job waits, and a simulator.
EOF
(cd "$stage" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z | xargs -0 md5sum >DEBIAN/md5sums)
find "$stage" -type d -exec chmod 0755 {} +
chmod 0644 "$stage/DEBIAN/control" "$stage/DEBIAN/md5sums"

mkdir -p "$out"
dpkg-deb --root-owner-group -Zxz --build "$stage" "$deb" >/dev/null
echo "$deb: $pkg $version for Slurm $slurm ($(du -k "$deb" | cut -f1) KiB; Depends: $depends)"
