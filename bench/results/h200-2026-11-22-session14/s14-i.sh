#!/usr/bin/env bash
# Session 14 call 9 (4 x H200): the closing run on 4
# GPUs with the final code and the 4-rank LL16 cap of call 8 (the rerun of call 7) (GPU_BENCH_SET=dense, 4 ranks only: every collective at every
# power-of-2 size 1K..1G against NCCL, every cell checked); call 7 was the first run on 4 GPUs of
# session 12's LL63 small region and ll63_recv change.
set -u
GPU_BENCH_SET=dense GPU_BENCH_DENSE_RANKS=4 GPU_BENCH_BUDGET=330 bash scripts/gpu-bench.sh
cat $OUT/summary.log 2>/dev/null | tail -20
