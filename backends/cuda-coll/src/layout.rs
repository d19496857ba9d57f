//! The scratch layout and kernel argument block shared with
//! `device-src/kernels/coll_nvlink.cu` (the `COLL_*` defines and `struct CollArgs`;
//! a test reads the unit's text and checks every number here against it).

/// Most ranks one communicator supports (size of the peer tables).
pub const MAX_RANKS: usize = 8;
/// Flag slots per peer: the largest grid any kernel is launched with.
pub const MAX_BLOCKS: u32 = 1024;
/// `u64 [MAX_RANKS]`: word p = every launch up to this epoch has completed on rank p
/// (p stores it into every rank's scratch at the start of its next launch; see
/// `wait_peer_done` in the unit).
pub const OFF_DONE_EPOCHS: u64 = 2048;
/// `u32` error word (device error codes; 0 = none).
pub const OFF_ERROR: u64 = 12;
/// Start-barrier flags: `u64 [MAX_RANKS][MAX_BLOCKS]`, indexed by sender.
pub const OFF_START_FLAGS: u64 = 4096;
/// Copy-engine path flags: u32 at `OFF_DMA_FLAGS + (kind * MAX_RANKS + sender) * 8`
/// ([`dma_flag`]); kinds [`DMA_START`], [`DMA_MID`], [`DMA_END`], [`DMA_CHUNK`],
/// [`DMA_RING`].
pub const OFF_DMA_FLAGS: u64 = 1024;
/// Copy-engine path flag kinds.
pub const DMA_START: u64 = 0;
/// See [`DMA_START`].
pub const DMA_MID: u64 = 1;
/// See [`DMA_START`].
pub const DMA_END: u64 = 2;
/// The 2-rank copy-engine reduce's chunk flag ([`pair_ce_tag`] values; the root's
/// `commhal_coll_reduce_pair_ce_*` kernel waits on it).
pub const DMA_CHUNK: u64 = 3;
/// The all-reduce ring's copy-engine all-gather steps: [`pair_ce_tag`]`(e, t)` from the
/// previous rank = its step-`t` segment is in this rank's output.
pub const DMA_RING: u64 = 4;
/// Point-to-point: the receiver's stream reached its `s`-th receive from the sender (its
/// buffer is free), written into the sender's row ([`crate::comm`]'s `p2p`).
pub const DMA_P2P_READY: u64 = 5;
/// Point-to-point: the sender's `s`-th copy to the receiver has landed.
pub const DMA_P2P_DONE: u64 = 6;

/// The 2-rank copy-engine reduce's smallest chunk (bytes): the transfer is cut into
/// chunks that each leave [`PAIR_CE_KEEP_EIGHTHS`] / 8 of what was left — B/2, then
/// B/4, ... — until less than this would be left, and the rest is the last chunk. The
/// root reduces each chunk while the next ones are copied, so what it does after the
/// last copy is one chunk of less than 2 × this (< 4 MiB here).
pub const PAIR_CE_FLOOR: u64 = 2 << 20;
/// What each copy-engine chunk leaves of what was left, in eighths. Every chunk costs
/// ~6 µs of copy-engine turnaround (the stream write waits for its copy to drain), so
/// fewer, larger chunks are faster as long as the root's reduce of one chunk still ends
/// before the next one lands. On H100 (slower HBM than H200) that needs halving:
/// 726 / 1404 / 2760 µs at 256M / 512M / 1G, where 3/8 took 766 / 1501 / 2981 and
/// 5/8 747 / 1430 / 2790 (NCCL 735 / 1453 / —); on H200 halving took 731 / 1416 / 2776
/// against 3/8's 721 / 1407 / 2767 (bench/micro/ce_lanes.cu, f32, 2 GPUs each).
pub const PAIR_CE_KEEP_EIGHTHS: u64 = 4;
/// Most chunks of one 2-rank copy-engine reduce (the tag keeps 5 bits for the chunk).
pub const PAIR_CE_MAX_CHUNKS: usize = 31;
/// Blocks of the direct all-gather from the tuned `allgather_narrow_min` on: on H100,
/// from about 1.5 MiB stored into peers per GPU, 64 blocks beat the full grid (4 GPUs,
/// 4 MiB: 16.5 against 17.3 µs; 2 GPUs, 4 MiB: 12.4 against 13.1; docs/performance.md).
pub const AG_NARROW_BLOCKS: u32 = 64;

/// The chunks (byte offset, bytes) of a 2-rank copy-engine reduce of `bytes` (a multiple
/// of 16): each leaves [`PAIR_CE_KEEP_EIGHTHS`] / 8 of what was left (in 16-byte
/// vectors, rounded down) while that is at least [`PAIR_CE_FLOOR`], then the rest. The
/// unit's `reduce_pair_ce` walks the same boundaries (in 16-byte vectors).
pub fn pair_ce_chunks(bytes: u64) -> Vec<(u64, u64)> {
    let (total, floor) = (bytes / 16, PAIR_CE_FLOOR / 16);
    let mut left = total;
    let mut out = Vec::new();
    while left > 0 {
        let keep = left * PAIR_CE_KEEP_EIGHTHS / 8;
        let next = if keep >= floor { keep } else { 0 };
        out.push(((total - left) * 16, (left - next) * 16));
        left = next;
    }
    out
}

/// The value the sender writes into the root's [`DMA_CHUNK`] flag after chunk `k` of
/// launch `e` (u32, compared cyclically): grows within a launch and from one launch
/// to the next.
pub fn pair_ce_tag(e: u32, k: usize) -> u32 {
    (e << 5) | (k as u32 + 1)
}

