#!/usr/bin/env bash
# Session 14 call 1 (2 x H200): bench/micro/ce_lanes.cu (where the copy-engine reduce's
# fixed cost goes; two lanes: two push streams, or a push plus a pull); commhal's reduce
# 64M-1G against NCCL as it stands (both roots).
set -u
source scripts/lib-gpu.sh; gpu_session s14-a 240
gpu_step micro.log 40 "" nvcc -O3 -std=c++20 -arch=sm_90 -o /tmp/ce_lanes bench/micro/ce_lanes.cu -lcuda
gpu_step micro.log 120 "" /tmp/ce_lanes
L=".gpu/commhal launch"; B=.gpu/commhal-gpu-bench
for r in 0 1; do
  gpu_step big.log 40 "" $L -n 2 -- $B reduce -r $r -b 64M -e 1G -f 2 -n 20 -w 3 -d half --compare nccl
done
cat $W/micro.log
grep -h -E '^####|^\[rank 0\] +[0-9]+ ' $W/big.log | awk '{ if ($1=="####") print substr($0,1,190); else print $3, $8, $12, $NF }'
