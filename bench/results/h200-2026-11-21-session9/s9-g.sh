#!/usr/bin/env bash
# Session 9, call 7 (review): one bounded-spin helper (spin_expired) for every wait, one
# LL56 tile loop; smoke: LL56 forced from 16 B, roots, dtypes, 3 / 2 ranks, chains, rings,
# LL16, and a 1 ms device wait bound (the timeout path: a clear error, no hang)
set -u
OUT=${OUT:-/tmp/out}; W=$OUT
source scripts/lib-gpu.sh; gpu_env s; export NCCL_NVLS_ENABLE=0; unset COMMHAL_ALLOW_MULTICAST; gpu_use_nvrtc s
export COMMHAL_CACHE_DIR=/tmp/commhal-kernel-cache COMMHAL_BOOTSTRAP_TIMEOUT_MS=60000
T0=$(date +%s)
B=.gpu/commhal-gpu-bench; L=".gpu/commhal launch"
run() { local log=$1 lim=$2 envs=$3; shift 3; (( $(date +%s) - T0 > 400 - lim )) && { echo "#### SKIPPED (time) $*" >> $W/$log; return; }; echo "#### $* (env: $envs)" >> $W/$log; env $envs timeout --kill-after=5 $lim "$@" >> $W/$log 2>&1; echo "#### rc=$? t=$(( $(date +%s) - T0 ))s" >> $W/$log; }
E="COMMHAL_COLL_BCAST_LL56_MAX=1073741824 COMMHAL_COLL_REDUCE_LL56_MAX=1073741824 COMMHAL_COLL_LL_CHUNK_MAX=8"
for r in 0 3; do
  run check.log 40 "$E" $L -n 4 -- $B reduce -r $r -b 16 -e 64M -f 4 -n 3 -w 1 -d bfloat16
  run check.log 40 "$E" $L -n 4 -- $B broadcast -r $r -b 16 -e 64M -f 4 -n 3 -w 1 -d half
done
run check.log 40 "$E" $L -n 4 -- $B reduce -r 2 -b 1000016 -e 300M -f 3 -n 3 -w 1 -d float
run check.log 40 "$E" $L -n 3 -- $B reduce -r 1 -b 16K -e 64M -f 4 -n 3 -w 1 -d half
run check.log 40 "$E" $L -n 2 -- $B broadcast -r 1 -b 16K -e 64M -f 4 -n 3 -w 1 -d half
for c in allreduce allgather reducescatter broadcast reduce alltoall sendrecv; do
  run check.log 40 "" $L -n 4 -- $B $c -r 1 -b 1K -e 1G -f 8 -n 3 -w 1 -d half
done
run timeout.log 60 "$E" $L -n 4 -- $B reduce -r 1 -b 64M -e 64M -n 20 -w 1 -d half --timeout-ms 1
run timeout.log 60 "" $L -n 4 -- $B allreduce -b 256M -e 256M -n 20 -w 1 -d half --timeout-ms 1
grep -h "rc=\|WRONG\|SKIPPED\|rror\|correct" $W/*.log | sort | uniq -c | head -30
