#!/usr/bin/env bash
# Session 12, call 6: LL63 chains with a small region in two parity halves (transfers up
# to 2 MiB wait for the next rank's launch e - 2, not e - 1): correctness (LL63 from 16
# bytes, sizes across the 2 MiB switch in one communicator, roots, dtypes, 3 and 4
# ranks, 301 launches), then call 5's timings again and against NCCL.
set -u
source scripts/lib-gpu.sh; gpu_session s12-e 170
L=".gpu/commhal launch"; B=.gpu/commhal-gpu-bench
F="COMMHAL_COLL_LL_CHUNK_MAX=8"
for d in float half bfloat16; do
  gpu_step check.log 25 "$F" $L -n 4 -- $B reduce -r 3 -b 16 -e 64M -f 4 -n 3 -w 1 -d $d
done
gpu_step check.log 25 "$F" $L -n 4 -- $B broadcast -r 2 -b 16 -e 64M -f 4 -n 3 -w 1 -d half
gpu_step check.log 25 "$F" $L -n 3 -- $B reduce -r 1 -b 1040 -e 40M -f 7 -n 3 -w 1 -d bfloat16
gpu_step check.log 25 "$F" $L -n 3 -- $B broadcast -r 0 -b 1040 -e 40M -f 7 -n 3 -w 1 -d float
gpu_step check.log 25 "$F" $L -n 4 -- $B reduce -r 0 -b 256K -e 4M -f 2 -n 301 -w 1 -d float
O="-n 40 -w 5 -d half"
gpu_step ll63.log 25 "$F" $L -n 2 -- $B reduce -r 1 -b 1K -e 4M -f 4 $O
gpu_step ll63.log 25 "$F" $L -n 4 -- $B reduce -r 1 -b 1K -e 4M -f 4 $O
gpu_step ll63.log 25 "$F" $L -n 4 -- $B broadcast -r 1 -b 1K -e 4M -f 4 $O
gpu_step cmp.log 30 "" $L -n 4 -- $B reduce -r 1 -b 128K -e 8M -f 2 $O --compare nccl
gpu_step cmp.log 30 "" $L -n 4 -- $B broadcast -r 1 -b 128K -e 8M -f 2 $O --compare nccl
gpu_step cmp.log 30 "" $L -n 2 -- $B reduce -r 1 -b 1M -e 8M -f 2 $O --compare nccl
grep -hE '^####|correct|WRONG|rror' $W/check.log | cut -c1-200
grep -hv '^\[rank [123]\]' $W/ll63.log $W/cmp.log | grep -E '^####|^\[rank 0\] +[0-9]+ ' | awk '{ if ($1=="####") print substr($0,1,200); else print $3, $8, $12, $NF }'