/// Byte offset in a rank's scratch of the copy-engine flag `kind` written by `sender`.
pub fn dma_flag(kind: u64, sender: u32) -> u64 {
    OFF_DMA_FLAGS + (kind * MAX_RANKS as u64 + u64::from(sender)) * 8
}
/// End-barrier flags, same shape.
pub const OFF_END_FLAGS: u64 = OFF_START_FLAGS + (MAX_RANKS as u64) * (MAX_BLOCKS as u64) * 8;
/// Mid-barrier flags (push all-reduce), same shape.
pub const OFF_MID_FLAGS: u64 = OFF_END_FLAGS + (MAX_RANKS as u64) * (MAX_BLOCKS as u64) * 8;
/// Chain and ring flags: `[launch parity][sender][block]`, value
/// `(epoch << 32) | (round + 1)`.
pub const OFF_CHAIN_FLAGS: u64 = OFF_MID_FLAGS + (MAX_RANKS as u64) * (MAX_BLOCKS as u64) * 8;
/// Reduce-chain credits: `[sender][block]`, the tag of the last round of staging the
/// sender (the next rank) consumed (`chain_start` in the unit).
pub const OFF_CHAIN_CREDITS: u64 =
    OFF_CHAIN_FLAGS + 2 * (MAX_RANKS as u64) * (MAX_BLOCKS as u64) * 8;
/// This rank's last chain launch: `[epoch, geometry][block]` (`chain_start`).
pub const OFF_CHAIN_LAST: u64 = OFF_CHAIN_CREDITS + (MAX_RANKS as u64) * (MAX_BLOCKS as u64) * 8;
/// Launch epochs: `u64 [MAX_BLOCKS]`, one word per block slot, all equal between
/// launches (block b of a launch reads word b; see "Epochs" in the unit).
pub const OFF_BLOCK_EPOCHS: u64 = OFF_CHAIN_LAST + 2 * (MAX_BLOCKS as u64) * 8;
/// LL slots: `[2 parities][MAX_RANKS senders][slot bytes]`.
pub const OFF_LL: u64 = OFF_BLOCK_EPOCHS + (MAX_BLOCKS as u64) * 8;
/// Most vectors per thread in one chunk of the chain and ring kernels (`CollArgs::chain_unroll`).
pub const CHAIN_UNROLL_MAX: u32 = 32;
/// [`CollArgs::flags`]: this chain directly follows a chain on the same Comm and may
/// start with the neighbour handshake (`chain_start` in the unit).
pub const FLAG_CHAIN_OVERLAP: u32 = 1;
/// [`CollArgs::flags`]: with [`FLAG_CHAIN_OVERLAP`], a reduce chain that follows one of
/// the same geometry gates its stores per round on the next rank's credits.
pub const FLAG_CHAIN_CREDITS: u32 = 2;
/// [`CollArgs::flags`]: the broadcast chain goes through the staging areas (each rank
/// copies into its own output), so it can take credits too.
pub const FLAG_BCAST_STAGED: u32 = 4;
/// [`CollArgs::flags`]: the LL63 all-reduce runs in one shot (every rank sends its
/// whole input to every peer and reduces), not over all pairs.
pub const FLAG_AR_ONESHOT: u32 = 8;
/// Device error: a wait on a peer (barrier, chain / ring flag, previous launch) timed out.
pub const ERR_WAIT_TIMEOUT: u32 = 1;
/// Device error: an LL packet never arrived.
pub const ERR_PACKET_TIMEOUT: u32 = 4;
/// A plan's port trigger found the FIFO full (commhal/handles.h ERR_FIFO_FULL_TIMEOUT).
pub const ERR_FIFO_FULL: u32 = 2;
/// A plan's port flush timed out (ERR_FLUSH_TIMEOUT).
pub const ERR_FLUSH_TIMEOUT: u32 = 3;
/// A plan's port trigger was out of range (ERR_TRIGGER_RANGE).
pub const ERR_TRIGGER_RANGE: u32 = 5;
/// Error word written from the host by the watchdog ([`crate::watchdog`]): the
/// bootstrap saw a peer go; every device wait gives up on a non-zero word.
pub const ERR_PEER_GONE: u32 = 8;

/// Bytes of scratch for LL slots holding up to `ll_max_bytes` of data per sender, an
/// LL63 region for chains of up to `ll63_max_bytes`, and after it the LL63 small region
/// (two parity halves of `small_half` bytes: [`ll63_small_half_bytes`] or
/// [`pairs_half_bytes`], the larger).
pub fn scratch_bytes(ll_max_bytes: u64, ll63_max_bytes: u64, small_half: u64) -> u64 {
    off_ll63_small(ll_max_bytes, ll63_max_bytes) + 2 * small_half
}

/// Warp items of the all-pairs LL63 all-reduce of `bytes` on `n` ranks: (2n - 1) x the
/// largest chunk's tiles (scatter, reduce, gather; one warp each where the grid allows).
pub fn pairs_items(bytes: u64, n: u32) -> u64 {
    let n = u64::from(n.max(2));
    (2 * n - 1) * (bytes / 16).div_ceil(n).div_ceil(LL63_TILE_VECS)
}

/// Bytes of a parity half the all-pairs LL63 all-reduce of `bytes` on `n` ranks uses
/// (`allreduce_push<Op, LL63>` in the unit): 2 (n - 1) slots of the largest chunk's warp
/// tiles (0 for 0 bytes).
pub fn pairs_half_bytes(bytes: u64, n: u32) -> u64 {
    let n = u64::from(n.max(2));
    let tiles = (bytes / 16).div_ceil(n).div_ceil(LL63_TILE_VECS);
    2 * (n - 1) * tiles * LL63_TILE_PKTS * 16
}

