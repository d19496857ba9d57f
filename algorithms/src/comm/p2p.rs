//! Point-to-point send/recv: a credit protocol through a per-sender slot in the
//! receiver's registered memory.
//!
//! Every rank owns `n` slots of [`SLOT`] bytes (slot `s` receives from rank `s`), each
//! split in two halves. A message is cut into half-slot pieces; piece `k` goes to half
//! `k mod 2`. The receiver grants a credit ("ready", P2P semaphore tag 0) per half it
//! has freed — two up front, then one after copying out each piece — and the sender
//! waits for a credit, copies the piece into the receiver's slot, and signals "done"
//! (tag 1). Credits and pieces are counted per message (`ceil(len / HALF)` each side),
//! so both sides must pass the same byte count. Grouped operations progress together
//! (a polling loop), so `A: send→B, recv←B` and `B: send→A, recv←A` never deadlock.
//! A peer on another node is reached by port: pieces are writes of the cross-node port
//! backend (host-tcp, or ib-verbs) into its slot, and the semaphores are that port's
//! signals, in order on one connection.

use std::sync::Arc;
use std::time::{Duration, Instant};

use commhal_hal::bootstrap::Bootstrap;
use commhal_hal::dynamic::DynMemoryMapped;
use commhal_hal::{HalError, Rank};

use super::CommError;
use super::shared::Shared;
use crate::exec::port::Ports;
use crate::exec::raw::{self, Span};
use crate::exec::sync::{KIND_P2P, SyncTable};

/// Bytes of one sender's slot in a receiver.
pub const SLOT: usize = 512 * 1024;
const HALF: usize = SLOT / 2;
const READY: u32 = 0;
const DONE: u32 = 1;

#[derive(Debug)]
pub(crate) struct P2p {
    mem: Shared,
}

/// One queued send or receive.
#[derive(Debug)]
pub(crate) enum P2pOp<'a> {
    Send { peer: Rank, data: &'a [u8] },
    Recv { peer: Rank, out: &'a mut [u8] },
}

struct Progress<'a> {
    op: P2pOp<'a>,
    pieces: usize,
    /// Pieces moved.
    done: usize,
    /// Credits granted (receiver) so far.
    granted: usize,
}

impl P2p {
    pub(crate) fn new(
        mem: &Arc<dyn DynMemoryMapped>,
        boot: &dyn Bootstrap,
        tag_seq: &mut u64,
        ports: Option<&Ports>,
    ) -> Result<P2p, CommError> {
        *tag_seq += 1;
        let bytes = (SLOT * boot.size() as usize) as u64;
        Ok(P2p {
            mem: Shared::alloc(mem, boot, bytes, *tag_seq, ports)?,
        })
    }

    fn half(&self, owner: Rank, sender: Rank, k: usize) -> Span {
        self.mem.spans[owner as usize]
            .sub(sender as usize * SLOT + (k % 2) * HALF, HALF)
            .unwrap_or(Span::EMPTY)
    }

    /// Piece `k` (`data`) into `peer`'s slot for `me`, then its "done" signal: a store
    /// into mapped memory, or a port write when `peer` is on another node, with the
    /// signal in the same port call (the port delivers the bytes before it).
    fn put_piece(
        &self,
        (me, sync): (Rank, &SyncTable),
        peer: Rank,
        k: usize,
        data: &[u8],
        ports: Option<&Ports>,
    ) -> Result<(), CommError> {
        let at = me as usize * SLOT + (k % 2) * HALF;
        if let Some(ports) = ports.filter(|p| p.is_far(peer)) {
            let dst = self
                .mem
                .area(peer as usize)
                .sub(at, data.len())
                .and_then(|a| a.port)
                .ok_or_else(|| {
                    CommError::Invalid(format!(
                        "rank {peer}'s send/recv slot is not reachable by port (internal error)"
                    ))
                })?;
            if let Some(sem) = sync.far_sem(peer, KIND_P2P, DONE) {
                return ports.write_bytes(peer, &dst, data, Some(sem));
            }
            ports.write_bytes(peer, &dst, data, None)?;
        } else {
            let dst = self
                .half(peer, me, k)
                .sub(0, data.len())
                .unwrap_or(Span::EMPTY);
            raw::write_from(dst, data);
        }
        sync.signal(peer, KIND_P2P, DONE)
    }

    /// Run a group of sends and receives to completion.
    pub(crate) fn run(
        &self,
        me: Rank,
        sync: &SyncTable,
        ports: Option<&Ports>,
        ops: Vec<P2pOp<'_>>,
    ) -> Result<(), CommError> {
        let mut work: Vec<Progress<'_>> = ops
            .into_iter()
            .map(|op| {
                let len = match &op {
                    P2pOp::Send { data, .. } => data.len(),
                    P2pOp::Recv { out, .. } => out.len(),
                };
                Progress {
                    op,
                    pieces: len.div_ceil(HALF),
                    done: 0,
                    granted: 0,
                }
            })
            .collect();
        // Receivers grant their first two credits at once.
        for w in &mut work {
            if let P2pOp::Recv { peer, .. } = w.op {
                while w.granted < w.pieces.min(2) {
                    sync.signal(peer, KIND_P2P, READY)?;
                    w.granted += 1;
                }
            }
        }
        let deadline = Instant::now() + sync.tuning.timeout;
        let mut idle = 0u32;
        while work.iter().any(|w| w.done < w.pieces) {
            let mut moved = false;
            for w in work.iter_mut().filter(|w| w.done < w.pieces) {
                let k = w.done;
                match &mut w.op {
                    P2pOp::Send { peer, data } => {
                        if sync.poll(*peer, KIND_P2P, READY) {
                            let at = k * HALF;
                            let n = HALF.min(data.len() - at);
                            self.put_piece((me, sync), *peer, k, &data[at..at + n], ports)?;
                            w.done += 1;
                            moved = true;
                        }
                    }
                    P2pOp::Recv { peer, out } => {
                        if sync.poll(*peer, KIND_P2P, DONE) {
                            let at = k * HALF;
                            let n = HALF.min(out.len() - at);
                            let src = self.half(me, *peer, k).sub(0, n).unwrap_or(Span::EMPTY);
                            raw::read_into(src, &mut out[at..at + n]);
                            w.done += 1;
                            if w.granted < w.pieces {
                                sync.signal(*peer, KIND_P2P, READY)?;
                                w.granted += 1;
                            }
                            moved = true;
                        }
                    }
                }
            }
            if moved {
                idle = 0;
                continue;
            }
            idle += 1;
            sync.stop.check()?;
            if Instant::now() >= deadline {
                let pending: Vec<String> = work
                    .iter()
                    .filter(|w| w.done < w.pieces)
                    .map(|w| match &w.op {
                        P2pOp::Send { peer, .. } => {
                            format!("send to rank {peer} (piece {} of {})", w.done, w.pieces)
                        }
                        P2pOp::Recv { peer, .. } => {
                            format!("recv from rank {peer} (piece {} of {})", w.done, w.pieces)
                        }
                    })
                    .collect();
                return Err(HalError::Timeout {
                    what: format!(
                        "rank {me}: {}; does the peer post the matching send/recv with the same byte count?",
                        pending.join(", ")
                    ),
                    millis: sync.tuning.timeout.as_millis() as u64,
                }
                .into());
            }
            if idle < 256 {
                std::hint::spin_loop();
            } else if idle < 512 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(20));
            }
        }
        Ok(())
    }
}
