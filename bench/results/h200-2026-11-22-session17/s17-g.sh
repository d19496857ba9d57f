#!/usr/bin/env bash
# Session 17 call 7: call 6 again with the round count computed once per block (call 6
# recounted it every round: O(rounds^2), which swamped the comparison).
set -u
source scripts/lib-gpu.sh; gpu_session s17-g 170
L=".gpu/commhal launch"; B=.gpu/commhal-gpu-bench
OFF="COMMHAL_COLL_BCAST_LL63_MAX=0 COMMHAL_COLL_REDUCE_LL63_MAX=0"
F="$OFF COMMHAL_COLL_BCAST_CHAIN_MIN=16 COMMHAL_COLL_CHAIN_UNROLL=4 COMMHAL_EXP_CHAIN_AHEAD=1"
gpu_step check.log 20 "$F" $L -n 4 -- $B broadcast -r 2 -b 1040 -e 80M -f 9 -n 3 -w 1 -d half
O="-b 1G -e 1G -n 30 -w 3 -d half -r 1"
for c in broadcast reduce; do
for v in "8 0" "4 1" "8 1" "4 0"; do set -- $v
gpu_step $c.log 20 "$OFF COMMHAL_COLL_CHAIN_UNROLL=$1 COMMHAL_EXP_CHAIN_AHEAD=$2" $L -n 4 -- $B $c $O
done; done
grep -hE 'correct|WRONG|rror' $W/check.log | cut -c1-200
grep -h -E '^####|^\[rank 0\] +[0-9]+ ' $W/broadcast.log $W/reduce.log | awk '{ if ($1=="####") print substr($0,170,90); else print $3, $8, $12, $NF }'