/// Warp items of the one-shot LL63 all-reduce of `bytes`: the tiles of the whole input
/// (each warp item sends one tile to every peer, then reduces it).
pub fn oneshot_items(bytes: u64) -> u64 {
    (bytes / 16).div_ceil(LL63_TILE_VECS)
}

/// Bytes of a parity half the one-shot LL63 all-reduce of `bytes` on `n` ranks uses
/// (`allreduce_oneshot<Op, LL63>` in the unit; the LL63 all-gather and reduce-scatter
/// with their per-rank bytes): n - 1 slots of the whole input's warp tiles.
pub fn oneshot_half_bytes(bytes: u64, n: u32) -> u64 {
    u64::from(n.max(2) - 1) * oneshot_items(bytes) * LL63_TILE_PKTS * 16
}

/// 16-byte data vectors in one LL63 warp tile (4 row pairs x 63).
pub const LL63_TILE_VECS: u64 = 252;
/// 16-byte packets in one LL63 warp tile (8 rows x 32 lanes).
pub const LL63_TILE_PKTS: u64 = 256;

/// Offset of the LL63 region in a rank's scratch: right after the LL slots
/// (`ll63_region` in the unit).
pub fn off_ll63(ll_slot_bytes: u64) -> u64 {
    OFF_LL + 2 * MAX_RANKS as u64 * ll_slot_bytes
}

/// Largest LL63 transfer (bytes) that goes through the small region's parity halves
/// (`ll63_small` in the unit): 2 x ~2 MiB of scratch per rank that uses LL63 at all.
pub const LL63_SMALL_MAX: u64 = 2 << 20;

/// Offset of the LL63 small region in a rank's scratch (`CollArgs::ll63_small_off`):
/// right after the large LL63 region.
pub fn off_ll63_small(ll_max_bytes: u64, ll63_max_bytes: u64) -> u64 {
    off_ll63(ll_slot_bytes(ll_max_bytes)) + ll63_region_bytes(ll63_max_bytes)
}

/// Bytes of one parity half of the LL63 small region (`CollArgs::ll63_small_half`) when
/// LL63 transfers go up to `ll63_max_bytes` (0: no LL63, no small region).
pub fn ll63_small_half_bytes(ll63_max_bytes: u64) -> u64 {
    ll63_region_bytes(ll63_max_bytes.min(LL63_SMALL_MAX))
}

/// Bytes of the LL63 region for transfers of up to `bytes`: 4 KiB of packets per warp
/// tile of 3.94 KiB of data (0 for none).
pub fn ll63_region_bytes(bytes: u64) -> u64 {
    bytes.div_ceil(16).div_ceil(LL63_TILE_VECS) * LL63_TILE_PKTS * 16
}

/// Grid `(blocks, threads)` with a thread per LL16 packet: blocks of `threads` threads
/// (the tuned `ll_threads`), more a block (to 512) only where `max_blocks` such blocks
/// would leave packets without a thread. These kernels wait on memory: the same
/// packets over more SMs finish sooner (4 x H100, 4 ranks, in graphs: 128 threads a
/// block took 0.76-1.00 of the time of 512 at 4-64 KiB; 128 threads a block with the
/// blocks capped at the SM count took 1.09-1.17 at 128-512 KiB on 2 ranks). A block is
/// never smaller, even with fewer packets: one warp for the 32 packets of the 4-rank
/// 1 KiB reduce-scatter took 3.41 µs in graphs, a block of 128 threads 2.90 (2 ranks,
/// 1 KiB all-gather and reduce-scatter: 0.91-0.92 of the time). Whatever a small block
/// pays more, it is not the system scope of the launch-number stores (launch.h, 1024 /
/// threads a thread): weak stores changed nothing.
pub fn packet_grid(packets: u64, threads: u32, max_blocks: u32) -> (u32, u32) {
    let max_blocks = u64::from(max_blocks.max(1));
    let t = u64::from(threads.max(32))
        .max(packets.div_ceil(max_blocks).min(512))
        .next_multiple_of(32);
    let blocks = packets.div_ceil(t).clamp(1, max_blocks);
    (blocks as u32, t as u32)
}

/// Grid `(blocks, threads)` of an LL63 chain over `bytes`: one warp per tile of 252
/// vectors (with fewer warps than tiles each takes every W-th), whole warps per block
/// (at most `threads / 32`), the tiles spread over as many blocks as `max_blocks`
/// allows: an SM's share of the link traffic is what limits these kernels (measured
/// with the LL56 packet format, 7 data bytes and a flag byte per word, on 4 x H200: 16 blocks of 16 warps moved 64 MiB at 0.7 x the
/// speed of 132 blocks, 8 blocks at 0.36 x).
pub fn ll63_grid(bytes: u64, threads: u32, max_blocks: u32) -> (u32, u32) {
    let max_warps = u64::from((threads / 32).max(1));
    let max_blocks = u64::from(max_blocks.max(1));
    let tiles = (bytes / 16).div_ceil(LL63_TILE_VECS).max(1);
    let warps = tiles.div_ceil(tiles.min(max_blocks)).min(max_warps);
    let blocks = tiles.div_ceil(warps).min(max_blocks);
    (blocks as u32, (warps * 32) as u32)
}

/// Largest transfer (bytes, whole 16-byte vectors) an LL63 region of `region` bytes holds.
pub fn ll63_capacity(region: u64) -> u64 {
    region / (LL63_TILE_PKTS * 16) * LL63_TILE_VECS * 16
}

