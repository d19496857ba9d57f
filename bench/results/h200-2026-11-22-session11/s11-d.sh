#!/usr/bin/env bash
# Session 11, call 4: does the SM store address pattern cap the peer store rate at ~365
# GB/s (bench/micro/store_pattern.cu, 4 and 2 GPUs)? What transport / protocol does
# NCCL use for the 2-rank reduce that reaches 370 GB/s (NCCL_DEBUG=INFO)? And
# ce_pipeline's parts 2-4 with 2 / 4 copy streams (call 2 stopped at part 1).
set -u
OUT=${OUT:-/tmp/out}; W=$OUT
source scripts/lib-gpu.sh; gpu_env s; export NCCL_NVLS_ENABLE=0; unset COMMHAL_ALLOW_MULTICAST; gpu_use_nvrtc s
export COMMHAL_CACHE_DIR=/tmp/commhal-kernel-cache COMMHAL_BOOTSTRAP_TIMEOUT_MS=60000
T0=$(date +%s)
nvcc -O3 -arch=sm_90 -o /tmp/store_pattern bench/micro/store_pattern.cu > $W/store-4gpu.log 2>&1 || { echo BUILD FAILED; cat $W/store-4gpu.log; exit 1; }
nvcc -O3 -std=c++20 -arch=sm_90 -o /tmp/ce_pipeline bench/micro/ce_pipeline.cu -lcuda > $W/ce-4gpu.log 2>&1 || { echo BUILD FAILED; cat $W/ce-4gpu.log; exit 1; }
timeout 120 /tmp/store_pattern 4 >> $W/store-4gpu.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))s" >> $W/store-4gpu.log
timeout 100 /tmp/store_pattern 2 > $W/store-2gpu.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))s" >> $W/store-2gpu.log
cat $W/store-4gpu.log $W/store-2gpu.log
L=".gpu/commhal launch"
run() { local log=$1 lim=$2 envs=$3; shift 3; (( $(date +%s) - T0 > 400 - lim )) && { echo "#### SKIPPED (time) $*" >> $W/$log; return; }; echo "#### $* (env: $envs)" >> $W/$log; env $envs timeout --kill-after=5 $lim "$@" >> $W/$log 2>&1; echo "#### rc=$? t=$(( $(date +%s) - T0 ))s" >> $W/$log; }
run nccl-debug-2gpu.log 60 "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,P2P,TUNING" $L -n 2 -- .gpu/commhal-gpu-bench reduce -r 1 -b 1G -e 1G -n 5 -w 1 -d half --compare nccl
grep -E "via P2P|via SHM|Reduce|P2P.*read|NCCL_P2P|channels|nChannels|algo|proto" $W/nccl-debug-2gpu.log | sort | uniq -c | sort -rn | head -30
timeout 150 /tmp/ce_pipeline 4 >> $W/ce-4gpu.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))s" >> $W/ce-4gpu.log
tail -40 $W/ce-4gpu.log
