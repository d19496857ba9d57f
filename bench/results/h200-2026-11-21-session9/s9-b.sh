#!/usr/bin/env bash
# Session 9, call 2: done-epoch words pushed to every peer (LL16 senders read them
# locally), LL56 reduce loads its input before the wait; LL56 block count sweep
set -u
OUT=${OUT:-/tmp/out}; W=$OUT
source scripts/lib-gpu.sh; gpu_env s; export NCCL_NVLS_ENABLE=0; unset COMMHAL_ALLOW_MULTICAST; gpu_use_nvrtc s
export COMMHAL_CACHE_DIR=/tmp/commhal-kernel-cache COMMHAL_BOOTSTRAP_TIMEOUT_MS=60000
T0=$(date +%s)
B=.gpu/commhal-gpu-bench; L=".gpu/commhal launch"
run() { local log=$1 lim=$2 envs=$3; shift 3; (( $(date +%s) - T0 > 575 - lim )) && { echo "#### SKIPPED (time) $*" >> $W/$log; return; }; echo "#### $* (env: $envs)" >> $W/$log; env $envs timeout --kill-after=5 $lim "$@" >> $W/$log 2>&1; echo "#### rc=$? t=$(( $(date +%s) - T0 ))s" >> $W/$log; }
E="COMMHAL_COLL_BCAST_LL56_MAX=1073741824 COMMHAL_COLL_REDUCE_LL56_MAX=1073741824"
# LL16 senders with the pushed done words, default tuning: every small rooted / p2p kernel
for c in broadcast reduce sendrecv alltoall; do run check.log 40 "" $L -n 4 -- $B $c -r 3 -b 1K -e 4M -f 4 -n 30 -w 1 -d half; done
run check.log 40 "" $L -n 2 -- $B reduce -r 1 -b 1K -e 4M -f 4 -n 30 -w 1 -d half
run check.log 90 "$E COMMHAL_COLL_LL56_BLOCKS=16" $L -n 4 -- compute-sanitizer --tool memcheck --error-exitcode 3 $B reduce -r 2 -b 8M -e 8M -n 2 -w 1 -d float
run check.log 40 "$E COMMHAL_COLL_LL56_BLOCKS=16" $L -n 4 -- $B reduce -r 0 -b 1000016 -e 300M -f 3 -n 3 -w 1 -d bfloat16
run check.log 40 "$E COMMHAL_COLL_LL56_BLOCKS=16" $L -n 3 -- $B broadcast -r 2 -b 1000016 -e 300M -f 3 -n 3 -w 1 -d half
O="-n 40 -w 5 -d half"
for c in reduce broadcast; do
  run ab-4gpu.log 60 "$E" $L -n 4 -- $B $c -r 1 -b 512K -e 64M -f 2 $O --compare nccl
  for nb in 66 33 16 8; do run ab-4gpu.log 40 "$E COMMHAL_COLL_LL56_BLOCKS=$nb" $L -n 4 -- $B $c -r 1 -b 512K -e 64M -f 2 $O; done
done
run ab-2gpu.log 60 "$E" $L -n 2 -- $B reduce -r 1 -b 512K -e 64M -f 2 $O --compare nccl
for nb in 33 16; do run ab-2gpu.log 40 "$E COMMHAL_COLL_LL56_BLOCKS=$nb" $L -n 2 -- $B reduce -r 1 -b 512K -e 64M -f 2 $O; done
grep -h "rc=\|WRONG\|SKIPPED\|ERROR SUMMARY\|rror" $W/*.log | sort | uniq -c | head -30