/// One LL16 slot (8 data bytes per 16-byte packet) for `ll_max_bytes` of data.
pub fn ll_slot_bytes(ll_max_bytes: u64) -> u64 {
    (ll_max_bytes * 2).next_multiple_of(4096)
}

/// What an error word means.
pub fn describe_error(code: u32) -> &'static str {
    match code {
        0 => "no error",
        ERR_WAIT_TIMEOUT => {
            "a device wait on a peer (a barrier, a chain or ring flag, or the peer finishing \
             its previous launch) timed out (a peer never launched the same collective, died, \
             or the device wait bound is shorter than the collective takes)"
        }
        ERR_PACKET_TIMEOUT => {
            "an LL packet never arrived (a peer never launched the same collective, died, or \
             the device wait bound is shorter than the collective takes)"
        }
        ERR_PEER_GONE => {
            "a peer is gone (the bootstrap saw its connection close or it aborted); the \
             device waits stopped"
        }
        ERR_FIFO_FULL => {
            "a plan's port trigger found the proxy FIFO full until the device wait bound \
             (the proxy thread stopped on a port error, or is starved of CPU)"
        }
        ERR_FLUSH_TIMEOUT => {
            "a plan's port put was not flushed within the device wait bound (the proxy \
             thread stopped on a port error, or the port backend stalls)"
        }
        ERR_TRIGGER_RANGE => {
            "a plan's port put names memory outside every window of the ranks' registered \
             input, output and plan area in the port table (the windows cover each region \
             whole, 4 GiB at most apiece: a plan or code generator bug, or regions whose \
             lengths differ between ranks)"
        }
        _ => "unknown device error code",
    }
}

/// Kernel argument block, passed by value. Mirrors `struct CollArgs` in the unit.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CollArgs {
    /// Every rank's input, mapped in this process.
    pub input: [u64; MAX_RANKS],
    /// Every rank's output, mapped in this process.
    pub output: [u64; MAX_RANKS],
    /// Every rank's scratch, mapped in this process.
    pub scratch: [u64; MAX_RANKS],
    /// Elements (all-reduce: all; reduce-scatter: per rank), all-gather: bytes per rank.
    pub count: u64,
    /// Bound of every device wait, ns.
    pub spin_ns: u64,
    /// Bytes of one LL slot.
    pub ll_slot_bytes: u64,
    /// This rank.
    pub rank: u32,
    /// Ranks.
    pub nranks: u32,
    /// Every rank's staging area (push all-reduce), mapped in this process.
    pub stage: [u64; MAX_RANKS],
    /// Bytes of one sender's slot in a staging area.
    pub stage_slot_bytes: u64,
    /// Broadcast / reduce: the root rank (< nranks).
    pub root: u32,
    /// Chain kernels: vectors per thread in one chunk (1..=`CHAIN_UNROLL_MAX`).
    pub chain_unroll: u32,
    /// LL63 chains: the small region's offset in every rank's scratch.
    pub ll63_small_off: u64,
    /// LL63 chains: bytes of one parity half of the small region (0: none).
    pub ll63_small_half: u64,
    /// `FLAG_*` bits.
    pub flags: u32,
    /// The most CTAs a launch of this rank may have (the tuned `max_blocks`): the
    /// block slots of the launch numbers every launch stores (launch.h); a larger grid
    /// is refused ([`crate::kernels::Kernels::launch_args`]). 0 stores them all.
    pub launch_slots: u32,
    /// Premulsum: the scalar as one element of the launch's type, in the low bytes
    /// (native byte order; [`crate::kernels::ReduceOp::scalar_bits`]). The same on
    /// every rank.
    pub scalar: u64,
    /// The launch's `COLL_OP_*` code ([`crate::kernels::ReduceOp::code`]); the kernel's
    /// op is compiled in, this records it.
    pub red_op: u32,
    /// Padding (the unit's `red_pad`).
    pub red_pad: u32,
}

/// Pull + forward broadcast: the chunk index of `rank` among the `n - 1` non-roots
/// (`None` for the root). The k-th non-root is rank `(root + 1 + k) % n`. Same formula
/// as `commhal_coll_broadcast_sf` in the unit.
pub fn bcast_chunk_index(n: u32, root: u32, rank: u32) -> Option<u32> {
    if rank == root || n < 2 {
        return None;
    }
    Some((rank + n - root - 1) % n)
}

/// Reduce to the root: `(workers, k)` — how many ranks split the vectors and `rank`'s
/// chunk index among them (`None`: the root, which only takes part in the barriers).
/// From 3 ranks the workers are the non-roots (numbered as [`bcast_chunk_index`]);
/// with 2 both ranks work. Same rule as `reduce_root` in the unit; the host sizes the
/// grid with `workers`.
pub fn reduce_worker(n: u32, root: u32, rank: u32) -> (u32, Option<u32>) {
    if n < 3 {
        (n, Some(rank))
    } else {
        (n - 1, bcast_chunk_index(n, root, rank))
    }
}

/// Bytes of one sender's staging slot for all-reduces up to `capacity` bytes over `n`
/// ranks: the largest chunk of whole 16-byte vectors.
pub fn stage_slot_bytes(capacity: u64, n: u32) -> u64 {
    (capacity / 16).div_ceil(u64::from(n.max(1))) * 16
}

/// `[begin, end)` of part `i` when `units` are split over `n` parts: the first
/// `units % n` parts get one more unit. Same formula as `partition` in the unit.
pub fn partition(units: u64, n: u32, i: u32) -> (u64, u64) {
    let n64 = u64::from(n.max(1));
    let i64_ = u64::from(i);
    let base = units / n64;
    let rem = units % n64;
    let begin = i64_ * base + i64_.min(rem);
    let end = begin + base + u64::from(i64_ < rem);
    (begin, end)
}

