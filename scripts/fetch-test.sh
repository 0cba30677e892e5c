#!/usr/bin/env bash
# scripts/fetch.sh against a local "upstream": python3's http.server on a free loopback port
# serving a fake Slurm archive laid out as GitHub's (top folder slurm-<commit>/) and a fake traces
# archive, with a manifest of their pins (TALLY_FETCH_MANIFEST, TALLY_FETCH_BASE_URL). No root, no
# network; run by tests/tests/fetch.rs (`cargo test -p tally-tests --test fetch`). Checks:
#   - a download whose pins match is kept in the cache: the tarball repacked with the top folder
#     slurm-<version>/ and the same tree; the traces' files under their pinned names;
#   - a wrong checksum fails with one line naming it, and leaves nothing in the cache;
#   - a ../shared with the pinned files is used without a download, and one with a changed file
#     is refused;
#   - without a network (the server stopped) or with TALLY_FETCH=0: the one line saying what is
#     missing and how to provide it; `check` reports every missing thing in seconds.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# Only what each case sets.
unset TALLY_SLURM_SRC TALLY_TRACES TALLY_FETCH TALLY_CACHE TALLY_FETCH_MANIFEST TALLY_FETCH_BASE_URL
command -v python3 >/dev/null || { echo "fetch-test: python3 is needed (the local HTTP server)" >&2; exit 1; }
command -v curl >/dev/null || command -v wget >/dev/null ||
    { echo "fetch-test: curl or wget is needed (scripts/fetch.sh downloads with it)" >&2; exit 1; }

T=$(mktemp -d)
SERVER=
cleanup() {
    if [[ -n $SERVER ]]; then kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true; fi
    rm -rf "$T"
}
trap cleanup EXIT

failures=0
pass() { echo "ok: $*"; }
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# The fetcher as a clone elsewhere has it: $T/repo/scripts/fetch.sh, with $T/shared beside.
mkdir -p "$T/repo/scripts" "$T/www" "$T/cache"
cp "$HERE/fetch.sh" "$T/repo/scripts/fetch.sh"
FETCH=$T/repo/scripts/fetch.sh

# ---- the fake upstream --------------------------------------------------------------------
COMMIT=0123456789abcdef0123456789abcdef01234567
VERSION=99.01.1
RELEASE=99.01
tree=$T/src/slurm-$COMMIT
mkdir -p "$tree/src/common" "$tree/doc"
printf '#!/bin/sh\necho configured\n' >"$tree/configure"
chmod 0755 "$tree/configure"
echo 'int main(void) { return 0; }' >"$tree/src/common/a.c"
echo 'Slurm, a fake' >"$tree/README"
echo 'GPL' >"$tree/COPYING"
ln -s ../README "$tree/doc/README"
# GitHub's archive of the commit: top folder slurm-<commit>/.
mkdir -p "$T/www/Fake/slurm/archive"
tar -C "$T/src" -czf "$T/www/Fake/slurm/archive/$COMMIT.tar.gz" "slurm-$COMMIT"
# SchedMD's git archive of the tag, as ../shared holds it: top folder slurm-<version>/, other
# bytes (owner, dates).
cp -a "$tree" "$T/src/slurm-$VERSION"
touch -d '2026-08-13 17:12:00' "$T/src/slurm-$VERSION"
SHARED_TARBALL=$T/slurm-$VERSION.tar.gz
tar -C "$T/src" --owner=0 --group=0 --mtime='2026-08-13 17:12:00' -czf "$SHARED_TARBALL" "slurm-$VERSION"
TARBALL_SHA=$(sha256sum "$SHARED_TARBALL" | cut -c1-64)
TREE_SHA=$(bash "$FETCH" tree-sha256 "$SHARED_TARBALL")
[[ $TREE_SHA =~ ^[0-9a-f]{64}$ ]] || { echo "fetch-test: tree-sha256 printed '$TREE_SHA'" >&2; exit 1; }
if [[ $(bash "$FETCH" tree-sha256 "$T/www/Fake/slurm/archive/$COMMIT.tar.gz") == "$TREE_SHA" ]]; then
    pass "the tree pin does not depend on the top folder's name nor on tar's metadata"
