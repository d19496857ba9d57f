#!/usr/bin/env bash
# Session 11, call 6: one-direction SM store rate (store_pattern "uni"), and the 2-rank
# reduce chain (> 128M) with bigger rounds (COMMHAL_COLL_CHAIN_UNROLL 4 = the file's, 8,
# 16, 32) against NCCL; the 4-rank broadcast chain at 512M-1G with unroll 8 / 16.
set -u
OUT=${OUT:-/tmp/out}; W=$OUT
source scripts/lib-gpu.sh; gpu_env s; export NCCL_NVLS_ENABLE=0; unset COMMHAL_ALLOW_MULTICAST; gpu_use_nvrtc s
export COMMHAL_CACHE_DIR=/tmp/commhal-kernel-cache COMMHAL_BOOTSTRAP_TIMEOUT_MS=60000
T0=$(date +%s)
nvcc -O3 -arch=sm_90 -o /tmp/store_pattern bench/micro/store_pattern.cu > $W/store-2gpu.log 2>&1 || { echo BUILD FAILED; cat $W/store-2gpu.log; exit 1; }
timeout 100 /tmp/store_pattern 2 >> $W/store-2gpu.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))s" >> $W/store-2gpu.log
tail -6 $W/store-2gpu.log
L=".gpu/commhal launch"
run() { local log=$1 lim=$2 envs=$3; shift 3; (( $(date +%s) - T0 > 200 - lim )) && { echo "#### SKIPPED (time) $*" >> $W/$log; return; }; echo "#### $* (env: $envs)" >> $W/$log; env $envs timeout --kill-after=5 $lim "$@" >> $W/$log 2>&1; echo "#### rc=$? t=$(( $(date +%s) - T0 ))s" >> $W/$log; }
O="-n 20 -w 3 -d half --compare nccl"
for u in 4 8 16 32; do
  run unroll-2gpu.log 40 "COMMHAL_COLL_CHAIN_UNROLL=$u" $L -n 2 -- .gpu/commhal-gpu-bench reduce -r 1 -b 256M -e 1G -f 2 $O
done
for u in 8 16; do
  run unroll-4gpu.log 40 "COMMHAL_COLL_CHAIN_UNROLL=$u COMMHAL_COLL_BCAST_LL63_MAX=0" $L -n 4 -- .gpu/commhal-gpu-bench broadcast -r 1 -b 512M -e 1G -f 2 $O
done
for f in $W/unroll-*.log; do echo "== $f"; grep -E '^####|^\[rank 0\] +(268435456|536870912|1073741824) +[0-9.]+ +[0-9.]+$|^\[rank 0\] +(268435456|536870912|1073741824) +[0-9.]+ +[0-9.]+ *$' $f; grep -A5 'ratio nccl' $f | grep -E '(268435456|536870912|1073741824)'; done
grep -h "WRONG\|rror" $W/*.log | head
