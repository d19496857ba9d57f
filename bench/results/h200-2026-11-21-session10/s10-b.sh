#!/usr/bin/env bash
# Session 10, call 2: the tuner with the LL63 candidate (broadcast, reduce; 1K..1G) on 4
# and 2 ranks, then every power-of-2 size of broadcast / reduce against NCCL with its file
set -u
OUT=${OUT:-/tmp/out}; W=$OUT
source scripts/lib-gpu.sh; gpu_env s; export NCCL_NVLS_ENABLE=0; unset COMMHAL_ALLOW_MULTICAST; gpu_use_nvrtc s
export COMMHAL_CACHE_DIR=/tmp/commhal-kernel-cache COMMHAL_BOOTSTRAP_TIMEOUT_MS=60000
T0=$(date +%s)
B=.gpu/commhal-gpu-bench; L=".gpu/commhal launch"
run() { local log=$1 lim=$2 envs=$3; shift 3; (( $(date +%s) - T0 > 575 - lim )) && { echo "#### SKIPPED (time) $*" >> $W/$log; return; }; echo "#### $* (env: $envs)" >> $W/$log; env $envs timeout --kill-after=5 $lim "$@" >> $W/$log 2>&1; echo "#### rc=$? t=$(( $(date +%s) - T0 ))s" >> $W/$log; }
cp algorithms/tuning/gpu-cuda-h200.toml $W/gpu-cuda-h200.toml
for N in 4 2; do
  run tune.log 200 "" .gpu/commhal tune --backend cuda-nvlink --ranks $N --collectives broadcast,reduce -e 1G --out $W/gpu-cuda-h200.toml --json $W/tune-${N}gpu.json
done
O="-n 40 -w 5 -d half --compare nccl"
for N in 4 2; do for c in broadcast reduce; do
  run rooted-${N}gpu.log 70 "COMMHAL_GPU_TUNING=$W/gpu-cuda-h200.toml" $L -n $N -- $B $c -r 1 -b 1K -e 1G -f 2 $O
done; done
grep -h "rc=\|WRONG\|SKIPPED\|rror\|derived" $W/*.log | sort | uniq -c | head -30
