#!/usr/bin/env bash
# Session 13 call 7 (2 x H200): the user-facing command on the final code — `commhal bench
# reduce / broadcast --backend cuda-nvlink --ranks 2 --compare nccl` (the copy-engine
# reduce from 256M, LL63 above 128K).
set -u
source scripts/lib-gpu.sh; gpu_session s13-g 150
gpu_step cli.log 60 "" .gpu/commhal bench reduce --backend cuda-nvlink --ranks 2 -b 64K -e 1G -f 4 -n 20 -w 3 -d half --compare nccl
gpu_step cli.log 60 "" .gpu/commhal bench broadcast --backend cuda-nvlink --ranks 2 -b 64K -e 1G -f 4 -n 20 -w 3 -d float --compare nccl
grep -vE '^\[rank 1\]' $W/cli.log | tail -60
