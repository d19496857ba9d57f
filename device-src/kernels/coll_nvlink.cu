// coll_nvlink.cu — collectives over NVLink peer mappings (one process per GPU, every
// rank maps every peer's input, output and scratch). Host side: backends/cuda-coll.
//
// This unit holds the entry points only; each algorithm family is a header of its own
// under coll/ (allreduce, reducescatter, allgather, broadcast, reduce, ring, alltoall,
// sendrecv, copy_engine), on the protocol of coll/protocol.cuh, the packets of
// coll/ll16.cuh and coll/ll63.cuh, the chains of coll/chain.cuh and the operators of
// coll/ops.cuh. Which kernels are written over the primitives, and with which steps:
// coll/prims.cuh's header; their Simple, LL16 and LL63 kernels are instantiations of
// one template each (the tables below).
//
// Kernels (dtype suffix _f16 / _bf16 / _f32, op sum; every other type and op: the
// reducing kernels built once per (type, op) without the suffix, see coll/ops.cuh and
// the tables at the end of this file):
//   commhal_coll_allreduce_ll_*      one-shot LL16: packets (data+flag) into every
//                                    peer's scratch, then read + reduce. No barrier.
//   commhal_coll_allreduce_2shot_*   barrier; reduce own 1/n chunk reading n inputs;
//                                    store it to every output; barrier.
//   commhal_coll_reducescatter_*     barrier; reduce own chunk reading n inputs into own
//                                    output; barrier.
//   commhal_coll_allgather           barrier; store own input into every output; barrier.
//   commhal_coll_allreduce_push_*    large sizes, remote stores only: barrier; store input
//                                    chunk p into rank p's staging slot; barrier; reduce
//                                    own chunk from local input + staging; store it to
//                                    every output; barrier.
//   commhal_coll_reducescatter_push_* large sizes, remote stores only: barrier; store input
//                                    chunk p into rank p's staging slot; barrier; reduce
//                                    own chunk from local input + staging.
//   *_ll variants of all-gather / reduce-scatter for small chunks.
//   commhal_coll_allgather_ll63      mid sizes: LL63 packets to every peer, no barrier.
//   commhal_coll_reducescatter_ll63_* mid sizes: chunk p of own input as LL63 packets to
//                                    rank p; reduce own chunk with what landed, in rank
//                                    order, into own output. No barrier.
//   commhal_coll_broadcast           barrier; root stores its input into every output;
//                                    barrier.
//   commhal_coll_broadcast_sf        (>= 3 ranks, large) barrier; non-root k loads chunk k
//                                    from the root's input and stores it into every
//                                    non-root's output; barrier.
//   commhal_coll_broadcast_ll        small sizes: LL16 packets from the root, no barrier.
//   commhal_coll_reduce_ll_*         small sizes: LL16 packets to the root, no barrier.
//   commhal_coll_reduce_*            barrier; worker k (the non-roots; both ranks when
//                                    n = 2) reduces chunk k (reading n inputs) into the
//                                    ROOT's output; barrier.
//   commhal_coll_reduce_all_*        mid sizes: as commhal_coll_reduce_*, every rank a
//                                    worker.
//   commhal_coll_alltoall            barrier; chunk p of own input -> rank p's output slot
//                                    [rank]; barrier.
//   commhal_coll_sendrecv            barrier; own input -> next rank's output; barrier.
//   commhal_coll_broadcast_chain     (large, bytes % 16 == 0) chain_start (a full barrier,
//                                    the neighbour's start or credits); pipelined chain
//                                    root -> root+1 -> ... : each chunk into the next
//                                    rank's output, or its staging with
//                                    COLL_FLAG_BCAST_STAGED (Prims<Simple, ChainFromRoot>).
//   commhal_coll_reduce_chain_*      (large, bytes % 16 == 0, staging holds the buffer)
//                                    chain_start as above; root+1 -> ... -> root: partial
//                                    sums into the next rank's staging, chunk by chunk
//                                    (Prims<Simple, ChainToRoot>).
//   commhal_coll_broadcast_ll63,     (above the LL16 sizes, bytes % 16 == 0) the chains' ranks with
//   commhal_coll_reduce_ll63_*       LL63 packets (63 data bits + a valid bit per 64-bit
//                                    word) instead of round flags: no barrier, no fence;
//                                    on the primitives (Prims<LL63, RootChain>).
//   commhal_coll_allreduce_ring_*, commhal_coll_reducescatter_ring_*,
//   commhal_coll_allgather_ring      (large) barrier; ring r -> r+1 over the chain flags
//                                    (Prims<Simple, Ring>): n-1 reduce-scatter steps into
//                                    the next rank's staging and/or n-1 all-gather steps
//                                    into its output.
//   commhal_coll_allreduce_ring_head_* (3+ ranks, large) the all-reduce ring from its second
//                                    reduce-scatter step to its first all-gather step;
//                                    the copy engines do the first and the rest.
//   commhal_coll_allreduce_ll63_*    mid sizes: LL63 packets in one shot, or over all pairs (scatter,
//                                    reduce, gather), no barrier.
//   commhal_coll_alltoall_ll,
//   commhal_coll_sendrecv_ll         small sizes: LL16 packets, no barrier.
//   commhal_coll_peers_done          the fence before an all-peers LL16 kernel whose
//                                    predecessor may not have heard from every peer.
//   commhal_coll_reduce_local_*,     the copy-engine path's local reductions
//   commhal_coll_reduce_pair_ce_*    (coll/copy_engine.cuh): no barrier, no epoch, nothing
//                                    remote.
//   commhal_coll_dma_wait            the copy-engine path's bounded flag wait.
//

