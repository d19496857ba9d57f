#!/usr/bin/env bash
# Session 12: what is left of LL63's fixed cost on 2 ranks after the small region
# (LL63 forced: 4.5 us at 16K-256K, LL16 2.7): grid shape, PDL, timing batch.
set -u
source scripts/lib-gpu.sh; gpu_session s12-k 100
L=".gpu/commhal launch"; B=.gpu/commhal-gpu-bench
F="COMMHAL_COLL_LL_CHUNK_MAX=0"
O="-b 1K -e 256K -f 4 -n 60 -w 5 -d half"
gpu_step k.log 15 "" $L -n 2 -- $B reduce -r 1 $O
gpu_step k.log 15 "$F" $L -n 2 -- $B reduce -r 1 $O
gpu_step k.log 15 "$F COMMHAL_COLL_MAX_BLOCKS=1" $L -n 2 -- $B reduce -r 1 $O
gpu_step k.log 15 "$F COMMHAL_COLL_THREADS=64" $L -n 2 -- $B reduce -r 1 $O
gpu_step k.log 15 "$F COMMHAL_COLL_PDL=0" $L -n 2 -- $B reduce -r 1 $O
gpu_step k.log 15 "COMMHAL_COLL_PDL=0" $L -n 2 -- $B reduce -r 1 $O
gpu_step k.log 15 "$F" $L -n 2 -- $B reduce -r 1 $O --batch 1
gpu_step k.log 15 "" $L -n 2 -- $B reduce -r 1 $O --batch 1
gpu_step k.log 15 "$F" $L -n 2 -- $B reduce -r 1 $O -G
gpu_step k.log 15 "" $L -n 2 -- $B reduce -r 1 $O -G
grep -hv '^\[rank [123]\]' $W/k.log | grep -E '^####|^\[rank 0\] +[0-9]+ ' | awk '{ if ($1=="####") print substr($0,1,160); else print $3, $8, $12, $NF }'
