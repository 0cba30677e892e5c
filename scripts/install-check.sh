#!/usr/bin/env bash
# `make install` and `make uninstall` into scratch DESTDIRs: every file where
# it belongs and nothing else, a user's tally.toml left alone, a clear
# refusal when an artifact is missing, and nothing left after uninstall.
#
# Needs what make install installs: `make build plugins` (or SLURM=... and
# CARGO_TARGET_DIR as for those). Touches nothing outside its mktemp dirs.
#
#   bash scripts/install-check.sh            # make install-check
# SC2317: the helpers are called through check(); SC2016: $(TALLY) and `make` are literal.
# shellcheck disable=SC2317,SC2016,SC2001
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MAKE=${MAKE:-make}
export MAKEFLAGS=   # not the caller's -j or -n

fails=0
passes=0
ok() { echo "ok: $*"; passes=$((passes + 1)); }
bad() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
check() { local what=$1; shift; if "$@" >/dev/null; then ok "$what"; else bad "$what"; fi; }

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
trap 'echo "install-check: FAIL: line $LINENO: $BASH_COMMAND" >&2' ERR
m() { "$MAKE" --no-print-directory -C "$ROOT" "$@"; }

# The built CLI, as make sees it (CARGO_TARGET_DIR honoured).
tally=$(m -s -f Makefile -f - print-tally <<<'print-tally: ; @echo $(TALLY)')
[[ -x $tally ]] || { echo "install-check: $tally is missing: run make build plugins first" >&2; exit 1; }
pages=$("$tally" man --out "$scratch/pages" | sed 's|.*/||' | sort)
npages=$(wc -l <<<"$pages")

# files DIR: every file and symlink under DIR, relative, sorted.
files() { (cd "$1" && find . \( -type f -o -type l \) | sed 's|^\./||' | sort); }

# no_files DIR: nothing but directories left (printed otherwise).
no_files() { local left; left=$(files "$1"); [[ -z $left ]] || { sed 's/^/    left: /' <<<"$left" >&2; return 1; }; }

# expect_tree DESTDIR PREFIX PLUGINDIR EXAMPLEDIR [extra files...]: exactly these files.
expect_tree() {
    local d=$1 prefix=$2 plugindir=$3 exampledir=$4; shift 4
    local want
    want=$( {
        for p in priority_tally job_submit_tally preempt_tally; do echo "${plugindir#/}/$p.so"; done
        echo "${prefix#/}/bin/tally"
        sed "s|^|${prefix#/}/share/man/man1/|" <<<"$pages"
        echo "${prefix#/}/share/man/man5/tally.toml.5"
        echo "${exampledir#/}/tally.toml.example"
        echo "${prefix#/}/lib/systemd/system/tally-exporter.service"
        echo "${prefix#/}/share/tally/grafana/tally.json"
        echo "${prefix#/}/share/tally/grafana/provisioning.yaml"
        for f in "$@"; do echo "$f"; done
    } | sort)
    if [[ $(files "$d") == "$want" ]]; then return 0; fi
    diff <(echo "$want") <(files "$d") | sed 's/^/    /' >&2
    return 1
}

# 1. Defaults: PREFIX=/usr/local, SYSCONFDIR=/etc, Debian's PluginDir.
d=$scratch/default
mkdir -p "$d"
m -s install DESTDIR="$d" >/dev/null
check "install: 3 plugins, tally, $npages man1 pages, tally.toml(5), the example, the exporter's unit, the dashboard, nothing else" \
    expect_tree "$d" /usr/local /usr/lib/x86_64-linux-gnu/slurm-wlm /etc/tally
check "installed tally runs" "$d/usr/local/bin/tally" --version
check "installed plugins carry a Slurm plugin_version" \
    bash "$ROOT/scripts/plugin-version.sh" "$d"/usr/lib/x86_64-linux-gnu/slurm-wlm/{priority,job_submit,preempt}_tally.so
check "plugins are 0644 (as Debian's Slurm plugins), tally 0755" \
    test "$(stat -c %a "$d"/usr/lib/x86_64-linux-gnu/slurm-wlm/{priority,job_submit,preempt}_tally.so "$d/usr/local/bin/tally" | tr '\n' ' ')" = "644 644 644 755 "