#include "coll/allgather.cuh"
#include "coll/allreduce.cuh"
#include "coll/alltoall.cuh"
#include "coll/broadcast.cuh"
#include "coll/copy_engine.cuh"
#include "coll/reduce.cuh"
#include "coll/reducescatter.cuh"
#include "coll/ring.cuh"
#include "coll/sendrecv.cuh"

// ---- entry points, generated from three tables ------------------------------------
// COLL_REDUCING_KERNELS: X(name, call) for every kernel that reduces; `call` uses the
// operator type `Op`. Built here (no -DCOLL_RED_OP) as commhal_coll_<name>_f16 / _bf16
// / _f32 with the native sums OpF16 / OpBF16 / OpF32, and, with -DCOLL_RED_T=Ty_<type>
// -DCOLL_RED_OP=<COLL_OP_*>, as commhal_coll_<name> for that one (type, op): one
// module per (type, op), compiled on first use (backends/cuda-coll/src/kernels.rs;
// device-src lists the names as COLL_NVLINK_TYPED).
// COLL_REDUCING_KERNELS_512: the same for the reducing kernels whose entry points carry
// __launch_bounds__(512), the largest block the host launches (the `threads` tuning key
// is 32..=512), so that ptxas keeps them within the 128 registers per thread such a
// block has. Only the kernels that need it (NVRTC 13.0, sm_90): reducescatter_ll63
// takes 143 registers unbounded (a 512-thread launch fails) and 122 bounded, without
// spills. A bound on every kernel would change the allocation of those that fit
// already (the rings would take 108 registers instead of 64), and does cost where it
// changes it: allreduce_ll63 takes exactly 128 unbounded and 122 bounded, and its
// all-pairs form ran 2-5 % slower bounded (4 x H100, f16, 512 KiB-2 MiB).
// COLL_MOVING_KERNELS: X(name, call) for the kernels that only move bytes, built once
// as commhal_coll_<name> (not in the typed modules).
#define COLL_REDUCING_KERNELS(X)                                \
  X(reduce_local, reduce_local<Op>(a))                          \
  X(reduce_pair_ce, reduce_pair_ce<Op>(a))                      \
  X(allreduce_ll, (allreduce_oneshot<Op, LL16>(a)))             \
  X(allreduce_2shot, allreduce_2shot<Op>(a))                    \
  X(reducescatter, reducescatter<Op>(a))                        \
  X(reducescatter_ll, (reducescatter_push<Op, LL16>(a)))        \
  X(reducescatter_push, (reducescatter_push<Op, Simple>(a)))    \
  X(allreduce_push, (allreduce_push<Op, Simple>(a)))            \
  X(reduce_ll, reduce_ll<Op>(a))                                \
  X(reduce, (reduce_root<Op, false>(a)))                        \
  X(reduce_all, (reduce_root<Op, true>(a)))                     \
  X(reduce_chain, reduce_chain<Op>(a))                          \
  X(reduce_ll63, reduce_ll63<Op>(a))                            \
  X(allreduce_ll63, allreduce_ll63<Op>(a))                      \
  X(allreduce_ring, (ring<Op, COLL_RING_AR>(a)))                \
  X(allreduce_ring_head, (ring<Op, COLL_RING_AR_HEAD>(a)))      \
  X(reducescatter_ring, (ring<Op, COLL_RING_RS>(a)))

