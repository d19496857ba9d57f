#!/usr/bin/env bash
# Session 15 call 1 (4 x H200): the all-reduce ring with a copy-engine tail
# (commhal_coll_allreduce_ring_head_* + dma.rs allreduce_ring_tail, COMMHAL_COLL_AR_CE_MIN).
# Correctness with the ring and the tail forced from 16 bytes (dtypes, odd segment
# sizes, in and out of place, 301 launches, memcheck), a dead rank, then speed: the ring
# as committed against the ring + copy-engine tail, both against NCCL, 16M..1G.
set -u
source scripts/lib-gpu.sh; gpu_session s15-a 560
L=".gpu/commhal launch"; B=.gpu/commhal-gpu-bench
F="COMMHAL_COLL_AR_RING_MIN=16 COMMHAL_COLL_AR_CE_MIN=16"
for d in half float bfloat16; do
  gpu_step check.log 40 "$F" $L -n 4 -- $B allreduce -b 16 -e 256M -f 8 -n 3 -w 1 -d $d
done
gpu_step check.log 30 "$F" $L -n 4 -- $B allreduce -b 1040 -e 80M -f 3 -n 3 -w 1 -d half
gpu_step check.log 30 "$F" $L -n 3 -- $B allreduce -b 1040 -e 80M -f 3 -n 3 -w 1 -d float
gpu_step check.log 40 "$F" $L -n 4 -- $B allreduce -b 2M -e 16M -f 2 -n 301 -w 1 -d float
gpu_step check.log 60 "$F" $L -n 4 -- compute-sanitizer --tool memcheck --error-exitcode 3 $B allreduce -b 16K -e 8M -f 8 -n 2 -w 1 -d half
gpu_step dead.log 30 "$F" $L -n 4 -- $B allreduce -b 256M -e 256M --dead-rank 2 --timeout-ms 2000 -d half
O="-b 16M -e 1G -f 2 -n 40 -w 5 --compare nccl"
gpu_step big.log 60 "" $L -n 4 -- $B allreduce $O -d half
gpu_step big.log 60 "COMMHAL_COLL_AR_CE_MIN=1" $L -n 4 -- $B allreduce $O -d half
gpu_step big.log 60 "" $L -n 4 -- $B allreduce $O -d half
gpu_step big.log 60 "COMMHAL_COLL_AR_CE_MIN=1" $L -n 4 -- $B allreduce $O -d half
gpu_step big.log 40 "COMMHAL_COLL_AR_CE_MIN=1" $L -n 4 -- $B allreduce -b 256M -e 1G -f 2 -n 40 -w 5 --compare nccl -d float
gpu_step big.log 40 "COMMHAL_COLL_AR_CE_MIN=1" $L -n 4 -- $B allreduce -b 256M -e 1G -f 2 -n 40 -w 5 --compare nccl -d bfloat16
gpu_step big.log 40 "COMMHAL_COLL_AR_CE_MIN=1" $L -n 3 -- $B allreduce -b 64M -e 1G -f 2 -n 20 -w 5 --compare nccl -d half
gpu_step big.log 40 "" $L -n 3 -- $B allreduce -b 64M -e 1G -f 2 -n 20 -w 5 --compare nccl -d half
grep -hE '^####|correct|WRONG|rror|ERROR SUMMARY' $W/check.log $W/dead.log | cut -c1-220
grep -h -E '^####|^\[rank 0\] +[0-9]+ ' $W/big.log | awk '{ if ($1=="####") print substr($0,1,170); else print $3, $8, $12, $NF }'
