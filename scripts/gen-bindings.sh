#!/usr/bin/env bash
# Regenerate slurm-sys/src/bindings/v<release>.rs from the Debian source of Slurm.
#
#   scripts/gen-bindings.sh            Slurm 22.05.8, Debian 12's (this machine's)
#   scripts/gen-bindings.sh 24.11      Slurm 24.11.5, Debian 13's, from the chroot
#                                      testbed/trixie.sh makes (TRIXIE_ROOT)
#   scripts/gen-bindings.sh 25.11      Slurm 25.11.7 / 26.05.3 from SchedMD's tarballs in
#   scripts/gen-bindings.sh 26.05      ../shared/slurm-src, headers from the build of
#                                      testbed/slurm-src.sh ensure <release>
#
# Normal builds and CI do NOT run this: the bindings are checked in, so they
# need neither libclang nor the Slurm source. Run it (as root, on Debian 12)
# after changing the allowlist in slurm-sys/gen/src/main.rs or when moving to
# another Slurm release; then `cargo test -p slurm-sys` re-checks the layout
# asserts in slurm-sys/src/lib.rs (this script does that at the end).
#
# Idempotent: installs only what is missing, fetches the source only if it is
# not already unpacked, and writes the same file for the same inputs.
#
# To add a release: a new case below (its Debian version and where its
# headers are), run this, then add the release to slurm-sys/build.rs and
# slurm-sys/src/lib.rs (its layout asserts) and its ABI differences to
# plugin/ffi/src/release.rs.
#
# Environment (all optional):
#   SLURM_DEB_VERSION  Debian version of source package slurm-wlm (default: the release's)
#   SLURM_SRC_PARENT   where the source is unpacked (default /var/tmp/slurm-src; never the repo)
#   SLURM_INCLUDE_DIR  dir holding slurm/slurm_version.h (default: the release's libslurm-dev)
#   TRIXIE_ROOT        the Debian 13 chroot (default /var/tmp/tally-trixie)
#   GEN_TARGET_DIR     cargo target dir of the generator (default /var/tmp/slurm-sys-gen-target)
#   SKIP_CHECK=1       do not run `cargo test -p slurm-sys` afterwards
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/deb-target.sh
source "$ROOT/scripts/deb-target.sh"
RELEASE=${1:-22.05}
TRIXIE_ROOT=${TRIXIE_ROOT:-/var/tmp/tally-trixie}
TARBALL=
case $RELEASE in
    22.05) deb_version=22.05.8-4+deb12u3; include=/usr/include; CHROOT= ;;
    24.11) deb_version=24.11.5-4+deb13u1; include=$TRIXIE_ROOT/usr/include; CHROOT=$TRIXIE_ROOT ;;
    # SchedMD's release tarballs (../shared/slurm-src), built by testbed/slurm-src.sh into a
    # prefix: the headers come from that build, the source from the tarball.
    25.11|26.05)
        TARBALL=$(bash "$ROOT/testbed/slurm-src.sh" tarball "$RELEASE")
        prefix=$(bash "$ROOT/testbed/slurm-src.sh" prefix "$RELEASE")
        deb_version=$(basename "$TARBALL" .tar.gz); deb_version=${deb_version#slurm-}
        include=$prefix/include; CHROOT= ;;
    *) echo "gen-bindings: Slurm $RELEASE is not supported: give 22.05, 24.11, 25.11 or 26.05 (to add one, see this script's header)" >&2; exit 2 ;;
esac
SLURM_DEB_VERSION=${SLURM_DEB_VERSION:-$deb_version}
SLURM_SRC_PARENT=${SLURM_SRC_PARENT:-/var/tmp/slurm-src}
SLURM_INCLUDE_DIR=${SLURM_INCLUDE_DIR:-$include}
GEN_TARGET_DIR=${GEN_TARGET_DIR:-/var/tmp/slurm-sys-gen-target}
UPSTREAM_VERSION=${SLURM_DEB_VERSION%%-*}            # 22.05.8
SRC_DIR=$SLURM_SRC_PARENT/slurm-wlm-$UPSTREAM_VERSION
[ -z "$TARBALL" ] || SRC_DIR=$SLURM_SRC_PARENT/slurm-$UPSTREAM_VERSION
STUB_DIR=$SLURM_SRC_PARENT/gen-stub-$RELEASE         # empty config.h + slurm/slurm_version.h
OUT=$ROOT/slurm-sys/src/bindings/v${RELEASE/./_}.rs

