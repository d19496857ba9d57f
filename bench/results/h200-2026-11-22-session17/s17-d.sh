#!/usr/bin/env bash
# Session 17 call 4 (4 x H200): bench/micro/l2_window.cu — do peer stores into a small
# window of the receiver's memory (L2-resident) run faster than into a 1 GiB sweep?
set -u
source scripts/lib-gpu.sh; gpu_session s17-d 200
nvcc -O3 -arch=sm_90 -o /tmp/l2_window bench/micro/l2_window.cu > $W/l2.log 2>&1 || { echo BUILD FAILED; cat $W/l2.log; exit 1; }
timeout 90 /tmp/l2_window 4 >> $W/l2.log 2>&1; echo "rc=$?" >> $W/l2.log
timeout 60 /tmp/l2_window 2 >> $W/l2.log 2>&1; echo "rc=$?" >> $W/l2.log
cat $W/l2.log
