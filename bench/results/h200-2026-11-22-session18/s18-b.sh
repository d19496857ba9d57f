#!/usr/bin/env bash
# Session 18 call 2: the chains' pipeline lag is hops x wave / link rate, wave = blocks x
# threads x unroll x 16 B (132 x 512 x 8 x 16 = 8.65 MB, ~23 us per hop). Earlier shape
# sweeps kept the wave at ~8.65 MB. Here: smaller waves, with 2-4 blocks per SM to hide
# the per-round release. Broadcast / reduce chain, LL63 off, 512M and 1G, f16, 4 GPUs.
set -u
source scripts/lib-gpu.sh; gpu_session s18-b 390
L=".gpu/commhal launch"; B=.gpu/commhal-gpu-bench
OFF="COMMHAL_COLL_BCAST_LL63_MAX=0 COMMHAL_COLL_REDUCE_LL63_MAX=0"
O="-b 512M -e 1G -f 2 -n 30 -w 3 -d half -r 1"
for c in broadcast reduce; do
gpu_step $c.log 30 "" $L -n 4 -- $B $c $O --compare nccl
done
for rep in 1 2; do
for v in "132 512 8" "132 512 4" "132 256 8" "264 256 4" "132 256 4" "264 256 2" "264 128 4" "396 128 4" "528 128 2" "132 512 2"; do set -- $v
for c in broadcast reduce; do
gpu_step $c.log 20 "$OFF COMMHAL_COLL_MAX_BLOCKS=$1 COMMHAL_COLL_THREADS=$2 COMMHAL_COLL_CHAIN_UNROLL=$3" $L -n 4 -- $B $c $O
done; done; done
gpu_step check.log 25 "$OFF COMMHAL_COLL_BCAST_CHAIN_MIN=16 COMMHAL_COLL_REDUCE_CHAIN_MIN=16 COMMHAL_COLL_MAX_BLOCKS=264 COMMHAL_COLL_THREADS=128 COMMHAL_COLL_CHAIN_UNROLL=4" $L -n 4 -- $B broadcast -r 2 -b 1040 -e 80M -f 9 -n 3 -w 1 -d half
gpu_step check.log 25 "$OFF COMMHAL_COLL_BCAST_CHAIN_MIN=16 COMMHAL_COLL_REDUCE_CHAIN_MIN=16 COMMHAL_COLL_MAX_BLOCKS=264 COMMHAL_COLL_THREADS=128 COMMHAL_COLL_CHAIN_UNROLL=4" $L -n 4 -- $B reduce -r 1 -b 1040 -e 80M -f 9 -n 3 -w 1 -d float
grep -hE 'correct|WRONG|rror' $W/check.log | cut -c1-200
for f in broadcast reduce; do
grep -h -E '^####|^\[rank 0\] +[0-9]+ ' $W/$f.log | grep -v "rc=" | awk '{ if ($1=="####") print substr($0,length($0)-110,110); else print $3, $8, $12, $NF }'
done
