#!/usr/bin/env bash
# Session 21, call 6 (nvidia-h200-x4): the copy-engine first step at small odd sizes
# (LL off, so the ring + copy-engine route runs from 16 bytes), memcheck on it, and a
# dead rank on it.
set -u
source scripts/lib-gpu.sh
gpu_session s21f 200
B=.gpu/commhal-gpu-bench; L=".gpu/commhal launch"
T="COMMHAL_COLL_LL_MAX=0 COMMHAL_COLL_AR_CE_MIN=16 COMMHAL_COLL_AR_RING_MIN=16"
gpu_step check.log 30 "$T" $L -n 4 -- $B allreduce -b 16 -e 252720 -f 3 -n 10 -w 2 -d half
gpu_step check.log 30 "$T" $L -n 3 -- $B allreduce -b 1040 -e 252720 -f 3 -n 10 -w 2 -d float
gpu_step check.log 30 "$T" $L -n 4 -- $B allreduce -b 1040 -e 252720 -f 3 -n 10 -w 2 -d bf16
gpu_step check.log 90 "$T" $L -n 4 -- compute-sanitizer --tool memcheck --error-exitcode 3 $B allreduce -b 1040 -e 84240 -f 9 -n 3 -w 1 -d half
gpu_step check.log 30 "$T" $L -n 4 -- $B allreduce -b 64M -d half --dead-rank 1 --timeout-ms 2000
gpu_step check.log 30 "$T" $L -n 3 -- $B allreduce -b 64M -d float --dead-rank 0 --timeout-ms 2000
grep -h "rc=\|SKIPPED" $W/*.log | sort | uniq -c