else
    fail "GitHub's layout and ../shared's have different tree pins"
fi

# The traces: three CSVs in the archive (one not pinned), and the LICENSE apart.
mkdir -p "$T/traces/raw-traces" "$T/www/Fake/traces/raw/$COMMIT/data"
for i in 1 2 3; do
    printf 'job_id,submission_time,duration,num_gpu\njob%s,%s,600,1\n' "$i" "$i" >"$T/traces/raw-traces/c$i.csv"
done
tar -C "$T/traces" -czf "$T/www/Fake/traces/raw/$COMMIT/data/raw-traces.tar.gz" raw-traces
printf 'MIT License\r\n' >"$T/www/Fake/traces/raw/$COMMIT/LICENSE"
sum() { sha256sum "$1" | cut -c1-64; }
C1=$(sum "$T/traces/raw-traces/c1.csv")
C2=$(sum "$T/traces/raw-traces/c2.csv")
LIC=$(sum "$T/www/Fake/traces/raw/$COMMIT/LICENSE")

# manifest FILE [TREE] [C2]: a manifest of these pins (a wrong one when given).
manifest() {
    cat >"$1" <<EOF
# the fake upstream's pins
slurm $RELEASE $VERSION $COMMIT $TARBALL_SHA ${2:-$TREE_SHA} https://github.com/Fake/slurm/archive/$COMMIT.tar.gz
traces-archive https://github.com/Fake/traces/raw/$COMMIT/data/raw-traces.tar.gz
traces cluster01.csv $C1
traces cluster02.csv ${3:-$C2}
traces LICENSE $LIC https://github.com/Fake/traces/raw/$COMMIT/LICENSE
EOF
}
manifest "$T/pins"
WRONG=$(printf '%064d' 0)
manifest "$T/wrong-pins" "$WRONG" "$WRONG"

# ---- the server ---------------------------------------------------------------------------
(cd "$T/www" && exec python3 -u -m http.server --bind 127.0.0.1 0 >"$T/server.log" 2>&1) &
SERVER=$!
PORT=
for _ in $(seq 1 100); do
    PORT=$(sed -n 's/.* port \([0-9][0-9]*\).*/\1/p' "$T/server.log" | head -n1)
    [[ -n $PORT ]] && break
    sleep 0.1
done
[[ -n $PORT ]] || { cat "$T/server.log" >&2; echo "fetch-test: the HTTP server did not start" >&2; exit 1; }
BASE=http://127.0.0.1:$PORT

# run NAME ARGS...: fetch.sh with the pins, the server and a cache; output in $T/NAME.{out,err},
# exit status in RC.
RC=0
run() {
    local name=$1
    shift
    RC=0
    env TALLY_FETCH_MANIFEST="${PINS:-$T/pins}" TALLY_FETCH_BASE_URL="$BASE" \
        TALLY_CACHE="${CACHE:-$T/cache}" bash "$FETCH" "$@" >"$T/$name.out" 2>"$T/$name.err" || RC=$?
}
# expect_line NAME WORDS...: NAME failed and the last line of its stderr has every word.
expect_line() {
    local name=$1 line w ok=1
    shift
    line=$(tail -n1 "$T/$name.err")
    (( RC != 0 )) || { fail "$name: succeeded, expected a failure"; return; }
    for w in "$@"; do [[ $line == *"$w"* ]] || ok=0; done
    if (( ok )); then pass "$name: $line"; else fail "$name: the line '$line' lacks one of: $*"; fi
}

# ---- 1. the download, checked and kept ------------------------------------------------------
run slurm ensure "slurm-$RELEASE"
got=$(cat "$T/slurm.out")
if (( RC == 0 )) && [[ $got == "$T/cache/slurm-src/slurm-$VERSION.tar.gz" && -f $got ]]; then
    pass "slurm: fetched into the cache"
else
    fail "slurm: rc $RC, printed '$got': $(cat "$T/slurm.err")"
