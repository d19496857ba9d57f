#!/usr/bin/env bash
# Session 18 call 3: bench/micro after e81efa6 (l2_window's grid variant is grid_copy<3>
# with a mask, the checks count_wrong_word, store_pattern uses it): built and run on the
# GPUs for the first time since that refactor.
set -u
source scripts/lib-gpu.sh; gpu_session s18-c 200
for m in l2_window store_pattern; do
  nvcc -O3 -std=c++20 -arch=sm_90 -o /tmp/$m bench/micro/$m.cu -lcuda > $W/$m.log 2>&1 || { echo "$m BUILD FAILED"; cat $W/$m.log; continue; }
  timeout 80 /tmp/$m 4 >> $W/$m.log 2>&1; echo "rc=$?" >> $W/$m.log
done
cat $W/l2_window.log $W/store_pattern.log
