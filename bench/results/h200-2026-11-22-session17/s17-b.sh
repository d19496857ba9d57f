#!/usr/bin/env bash
# Session 17 call 2 (4 x H200, committed code): larger ring rounds for the all-reduce
# ring + copy-engine tail (ring_unroll 24 / 32 against the file's 16) and larger chain
# rounds for the 1 GiB broadcast chain (chain_unroll 12 / 16 against 8, LL63 off).
set -u
source scripts/lib-gpu.sh; gpu_session s17-b 330
L=".gpu/commhal launch"; B=.gpu/commhal-gpu-bench
O="-b 512M -e 1G -f 2 -n 40 -w 5 -d half --compare nccl"
for i in 1 2; do
for u in 16 24 32; do gpu_step ar.log 40 "COMMHAL_COLL_RING_UNROLL=$u" $L -n 4 -- $B allreduce $O; done
done
for u in 8 12 16 8; do gpu_step bc.log 30 "COMMHAL_COLL_BCAST_LL63_MAX=0 COMMHAL_COLL_CHAIN_UNROLL=$u" $L -n 4 -- $B broadcast -b 1G -e 1G -n 40 -w 5 -d half --compare nccl; done
grep -hE 'correct|WRONG|rror' $W/ar.log $W/bc.log | cut -c1-200 | head
grep -h -E '^####|^\[rank 0\] +[0-9]+ ' $W/ar.log $W/bc.log | awk '{ if ($1=="####") print substr($0,1,170); else print $3, $8, $12, $NF }' | grep -v "nccl\]$"
