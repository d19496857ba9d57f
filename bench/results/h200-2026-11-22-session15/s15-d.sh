#!/usr/bin/env bash
# Session 15 call 4 (4 x H200): the relay broadcast (commhal_coll_broadcast_relay,
# COMMHAL_COLL_BCAST_RELAY=1 in place of the chain: root -> relay (b + k) % (n-1) ->
# the other non-roots). Correctness with it forced from 16 bytes (roots, 3 and 4 ranks,
# odd sizes, memcheck, dead rank); speed against the file's choice and NCCL 16M..1G.
# Then all-reduce 256M..1G with the committed file (copy-engine tail from 512M).
set -u
source scripts/lib-gpu.sh; gpu_session s15-d 540
L=".gpu/commhal launch"; B=.gpu/commhal-gpu-bench
F="COMMHAL_COLL_BCAST_RELAY=1 COMMHAL_COLL_BCAST_CHAIN_MIN=16 COMMHAL_COLL_BCAST_LL63_MAX=0 COMMHAL_COLL_BCAST_REDUCE_LL_MAX=0 COMMHAL_COLL_BCAST_SF_MIN=0"
for r in 0 1 2 3; do gpu_step check.log 30 "$F" $L -n 4 -- $B broadcast -r $r -b 16 -e 256M -f 8 -n 3 -w 1 -d half; done
gpu_step check.log 30 "$F" $L -n 3 -- $B broadcast -r 2 -b 1040 -e 80M -f 3 -n 3 -w 1 -d half
gpu_step check.log 30 "$F" $L -n 4 -- $B broadcast -r 1 -b 2M -e 16M -f 2 -n 301 -w 1 -d float
gpu_step check.log 60 "$F" $L -n 4 -- compute-sanitizer --tool memcheck --error-exitcode 3 $B broadcast -r 3 -b 16K -e 8M -f 8 -n 2 -w 1 -d half
gpu_step dead.log 30 "$F" $L -n 4 -- $B broadcast -r 0 -b 256M -e 256M --dead-rank 2 --timeout-ms 2000 -d half
gpu_step dead.log 30 "$F" $L -n 4 -- $B broadcast -r 0 -b 256M -e 256M --dead-rank 0 --timeout-ms 2000 -d half
R="COMMHAL_COLL_BCAST_RELAY=1 COMMHAL_COLL_BCAST_CHAIN_MIN=16777216 COMMHAL_COLL_BCAST_LL63_MAX=0"
O="-b 16M -e 1G -f 2 -n 20 -w 3 -d half --compare nccl"
gpu_step bc.log 40 "" $L -n 4 -- $B broadcast -r 1 $O
gpu_step bc.log 40 "$R" $L -n 4 -- $B broadcast -r 1 $O
gpu_step bc.log 40 "$R COMMHAL_COLL_CHAIN_UNROLL=4" $L -n 4 -- $B broadcast -r 1 $O
gpu_step bc.log 40 "$R" $L -n 4 -- $B broadcast -r 0 $O
gpu_step bc.log 40 "" $L -n 4 -- $B broadcast -r 0 $O
gpu_step bc.log 40 "$R" $L -n 3 -- $B broadcast -r 1 $O
gpu_step ar.log 40 "" $L -n 4 -- $B allreduce -b 256M -e 1G -f 2 -n 40 -w 5 -d half --compare nccl
grep -hE '^####|correct|WRONG|rror|ERROR SUMMARY' $W/check.log $W/dead.log | cut -c1-220
for f in bc ar; do
grep -h -E '^####|^\[rank 0\] +[0-9]+ ' $W/$f.log | awk '{ if ($1=="####") print substr($0,1,150); else print $3, $8, $12, $NF }' | grep -v "nccl\]$"
done
