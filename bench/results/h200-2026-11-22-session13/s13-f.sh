#!/usr/bin/env bash
# Session 13 call 6 (2 x H200): the rooted LL16 cap (broadcast_reduce_ll_max 128K on 2
# ranks: LL63 from 256K): correctness of broadcast / reduce across the cap (dtypes,
# roots, 301 launches), then the dense closing set with the final code.
set -u
source scripts/lib-gpu.sh; gpu_session s13-f 330
L=".gpu/commhal launch"; B=.gpu/commhal-gpu-bench
for d in float bfloat16; do
  gpu_step check.log 30 "" $L -n 2 -- $B reduce -r 1 -b 1040 -e 8M -f 3 -n 3 -w 1 -d $d
  gpu_step check.log 30 "" $L -n 2 -- $B broadcast -r 0 -b 1040 -e 8M -f 3 -n 3 -w 1 -d $d
done
gpu_step check.log 30 "" $L -n 2 -- $B reduce -r 0 -b 64K -e 2M -f 2 -n 301 -w 1 -d half
gpu_step check.log 30 "" $L -n 2 -- $B broadcast -r 1 -b 64K -e 2M -f 2 -n 301 -w 1 -d half
GPU_BENCH_SET=dense GPU_BENCH_BUDGET=270 bash scripts/gpu-bench.sh > $W/dense-steps.log 2>&1
grep -hE '^####|correct|WRONG|rror' $W/check.log | cut -c1-200
cat $W/summary.log 2>/dev/null | tail -20
