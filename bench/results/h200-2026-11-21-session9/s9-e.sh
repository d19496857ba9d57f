#!/usr/bin/env bash
# Session 9, call 5: the GPU conformance suite after the packet helpers became 64-bit
# element accesses (LL8 / LL16 channel packets), plus memcheck / racecheck
set -u
OUT=${OUT:-/tmp/out}; W=$OUT
source scripts/lib-gpu.sh; gpu_env s; export NCCL_NVLS_ENABLE=0; unset COMMHAL_ALLOW_MULTICAST; gpu_use_nvrtc s
export COMMHAL_CACHE_DIR=/tmp/commhal-kernel-cache COMMHAL_BOOTSTRAP_TIMEOUT_MS=60000
T0=$(date +%s)
C=.gpu/commhal-gpu-conformance; L=".gpu/commhal launch"
run() { local log=$1 lim=$2 envs=$3; shift 3; (( $(date +%s) - T0 > 400 - lim )) && { echo "#### SKIPPED (time) $*" >> $W/$log; return; }; echo "#### $* (env: $envs)" >> $W/$log; env $envs timeout --kill-after=5 $lim "$@" >> $W/$log 2>&1; echo "#### rc=$? t=$(( $(date +%s) - T0 ))s" >> $W/$log; }
run conformance.log 100 "" $L -n 2 -- $C conformance --backend cuda-nvlink
run conformance.log 100 "" $L -n 4 -- $C conformance --backend all --quick
run conformance.log 100 "" $L -n 2 -- compute-sanitizer --tool memcheck --error-exitcode 3 $C conformance --backend all --quick
run conformance.log 70 "" $L -n 2 -- compute-sanitizer --tool racecheck --error-exitcode 3 $C conformance --backend cuda-nvlink --quick
grep -h "rc=\|SKIPPED\|ERROR SUMMARY\|FAIL\|passed\|failed" $W/*.log | sort | uniq -c | head -30
