#!/usr/bin/env bash
# Check a Tally .deb without touching the host's dpkg database: its control
# data, its files, and a real `dpkg --root` install into a throwaway root
# whose status file holds stand-ins for the dependencies.
#
#   scripts/deb-check.sh [--header slurm_version.h] [--status FILE] target/deb/tally-slurm-22.05_0.1.0_amd64.deb
#
# --header: the Slurm headers the plugins were built against (make deb-check
# passes the right ones; default /usr/include/slurm/slurm_version.h). Checks:
#   - name, Architecture, Depends: exactly that slurmctld release (the package
#     scripts/deb-target.sh names: Debian's slurmctld, or SchedMD's slurm-smd-slurmctld)
#     (>= X.Y.Z, << X.Y.Z+1~) plus libc6; Provides/Conflicts tally-slurm;
#     no maintainer scripts, no conffiles, nothing under /etc, all root:root;
#   - the files: 3 plugins in Debian's PluginDir, /usr/bin/tally, tally.1 and
#     tally.toml.5 (gzipped), copyright, README.Debian, changelog, the example;
#   - each plugin's plugin_version == SLURM_VERSION_NUMBER of the headers;
#   - dpkg --root -i with slurmctld X.Y.Z installed: configured, files in place,
#     tally runs; then dpkg -r: nothing of it left in the root;
#   - dpkg --root -i refused (dependency problems) with slurmctld missing, at
#     the next or previous micro version, or at another release.
# --status FILE (a dpkg status file, e.g. /var/lib/dpkg/status or a Debian 13
# chroot's, read only): also install into a root seeded with a copy of it,
# which must succeed: the package against a real system's package versions.
# Everything happens under one mktemp dir; dpkg logs to /dev/null.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
die() { echo "deb-check.sh: $*" >&2; exit 2; }

header=/usr/include/slurm/slurm_version.h
status_file=
while [[ ${1:-} == --* ]]; do
    (( $# >= 2 )) || die "$1 needs a file"
    case $1 in
        --header) header=$2 ;;
        --status) status_file=$2; [[ -r $status_file ]] || die "cannot read $status_file" ;;
        *) die "unknown option $1 (allowed: --header FILE, --status FILE)" ;;
    esac
    shift 2
