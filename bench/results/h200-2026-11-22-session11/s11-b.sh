#!/usr/bin/env bash
# Session 11, call 2: do several copy streams per GPU hide the ~8 us drain of each memop-fenced CE chunk?
# bench/micro/ce_pipeline.cu (copy streams x2 / x4) on 4 and 2 GPUs; the library's CE path
# (COMMHAL_GPU_PATH=dma) for 4-rank send/recv against NCCL.
set -u
OUT=${OUT:-/tmp/out}; W=$OUT
source scripts/lib-gpu.sh; gpu_env s; export NCCL_NVLS_ENABLE=0; unset COMMHAL_ALLOW_MULTICAST; gpu_use_nvrtc s
export COMMHAL_CACHE_DIR=/tmp/commhal-kernel-cache COMMHAL_BOOTSTRAP_TIMEOUT_MS=60000
T0=$(date +%s)
nvidia-smi topo -m > $W/topo.txt 2>&1
nvcc -O3 -std=c++20 -arch=sm_90 -o /tmp/ce_pipeline bench/micro/ce_pipeline.cu -lcuda > $W/ce-4gpu.log 2>&1 || { echo BUILD FAILED; run dma-4gpu.log 60 "COMMHAL_GPU_PATH=dma" $L -n 4 -- .gpu/commhal-gpu-bench sendrecv -r 1 -b 64M -e 1G -f 4 -n 20 -w 3 -d half --compare nccl
cat $W/ce-4gpu.log; exit 1; }
timeout 150 /tmp/ce_pipeline 4 >> $W/ce-4gpu.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))s" >> $W/ce-4gpu.log
timeout 100 /tmp/ce_pipeline 2 > $W/ce-2gpu.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))s" >> $W/ce-2gpu.log
L=".gpu/commhal launch"
run() { local log=$1 lim=$2 envs=$3; shift 3; (( $(date +%s) - T0 > 420 - lim )) && { echo "#### SKIPPED (time) $*" >> $W/$log; return; }; echo "#### $* (env: $envs)" >> $W/$log; env $envs timeout --kill-after=5 $lim "$@" >> $W/$log 2>&1; echo "#### rc=$? t=$(( $(date +%s) - T0 ))s" >> $W/$log; }
run dma-4gpu.log 60 "COMMHAL_GPU_PATH=dma" $L -n 4 -- .gpu/commhal-gpu-bench sendrecv -r 1 -b 64M -e 1G -f 4 -n 20 -w 3 -d half --compare nccl
cat $W/ce-4gpu.log $W/ce-2gpu.log
grep -h "rc=\|WRONG\|SKIPPED\|rror" $W/*.log | sort | uniq -c | head -30