log() { printf 'gen-bindings: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"
    elif command -v sudo >/dev/null; then sudo "$@"
    else die "need root for: $*"; fi
}

apt_updated=0
apt_update() {
    if [ "$apt_updated" -eq 0 ]; then
        as_root apt-get update -qq
        apt_updated=1
    fi
}

# --- 0. A release from SchedMD's tarball: its headers from the build (testbed/slurm-src.sh
#        ensure), its source unpacked from the tarball (step 2 then has nothing to fetch).
if [ -n "$TARBALL" ]; then
    [ -f "$SLURM_INCLUDE_DIR/slurm/slurm_version.h" ] ||
        die "$SLURM_INCLUDE_DIR/slurm/slurm_version.h not found: run 'bash testbed/slurm-src.sh ensure $RELEASE' first"
    if [ ! -f "$SRC_DIR/.orig-only-$SLURM_DEB_VERSION" ]; then
        log "unpacking $TARBALL into $SRC_DIR"
        rm -rf "$SRC_DIR" && mkdir -p "$SRC_DIR"
        tar -xzf "$TARBALL" -C "$SRC_DIR" --strip-components=1
        : >"$SRC_DIR/.orig-only-$SLURM_DEB_VERSION"   # (step 2 then finds the source)
    fi
fi

# --- 1. Packages: libclang for bindgen, dpkg-dev for `apt-get source`,
#        libslurm-dev for slurm/slurm_version.h (no ./configure is run).
need=()
dpkg-query -W -f='${Status}' libclang-dev 2>/dev/null | grep -q 'ok installed' || need+=(libclang-dev)
dpkg-query -W -f='${Status}' dpkg-dev 2>/dev/null | grep -q 'ok installed' || need+=(dpkg-dev)
if [ -n "$CHROOT" ]; then
    [ -f "$SLURM_INCLUDE_DIR/slurm/slurm_version.h" ] ||
        die "$SLURM_INCLUDE_DIR/slurm/slurm_version.h not found: run 'bash testbed/trixie.sh ensure' first"
elif [ ! -f "$SLURM_INCLUDE_DIR/slurm/slurm_version.h" ]; then
    [ "$SLURM_INCLUDE_DIR" = /usr/include ] ||
        die "$SLURM_INCLUDE_DIR/slurm/slurm_version.h not found"
    need+=("libslurm-dev=$SLURM_DEB_VERSION")
fi
if [ "${#need[@]}" -gt 0 ]; then
    log "installing ${need[*]}"
    apt_update
    as_root env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# --- 2. Source package, unpacked under $SLURM_SRC_PARENT (never in the repo).
have_src() {
    { [ -f "$SRC_DIR/debian/changelog" ] &&
        head -n1 "$SRC_DIR/debian/changelog" | grep -qF "slurm-wlm ($SLURM_DEB_VERSION)"; } ||
        [ -f "$SRC_DIR/.orig-only-$SLURM_DEB_VERSION" ]
}
# 24.11: `apt-get source` inside the Debian 13 chroot. deb.debian.org has
# served the .orig.tar.gz of 24.11.5-4+deb13u1 but 404 for its .dsc and
# .debian.tar.xz (seen 2026-12-03); then the upstream tarball is used and
# the bindings' header says so.
if [ -n "$CHROOT" ] && ! have_src; then
    grep -q '^deb-src ' "$CHROOT/etc/apt/sources.list" 2>/dev/null ||
        sed -n 's/^deb /deb-src /p' "$CHROOT/etc/apt/sources.list" >>"$CHROOT/etc/apt/sources.list"
    chroot "$CHROOT" apt-get update -qq
    chroot "$CHROOT" bash -c "mkdir -p /var/tmp/slurm-src && cd /var/tmp/slurm-src &&
        apt-get source -qq slurm-wlm=$SLURM_DEB_VERSION" 2>&1 | grep -v unsandboxed >&2 || true
    mkdir -p "$SLURM_SRC_PARENT"
    rm -rf "$SRC_DIR"
    if [ -d "$CHROOT/var/tmp/slurm-src/slurm-wlm-$UPSTREAM_VERSION/debian" ]; then
        cp -a "$CHROOT/var/tmp/slurm-src/slurm-wlm-$UPSTREAM_VERSION" "$SRC_DIR"
    else
        orig=$CHROOT/var/tmp/slurm-src/slurm-wlm_$UPSTREAM_VERSION.orig.tar.gz
        [ -f "$orig" ] || die "neither the source package nor $orig could be fetched"
        log "only the upstream tarball could be fetched: using it (Debian's patches not applied)"
        mkdir -p "$SRC_DIR"
        tar -xzf "$orig" -C "$SRC_DIR" --strip-components=1
        : >"$SRC_DIR/.orig-only-$SLURM_DEB_VERSION"
    fi