fi
if [[ -f $got ]]; then
    tops=$(tar -tzf "$got" | cut -d/ -f1 | sort -u)
    [[ $tops == "slurm-$VERSION" ]] && pass "slurm: repacked with the top folder slurm-$VERSION/" || fail "slurm: top folders '$tops'"
    [[ $(bash "$FETCH" tree-sha256 "$got") == "$TREE_SHA" ]] && pass "slurm: the repacked tree is the pinned one" || fail "slurm: repacked tree differs"
    tar -tvzf "$got" "slurm-$VERSION/configure" | grep -q '^-rwx' && pass "slurm: configure still executable" || fail "slurm: configure lost its x bit"
    [[ $(cat "$got.sha256") == "$(sum "$got") $TREE_SHA" ]] && pass "slurm: sidecar names the tarball and its tree" || fail "slurm: sidecar '$(cat "$got.sha256")'"
fi
run slurm-again ensure "slurm-$RELEASE"
if (( RC == 0 )) && ! grep -q downloading "$T/slurm-again.err"; then pass "slurm: the cache is used the second time"; else fail "slurm: downloaded again: $(cat "$T/slurm-again.err")"; fi

run traces ensure traces
dir=$(cat "$T/traces.out")
if (( RC == 0 )) && [[ $dir == "$T/cache/traces/elasticflow-itp" ]] &&
    cmp -s "$dir/cluster01.csv" "$T/traces/raw-traces/c1.csv" && cmp -s "$dir/cluster02.csv" "$T/traces/raw-traces/c2.csv" &&
    cmp -s "$dir/LICENSE" "$T/www/Fake/traces/raw/$COMMIT/LICENSE" && [[ ! -e $dir/c3.csv ]] &&
    (cd "$dir" && sha256sum -c --quiet SHA256SUMS); then
    pass "traces: the pinned members under their names, the LICENSE, SHA256SUMS"
else
    fail "traces: rc $RC, '$dir': $(cat "$T/traces.err"); $(ls "$dir" 2>&1 | tr '\n' ' ')"
fi

run check check
if (( RC == 0 )) && [[ $(grep -c . "$T/check.err") == 2 ]]; then pass "check: all there"; else fail "check: rc $RC: $(cat "$T/check.err")"; fi

# A cached tarball cut short is fetched again.
truncate -s 100 "$got"
run refetch ensure "slurm-$RELEASE"
if (( RC == 0 )) && grep -q 'fetched again' "$T/refetch.err" && [[ $(bash "$FETCH" tree-sha256 "$got") == "$TREE_SHA" ]]; then
    pass "slurm: a damaged cache entry is fetched again"
else
    fail "slurm: damaged cache: rc $RC: $(cat "$T/refetch.err")"
fi

# ---- 2. a wrong checksum fails, nothing kept ----------------------------------------------
mkdir "$T/cache2"
CACHE=$T/cache2 PINS=$T/wrong-pins run wrong-slurm ensure "slurm-$RELEASE"
expect_line wrong-slurm "tree of" "not the pinned $WRONG" "nothing kept"
CACHE=$T/cache2 PINS=$T/wrong-pins run wrong-traces ensure traces
expect_line wrong-traces "no file with the pinned sha256" "cluster02.csv" "nothing kept"
left=$(cd "$T/cache2" && find . -mindepth 1 ! -name .lock ! -name slurm-src ! -name traces)
[[ -z $left ]] && pass "wrong checksum: nothing left in the cache" || fail "wrong checksum: left in the cache: $left"

# ---- 3. ../shared: used when it matches, refused when it does not -------------------------
mkdir -p "$T/shared/slurm-src" "$T/shared/traces/elasticflow-itp"
cp "$SHARED_TARBALL" "$T/shared/slurm-src/"
cp "$T/traces/raw-traces/c1.csv" "$T/shared/traces/elasticflow-itp/cluster01.csv"
cp "$T/traces/raw-traces/c2.csv" "$T/shared/traces/elasticflow-itp/cluster02.csv"
cp "$T/www/Fake/traces/raw/$COMMIT/LICENSE" "$T/shared/traces/elasticflow-itp/LICENSE"
mkdir "$T/cache3"
CACHE=$T/cache3 TALLY_FETCH=0 run shared check
if (( RC == 0 )) && grep -q "$T/shared/slurm-src/slurm-$VERSION.tar.gz" "$T/shared.err" &&
    grep -q "$T/shared/traces/elasticflow-itp" "$T/shared.err"; then
    pass "../shared: used as it is, no download"
