#!/usr/bin/env bash
# Session 21, call 4 (nvidia-h200-x4): EXPERIMENT COMMHAL_EXP_AR_PRE=1 — the all-reduce
# ring's reduce-scatter step 0 (a pure copy of the input segment into the next rank's
# staging) by the copy engine before the head kernel (which starts at step 1), so 3 of
# the 6 steps run at the copy engine's rate. Checks (3 and 4 ranks, three dtypes, odd
# sizes, a dead rank), then an A/B against the committed path at 512M / 1G.
set -u
source scripts/lib-gpu.sh
gpu_session s21d 260
B=.gpu/commhal-gpu-bench; L=".gpu/commhal launch"
T="COMMHAL_EXP_AR_PRE=1 COMMHAL_COLL_AR_CE_MIN=16 COMMHAL_COLL_AR_RING_MIN=16"
gpu_step check.log 30 "$T" $L -n 4 -- $B allreduce -b 1040 -e 252720 -f 3 -n 10 -w 2 -d half
gpu_step check.log 30 "$T" $L -n 3 -- $B allreduce -b 1040 -e 252720 -f 3 -n 10 -w 2 -d float
gpu_step check.log 30 "$T" $L -n 4 -- $B allreduce -b 16M -e 256M -f 4 -n 10 -w 2 -d bf16
gpu_step check.log 30 "$T" $L -n 3 -- $B allreduce -b 16M -e 256M -f 4 -n 10 -w 2 -d half
gpu_step check.log 30 "$T" $L -n 4 -- $B allreduce -b 64M -d half --dead-rank 2 --timeout-ms 2000
O="-b 512M -e 1G -f 2 -n 40 -w 5"
for i in 1 2 3; do
  gpu_step ab.log 25 "" $L -n 4 -- $B allreduce $O -d half
  gpu_step ab.log 25 "COMMHAL_EXP_AR_PRE=1" $L -n 4 -- $B allreduce $O -d half
done
gpu_step ab.log 25 "COMMHAL_EXP_AR_PRE=1" $L -n 4 -- $B allreduce $O -d float
gpu_step ab.log 25 "" $L -n 4 -- $B allreduce $O -d float
grep -h "rc=\|SKIPPED" $W/*.log | sort | uniq -c
