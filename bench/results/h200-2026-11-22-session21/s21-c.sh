#!/usr/bin/env bash
# Session 21, call 3 (nvidia-h200-x4): is a ring all-reduce done entirely by the copy
# engines (step-major, big chunks, per-chunk reduce kernels on a compute stream) faster
# than the kernels' 4360 µs at 1 GiB? bench/micro/ce_pipeline.cu part 4 with chunks of
# 16..128 MiB (session 11 stopped at 16 MiB: 325 GB/s and still rising), 2 and 4 copy
# streams; then the library's all-reduce for the same machine's reference.
set -u
source scripts/lib-gpu.sh
gpu_session s21c 200
nvcc -O3 -std=c++20 -arch=sm_90 -o /tmp/ce_pipeline bench/micro/ce_pipeline.cu -lcuda > $W/ce.log 2>&1 || { echo BUILD FAILED; cat $W/ce.log; exit 1; }
gpu_step ce.log 90 "CE_PARTS=4 CE_CHUNKS=16,32,64,128" /tmp/ce_pipeline 4
gpu_step ce.log 60 "CE_PARTS=1" /tmp/ce_pipeline 4
B=.gpu/commhal-gpu-bench; L=".gpu/commhal launch"
gpu_step ab.log 25 "" $L -n 4 -- $B allreduce -b 256M -e 1G -f 4 -n 40 -w 5 -d float
grep -h "rc=\|SKIPPED" $W/*.log | sort | uniq -c
