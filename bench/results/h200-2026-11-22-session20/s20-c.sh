#!/usr/bin/env bash
# Session 20, call 3 (nvidia-h200-x4): reduce-chain credits (COMMHAL_COLL_CHAIN_OVERLAP=2,
# the new default: a reduce chain after one of the same geometry stores round k once the
# next rank consumed round k of the previous launch; chain flags per launch parity).
# Checks first: --cycle-roots (n back-to-back launches with rotating roots, so credits run
# between launches whose chain positions differ; every root checks its own sum) on 2, 3
# and 4 ranks, every dtype, the built-in tuning's kernel mix, a dead rank. Then an
# alternated A/B of overlap 1 (neighbour start) / 2 (credits) x chain_unroll 8 / 16 / 32
# (reduce, chain forced), NCCL once for reference, and a tune of broadcast + reduce.
set -u
source scripts/lib-gpu.sh
gpu_session s20c 555
B=.gpu/commhal-gpu-bench; L=".gpu/commhal launch"
BC="COMMHAL_COLL_BCAST_LL63_MAX=0 COMMHAL_COLL_BCAST_CHAIN_MIN=1048576"
RC="COMMHAL_COLL_REDUCE_LL63_MAX=0 COMMHAL_COLL_REDUCE_CHAIN_MIN=1048576"
gpu_step check.log 50 "$RC" $L -n 4 -- $B reduce -r 1 -b 1M -e 256M -f 4 -n 20 -w 3 -d float --cycle-roots
gpu_step check.log 40 "$RC" $L -n 3 -- $B reduce -r 2 -b 1M -e 64M -f 8 -n 20 -w 3 -d bfloat16 --cycle-roots
gpu_step check.log 40 "$RC" $L -n 2 -- $B reduce -r 0 -b 1M -e 64M -f 8 -n 20 -w 3 -d half --cycle-roots
gpu_step check.log 40 "$RC COMMHAL_COLL_CHAIN_UNROLL=32" $L -n 4 -- $B reduce -r 3 -b 1M -e 64M -f 8 -n 20 -w 3 -d half --cycle-roots
gpu_step check.log 40 "$BC" $L -n 4 -- $B broadcast -r 3 -b 1M -e 64M -f 8 -n 20 -w 3 -d half --cycle-roots
gpu_step check.log 60 "" $L -n 4 -- $B reduce -r 2 -b 1K -e 1G -f 4 -n 10 -w 2 -d half --cycle-roots
gpu_step check.log 40 "$RC" $L -n 4 -- $B reduce -r 1 -b 64M -d half --dead-rank 3 --timeout-ms 2000
# A/B: overlap 1 / 2 x chain_unroll 8 / 16 / 32, reduce, chain forced, two passes
O="-b 256M -e 1G -f 4 -n 40 -w 5 -d half"
gpu_step ab.log 40 "$RC" $L -n 4 -- $B reduce -r 1 $O --compare nccl
for i in 1 2; do
  for u in 8 16 32; do
    for x in 1 2; do
      gpu_step ab.log 25 "COMMHAL_COLL_CHAIN_OVERLAP=$x COMMHAL_COLL_CHAIN_UNROLL=$u $RC" $L -n 4 -- $B reduce -r 1 $O
    done
  done
done
cp algorithms/tuning/gpu-cuda-h200.toml $W/tuned.toml
gpu_step tune.log 120 "" .gpu/commhal tune --backend cuda-nvlink --ranks 4 --collectives broadcast,reduce -b 1K -e 1G -n 60 -w 5 --out $W/tuned.toml --json $W/tune.json
grep -h "rc=\|SKIPPED" $W/*.log | sort | uniq -c