#define COLL_REDUCING_KERNELS_512(X)                            \
  X(reducescatter_ll63, (reducescatter_push<Op, LL63>(a)))

#define COLL_MOVING_KERNELS(X)                                  \
  X(dma_wait, dma_wait(a))                                      \
  X(peers_done, peers_done(a))                                  \
  X(allgather, allgather<Simple>(a))                            \
  X(allgather_ll, allgather<LL16>(a))                           \
  X(allgather_ll63, allgather<LL63>(a))                         \
  X(allgather_ring, (ring<OpF32, COLL_RING_AG>(a)))             \
  X(broadcast, broadcast<Simple>(a))                            \
  X(broadcast_sf, broadcast_sf(a))                              \
  X(broadcast_ll, broadcast_ll(a))                              \
  X(broadcast_chain, broadcast_chain(a))                        \
  X(broadcast_ll63, broadcast_ll63(a))                          \
  X(alltoall, alltoall<Simple>(a))                              \
  X(alltoall_ll, alltoall<LL16>(a))                             \
  X(sendrecv, sendrecv<Simple>(a))                              \
  X(sendrecv_ll, sendrecv<LL16>(a))

// `bounds`: nothing, or the __launch_bounds__ of COLL_REDUCING_KERNELS_512.
#define COLL_ENTRY(name, bounds, OpT, call) \
  extern "C" __global__ void bounds commhal_coll_##name(CollArgs a) { typedef OpT Op; call; }
#define COLL_BOUNDS_512 __launch_bounds__(512)

#ifndef COLL_RED_OP
#define COLL_NATIVE_BOUNDED(name, bounds, call) \
  COLL_ENTRY(name##_f16, bounds, OpF16, call)    \
  COLL_ENTRY(name##_bf16, bounds, OpBF16, call)  \
  COLL_ENTRY(name##_f32, bounds, OpF32, call)
#define COLL_NATIVE(name, call) COLL_NATIVE_BOUNDED(name, , call)
#define COLL_NATIVE_512(name, call) COLL_NATIVE_BOUNDED(name, COLL_BOUNDS_512, call)
#define COLL_MOVING(name, call) \
  extern "C" __global__ void commhal_coll_##name(CollArgs a) { call; }
COLL_REDUCING_KERNELS(COLL_NATIVE)
COLL_REDUCING_KERNELS_512(COLL_NATIVE_512)
COLL_MOVING_KERNELS(COLL_MOVING)
#else
typedef RedOp<COLL_RED_T, COLL_RED_OP> RedT;
#define COLL_TYPED(name, call) COLL_ENTRY(name, , RedT, call)
#define COLL_TYPED_512(name, call) COLL_ENTRY(name, COLL_BOUNDS_512, RedT, call)
COLL_REDUCING_KERNELS(COLL_TYPED)
COLL_REDUCING_KERNELS_512(COLL_TYPED_512)
#endif  // COLL_RED_OP
