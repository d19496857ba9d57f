#!/usr/bin/env bash
# Session 8, call 6: the split reduce (chain + workers in one launch): correctness, memcheck,
# A/B of the data / block shares against the default and NCCL
set -u
OUT=${OUT:-/tmp/out}; W=$OUT
source scripts/lib-gpu.sh; gpu_env s; export NCCL_NVLS_ENABLE=0; unset COMMHAL_ALLOW_MULTICAST; gpu_use_nvrtc s
export COMMHAL_CACHE_DIR=/tmp/commhal-kernel-cache COMMHAL_BOOTSTRAP_TIMEOUT_MS=60000
T0=$(date +%s)
B=.gpu/commhal-gpu-bench; L=".gpu/commhal launch"
run() { local log=$1 lim=$2 envs=$3; shift 3; (( $(date +%s) - T0 > 575 - lim )) && { echo "#### SKIPPED (time) $*" >> $W/$log; return; }; echo "#### $* (env: $envs)" >> $W/$log; env $envs timeout --kill-after=5 $lim "$@" >> $W/$log 2>&1; echo "#### rc=$? t=$(( $(date +%s) - T0 ))s" >> $W/$log; }
S="COMMHAL_COLL_REDUCE_SPLIT=50 COMMHAL_COLL_REDUCE_ALL_MAX=0 COMMHAL_COLL_LL_CHUNK_MAX=8 COMMHAL_COLL_REDUCE_CHAIN_MIN=0"
run check.log 60 "$S" $L -n 4 -- compute-sanitizer --tool memcheck --error-exitcode 3 $B reduce -r 1 -b 16M -e 16M -n 2 -w 1 -d half
for r in 0 3; do for d in half bfloat16 float; do
  run check.log 40 "$S" $L -n 4 -- $B reduce -r $r -b 16K -e 256M -f 8 -n 3 -w 1 -d $d
done; done
run check.log 40 "$S" $L -n 4 -- $B reduce -r 2 -b 1000 -e 300M -f 7 -n 3 -w 1 -d half
run check.log 40 "$S COMMHAL_COLL_REDUCE_SPLIT_BLOCKS=10" $L -n 4 -- $B reduce -r 1 -b 16K -e 64M -f 4 -n 3 -w 1 -d half
run check.log 40 "$S" $L -n 3 -- $B reduce -r 2 -b 16K -e 64M -f 4 -n 3 -w 1 -d half
O="-n 40 -w 5"
run ab-4gpu.log 60 "" $L -n 4 -- $B reduce -r 0 -b 4M -e 256M -f 2 -d half $O --compare nccl
for sp in 30 40 50 60; do run ab-4gpu.log 40 "COMMHAL_COLL_REDUCE_SPLIT=$sp COMMHAL_COLL_REDUCE_ALL_MAX=4194304 COMMHAL_COLL_REDUCE_CHAIN_MIN=0" $L -n 4 -- $B reduce -r 0 -b 4M -e 256M -f 2 -d half $O; done
run ab-4gpu.log 40 "COMMHAL_COLL_REDUCE_SPLIT=40 COMMHAL_COLL_REDUCE_SPLIT_BLOCKS=55 COMMHAL_COLL_REDUCE_ALL_MAX=4194304 COMMHAL_COLL_REDUCE_CHAIN_MIN=0" $L -n 4 -- $B reduce -r 0 -b 4M -e 256M -f 2 -d half $O
run ab-4gpu.log 40 "COMMHAL_COLL_REDUCE_SPLIT=40 COMMHAL_COLL_REDUCE_SPLIT_BLOCKS=30 COMMHAL_COLL_REDUCE_ALL_MAX=4194304 COMMHAL_COLL_REDUCE_CHAIN_MIN=0" $L -n 4 -- $B reduce -r 0 -b 4M -e 256M -f 2 -d half $O
grep -h "rc=\|WRONG\|SKIPPED\|ERROR SUMMARY\|rror" $W/*.log | sort | uniq -c | head -30
