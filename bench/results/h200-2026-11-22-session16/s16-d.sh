#!/usr/bin/env bash
# Session 16 call 4 (4 x H200): the all-reduce copy-engine tail with its waits queued
# early on a side stream (COMMHAL_COLL_AR_CE_EARLY=1: each wait kernel already polling
# while the main stream's copy runs; the main stream waits for it by event) against the
# committed tail (the wait kernel launched after each copy). Correctness forced from 16
# bytes, then speed at 512M..1G alternated three times.
set -u
source scripts/lib-gpu.sh; gpu_session s16-d 300
L=".gpu/commhal launch"; B=.gpu/commhal-gpu-bench
F="COMMHAL_COLL_AR_CE_EARLY=1 COMMHAL_COLL_AR_CE_MIN=16 COMMHAL_COLL_AR_RING_MIN=16 COMMHAL_COLL_LL_MAX=0"
gpu_step check.log 40 "$F" $L -n 4 -- $B allreduce -b 16 -e 256M -f 8 -n 3 -w 1 -d half
gpu_step check.log 30 "$F" $L -n 3 -- $B allreduce -b 1040 -e 80M -f 3 -n 3 -w 1 -d bfloat16
gpu_step check.log 30 "$F" $L -n 4 -- $B allreduce -b 2M -e 16M -f 2 -n 301 -w 1 -d float
O="-b 512M -e 1G -f 2 -n 40 -w 5 -d half --compare nccl"
for i in 1 2 3; do
gpu_step ar.log 40 "" $L -n 4 -- $B allreduce $O
gpu_step ar.log 40 "COMMHAL_COLL_AR_CE_EARLY=1" $L -n 4 -- $B allreduce $O
done
grep -hE '^####|correct|WRONG|rror|ERROR SUMMARY' $W/check.log | cut -c1-220
grep -h -E '^####|^\[rank 0\] +[0-9]+ ' $W/ar.log | awk '{ if ($1=="####") print substr($0,1,170); else print $3, $8, $12, $NF }' | grep -v "nccl\]$"