/// The element ranges rank `i` of `n` reduces in the two-shot all-reduce of `count`
/// elements of `elem` bytes: whole 16-byte vectors, plus the tail (last rank only).
pub fn two_shot_elems(count: u64, elem: u64, n: u32, i: u32) -> Vec<(u64, u64)> {
    let per_vec = 16 / elem;
    let nvec = count * elem / 16;
    let (vb, ve) = partition(nvec, n, i);
    let mut v = vec![(vb * per_vec, ve * per_vec)];
    if i + 1 == n && nvec * per_vec < count {
        v.push((nvec * per_vec, count));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread per packet: `threads` a block while the blocks last, then more threads
    /// a block (to 512), then more packets a thread.
    #[test]
    fn packet_grid_spreads_packets_over_blocks() {
        assert_eq!(packet_grid(10, 128, 132), (1, 128));
        assert_eq!(packet_grid(100, 128, 132), (1, 128));
        assert_eq!(packet_grid(100, 256, 132), (1, 256));
        assert_eq!(packet_grid(8192, 128, 132), (64, 128));
        assert_eq!(packet_grid(8192, 512, 132), (16, 512));
        assert_eq!(packet_grid(32768, 128, 132), (128, 256));
        assert_eq!(packet_grid(1 << 20, 128, 132), (132, 512));
        assert_eq!(packet_grid(4096, 128, 0), (1, 512)); // at least one block
    }

    fn define(name: &str) -> String {
        let src = commhal_device_src::coll_nvlink_text();
        let key = format!("#define {name} ");
        let line = src
            .lines()
            .find(|l| l.starts_with(&key))
            .unwrap_or_else(|| panic!("{name} not defined in coll_nvlink.cu"));
        line[key.len()..].trim().to_string()
    }

    #[test]
    fn constants_match_the_unit() {
        assert_eq!(define("COLL_MAX_RANKS"), MAX_RANKS.to_string());
        assert_eq!(define("COLL_MAX_BLOCKS"), MAX_BLOCKS.to_string());
        assert_eq!(define("COLL_OFF_DONE_EPOCHS"), OFF_DONE_EPOCHS.to_string());
        // the done words sit between the copy-engine flags and the start flags
        assert!(dma_flag(DMA_RING, MAX_RANKS as u32) <= OFF_DONE_EPOCHS);
        assert!(OFF_DONE_EPOCHS + 8 * MAX_RANKS as u64 <= OFF_START_FLAGS);
        assert_eq!(define("COLL_OFF_ERROR"), OFF_ERROR.to_string());
        assert_eq!(define("COLL_OFF_START_FLAGS"), OFF_START_FLAGS.to_string());
        assert_eq!(define("COLL_OFF_DMA_FLAGS"), OFF_DMA_FLAGS.to_string());
        // the copy-engine flags fit between the header words and the START flags
        assert!(dma_flag(DMA_START, 0) >= OFF_ERROR + 4);
        assert!(dma_flag(DMA_RING, MAX_RANKS as u32 - 1) + 4 <= OFF_START_FLAGS);
        assert_eq!(define("COLL_DMA_CHUNK"), DMA_CHUNK.to_string());
        assert_eq!(define("COLL_PAIR_CE_FLOOR"), PAIR_CE_FLOOR.to_string());
        assert_eq!(
            define("COLL_PAIR_CE_KEEP_EIGHTHS"),
            PAIR_CE_KEEP_EIGHTHS.to_string()
        );
        assert_eq!(
            define("COLL_OFF_END_FLAGS"),
            "(COLL_OFF_START_FLAGS + COLL_MAX_RANKS * COLL_MAX_BLOCKS * 8)"
        );
        assert_eq!(
            define("COLL_OFF_MID_FLAGS"),
            "(COLL_OFF_END_FLAGS + COLL_MAX_RANKS * COLL_MAX_BLOCKS * 8)"
        );
        assert_eq!(
            define("COLL_OFF_CHAIN_FLAGS"),
            "(COLL_OFF_MID_FLAGS + COLL_MAX_RANKS * COLL_MAX_BLOCKS * 8)"
        );
        assert_eq!(
            define("COLL_OFF_CHAIN_CREDITS"),
            "(COLL_OFF_CHAIN_FLAGS + 2 * COLL_MAX_RANKS * COLL_MAX_BLOCKS * 8)"
        );
        assert_eq!(
            define("COLL_OFF_CHAIN_LAST"),
            "(COLL_OFF_CHAIN_CREDITS + COLL_MAX_RANKS * COLL_MAX_BLOCKS * 8)"
        );
        assert_eq!(
            define("COLL_OFF_BLOCK_EPOCHS"),
            "(COLL_OFF_CHAIN_LAST + 2 * COLL_MAX_BLOCKS * 8)"
        );
        assert_eq!(
            define("COLL_OFF_LL"),
            "(COLL_OFF_BLOCK_EPOCHS + COLL_MAX_BLOCKS * 8)"
        );
        assert_eq!(
            define("COLL_CHAIN_UNROLL_MAX"),
            CHAIN_UNROLL_MAX.to_string()
        );
        // C macros of the unit, not environment variables: spelled as prefix + name so
        // the settings table's scan of the tree does not take them for variables
        for (name, value) in [
            ("LL63_TILE_VECS", LL63_TILE_VECS),
            ("LL63_TILE_PKTS", LL63_TILE_PKTS),
        ] {
            assert_eq!(
                define(&format!("COMMHAL_{name}")),
                value.to_string(),
                "{name}"
            );
        }
        let src = commhal_device_src::coll_nvlink_text();
        assert!(
            src.contains("a.scratch[owner] + COLL_OFF_LL +\n                               2 * COLL_MAX_RANKS * a.ll_slot_bytes"),
            "ll63_region in the unit must sit where off_ll63 says"
        );
        // the kernels report the channels' error codes (commhal/handles.h)
        assert_eq!(
            ERR_WAIT_TIMEOUT,
            commhal_device_src::layout::error_code::WAIT_TIMEOUT
        );
        assert_eq!(
            ERR_PACKET_TIMEOUT,
            commhal_device_src::layout::error_code::PACKET_TIMEOUT
        );
        // struct CollArgs: 24 pointers, 3 u64, 2 u32, 8 pointers, 1 u64, 2 u32, 2 u64,
        // 2 u32, 1 u64, 2 u32 (the unit static_asserts the same sum)
        assert_eq!(
            std::mem::size_of::<CollArgs>(),
            24 * 8 + 3 * 8 + 8 + 8 * 8 + 8 + 8 + 2 * 8 + 8 + 2 * 8
        );
        assert_eq!(std::mem::offset_of!(CollArgs, scalar), 328);
        assert_eq!(std::mem::offset_of!(CollArgs, red_op), 336);
        assert_eq!(std::mem::offset_of!(CollArgs, red_pad), 340);
        for (name, code) in [
            ("COLL_OP_SUM", 0),
            ("COLL_OP_PROD", 1),
            ("COLL_OP_MIN", 2),
            ("COLL_OP_MAX", 3),
            ("COLL_OP_AVG", 4),
            ("COLL_OP_PREMULSUM", 5),
        ] {
            assert_eq!(define(name), code.to_string(), "{name}");
        }
        for op in [
            crate::kernels::ReduceOp::Sum,
            crate::kernels::ReduceOp::Prod,
            crate::kernels::ReduceOp::Min,
            crate::kernels::ReduceOp::Max,
            crate::kernels::ReduceOp::Avg,
            crate::kernels::ReduceOp::PreMulSum(2.0),
        ] {
            let want = format!("#define {} {}", op.define(), op.code());
            assert!(
                commhal_device_src::coll_nvlink_text().contains(&want),
                "{want}"
            );
        }
        assert_eq!(std::mem::offset_of!(CollArgs, flags), 320);
        assert_eq!(
            define("COLL_FLAG_CHAIN_OVERLAP"),
            FLAG_CHAIN_OVERLAP.to_string()
        );
        assert_eq!(
            define("COLL_FLAG_CHAIN_CREDITS"),
            FLAG_CHAIN_CREDITS.to_string()
        );
        assert_eq!(
            define("COLL_FLAG_BCAST_STAGED"),
            FLAG_BCAST_STAGED.to_string()
        );
        assert_eq!(define("COLL_FLAG_AR_ONESHOT"), FLAG_AR_ONESHOT.to_string());
        assert_eq!(std::mem::offset_of!(CollArgs, root), 296);
        let src = commhal_device_src::coll_nvlink_text();
        assert!(
            src.contains(
                "sizeof(CollArgs) == 24 * 8 + 3 * 8 + 8 + 8 * 8 + 8 + 8 + 2 * 8 + 8 + 2 * 8,"
            ),
            "the unit's static_assert must match this struct"
        );
        assert!(src.contains("  u64 stage_slot_bytes;"));
        let after = &src[src.find("  u64 stage_slot_bytes;").unwrap()..];
        let root_at = after
            .find("  u32 root;")
            .expect("u32 root after stage_slot_bytes");
        let unroll_at = after
            .find("  u32 chain_unroll;")
            .expect("u32 chain_unroll after root");
        assert!(root_at < unroll_at && unroll_at < after.find("};").unwrap());
        assert_eq!(std::mem::offset_of!(CollArgs, stage), 224);
        assert_eq!(std::mem::offset_of!(CollArgs, count), 192);
        assert_eq!(std::mem::offset_of!(CollArgs, rank), 216);
        assert_eq!(std::mem::offset_of!(CollArgs, ll63_small_off), 304);
        let off_at = after
            .find("  u64 ll63_small_off;")
            .expect("u64 ll63_small_off");
        let half_at = after
            .find("  u64 ll63_small_half;")
            .expect("u64 ll63_small_half");
        let flags_at = after.find("  u32 flags;").expect("u32 flags");
        let slots_at = after.find("  u32 launch_slots;").expect("u32 launch_slots");
        assert!(unroll_at < off_at && off_at < half_at && half_at < flags_at);
        assert!(flags_at < slots_at && slots_at < after.find("};").unwrap());
        let scalar_at = after.find("  u64 scalar;").expect("u64 scalar");
        let op_at = after.find("  u32 red_op;").expect("u32 red_op");
        let red_pad_at = after.find("  u32 red_pad;").expect("u32 red_pad");
        assert!(slots_at < scalar_at && scalar_at < op_at && op_at < red_pad_at);
        assert!(red_pad_at < after.find("};").unwrap());
    }

    #[test]
    fn partition_covers_everything_once() {
        for units in [0u64, 1, 2, 3, 7, 8, 9, 100, 1023, 65536, 65537] {
            for n in 1..=8u32 {
                let mut next = 0;
                let mut sizes = Vec::new();
                for i in 0..n {
                    let (b, e) = partition(units, n, i);
                    assert_eq!(b, next, "units {units} n {n} part {i} starts at {b}");
                    assert!(e >= b);
                    sizes.push(e - b);
                    next = e;
                }
                assert_eq!(next, units);
                let (mn, mx) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
                assert!(mx - mn <= 1, "uneven split {sizes:?}");
            }
        }
    }

    #[test]
    fn two_shot_covers_uneven_counts() {
        for elem in [2u64, 4] {
            for count in [1u64, 3, 7, 8, 9, 100, 1001, 4096, 4099] {
                for n in 1..=8u32 {
                    let mut seen = vec![0u8; count as usize];
                    for i in 0..n {
                        for (b, e) in two_shot_elems(count, elem, n, i) {
                            assert_eq!((b * elem) % 16, 0, "chunk start must be 16-byte aligned");
                            for k in b..e {
                                seen[k as usize] += 1;
                            }
                        }
                    }
                    assert!(
                        seen.iter().all(|&s| s == 1),
                        "count {count} elem {elem} n {n}: {seen:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn stage_slots_hold_every_chunk() {
        for cap in [4096u64, 1 << 20, (1 << 30) + 48, 1000] {
            for n in 1..=8u32 {
                let slot = stage_slot_bytes(cap, n);
                for i in 0..n {
                    let (b, e) = partition(cap / 16, n, i);
                    assert!((e - b) * 16 <= slot, "cap {cap} n {n} part {i}");
                }
            }
        }
    }

    /// Every vector of a scatter + forward broadcast is scattered to exactly one
    /// non-root and forwarded from it to every other non-root, for every root: each
    /// non-root receives every vector exactly once (the root copies its own).
    #[test]
    fn broadcast_chunks_reach_every_rank_once() {
        for nvec in [0u64, 1, 2, 5, 16, 1001, 65536] {
            for n in 3..=8u32 {
                for root in 0..n {
                    let m = n - 1;
                    // the k-th non-root is (root + 1 + k) % n, and back again
                    let mut owners = vec![None; m as usize];
                    for r in 0..n {
                        if let Some(k) = bcast_chunk_index(n, root, r) {
                            assert!(k < m);
                            assert_eq!((root + 1 + k) % n, r);
                            assert!(owners[k as usize].replace(r).is_none(), "chunk {k} twice");
                        }
                    }
                    assert!(owners.iter().all(Option::is_some));
                    let mut got = vec![vec![0u8; nvec as usize]; n as usize];
                    for (k, owner) in owners.iter().enumerate() {
                        assert!(owner.is_some());
                        let (b, e) = partition(nvec, m, k as u32);
                        for v in b..e {
                            // the unit's destinations: q = 0 own output, then the
                            // non-root with chunk (k + q) % m
                            for q in 0..m {
                                let p = (root + 1 + (k as u32 + q) % m) % n;
                                got[p as usize][v as usize] += 1;
                            }
                        }
                    }
                    for (r, g) in got.iter().enumerate() {
                        if r as u32 != root {
                            assert!(g.iter().all(|&c| c == 1), "n {n} root {root} rank {r}");
                        } else {
                            assert!(g.iter().all(|&c| c == 0));
                        }
                    }
                }
            }
        }
        assert_eq!(bcast_chunk_index(4, 2, 2), None);
        assert_eq!(bcast_chunk_index(4, 2, 3), Some(0));
        assert_eq!(bcast_chunk_index(4, 2, 0), Some(1));
        assert_eq!(bcast_chunk_index(4, 2, 1), Some(2));
    }

    /// Every vector of a reduce is reduced by exactly one worker, for every root; the
    /// root works only on 2 ranks.
    #[test]
    fn reduce_workers_cover_every_vector_once() {
        for nvec in [0u64, 1, 3, 16, 1001] {
            for n in 1..=8u32 {
                for root in 0..n {
                    let mut got = vec![0u8; nvec as usize];
                    for r in 0..n {
                        let (m, k) = reduce_worker(n, root, r);
                        assert_eq!(m, if n >= 3 { n - 1 } else { n });
                        let Some(k) = k else {
                            assert!(n >= 3 && r == root);
                            continue;
                        };
                        assert!(k < m);
                        let (b, e) = partition(nvec, m, k);
                        for v in b..e {
                            got[v as usize] += 1;
                        }
                    }
                    assert!(got.iter().all(|&c| c == 1), "n {n} root {root}");
                }
            }
        }
        assert_eq!(reduce_worker(4, 1, 1), (3, None));
        assert_eq!(reduce_worker(4, 1, 2), (3, Some(0)));
        assert_eq!(reduce_worker(2, 0, 1), (2, Some(1)));
    }

    #[test]
    fn scratch_holds_the_ll_slots() {
        let s = scratch_bytes(64 << 10, 0, 0);
        assert!(s >= OFF_LL + 2 * 8 * (128 << 10));
        assert_eq!(ll_slot_bytes(1000) % 4096, 0);
    }

    #[test]
    fn ll63_region_holds_every_tile() {
        assert_eq!(ll63_region_bytes(0), 0);
        // one vector still needs its lane's whole tile
        assert_eq!(ll63_region_bytes(16), 4096);
        assert_eq!(ll63_region_bytes(4032), 4096);
        assert_eq!(ll63_region_bytes(4032 + 16), 8192);
        for bytes in [16u64, 4032, 4096, 1 << 20, (16 << 20) + 48, 64 << 20] {
            let r = ll63_region_bytes(bytes);
            // the last tile's last packet ends inside the region
            let last_tile = (bytes / 16 - 1) / LL63_TILE_VECS;
            assert!((last_tile + 1) * LL63_TILE_PKTS * 16 <= r, "{bytes}");
            assert!(ll63_capacity(r) >= bytes, "{bytes}");
            assert!(ll63_capacity(r) < bytes + LL63_TILE_VECS * 16, "{bytes}");
        }
        // grids: whole warps, within the limits, every tile a warp (or all warps busy)
        for bytes in [16u64, 512 << 10, 1 << 20, 2 << 20, 16 << 20, 1 << 30] {
            for (threads, max_blocks) in [(512, 132), (256, 132), (100, 7), (512, 1)] {
                let (b, t) = ll63_grid(bytes, threads, max_blocks);
                let tiles = (bytes / 16).div_ceil(LL63_TILE_VECS);
                assert!(
                    b >= 1 && b <= max_blocks && t % 32 == 0 && t >= 32 && t <= threads.max(32)
                );
                let warps = u64::from(b) * u64::from(t / 32);
                assert!(warps >= tiles || (b == max_blocks && t == threads / 32 * 32));
            }
        }
        // 512 KiB on 132 SMs: 131 tiles over 131 blocks of 1 warp, not 9 of 16
        assert_eq!(ll63_grid(512 << 10, 512, 132), (131, 32));
        // 1 MiB: 261 tiles over 131 blocks of 2 warps
        assert_eq!(ll63_grid(1 << 20, 512, 132), (131, 64));
        let s = scratch_bytes(64 << 10, 1 << 20, ll63_small_half_bytes(1 << 20));
        let small_off = off_ll63_small(64 << 10, 1 << 20);
        assert_eq!(
            small_off,
            off_ll63(ll_slot_bytes(64 << 10)) + ll63_region_bytes(1 << 20)
        );
        // the small region's two halves after it, each for the whole 1 MiB (< 2 MiB)
        assert_eq!(s, small_off + 2 * ll63_region_bytes(1 << 20));
        assert_eq!(
            ll63_small_half_bytes(1 << 30),
            ll63_region_bytes(LL63_SMALL_MAX)
        );
        assert_eq!(ll63_small_half_bytes(0), 0);
    }

    #[test]
    fn pairs_half_holds_every_chunk_slot() {
        // 1 MiB on 4 ranks: chunks of 16384 vectors, 66 tiles, 6 slots
        assert_eq!(pairs_half_bytes(1 << 20, 4), 6 * 66 * 4096);
        // one warp item per tile of each phase: 3 x 66 scatter, 66 reduce, 3 x 66 gather
        assert_eq!(pairs_items(1 << 20, 4), 7 * 66);
        // it fits the half a 2 MiB LL63 transfer sizes; 2 MiB on 4 ranks does not
        assert!(pairs_half_bytes(1 << 20, 4) <= ll63_small_half_bytes(LL63_SMALL_MAX));
        assert!(pairs_half_bytes(2 << 20, 4) > ll63_small_half_bytes(LL63_SMALL_MAX));
        for n in 2..=8u32 {
            for bytes in [16u64, 4096, (256 << 10) + 48, 1 << 20] {
                let h = pairs_half_bytes(bytes, n);
                // the largest chunk's last tile ends inside its slot, slots don't overlap
                let chunk = (bytes / 16).div_ceil(u64::from(n));
                let tiles = chunk.div_ceil(LL63_TILE_VECS);
                assert_eq!(h, 2 * u64::from(n - 1) * tiles * LL63_TILE_PKTS * 16);
                assert!(ll63_capacity(h / (2 * u64::from(n - 1))) >= chunk * 16);
            }
        }
    }

    #[test]
    fn pair_ce_chunks_shrink_down_to_the_floor() {
        let m = 1u64 << 20;
        // 256 MiB: 128M, 64M, ..., 4M, then the 2M rest (half of it would be under the
        // floor)
        let c = pair_ce_chunks(256 * m);
        let sizes: Vec<u64> = c.iter().map(|&(_, l)| l / m).collect();
        assert_eq!(sizes, [128, 64, 32, 16, 8, 4, 2, 2]);
        // less than twice the floor (4 MiB) left: one chunk; 16 bytes: one chunk
        assert_eq!(pair_ce_chunks(3 * m), [(0, 3 * m)]);
        assert_eq!(pair_ce_chunks(4 * m).len(), 2);
        assert_eq!(pair_ce_chunks(16), [(0, 16)]);
        assert!(pair_ce_chunks(0).is_empty());
        // contiguous, 16-byte multiples, cover everything, few enough for the tag
        for bytes in [16, 4 * m + 16, 6 * m + 48, 100 * m + 32, 1 << 30, 1 << 40] {
            let c = pair_ce_chunks(bytes);
            assert!(c.len() <= PAIR_CE_MAX_CHUNKS, "{bytes}: {} chunks", c.len());
            let mut at = 0;
            for &(off, len) in &c {
                assert_eq!(off, at);
                assert!(len > 0 && len % 16 == 0 && off % 16 == 0);
                at += len;
            }
            assert_eq!(at, bytes);
            assert!(c.last().unwrap().1 * PAIR_CE_KEEP_EIGHTHS < 8 * PAIR_CE_FLOOR);
            assert!(c.iter().all(|&(_, l)| l >= PAIR_CE_FLOOR.min(bytes)));
        }
        // tags grow within a launch and across launches (cyclically at the wrap)
        assert!(pair_ce_tag(7, 0) > pair_ce_tag(6, PAIR_CE_MAX_CHUNKS - 1));
        assert!(pair_ce_tag(7, 3) > pair_ce_tag(7, 2));
        let (a, b) = (pair_ce_tag(u32::MAX, 30), pair_ce_tag(0, 0));
        assert!((b.wrapping_sub(a) as i32) > 0);
    }
}
