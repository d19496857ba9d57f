#!/usr/bin/env bash
# Session 21, call 10: 58ba94f (ring_neighbours / ring_segment refactor of dma.rs) on the
# GPU: the all-reduce copy-engine route forced from 16 bytes on 4 and 3 ranks, and 1 GiB.
set -u
source scripts/lib-gpu.sh
gpu_session s21j 100
B=.gpu/commhal-gpu-bench; L=".gpu/commhal launch"
T="COMMHAL_COLL_LL_MAX=8 COMMHAL_COLL_AR_CE_MIN=16 COMMHAL_COLL_AR_RING_MIN=16"
gpu_step check.log 30 "$T" $L -n 4 -- $B allreduce -b 16 -e 252720 -f 3 -n 10 -w 2 -d half
gpu_step check.log 30 "$T" $L -n 3 -- $B allreduce -b 1040 -e 252720 -f 3 -n 10 -w 2 -d float
gpu_step check.log 30 "" $L -n 4 -- $B allreduce -b 512M -e 1G -f 2 -n 40 -w 5 -d half
grep -h "rc=\|SKIPPED" $W/*.log | sort | uniq -c
