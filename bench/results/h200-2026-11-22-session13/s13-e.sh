#!/usr/bin/env bash
# Session 13 call 5 (2 x H200): the copy-engine reduce with START one way (the root no
# longer waits for the non-root's START) and the committed tuning (reduce_ce_min 256M,
# 2-rank broadcast_ll63_max 4M): correctness (CE forced from 16 bytes; broadcast LL63),
# a dead rank, the reduce in CUDA graphs (the kernels there), then the dense closing set.
set -u
source scripts/lib-gpu.sh; gpu_session s13-e 330
L=".gpu/commhal launch"; B=.gpu/commhal-gpu-bench
F="COMMHAL_COLL_REDUCE_CE_MIN=16"
gpu_step check.log 30 "$F" $L -n 2 -- $B reduce -r 0 -b 16 -e 256M -f 8 -n 3 -w 1 -d bfloat16
gpu_step check.log 30 "$F" $L -n 2 -- $B reduce -r 1 -b 1040 -e 80M -f 3 -n 3 -w 1 -d float
gpu_step check.log 30 "$F" $L -n 2 -- $B reduce -r 1 -b 2M -e 16M -f 2 -n 301 -w 1 -d half
gpu_step check.log 40 "$F" $L -n 2 -- compute-sanitizer --tool memcheck --error-exitcode 3 $B reduce -r 0 -b 16K -e 32M -f 8 -n 2 -w 1 -d float
gpu_step check.log 30 "" $L -n 2 -- $B broadcast -r 1 -b 1040 -e 8M -f 3 -n 3 -w 1 -d half
gpu_step check.log 30 "" $L -n 2 -- $B broadcast -r 0 -b 1M -e 8M -f 2 -n 101 -w 1 -d float
gpu_step check.log 40 "" $L -n 2 -- $B reduce -r 1 -b 256M -e 1G -f 2 -n 5 -w 1 -d half -G
gpu_step dead.log 30 "$F" $L -n 2 -- $B reduce -r 1 -b 256M -e 256M --dead-rank 0 --timeout-ms 2000 -d half
gpu_step dead.log 30 "$F" $L -n 2 -- $B reduce -r 1 -b 256M -e 256M --dead-rank 1 --timeout-ms 2000 -d half
GPU_BENCH_SET=dense GPU_BENCH_BUDGET=260 bash scripts/gpu-bench.sh > $W/dense-steps.log 2>&1
grep -hE '^####|correct|WRONG|rror|ERROR SUMMARY' $W/check.log $W/dead.log | cut -c1-220
cat $W/summary.log 2>/dev/null | tail -30
