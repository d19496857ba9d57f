#!/usr/bin/env bash
# Session 20, call 4 (nvidia-h200-x4): call 3 found the credits' second st.release
# waiting for the flag store's round trip every round (unroll 8: 3125 us at 1G); now one
# fence for both stores, and reduce_chain_unroll (a new key, 32 in [ranks.4] from call
# 3's A/B). Checks (--cycle-roots, 2 / 3 / 4 ranks), a short A/B of the reduce chain
# (credits at unroll 16 / 32, neighbour start at 8), then the tune of broadcast + reduce.
set -u
source scripts/lib-gpu.sh
gpu_session s20d 330
B=.gpu/commhal-gpu-bench; L=".gpu/commhal launch"
RC="COMMHAL_COLL_REDUCE_LL63_MAX=0 COMMHAL_COLL_REDUCE_CHAIN_MIN=1048576"
gpu_step check.log 50 "$RC" $L -n 4 -- $B reduce -r 1 -b 1M -e 256M -f 4 -n 20 -w 3 -d float --cycle-roots
gpu_step check.log 40 "$RC" $L -n 3 -- $B reduce -r 2 -b 1M -e 64M -f 8 -n 20 -w 3 -d bfloat16 --cycle-roots
gpu_step check.log 40 "$RC" $L -n 2 -- $B reduce -r 1 -b 1M -e 64M -f 8 -n 20 -w 3 -d half --cycle-roots
O="-b 256M -e 1G -f 4 -n 40 -w 5 -d half"
for i in 1 2; do
  for x in "COMMHAL_COLL_REDUCE_CHAIN_UNROLL=32" "COMMHAL_COLL_REDUCE_CHAIN_UNROLL=16" \
           "COMMHAL_COLL_REDUCE_CHAIN_UNROLL=8 COMMHAL_COLL_CHAIN_OVERLAP=1"; do
    gpu_step ab.log 25 "$x $RC" $L -n 4 -- $B reduce -r 1 $O
  done
done
cp algorithms/tuning/gpu-cuda-h200.toml $W/tuned.toml
gpu_step tune.log 120 "" .gpu/commhal tune --backend cuda-nvlink --ranks 4 --collectives broadcast,reduce -b 1K -e 1G -n 60 -w 5 --out $W/tuned.toml --json $W/tune.json
grep -h "rc=\|SKIPPED" $W/*.log | sort | uniq -c
