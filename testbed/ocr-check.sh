#!/usr/bin/env bash
# Tally test bed: check that a screenshot shows given words, read with Debian 12's Tesseract OCR
# (5.3, English data), e.g. a page of `tally exporter` taken with testbed/screenshot.sh.
#
# Usage:
#   bash testbed/ocr-check.sh IMAGE WORD...   print "found: WORD" / "MISSING: WORD" for each WORD;
#                                             exit 1 when any is missing, listing them and
#                                             printing the OCR text (on stderr)
#   bash testbed/ocr-check.sh --install       install tesseract-ocr (with its English data,
#                                             no recommends); idempotent, a fast no-op when
#                                             present. A check installs it on first use.
#
# Matching: case-insensitive; a WORD may be several words ("Tally accounts"). The OCR text has
# its whitespace and table rules ('|') squeezed to single spaces, then each WORD must occur there
# as whole words (grep -w: not inside a longer run of letters, digits or '_'; "nlp" is found in
# "(nlp)" but not in "nlpx"). No fuzzy matching: OCR's slips ("nip" for "nlp", "-" for "_") are
# misses.
# The text is read in several page segmentation modes (TALLY_OCR_PSM) and a WORD counts as found
# when any of them reads it: mode 11 (sparse text) reads table cells best, mode 3 (automatic)
# keeps lines together.
# OCR needs large glyphs: take screenshots with TALLY_SCREENSHOT_SCALE=3 (Chromium renders at 3x;
# at 1x and 2x Tesseract read "nlp" as "nip" in DejaVu Sans 16px; upscaling a 1x PNG afterwards
# did not fix it reliably).
#
# Environment:
#   TALLY_OCR_PSM   Tesseract page segmentation modes to read with, space-separated (default "11 3")
set -euo pipefail
# shellcheck source=testbed/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PKGS=(tesseract-ocr tesseract-ocr-eng)
PSMS=${TALLY_OCR_PSM:-11 3}

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

do_install() { apt_ensure ocr-check "$([[ ${1:-} == -v ]] && echo 1 || echo 0)" "${PKGS[@]}"; }

case ${1:-} in
    --install) do_install -v; exit 0 ;;
    -h|--help|'') usage; exit 0 ;;
esac
(( $# >= 2 )) || die "usage: ocr-check.sh IMAGE WORD... (or --install)"
image=$1; shift
[[ -s $image ]] || die "no image at $image"
for w in "$@"; do [[ $w == *[![:space:]]* ]] || die "empty WORD"; done
do_install

# squeeze: whitespace and table rules to single spaces, on one line.
squeeze() { tr -s '[:space:]|' ' ' <<<"$1"; }
# matches <text> <word>: the word (its blanks squeezed too) occurs in the text as whole words.
matches() {
    local text word
    text=$(squeeze "$1"); word=$(squeeze "$2")
    word=${word# }; word=${word% }
    [[ -n $word ]] && grep -qiwF -- "$word" <<<"$text"
}

# Each mode in turn reads the page, for the words that no earlier mode read.
t0=$(now)
declare -A texts=() seen=()
todo=("$@")
for psm in $PSMS; do
    (( ${#todo[@]} )) || break
    # One OpenMP thread: faster than the default on this 2-core machine (0.8 s instead of 1.3 s
    # for a 3840x4800 page).
    texts[$psm]=$(OMP_THREAD_LIMIT=1 timeout 120 tesseract "$image" - --psm "$psm" 2>/dev/null) \
        || die "tesseract --psm $psm failed on $image"
    left=()
    for w in "${todo[@]}"; do
        if matches "${texts[$psm]}" "$w"; then seen[$w]=$psm; else left+=("$w"); fi
    done
    todo=("${left[@]}")
done

missing_words=()
for w in "$@"; do
    if [[ -n ${seen[$w]:-} ]]; then echo "found: $w"; else echo "MISSING: $w"; missing_words+=("$w"); fi
done

if (( ${#missing_words[@]} )); then
    for psm in $PSMS; do
        printf '\n===== OCR text of %s (tesseract --psm %s) =====\n%s\n' "$image" "$psm" "${texts[$psm]}" >&2
    done
    log "ocr-check: ${#missing_words[@]} of $# word(s) not read in $image: ${missing_words[*]} [$(elapsed "$t0")s]"
    exit 1
fi
log "ocr-check: all $# word(s) read in $image [$(elapsed "$t0")s]"
