#!/usr/bin/env bash
# The fuzz smoke, for CI and by hand (docs/reliability.md, "Fuzzing"):
#
#   1. always: the stable test, every fuzz body over its seed corpus plus a
#      few thousand deterministic mutations (tests/smoke.rs);
#   2. when `cargo +nightly` and cargo-fuzz are installed: each libFuzzer
#      target for FUZZ_SMOKE_SECONDS (default 20) seconds, its grown corpus
#      in a temporary directory (the seed corpus is never written to).
#
# Exits non-zero on any failure or crash. Run from anywhere:
#   bash fuzz/smoke.sh
set -euo pipefail
fuzz_dir="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$fuzz_dir")"
secs="${FUZZ_SMOKE_SECONDS:-20}"

echo "fuzz smoke: stable test (seed corpora + deterministic mutations)"
cargo test --manifest-path "$fuzz_dir/Cargo.toml"

if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "fuzz smoke: SKIPPED the libFuzzer runs: no nightly toolchain (rustup toolchain install nightly)"
  exit 0
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
  echo "fuzz smoke: SKIPPED the libFuzzer runs: cargo-fuzz is not installed (cargo install cargo-fuzz --locked)"
  exit 0
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$root"
targets=$(cargo +nightly fuzz list)
for t in $targets; do
  echo "fuzz smoke: libFuzzer target $t for ${secs}s"
  mkdir -p "$work/corpus/$t" "$work/artifacts/$t"
  cargo +nightly fuzz run "$t" "$work/corpus/$t" "fuzz/corpus/$t" -- \
    -max_len=4096 -max_total_time="$secs" -dict=fuzz/numbers.dict -artifact_prefix="$work/artifacts/$t/" \
    >"$work/$t.log" 2>&1 || {
    echo "fuzz smoke: target $t FAILED; last lines of its log:"
    tail -n 60 "$work/$t.log"
    for a in "$work/artifacts/$t"/*; do
      [ -e "$a" ] || continue
      mkdir -p "$fuzz_dir/artifacts/$t" && cp "$a" "$fuzz_dir/artifacts/$t/"
      echo "fuzz smoke: input kept as fuzz/artifacts/$t/$(basename "$a")"
    done
    exit 1
  }
  grep -E '^Done [0-9]+ runs' "$work/$t.log" | sed "s/^/fuzz smoke: $t: /" || true
done
echo "fuzz smoke: all libFuzzer targets ran ${secs}s without a crash"
