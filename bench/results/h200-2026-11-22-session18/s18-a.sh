#!/usr/bin/env bash
# Session 18 call 1: (a) chain lookahead (patch chain-ahead, COMMHAL_EXP_CHAIN_AHEAD=D):
# check, then broadcast/reduce 1G with unroll/D pairs, alternated twice; (b) ring unroll
# 16 vs 32 for all-reduce 1G (alternated 3x) and all-gather / reduce-scatter 1G and 16M.
set -u
source scripts/lib-gpu.sh; gpu_session s18-a 330
L=".gpu/commhal launch"; B=.gpu/commhal-gpu-bench
OFF="COMMHAL_COLL_BCAST_LL63_MAX=0 COMMHAL_COLL_REDUCE_LL63_MAX=0"
F="$OFF COMMHAL_COLL_BCAST_CHAIN_MIN=16 COMMHAL_COLL_REDUCE_CHAIN_MIN=16 COMMHAL_COLL_CHAIN_UNROLL=4 COMMHAL_EXP_CHAIN_AHEAD=2"
gpu_step check.log 25 "$F" $L -n 4 -- $B broadcast -r 2 -b 1040 -e 80M -f 9 -n 3 -w 1 -d half
gpu_step check.log 25 "$F" $L -n 4 -- $B reduce -r 1 -b 1040 -e 80M -f 9 -n 3 -w 1 -d float
gpu_step check.log 25 "$F" $L -n 3 -- $B reduce -r 0 -b 1040 -e 80M -f 9 -n 3 -w 1 -d bfloat16
O="-b 1G -e 1G -n 30 -w 3 -d half -r 1"
for rep in 1 2; do
for c in broadcast reduce; do
for v in "8 0" "4 1" "8 1" "4 2" "8 2"; do set -- $v
gpu_step $c.log 20 "$OFF COMMHAL_COLL_CHAIN_UNROLL=$1 COMMHAL_EXP_CHAIN_AHEAD=$2" $L -n 4 -- $B $c $O
done; done; done
for rep in 1 2 3; do for u in 16 32; do
gpu_step ar.log 20 "COMMHAL_COLL_RING_UNROLL=$u" $L -n 4 -- $B allreduce -b 1G -e 1G -n 40 -w 5 -d half
done; done
for c in allgather reducescatter; do for u in 16 32 16 32; do
gpu_step agrs.log 25 "COMMHAL_COLL_RING_UNROLL=$u" $L -n 4 -- $B $c -b 16M -e 1G -f 64 -n 40 -w 5 -d half
done; done
grep -hE 'correct|WRONG|rror' $W/check.log | cut -c1-200
for f in broadcast reduce ar agrs; do
grep -h -E '^####|^\[rank 0\] +[0-9]+ ' $W/$f.log | awk '{ if ($1=="####") print substr($0,1,40), substr($0,length($0)-90,90); else print $3, $8, $12, $NF }'
done
