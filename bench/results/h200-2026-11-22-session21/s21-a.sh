#!/usr/bin/env bash
# Session 21, call 1 (nvidia-h200-x4): (1) ea02ae6 (flag_slot / store_block_slots, a
# pure device refactor, compiled but never run) on the chain paths it touched: rooted
# checks with every root, a dead rank; (2) the all-reduce copy-engine tail in pieces
# (allreduce_ce_pieces, new): checks incl. 3 ranks and a dead rank, then an A/B of 1..4
# pieces at 512M / 1G on 4 GPUs (two rounds, interleaved).
set -u
source scripts/lib-gpu.sh
gpu_session s21a 330
B=.gpu/commhal-gpu-bench; L=".gpu/commhal launch"
BC="COMMHAL_COLL_BCAST_LL63_MAX=0 COMMHAL_COLL_BCAST_CHAIN_MIN=1048576"
RC="COMMHAL_COLL_REDUCE_LL63_MAX=0 COMMHAL_COLL_REDUCE_CHAIN_MIN=1048576"
gpu_step check.log 30 "$BC" $L -n 4 -- $B broadcast -r 2 -b 1M -e 64M -f 8 -n 20 -w 3 -d half --cycle-roots
gpu_step check.log 30 "$RC" $L -n 4 -- $B reduce -r 2 -b 1M -e 64M -f 8 -n 20 -w 3 -d half --cycle-roots
gpu_step check.log 30 "$RC" $L -n 3 -- $B reduce -r 1 -b 1M -e 64M -f 8 -n 20 -w 3 -d float --cycle-roots
gpu_step check.log 30 "$BC" $L -n 4 -- $B broadcast -r 1 -b 64M -d half --dead-rank 3 --timeout-ms 2000
T="COMMHAL_COLL_AR_CE_MIN=16777216 COMMHAL_COLL_AR_RING_MIN=16777216"
gpu_step check.log 30 "$T COMMHAL_COLL_AR_CE_PIECES=3" $L -n 3 -- $B allreduce -b 16M -e 256M -f 4 -n 10 -w 2 -d float
gpu_step check.log 30 "$T COMMHAL_COLL_AR_CE_PIECES=4" $L -n 4 -- $B allreduce -b 16M -e 64M -f 2 -n 10 -w 2 -d bf16
gpu_step check.log 30 "$T COMMHAL_COLL_AR_CE_PIECES=2" $L -n 4 -- $B allreduce -b 64M -d half --dead-rank 2 --timeout-ms 2000
O="-b 512M -e 1G -f 2 -n 40 -w 5 -d half"
gpu_step ab.log 30 "" $L -n 4 -- $B allreduce $O --compare nccl
for i in 1 2; do
  for p in 1 2 3 4; do
    gpu_step ab.log 25 "COMMHAL_COLL_AR_CE_PIECES=$p" $L -n 4 -- $B allreduce $O
  done
done
grep -h "rc=\|SKIPPED" $W/*.log | sort | uniq -c
