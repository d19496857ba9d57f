#!/usr/bin/env bash
# Build every fuzz target the way cargo-fuzz does (nightly, libFuzzer, sanitizer
# coverage, AddressSanitizer, debug assertions and overflow checks) and run each for
# FUZZ_SECONDS (default 60), one at a time, on a scratch copy of its committed corpus
# (the committed corpus stays as it is). Prints one line per target: executions,
# coverage, features, corpus size and crashes; a crash's input is kept under
# fuzz/artifacts/<target>/ and the script exits non-zero.
#
#   fuzz/run.sh                      # every target, 60 s each
#   FUZZ_SECONDS=10 fuzz/run.sh tcp_frames unique_id
#
# Needs the nightly toolchain (`rustup toolchain install nightly`) and libfuzzer-sys
# in the cargo cache or network access; no cargo-fuzz. FUZZ_ASAN=0 builds without
# AddressSanitizer; FUZZ_JOBS sets cargo's -j (default 1).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
seconds=${FUZZ_SECONDS:-60}
triple=$(rustc +nightly -vV | sed -n 's/^host: //p')
target_dir=${CARGO_TARGET_DIR:-$here/target}
flags="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4"
flags+=" -Cllvm-args=-sanitizer-coverage-inline-8bit-counters"
flags+=" -Cllvm-args=-sanitizer-coverage-pc-table"
flags+=" -Cllvm-args=-sanitizer-coverage-trace-compares"
flags+=" --cfg fuzzing -Cdebug-assertions -Coverflow-checks"
if [[ ${FUZZ_ASAN:-1} != 0 ]]; then
    flags+=" -Zsanitizer=address"
fi

if [[ $# -gt 0 ]]; then
    targets=("$@")
else
    mapfile -t targets < <(sed -n 's/^name = "\(.*\)"$/\1/p' Cargo.toml | grep -v '^commhal-fuzz$')
fi

bins=()
for t in "${targets[@]}"; do bins+=(--bin "$t"); done
offline=()
if [[ ${FUZZ_OFFLINE:-0} != 0 ]]; then offline=(--offline); fi
RUSTFLAGS="$flags" CARGO_TARGET_DIR="$target_dir" cargo +nightly build "${offline[@]}" \
    --release -j"${FUZZ_JOBS:-1}" --target "$triple" "${bins[@]}"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failed=0
printf '%-22s %12s %8s %8s %7s %s\n' target executions cov ft corpus crashes
for t in "${targets[@]}"; do
    mkdir -p "$scratch/$t" "artifacts/$t"
    cp -r "corpus/$t/." "$scratch/$t/"
    log="$scratch/$t.log"
    rc=0
    "$target_dir/$triple/release/$t" -max_total_time="$seconds" -print_final_stats=1 \
        -artifact_prefix="artifacts/$t/" "$scratch/$t" >"$log" 2>&1 || rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    last=$(grep -E '^#[0-9]+' "$log" | tail -n 1)
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
    corp=$(sed -n 's/.* corp: \([0-9]*\).*/\1/p' <<<"$last")
    crashes=0
    if [[ $rc != 0 ]]; then
        crashes=$(find "artifacts/$t" -type f | wc -l)
        failed=1
        tail -n 30 "$log" >&2
    fi
    printf '%-22s %12s %8s %8s %7s %s\n' "$t" "${execs:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" "$crashes"
done
exit "$failed"
