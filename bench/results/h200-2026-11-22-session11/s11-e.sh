#!/usr/bin/env bash
# Session 11, call 5: SM store rate against the number of blocks (NCCL's 2-rank reduce
# reaches 370 GB/s on 24 channels; one block per SM caps at ~366). store_pattern, 4 and 2
# GPUs; NCCL's 4-rank all-reduce 1G protocol for reference.
set -u
OUT=${OUT:-/tmp/out}; W=$OUT
source scripts/lib-gpu.sh; gpu_env s; export NCCL_NVLS_ENABLE=0; unset COMMHAL_ALLOW_MULTICAST; gpu_use_nvrtc s
export COMMHAL_CACHE_DIR=/tmp/commhal-kernel-cache COMMHAL_BOOTSTRAP_TIMEOUT_MS=60000
T0=$(date +%s)
nvcc -O3 -arch=sm_90 -o /tmp/store_pattern bench/micro/store_pattern.cu > $W/store-4gpu.log 2>&1 || { echo BUILD FAILED; cat $W/store-4gpu.log; exit 1; }
timeout 120 /tmp/store_pattern 4 >> $W/store-4gpu.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))s" >> $W/store-4gpu.log
timeout 100 /tmp/store_pattern 2 > $W/store-2gpu.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))s" >> $W/store-2gpu.log
cat $W/store-4gpu.log $W/store-2gpu.log
