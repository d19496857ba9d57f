#!/usr/bin/env bash
# Session 19, call 1 (nvidia-h200-x8): issue 7 — the first 8-GPU run.
# conformance (cuda-nvlink, cuda-dma) on 8 ranks; `commhal tune --ranks 8` into a copy
# of the committed file; all-reduce / all-gather / reduce-scatter f16 and f32, 1K..1G x2,
# --compare nccl, with the tuned file (COMMHAL_GPU_TUNING) when the tuner wrote it.
set -u
source scripts/lib-gpu.sh
gpu_session s19a 585
C=.gpu/commhal
gpu_step topo.log 20 "" bash -c 'nvidia-smi -L; nvidia-smi topo -m; nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.max.sm --format=csv'
gpu_step conformance-8gpu.log 90 "" $C conformance --backend cuda-nvlink --ranks 8
gpu_step conformance-8gpu.log 90 "" $C conformance --backend cuda-dma --ranks 8
cp algorithms/tuning/gpu-cuda-h200.toml $W/gpu-cuda-h200.toml
gpu_step tune-8gpu.log 260 "" $C tune --backend cuda-nvlink --ranks 8 -b 1K -e 1G -n 60 -w 5 --out $W/gpu-cuda-h200.toml --json $W/tune-8gpu.json
TU=""
grep -q '^\[ranks.8\]' $W/gpu-cuda-h200.toml && ! grep -A1 '^\[ranks.8\]' $W/gpu-cuda-h200.toml | grep -q 'tuned = false' && TU="COMMHAL_GPU_TUNING=$W/gpu-cuda-h200.toml"
echo "tuning: ${TU:-built-in}" >> $W/bench-8gpu.log
for d in half float; do
  for c in allreduce allgather reducescatter; do
    gpu_step bench-8gpu.log 70 "$TU" $C launch -n 8 -- .gpu/commhal-gpu-bench $c -b 1K -e 1G -f 2 -n 40 -w 5 -d $d --compare nccl
  done
done
grep -h "rc=\|SKIPPED\|passed\|WRONG\|wrong" $W/*.log | sort | uniq -c | head -40
