#!/usr/bin/env bash
# Session 8, call 2: chain_signal micro again (async fixed; one launch per iteration), and
# the real chain kernels at 132 blocks with unroll 1..8 at mid sizes (micro vs kernel)
set -u
OUT=${OUT:-/tmp/out}; W=$OUT
source scripts/lib-gpu.sh; gpu_env s; export NCCL_NVLS_ENABLE=0; unset COMMHAL_ALLOW_MULTICAST; gpu_use_nvrtc s
export COMMHAL_CACHE_DIR=/tmp/commhal-kernel-cache COMMHAL_BOOTSTRAP_TIMEOUT_MS=60000
T0=$(date +%s)
B=.gpu/commhal-gpu-bench; L=".gpu/commhal launch"
run() { local log=$1 lim=$2 envs=$3; shift 3; (( $(date +%s) - T0 > 570 - lim )) && { echo "#### SKIPPED (time) $*" >> $W/$log; return; }; echo "#### $* (env: $envs)" >> $W/$log; env $envs timeout --kill-after=5 $lim "$@" >> $W/$log 2>&1; echo "#### rc=$? t=$(( $(date +%s) - T0 ))s" >> $W/$log; }
( nvcc -O3 -arch=sm_90 -o /tmp/chain_signal bench/micro/chain_signal.cu ) > $W/chain-signal.log 2>&1
run chain-signal.log 60 "" /tmp/chain_signal 4
run chain-signal.log 60 "" /tmp/chain_signal 4 launch
O="-n 20 -w 3"
for u in 1 2 4 8; do
  run chain-real.log 40 "COMMHAL_COLL_CHAIN_UNROLL=$u COMMHAL_COLL_BCAST_CHAIN_MIN=1048576" $L -n 4 -- $B broadcast -r 0 -b 1M -e 256M -f 4 -d half $O
  run chain-real.log 40 "COMMHAL_COLL_CHAIN_UNROLL=$u COMMHAL_COLL_REDUCE_CHAIN_MIN=1048576" $L -n 4 -- $B reduce -r 0 -b 1M -e 256M -f 4 -d half $O
done
grep -h "rc=\|WRONG\|SKIPPED\|rror" $W/*.log | sort | uniq -c | head -20