check "man pages are 0644" test "$(stat -c %a "$d/usr/local/share/man/man5/tally.toml.5")" = 644
check "tally.1 and a subcommand page installed" test -s "$d/usr/local/share/man/man1/tally.1" -a -s "$d/usr/local/share/man/man1/tally-config-check.1"
check "the example is examples/tally.toml" cmp -s "$ROOT/examples/tally.toml" "$d/etc/tally/tally.toml.example"
check "the installed example validates" "$d/usr/local/bin/tally" config check "$d/etc/tally/tally.toml.example"
check "the exporter's unit runs the installed tally" grep -qx 'ExecStart=/usr/local/bin/tally exporter --listen 127.0.0.1:9817' "$d/usr/local/lib/systemd/system/tally-exporter.service"
# unit_ok UNIT BINDIR: systemd-analyze verify says nothing of the unit (with the binary where the
# unit says it is: verify looks for it; without man pages: the installed tally's are not on
# MANPATH; lines about the absent system manager of a container are not the unit's).
unit_ok() {
    local out
    sed "s|/usr/local/bin/tally|$2/tally|" "$1" >"$scratch/tally-exporter.service"
    out=$(systemd-analyze verify --man=no "$scratch/tally-exporter.service" 2>&1) || { echo "$out" >&2; return 1; }
    out=$(grep -v -e 'Failed to .* system' -e '^$' <<<"$out" || true)
    [[ -z $out ]] || { echo "$out" >&2; return 1; }
}
if command -v systemd-analyze >/dev/null; then
    check "systemd-analyze verify accepts the exporter's unit" unit_ok "$d/usr/local/lib/systemd/system/tally-exporter.service" "$d/usr/local/bin"
fi
check "the dashboard is packaging/grafana/tally.json" cmp -s "$ROOT/packaging/grafana/tally.json" "$d/usr/local/share/tally/grafana/tally.json"
if command -v man >/dev/null; then
    check "man -l renders tally.toml(5)" bash -c "man -l '$d/usr/local/share/man/man5/tally.toml.5' | grep -q 'gpus_per_node'"
fi
m -s uninstall DESTDIR="$d" >/dev/null
check "uninstall leaves no file" no_files "$d"
check "uninstall removes etc/tally it emptied" test ! -e "$d/etc/tally"

# 2. Other prefixes; a user's configs are neither overwritten nor removed.
d=$scratch/custom
mkdir -p "$d/etc/tally" "$d/etc/slurm"
echo '# mine' >"$d/etc/tally/tally.toml"
echo '# mine' >"$d/etc/slurm/tally.toml"
vars=(DESTDIR="$d" PREFIX=/usr PLUGINDIR=/opt/slurm/lib SYSCONFDIR=/etc)
m -s install "${vars[@]}" >/dev/null
check "PREFIX=/usr PLUGINDIR=/opt/slurm/lib: files follow the variables" \
    expect_tree "$d" /usr /opt/slurm/lib /etc/tally etc/tally/tally.toml etc/slurm/tally.toml
m -s install "${vars[@]}" >/dev/null
check "a second install over the first: same files" \
    expect_tree "$d" /usr /opt/slurm/lib /etc/tally etc/tally/tally.toml etc/slurm/tally.toml
m -s uninstall "${vars[@]}" >/dev/null
check "uninstall leaves only the user's two tally.toml" \
    test "$(files "$d")" = $'etc/slurm/tally.toml\netc/tally/tally.toml'
check "the user's files are unchanged" grep -qx '# mine' "$d/etc/tally/tally.toml" "$d/etc/slurm/tally.toml"

# 3. Uninstall after the built tally is gone: the installed one lists the pages.
d=$scratch/nobuild
mkdir -p "$d"
m -s install DESTDIR="$d" >/dev/null
m -s uninstall DESTDIR="$d" TALLY=/nonexistent/tally >/dev/null
check "uninstall without the build tree leaves no file" no_files "$d"

# 4. A missing artifact: a clear refusal, nothing installed.
d=$scratch/missing
mkdir -p "$d"
if out=$(m -s install DESTDIR="$d" TALLY=/nonexistent/tally 2>&1); then
    bad "install without a built tally should fail"
else
    check "missing tally: says what to run" grep -q 'make install: /nonexistent/tally is missing: run `make build` first' <<<"$out"
fi
check "missing tally: nothing installed" no_files "$d"
if out=$(m -s install DESTDIR="$d" PLUGIN_DIR=/nonexistent 2>&1); then
    bad "install without built plugins should fail"
else
    check "missing plugins: says what to run" grep -q 'make install: /nonexistent/priority_tally.so is missing: run `make plugins' <<<"$out"
fi

echo "install-check: $passes passed, $fails failed"
exit $(( fails > 0 ))
