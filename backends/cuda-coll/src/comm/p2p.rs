//! Point-to-point on the caller's buffers: a group of sends and receives to any peers
//! (NCCL's `ncclSend` / `ncclRecv` between `ncclGroupStart` and `ncclGroupEnd`),
//! [`Comm::p2p`]. Only the ranks named take part; the `k`-th send from rank a to rank b
//! matches b's `k`-th receive from a, and their byte counts must agree.
//!
//! **Protocol** (per matched send/receive `s` of the pair a → b, copy engines, no SM):
//! 1. b's host posts its receive buffer for a in the call table ([`CallTable::post`]: a
//!    `cuMemAlloc` allocation by its legacy IPC handle, or cuMem VMM memory by its
//!    pieces, the offset, the bytes; VMM pieces a has not had yet follow over the
//!    piece link, [`crate::piece_link`]); b's stream writes `s` into a's
//!    [`DMA_P2P_READY`] flag (b's buffer is free from then).
//! 2. a's host takes the posting ([`CallTable::take_post`]; bounded), checks the bytes,
//!    receives the pieces if announced, and opens b's allocation (process-wide cache,
//!    [`crate::peers`]). a's stream waits
//!    until its READY flag from b reaches `s` (the bounded wait kernel), copies with
//!    `cuMemcpyAsync` into b's buffer, and writes `s` into b's [`DMA_P2P_DONE`] flag.
//! 3. b's stream waits until its DONE flag from a reaches `s`.
//!
//! Within a group every rank queues its READY writes first, then its sends, then the
//! waits for its receives, so two ranks that send to each other in one group never
//! wait on each other's streams in a cycle; the host waits only for postings, which
//! every rank makes before it takes any. A send or receive to this rank itself is a
//! local copy, matched in order. The flag values are fixed when queued, so a group
//! cannot be captured into a CUDA graph (a clear error). After an error in a group the
//! pair counters of this communicator no longer match its peers': do not use its
//! point-to-point calls again.

use commhal_backend_cuda_dma::StreamPort;
use commhal_cuda_rt::Stream;
use commhal_cuda_rt::ipc::PointerInfo;
use commhal_cuda_rt::pieces::Piece;

use super::Comm;
use super::caller::inspect;
use crate::error::{CollError, Result};
use crate::layout::{self, DMA_P2P_DONE, DMA_P2P_READY};
use crate::peers::{BufDesc, Imports, Where, export_handle, process_nonce};
use crate::types::Dtype;

/// One operation of a point-to-point group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum P2pOp {
    /// Send `count` elements of `dtype` at device address `buf` to `peer`.
    Send {
        /// The data.
        buf: u64,
        /// Elements.
        count: u64,
        /// Their type.
        dtype: Dtype,
        /// The receiving rank.
        peer: u32,
    },
    /// Receive `count` elements of `dtype` from `peer` into device address `buf`.
    Recv {
        /// Where the data goes.
        buf: u64,
        /// Elements.
        count: u64,
        /// Their type.
        dtype: Dtype,
        /// The sending rank.
        peer: u32,
    },
}

impl P2pOp {
    fn parts(&self) -> (bool, u64, u64, u32) {
        match *self {
            P2pOp::Send {
                buf,
                count,
                dtype,
                peer,
            } => (true, buf, count.saturating_mul(dtype.size()), peer),
            P2pOp::Recv {
                buf,
                count,
                dtype,
                peer,
            } => (false, buf, count.saturating_mul(dtype.size()), peer),
        }
    }
}

/// Matched sends and receives so far, per peer (both sides count the same way).
#[derive(Debug)]
pub(crate) struct PairCounts {
    sent: Vec<u64>,
    received: Vec<u64>,
}

impl PairCounts {
    pub(crate) fn new(n: u32) -> PairCounts {
        PairCounts {
            sent: vec![0; n as usize],
            received: vec![0; n as usize],
        }
    }
}

