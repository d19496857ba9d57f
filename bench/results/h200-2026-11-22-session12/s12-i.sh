#!/usr/bin/env bash
# Session 12: compute-sanitizer memcheck over the LL63 small region (2 GPUs), sizes on
# both sides of the 2 MiB switch.
set -u
source scripts/lib-gpu.sh; gpu_session s12-i 150
L=".gpu/commhal launch"; B=.gpu/commhal-gpu-bench
F="COMMHAL_COLL_LL_CHUNK_MAX=8 COMMHAL_COLL_BCAST_LL63_MAX=1073741824 COMMHAL_COLL_BCAST_CE_MIN=0"
M="compute-sanitizer --tool memcheck --error-exitcode 3"
gpu_step memcheck.log 70 "$F" $L -n 2 -- $M $B reduce -r 1 -b 16K -e 8M -f 8 -n 2 -w 1 -d half
gpu_step memcheck.log 70 "$F" $L -n 2 -- $M $B broadcast -r 0 -b 16K -e 8M -f 8 -n 2 -w 1 -d float
grep -hE '^####|ERROR SUMMARY|correct|WRONG' $W/memcheck.log | cut -c1-200
