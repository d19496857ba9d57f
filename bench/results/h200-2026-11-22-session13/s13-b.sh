#!/usr/bin/env bash
# Session 13 call 2 (2 x H200): reduce_pair.cu with more loads in flight, a small
# (L2-sized) destination ring, 24 blocks; 2-rank broadcast through LL63 above the LL16 cap.
set -u
source scripts/lib-gpu.sh; gpu_session s13-b 200
gpu_step micro.log 40 "" nvcc -O3 -std=c++20 -arch=sm_90 -o /tmp/reduce_pair bench/micro/reduce_pair.cu
gpu_step micro.log 60 "" /tmp/reduce_pair
L=".gpu/commhal launch"; B=.gpu/commhal-gpu-bench
O="-r 1 -b 64K -e 64M -f 2 -n 40 -w 5 -d half --compare nccl"
for c in "COMMHAL_COLL_BCAST_LL63_MAX=1073741824" "COMMHAL_COLL_BCAST_LL63_MAX=1073741824 COMMHAL_COLL_LL_CHUNK_MAX=65536"; do
  gpu_step mid.log 40 "$c" $L -n 2 -- $B broadcast $O
done
gpu_step mid.log 40 "COMMHAL_COLL_LL_CHUNK_MAX=65536" $L -n 2 -- $B reduce $O
cat $W/micro.log
grep -h -E '^####|^\[rank 0\] +[0-9]+ ' $W/mid.log | awk '{ if ($1=="####") print substr($0,1,190); else print $3, $8, $12, $NF }'
