#!/usr/bin/env bash
# Slurm built from SchedMD's release sources (as root, Debian 12): the releases Debian does not
# ship, installed each into its own prefix, the way a site that builds Slurm itself installs it.
#
#   configure --prefix=<prefix> --sysconfdir=/etc/slurm --with-munge --with-mysql_config
#             --with-hwloc --with-json --with-yaml --with-lz4 --enable-pam --disable-debug
#             --enable-multiple-slurmd
#   make -j<cores> && make install
#
# (--enable-multiple-slurmd, as Debian builds Slurm: the test bed runs all its slurmd on one
# host; without it slurmctld finds no address for a second node of the same host.
# --sysconfdir=/etc/slurm, as SchedMD's own packages configure it: Slurm's commands, and
# `tally share` run through sudo, find the cluster's slurm.conf where sites keep it. The beds
# of the releases share /etc/slurm, so one runs at a time on a machine.)
#
# The build is cached: the prefix is keyed by the tarball's sha256
# (/var/tmp/tally-slurm-<version>-<first 12 hex of the sha256>), and a prefix whose stamp names
# that checksum and these configure options is used as it is. A second run on the same machine
# does not rebuild.
#
# Usage:
#   slurm-src.sh ensure <release>   build <release> (25.11 or 26.05) unless it is cached; print
#                                   its prefix on stdout
#   slurm-src.sh prefix <release>   print the prefix the release builds into (no build)
#   slurm-src.sh tarball <release>  print the tarball used
#   slurm-src.sh deps               install the build's Debian packages (ensure does too)
#
# Environment:
#   TALLY_SLURM_SRC   folder with the tarballs slurm-<version>.tar.gz, used as they are (default:
#                     the pinned releases of scripts/sources.lock, from ../shared/slurm-src beside
#                     the repository when it has them, else fetched into a cache by
#                     scripts/fetch.sh). They are read, never copied into the repository.
set -euo pipefail
# shellcheck source=testbed/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ROOT=$(cd "$TB_DIR/.." && pwd)

# The build's dependencies (Debian 12): munge and MariaDB for authentication and accounting,
# hwloc, JSON, YAML, lz4, PAM and readline as a GPU site's build has them.
BUILD_PKGS=(build-essential pkg-config libmunge-dev libmariadb-dev libjson-c-dev libyaml-dev libhwloc-dev
            libpam0g-dev libreadline-dev liblz4-dev)

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

cmd=${1:-}; release=${2:-}
case $cmd in
    ensure|prefix|tarball|deps) ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "slurm-src.sh: expected ensure, prefix, tarball or deps, got '${cmd}'" ;;
esac

# install_deps: the build's packages that are missing.
install_deps() {
    local p
    local -a missing=()
    for p in "${BUILD_PKGS[@]}"; do
        dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null | grep -qx installed || missing+=("$p")
    done
    (( ${#missing[@]} )) || return 0
    log "installing the Slurm build's packages: ${missing[*]}"
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}
if [[ $cmd == deps ]]; then
    [[ $(id -u) == 0 ]] || die "slurm-src.sh deps must run as root"
    install_deps
    exit 0
fi
[[ $release =~ ^[0-9]+\.[0-9]+$ ]] || die "slurm-src.sh $cmd: expected a release such as 26.05, got '$release'"

# The tarball of the release, as scripts/fetch.sh finds it: exactly one
# slurm-<release>.<micro>.tar.gz in $TALLY_SLURM_SRC, else the pinned one from ../shared/slurm-src
# (checked), the cache or SchedMD's repository. It says what is missing when none has it.
tarball() {
    bash "$ROOT/scripts/fetch.sh" ensure "slurm-$release" || exit 1
}

TARBALL=$(tarball)
VERSION=$(basename "$TARBALL" .tar.gz); VERSION=${VERSION#slurm-}
SHA=$(sha256sum "$TARBALL" | cut -c1-64)
PREFIX=/var/tmp/tally-slurm-$VERSION-${SHA:0:12}
STAMP=$PREFIX/.tally-built
CONFIGURE=(--prefix="$PREFIX" --sysconfdir=/etc/slurm --with-munge --with-mysql_config=/usr/bin
           --with-hwloc --with-json --with-yaml --with-lz4 --enable-pam --disable-debug
           --enable-multiple-slurmd)
KEY="$SHA ${CONFIGURE[*]}"

case $cmd in
    prefix) echo "$PREFIX"; exit 0 ;;
    tarball) echo "$TARBALL"; exit 0 ;;
esac

[[ $(id -u) == 0 ]] || die "slurm-src.sh ensure must run as root (it installs the build's packages)"
exec 9>"/var/tmp/tally-slurm-$VERSION.lock"
flock 9
if [[ -f $STAMP && $(cat "$STAMP") == "$KEY" && -x $PREFIX/sbin/slurmctld ]]; then
    log "slurm $VERSION: cached in $PREFIX"
    echo "$PREFIX"
    exit 0
fi

t0=$(now)
install_deps

BUILD=/var/tmp/tally-slurm-build-$VERSION
rm -rf "$BUILD" "$PREFIX"
mkdir -p "$BUILD"
log "slurm $VERSION: building from $TARBALL into $PREFIX (sha256 ${SHA:0:12}...; 4 to 7 minutes on 2 cores)"
tar -xzf "$TARBALL" -C "$BUILD" --strip-components=1
blog=$BUILD/build.log
(
    cd "$BUILD"
    ./configure "${CONFIGURE[@]}"
    make -j"$(nproc)"
    make install
) >"$blog" 2>&1 || { tail -n 40 "$blog" >&2; die "slurm $VERSION: the build failed (log: $blog)"; }
for f in sbin/slurmctld sbin/slurmd sbin/slurmdbd bin/sbatch lib/slurm/accounting_storage_mysql.so \
         lib/slurm/auth_munge.so include/slurm/slurm_version.h; do
    [[ -e $PREFIX/$f ]] || die "slurm $VERSION: the build did not install $f (is a build dependency missing? log: $blog)"
done
echo "$KEY" >"$STAMP"
rm -rf "$BUILD"
log "slurm $VERSION: built and installed in $PREFIX [$(elapsed "$t0")s]"
echo "$PREFIX"