/// What a receiver posts: its process nonce, the bytes, the buffer.
pub(crate) fn posting(nonce: u64, bytes: u64, at: &BufDesc) -> Vec<u8> {
    let mut v = Vec::with_capacity(128);
    v.extend_from_slice(&nonce.to_le_bytes());
    v.extend_from_slice(&bytes.to_le_bytes());
    at.encode_into(&mut v);
    v
}

pub(crate) fn parse_posting(b: &[u8], p: u32) -> Result<(u64, u64, BufDesc)> {
    let parsed = (|| {
        let nonce = u64::from_le_bytes(b.get(..8)?.try_into().ok()?);
        let bytes = u64::from_le_bytes(b.get(8..16)?.try_into().ok()?);
        let (at, _) = BufDesc::decode(b.get(16..)?)?;
        Some((nonce, bytes, at))
    })();
    parsed.ok_or_else(|| {
        CollError::invalid(format!(
            "rank {p} posted a malformed receive: every rank must run the same commhal build"
        ))
    })
}

impl Comm {
    /// Queue a group of sends and receives on `stream` (see the module docs). Returns
    /// once every send's receiver has posted its receive (bounded by the device wait
    /// bound); the copies run on the stream.
    pub fn p2p(&self, ops: &[P2pOp], stream: &Stream) -> Result<()> {
        if stream.is_capturing()? {
            return Err(CollError::invalid(
                "send/recv groups cannot be captured into a CUDA graph yet: queue them outside the capture",
            ));
        }
        self.check_copy_engines("send/recv groups")?;
        // the copies and flag writes: cuda-dma's stream operations
        let ce = StreamPort::new().map_err(|_| {
            CollError::invalid(format!(
                "send/recv needs the driver's stream memory operations ({}): update the NVIDIA driver",
                crate::dma::SYMBOLS.join(", ")
            ))
        })?;
        // everything checked before anything is posted or queued
        // per op: the allocation, and the VMM pieces of a receive buffer in VMM memory
        let mut infos: Vec<Option<(PointerInfo, Option<Vec<Piece>>)>> =
            Vec::with_capacity(ops.len());
        for op in ops {
            let (send, buf, bytes, peer) = op.parts();
            if peer >= self.n {
                return Err(CollError::invalid(format!(
                    "{} peer {peer} is not a rank of this {}-rank communicator",
                    if send { "send" } else { "recv" },
                    self.n
                )));
            }
            if bytes == 0 {
                infos.push(None);
                continue;
            }
            let what = if send { "send buffer" } else { "recv buffer" };
            let super::caller::Inspected { info, pieces } = inspect(&self.ctx, what, buf, bytes)?;
            let vmm = if !send && peer != self.rank && !info.legacy_ipc {
                if pieces.is_none() {
                    return Err(CollError::invalid(format!(
                        "recv buffer {buf:#x} can be shared neither through legacy CUDA IPC nor as cuMem VMM pieces exportable as POSIX fds (stream-ordered pool memory?): receive into cudaMalloc / Comm::mem_alloc memory"
                    )));
                }
                pieces
            } else {
                None
            };
            infos.push(Some((info, vmm)));
        }
        let mut counts = self
            .p2p_counts
            .lock()
            .map_err(|_| CollError::invalid("send/recv counters poisoned by a panic"))?;
        let a = &self.base;
        let c = self.dma_ctx(a, stream);
        // 1. receives from peers: post, then READY on the stream
        let mut last_recv = vec![0u64; self.n as usize];
        for (op, info) in ops.iter().zip(&infos) {
            let (send, buf, bytes, peer) = op.parts();
            let Some((info, vmm)) = info else { continue };
            if send || peer == self.rank {
                continue;
            }
            let seq = {
                let s = &mut counts.received[peer as usize];
                *s += 1;
                *s
            };
            let at = match vmm {
                Some(p) => self.describe_pieces(buf, p, 0)?,
                None => BufDesc {
                    at: Where::Ipc {
                        id: info.buffer_id,
                        base: info.base,
                        size: info.size,
                        handle: export_handle(&self.ctx, info)?,
                    },
                    off: buf - info.base,
                },
            };
            self.table
                .post(peer, seq, &posting(process_nonce(), bytes, &at))?;
            if let (Where::Vmm { key, to, .. }, Some(p)) = (at.at, vmm) {
                // only the sender's bit can be set: the posting goes to it alone
                self.send_pieces(to & (1 << peer), key, p)?;
            }
            crate::dma::signal(stream, a, peer, DMA_P2P_READY, seq as u32)?;
            last_recv[peer as usize] = seq;
        }
        // 2. sends to peers: take the posting, wait READY, copy, DONE
        for (op, info) in ops.iter().zip(&infos) {
            let (send, buf, bytes, peer) = op.parts();
            if info.is_none() || !send || peer == self.rank {
                continue;
            }
            let seq = {
                let s = &mut counts.sent[peer as usize];
                *s += 1;
                *s
            };
            let (nonce, want, at) = parse_posting(&self.table.take_post(peer, seq)?, peer)?;
            if want != bytes {
                return Err(CollError::invalid(format!(
                    "send #{seq} to rank {peer} has {bytes} bytes but rank {peer}'s matching recv expects {want}: counts and datatypes of matched sends and receives must agree"
                )));
            }
            if let Where::Vmm { to, .. } = at.at
                && to & (1 << self.rank) != 0
            {
                self.take_pieces(peer, nonce, &at)?;
            }
            let regs = (
                self.base.input[peer as usize],
                self.base.output[peer as usize],
            );
            let dst = Imports::resolve(&self.ctx, peer, nonce, &at, regs, None)?;
            crate::dma::wait_flags(&c, DMA_P2P_READY, seq as u32, std::iter::once(peer))?;
            let done = a.scratch[peer as usize] + layout::dma_flag(DMA_P2P_DONE, self.rank);
            // SAFETY: the source holds `bytes` (inspected); the destination is the
            // receiver's posted allocation, opened here, with `bytes` from its offset
            // (the receiver inspected it), free since its READY flag; the DONE flag is
            // 4-aligned in the receiver's scratch, mapped for the Comm's lifetime.
            unsafe { ce.put_signal32(stream, (dst, buf, bytes), done, seq as u32)? };
        }
        // 3. to this rank itself: sends and receives matched in order, local copies
        let own = |want_send: bool| {
            ops.iter()
                .map(P2pOp::parts)
                .filter(move |&(s, _, bytes, p)| s == want_send && p == self.rank && bytes > 0)
        };
        let (mut sends, mut recvs) = (own(true), own(false));
        loop {
            match (sends.next(), recvs.next()) {
                (None, None) => break,
                (Some((_, src, sb, _)), Some((_, dst, rb, _))) if sb == rb => {
                    // SAFETY: both ranges inspected above (this rank's device memory).
                    unsafe { ce.put(stream, dst, src, sb)? };
                }
                (s, r) => {
                    return Err(CollError::invalid(format!(
                        "sends to and receives from this rank itself must pair up in order with equal sizes (send {:?} B, recv {:?} B)",
                        s.map(|x| x.2),
                        r.map(|x| x.2)
                    )));
                }
            }
        }
        // 4. wait for every peer's last copy into this rank
        for (p, &seq) in last_recv.iter().enumerate() {
            if seq > 0 {
                crate::dma::wait_flags(&c, DMA_P2P_DONE, seq as u32, std::iter::once(p as u32))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postings_round_trip_and_reject_garbage() {
        let at = BufDesc {
            at: Where::Ipc {
                id: 3,
                base: 0x1000,
                size: 1 << 20,
                handle: [7; 64],
            },
            off: 16,
        };
        let b = posting(42, 4096, &at);
        assert!(b.len() <= crate::agree::MAX_POST);
        assert_eq!(parse_posting(&b, 1).unwrap(), (42, 4096, at));
        let e = parse_posting(&b[..20], 5).unwrap_err().to_string();
        assert!(e.contains("rank 5"), "{e}");
    }

    #[test]
    fn ops_give_their_bytes() {
        let s = P2pOp::Send {
            buf: 1,
            count: 10,
            dtype: Dtype::Float,
            peer: 2,
        };
        assert_eq!(s.parts(), (true, 1, 40, 2));
    }
}
