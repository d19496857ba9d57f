//! Collectives on the caller's device pointers and the caller's stream.
//!
//! [`Comm::launch_on`] takes NCCL's arguments (send and receive pointers, count,
//! datatype, root, stream) and decides per call and per rank how each buffer reaches
//! the kernels ([`BufferPath`]):
//!
//! - **Direct**: the kernel chosen for the size touches only this rank's own input and
//!   output (the LL16 and LL63 kernels: the data travels as packets through the peers'
//!   registered scratch; likewise a plan whose ops touch only the peers' plan areas,
//!   such as `allreduce:1pa` and the `:ll` builders), so the caller's pointers go to the kernel
//!   as they are. No host work per call beyond the launch.
//! - **Mapped** (zero-copy): the kernel reads or writes the peers' buffers. Every rank
//!   publishes its buffers in the call table ([`crate::agree`]): a `cuMemAlloc`
//!   allocation by its legacy IPC handle and offset, cuMem VMM memory (PyTorch's
//!   expandable segments) by the list of physical pieces that hold it, whose fds go
//!   to each peer once over [`crate::piece_link`]. Each rank opens its peers'
//!   allocations once (process-wide cache, [`crate::peers`]) and the kernel addresses
//!   them directly.
//! - **Staged**: this rank copies the caller's input into its registered input region
//!   on the caller's stream, the kernel runs on the registered regions, and the result
//!   is copied out — when a pointer is not 16-byte aligned (the vector kernels load and
//!   store 16 bytes at a time) or, for a kernel that reaches into peers, when the
//!   memory can be shared neither through legacy IPC nor as exportable VMM pieces
//!   (stream-ordered pools). A plan algorithm (`COMMHAL_GPU_ALGO`) follows the same rules,
//!   and is staged where its port channels to ranks of other virtual nodes move
//!   registered memory (the port backend moves registered memory only): where a port
//!   op reaches a user buffer at its far end, or where this rank's puts go from their
//!   sources (cuda-dma). Through host-tcp's outbox into the far ranks' scratch (the
//!   hierarchical plans) the kernel copies each put's source itself and the call runs
//!   on the caller's buffers; the far ranks never map them. Staging is a decision of
//!   each rank alone: the peers address whichever buffer it publishes.
//!
//! Every rank computes the same kernel from (collective, count, datatype), so the
//! direct path needs no exchange; the mapped and staged paths exchange the call's
//! signature too, and a rank that passed a different count, datatype, op, root or
//! collective gets an error naming the rank and the field on every rank. On the direct
//! path the same mismatch is found by the call table's signature log
//! ([`crate::agree`]) at the next call or stream sync.

use commhal_cuda_rt::copy;
use commhal_cuda_rt::ipc::{self, MemoryKind, PointerInfo};
use commhal_cuda_rt::pieces::{self, Piece};
use commhal_cuda_rt::{Context, Stream};

use super::{Comm, Kernel};
use crate::error::{CollError, Result};
use crate::kernels::ReduceOp;
use crate::peers::{BufDesc, Entry, Imports, Signature, Where, process_nonce};
use crate::plan_exec::PlanReach;
use crate::types::{Collective, Dtype};

/// The caller's buffers of one call: device addresses in this process (NCCL's
/// `sendbuff` and `recvbuff`). In-place calls follow NCCL: all-reduce, broadcast and
/// reduce pass `send == recv`; all-gather `send == recv + rank × count × size`;
/// reduce-scatter `recv == send + rank × count × size`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallBufs {
    /// The input (unused on a broadcast's non-roots).
    pub send: u64,
    /// The output (unused on a reduce's non-roots).
    pub recv: u64,
}

/// A buffer checked by [`Comm::register`]: zero-copy in every call while it lives.
/// Dropping it (NCCL's `ncclCommDeregister`) changes nothing: the peers' mappings
/// follow the allocation, not the registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Registration {
    /// Start of the registered range.
    pub ptr: u64,
    /// Its length in bytes.
    pub len: u64,
    /// The allocation's buffer id (`cuMemAlloc` memory) or its first piece's block id
    /// (cuMem VMM memory); both unique in this process.
    pub buffer_id: u64,
}

