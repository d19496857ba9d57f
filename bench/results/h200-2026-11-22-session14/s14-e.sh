#!/usr/bin/env bash
# Session 14 call 5 (2 x H200): call 4's tuner run again with 100 iterations (10 timed
# groups of 10 launches instead of 2: call 4's small sizes had single-group spikes),
# then broadcast and reduce 1K-1G against NCCL with the file it wrote.
set -u
source scripts/lib-gpu.sh; gpu_session s14-e 420
L=".gpu/commhal launch"; B=.gpu/commhal-gpu-bench
cp algorithms/tuning/gpu-cuda-h200.toml $W/tune-2gpu.toml
gpu_step tune.log 240 "" .gpu/commhal tune --backend cuda-nvlink --ranks 2 --collectives broadcast,reduce -b 1K -e 1G -n 100 -w 10 --out $W/tune-2gpu.toml --json $W/tune-2gpu.json
for c in broadcast reduce; do
  gpu_step ab.log 60 "COMMHAL_GPU_TUNING=$W/tune-2gpu.toml" $L -n 2 -- $B $c -r 1 -b 1K -e 1G -f 2 -n 100 -w 10 -d half --compare nccl
done
grep -v '^\[rank [1-9]' $W/tune.log | grep -v "^#   tuner sweep" | tail -52
diff algorithms/tuning/gpu-cuda-h200.toml $W/tune-2gpu.toml | grep -v "note ="
grep -h -A25 'ratio nccl' $W/ab.log | grep '^\[rank 0\]' | awk '{print $3, $NF}' | paste - - - - - - -
