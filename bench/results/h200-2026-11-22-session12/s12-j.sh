#!/usr/bin/env bash
# Session 12: do SM stores and one copy-engine copy add up on one NVLink direction?
# (bench/micro/mixed_push.cu, 2 GPUs) — the premise of pushing part of a 2-rank
# reduce's bytes through the copy engine.
set -u
source scripts/lib-gpu.sh; gpu_session s12-j 120
gpu_step mixed.log 60 "" nvcc -O3 -std=c++20 -arch=sm_90 -o /tmp/mixed_push bench/micro/mixed_push.cu
gpu_step mixed.log 80 "" /tmp/mixed_push
cat $W/mixed.log | cut -c1-200
