#!/usr/bin/env bash
# Session 12, call 2: the direct LL63 reduce with its own parity-halved region (senders
# wait for the root's launch e - 2, not e - 1): correctness forced over every size,
# roots, dtypes, 3 and 4 ranks, mixed with the chain in one communicator; A/B against
# the chain and NCCL; the tuner's reduce sweep on 4 ranks.
set -u
source scripts/lib-gpu.sh; gpu_session s12-b 300
L=".gpu/commhal launch"; B=.gpu/commhal-gpu-bench
DM="COMMHAL_COLL_REDUCE_DIRECT_MAX=67108864"
for d in float half bfloat16; do
  gpu_step direct.log 30 "$DM COMMHAL_COLL_LL_CHUNK_MAX=0" $L -n 4 -- $B reduce -r 3 -b 16 -e 64M -f 4 -n 3 -w 1 -d $d
done
gpu_step direct.log 30 "$DM COMMHAL_COLL_LL_CHUNK_MAX=0" $L -n 4 -- $B reduce -r 0 -b 1040 -e 40M -f 7 -n 3 -w 1 -d half
gpu_step direct.log 30 "$DM COMMHAL_COLL_LL_CHUNK_MAX=0" $L -n 3 -- $B reduce -r 1 -b 16 -e 64M -f 4 -n 3 -w 1 -d bfloat16
gpu_step direct.log 30 "$DM COMMHAL_COLL_LL_CHUNK_MAX=0" $L -n 4 -- $B reduce -r 2 -b 1M -e 1M -n 301 -w 1 -d float
gpu_step direct.log 30 "COMMHAL_COLL_REDUCE_DIRECT_MAX=1048576" $L -n 4 -- $B reduce -r 1 -b 64K -e 8M -f 2 -n 31 -w 1 -d float
O="-n 40 -w 5 -d half --compare nccl"
gpu_step ab.log 40 "" $L -n 4 -- $B reduce -r 1 -b 128K -e 8M -f 2 $O
gpu_step ab.log 40 "COMMHAL_COLL_REDUCE_DIRECT_MAX=8388608" $L -n 4 -- $B reduce -r 1 -b 128K -e 8M -f 2 $O
gpu_step ab.log 40 "COMMHAL_COLL_REDUCE_DIRECT_MAX=8388608 COMMHAL_COLL_LL_CHUNK_MAX=16384" $L -n 4 -- $B reduce -r 1 -b 16K -e 256K -f 2 $O
cp algorithms/tuning/gpu-cuda-h200.toml $W/tune-4gpu.toml
gpu_step tune.log 90 "" .gpu/commhal tune --backend cuda-nvlink --ranks 4 --collectives reduce -b 1K -e 1G -n 20 -w 3 --out $W/tune-4gpu.toml --json $W/tune-4gpu.json
gpu_step dead.log 25 "$DM" $L -n 4 -- $B reduce -r 0 -b 1M -e 1M --dead-rank 2 --timeout-ms 2000 -d half
grep -hE '^####|correct|WRONG|rror|wrong' $W/direct.log | cut -c1-220
grep -v '^\[rank [123]\]' $W/ab.log | grep -E -A12 'ratio nccl|^####' | cut -c1-160
grep -vE '^\s*$' $W/tune.log | tail -32 | cut -c1-250
cut -c1-250 $W/dead.log
