#!/usr/bin/env bash
# Session 12: no 4-GPU machine lent, so the 3- and 4-rank logic of the LL63 changes
# (middle ranks forwarding through the small region's halves, the new receive loop)
# checked with 2 processes per GPU on 2 GPUs (ranks r and r+2 share GPU r; their
# kernels time-slice, so this is for correctness only, timings mean nothing).
set -u
source scripts/lib-gpu.sh; gpu_session s12-n 150
L=".gpu/commhal launch"; B=.gpu/commhal-gpu-bench
F="COMMHAL_COLL_LL_CHUNK_MAX=0"
gpu_step over.log 40 "$F" $L -n 4 -- $B reduce -r 3 -b 16 -e 8M -f 8 -n 3 -w 1 -d float
gpu_step over.log 40 "$F" $L -n 4 -- $B broadcast -r 1 -b 1040 -e 8M -f 7 -n 3 -w 1 -d half
gpu_step over.log 40 "$F" $L -n 3 -- $B reduce -r 0 -b 16 -e 8M -f 8 -n 3 -w 1 -d bfloat16
gpu_step over.log 30 "$F" $L -n 4 -- $B reduce -r 2 -b 1M -e 4M -f 4 -n 31 -w 1 -d half
grep -hE '^####|correct|WRONG|rror' $W/over.log | cut -c1-220
