#!/usr/bin/env bash
# Session 14 call 3 (2 x H200): the copy-engine reduce with chunks of 5/8 of what is left
# (PAIR_CE_KEEP_EIGHTHS = 3; halves before). Correctness with it forced from 16 bytes
# (dtypes, roots, odd sizes, sizes across the floor, 301 launches, memcheck), a dead
# rank, speed against NCCL (as committed, both roots and three dtypes; forced from 64M).
set -u
source scripts/lib-gpu.sh; gpu_session s14-c 330
L=".gpu/commhal launch"; B=.gpu/commhal-gpu-bench
F="COMMHAL_COLL_REDUCE_CE_MIN=16"
for d in float half bfloat16; do
  gpu_step check.log 30 "$F" $L -n 2 -- $B reduce -r 1 -b 16 -e 256M -f 8 -n 3 -w 1 -d $d
done
gpu_step check.log 30 "$F" $L -n 2 -- $B reduce -r 0 -b 1040 -e 80M -f 3 -n 3 -w 1 -d half
gpu_step check.log 30 "$F" $L -n 2 -- $B reduce -r 0 -b 2M -e 16M -f 2 -n 301 -w 1 -d float
for s in 5592400 5592416; do gpu_step check.log 30 "$F" $L -n 2 -- $B reduce -r 1 -b $s -e $s -n 50 -w 1 -d half; done
gpu_step check.log 30 "$F" $L -n 2 -- $B reduce -r 1 -b 6291472 -e 6291472 -n 50 -w 1 -d bfloat16
gpu_step check.log 60 "$F" $L -n 2 -- compute-sanitizer --tool memcheck --error-exitcode 3 $B reduce -r 1 -b 16K -e 32M -f 8 -n 2 -w 1 -d half
gpu_step dead.log 30 "$F" $L -n 2 -- $B reduce -r 0 -b 256M -e 256M --dead-rank 1 --timeout-ms 2000 -d half
gpu_step dead.log 30 "$F" $L -n 2 -- $B reduce -r 1 -b 256M -e 256M --dead-rank 1 --timeout-ms 2000 -d half
O="-b 64M -e 1G -f 2 -n 20 -w 3 --compare nccl"
gpu_step big.log 40 "" $L -n 2 -- $B reduce -r 0 $O -d half
gpu_step big.log 40 "" $L -n 2 -- $B reduce -r 1 $O -d half
gpu_step big.log 40 "" $L -n 2 -- $B reduce -r 1 $O -d float
gpu_step big.log 40 "" $L -n 2 -- $B reduce -r 0 $O -d bfloat16
gpu_step big.log 40 "COMMHAL_COLL_REDUCE_CE_MIN=67108864" $L -n 2 -- $B reduce -r 0 -b 64M -e 256M -f 2 -n 20 -w 3 -d half --compare nccl
grep -hE '^####|correct|WRONG|rror|ERROR SUMMARY' $W/check.log $W/dead.log | cut -c1-200
grep -h -E '^####|^\[rank 0\] +[0-9]+ ' $W/big.log | awk '{ if ($1=="####") print substr($0,1,170); else print $3, $8, $12, $NF }'