done
(( $# == 1 )) || die "usage: deb-check.sh [--header slurm_version.h] [--status FILE] FILE.deb"
deb=$1
[[ -r $deb ]] || die "cannot read $deb (make deb builds it)"
[[ -r $header ]] || die "cannot read $header"
for tool in dpkg dpkg-deb dpkg-query readelf objdump; do command -v "$tool" >/dev/null || die "$tool not found"; done

fails=0
passes=0
ok() { echo "ok: $*"; passes=$((passes + 1)); }
bad() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
check() { local what=$1; shift; if "$@" >/dev/null 2>&1; then ok "$what"; else bad "$what"; fi; }

# shellcheck source=scripts/deb-target.sh
source "$ROOT/scripts/deb-target.sh"
header_release "$header" || die "$header has no '#define SLURM_VERSION_NUMBER'"
hex=$HDR_HEX release=$HDR_RELEASE slurm=$HDR_VERSION micro=${HDR_VERSION##*.}
pkg=tally-slurm-$release
deb_target "$release"
ctld=$DEB_CTLD_PKG
echo "deb-check: $deb against $header (Slurm $slurm)"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
field() { dpkg-deb -f "$deb" "$1"; }

# --- control ---------------------------------------------------------------
check "Package is $pkg" test "$(field Package)" = "$pkg"
check "file name is ${pkg}_<version>_<arch>.deb" \
    test "$(basename "$deb")" = "${pkg}_$(field Version)_$(field Architecture).deb"
check "Architecture is this machine's ($(dpkg --print-architecture))" test "$(field Architecture)" = "$(dpkg --print-architecture)"
depends=$(field Depends)
want_slurm="$ctld (>= $slurm), $ctld (<< $release.$((micro + 1))~)"
check "Depends starts with $want_slurm" test "${depends%%, lib*}" = "$want_slurm"
check "Depends has libc6" grep -q 'libc6 (>= ' <<<"$depends"
for f in Provides Conflicts Replaces; do check "$f: tally-slurm" test "$(field "$f")" = tally-slurm; done
dpkg-deb --ctrl-tarfile "$deb" | tar -t | sed 's|^\./||' | grep -v '^$' | sort >"$scratch/control-files"
check "control holds only control and md5sums (no maintainer scripts, no conffiles)" \
    test "$(tr '\n' ' ' <"$scratch/control-files")" = "control md5sums "

# --- files -----------------------------------------------------------------
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
plugindir=usr/lib/$multiarch/$DEB_PLUGIN_SUBDIR
dpkg-deb -c "$deb" >"$scratch/listing"
awk '{ print $6 }' "$scratch/listing" | sed 's|^\./||; s|/$||' | grep -v '^$' | sort >"$scratch/paths"
want_files=(
    "$plugindir/priority_tally.so" "$plugindir/job_submit_tally.so" "$plugindir/preempt_tally.so"
    usr/bin/tally usr/share/man/man1/tally.1.gz usr/share/man/man1/tally-config-check.1.gz
    usr/share/man/man5/tally.toml.5.gz
    "usr/share/doc/$pkg/copyright" "usr/share/doc/$pkg/README.Debian" "usr/share/doc/$pkg/changelog.gz"
    "usr/share/doc/$pkg/tally.toml.example"
    usr/lib/systemd/system/tally-exporter.service usr/share/tally/grafana/tally.json
    usr/share/tally/grafana/provisioning.yaml
)
for f in "${want_files[@]}"; do check "ships /$f" grep -qx "$f" "$scratch/paths"; done
check "nothing under /etc" bash -c "! grep -q '^etc' '$scratch/paths'"
check "the exporter's unit runs /usr/bin/tally" bash -c "dpkg-deb --fsys-tarfile '$deb' | tar -xO ./usr/lib/systemd/system/tally-exporter.service | grep -qx 'ExecStart=/usr/bin/tally exporter --listen 127.0.0.1:9817'"
check "every man page gzipped" bash -c "! grep '^usr/share/man/man[0-9]/.' '$scratch/paths' | grep -qv '\.gz$'"
check "every entry root/root" bash -c "! awk '\$2 != \"root/root\"' '$scratch/listing' | grep -q ."
check "plugins -rw-r--r-- (as Debian's Slurm plugins), tally -rwxr-xr-x" \
    test "$(awk '$6 ~ /_tally\.so$|bin\/tally$/ { print $1 }' "$scratch/listing" | LC_ALL=C sort | uniq -c | awk '{ printf "%s %s;", $1, $2 }')" = "3 -rw-r--r--;1 -rwxr-xr-x;"

mkdir "$scratch/x"
dpkg-deb -x "$deb" "$scratch/x"
if bash "$ROOT/scripts/plugin-version.sh" --header "$header" "$scratch/x/$plugindir"/*.so >"$scratch/pv" 2>&1; then
    ok "plugin_version of the 3 plugins is $hex (Slurm $slurm): $(awk '{ print $3 }' "$scratch/pv" | sort -u | tr '\n' ' ')"
else
    bad "plugin_version: $(cat "$scratch/pv")"
fi
check "the example is examples/tally.toml" cmp -s "$ROOT/examples/tally.toml" "$scratch/x/usr/share/doc/$pkg/tally.toml.example"

# --- install into throwaway roots ------------------------------------------
# new_root DIR SLURMCTLD_VERSION|none: an empty dpkg root whose status says
# slurmctld (at that version) and the other dependencies are installed.
new_root() {
    local r=$1 version=$2 dep name ver
    mkdir -p "$r/var/lib/dpkg/info" "$r/var/lib/dpkg/updates" "$r/var/lib/dpkg/triggers"
    : >"$r/var/lib/dpkg/available"
    : >"$r/var/lib/dpkg/status"
    stand_in() {
        printf 'Package: %s\nStatus: install ok installed\nVersion: %s\nArchitecture: %s\nMaintainer: deb-check <root@localhost>\nDescription: stand-in for deb-check\n\n' \
            "$1" "$2" "$(dpkg --print-architecture)" >>"$r/var/lib/dpkg/status"
        : >"$r/var/lib/dpkg/info/$1.list"
    }
    [[ $version == none ]] || stand_in "$ctld" "$version"
    # Every other dependency at the lowest version it accepts.
    while IFS= read -r dep; do
        name=${dep%% *}
        [[ $name == "$ctld" ]] && continue
        ver=$(sed -n 's/.*(>= \(.*\))/\1/p' <<<"$dep")
        stand_in "$name" "${ver:-1}"
    done < <(tr ',' '\n' <<<"$depends" | sed 's/^ *//')
}
rdpkg() { local r=$1; shift; dpkg --root="$r" --log=/dev/null --force-not-root "$@"; }
status() { dpkg-query --admindir="$1/var/lib/dpkg" -W -f='${db:Status-Abbrev}' "$pkg" 2>/dev/null | tr -d ' '; }
# tree DIR: every path under DIR but the dpkg database.
tree() { (cd "$1" && find . -mindepth 1 -not -path './var/lib/dpkg*' -not -path './var' -not -path './var/lib' | sort); }

r=$scratch/root-ok
new_root "$r" "$slurm-1"
tree "$r" >"$scratch/before"
if rdpkg "$r" -i "$deb" >"$scratch/install.log" 2>&1; then
    ok "dpkg --root -i with $ctld $slurm-1: installed"
else
    bad "dpkg --root -i with $ctld $slurm-1 failed: $(tail -5 "$scratch/install.log")"
fi
check "status is ii (installed, configured)" test "$(status "$r")" = ii
for f in "${want_files[@]}"; do check "installed /$f" test -f "$r/$f"; done
check "installed tally runs" "$r/usr/bin/tally" --version
check "installed tally checks the installed example" "$r/usr/bin/tally" config check "$r/usr/share/doc/$pkg/tally.toml.example"
if command -v man >/dev/null; then
    check "man renders the installed tally.toml(5)" bash -c "man -l '$r/usr/share/man/man5/tally.toml.5.gz' | grep -q gpus_per_node"
fi
check "installed plugins carry plugin_version $hex" bash "$ROOT/scripts/plugin-version.sh" --header "$header" "$r/$plugindir"/*.so
if rdpkg "$r" -r "$pkg" >"$scratch/remove.log" 2>&1; then ok "dpkg --root -r"; else bad "dpkg --root -r: $(tail -5 "$scratch/remove.log")"; fi
# Gone from the database, or "not-installed" (n) in it; "c" would mean conffiles kept.
# shellcheck disable=SC2016
check "status after removal: not installed, no config files kept" bash -c '[[ $1 == "" || $1 == ?n ]]' _ "$(status "$r")"
tree "$r" >"$scratch/after"
if cmp -s "$scratch/before" "$scratch/after"; then
    ok "dpkg -r left nothing behind"
else
    bad "dpkg -r left: $(comm -13 "$scratch/before" "$scratch/after" | tr '\n' ' ')"
fi

# refused SLURMCTLD_VERSION|none WHY: installing must fail on the dependency.
refused() {
    local version=$1 why=$2 rr
    rr=$scratch/root-$version
    new_root "$rr" "$version"
    if rdpkg "$rr" -i "$deb" >"$scratch/refused.log" 2>&1; then
        bad "dpkg -i with $why should fail, it succeeded"
    elif grep -q "depends on $ctld" "$scratch/refused.log" && [[ $(status "$rr") != ii ]]; then
        ok "refused with $why: $(grep -m1 -o "depends on $ctld.*" "$scratch/refused.log")"
    else
        bad "dpkg -i with $why failed, but not on $ctld: $(tail -5 "$scratch/refused.log")"
    fi
}
refused none "no $ctld"
refused "$release.$((micro + 1))-1" "$ctld $release.$((micro + 1)) (next micro: another plugin_version)"
(( micro == 0 )) || refused "$release.$((micro - 1))-1" "$ctld $release.$((micro - 1)) (previous micro)"
case $release in
    22.05) other=24.11.5-4 ;;
    24.11) other=22.05.8-4+deb12u3 ;;
    25.11) other=26.05.3-1 ;;
    *) other=25.11.7-1 ;;
esac
refused "$other" "$ctld $other (another release)"

if [[ -n $status_file ]]; then
    r=$scratch/root-status
    mkdir -p "$r/var/lib/dpkg/info" "$r/var/lib/dpkg/updates" "$r/var/lib/dpkg/triggers"
    cp "$status_file" "$r/var/lib/dpkg/status"
    : >"$r/var/lib/dpkg/available"
    dpkg-query --admindir="$r/var/lib/dpkg" -W -f='${Package}\n' | while read -r p; do : >"$r/var/lib/dpkg/info/$p.list"; done
    have=$(dpkg-query --admindir="$r/var/lib/dpkg" -W -f='${Version}' "$ctld" 2>/dev/null || echo none)
    if rdpkg "$r" -i "$deb" >"$scratch/status.log" 2>&1 && [[ $(status "$r") == ii ]]; then
        ok "installs on the package set of $status_file ($ctld $have)"
    else
        bad "does not install on the package set of $status_file ($ctld $have): $(grep -m3 -e 'depends on' -e error "$scratch/status.log" | tr '\n' ' ')"
    fi
fi

echo "deb-check: $passes passed, $fails failed"
exit $(( fails > 0 ))
