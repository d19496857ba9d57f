#!/usr/bin/env bash
# Session 11, call 7: the closing tables with the committed file (copy engines for
# send/recv and 2-rank broadcast from 128 MiB): GPU_BENCH_SET=dense scripts/gpu-bench.sh
set -u
export GPU_BENCH_SET=dense GPU_BENCH_BUDGET=560
bash scripts/gpu-bench.sh
