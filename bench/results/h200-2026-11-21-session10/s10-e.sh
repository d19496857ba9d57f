#!/usr/bin/env bash
# Session 10, call 5 (diagnostic, nothing lands): does the two-hop LL63 lose because a
# warp's tiles all have one owner? 132 x 16 = 2112 warps (a multiple of 3: owner fixed
# per warp) against 131 x 16 = 2096 (owners rotate every round); the chain for reference
set -u
OUT=${OUT:-/tmp/out}; W=$OUT
source scripts/lib-gpu.sh; gpu_env s; export NCCL_NVLS_ENABLE=0; unset COMMHAL_ALLOW_MULTICAST; gpu_use_nvrtc s
export COMMHAL_CACHE_DIR=/tmp/commhal-kernel-cache COMMHAL_BOOTSTRAP_TIMEOUT_MS=60000
T0=$(date +%s)
L=".gpu/commhal launch"
run() { local log=$1 lim=$2 envs=$3; shift 3; (( $(date +%s) - T0 > 300 - lim )) && { echo "#### SKIPPED (time) $*" >> $W/$log; return; }; echo "#### $* (env: $envs)" >> $W/$log; env $envs timeout --kill-after=5 $lim "$@" >> $W/$log 2>&1; echo "#### rc=$? t=$(( $(date +%s) - T0 ))s" >> $W/$log; }
E2="COMMHAL_COLL_BCAST_LL63_MAX=1073741824 COMMHAL_COLL_REDUCE_LL63_MAX=1073741824"
O="-n 20 -w 3 -d half"
for c in reduce broadcast; do for mb in 132 131; do
  run rot-4gpu.log 40 "$E2 COMMHAL_COLL_MAX_BLOCKS=$mb" $L -n 4 -- .gpu/commhal-gpu-bench-2hop $c -r 1 -b 512K -e 1G -f 4 $O
done
  run rot-4gpu.log 40 "$E2 COMMHAL_COLL_MAX_BLOCKS=131" $L -n 4 -- .gpu/commhal-gpu-bench $c -r 1 -b 512K -e 1G -f 4 $O
done
grep -h "rc=\|WRONG\|SKIPPED\|rror" $W/*.log | sort | uniq -c | head -30
