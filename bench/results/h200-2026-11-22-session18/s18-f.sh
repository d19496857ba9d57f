#!/usr/bin/env bash
# Session 18 call 7: the kernel-name refactor (typed_kernel!: kernel_name and dma.rs's
# two kernels) on GPUs: every route of every collective (sizes 1K..1G x32, checked),
# three dtypes for the reducing ones, the 2-rank copy-engine reduce and the dma path.
set -u
source scripts/lib-gpu.sh; gpu_session s18-f 190
L=".gpu/commhal launch"; B=.gpu/commhal-gpu-bench
S="-b 1K -e 1G -f 32 -n 3 -w 1"
for d in half bfloat16 float; do
for c in allreduce reducescatter reduce; do gpu_step check.log 25 "" $L -n 4 -- $B $c $S -d $d; done; done
for c in allgather broadcast alltoall sendrecv; do gpu_step check.log 25 "" $L -n 4 -- $B $c $S -d half; done
gpu_step check.log 25 "" $L -n 2 -- $B reduce -b 256M -e 1G -f 2 -n 3 -w 1 -d bfloat16
gpu_step check.log 25 "COMMHAL_GPU_PATH=dma" $L -n 4 -- $B allreduce -b 1K -e 64M -f 32 -n 3 -w 1 -d float
grep -c "all results correct" $W/check.log; grep -c "^#### rc=0" $W/check.log; grep -hE "WRONG|rror|SKIPPED|rc=[1-9]" $W/check.log | head
