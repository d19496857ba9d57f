#!/usr/bin/env bash
# Session 15 call 5 (4 x H200): the closing run with the final code and tuning file
# (GPU_BENCH_SET=dense: every collective at every power-of-2 size 1K..1G against NCCL,
# every cell checked, 4 ranks then 2 ranks on 2 of the 4 GPUs).
set -u
GPU_BENCH_SET=dense GPU_BENCH_BUDGET=580 bash scripts/gpu-bench.sh
cat $OUT/summary.log 2>/dev/null | tail -20