/// How this rank's buffers reached the kernels in one call (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BufferPath {
    /// The caller's pointers, local accesses only.
    Direct,
    /// The caller's pointers; the peers opened them through IPC (zero-copy).
    Mapped,
    /// Copied into and out of the communicator's registered regions.
    Staged,
}

impl BufferPath {
    /// Short name for tables.
    pub fn name(self) -> &'static str {
        match self {
            BufferPath::Direct => "direct",
            BufferPath::Mapped => "mapped",
            BufferPath::Staged => "staged",
        }
    }
}

/// The kernels that touch no peer's input or output (packets through scratch only).
fn local_only(k: Kernel) -> bool {
    matches!(
        k,
        Kernel::AllreduceLl
            | Kernel::AllgatherLl
            | Kernel::ReducescatterLl
            | Kernel::BroadcastLl
            | Kernel::ReduceLl
            | Kernel::AlltoallLl
            | Kernel::SendrecvLl
            | Kernel::BroadcastLl63
            | Kernel::ReduceLl63
            | Kernel::AllreduceLl63
            | Kernel::AllgatherLl63
            | Kernel::ReducescatterLl63
    )
}

/// Bytes the collective reads from `send` and writes to `recv` (NCCL's counts:
/// all-gather and reduce-scatter count per rank, all-to-all per peer).
pub fn byte_sizes(coll: Collective, n: u32, count: u64, es: u64) -> Option<(u64, u64)> {
    let one = count.checked_mul(es)?;
    let all = one.checked_mul(u64::from(n))?;
    Some(match coll {
        Collective::Allreduce
        | Collective::Broadcast
        | Collective::Reduce
        | Collective::Sendrecv => (one, one),
        Collective::Allgather => (one, all),
        Collective::Reducescatter => (all, one),
        Collective::Alltoall => (all, all),
    })
}

/// NCCL's in-place test for `coll` on rank `rank` (chunk = count × element size).
pub fn is_in_place(coll: Collective, rank: u32, chunk: u64, b: CallBufs) -> bool {
    let shifted = |base: u64| base.checked_add(u64::from(rank) * chunk);
    match coll {
        Collective::Allreduce | Collective::Broadcast | Collective::Reduce => b.send == b.recv,
        Collective::Allgather => shifted(b.recv) == Some(b.send),
        Collective::Reducescatter => shifted(b.send) == Some(b.recv),
        Collective::Alltoall | Collective::Sendrecv => false,
    }
}

fn overlaps(a: u64, alen: u64, b: u64, blen: u64) -> bool {
    alen > 0 && blen > 0 && a < b.saturating_add(blen) && b < a.saturating_add(alen)
}

/// Which of the two buffers this rank uses: a broadcast's non-roots read nothing, a
/// reduce's non-roots write nothing (NCCL ignores those pointers).
fn used(coll: Collective, rank: u32, root: u32) -> (bool, bool) {
    match coll {
        Collective::Broadcast => (rank == root, true),
        Collective::Reduce => (true, rank == root),
        _ => (true, true),
    }
}

/// A caller's pointer as [`inspect`] found it.
pub(super) struct Inspected {
    /// The allocation that holds it.
    pub info: PointerInfo,
    /// cuMem VMM memory: the pieces that hold the call's bytes, when the peers can map
    /// them (exportable as fds, back to back); `None` for other memory.
    pub pieces: Option<Vec<Piece>>,
}

