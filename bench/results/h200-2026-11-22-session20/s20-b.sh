#!/usr/bin/env bash
# Session 20, call 2 (nvidia-h200-x4): with the chain overlap on (call 1: bcast 1G
# 2980 -> 2970, reduce 3008 -> 2986 us), the period of back-to-back chains is modelled
# as stream time + one round of lag (one chunk per block: 132 x 512 x 8 x 16 B = 8.6 MB,
# ~24 us). Smaller rounds cut the lag but add flag work per byte; two blocks per SM may
# hide a block's release stall. Chains forced (LL63 off, chain from 1M), no NCCL (its
# times: call 1), two alternated passes.
set -u
source scripts/lib-gpu.sh
gpu_session s20b 330
B=.gpu/commhal-gpu-bench; L=".gpu/commhal launch"
BC="COMMHAL_COLL_BCAST_LL63_MAX=0 COMMHAL_COLL_BCAST_CHAIN_MIN=1048576"
RC="COMMHAL_COLL_REDUCE_LL63_MAX=0 COMMHAL_COLL_REDUCE_CHAIN_MIN=1048576"
O="-b 256M -e 1G -f 4 -n 40 -w 5 -d half"
for i in 1 2; do
  for cfg in "COMMHAL_COLL_CHAIN_UNROLL=8" "COMMHAL_COLL_CHAIN_UNROLL=4" \
             "COMMHAL_COLL_CHAIN_UNROLL=4 COMMHAL_COLL_MAX_BLOCKS=264" \
             "COMMHAL_COLL_CHAIN_UNROLL=2 COMMHAL_COLL_MAX_BLOCKS=264" \
             "COMMHAL_COLL_CHAIN_UNROLL=16"; do
    gpu_step unroll.log 25 "$cfg $RC" $L -n 4 -- $B reduce -r 1 $O
    gpu_step unroll.log 25 "$cfg $BC" $L -n 4 -- $B broadcast -r 1 $O
  done
done
grep -h "rc=\|SKIPPED" $W/*.log | sort | uniq -c
