#!/usr/bin/env bash
# Session 8, call 5: every power-of-2 size (the closing tables so far sampled every 4x or
# 32x), every collective vs NCCL, 4 and 2 GPUs; committed tuning, unchanged kernels.
set -u
OUT=${OUT:-/tmp/out}; W=$OUT
source scripts/lib-gpu.sh; gpu_env s; export NCCL_NVLS_ENABLE=0; unset COMMHAL_ALLOW_MULTICAST; gpu_use_nvrtc s
export COMMHAL_CACHE_DIR=/tmp/commhal-kernel-cache COMMHAL_BOOTSTRAP_TIMEOUT_MS=60000
T0=$(date +%s)
B=.gpu/commhal-gpu-bench; L=".gpu/commhal launch"
run() { local log=$1 lim=$2 envs=$3; shift 3; (( $(date +%s) - T0 > 575 - lim )) && { echo "#### SKIPPED (time) $*" >> $W/$log; return; }; echo "#### $* (env: $envs)" >> $W/$log; env $envs timeout --kill-after=5 $lim "$@" >> $W/$log 2>&1; echo "#### rc=$? t=$(( $(date +%s) - T0 ))s" >> $W/$log; }
O="-n 40 -w 5 --compare nccl"
for N in 4 2; do for c in allreduce allgather reducescatter; do run dense-main-${N}gpu.log 60 "" $L -n $N -- $B $c -b 1K -e 1G -f 2 -d half $O; done; done
for N in 4 2; do for c in broadcast reduce alltoall sendrecv; do run dense-rooted-${N}gpu.log 60 "" $L -n $N -- $B $c -r 1 -b 1K -e 1G -f 2 -d half $O; done; done
for N in 4 2; do for d in bfloat16 float; do for c in allreduce allgather reducescatter; do run dense-dtypes-${N}gpu.log 50 "" $L -n $N -- $B $c -b 1K -e 1G -f 2 -d $d $O; done; done; done
grep -h "rc=\|WRONG\|SKIPPED" $W/*.log | sort | uniq -c | head -60; grep -c "all results correct" $W/*.log
