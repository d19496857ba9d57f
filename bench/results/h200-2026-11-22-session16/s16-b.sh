#!/usr/bin/env bash
# Session 16 call 2 (4 x H200): (1) the broadcast share at small shares (call 1: the
# copy engines' part was the long pole at 30-50 %); (2) the chains with two or four
# blocks per SM and smaller rounds (a smaller fill, the per-round release hidden by the
# other block), broadcast and reduce at 256M..1G, LL63 off.
set -u
source scripts/lib-gpu.sh; gpu_session s16-b 560
L=".gpu/commhal launch"; B=.gpu/commhal-gpu-bench
O="-b 256M -e 1G -f 2 -n 20 -w 3 -d half --compare nccl"
M="COMMHAL_COLL_BCAST_CE_MIN=134217728"
for sh in 100 200; do gpu_step share.log 40 "$M COMMHAL_COLL_BCAST_CE_SHARE=$sh COMMHAL_COLL_BCAST_CE_CHUNKS=8" $L -n 4 -- $B broadcast -r 1 $O; done
gpu_step share.log 40 "$M COMMHAL_COLL_BCAST_CE_SHARE=100 COMMHAL_COLL_BCAST_CE_CHUNKS=4" $L -n 4 -- $B broadcast -r 1 $O
BC="COMMHAL_COLL_BCAST_LL63_MAX=0"
RD="COMMHAL_COLL_REDUCE_LL63_MAX=0"
for coll in broadcast reduce; do
  if [ $coll = broadcast ]; then X=$BC; else X=$RD; fi
  gpu_step chain.log 40 "$X" $L -n 4 -- $B $coll -r 1 $O
  gpu_step chain.log 40 "$X COMMHAL_COLL_MAX_BLOCKS=264 COMMHAL_COLL_CHAIN_UNROLL=4" $L -n 4 -- $B $coll -r 1 $O
  gpu_step chain.log 40 "$X COMMHAL_COLL_MAX_BLOCKS=264 COMMHAL_COLL_CHAIN_UNROLL=3" $L -n 4 -- $B $coll -r 1 $O
  gpu_step chain.log 40 "$X COMMHAL_COLL_MAX_BLOCKS=264 COMMHAL_COLL_CHAIN_UNROLL=2" $L -n 4 -- $B $coll -r 1 $O
  gpu_step chain.log 40 "$X COMMHAL_COLL_THREADS=256 COMMHAL_COLL_MAX_BLOCKS=528 COMMHAL_COLL_CHAIN_UNROLL=2" $L -n 4 -- $B $coll -r 1 $O
  gpu_step chain.log 40 "$X COMMHAL_COLL_THREADS=256 COMMHAL_COLL_MAX_BLOCKS=528 COMMHAL_COLL_CHAIN_UNROLL=4" $L -n 4 -- $B $coll -r 1 $O
done
gpu_step chain.log 40 "" $L -n 4 -- $B reduce -r 1 $O
for f in share chain; do
grep -h -E '^####|^\[rank 0\] +[0-9]+ |rror|WRONG' $W/$f.log | awk '{ if ($1=="####") print substr($0,1,190); else print $3, $8, $12, $NF }' | grep -v "nccl\]$"
done
