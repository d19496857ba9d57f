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

step "loom models (FIFO, semaphores)"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
  cargo test -p commhal-channels --release --locked --lib loom

step "all tests passed"
