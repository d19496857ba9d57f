#!/usr/bin/env bash
# Session 13 call 3 (2 x H200): the copy engine for a 2-rank reduce (bench/micro/ce_reduce.cu:
# chunk schedules, one root kernel polling stream-written flags); commhal's reduce chain
# with 8 / 16 vectors per thread per round against NCCL.
set -u
source scripts/lib-gpu.sh; gpu_session s13-c 200
gpu_step micro.log 40 "" nvcc -O3 -std=c++20 -arch=sm_90 -o /tmp/ce_reduce bench/micro/ce_reduce.cu -lcuda
gpu_step micro.log 90 "" /tmp/ce_reduce
L=".gpu/commhal launch"; B=.gpu/commhal-gpu-bench
O="-r 0 -b 128M -e 1G -f 2 -n 20 -w 3 -d half --compare nccl"
for u in 16 8; do
  gpu_step big.log 40 "COMMHAL_COLL_CHAIN_UNROLL=$u COMMHAL_COLL_REDUCE_LL63_MAX=16" $L -n 2 -- $B reduce $O
done
cat $W/micro.log
grep -h -E '^####|^\[rank 0\] +[0-9]+ ' $W/big.log | awk '{ if ($1=="####") print substr($0,1,190); else print $3, $8, $12, $NF }'
