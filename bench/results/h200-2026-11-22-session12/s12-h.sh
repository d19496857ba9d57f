#!/usr/bin/env bash
# Session 12, 4-GPU check of the LL63 small region and the ll63_recv fix (calls 6-12
# ran on 2 GPUs only):
# correctness with LL63 from 16 bytes on 4 and 3 ranks (middle ranks forward through
# the halves), sizes across the 2 MiB switch, 301 launches; then the 4-GPU reduce and
# broadcast rows of the dense set against NCCL.
set -u
source scripts/lib-gpu.sh; gpu_session s12-h 200
L=".gpu/commhal launch"; B=.gpu/commhal-gpu-bench
F="COMMHAL_COLL_LL_CHUNK_MAX=8"
gpu_step check.log 25 "$F" $L -n 4 -- $B reduce -r 3 -b 16 -e 64M -f 4 -n 3 -w 1 -d float
gpu_step check.log 25 "$F" $L -n 4 -- $B reduce -r 1 -b 1040 -e 40M -f 7 -n 3 -w 1 -d bfloat16
gpu_step check.log 25 "$F" $L -n 4 -- $B broadcast -r 2 -b 16 -e 64M -f 4 -n 3 -w 1 -d half
gpu_step check.log 25 "$F" $L -n 3 -- $B reduce -r 1 -b 16 -e 64M -f 4 -n 3 -w 1 -d half
gpu_step check.log 25 "$F" $L -n 3 -- $B broadcast -r 0 -b 1040 -e 40M -f 7 -n 3 -w 1 -d float
gpu_step check.log 25 "$F" $L -n 4 -- $B reduce -r 0 -b 256K -e 4M -f 2 -n 301 -w 1 -d float
gpu_step ll63.log 20 "$F" $L -n 4 -- $B reduce -r 1 -b 1K -e 4M -f 4 -n 40 -w 5 -d half
O="-b 1K -e 1G -f 2 -n 40 -w 5 -d half --compare nccl"
gpu_step rows.log 40 "" $L -n 4 -- $B reduce -r 1 $O
gpu_step rows.log 40 "" $L -n 4 -- $B broadcast -r 1 $O
grep -hE '^####|correct|WRONG|rror' $W/check.log | cut -c1-200
grep -hv '^\[rank [123]\]' $W/ll63.log | grep -E '^####|^\[rank 0\] +[0-9]+ ' | awk '{ if ($1=="####") print substr($0,1,200); else print $3, $8, $12, $NF }'
grep -h -A24 'ratio nccl' $W/rows.log | grep '^\[rank 0\]' | cut -c1-80
