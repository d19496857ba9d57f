#!/usr/bin/env bash
# Session 10, call 4: the closing tables with the committed file (LL63 chains, signed
# checker data): GPU_BENCH_SET=dense scripts/gpu-bench.sh on 4 and 2 GPUs
set -u
export GPU_BENCH_SET=dense GPU_BENCH_BUDGET=570
bash scripts/gpu-bench.sh