else
    fail "../shared: rc $RC: $(cat "$T/shared.err")"
fi
echo >>"$T/shared/slurm-src/slurm-$VERSION.tar.gz"
CACHE=$T/cache3 run shared-slurm ensure "slurm-$RELEASE"
expect_line shared-slurm "$T/shared/slurm-src/slurm-$VERSION.tar.gz has sha256" "not the pinned $TARBALL_SHA"
echo 'job9,9,9,9' >>"$T/shared/traces/elasticflow-itp/cluster01.csv"
CACHE=$T/cache3 run shared-traces ensure traces
expect_line shared-traces "is not the pinned traces" "cluster01.csv (sha256"
rm -rf "$T/shared"

# The explicit variables win, used as they are (another release, other traces).
mkdir -p "$T/mine" "$T/my-traces"
cp "$SHARED_TARBALL" "$T/mine/slurm-$RELEASE.7.tar.gz"
cp "$T/traces/raw-traces/c3.csv" "$T/my-traces/cluster04.csv"
CACHE=$T/cache3 TALLY_FETCH=0 TALLY_SLURM_SRC=$T/mine run mine ensure "slurm-$RELEASE"
[[ $RC == 0 && $(cat "$T/mine.out") == "$T/mine/slurm-$RELEASE.7.tar.gz" ]] && pass "TALLY_SLURM_SRC: used as it is" ||
    fail "TALLY_SLURM_SRC: rc $RC: $(cat "$T/mine.out" "$T/mine.err")"
CACHE=$T/cache3 TALLY_FETCH=0 TALLY_TRACES=$T/my-traces run my-traces ensure traces
[[ $RC == 0 && $(cat "$T/my-traces.out") == "$T/my-traces" ]] && pass "TALLY_TRACES: used as it is" ||
    fail "TALLY_TRACES: rc $RC: $(cat "$T/my-traces.out" "$T/my-traces.err")"

# ---- 4. no network, or downloads forbidden: the one line -----------------------------------
kill "$SERVER"
wait "$SERVER" 2>/dev/null || true
SERVER=
mkdir "$T/cache4"
CACHE=$T/cache4 run offline ensure "slurm-$RELEASE"
expect_line offline "Slurm $VERSION's source (slurm-$VERSION.tar.gz) is missing" "failed" "$BASE/Fake/slurm/archive/$COMMIT.tar.gz" "TALLY_SLURM_SRC"
CACHE=$T/cache4 TALLY_FETCH=0 run forbidden ensure traces
expect_line forbidden "the GPU traces are missing" "TALLY_FETCH=0" "TALLY_TRACES"
[[ $(wc -l <"$T/forbidden.err") == 1 ]] && pass "TALLY_FETCH=0: one line" || fail "TALLY_FETCH=0: $(cat "$T/forbidden.err")"
s=$SECONDS
CACHE=$T/cache4 run offline-check check
if (( RC != 0 )) && (( SECONDS - s < 30 )) && [[ $(grep -c '^fetch.sh: .* missing: ' "$T/offline-check.err") == 2 ]]; then
    pass "check without a network: $((SECONDS - s)) s, one line per missing thing"
else
    fail "check without a network: rc $RC, $((SECONDS - s)) s: $(cat "$T/offline-check.err")"
fi
left=$(cd "$T/cache4" && find . -mindepth 1 ! -name .lock ! -name slurm-src ! -name traces)
[[ -z $left ]] && pass "no network: nothing left in the cache" || fail "no network: left in the cache: $left"

if (( failures )); then
    echo "fetch-test: $failures check(s) failed" >&2
    exit 1
fi
echo "fetch-test: all checks passed"
