#!/usr/bin/env bash
# Session 10, call 3: LL63 in two hops (tile t through non-root t mod m) against the LL63
# chain (commhal-gpu-bench-chain, commit 13a444f): memcheck, correctness (LL63 forced from
# 16 B: roots, dtypes, odd sizes, 3 and 2 ranks, 300 launches, a 1 ms wait bound), then
# speed of both against NCCL with LL63 at every size on 4 GPUs
set -u
OUT=${OUT:-/tmp/out}; W=$OUT
source scripts/lib-gpu.sh; gpu_env s; export NCCL_NVLS_ENABLE=0; unset COMMHAL_ALLOW_MULTICAST; gpu_use_nvrtc s
export COMMHAL_CACHE_DIR=/tmp/commhal-kernel-cache COMMHAL_BOOTSTRAP_TIMEOUT_MS=60000
T0=$(date +%s)
B=.gpu/commhal-gpu-bench; L=".gpu/commhal launch"
run() { local log=$1 lim=$2 envs=$3; shift 3; (( $(date +%s) - T0 > 575 - lim )) && { echo "#### SKIPPED (time) $*" >> $W/$log; return; }; echo "#### $* (env: $envs)" >> $W/$log; env $envs timeout --kill-after=5 $lim "$@" >> $W/$log 2>&1; echo "#### rc=$? t=$(( $(date +%s) - T0 ))s" >> $W/$log; }
E="COMMHAL_COLL_BCAST_LL63_MAX=1073741824 COMMHAL_COLL_REDUCE_LL63_MAX=1073741824 COMMHAL_COLL_LL_CHUNK_MAX=8"
E2="COMMHAL_COLL_BCAST_LL63_MAX=1073741824 COMMHAL_COLL_REDUCE_LL63_MAX=1073741824"
O="-n 40 -w 5 --compare nccl -d half"
run check.log 90 "$E" $L -n 4 -- compute-sanitizer --tool memcheck --error-exitcode 3 $B reduce -r 1 -b 16M -e 16M -n 2 -w 1 -d half
run check.log 90 "$E" $L -n 4 -- compute-sanitizer --tool memcheck --error-exitcode 3 $B broadcast -r 2 -b 4M -e 4M -n 2 -w 1 -d half
for r in 0 3; do for d in half bfloat16 float; do
  run check.log 40 "$E" $L -n 4 -- $B reduce -r $r -b 16 -e 256M -f 8 -n 3 -w 1 -d $d
done; run check.log 40 "$E" $L -n 4 -- $B broadcast -r $r -b 16 -e 256M -f 8 -n 3 -w 1 -d half; done
run check.log 40 "$E" $L -n 4 -- $B reduce -r 2 -b 1000016 -e 300M -f 3 -n 3 -w 1 -d float
run check.log 40 "$E" $L -n 4 -- $B broadcast -r 1 -b 1000016 -e 300M -f 3 -n 3 -w 1 -d half
run check.log 40 "$E" $L -n 4 -- $B reduce -r 1 -b 64K -e 4M -f 4 -n 300 -w 1 -d half
run check.log 40 "$E" $L -n 3 -- $B reduce -r 2 -b 16 -e 64M -f 4 -n 3 -w 1 -d bfloat16
run check.log 40 "$E" $L -n 3 -- $B broadcast -r 1 -b 16 -e 64M -f 4 -n 3 -w 1 -d half
run check.log 40 "$E" $L -n 2 -- $B reduce -r 1 -b 16K -e 64M -f 4 -n 3 -w 1 -d half
run check.log 40 "$E" $L -n 2 -- $B broadcast -r 0 -b 16K -e 64M -f 4 -n 3 -w 1 -d half
run timeout.log 60 "$E" $L -n 4 -- $B reduce -r 1 -b 64M -e 64M -n 20 -w 1 -d half --timeout-ms 1
run timeout.log 60 "$E" $L -n 4 -- $B broadcast -r 1 -b 64M -e 64M -n 20 -w 1 -d half --timeout-ms 1
for c in reduce broadcast; do
  run ab-4gpu.log 90 "$E2" $L -n 4 -- $B $c -r 1 -b 256K -e 1G -f 2 $O
  run ab-chain-4gpu.log 90 "$E2" $L -n 4 -- .gpu/commhal-gpu-bench-chain $c -r 1 -b 256K -e 1G -f 2 $O
done
run ab-3gpu.log 60 "$E2" $L -n 3 -- $B reduce -r 1 -b 256K -e 256M -f 4 $O
run ab-chain-3gpu.log 60 "$E2" $L -n 3 -- .gpu/commhal-gpu-bench-chain reduce -r 1 -b 256K -e 256M -f 4 $O
grep -h "rc=\|WRONG\|SKIPPED\|ERROR SUMMARY\|rror" $W/*.log | sort | uniq -c | head -30
