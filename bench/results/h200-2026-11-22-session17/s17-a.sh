#!/usr/bin/env bash
# Session 17 call 1 (4 x H200): the all-reduce head kernel without its all-gather step
# (COMMHAL_EXP_AR_HEAD_AG=0: the kernel ends after the reduce-scatter, the copy engines
# move all n-1 all-gather steps) against the committed head (=1: the kernel's fused first
# all-gather step, n-2 copy-engine steps). Correctness forced from 16 bytes, then speed at
# 512M..1G alternated three times. Also the review refactor cd87302 on the GPU: the 2-rank
# copy-engine reduce route and the tuner's ce candidates.
set -u
source scripts/lib-gpu.sh; gpu_session s17-a 570
L=".gpu/commhal launch"; B=.gpu/commhal-gpu-bench
F="COMMHAL_EXP_AR_HEAD_AG=0 COMMHAL_COLL_AR_CE_MIN=16 COMMHAL_COLL_AR_RING_MIN=16 COMMHAL_COLL_LL_MAX=0"
for d in half float bfloat16; do gpu_step check.log 40 "$F" $L -n 4 -- $B allreduce -b 16 -e 256M -f 8 -n 3 -w 1 -d $d; done
gpu_step check.log 30 "$F" $L -n 3 -- $B allreduce -b 1040 -e 80M -f 3 -n 3 -w 1 -d half
gpu_step check.log 30 "$F" $L -n 4 -- $B allreduce -b 1040 -e 80M -f 3 -n 3 -w 1 -d bfloat16
gpu_step check.log 30 "$F" $L -n 4 -- $B allreduce -b 2M -e 16M -f 2 -n 301 -w 1 -d float
gpu_step check.log 60 "$F" $L -n 4 -- compute-sanitizer --tool memcheck --error-exitcode 3 $B allreduce -b 16K -e 8M -f 8 -n 2 -w 1 -d half
gpu_step dead.log 30 "$F" $L -n 4 -- $B allreduce -b 256M -e 256M --dead-rank 2 --timeout-ms 2000 -d half
gpu_step check.log 40 "" $L -n 2 -- $B reduce -b 128M -e 1G -f 2 -n 10 -w 2 -d half --compare nccl
O="-b 512M -e 1G -f 2 -n 40 -w 5 -d half --compare nccl"
for i in 1 2 3; do
gpu_step ar.log 40 "COMMHAL_EXP_AR_HEAD_AG=1" $L -n 4 -- $B allreduce $O
gpu_step ar.log 40 "COMMHAL_EXP_AR_HEAD_AG=0" $L -n 4 -- $B allreduce $O
done
gpu_step ar.log 30 "COMMHAL_EXP_AR_HEAD_AG=0" $L -n 3 -- $B allreduce -b 512M -e 1G -f 2 -n 20 -w 3 -d half --compare nccl
gpu_step tune.log 70 "" .gpu/commhal tune --ranks 2 --collectives reduce -b 256M -e 512M -f 2 -n 10 --out $W/t2.toml
gpu_step tune.log 90 "COMMHAL_EXP_AR_HEAD_AG=0" .gpu/commhal tune --ranks 4 --collectives allreduce -b 512M -e 1G -f 2 -n 10 --out $W/t4.toml
grep -hE '^####|correct|WRONG|rror|ERROR SUMMARY' $W/check.log $W/dead.log | cut -c1-220
grep -h -E '^####|^\[rank 0\] +[0-9]+ ' $W/ar.log $W/check.log | awk '{ if ($1=="####") print substr($0,1,170); else print $3, $8, $12, $NF }' | grep -v "nccl\]$"
grep -hiE '^####|ce|choose|->|threshold' $W/tune.log | head -60
