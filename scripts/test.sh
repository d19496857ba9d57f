#!/usr/bin/env bash
# The whole test suite: what README.md calls "run every test" and what CI runs.
# Works on a fresh machine with a Rust toolchain, Python 3 and pip; no GPU needed.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

# NVRTC from PyPI so the CUDA device sources really compile in CI (no GPU needed).
step "NVRTC wheel (compiles device-src/ without a GPU)"
nvrtc_dir=$(bash scripts/install-nvrtc.sh)
export LD_LIBRARY_PATH="${nvrtc_dir}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export COMMHAL_REQUIRE_NVRTC=1

step "format"
cargo fmt --all -- --check

step "clippy (all targets, warnings are errors)"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "tests"
cargo test --workspace --locked

step "API docs (broken or private links are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked

step "minimum Rust version (Cargo.toml's rust-version builds the workspace)"
msrv=$(sed -n 's/^rust-version = "\(.*\)"$/\1/p' Cargo.toml)
[[ -n $msrv ]] || { echo "Cargo.toml declares no rust-version"; exit 1; }
rustup toolchain list | grep -q "^$msrv" || rustup toolchain install "$msrv" --profile minimal
CARGO_TARGET_DIR=target/msrv cargo "+$msrv" check --workspace --all-targets --locked

step "loom models (FIFO, semaphores)"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
  cargo test -p commhal-channels --release --locked --lib loom

step "bench-tables.py on a committed GPU log (closing tables come from it)"
# A 4 x H200 run of broadcast / reduce (root 1) / all-to-all / send-recv against NCCL,
# kept as a fixed input: the assertions below are about its numbers.
log=testdata/gpu-bench-rooted-4gpu.log
out=$(python3 scripts/bench-tables.py --summary "$log")
grep -q '^4 ranks reduce -r 1 .*: 21 sizes, lowest ratio 0.75; below NCCL .*: 256K 1.01/0.99, 512K 0.89/0.87' <<<"$out"
grep -q '^4 ranks alltoall .*: 21 sizes, lowest ratio 1.03; below NCCL (out/in place): none$' <<<"$out"
[[ $(python3 scripts/bench-tables.py "$log" | grep -c '^| ') -eq $((4 * 22)) ]]
grid=$(python3 scripts/bench-tables.py --grid "$log")
grep -q '^| size | broadcast | reduce | alltoall | sendrecv |$' <<<"$grid"
[[ $(grep -c '^| [0-9]' <<<"$grid") -eq 21 ]]

step "bench-tables.py on logs in the current format (nccl-tests header and footer)"
python3 scripts/test-bench-tables.py

step "PyTorch drop-in check (on a GPU host with torch; prints SKIPPED elsewhere)"
bash scripts/torch-dropin.sh

step "all tests passed"
