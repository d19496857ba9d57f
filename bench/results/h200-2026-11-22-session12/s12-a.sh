#!/usr/bin/env bash
# Session 12, call 1: the direct LL63 reduce (every non-root straight into the root's
# LL63 region): correctness forced over every size, roots, dtypes, 3 and 4 ranks; A/B
# against the chain and NCCL; the tuner's reduce sweep on 4 ranks (with the new
# candidate); then the session-11 review fixes that never ran on GPUs: the bounded CE
# wait's cyclic compare and --dead-rank's strictness, the tuner's -G without `ce`.
set -u
source scripts/lib-gpu.sh; gpu_session s12-a 330
L=".gpu/commhal launch"; B=.gpu/commhal-gpu-bench
DM="COMMHAL_COLL_REDUCE_DIRECT_MAX=67108864"
for d in float half bfloat16; do
  gpu_step direct.log 30 "$DM COMMHAL_COLL_LL_CHUNK_MAX=0" $L -n 4 -- $B reduce -r 3 -b 16 -e 64M -f 4 -n 3 -w 1 -d $d
done
gpu_step direct.log 30 "$DM COMMHAL_COLL_LL_CHUNK_MAX=0" $L -n 4 -- $B reduce -r 0 -b 1040 -e 40M -f 7 -n 3 -w 1 -d half
gpu_step direct.log 30 "$DM COMMHAL_COLL_LL_CHUNK_MAX=0" $L -n 3 -- $B reduce -r 1 -b 16 -e 64M -f 4 -n 3 -w 1 -d bfloat16
gpu_step direct.log 30 "$DM COMMHAL_COLL_LL_CHUNK_MAX=0" $L -n 4 -- $B reduce -r 2 -b 1M -e 1M -n 300 -w 1 -d float
O="-n 40 -w 5 -d half --compare nccl"
gpu_step ab.log 40 "" $L -n 4 -- $B reduce -r 1 -b 128K -e 8M -f 2 $O
gpu_step ab.log 40 "COMMHAL_COLL_REDUCE_DIRECT_MAX=8388608" $L -n 4 -- $B reduce -r 1 -b 128K -e 8M -f 2 $O
gpu_step ab.log 40 "COMMHAL_COLL_REDUCE_DIRECT_MAX=8388608 COMMHAL_COLL_LL_CHUNK_MAX=65536" $L -n 4 -- $B reduce -r 1 -b 64K -e 1M -f 2 $O
cp algorithms/tuning/gpu-cuda-h200.toml $W/tune-4gpu.toml
gpu_step tune.log 120 "" .gpu/commhal tune --backend cuda-nvlink --ranks 4 --collectives reduce -b 1K -e 1G -n 20 -w 3 --out $W/tune-4gpu.toml --json $W/tune-4gpu.json
D="--timeout-ms 2000 -d half"
gpu_step dead.log 25 "" $L -n 2 -- $B sendrecv -b 256M -e 256M --dead-rank 1 $D
gpu_step dead.log 25 "" $L -n 2 -- $B broadcast -r 0 -b 256M -e 256M --dead-rank 1 $D
gpu_step dead.log 25 "" $L -n 4 -- $B sendrecv -b 512M -e 512M --dead-rank 2 $D
gpu_step dead.log 25 "$DM" $L -n 4 -- $B reduce -r 0 -b 1M -e 1M --dead-rank 2 $D
gpu_step tuneG.log 40 "" .gpu/commhal tune --backend cuda-nvlink --ranks 2 --collectives sendrecv,broadcast -G -b 64M -e 256M -n 5 -w 1 --out $W/tuneG.toml
grep -hE '^####|correct|WRONG|rror|wrong' $W/direct.log | cut -c1-220
grep -hE '^####|ratio nccl|^ *[0-9]+ ' $W/ab.log | cut -c1-200 | head -80
grep -vE '^\s*$' $W/tune.log | tail -40 | cut -c1-200
cut -c1-250 $W/dead.log
tail -20 $W/tuneG.log | cut -c1-200