fi
if ! have_src; then
    if ! apt-cache showsrc "slurm-wlm=$SLURM_DEB_VERSION" 2>/dev/null | grep -q '^Package:'; then
        apt_update
    fi
    if ! apt-cache showsrc "slurm-wlm=$SLURM_DEB_VERSION" 2>/dev/null | grep -q '^Package:'; then
        # Add deb-src entries with the same URIs/suites as the binary ones.
        src_list=/etc/apt/sources.list.d/debian-src.sources
        [ -f /etc/apt/sources.list.d/debian.sources ] ||
            die "no deb-src for slurm-wlm and no /etc/apt/sources.list.d/debian.sources to copy"
        log "adding $src_list"
        sed 's/^Types:.*/Types: deb-src/' /etc/apt/sources.list.d/debian.sources |
            as_root tee "$src_list" >/dev/null
        apt_updated=0
        apt_update
    fi
    log "fetching source slurm-wlm=$SLURM_DEB_VERSION into $SLURM_SRC_PARENT"
    as_root mkdir -p "$SLURM_SRC_PARENT"
    rm -rf "$SRC_DIR"
    # (As root, apt warns that it downloads unsandboxed: harmless.)
    (cd "$SLURM_SRC_PARENT" && as_root apt-get source -qq "slurm-wlm=$SLURM_DEB_VERSION" 2>&1 |
        grep -v 'unsandboxed' >&2 || true)
    have_src || die "source of slurm-wlm $SLURM_DEB_VERSION not found in $SRC_DIR after apt-get source"
fi

# --- 3. Stub include dir.
rm -rf "$STUB_DIR"
mkdir -p "$STUB_DIR/slurm"
: >"$STUB_DIR/config.h"
cp "$SLURM_INCLUDE_DIR/slurm/slurm_version.h" "$STUB_DIR/slurm/slurm_version.h"
header_release "$STUB_DIR/slurm/slurm_version.h" || die "$STUB_DIR/slurm/slurm_version.h has no '#define SLURM_VERSION_NUMBER'"
header_version=$HDR_HEX
IFS=. read -r major minor micro <<<"$UPSTREAM_VERSION"
source_version=$(printf '0x%02x%02x%02x' "$((10#$major))" "$((10#$minor))" "$((10#$micro))")
[ "$header_version" = "$source_version" ] ||
    die "slurm_version.h says $header_version but the source is $UPSTREAM_VERSION ($source_version):" \
        "set SLURM_DEB_VERSION and SLURM_INCLUDE_DIR to the same release"
log "Slurm $UPSTREAM_VERSION, SLURM_VERSION_NUMBER $header_version"

# --- 4. Generate (the generator crate is outside the main workspace).
tmp=$(mktemp)   # outside the repo, so nothing half-written is ever in the work tree
trap 'rm -f "$tmp"' EXIT
start=$(date +%s%N)
SLURM_SYS_GEN_OUT=${OUT#"$ROOT"/} CARGO_TARGET_DIR=$GEN_TARGET_DIR cargo run --quiet --release --locked \
    --manifest-path "$ROOT/slurm-sys/gen/Cargo.toml" -- "$SRC_DIR" "$STUB_DIR" "$tmp"
end=$(date +%s%N)
if cmp -s "$tmp" "$OUT"; then
    log "bindings unchanged: $OUT"
else
    cat "$tmp" >"$OUT"   # (not mv: keep the file mode; mktemp makes 0600 files)
    log "bindings written: $OUT"
fi
log "$(wc -l <"$OUT") lines; generator build+run took $(( (end - start) / 1000000 )) ms"

# --- 5. Re-check the compile-time layout asserts and constants.
if [ "${SKIP_CHECK:-0}" != 1 ]; then
    log "cargo test -p slurm-sys"
    (cd "$ROOT" && cargo test --quiet -p slurm-sys)
fi
