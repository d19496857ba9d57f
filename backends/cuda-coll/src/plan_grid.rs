//! How many CTAs and threads a plan launch takes ([`Grid`]): the device's SMs and the
//! tuned geometry, as the hand-written kernels' grids.

use commhal_algorithms::PacketFormat;
use commhal_algorithms::codegen;

use crate::layout;
use crate::plan_exec::MAX_PARTS;

/// How many CTAs and threads a plan launch takes: the device's SMs and the tuned
/// geometry, as the hand-written kernels' grids.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Grid {
    /// The device's SMs.
    pub(crate) sms: u32,
    /// Threads a CTA of a plan without LL packets has.
    pub(crate) threads: u32,
    /// Most threads a CTA of an LL16 packet plan has (the tuned `ll_threads`, as the
    /// hand-written LL16 kernels).
    pub(crate) packet_threads: u32,
    /// `COMMHAL_PLAN_REPLICAS` (read once, not per launch).
    pub(crate) replicas_env: Option<u32>,
}

impl Grid {
    /// CTAs per plan block for a message of `bytes` on `blocks` plan blocks of a plan
    /// without LL packets: as the hand-written kernels' grid (one 16-byte vector per
    /// thread), at most the SM count in all and [`MAX_PARTS`] (`COMMHAL_PLAN_REPLICAS`
    /// overrides). (One CTA per 32 KiB would be a quarter of the hand kernels' CTAs up
    /// to 4 MiB.)
    fn replicas(&self, blocks: u32, bytes: u64) -> u32 {
        self.replicas_for(blocks, bytes, 16 * u64::from(self.threads))
    }

    /// As [`Grid::replicas`], one CTA per `per_cta` bytes.
    fn replicas_for(&self, blocks: u32, bytes: u64, per_cta: u64) -> u32 {
        let blocks = blocks.max(1);
        let most = self.most_replicas(blocks);
        let want = self.replicas_env.unwrap_or_else(|| {
            bytes
                .div_ceil(u64::from(blocks) * per_cta)
                .clamp(1, u64::from(MAX_PARTS)) as u32
        });
        want.clamp(1, most)
    }

    /// CTAs a plan block may have on `blocks` blocks: the SMs shared among them, at
    /// most [`MAX_PARTS`].
    fn most_replicas(&self, blocks: u32) -> u32 {
        (self.sms / blocks.max(1)).clamp(1, MAX_PARTS)
    }

    /// CTAs per plan block and threads per CTA for a plan moving `packets` (none, LL16
    /// or LL63) on `blocks` plan blocks, on `bytes` (the larger of input and output);
    /// `walked`: the bytes of a block's largest LL16 packet op
    /// ([`codegen::PacketWalk`]). LL16 plans take one packet (8 bytes) of that op per
    /// thread, on as few threads as it needs, `packet_threads` a CTA where the SMs
    /// allow ([`layout::packet_grid`]), as the hand-written LL kernels' grid (every
    /// packet is waited on by one thread; fewer CTAs serialise the waits); others one
    /// 16-byte vector per thread ([`Grid::replicas`]). (A packet per thread of the
    /// input gave the 4-rank reduce-scatter, whose input is four times its output, four
    /// times the hand kernel's CTAs, each a quarter busy: 1.12 of its time at
    /// 128-512 KiB against 1.05-1.09.)
    pub(crate) fn plan(
        &self,
        packets: Option<PacketFormat>,
        blocks: u32,
        bytes: u64,
        walked: u64,
    ) -> (u32, u32) {
        if packets == Some(PacketFormat::Ll63) {
            // A warp per LL63 tile, the tiles spread over as many CTAs as the plan block
            // may have before a CTA takes a second warp, as the hand kernels' LL63 grid
            // (layout::ll63_grid: an SM's share of the link traffic limits them).
            let per_block = bytes
                .div_ceil(u64::from(blocks.max(1)))
                .next_multiple_of(16);
            let most = self.threads.min(codegen::MAX_LL63_THREADS);
            let (_, threads) = layout::ll63_grid(per_block, most, self.most_replicas(blocks));
            let per_cta = codegen::LL63_TILE_DATA * u64::from(threads / 32);
            (self.replicas_for(blocks, bytes, per_cta), threads)
        } else if packets.is_some() {
            let most = self.threads.min(self.packet_threads);
            let most_ctas = self.most_replicas(blocks);
            let (ctas, threads) = layout::packet_grid(walked.div_ceil(8), most, most_ctas);
            (
                self.replicas_env.unwrap_or(ctas).clamp(1, most_ctas),
                threads,
            )
        } else {
            (self.replicas(blocks, bytes), self.threads)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use commhal_algorithms::builders::{Algorithm, BuildParams, build};
    use commhal_algorithms::{DataType, RedOp};

    /// The LL16 plans' grid is the hand-written LL16 kernels' (`Comm::ll_grid`): a
    /// thread per packet of the largest packet op, whatever the input (the
    /// reduce-scatter's is n times larger): the output for the all-reduce, the
    /// reduce-scatter and the broadcast, the packets received for the all-gather.
    #[test]
    fn ll16_plan_grid_is_the_hand_kernels() {
        let g = Grid {
            sms: 132,
            threads: 512,
            packet_threads: 128,
            replicas_env: None,
        };
        let ll16 = Some(PacketFormat::Ll16);
        // the largest of every rank's: the root's and the others' alike here
        let walk = |algo: Algorithm, n: u32| {
            let plan = build(algo, &BuildParams::new(n)).unwrap();
            let w = codegen::packet_walk(&plan, DataType::F16).unwrap();
            for r in 0..n {
                let k = codegen::generate_cuda(&plan, r, DataType::F16, RedOp::Sum).unwrap();
                assert_eq!(k.packet_walk, w, "{} rank {r} of {n}", algo.full_name());
            }
            w
        };
        for n in [2u32, 4, 8] {
            for (algo, hand) in [
                (Algorithm::AllReduce1pa, 1),
                (Algorithm::ReduceScatterLl, 1),
                (Algorithm::BroadcastLl, 1),
                (Algorithm::AllGatherLl, u64::from(n - 1)),
            ] {
                let w = walk(algo, n);
                for count in [512u64, 4096, 65536] {
                    // count f16 elements: the hand kernels' packets (Comm::kernel_plan),
                    // on at most MAX_PARTS CTAs a plan block
                    let packets = hand * count * 2 / 8;
                    assert_eq!(
                        g.plan(ll16, 1, 4 * count * 2, w.elems(count) * 2),
                        layout::packet_grid(packets, 128, g.sms.min(MAX_PARTS)),
                        "{} on {n} ranks, {count} elements",
                        algo.full_name()
                    );
                }
            }
        }
        // the 4-rank reduce-scatter at 512 KiB: 128 CTAs of 128 threads, not 512 each
        assert_eq!(g.plan(ll16, 1, 512 << 10, 128 << 10), (128, 128));
        // a plan without packets: a 16-byte vector per thread
        assert_eq!(g.plan(None, 1, 1 << 20, 0), (128, 512));
    }
}
