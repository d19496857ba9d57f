#!/usr/bin/env bash
# Session 15 call 2 (4 x H200): the tuner on 4 ranks for all-reduce with its new last
# candidate `ce` (the ring + the copy engines' all-gather tail; in place now without the
# handshake call 1 had), then all-reduce 1K-1G against NCCL with the file it wrote
# (f16; f32 / bf16 from 128M; 3 ranks from 64M).
set -u
source scripts/lib-gpu.sh; gpu_session s15-b 560
L=".gpu/commhal launch"; B=.gpu/commhal-gpu-bench
cp algorithms/tuning/gpu-cuda-h200.toml $W/tune-4gpu.toml
gpu_step tune.log 240 "" .gpu/commhal tune --backend cuda-nvlink --ranks 4 --collectives allreduce -b 1K -e 1G -n 100 -w 10 --out $W/tune-4gpu.toml --json $W/tune-4gpu.json
T="COMMHAL_GPU_TUNING=$W/tune-4gpu.toml"
gpu_step ab.log 60 "$T" $L -n 4 -- $B allreduce -b 1K -e 1G -f 2 -n 40 -w 5 -d half --compare nccl
gpu_step ab.log 40 "$T" $L -n 4 -- $B allreduce -b 128M -e 1G -f 2 -n 40 -w 5 -d float --compare nccl
gpu_step ab.log 40 "$T" $L -n 4 -- $B allreduce -b 128M -e 1G -f 2 -n 40 -w 5 -d bfloat16 --compare nccl
gpu_step ab.log 40 "$T" $L -n 3 -- $B allreduce -b 64M -e 1G -f 2 -n 20 -w 5 -d half --compare nccl
gpu_step check.log 40 "COMMHAL_COLL_AR_RING_MIN=16 COMMHAL_COLL_AR_CE_MIN=16" $L -n 4 -- $B allreduce -b 16 -e 256M -f 4 -n 5 -w 1 -d bfloat16
gpu_step check.log 40 "COMMHAL_COLL_AR_RING_MIN=16 COMMHAL_COLL_AR_CE_MIN=16" $L -n 3 -- $B allreduce -b 2M -e 16M -f 2 -n 301 -w 1 -d half
grep -v '^\[rank [1-9]' $W/tune.log | grep -v "^#   tuner sweep" | tail -40
diff algorithms/tuning/gpu-cuda-h200.toml $W/tune-4gpu.toml | grep -v "note ="
grep -hE '^####|correct|WRONG|rror' $W/check.log | cut -c1-200
grep -h -E '^####|^\[rank 0\] +[0-9]+ ' $W/ab.log | awk '{ if ($1=="####") print substr($0,1,150); else print $3, $8, $12, $NF }'
