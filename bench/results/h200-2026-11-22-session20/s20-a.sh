#!/usr/bin/env bash
# Session 20, call 1 (nvidia-h200-x4): the chain overlap (chain_start in coll_nvlink.cu,
# COMMHAL_COLL_CHAIN_OVERLAP, default on). Checks first (--cycle-roots: n launches back to
# back with rotating roots, every reduce root checks its own sum), then an alternated
# A/B of overlap off / on with the chains forced (LL63 off, chain from 1M), then a tune
# of broadcast + reduce on 4 ranks with the overlap on.
set -u
source scripts/lib-gpu.sh
gpu_session s20a 555
B=.gpu/commhal-gpu-bench; L=".gpu/commhal launch"
BC="COMMHAL_COLL_BCAST_LL63_MAX=0 COMMHAL_COLL_BCAST_CHAIN_MIN=1048576"
RC="COMMHAL_COLL_REDUCE_LL63_MAX=0 COMMHAL_COLL_REDUCE_CHAIN_MIN=1048576"
nvidia-smi topo -m > $W/topo.log 2>&1
# correctness: chains forced, rotating roots, odd rank count, every dtype
gpu_step check.log 40 "$BC" $L -n 4 -- $B broadcast -r 3 -b 1M -e 64M -f 8 -n 20 -w 3 -d half --cycle-roots
gpu_step check.log 50 "$RC" $L -n 4 -- $B reduce -r 1 -b 1M -e 256M -f 4 -n 20 -w 3 -d float --cycle-roots
gpu_step check.log 40 "$RC" $L -n 3 -- $B reduce -r 2 -b 1M -e 64M -f 8 -n 20 -w 3 -d bfloat16 --cycle-roots
gpu_step check.log 40 "$RC" $L -n 4 -- $B reduce -r 0 -b 1M -e 64M -f 8 -n 20 -w 3 -d half --cycle-roots
# built-in tuning: every kernel the sizes choose, back to back, rotating roots
gpu_step check.log 60 "" $L -n 4 -- $B reduce -r 2 -b 1K -e 256M -f 4 -n 10 -w 2 -d half --cycle-roots
gpu_step check.log 60 "" $L -n 4 -- $B broadcast -r 1 -b 1K -e 256M -f 4 -n 10 -w 2 -d bfloat16 --cycle-roots
# a dead neighbour: every rank an error, no hang
gpu_step check.log 40 "$BC" $L -n 4 -- $B broadcast -r 1 -b 64M -d half --dead-rank 2 --timeout-ms 2000
gpu_step check.log 40 "$RC" $L -n 4 -- $B reduce -r 1 -b 64M -d half --dead-rank 0 --timeout-ms 2000
# A/B, alternated twice: overlap off, on
O="-b 64M -e 1G -f 4 -n 40 -w 5 -d half --compare nccl"
for i in 1 2; do
  for x in 0 1; do
    gpu_step ab.log 45 "COMMHAL_COLL_CHAIN_OVERLAP=$x $BC" $L -n 4 -- $B broadcast -r 1 $O
    gpu_step ab.log 45 "COMMHAL_COLL_CHAIN_OVERLAP=$x $RC" $L -n 4 -- $B reduce -r 1 $O
  done
done
# tune broadcast + reduce with the overlap (other sections and keys kept)
cp algorithms/tuning/gpu-cuda-h200.toml $W/tuned.toml
gpu_step tune.log 150 "" .gpu/commhal tune --backend cuda-nvlink --ranks 4 --collectives broadcast,reduce -b 1K -e 1G -n 60 -w 5 --out $W/tuned.toml --json $W/tune.json
grep -h "rc=\|SKIPPED" $W/*.log | sort | uniq -c
