#!/usr/bin/env bash
# Session 16 call 3 (4 x H200): the all-reduce copy-engine tail as one step of direct
# copies (COMMHAL_COLL_AR_CE_DIRECT=1: rank r copies segment r-1 to ranks r+1..r+n-2 at
# once, one wait for n-2 flags) against the ring tail (n-2 dependent steps).
# Correctness forced from 16 bytes; then speed at 256M..1G, alternated.
set -u
source scripts/lib-gpu.sh; gpu_session s16-c 560
L=".gpu/commhal launch"; B=.gpu/commhal-gpu-bench
F="COMMHAL_COLL_AR_CE_DIRECT=1 COMMHAL_COLL_AR_CE_MIN=16 COMMHAL_COLL_AR_RING_MIN=16 COMMHAL_COLL_LL_MAX=0"
for d in half float bfloat16; do gpu_step check.log 40 "$F" $L -n 4 -- $B allreduce -b 16 -e 256M -f 8 -n 3 -w 1 -d $d; done
gpu_step check.log 30 "$F" $L -n 3 -- $B allreduce -b 1040 -e 80M -f 3 -n 3 -w 1 -d half
gpu_step check.log 30 "$F" $L -n 4 -- $B allreduce -b 1040 -e 80M -f 3 -n 3 -w 1 -d float
gpu_step check.log 30 "$F" $L -n 4 -- $B allreduce -b 2M -e 16M -f 2 -n 301 -w 1 -d float
gpu_step check.log 60 "$F" $L -n 4 -- compute-sanitizer --tool memcheck --error-exitcode 3 $B allreduce -b 16K -e 8M -f 8 -n 2 -w 1 -d half
gpu_step dead.log 30 "$F" $L -n 4 -- $B allreduce -b 256M -e 256M --dead-rank 2 --timeout-ms 2000 -d half
O="-b 256M -e 1G -f 2 -n 40 -w 5 -d half --compare nccl"
for i in 1 2; do
gpu_step ar.log 40 "" $L -n 4 -- $B allreduce $O
gpu_step ar.log 40 "COMMHAL_COLL_AR_CE_DIRECT=1" $L -n 4 -- $B allreduce $O
done
gpu_step ar.log 40 "COMMHAL_COLL_AR_CE_DIRECT=1 COMMHAL_COLL_AR_CE_MIN=67108864" $L -n 4 -- $B allreduce -b 64M -e 256M -f 2 -n 40 -w 5 -d half --compare nccl
gpu_step ar.log 40 "COMMHAL_COLL_AR_CE_DIRECT=1" $L -n 4 -- $B allreduce -b 256M -e 1G -f 2 -n 40 -w 5 -d float --compare nccl
grep -hE '^####|correct|WRONG|rror|ERROR SUMMARY' $W/check.log $W/dead.log | cut -c1-220
for f in ar; do
grep -h -E '^####|^\[rank 0\] +[0-9]+ ' $W/$f.log | awk '{ if ($1=="####") print substr($0,1,170); else print $3, $8, $12, $NF }' | grep -v "nccl\]$"
done
