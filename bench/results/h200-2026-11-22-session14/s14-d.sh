#!/usr/bin/env bash
# Session 14 call 4 (2 x H200): the tuner with an LL16 column for broadcast / reduce
# (the rooted LL16 cap and both LL63 windows derived together) and LL63 for the 2-rank
# broadcast: commhal tune --collectives broadcast,reduce on 2 ranks, then broadcast and
# reduce 1K-1G against NCCL with the file it wrote.
set -u
source scripts/lib-gpu.sh; gpu_session s14-d 420
L=".gpu/commhal launch"; B=.gpu/commhal-gpu-bench
cp algorithms/tuning/gpu-cuda-h200.toml $W/tune-2gpu.toml
gpu_step tune.log 220 "" .gpu/commhal tune --backend cuda-nvlink --ranks 2 --collectives broadcast,reduce -b 1K -e 1G -n 20 -w 3 --out $W/tune-2gpu.toml --json $W/tune-2gpu.json
for c in broadcast reduce; do
  gpu_step ab.log 60 "COMMHAL_GPU_TUNING=$W/tune-2gpu.toml" $L -n 2 -- $B $c -r 1 -b 1K -e 1G -f 2 -n 20 -w 3 -d half --compare nccl
done
grep -v '^\[rank [1-9]' $W/tune.log | tail -40
diff algorithms/tuning/gpu-cuda-h200.toml $W/tune-2gpu.toml
grep -h -E '^####|^\[rank 0\] +[0-9]+ ' $W/ab.log | awk '{ if ($1=="####") print substr($0,1,170); else print $3, $8, $12, $NF }' | awk '$NF!="[nccl]"'