/// The allocation behind `ptr`, checked: not null, device memory of `ctx`'s device,
/// `need` (> 0) bytes from `ptr` inside it, and for cuMem VMM memory those bytes
/// mapped, with the pieces that hold them.
pub(super) fn inspect(ctx: &Context, what: &str, ptr: u64, need: u64) -> Result<Inspected> {
    if ptr == 0 {
        return Err(CollError::invalid(format!(
            "{what} is null: pass a device pointer with {need} bytes"
        )));
    }
    let info = ipc::pointer_info(ctx, ptr)?;
    if info.kind != MemoryKind::Device || info.device != ctx.ordinal() as i32 {
        let e = ipc::not_device_memory(what, ptr, &info, ctx);
        return Err(CollError::invalid(format!(
            "{e} (a freed pointer reads as unknown memory)"
        )));
    }
    if info.bytes_after(ptr) < need {
        return Err(CollError::invalid(format!(
            "{what} {ptr:#x} has {} bytes left in its allocation, the call needs {need}: pass a larger buffer or a smaller count",
            info.bytes_after(ptr)
        )));
    }
    // cuMem VMM memory: the range above is the whole address reservation, mapped or
    // not; every byte the call touches must be mapped (an error names the first that
    // is not)
    let pieces = if info.posix_fd && !info.legacy_ipc && need > 0 {
        pieces::pieces_from(ctx, &info, ptr, need)
            .map_err(|e| CollError::invalid(format!("{what}: {e}")))?
    } else {
        None
    };
    Ok(Inspected { info, pieces })
}

/// The VMM piece lists a rank's entry announces, in the order its owner sends them
/// and every receiver takes them: the input's before the output's, a list both
/// buffers share once, lists nobody is to receive left out. Each with the index of
/// its buffer (0 input, 1 output).
fn vmm_lists(e: &Entry) -> Vec<(usize, BufDesc)> {
    let mut v: Vec<(usize, BufDesc)> = Vec::new();
    for (i, d) in [e.input, e.output].into_iter().enumerate() {
        if let Where::Vmm { key, to, .. } = d.at
            && to != 0
            && !v
                .iter()
                .any(|(_, x)| matches!(x.at, Where::Vmm { key: k, .. } if k == key))
        {
            v.push((i, d));
        }
    }
    v
}

fn collective_index(c: Collective) -> u8 {
    Collective::ALL.iter().position(|&x| x == c).unwrap_or(0) as u8
}

fn dtype_index(d: Dtype) -> u8 {
    Dtype::ALL.iter().position(|&x| x == d).unwrap_or(0) as u8
}

impl Comm {
    /// Whether `coll` of `count` elements runs a kernel or route that addresses the
    /// peers' inputs or outputs (everything but the packet kernels and the plans that
    /// reach the peers only through their plan areas).
    fn touches_peer_buffers(
        &self,
        coll: Collective,
        dtype: Dtype,
        count: u64,
        plan: Option<PlanReach>,
    ) -> bool {
        if self.dma_all {
            return true;
        }
        if let Some(p) = plan {
            return p.peer_buffers;
        }
        if self.ce_route(coll, count * dtype.size()) {
            return true;
        }
        !local_only(self.kernel_plan(coll, dtype, count).0)
    }

