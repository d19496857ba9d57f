#!/usr/bin/env bash
# Session 11, call 9: the copy-engine waits as a bounded kernel (commhal_coll_dma_wait):
# dead-peer checks again (every process must exit now), the routes' speed against NCCL,
# and the whole forced CE path (COMMHAL_GPU_PATH=dma) for correctness.
set -u
OUT=${OUT:-/tmp/out}; W=$OUT
source scripts/lib-gpu.sh; gpu_env s; export NCCL_NVLS_ENABLE=0; unset COMMHAL_ALLOW_MULTICAST; gpu_use_nvrtc s
export COMMHAL_CACHE_DIR=/tmp/commhal-kernel-cache COMMHAL_BOOTSTRAP_TIMEOUT_MS=60000
T0=$(date +%s)
L=".gpu/commhal launch"
run() { local log=$1 lim=$2 envs=$3; shift 3; (( $(date +%s) - T0 > 240 - lim )) && { echo "#### SKIPPED (time) $*" >> $W/$log; return; }; echo "#### $* (env: $envs)" >> $W/$log; env $envs timeout --kill-after=5 $lim "$@" >> $W/$log 2>&1; echo "#### rc=$? t=$(( $(date +%s) - T0 ))s" >> $W/$log; }
D="--timeout-ms 2000 -d half"
run dead.log 25 "" $L -n 2 -- .gpu/commhal-gpu-bench sendrecv -b 256M -e 256M --dead-rank 1 $D
run dead.log 25 "" $L -n 2 -- .gpu/commhal-gpu-bench broadcast -r 0 -b 256M -e 256M --dead-rank 1 $D
run dead.log 25 "" $L -n 4 -- .gpu/commhal-gpu-bench sendrecv -b 512M -e 512M --dead-rank 2 $D
O="-n 20 -w 3 -d half --compare nccl"
run routes.log 40 "" $L -n 4 -- .gpu/commhal-gpu-bench sendrecv -b 64M -e 1G -f 2 $O
run routes.log 40 "" $L -n 2 -- .gpu/commhal-gpu-bench broadcast -r 1 -b 64M -e 1G -f 2 $O
for c in allreduce reducescatter reduce broadcast sendrecv allgather alltoall; do
  run dma.log 25 "COMMHAL_GPU_PATH=dma" $L -n 4 -- .gpu/commhal-gpu-bench $c -r 3 -b 1K -e 64M -f 16 -n 5 -w 1 -d float
done
cut -c1-300 $W/dead.log
grep -A6 'ratio nccl' $W/routes.log | grep -E '(67108864|134217728|268435456|536870912|1073741824)'
grep -hE '^####|correct|WRONG|rror' $W/dma.log | cut -c1-200
