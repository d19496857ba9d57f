#!/usr/bin/env bash
# Session 16 call 6 (4 x H200): NCCL's shape for the chains — fewer blocks with larger
# rounds (fewer releases per byte, same fill) — reduce and broadcast chain at 512M..1G,
# LL63 off.
set -u
source scripts/lib-gpu.sh; gpu_session s16-f 200
L=".gpu/commhal launch"; B=.gpu/commhal-gpu-bench
O="-b 512M -e 1G -f 2 -n 20 -w 3 -d half --compare nccl"
RD="COMMHAL_COLL_REDUCE_LL63_MAX=0"
gpu_step shape.log 30 "$RD" $L -n 4 -- $B reduce -r 1 $O
gpu_step shape.log 30 "$RD COMMHAL_COLL_MAX_BLOCKS=66 COMMHAL_COLL_CHAIN_UNROLL=16" $L -n 4 -- $B reduce -r 1 $O
gpu_step shape.log 30 "$RD COMMHAL_COLL_MAX_BLOCKS=96 COMMHAL_COLL_CHAIN_UNROLL=12" $L -n 4 -- $B reduce -r 1 $O
gpu_step shape.log 30 "$RD COMMHAL_COLL_CHAIN_UNROLL=12" $L -n 4 -- $B reduce -r 1 $O
gpu_step shape.log 30 "COMMHAL_COLL_BCAST_LL63_MAX=0 COMMHAL_COLL_MAX_BLOCKS=66 COMMHAL_COLL_CHAIN_UNROLL=16" $L -n 4 -- $B broadcast -r 1 $O
grep -h -E '^####|^\[rank 0\] +[0-9]+ |rror|WRONG' $W/shape.log | awk '{ if ($1=="####") print substr($0,1,190); else print $3, $8, $12, $NF }' | grep -v "nccl\]$"
