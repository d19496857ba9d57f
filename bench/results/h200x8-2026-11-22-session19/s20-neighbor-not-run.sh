#!/usr/bin/env bash
# For a next session (NOT RUN): A/B of chain-neighbor-start-not-run.patch on
# nvidia-h200-x4. Apply the patch, build, carry .gpu/ as usual, then run this from the
# repo root (copy it to .gpu/). The idea (NOTES.md, session 19): the chains' START
# barrier with every rank makes the root of launch e+1 wait for the LAST rank of launch
# e, so back-to-back chains pay their whole fill every launch, while NCCL's ring streams
# across launches (FIFO credits). With the neighbour-only handshake the root waits for
# its neighbour only. Model (4 ranks, hop lag L ~ 23 us): broadcast 1G ~2981 -> ~2958
# (NCCL 2973), reduce chain ~3010 -> ~2987 (NCCL 2952: still short; the reduce would need
# a double-buffered or FIFO staging to stream a whole launch ahead).
# Checks: every cell is verified by the bench (#wrong), roots 1 and 3, 3 ranks, in
# place; --dead-rank (a dead neighbour must give every rank an error, not a hang).
set -u
source scripts/lib-gpu.sh
gpu_session s20n 560
B=.gpu/commhal-gpu-bench; L=".gpu/commhal launch"
X=COMMHAL_EXP_CHAIN_NEIGHBOR_START=1
BC="COMMHAL_COLL_BCAST_LL63_MAX=0 COMMHAL_COLL_BCAST_CHAIN_MIN=1048576"
RC="COMMHAL_COLL_REDUCE_LL63_MAX=0 COMMHAL_COLL_REDUCE_CHAIN_MIN=1048576"
O="-b 64M -e 1G -f 4 -n 40 -w 5 -d half --compare nccl"
# correctness first (odd sizes, roots, 3 ranks)
gpu_step check.log 40 "$X $BC" $L -n 4 -- $B broadcast -r 3 -b 1M -e 64M -f 8 -n 20 -w 3 -d half
gpu_step check.log 40 "$X $RC" $L -n 4 -- $B reduce -r 1 -b 1M -e 64M -f 8 -n 20 -w 3 -d float
gpu_step check.log 40 "$X $RC" $L -n 3 -- $B reduce -r 2 -b 1M -e 64M -f 8 -n 20 -w 3 -d bfloat16
gpu_step check.log 40 "$X $BC" $L -n 4 -- $B broadcast -r 1 -b 1M -e 64M -f 8 -n 20 -w 3 -d half --dead-rank 2 --timeout-ms 2000
# A/B, alternated twice
for i in 1 2; do
  for x in "" "$X"; do
    gpu_step ab.log 60 "$x $BC" $L -n 4 -- $B broadcast -r 1 $O
    gpu_step ab.log 60 "$x $RC" $L -n 4 -- $B reduce -r 1 $O
  done
done
grep -h "rc=\|SKIPPED" $W/*.log | sort | uniq -c