    /// Queue one collective on the caller's buffers and `stream` (see the module docs
    /// for the paths). `op` applies to all-reduce, reduce-scatter and reduce. `count` as NCCL: all-reduce, broadcast, reduce, send/recv: the
    /// buffer's elements; all-gather and reduce-scatter: elements per rank; all-to-all:
    /// elements per peer. `root` for broadcast and reduce. Every rank must call it
    /// with the same collective, count, datatype and root, in the same order.
    #[allow(clippy::too_many_arguments)]
    pub fn launch_on(
        &self,
        coll: Collective,
        dtype: Dtype,
        op: ReduceOp,
        count: u64,
        root: u32,
        bufs: CallBufs,
        stream: &Stream,
    ) -> Result<BufferPath> {
        if coll.has_root() && root >= self.n {
            return Err(CollError::invalid(format!(
                "{} root {root} is not a rank of this {}-rank communicator",
                coll.name(),
                self.n
            )));
        }
        // every call, on every path, is logged for the ranks to compare (the packet
        // kernels' path exchanges nothing else)
        let reduces = coll.redop() == "sum";
        let sig = Signature {
            coll: collective_index(coll),
            dtype: dtype_index(dtype),
            op: if reduces { op.code() as u8 } else { 0 },
            scalar: if reduces {
                op.scalar_bits(dtype.data_type())
            } else {
                0
            },
            in_place: false,
            root: if coll.has_root() { root } else { 0 },
            count,
        };
        self.table.check_signatures()?;
        self.table.record(&sig)?;
        let es = dtype.size();
        let (in_bytes, out_bytes) = byte_sizes(coll, self.n, count, es).ok_or_else(|| {
            CollError::invalid(format!("{} of {count} elements overflows", coll.name()))
        })?;
        if count == 0 {
            return Ok(BufferPath::Direct);
        }
        let in_place = is_in_place(coll, self.rank, count * es, bufs);
        let (use_in, use_out) = used(coll, self.rank, root);
        if !in_place && use_in && use_out && overlaps(bufs.send, in_bytes, bufs.recv, out_bytes) {
            return Err(CollError::invalid(format!(
                "{}: send {:#x} ({in_bytes} bytes) and recv {:#x} ({out_bytes} bytes) overlap without being NCCL's in-place layout{}",
                coll.name(),
                bufs.send,
                bufs.recv,
                if coll.in_place_supported() {
                    ""
                } else {
                    " (this collective has no in-place variant)"
                }
            )));
        }
        let ctx = self.ctx.clone();
        let plan = self.algorithm(coll).is_some();
        let plan_reach = match self.plan_call(coll, dtype, root, in_place) {
            Some(call) => Some(self.plans.reach_of(&call)?),
            None => None,
        };
        let peers = self.touches_peer_buffers(coll, dtype, count, plan_reach);
        // ranks of other nodes: they reach this rank's memory through the port backend
        // only, never by mapping it
        let far = plan_reach.map_or(0, |p| p.far);
        // the allocation, and the pieces of cuMem VMM memory (PyTorch's expandable
        // segments), which go zero-copy when the kernel reaches into peers
        let checked = |used: bool, what, p: u64, len| -> Result<_> {
            Ok(
                match used.then(|| inspect(&ctx, what, p, len)).transpose()? {
                    Some(i) => (
                        Some(i.info),
                        i.pieces.filter(|_| peers && p.is_multiple_of(16)),
                    ),
                    None => (None, None),
                },
            )
        };
        let (send, send_vmm) = checked(use_in, "send buffer", bufs.send, in_bytes)?;
        let (recv, recv_vmm) = checked(use_out, "recv buffer", bufs.recv, out_bytes)?;
        let shareable = |p: u64, i: &Option<PointerInfo>, v: &Option<Vec<Piece>>| {
            i.is_none_or(|i| p.is_multiple_of(16) && (!peers || i.legacy_ipc || v.is_some()))
        };
        // a plan whose port channels (other virtual nodes) move registered memory runs
        // on the registered regions
        let staged = plan_reach.is_some_and(|p| p.registered)
            || !shareable(bufs.send, &send, &send_vmm)
            || !shareable(bufs.recv, &recv, &recv_vmm);
        if staged && (in_bytes > self.capacity || out_bytes > self.capacity) {
            return Err(CollError::CannotStage(format!(
                "{} of {} bytes must be staged on rank {} (a pointer is not 16-byte aligned, or its memory cannot be shared with the peers: stream-ordered pool memory) but the communicator's registered regions hold {} bytes: pass cudaMalloc'd or cuMem VMM, 16-byte aligned buffers, or create the communicator with a larger capacity",
                coll.name(),
                in_bytes.max(out_bytes),
                self.rank,
                self.capacity
            )));
        }
        // a staged plan runs out of place on the registered regions (staging copies in
        // first); on the caller's buffers it runs as the call is, in place or not
        let stage_in_place = in_place && !(plan && staged);
        let mut a = self.own_args(coll, dtype, op, count, root, staged && stage_in_place);
        let r = self.rank as usize;
        let (reg_in, reg_out) = (self.base.input[r], self.base.output[r]);
        if !staged {
            if use_in {
                a.input[r] = bufs.send;
            }
            if use_out {
                a.output[r] = bufs.recv;
            }
        }
        if peers {
            let describe = |addr: u64,
                            info: &Option<PointerInfo>,
                            v: &Option<Vec<Piece>>|
             -> Result<BufDesc> {
                match (info, v) {
                    (Some(_), Some(v)) if !staged => self.describe_pieces(addr, v, far),
                    (Some(i), _) if !staged => Ok(BufDesc {
                        at: Where::Ipc {
                            id: i.buffer_id,
                            base: i.base,
                            size: i.size,
                            handle: crate::peers::export_handle(&ctx, i)?,
                        },
                        off: addr - i.base,
                    }),
                    _ if addr >= reg_out && addr < reg_out + self.capacity => Ok(BufDesc {
                        at: Where::RegOutput,
                        off: addr - reg_out,
                    }),
                    _ => Ok(BufDesc {
                        at: Where::RegInput,
                        off: addr.saturating_sub(reg_in),
                    }),
                }
            };
            let mine = Entry {
                sig,
                nonce: process_nonce(),
                input: describe(a.input[r], &send, &send_vmm)?,
                output: describe(a.output[r], &recv, &recv_vmm)?,
            };
            let all = self.table.exchange(&mine.encode())?;
            let mut entries = Vec::with_capacity(all.len());
            for (p, bytes) in all.iter().enumerate() {
                let e = Entry::decode(bytes, p as u32)?;
                if let Some(m) = mine.sig.mismatch(&e.sig, p as u32, self.rank) {
                    return Err(CollError::invalid(m));
                }
                entries.push(e);
            }
            let own_pieces = [send_vmm.as_deref(), recv_vmm.as_deref()];
            self.swap_pieces(&entries, &own_pieces)?;
            let pin = stream.is_capturing()?.then_some(&self.pins);
            for (p, e) in entries.iter().enumerate() {
                if p == r || (!staged && far & (1 << p) != 0) {
                    continue;
                }
                let p32 = p as u32;
                let regs = (self.base.input[p], self.base.output[p]);
                a.input[p] = Imports::resolve(&ctx, p32, e.nonce, &e.input, regs, pin)?;
                a.output[p] = Imports::resolve(&ctx, p32, e.nonce, &e.output, regs, pin)?;
            }
        }
        if staged && use_in {
            // SAFETY: the source holds in_bytes (inspected); the destination is this
            // rank's registered region at the kernel's input address, which own_args
            // placed so that in_bytes fit (checked against capacity above).
            unsafe { copy::copy_async(stream, a.input[r], bufs.send, in_bytes)? };
        }
        let output = a.output[r];
        // every rank's buffers for a plan (the registered regions when staged); in
        // place, as the plan runtime wants them: the base of the one buffer, which is
        // the input's for a reduce-scatter (the result lands at rank x count) and a
        // reduce (a non-root publishes no output)
        let plan_in = a.input;
        let plan_out =
            if stage_in_place && matches!(coll, Collective::Reducescatter | Collective::Reduce) {
                a.input
            } else {
                a.output
            };
        // the caller's buffers were inspected to hold the call's bytes
        let plan_cap = if staged { self.capacity } else { u64::MAX };
        self.enqueue(
            coll,
            dtype,
            op,
            count,
            root,
            stage_in_place,
            a,
            stream,
            (&plan_in, &plan_out, plan_cap),
        )?;
        if staged && use_out {
            // SAFETY: as the copy in, the other way: out_bytes from the registered
            // output address into the inspected receive buffer.
            unsafe { copy::copy_async(stream, bufs.recv, output, out_bytes)? };
        }
        Ok(if staged {
            BufferPath::Staged
        } else if peers {
            BufferPath::Mapped
        } else {
            BufferPath::Direct
        })
    }

