#!/usr/bin/env bash
# Session 21, call 2 (nvidia-h200-x4): where the all-reduce tail's time goes at 1 GiB
# (experiment build: COMMHAL_EXP_TAIL_TRACE records events around the head kernel, each
# copy and each signal + wait, host-synchronised per launch, ranks 0 and 1 print µs);
# COMMHAL_EXP_STREAM_WAIT replaces the bounded wait kernel by cuStreamWaitValue32
# (unbounded: experiment only); ring unroll 8 / 32 against 16.
set -u
source scripts/lib-gpu.sh
gpu_session s21b 240
B=.gpu/commhal-gpu-bench; L=".gpu/commhal launch"
gpu_step trace.log 30 "COMMHAL_EXP_TAIL_TRACE=1" $L -n 4 -- $B allreduce -b 1G -e 1G -n 8 -w 2 -d half
gpu_step trace.log 30 "COMMHAL_EXP_TAIL_TRACE=1 COMMHAL_EXP_STREAM_WAIT=1" $L -n 4 -- $B allreduce -b 1G -e 1G -n 8 -w 2 -d half
O="-b 512M -e 1G -f 2 -n 40 -w 5 -d half"
for i in 1 2; do
  gpu_step ab.log 25 "" $L -n 4 -- $B allreduce $O
  gpu_step ab.log 25 "COMMHAL_EXP_STREAM_WAIT=1" $L -n 4 -- $B allreduce $O
done
for u in 8 32; do
  gpu_step ab.log 25 "COMMHAL_COLL_RING_UNROLL=$u" $L -n 4 -- $B allreduce $O
done
gpu_step ab.log 25 "" $L -n 4 -- $B allreduce $O
grep -h "rc=\|SKIPPED" $W/*.log | sort | uniq -c
