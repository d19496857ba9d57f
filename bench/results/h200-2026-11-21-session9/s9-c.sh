#!/usr/bin/env bash
# Session 9, call 3: LL56 grids spread over every SM at small sizes; A/B at 256K..64M
set -u
OUT=${OUT:-/tmp/out}; W=$OUT
source scripts/lib-gpu.sh; gpu_env s; export NCCL_NVLS_ENABLE=0; unset COMMHAL_ALLOW_MULTICAST; gpu_use_nvrtc s
export COMMHAL_CACHE_DIR=/tmp/commhal-kernel-cache COMMHAL_BOOTSTRAP_TIMEOUT_MS=60000
T0=$(date +%s)
B=.gpu/commhal-gpu-bench; L=".gpu/commhal launch"
run() { local log=$1 lim=$2 envs=$3; shift 3; (( $(date +%s) - T0 > 575 - lim )) && { echo "#### SKIPPED (time) $*" >> $W/$log; return; }; echo "#### $* (env: $envs)" >> $W/$log; env $envs timeout --kill-after=5 $lim "$@" >> $W/$log 2>&1; echo "#### rc=$? t=$(( $(date +%s) - T0 ))s" >> $W/$log; }
E="COMMHAL_COLL_BCAST_LL56_MAX=1073741824 COMMHAL_COLL_REDUCE_LL56_MAX=1073741824"
for c in reduce broadcast; do run check.log 40 "$E COMMHAL_COLL_LL_CHUNK_MAX=8" $L -n 4 -- $B $c -r 2 -b 16 -e 8M -f 2 -n 5 -w 1 -d half; done
run check.log 40 "$E COMMHAL_COLL_LL_CHUNK_MAX=8" $L -n 2 -- $B reduce -r 0 -b 16 -e 8M -f 2 -n 5 -w 1 -d float
O="-n 40 -w 5 -d half --compare nccl"
for c in reduce broadcast; do
  run ab-4gpu.log 60 "$E" $L -n 4 -- $B $c -r 1 -b 256K -e 64M -f 2 $O
  run ab-4gpu.log 60 "" $L -n 4 -- $B $c -r 1 -b 256K -e 64M -f 2 -n 40 -w 5 -d half
  run ab-2gpu.log 60 "$E" $L -n 2 -- $B $c -r 1 -b 256K -e 64M -f 2 $O
  run ab-2gpu.log 60 "" $L -n 2 -- $B $c -r 1 -b 256K -e 64M -f 2 -n 40 -w 5 -d half
done
grep -h "rc=\|WRONG\|SKIPPED\|ERROR SUMMARY\|rror" $W/*.log | sort | uniq -c | head -30
