#!/usr/bin/env bash
# Session 12, call 5: call 4's LL_CHUNK_MAX=0 was ignored (the variable must be
# positive), so again with 8 (LL63 from 16 bytes); and why 4-rank reduce at 256K took
# 4.8 us alone (call 4) but 6.9 us alternating with NCCL (every dense run): the same
# sizes with and without --compare nccl, and LL16 against LL63 at 512K.
set -u
source scripts/lib-gpu.sh; gpu_session s12-d 150
L=".gpu/commhal launch"; B=.gpu/commhal-gpu-bench
O="-n 40 -w 5 -d half"
F="COMMHAL_COLL_LL_CHUNK_MAX=8"
gpu_step ll63.log 25 "$F" $L -n 2 -- $B reduce -r 1 -b 1K -e 4M -f 4 $O
gpu_step ll63.log 25 "$F" $L -n 4 -- $B reduce -r 1 -b 1K -e 4M -f 4 $O
gpu_step ll63.log 25 "$F" $L -n 4 -- $B broadcast -r 1 -b 1K -e 4M -f 4 $O
gpu_step mid.log 25 "" $L -n 4 -- $B reduce -r 1 -b 128K -e 1M -f 2 $O
gpu_step mid.log 25 "" $L -n 4 -- $B reduce -r 1 -b 128K -e 1M -f 2 $O --compare nccl
gpu_step mid.log 25 "COMMHAL_COLL_LL_CHUNK_MAX=524288" $L -n 4 -- $B reduce -r 1 -b 128K -e 1M -f 2 $O --compare nccl
gpu_step mid.log 25 "COMMHAL_COLL_LL_CHUNK_MAX=524288" $L -n 4 -- $B reduce -r 1 -b 128K -e 1M -f 2 $O
gpu_step mid.log 25 "" $L -n 4 -- $B broadcast -r 1 -b 128K -e 1M -f 2 $O
gpu_step mid.log 25 "" $L -n 4 -- $B broadcast -r 1 -b 128K -e 1M -f 2 $O --compare nccl
grep -v '^\[rank [123]\]' $W/ll63.log $W/mid.log | sed 's/^[^:]*://' | grep -E '^####|^\[rank 0\] +[0-9]+ ' | awk '{ if ($1=="####") print substr($0,1,200); else print $3, $8, $12, $NF }'
