#!/usr/bin/env bash
# Tally test bed: screenshot a web page (e.g. the HTML page of `tally exporter`) with Debian 12's
# headless Chromium, or print the DOM it rendered. Runs as root (Chromium's sandbox is off);
# a fresh profile per run, removed after; at most 60 s per run.
#
# Usage:
#   bash testbed/screenshot.sh URL OUT.png [WIDTH HEIGHT]   PNG of WIDTHxHEIGHT CSS pixels
#                                                           (default 1280x1600; what lies below
#                                                           HEIGHT is cut off)
#   bash testbed/screenshot.sh --dom URL                    print the rendered DOM on stdout
#   bash testbed/screenshot.sh --install                    install chromium and fonts-dejavu-core
#                                                           (no recommends); idempotent, a fast
#                                                           no-op when present. The other modes
#                                                           install on first use.
# Exits nonzero when Chromium fails, times out, cannot load the page (connection refused, ...) or
# writes no PNG (its stderr is shown then). An HTTP error status is not a failure: Chromium
# renders the error page, as a browser would (check the status with curl where it matters).
#
# Environment:
#   TALLY_SCREENSHOT_SCALE    device scale factor (default 1): 3 gives a PNG of 3x the width and
#                             height, text rendered large enough for testbed/ocr-check.sh
#   TALLY_SCREENSHOT_WAIT_MS  virtual time Chromium lets the page's scripts and timers run before
#                             capturing (--virtual-time-budget; default none: capture at load)
set -euo pipefail
# shellcheck source=testbed/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PKGS=(chromium fonts-dejavu-core)
TIMEOUT=60

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

do_install() { apt_ensure screenshot "$([[ ${1:-} == -v ]] && echo 1 || echo 0)" "${PKGS[@]}"; }

# chromium_run <extra flags...> URL: headless Chromium with a throwaway profile; its stdout is
# ours, its stderr goes to $ERR (shown by the caller on failure).
chromium_run() {
    local -a flags=(--headless --no-sandbox --disable-gpu --disable-background-networking
                    --disable-dev-shm-usage --hide-scrollbars --user-data-dir="$PROFILE")
    [[ -z ${TALLY_SCREENSHOT_SCALE:-} ]] || flags+=(--force-device-scale-factor="$TALLY_SCREENSHOT_SCALE")
    [[ -z ${TALLY_SCREENSHOT_WAIT_MS:-} ]] || flags+=(--virtual-time-budget="$TALLY_SCREENSHOT_WAIT_MS")
    # timeout signals its whole process group: Chromium's helper processes go too.
    timeout -k 5 "$TIMEOUT" chromium "${flags[@]}" "$@" 2>"$ERR"
}

# Chromium's stderr without the noise of a machine with no D-Bus (and the Debian wrapper's
# complaint when /dev/shm shows up twice in findmnt).
show_err() {
    printf '\n===== chromium stderr (tail, D-Bus noise left out) =====\n' >&2
    grep -v -e ':ERROR:dbus/' -e 'unexpected operator' "$ERR" | tail -n 30 >&2 || true
}
# The headless command handler reports a failed load (connection refused, DNS, ...) on stderr
# and exits 0 with no output.
load_failed() { grep -o 'Page load failed: .*' "$ERR" | head -n1 || true; }

case ${1:-} in
    --install) do_install -v; exit 0 ;;
    -h|--help|'') usage; exit 0 ;;
esac

do_install
TMP=$(mktemp -d /tmp/tally-chromium.XXXXXX)
trap 'rm -rf -- "$TMP"' EXIT
PROFILE=$TMP/profile
ERR=$TMP/stderr

if [[ $1 == --dom ]]; then
    (( $# == 2 )) || die "usage: screenshot.sh --dom URL"
    rc=0
    dom=$(chromium_run --dump-dom "$2") || rc=$?
    why=$(load_failed)
    if (( rc )) || [[ -n $why || -z $dom ]]; then
        show_err
        (( rc != 124 )) || die "chromium timed out after ${TIMEOUT}s on $2"
        die "chromium --dump-dom $2 failed (exit $rc${why:+; $why})"
    fi
    printf '%s\n' "$dom"
    exit 0
fi

(( $# == 2 || $# == 4 )) || die "usage: screenshot.sh URL OUT.png [WIDTH HEIGHT] (or --dom URL, --install)"
url=$1 out=$2 width=${3:-1280} height=${4:-1600}
[[ $width =~ ^[1-9][0-9]*$ && $height =~ ^[1-9][0-9]*$ ]] || die "WIDTH and HEIGHT must be positive integers"
[[ $out == /* ]] || out=$PWD/$out
mkdir -p "$(dirname "$out")"
rm -f -- "$out"
t0=$(now)
rc=0
chromium_run --window-size="$width,$height" --screenshot="$out" "$url" >/dev/null || rc=$?
why=$(load_failed)
if (( rc )) || [[ -n $why || ! -s $out ]]; then
    show_err
    rm -f -- "$out"
    (( rc != 124 )) || die "chromium timed out after ${TIMEOUT}s on $url"
    die "chromium wrote no screenshot of $url (exit $rc${why:+; $why})"
fi
log "screenshot: $url -> $out (${width}x${height}${TALLY_SCREENSHOT_SCALE:+ at scale $TALLY_SCREENSHOT_SCALE}) [$(elapsed "$t0")s]"