    /// This rank's VMM buffer at `addr`, held by `pieces`, as the peers will find it:
    /// the ranks that have not received this list yet get it after the exchange, but
    /// those of `far` (bit q: rank q of another node, which never maps it).
    pub(super) fn describe_pieces(&self, addr: u64, pieces: &[Piece], far: u32) -> Result<BufDesc> {
        let key = pieces::pieces_key(pieces);
        let sent = self
            .pieces_sent
            .lock()
            .map_err(|_| CollError::invalid("VMM bookkeeping lock poisoned"))?;
        let to = (0..self.n)
            .filter(|&q| q != self.rank && far & (1 << q) == 0 && !sent.contains(&(q, key)))
            .fold(0u32, |m, q| m | (1 << q));
        let base = pieces.first().map_or(addr, |p| p.base);
        Ok(BufDesc {
            at: Where::Vmm {
                key,
                base,
                size: pieces.iter().map(|p| p.size).sum(),
                to,
            },
            off: addr - base,
        })
    }

    /// After a call's exchange: send the VMM piece lists this rank's entry announced
    /// (`own`: the pieces of its input and output), then receive and map those the
    /// peers' entries announce for this rank ([`vmm_lists`] gives both sides the same
    /// order).
    fn swap_pieces(&self, entries: &[Entry], own: &[Option<&[Piece]>; 2]) -> Result<()> {
        let me = self.rank as usize;
        for (i, d) in vmm_lists(&entries[me]) {
            let (Where::Vmm { key, to, .. }, Some(pieces)) = (d.at, own[i]) else {
                continue;
            };
            self.send_pieces(to, key, pieces)?;
        }
        for (p, e) in entries.iter().enumerate().filter(|&(p, _)| p != me) {
            for (_, d) in vmm_lists(e) {
                if matches!(d.at, Where::Vmm { to, .. } if to & (1 << me) != 0) {
                    self.take_pieces(p as u32, e.nonce, &d)?;
                }
            }
        }
        Ok(())
    }

