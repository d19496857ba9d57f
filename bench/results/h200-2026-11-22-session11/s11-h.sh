#!/usr/bin/env bash
# Session 11, call 8: a dead peer on the copy-engine routes and on the kernels
# (commhal-gpu-bench --dead-rank R: rank R leaves after the setup; every other rank must
# get an error from its sync within the bound, and every process must exit).
set -u
OUT=${OUT:-/tmp/out}; W=$OUT
source scripts/lib-gpu.sh; gpu_env s; export NCCL_NVLS_ENABLE=0; unset COMMHAL_ALLOW_MULTICAST; gpu_use_nvrtc s
export COMMHAL_CACHE_DIR=/tmp/commhal-kernel-cache COMMHAL_BOOTSTRAP_TIMEOUT_MS=60000
T0=$(date +%s)
L=".gpu/commhal launch"
run() { local log=$1 lim=$2 envs=$3; shift 3; (( $(date +%s) - T0 > 230 - lim )) && { echo "#### SKIPPED (time) $*" >> $W/$log; return; }; echo "#### $* (env: $envs)" >> $W/$log; env $envs timeout --kill-after=5 $lim "$@" >> $W/$log 2>&1; echo "#### rc=$? t=$(( $(date +%s) - T0 ))s" >> $W/$log; }
D="--timeout-ms 2000 -d half"
run dead.log 55 "" $L -n 2 -- .gpu/commhal-gpu-bench sendrecv -b 256M -e 256M --dead-rank 1 $D
run dead.log 55 "" $L -n 2 -- .gpu/commhal-gpu-bench broadcast -r 0 -b 256M -e 256M --dead-rank 1 $D
run dead.log 55 "" $L -n 4 -- .gpu/commhal-gpu-bench sendrecv -b 512M -e 512M --dead-rank 2 $D
run dead.log 30 "" $L -n 2 -- .gpu/commhal-gpu-bench sendrecv -b 1M -e 1M --dead-rank 1 $D
run dead.log 30 "" $L -n 4 -- .gpu/commhal-gpu-bench allreduce -b 64M -e 64M --dead-rank 2 $D
cat $W/dead.log | cut -c1-400
