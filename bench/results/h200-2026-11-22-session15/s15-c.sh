#!/usr/bin/env bash
# Session 15 call 3 (4 x H200): round sizes at 256M..1G. All-reduce (ring + copy-engine
# tail from 512M) at ring_unroll 16 (the file) / 8 / 4; broadcast and reduce as the file
# picks (LL63 / chain) and with the chain forced at chain_unroll 8 (the file) / 4 / 2:
# a chain's fill and drain cost ~one round per hop, so smaller rounds could win there.
set -u
source scripts/lib-gpu.sh; gpu_session s15-c 500
L=".gpu/commhal launch"; B=.gpu/commhal-gpu-bench
O="-b 256M -e 1G -f 2 -n 20 -w 3 -d half --compare nccl"
for u in 16 8 4; do gpu_step ar.log 40 "COMMHAL_COLL_RING_UNROLL=$u" $L -n 4 -- $B allreduce $O; done
gpu_step bc.log 40 "" $L -n 4 -- $B broadcast -r 1 $O
for u in 8 4 2; do gpu_step bc.log 40 "COMMHAL_COLL_BCAST_LL63_MAX=0 COMMHAL_COLL_CHAIN_UNROLL=$u" $L -n 4 -- $B broadcast -r 1 $O; done
gpu_step rd.log 40 "" $L -n 4 -- $B reduce -r 1 $O
for u in 8 4 2; do gpu_step rd.log 40 "COMMHAL_COLL_REDUCE_LL63_MAX=0 COMMHAL_COLL_CHAIN_UNROLL=$u" $L -n 4 -- $B reduce -r 1 $O; done
for f in ar bc rd; do
grep -h -E '^####|^\[rank 0\] +[0-9]+ ' $W/$f.log | awk '{ if ($1=="####") print substr($0,1,150); else print $3, $8, $12, $NF }' | grep -v "nccl\]$" 
done
