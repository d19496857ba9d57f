#!/usr/bin/env bash
# Session 14 call 8 (4 x H200): the tuner with the LL16 column on 4 ranks (broadcast,
# reduce: the rooted LL16 cap and both LL63 windows together), then broadcast and reduce
# 1K-1G against NCCL with the file it wrote.
set -u
source scripts/lib-gpu.sh; gpu_session s14-h 400
L=".gpu/commhal launch"; B=.gpu/commhal-gpu-bench
cp algorithms/tuning/gpu-cuda-h200.toml $W/tune-4gpu.toml
gpu_step tune.log 200 "" .gpu/commhal tune --backend cuda-nvlink --ranks 4 --collectives broadcast,reduce -b 1K -e 1G -n 100 -w 10 --out $W/tune-4gpu.toml --json $W/tune-4gpu.json
for c in broadcast reduce; do
  gpu_step ab.log 60 "COMMHAL_GPU_TUNING=$W/tune-4gpu.toml" $L -n 4 -- $B $c -r 1 -b 1K -e 1G -f 2 -n 40 -w 5 -d half --compare nccl
done
grep -v '^\[rank [1-9]' $W/tune.log | grep -v "^#   tuner sweep" | tail -52
diff algorithms/tuning/gpu-cuda-h200.toml $W/tune-4gpu.toml | grep -v "note ="
grep -h -A25 'ratio nccl' $W/ab.log | grep '^\[rank 0\]' | awk '{print $3, $NF}' | paste - - - - - - -
