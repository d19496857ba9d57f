#!/usr/bin/env bash
# Session 8, call 8: smoke after the kernel_plan / tuning-render refactors: every collective,
# 4 GPUs, 1K..1G x8 (LL, direct, push, ring and chain sizes), results checked
set -u
OUT=${OUT:-/tmp/out}; W=$OUT
source scripts/lib-gpu.sh; gpu_env s; export NCCL_NVLS_ENABLE=0; unset COMMHAL_ALLOW_MULTICAST; gpu_use_nvrtc s
export COMMHAL_CACHE_DIR=/tmp/commhal-kernel-cache COMMHAL_BOOTSTRAP_TIMEOUT_MS=60000
T0=$(date +%s); N=$(nvidia-smi -L | grep -c "^GPU"); (( N > 4 )) && N=4
B=.gpu/commhal-gpu-bench; L=".gpu/commhal launch"
run() { local log=$1 lim=$2 envs=$3; shift 3; (( $(date +%s) - T0 > 250 - lim )) && { echo "#### SKIPPED (time) $*" >> $W/$log; return; }; echo "#### $* (env: $envs)" >> $W/$log; env $envs timeout --kill-after=5 $lim "$@" >> $W/$log 2>&1; echo "#### rc=$? t=$(( $(date +%s) - T0 ))s" >> $W/$log; }
for c in allreduce allgather reducescatter broadcast reduce alltoall sendrecv; do
  run smoke-${N}gpu.log 30 "" $L -n $N -- $B $c -r 1 -b 1K -e 1G -f 8 -n 4 -w 1 -d half
done
run smoke-${N}gpu.log 30 "" $L -n $N -- $B allreduce -b 1000 -e 300M -f 9 -n 3 -w 1 -d float
grep -h "rc=\|WRONG\|SKIPPED\|rror" $W/*.log | sort | uniq -c; grep -c "all results correct" $W/smoke-*.log
