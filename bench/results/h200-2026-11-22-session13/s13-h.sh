#!/usr/bin/env bash
# Session 13 call 8 (2 x H200): after the review's refactor of the copy-engine flag wait
# (wait_flag_u32): every collective on the copy-engine path, the CE reduce forced, a dead
# rank, and the default reduce at 256M-1G against NCCL.
set -u
source scripts/lib-gpu.sh; gpu_session s13-h 150
L=".gpu/commhal launch"; B=.gpu/commhal-gpu-bench
for c in allreduce allgather reducescatter broadcast reduce alltoall sendrecv; do
  gpu_step check.log 20 "COMMHAL_GPU_PATH=dma" $L -n 2 -- $B $c -r 1 -b 1040 -e 16M -f 8 -n 3 -w 1 -d half
done
gpu_step check.log 30 "COMMHAL_COLL_REDUCE_CE_MIN=16" $L -n 2 -- $B reduce -r 0 -b 16 -e 256M -f 8 -n 3 -w 1 -d float
gpu_step check.log 30 "COMMHAL_COLL_REDUCE_CE_MIN=16" $L -n 2 -- $B reduce -r 1 -b 256M -e 256M --dead-rank 0 --timeout-ms 2000 -d half
gpu_step big.log 40 "" $L -n 2 -- $B reduce -r 1 -b 256M -e 1G -f 2 -n 20 -w 3 -d half --compare nccl
grep -hE '^####|correct|WRONG|rror' $W/check.log | cut -c1-200
grep -h -A5 'ratio nccl' $W/big.log | grep '^\[rank 0\]'
