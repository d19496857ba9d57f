#!/usr/bin/env bash
# Session 14 call 2 (2 x H200): bench/micro/ce_lanes.cu with one push lane and fewer,
# larger chunks (keep 1/2 .. 1/5 of what is left after each chunk; floors 1-4 MiB).
set -u
source scripts/lib-gpu.sh; gpu_session s14-b 120
gpu_step micro.log 40 "" nvcc -O3 -std=c++20 -arch=sm_90 -o /tmp/ce_lanes bench/micro/ce_lanes.cu -lcuda
gpu_step micro.log 70 "" /tmp/ce_lanes
cat $W/micro.log
