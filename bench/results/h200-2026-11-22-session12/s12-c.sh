#!/usr/bin/env bash
# Session 12, call 4: where the LL63 chains' fixed cost comes from (the direct LL63
# reduce of calls 1-2 took 9.2 us flat from 32K to 256K with one hop, so hops are not
# all of it): LL63 forced from 1K (LL16 off) for reduce and broadcast on 2 and 4 ranks,
# with and without PDL, with fewer blocks; then the two session-11 micros that were
# changed after their last GPU run (per-variant clear + check).
set -u
source scripts/lib-gpu.sh; gpu_session s12-c 200
L=".gpu/commhal launch"; B=.gpu/commhal-gpu-bench
O="-b 1K -e 4M -f 4 -n 40 -w 5 -d half"
F="COMMHAL_COLL_LL_CHUNK_MAX=0"
gpu_step ll63.log 25 "" $L -n 2 -- $B reduce -r 1 $O
gpu_step ll63.log 25 "$F" $L -n 2 -- $B reduce -r 1 $O
gpu_step ll63.log 25 "" $L -n 4 -- $B reduce -r 1 $O
gpu_step ll63.log 25 "$F" $L -n 4 -- $B reduce -r 1 $O
gpu_step ll63.log 25 "$F COMMHAL_COLL_PDL=0" $L -n 4 -- $B reduce -r 1 $O
gpu_step ll63.log 25 "$F COMMHAL_COLL_MAX_BLOCKS=8" $L -n 4 -- $B reduce -r 1 $O
gpu_step ll63.log 25 "$F" $L -n 4 -- $B broadcast -r 1 $O
gpu_step ll63.log 25 "$F COMMHAL_COLL_BCAST_CE_MIN=0" $L -n 2 -- $B broadcast -r 1 $O
gpu_step ll63.log 25 "$F" $L -n 4 -- $B reduce -r 1 $O --batch 1
gpu_step ll63.log 25 "" $L -n 4 -- $B reduce -r 1 $O --batch 1
C=-std=c++20
gpu_step micro.log 60 "" nvcc -O3 $C -arch=sm_90 -o /tmp/store_pattern bench/micro/store_pattern.cu -lcuda
gpu_step micro.log 40 "" /tmp/store_pattern 2
gpu_step micro.log 60 "" nvcc -O3 $C -arch=sm_90 -o /tmp/ce_pipeline bench/micro/ce_pipeline.cu -lcuda
gpu_step micro.log 50 "" /tmp/ce_pipeline 2
grep -v '^\[rank [123]\]' $W/ll63.log | grep -E '^####|^\[rank 0\] +[0-9]+ ' | grep -v nccl | awk '{ if ($1=="####") print substr($0,1,200); else print $3, $8, $12 }'
grep -iE '^####|wrong|error|fail|GB/s' $W/micro.log | cut -c1-160 | head -60
