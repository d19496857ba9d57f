#!/usr/bin/env bash
# Session 8, call 4: LL limits for reduce / broadcast at 128K..4M (does the LL path win
# past the shared LL chunk key?), and the chain micro with one launch per iteration
set -u
OUT=${OUT:-/tmp/out}; W=$OUT
source scripts/lib-gpu.sh; gpu_env s; export NCCL_NVLS_ENABLE=0; unset COMMHAL_ALLOW_MULTICAST; gpu_use_nvrtc s
export COMMHAL_CACHE_DIR=/tmp/commhal-kernel-cache COMMHAL_BOOTSTRAP_TIMEOUT_MS=60000
T0=$(date +%s)
B=.gpu/commhal-gpu-bench; L=".gpu/commhal launch"
run() { local log=$1 lim=$2 envs=$3; shift 3; (( $(date +%s) - T0 > 570 - lim )) && { echo "#### SKIPPED (time) $*" >> $W/$log; return; }; echo "#### $* (env: $envs)" >> $W/$log; env $envs timeout --kill-after=5 $lim "$@" >> $W/$log 2>&1; echo "#### rc=$? t=$(( $(date +%s) - T0 ))s" >> $W/$log; }
O="-n 60 -w 5"
for N in 4 2; do
  for c in reduce broadcast; do
    run ll-${N}gpu.log 40 "" $L -n $N -- $B $c -r 1 -b 128K -e 4M -f 2 -d half $O --compare nccl
    for m in 1048576 4194304; do
      run ll-${N}gpu.log 40 "COMMHAL_COLL_LL_CHUNK_MAX=$m" $L -n $N -- $B $c -r 1 -b 128K -e 4M -f 2 -d half $O
    done
    [ $N = 4 ] && [ $c = reduce ] && run ll-${N}gpu.log 40 "COMMHAL_COLL_REDUCE_ALL_MAX=0" $L -n $N -- $B $c -r 1 -b 128K -e 4M -f 2 -d half $O
  done
done
( nvcc -O3 -arch=sm_90 -o /tmp/chain_signal bench/micro/chain_signal.cu ) > $W/chain-signal.log 2>&1
run chain-signal.log 60 "" /tmp/chain_signal 4 launch
grep -h "rc=\|WRONG\|SKIPPED\|rror" $W/*.log | sort | uniq -c | head -20
