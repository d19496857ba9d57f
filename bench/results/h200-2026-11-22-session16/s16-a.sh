#!/usr/bin/env bash
# Session 16 call 1 (4 x H200): the broadcast shared between the chain kernel and the
# copy engines (COMMHAL_COLL_BCAST_CE_MIN / _SHARE / _CHUNKS on 3+ ranks). Correctness
# with it forced from 16 bytes (roots, 3 and 4 ranks, odd sizes, 301 launches, memcheck,
# dead rank); then speed against NCCL at 128M..1G for several shares and chunk counts.
set -u
source scripts/lib-gpu.sh; gpu_session s16-a 560
L=".gpu/commhal launch"; B=.gpu/commhal-gpu-bench
F="COMMHAL_COLL_BCAST_CE_MIN=16 COMMHAL_COLL_BCAST_CE_SHARE=400 COMMHAL_COLL_BCAST_CE_CHUNKS=8"
for r in 0 1 2 3; do gpu_step check.log 30 "$F" $L -n 4 -- $B broadcast -r $r -b 16 -e 256M -f 8 -n 3 -w 1 -d half; done
gpu_step check.log 30 "$F" $L -n 3 -- $B broadcast -r 2 -b 1040 -e 80M -f 3 -n 3 -w 1 -d half
gpu_step check.log 30 "$F COMMHAL_COLL_BCAST_CE_CHUNKS=31" $L -n 4 -- $B broadcast -r 1 -b 2M -e 16M -f 2 -n 301 -w 1 -d float
gpu_step check.log 60 "$F" $L -n 4 -- compute-sanitizer --tool memcheck --error-exitcode 3 $B broadcast -r 3 -b 16K -e 8M -f 8 -n 2 -w 1 -d half
gpu_step dead.log 30 "$F" $L -n 4 -- $B broadcast -r 0 -b 256M -e 256M --dead-rank 2 --timeout-ms 2000 -d half
gpu_step dead.log 30 "$F" $L -n 4 -- $B broadcast -r 0 -b 256M -e 256M --dead-rank 0 --timeout-ms 2000 -d half
O="-b 128M -e 1G -f 2 -n 20 -w 3 -d half --compare nccl"
M="COMMHAL_COLL_BCAST_CE_MIN=134217728"
gpu_step bc.log 40 "" $L -n 4 -- $B broadcast -r 1 $O
for sh in 300 400 500; do gpu_step bc.log 40 "$M COMMHAL_COLL_BCAST_CE_SHARE=$sh COMMHAL_COLL_BCAST_CE_CHUNKS=8" $L -n 4 -- $B broadcast -r 1 $O; done
for ch in 4 16; do gpu_step bc.log 40 "$M COMMHAL_COLL_BCAST_CE_SHARE=400 COMMHAL_COLL_BCAST_CE_CHUNKS=$ch" $L -n 4 -- $B broadcast -r 1 $O; done
gpu_step bc.log 40 "$M COMMHAL_COLL_BCAST_CE_SHARE=400 COMMHAL_COLL_BCAST_CE_CHUNKS=8 COMMHAL_COLL_BCAST_LL63_MAX=0" $L -n 4 -- $B broadcast -r 1 $O
gpu_step bc.log 40 "$M COMMHAL_COLL_BCAST_CE_SHARE=400 COMMHAL_COLL_BCAST_CE_CHUNKS=8" $L -n 3 -- $B broadcast -r 0 $O
grep -hE '^####|correct|WRONG|rror|ERROR SUMMARY' $W/check.log $W/dead.log | cut -c1-220
for f in bc; do
grep -h -E '^####|^\[rank 0\] +[0-9]+ ' $W/$f.log | awk '{ if ($1=="####") print substr($0,1,170); else print $3, $8, $12, $NF }' | grep -v "nccl\]$"
done