    /// Export `pieces` (list `key`) and send them to every rank in the mask `to`,
    /// remembering that they have it.
    pub(super) fn send_pieces(&self, to: u32, key: u64, pieces: &[Piece]) -> Result<()> {
        if to == 0 {
            return Ok(());
        }
        let fds = pieces
            .iter()
            .map(|p| pieces::export_piece(&self.ctx, p.base))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        for q in (0..self.n).filter(|q| to & (1 << q) != 0) {
            self.piece_links.send(q, key, pieces, &fds)?;
            self.pieces_sent
                .lock()
                .map_err(|_| CollError::invalid("VMM bookkeeping lock poisoned"))?
                .insert((q, key));
        }
        Ok(())
    }

    /// Receive the pieces of rank `p`'s VMM buffer `d` (its owner has `nonce`) that
    /// its entry or posting announced for this rank, and map them.
    pub(super) fn take_pieces(&self, p: u32, nonce: u64, d: &BufDesc) -> Result<()> {
        let Where::Vmm { key, .. } = d.at else {
            return Ok(());
        };
        let (got, list, fds) = self.piece_links.recv(p)?;
        if got != key {
            return Err(CollError::invalid(format!(
                "rank {p} sent the pieces of another VMM buffer than it announced: every rank must run the same commhal build"
            )));
        }
        Imports::insert_pieces(&self.ctx, p, nonce, d, list, fds)
    }

    /// Device memory the other ranks can map (NCCL's `ncclMemAlloc`): `cuMemAlloc`
    /// memory, which every call uses zero-copy (the mapped path) when 16-byte aligned.
    pub fn mem_alloc(&self, len: u64) -> Result<commhal_cuda_rt::DeviceBuffer> {
        Ok(commhal_cuda_rt::DeviceBuffer::new(&self.ctx, len)?)
    }

    /// Check that `[ptr, ptr + len)` can be used zero-copy and prepare its export
    /// (NCCL's `ncclCommRegister`; local, not collective). Registration is optional:
    /// any `cuMemAlloc` or cuMem VMM buffer is mapped on first use and cached. An error
    /// says why a buffer would be staged instead (not device memory of this device,
    /// memory neither legacy CUDA IPC nor a VMM fd export can share, such as
    /// stream-ordered pool memory, or too short).
    pub fn register(&self, ptr: u64, len: u64) -> Result<Registration> {
        let Inspected { info, pieces } = inspect(&self.ctx, "buffer to register", ptr, len)?;
        if info.legacy_ipc {
            crate::peers::export_handle(&self.ctx, &info)?;
        } else if pieces.is_none() {
            return Err(CollError::invalid(format!(
                "buffer {ptr:#x} can be shared neither through legacy CUDA IPC nor as cuMem VMM pieces exportable as POSIX fds (stream-ordered pool memory?): calls on it are staged; allocate it with cudaMalloc / Comm::mem_alloc for zero-copy"
            )));
        }
        Ok(Registration {
            ptr,
            len,
            buffer_id: if info.legacy_ipc {
                info.buffer_id
            } else {
                info.block_id
            },
        })
    }

