#!/usr/bin/env bash
# Session 8, call 3: chains at mid sizes against the default kernels and NCCL, -n 60
# (6 timed groups: the first one carries the ranks' start skew)
set -u
OUT=${OUT:-/tmp/out}; W=$OUT
source scripts/lib-gpu.sh; gpu_env s; export NCCL_NVLS_ENABLE=0; unset COMMHAL_ALLOW_MULTICAST; gpu_use_nvrtc s
export COMMHAL_CACHE_DIR=/tmp/commhal-kernel-cache COMMHAL_BOOTSTRAP_TIMEOUT_MS=60000
T0=$(date +%s)
B=.gpu/commhal-gpu-bench; L=".gpu/commhal launch"
run() { local log=$1 lim=$2 envs=$3; shift 3; (( $(date +%s) - T0 > 570 - lim )) && { echo "#### SKIPPED (time) $*" >> $W/$log; return; }; echo "#### $* (env: $envs)" >> $W/$log; env $envs timeout --kill-after=5 $lim "$@" >> $W/$log 2>&1; echo "#### rc=$? t=$(( $(date +%s) - T0 ))s" >> $W/$log; }
O="-n 60 -w 5"
run ab-4gpu.log 60 "" $L -n 4 -- $B broadcast -r 0 -b 4M -e 256M -f 4 -d half $O --compare nccl
for u in 4 2 8; do run ab-4gpu.log 40 "COMMHAL_COLL_CHAIN_UNROLL=$u COMMHAL_COLL_BCAST_CHAIN_MIN=4194304" $L -n 4 -- $B broadcast -r 0 -b 4M -e 256M -f 4 -d half $O; done
run ab-4gpu.log 60 "" $L -n 4 -- $B reduce -r 0 -b 4M -e 256M -f 4 -d half $O --compare nccl
for u in 4 2 8; do run ab-4gpu.log 40 "COMMHAL_COLL_CHAIN_UNROLL=$u COMMHAL_COLL_REDUCE_CHAIN_MIN=4194304" $L -n 4 -- $B reduce -r 0 -b 4M -e 256M -f 4 -d half $O; done
run ab-2gpu.log 60 "" $L -n 2 -- $B reduce -r 0 -b 1M -e 256M -f 4 -d half $O --compare nccl
for u in 4 2 8; do run ab-2gpu.log 40 "COMMHAL_COLL_CHAIN_UNROLL=$u COMMHAL_COLL_REDUCE_CHAIN_MIN=1048576" $L -n 2 -- $B reduce -r 0 -b 1M -e 256M -f 4 -d half $O; done
grep -h "rc=\|WRONG\|SKIPPED\|rror" $W/*.log | sort | uniq -c | head -20
