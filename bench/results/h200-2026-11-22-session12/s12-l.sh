#!/usr/bin/env bash
# Session 12: ll63_recv loads its 8 packets at once every pass (they waited on each other:
# 8 L2 trips per pass). 2 GPUs: correctness with LL63 forced (dtypes, roots, odd sizes,
# 301 launches, memcheck), the small-size timings of call 10 again, and the default
# 2-rank reduce against NCCL where LL63 runs (2M-128M) to see the bandwidth sizes.
set -u
source scripts/lib-gpu.sh; gpu_session s12-l 150
L=".gpu/commhal launch"; B=.gpu/commhal-gpu-bench
F="COMMHAL_COLL_LL_CHUNK_MAX=0 COMMHAL_COLL_BCAST_LL63_MAX=1073741824 COMMHAL_COLL_BCAST_CE_MIN=0"
for d in float half bfloat16; do
  gpu_step check.log 25 "$F" $L -n 2 -- $B reduce -r 1 -b 16 -e 64M -f 4 -n 3 -w 1 -d $d
done
gpu_step check.log 25 "$F" $L -n 2 -- $B broadcast -r 0 -b 1040 -e 40M -f 7 -n 3 -w 1 -d half
gpu_step check.log 25 "$F" $L -n 2 -- $B reduce -r 0 -b 256K -e 4M -f 2 -n 301 -w 1 -d float
gpu_step check.log 60 "$F" $L -n 2 -- compute-sanitizer --tool memcheck --error-exitcode 3 $B reduce -r 1 -b 16K -e 8M -f 8 -n 2 -w 1 -d half
O="-b 1K -e 1M -f 4 -n 60 -w 5 -d half"
gpu_step k.log 15 "$F" $L -n 2 -- $B reduce -r 1 $O
gpu_step k.log 15 "$F" $L -n 2 -- $B broadcast -r 1 $O
gpu_step k.log 15 "$F" $L -n 2 -- $B reduce -r 1 $O -G
gpu_step cmp.log 40 "" $L -n 2 -- $B reduce -r 1 -b 512K -e 256M -f 2 -n 40 -w 5 -d half --compare nccl
grep -hE '^####|correct|WRONG|rror|ERROR SUMMARY' $W/check.log | cut -c1-200
grep -hv '^\[rank [123]\]' $W/k.log | grep -E '^####|^\[rank 0\] +[0-9]+ ' | awk '{ if ($1=="####") print substr($0,1,160); else print $3, $8, $12, $NF }'
grep -h -A14 'ratio nccl' $W/cmp.log | grep '^\[rank 0\]' | cut -c1-80