    /// Whether the peers can open `[ptr, ptr + len)` (`cudaMalloc` / `cuMemAlloc`
    /// memory through legacy CUDA IPC, or cuMem VMM pieces exportable as POSIX fds, of
    /// this device), which a send/recv group needs of its receive buffers. Errors for
    /// what is not device memory of this device at all.
    pub fn peers_can_map(&self, ptr: u64, len: u64) -> Result<bool> {
        let i = inspect(&self.ctx, "buffer", ptr, len)?;
        Ok(i.info.legacy_ipc || i.pieces.is_some())
    }

    /// [`Comm::sync`] for a caller's stream.
    pub fn sync_stream(&self, stream: &Stream, what: &str) -> Result<()> {
        self.sync_on(stream, what)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_place_follows_nccl() {
        let b = |send, recv| CallBufs { send, recv };
        assert!(is_in_place(Collective::Allreduce, 2, 64, b(100, 100)));
        assert!(!is_in_place(Collective::Allreduce, 2, 64, b(100, 200)));
        assert!(is_in_place(Collective::Allgather, 2, 64, b(1128, 1000)));
        assert!(!is_in_place(Collective::Allgather, 2, 64, b(1000, 1000)));
        assert!(is_in_place(Collective::Reducescatter, 3, 64, b(1000, 1192)));
        assert!(!is_in_place(Collective::Alltoall, 0, 64, b(1000, 1000)));
    }

    #[test]
    fn byte_sizes_follow_nccl_counts() {
        assert_eq!(byte_sizes(Collective::Allgather, 4, 10, 2), Some((20, 80)));
        assert_eq!(
            byte_sizes(Collective::Reducescatter, 4, 10, 2),
            Some((80, 20))
        );
        assert_eq!(byte_sizes(Collective::Alltoall, 4, 10, 2), Some((80, 80)));
        assert_eq!(byte_sizes(Collective::Allreduce, 4, u64::MAX, 2), None);
    }

    #[test]
    fn vmm_lists_go_once_each_input_first() {
        let vmm = |key, to| BufDesc {
            at: Where::Vmm {
                key,
                base: 0x1000_0000,
                size: 2 << 20,
                to,
            },
            off: 0,
        };
        let entry = |input, output| Entry {
            sig: Signature {
                coll: 0,
                dtype: 0,
                op: 0,
                scalar: 0,
                in_place: false,
                root: 0,
                count: 1,
            },
            nonce: 1,
            input,
            output,
        };
        let keys = |e| {
            vmm_lists(&e)
                .iter()
                .map(|&(i, d)| (i, d.at))
                .collect::<Vec<_>>()
        };
        // two lists: input's first
        let e = entry(vmm(7, 0b10), vmm(9, 0b10));
        assert_eq!(keys(e), [(0, e.input.at), (1, e.output.at)]);
        // in place: one list
        let e = entry(vmm(7, 0b110), vmm(7, 0b110));
        assert_eq!(keys(e), [(0, e.input.at)]);
        // nobody to receive, or not VMM memory: nothing
        let reg = BufDesc {
            at: Where::RegInput,
            off: 0,
        };
        assert!(keys(entry(vmm(7, 0), reg)).is_empty());
        assert_eq!(keys(entry(reg, vmm(5, 1))), [(1, vmm(5, 1).at)]);
    }

    #[test]
    fn overlap_and_use() {
        assert!(overlaps(0, 10, 9, 10));
        assert!(!overlaps(0, 10, 10, 10));
        assert!(!overlaps(0, 0, 0, 10));
        assert_eq!(used(Collective::Broadcast, 1, 0), (false, true));
        assert_eq!(used(Collective::Reduce, 1, 0), (true, false));
        assert_eq!(used(Collective::Reduce, 0, 0), (true, true));
    }
}
