#!/usr/bin/env bash
# Session 11, call 3: the copy engines for 2-rank broadcast and send/recv in the default
# path. Tune (sendrecv on 4 ranks; broadcast, sendrecv on 2) into a copy of the committed
# file, then bench those collectives with it against NCCL, and -G (graph capture: the
# kernels must run there) for send/recv.
set -u
OUT=${OUT:-/tmp/out}; W=$OUT
source scripts/lib-gpu.sh; gpu_env s; export NCCL_NVLS_ENABLE=0; unset COMMHAL_ALLOW_MULTICAST; gpu_use_nvrtc s
export COMMHAL_CACHE_DIR=/tmp/commhal-kernel-cache COMMHAL_BOOTSTRAP_TIMEOUT_MS=60000
T0=$(date +%s)
L=".gpu/commhal launch"
run() { local log=$1 lim=$2 envs=$3; shift 3; (( $(date +%s) - T0 > 420 - lim )) && { echo "#### SKIPPED (time) $*" >> $W/$log; return; }; echo "#### $* (env: $envs)" >> $W/$log; env $envs timeout --kill-after=5 $lim "$@" >> $W/$log 2>&1; echo "#### rc=$? t=$(( $(date +%s) - T0 ))s" >> $W/$log; }
cp algorithms/tuning/gpu-cuda-h200.toml $W/tuned.toml
run tune.log 120 "" .gpu/commhal tune --backend cuda-nvlink --ranks 4 --collectives sendrecv -b 1M -e 1G -n 20 -w 3 --out $W/tuned.toml --json $W/tune-4gpu.json
run tune.log 120 "" .gpu/commhal tune --backend cuda-nvlink --ranks 2 --collectives broadcast,sendrecv -b 1M -e 1G -n 20 -w 3 --out $W/tuned.toml --json $W/tune-2gpu.json
grep -n 'ce_min' $W/tuned.toml >> $W/tune.log
O="-n 40 -w 5 -d half --compare nccl"
T="COMMHAL_GPU_TUNING=$W/tuned.toml"
run bench-4gpu.log 80 "$T" $L -n 4 -- .gpu/commhal-gpu-bench sendrecv -r 1 -b 1K -e 1G -f 2 $O
run bench-2gpu.log 80 "$T" $L -n 2 -- .gpu/commhal-gpu-bench sendrecv -r 1 -b 1K -e 1G -f 2 $O
run bench-2gpu.log 80 "$T" $L -n 2 -- .gpu/commhal-gpu-bench broadcast -r 1 -b 1K -e 1G -f 2 $O
run graph-4gpu.log 60 "$T" $L -n 4 -- .gpu/commhal-gpu-bench sendrecv -r 1 -b 64M -e 1G -f 4 -n 20 -w 3 -d half -G
run graph-2gpu.log 60 "$T" $L -n 2 -- .gpu/commhal-gpu-bench broadcast -r 0 -b 64M -e 1G -f 4 -n 20 -w 3 -d half -G
grep -h "rc=\|WRONG\|SKIPPED\|rror\|ce_min\|derived" $W/*.log | sort | uniq -c | head -30
for f in $W/bench-*.log $W/graph-*.log; do echo "== $f"; grep -A24 'ratio nccl' $f | grep -E ' (67108864|268435456|536870912|1073741824|1048576|16777216) ' ; grep -E 'copy engines|ce ' $f | head -3; done
