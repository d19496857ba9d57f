#!/usr/bin/env bash
# Session 19, call 2 (nvidia-h200-x8): why the 8-rank ring moves ~337 GB/s per GPU
# (4 ranks on the x4 host: ~366) while NCCL's 8-rank ring reaches ~348.
#  1. store_pattern micro (ring d -> d+1, every GPU at once) on 8, 4, 2 GPUs of this host
#     (also verifies 7ae90d8's shared setup on a GPU)
#  2. NCCL's choice and rings at 8 ranks (TUNING, GRAPH), all-gather / reduce-scatter
#  3. all-gather / reduce-scatter rings at 8 ranks: ring_unroll 8 / 16 / 32, 4 ranks too
set -u
source scripts/lib-gpu.sh
gpu_session s19b 560
TU=COMMHAL_GPU_TUNING=.gpu/tuned-8.toml
B=.gpu/commhal-gpu-bench; L=".gpu/commhal launch"
nvcc -O3 -std=c++20 -arch=sm_90 -o /tmp/store_pattern bench/micro/store_pattern.cu -lcuda > $W/store.log 2>&1 || echo "BUILD FAILED" >> $W/store.log
for n in 8 4 2; do gpu_step store.log 70 "" /tmp/store_pattern $n; done
gpu_step nccl-8gpu.log 40 "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,GRAPH,TUNING" $L -n 8 -- $B allgather -b 1G -e 1G -n 2 -w 1 -d half --compare nccl
gpu_step nccl-8gpu.log 40 "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING" $L -n 8 -- $B reducescatter -b 256M -e 1G -f 4 -n 2 -w 1 -d half --compare nccl
gpu_step nccl-8gpu.log 40 "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING" $L -n 8 -- $B allreduce -b 256M -e 1G -f 4 -n 2 -w 1 -d half --compare nccl
O="-b 256M -e 1G -f 2 -n 10 -w 2 -d half"
for u in 16 8 32 4; do
  gpu_step ring-8gpu.log 40 "$TU COMMHAL_COLL_AG_RING_MIN=1 COMMHAL_COLL_RING_UNROLL=$u" $L -n 8 -- $B allgather $O
  gpu_step ring-8gpu.log 40 "$TU COMMHAL_COLL_RS_RING_MIN=1 COMMHAL_COLL_RS_PUSH_MAX=1 COMMHAL_COLL_RING_UNROLL=$u" $L -n 8 -- $B reducescatter $O
done
gpu_step ring-4gpu.log 40 "COMMHAL_COLL_AG_RING_MIN=1" $L -n 4 -- $B allgather $O --compare nccl
gpu_step ring-4gpu.log 40 "COMMHAL_COLL_RS_RING_MIN=1" $L -n 4 -- $B reducescatter $O --compare nccl
gpu_step ring-8gpu.log 40 "$TU COMMHAL_COLL_AG_RING_MIN=1 COMMHAL_COLL_THREADS=256 COMMHAL_COLL_RING_UNROLL=32" $L -n 8 -- $B allgather $O
gpu_step ring-8gpu.log 40 "$TU COMMHAL_COLL_AG_RING_MIN=1 COMMHAL_COLL_MAX_BLOCKS=128" $L -n 8 -- $B allgather $O
grep -h "rc=\|SKIPPED\|WRONG\|BUILD" $W/*.log | sort | uniq -c
