#!/usr/bin/env bash
# Session 13 call 1 (2 x H200): where the 2-rank reduce chain loses ~1.5 % to NCCL at
# 256M-1G. (1) bench/micro/reduce_pair.cu takes the chain apart (flags, receiver wait,
# receiver reduce, round size, blocks per SM, warp units). (2) commhal's reduce with
# the grid / unroll knobs the micro points at, against NCCL. (3) 2-rank reduce and
# broadcast at 128K-4M with a lower LL16 cap (LL63 from there), against NCCL.
set -u
source scripts/lib-gpu.sh; gpu_session s13-a 330
gpu_step micro.log 40 "" nvcc -O3 -std=c++20 -arch=sm_90 -o /tmp/reduce_pair bench/micro/reduce_pair.cu
gpu_step micro.log 60 "" /tmp/reduce_pair
L=".gpu/commhal launch"; B=.gpu/commhal-gpu-bench
O="-r 0 -b 64M -e 1G -f 2 -n 20 -w 3 -d half --compare nccl"
gpu_step big.log 40 "" $L -n 2 -- $B reduce $O
gpu_step big.log 40 "COMMHAL_COLL_THREADS=256 COMMHAL_COLL_MAX_BLOCKS=264" $L -n 2 -- $B reduce $O
gpu_step big.log 40 "COMMHAL_COLL_THREADS=256 COMMHAL_COLL_MAX_BLOCKS=264 COMMHAL_COLL_CHAIN_UNROLL=8" $L -n 2 -- $B reduce $O
gpu_step big.log 40 "COMMHAL_COLL_THREADS=128 COMMHAL_COLL_MAX_BLOCKS=528 COMMHAL_COLL_CHAIN_UNROLL=8" $L -n 2 -- $B reduce $O
gpu_step big.log 40 "COMMHAL_COLL_REDUCE_LL63_MAX=16 COMMHAL_COLL_REDUCE_CHAIN_MIN=16" $L -n 2 -- $B reduce $O
O="-r 1 -b 128K -e 4M -f 2 -n 40 -w 5 -d half --compare nccl"
for c in "" "COMMHAL_COLL_LL_CHUNK_MAX=262144" "COMMHAL_COLL_LL_CHUNK_MAX=131072"; do
  gpu_step mid.log 30 "$c" $L -n 2 -- $B reduce $O
  gpu_step mid.log 30 "$c" $L -n 2 -- $B broadcast $O
done
cat $W/micro.log
for f in big mid; do
  echo "== $f"
  grep -h -E '^####|^\[rank 0\] +[0-9]+ ' $W/$f.log | awk '{ if ($1=="####") print substr($0,1,170); else print $3, $8, $12, $NF }'
done
