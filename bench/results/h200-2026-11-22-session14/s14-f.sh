#!/usr/bin/env bash
# Session 14 call 6 (2 x H200): the closing run on the final code (GPU_BENCH_SET=dense:
# every collective at every power-of-2 size 1K..1G against NCCL), then broadcast and
# reduce as CUDA graph replays (-G: the kernels, not the copy engines) 1K..1G, checked.
set -u
GPU_BENCH_SET=dense GPU_BENCH_BUDGET=270 bash scripts/gpu-bench.sh
source scripts/lib-gpu.sh; gpu_session s14-f 90
L=".gpu/commhal launch"; B=.gpu/commhal-gpu-bench
for c in broadcast reduce; do
  gpu_step graph.log 40 "" $L -n 2 -- $B $c -r 1 -b 1K -e 1G -f 4 -n 20 -w 3 -d half -G
done
grep -hE '^####|correct|WRONG|rror' $W/graph.log | cut -c1-200
cat $OUT/summary.log 2>/dev/null | tail -40
