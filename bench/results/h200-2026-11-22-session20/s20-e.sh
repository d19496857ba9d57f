#!/usr/bin/env bash
# Session 20, call 5 (nvidia-h200-x4): the staged broadcast chain (the chunk goes into
# the next rank's staging, each rank copies it into its own output, so back-to-back
# broadcasts take credits like the reduce chain; on with COMMHAL_COLL_CHAIN_OVERLAP=2,
# the default). Checks, an A/B against the direct chain (overlap 1), the tune of
# broadcast + reduce that the closing run uses.
set -u
source scripts/lib-gpu.sh
gpu_session s20e 200
B=.gpu/commhal-gpu-bench; L=".gpu/commhal launch"
BC="COMMHAL_COLL_BCAST_LL63_MAX=0 COMMHAL_COLL_BCAST_CHAIN_MIN=1048576"
gpu_step check.log 30 "$BC" $L -n 4 -- $B broadcast -r 2 -b 1M -e 64M -f 8 -n 20 -w 3 -d half --cycle-roots
gpu_step check.log 30 "$BC" $L -n 3 -- $B broadcast -r 1 -b 1M -e 64M -f 8 -n 20 -w 3 -d float --cycle-roots
gpu_step check.log 30 "$BC" $L -n 4 -- $B broadcast -r 1 -b 64M -d half --dead-rank 3 --timeout-ms 2000
O="-b 256M -e 1G -f 4 -n 40 -w 5 -d half"
gpu_step ab.log 30 "$BC" $L -n 4 -- $B broadcast -r 1 $O --compare nccl
for i in 1 2; do
  for x in 1 2; do
    gpu_step ab.log 20 "COMMHAL_COLL_CHAIN_OVERLAP=$x $BC" $L -n 4 -- $B broadcast -r 1 $O
  done
done
cp algorithms/tuning/gpu-cuda-h200.toml $W/tuned.toml
gpu_step tune.log 70 "" .gpu/commhal tune --backend cuda-nvlink --ranks 4 --collectives broadcast,reduce -b 1K -e 1G -n 60 -w 5 --out $W/tuned.toml --json $W/tune.json
grep -h "rc=\|SKIPPED" $W/*.log | sort | uniq -c
