#!/usr/bin/env bash
# Session 8, call 1: chain_signal micro (does the per-round flag have to stall the block?)
set -u
OUT=${OUT:-/tmp/out}; W=$OUT
source scripts/lib-gpu.sh; gpu_env s; export NCCL_NVLS_ENABLE=0; unset COMMHAL_ALLOW_MULTICAST
T0=$(date +%s)
run() { local log=$1 lim=$2; shift 2; (( $(date +%s) - T0 > 570 - lim )) && { echo "#### SKIPPED (time) $*" >> $W/$log; return; }; echo "#### $*" >> $W/$log; timeout --kill-after=5 $lim "$@" >> $W/$log 2>&1; echo "#### rc=$? t=$(( $(date +%s) - T0 ))s" >> $W/$log; }
( nvcc -O3 -arch=sm_90 -o /tmp/chain_signal bench/micro/chain_signal.cu ) > $W/chain-signal.log 2>&1
run chain-signal.log 150 /tmp/chain_signal 4
run chain-signal.log 100 /tmp/chain_signal 2
grep -h "rc=\|WRONG\|SKIPPED\|rror" $W/*.log | sort | uniq -c | head -20
