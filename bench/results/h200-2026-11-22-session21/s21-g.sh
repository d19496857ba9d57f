#!/usr/bin/env bash
# Session 21, call 7 (nvidia-h200-x4): call 6 again with LL really off (COMMHAL_COLL_LL_MAX
# must be positive: 8 leaves LL only below 16 bytes), so the ring + copy-engine route
# runs at the small odd sizes and under memcheck.
set -u
source scripts/lib-gpu.sh
gpu_session s21g 100
B=.gpu/commhal-gpu-bench; L=".gpu/commhal launch"
T="COMMHAL_COLL_LL_MAX=8 COMMHAL_COLL_AR_CE_MIN=16 COMMHAL_COLL_AR_RING_MIN=16"
gpu_step check.log 30 "$T" $L -n 4 -- $B allreduce -b 16 -e 252720 -f 3 -n 10 -w 2 -d half
gpu_step check.log 30 "$T" $L -n 3 -- $B allreduce -b 1040 -e 252720 -f 3 -n 10 -w 2 -d float
gpu_step check.log 60 "$T" $L -n 4 -- compute-sanitizer --tool memcheck --error-exitcode 3 $B allreduce -b 1040 -e 84240 -f 9 -n 3 -w 1 -d half
grep -h "rc=\|SKIPPED" $W/*.log | sort | uniq -c
