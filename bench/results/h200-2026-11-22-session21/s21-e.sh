#!/usr/bin/env bash
# Session 21, call 5 (nvidia-h200-x4): the committed form of the all-reduce copy-engine
# first step (allreduce_ring_first + the head kernel from step 1, no flag, one launch
# number for first step and tail). Checks: forced from 16 bytes on 4 and 3 ranks, odd
# sizes, three dtypes, in and out of place (the bench does both), memcheck on the route,
# a dead rank, graph replays (the full ring kernel runs there), then an A/B-free
# confirmation against NCCL at 256M..1G for the three dtypes.
set -u
source scripts/lib-gpu.sh
gpu_session s21e 250
B=.gpu/commhal-gpu-bench; L=".gpu/commhal launch"
T="COMMHAL_COLL_AR_CE_MIN=16 COMMHAL_COLL_AR_RING_MIN=16"
gpu_step check.log 30 "$T" $L -n 4 -- $B allreduce -b 16 -e 252720 -f 3 -n 10 -w 2 -d half
gpu_step check.log 30 "$T" $L -n 3 -- $B allreduce -b 1040 -e 252720 -f 3 -n 10 -w 2 -d float
gpu_step check.log 30 "$T" $L -n 4 -- $B allreduce -b 16M -e 256M -f 4 -n 20 -w 2 -d bf16
gpu_step check.log 30 "$T" $L -n 3 -- $B allreduce -b 16M -e 256M -f 4 -n 20 -w 2 -d half
gpu_step check.log 60 "$T" $L -n 4 -- compute-sanitizer --tool memcheck --error-exitcode 3 $B allreduce -b 1040 -e 9360 -f 3 -n 3 -w 1 -d half
gpu_step check.log 30 "" $L -n 4 -- $B allreduce -b 1G -d half --dead-rank 1 --timeout-ms 2000
gpu_step check.log 40 "" $L -n 4 -- $B allreduce -b 256M -e 1G -f 4 -n 20 -w 3 -d half -G
for d in half bfloat16 float; do
  gpu_step ab.log 30 "" $L -n 4 -- $B allreduce -b 256M -e 1G -f 2 -n 40 -w 5 -d $d --compare nccl
done
gpu_step ab.log 30 "COMMHAL_COLL_AR_CE_MIN=268435456" $L -n 3 -- $B allreduce -b 256M -e 1G -f 2 -n 40 -w 5 -d half --compare nccl
gpu_step ab.log 30 "" $L -n 3 -- $B allreduce -b 256M -e 1G -f 2 -n 40 -w 5 -d half
grep -h "rc=\|SKIPPED" $W/*.log | sort | uniq -c
