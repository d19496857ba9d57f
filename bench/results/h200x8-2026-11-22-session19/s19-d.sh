#!/usr/bin/env bash
# Session 19, call 4 (nvidia-h200-x8): issue 7's closing run with the committed code
# (46a0e5c: [ranks.8] tuned, built into the binary; no COMMHAL_GPU_TUNING): 8-rank
# conformance for cuda-nvlink and cuda-dma, then every collective 1K..1G x2 with
# --compare nccl: all-reduce / all-gather / reduce-scatter in f16, f32, bf16, then
# broadcast / reduce (root 1), all-to-all, send/recv in f16.
set -u
source scripts/lib-gpu.sh
gpu_session s19d 530
C=.gpu/commhal; B=.gpu/commhal-gpu-bench
gpu_step conformance-8gpu.log 60 "" $C conformance --backend cuda-nvlink --ranks 8
gpu_step conformance-8gpu.log 60 "" $C conformance --backend cuda-dma --ranks 8
O="-b 1K -e 1G -f 2 -n 40 -w 5 --compare nccl"
for d in half float bfloat16; do
  for c in allreduce allgather reducescatter; do
    gpu_step bench-8gpu.log 60 "" $C launch -n 8 -- $B $c $O -d $d
  done
done
for c in broadcast reduce alltoall sendrecv; do
  gpu_step bench-8gpu.log 60 "" $C launch -n 8 -- $B $c -r 1 $O -d half
done
grep -h "rc=\|SKIPPED\|passed" $W/*.log | sort | uniq -c | head -40
