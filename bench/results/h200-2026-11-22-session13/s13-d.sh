#!/usr/bin/env bash
# Session 13 call 4 (2 x H200): the 2-rank copy-engine reduce (dma.rs reduce_pair,
# commhal_coll_reduce_pair_ce_*). Correctness with it forced from 16 bytes (dtypes,
# roots, odd sizes, sizes across the chunk floor, 301 launches, memcheck), a dead rank,
# speed against NCCL (forced from 128M, and the chain / LL63 as committed), the tuner.
set -u
source scripts/lib-gpu.sh; gpu_session s13-d 300
L=".gpu/commhal launch"; B=.gpu/commhal-gpu-bench
F="COMMHAL_COLL_REDUCE_CE_MIN=16"
for d in float half bfloat16; do
  gpu_step check.log 30 "$F" $L -n 2 -- $B reduce -r 1 -b 16 -e 256M -f 8 -n 3 -w 1 -d $d
done
gpu_step check.log 30 "$F" $L -n 2 -- $B reduce -r 0 -b 1040 -e 80M -f 3 -n 3 -w 1 -d half
gpu_step check.log 30 "$F" $L -n 2 -- $B reduce -r 0 -b 2M -e 16M -f 2 -n 301 -w 1 -d float
gpu_step check.log 30 "$F" $L -n 2 -- $B reduce -r 1 -b 4194320 -e 4194320 -n 50 -w 1 -d half
gpu_step check.log 60 "$F" $L -n 2 -- compute-sanitizer --tool memcheck --error-exitcode 3 $B reduce -r 1 -b 16K -e 32M -f 8 -n 2 -w 1 -d half
gpu_step dead.log 30 "$F" $L -n 2 -- $B reduce -r 0 -b 256M -e 256M --dead-rank 1 --timeout-ms 2000 -d half
gpu_step dead.log 30 "$F" $L -n 2 -- $B reduce -r 0 -b 256M -e 256M --dead-rank 0 --timeout-ms 2000 -d half
O="-r 0 -b 64M -e 1G -f 2 -n 20 -w 3 -d half --compare nccl"
gpu_step big.log 40 "COMMHAL_COLL_REDUCE_CE_MIN=134217728" $L -n 2 -- $B reduce $O
gpu_step big.log 40 "COMMHAL_COLL_REDUCE_CE_MIN=134217728" $L -n 2 -- $B reduce -r 1 -b 128M -e 1G -f 2 -n 20 -w 3 -d float --compare nccl
gpu_step big.log 40 "COMMHAL_COLL_REDUCE_CE_MIN=134217728" $L -n 2 -- $B reduce -r 0 -b 128M -e 1G -f 2 -n 20 -w 3 -d bfloat16 --compare nccl
cp algorithms/tuning/gpu-cuda-h200.toml $W/tune-2gpu.toml
gpu_step tune.log 120 "" .gpu/commhal tune --backend cuda-nvlink --ranks 2 --collectives reduce -b 1K -e 1G -n 20 -w 3 --out $W/tune-2gpu.toml --json $W/tune-2gpu.json
grep -hE '^####|correct|WRONG|rror|ERROR SUMMARY' $W/check.log $W/dead.log | cut -c1-200
grep -h -E '^####|^\[rank 0\] +[0-9]+ ' $W/big.log | awk '{ if ($1=="####") print substr($0,1,170); else print $3, $8, $12, $NF }'
grep -v '^\[rank [1-9]' $W/tune.log | tail -30
diff algorithms/tuning/gpu-cuda-h200.toml $W/tune-2gpu.toml
