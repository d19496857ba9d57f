//! The host-emu executor: runs any valid [`Plan`](crate::plan::Plan) on host threads
//! over registered shared memory.
//!
//! * [`run`]: the interpreter — [`Prepared`] (a plan flattened for one rank, with LL
//!   flag bookkeeping) and the op implementations (copies, piecewise reductions,
//!   LL8 packets, switch reduce/broadcast by reading every member, intra-rank barriers).
//! * [`sync`]: semaphores and the packet doorbell in each rank's sync region, waited
//!   on with [`commhal_channels::WaitPolicy::wait_on`] (spin, yield, futex, timeout).
//! * [`port`]: ranks on different (virtual) nodes: their memory is never mapped, and
//!   port-channel ops to them go over the cross-node port backend (`host-tcp` by
//!   default, `ib-verbs` when an explicit backend list names it; [`PortStats`] counts
//!   them).
//! * `raw`: every `unsafe` line (spans of host memory).
//!
//! **Contract** (the plan module's execution contract, made concrete):
//! * ops of a block run in program order on one host thread; blocks of a rank run on
//!   their own threads (block 0 on the caller's); `Barrier` is a `std::sync::Barrier`;
//! * `Put`/`Get`/`PutPackets` copy straight into/out of the peer's memory as mapped in
//!   this process; `Signal` is a SeqCst (release) add on the peer's counter, so every
//!   earlier put of the signalling thread is visible when the peer's `Wait` returns;
//! * `Port`-channel ops between ranks of one node take the same path as memory ones
//!   (host-emu's port is a proxy `memcpy` into the same shared pages plus a release
//!   add; doing it on the block's thread keeps its ordering and skips the proxy hop);
//!   `Flush` is then a no-op because every copy has completed when it returns;
//! * `Port`-channel `Put`/`Signal`/`Flush`/`PutPackets` to a rank on **another node**
//!   are port operations of the cross-node port backend on the block's thread ([`port`]); any other access
//!   to a far rank's memory is an error (it is not mapped);
//! * LL packets: LL8 words (4 data bytes + 4 flag bytes, one release store); the flag
//!   is `1 + (invocation × stride + k) mod (2³²−1)` where `k` counts earlier uses of the
//!   same packet slot in the invocation, so scratch never needs clearing; each chunk's
//!   packets start on a 128-byte line of their own, where the GPU stores two words as
//!   one LL16 packet and a warp's stores fill whole sectors (see
//!   [`run::packet_area_bytes`]);
//! * scratch rotation: invocation `i` of a plan uses copy `i mod scratch_rotation` of
//!   that plan's own scratch (each cached plan has its scratch and counts its own
//!   invocations), so only the plan's signals order the reuse of a copy, whatever
//!   other plans run in between; the far scratch writers that the GPUs must hold back
//!   ([`Plan::far_scratch_writer_pairs`](crate::plan::Plan::far_scratch_writer_pairs),
//!   where copies rotate over every plan) need nothing here;
//! * one-way packet senders ([`Plan::one_way_packet_pairs`](crate::plan::Plan::one_way_packet_pairs),
//!   e.g. the broadcast root of `broadcast:ll`): the receiver signals the sender at the
//!   end of each invocation and the sender waits for the signal of the invocation
//!   `scratch_rotation` before its own, so it never overwrites a copy still being read.
//!
//! The communicator ([`crate::comm`]) owns the memory and builds the views.

mod kernels;
pub mod port;
pub(crate) mod raw;
pub mod run;
pub mod sync;

pub use port::PortStats;
pub use run::{PIECE, Prepared, packet_area_bytes};
pub use sync::MAX_TAGS;
