#!/usr/bin/env bash
# Session 17 call 6 (4 x H200): chain lookahead (COMMHAL_EXP_CHAIN_AHEAD=D: a chain block
# waits for the previous rank's round k + D before its round k, so the flag it needs was
# raised a round or more ago) with smaller rounds, against the committed chains
# (unroll 8, D = 0); broadcast and reduce chains at 1 GiB, LL63 off. Correctness at odd
# sizes with the chains forced first.
set -u
source scripts/lib-gpu.sh; gpu_session s17-f 300
L=".gpu/commhal launch"; B=.gpu/commhal-gpu-bench
OFF="COMMHAL_COLL_BCAST_LL63_MAX=0 COMMHAL_COLL_REDUCE_LL63_MAX=0"
F="$OFF COMMHAL_COLL_BCAST_CHAIN_MIN=16 COMMHAL_COLL_REDUCE_CHAIN_MIN=16 COMMHAL_COLL_CHAIN_UNROLL=2 COMMHAL_EXP_CHAIN_AHEAD=3"
gpu_step check.log 30 "$F" $L -n 4 -- $B broadcast -r 2 -b 1040 -e 80M -f 3 -n 3 -w 1 -d half
gpu_step check.log 30 "$F" $L -n 3 -- $B reduce -r 1 -b 1040 -e 80M -f 3 -n 3 -w 1 -d float
O="-b 1G -e 1G -n 40 -w 5 -d half --compare nccl -r 1"
for c in broadcast reduce; do
for v in "8 0" "4 1" "8 1" "2 3" "4 2" "8 0"; do set -- $v
gpu_step $c.log 25 "$OFF COMMHAL_COLL_CHAIN_UNROLL=$1 COMMHAL_EXP_CHAIN_AHEAD=$2" $L -n 4 -- $B $c $O
done; done
grep -hE '^####|correct|WRONG|rror' $W/check.log | cut -c1-200
grep -h -E '^####|^\[rank 0\] +[0-9]+ ' $W/broadcast.log $W/reduce.log | awk '{ if ($1=="####") print substr($0,150,120); else print $3, $8, $12, $NF }' | grep -v "nccl\]$"
