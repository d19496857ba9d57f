//! NCCL (dlopen'd through cudarc, never linked) on the same buffers and stream, for
//! `--compare nccl`.

use std::ffi::c_void;

use commhal_cuda_rt::Stream;
use commhal_hal::bootstrap::Bootstrap;
use cudarc::nccl::sys;

use crate::cli::{Collective, Dtype};
use crate::error::{CollError, Result};
use crate::kernels::ReduceOp;

fn check(r: sys::ncclResult_t, call: &str) -> Result<()> {
    if r == sys::ncclResult_t::ncclSuccess {
        Ok(())
    } else {
        Err(CollError::Nccl(format!("{call} returned {r:?}")))
    }
}

/// One NCCL communicator over the same ranks.
#[derive(Debug)]
pub struct Nccl {
    comm: sys::ncclComm_t,
}

impl Nccl {
    /// True when libnccl can be opened (LD_LIBRARY_PATH; `.gpu/env.sh` sets it).
    pub fn available() -> bool {
        // SAFETY: only tries to dlopen candidate names and drops the handles.
        unsafe { sys::is_culib_present() }
    }

    /// Collective: rank 0 makes the id, the bootstrap broadcasts it, every rank joins.
    /// The caller's context must be current (NCCL uses the current device).
    /// Every rank learns whether every rank could load NCCL first, so a rank without
    /// it never leaves the others waiting.
    pub fn init(boot: &dyn Bootstrap) -> Result<Nccl> {
        let ok = Self::available();
        let all = boot.all_gather(&[u8::from(ok)])?;
        if let Some(p) = all.iter().position(|v| v.first() != Some(&1)) {
            return Err(CollError::Nccl(format!(
                "libnccl.so could not be loaded on rank {p} (source .gpu/env.sh to put the wheel's libnccl.so.2 on LD_LIBRARY_PATH)"
            )));
        }
        let mut id = sys::ncclUniqueId { internal: [0; 128] };
        let mut ok_id = true;
        if boot.rank() == 0 {
            // SAFETY: library present (checked); out-pointer valid.
            ok_id = check(unsafe { sys::ncclGetUniqueId(&mut id) }, "ncclGetUniqueId").is_ok();
        }
        let bytes: Vec<u8> = std::iter::once(u8::from(ok_id))
            .chain(id.internal.iter().map(|&c| c as u8))
            .collect();
        let got = boot.broadcast(0, &bytes)?;
        if got.len() != 129 || got[0] != 1 {
            return Err(CollError::Nccl(
                "rank 0 could not create an NCCL unique id".into(),
            ));
        }
        for (dst, src) in id.internal.iter_mut().zip(&got[1..]) {
            *dst = *src as std::ffi::c_char;
        }
        let mut comm: sys::ncclComm_t = std::ptr::null_mut();
        // SAFETY: out-pointer valid; id from rank 0; every rank calls with the same
        // size and a distinct rank (bootstrap ranks).
        let r =
            unsafe { sys::ncclCommInitRank(&mut comm, boot.size() as i32, id, boot.rank() as i32) };
        check(r, "ncclCommInitRank")?;
        Ok(Nccl { comm })
    }

    /// NCCL's type for `d`. Every type has one in the NCCL these bindings target
    /// (2.28: fp8 since 2.24; NCCL reduces fp8 only on sm_90 and newer).
    pub fn dtype(d: Dtype) -> sys::ncclDataType_t {
        use sys::ncclDataType_t as T;
        match d {
            Dtype::Int8 => T::ncclInt8,
            Dtype::Uint8 => T::ncclUint8,
            Dtype::Int32 => T::ncclInt32,
            Dtype::Uint32 => T::ncclUint32,
            Dtype::Int64 => T::ncclInt64,
            Dtype::Uint64 => T::ncclUint64,
            Dtype::Half => T::ncclFloat16,
            Dtype::Bfloat16 => T::ncclBfloat16,
            Dtype::Float => T::ncclFloat32,
            Dtype::Double => T::ncclFloat64,
            Dtype::Fp8E4m3 => T::ncclFloat8e4m3,
            Dtype::Fp8E5m2 => T::ncclFloat8e5m2,
        }
    }

    /// NCCL's operator for `op` on `dtype`: a built-in one, or for premulsum one
    /// created with ncclRedOpCreatePreMulSum (the scalar passed by value, rounded to
    /// the type as the commhal kernels get it); `true` = created, destroy it after the
    /// call is queued (NCCL allows that).
    fn red_op(&self, op: ReduceOp, dtype: Dtype) -> Result<(sys::ncclRedOp_t, bool)> {
        use sys::ncclRedOp_t as O;
        Ok(match op {
            ReduceOp::Sum => (O::ncclSum, false),
            ReduceOp::Prod => (O::ncclProd, false),
            ReduceOp::Min => (O::ncclMin, false),
            ReduceOp::Max => (O::ncclMax, false),
            ReduceOp::Avg => (O::ncclAvg, false),
            ReduceOp::PreMulSum(_) => {
                let mut scalar = op.scalar_bits(dtype.data_type()).to_ne_bytes();
                let mut raw: u32 = 0;
                // SAFETY: `raw` is a valid out-location of the enum's size (u32; NCCL
                // writes an int); the scalar points at one element of `dtype`, read
                // during the call (host-immediate residence); comm alive.
                let r = unsafe {
                    sys::ncclRedOpCreatePreMulSum(
                        (&mut raw as *mut u32).cast::<sys::ncclRedOp_t>(),
                        scalar.as_mut_ptr().cast::<c_void>(),
                        Self::dtype(dtype),
                        sys::ncclScalarResidence_t::ncclScalarHostImmediate,
                        self.comm,
                    )
                };
                check(r, "ncclRedOpCreatePreMulSum")?;
                // NCCL numbers user ops from ncclNumOps up; the bindings' enum only
                // names ncclNumOps itself (the first free slot, which a create /
                // destroy per call always gets)
                if raw != O::ncclNumOps as u32 {
                    return Err(CollError::Nccl(format!(
                        "ncclRedOpCreatePreMulSum returned op {raw}, which the cudarc enum cannot carry: destroy earlier user ops first"
                    )));
                }
                (O::ncclNumOps, true)
            }
        })
    }

    /// Queue `coll` with the same buffer convention as
    /// [`crate::comm::Comm::launch_rooted`] (`count` per rank for all-gather,
    /// reduce-scatter, all-to-all; `root` for broadcast / reduce). All-to-all and
    /// send/recv are ncclSend/ncclRecv pairs in one group (nccl-tests' alltoall and
    /// sendrecv), out of place only.
    ///
    /// # Safety
    /// `input`/`output` are device buffers of the stream's device, large enough for
    /// the collective, alive until the stream is synchronised.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn launch(
        &self,
        stream: &Stream,
        coll: Collective,
        dtype: Dtype,
        op: ReduceOp,
        count: u64,
        rank: u32,
        nranks: u32,
        root: u32,
        input: u64,
        output: u64,
        in_place: bool,
    ) -> Result<()> {
        if in_place && !coll.in_place_supported() {
            return Err(CollError::invalid(format!(
                "{} has no in-place variant in this benchmark",
                coll.name()
            )));
        }
        let es = dtype.size();
        let s = stream.raw() as sys::cudaStream_t;
        let dt = Self::dtype(dtype);
        let (nop, created) = if matches!(
            coll,
            Collective::Allreduce | Collective::Reducescatter | Collective::Reduce
        ) {
            self.red_op(op, dtype)?
        } else {
            (sys::ncclRedOp_t::ncclSum, false)
        };
        let c = count as usize;
        let r = match coll {
            Collective::Allreduce => {
                let src = if in_place { output } else { input };
                // SAFETY: forwarded contract.
                unsafe {
                    sys::ncclAllReduce(
                        src as *const c_void,
                        output as *mut c_void,
                        c,
                        dt,
                        nop,
                        self.comm,
                        s,
                    )
                }
            }
            Collective::Allgather => {
                let src = if in_place {
                    output + u64::from(rank) * count * es
                } else {
                    input
                };
                // SAFETY: forwarded contract.
                unsafe {
                    sys::ncclAllGather(
                        src as *const c_void,
                        output as *mut c_void,
                        c,
                        dt,
                        self.comm,
                        s,
                    )
                }
            }
            Collective::Reducescatter => {
                let (src, dst) = if in_place {
                    (output, output + u64::from(rank) * count * es)
                } else {
                    (input, output)
                };
                // SAFETY: forwarded contract.
                unsafe {
                    sys::ncclReduceScatter(
                        src as *const c_void,
                        dst as *mut c_void,
                        c,
                        dt,
                        nop,
                        self.comm,
                        s,
                    )
                }
            }
            Collective::Broadcast => {
                let src = if in_place { output } else { input };
                // SAFETY: forwarded contract.
                unsafe {
                    sys::ncclBroadcast(
                        src as *const c_void,
                        output as *mut c_void,
                        c,
                        dt,
                        root as i32,
                        self.comm,
                        s,
                    )
                }
            }
            Collective::Reduce => {
                let src = if in_place { output } else { input };
                // SAFETY: forwarded contract.
                unsafe {
                    sys::ncclReduce(
                        src as *const c_void,
                        output as *mut c_void,
                        c,
                        dt,
                        nop,
                        root as i32,
                        self.comm,
                        s,
                    )
                }
            }
            Collective::Alltoall => {
                let chunk = count * es;
                let pairs = (0..nranks).map(|p| {
                    (
                        p,
                        input + u64::from(p) * chunk,
                        output + u64::from(p) * chunk,
                    )
                });
                // SAFETY: forwarded contract; chunk p of each buffer lies inside it
                // (n × count elements).
                return unsafe { self.grouped(pairs.collect(), c, dt, s) };
            }
            Collective::Sendrecv => {
                let n = nranks.max(1);
                let next = (rank + 1) % n;
                let prev = (rank + n - 1) % n;
                // SAFETY: forwarded contract.
                return unsafe {
                    self.send_recv_group(&[(next, input)], &[(prev, output)], c, dt, s)
                };
            }
        };
        if created {
            // SAFETY: created above on this comm; NCCL allows destroying a user op once
            // the calls using it are queued.
            let d = unsafe { sys::ncclRedOpDestroy(nop, self.comm) };
            check(d, "ncclRedOpDestroy")?;
        }
        check(r, coll.name())
    }

    /// All-to-all: for every `(peer, send chunk, recv chunk)`, send to and receive
    /// from `peer`, all in one group.
    ///
    /// # Safety
    /// As [`Nccl::launch`]: every chunk is `count` elements of device memory.
    unsafe fn grouped(
        &self,
        pairs: Vec<(u32, u64, u64)>,
        count: usize,
        dt: sys::ncclDataType_t,
        s: sys::cudaStream_t,
    ) -> Result<()> {
        let sends: Vec<(u32, u64)> = pairs.iter().map(|&(p, snd, _)| (p, snd)).collect();
        let recvs: Vec<(u32, u64)> = pairs.iter().map(|&(p, _, rcv)| (p, rcv)).collect();
        // SAFETY: forwarded contract.
        unsafe { self.send_recv_group(&sends, &recvs, count, dt, s) }
    }

    /// `ncclGroupStart`, every send and receive, `ncclGroupEnd` (always called once
    /// the group started, so a failed call never leaves NCCL inside a group).
    ///
    /// # Safety
    /// As [`Nccl::launch`]: every buffer is `count` elements of device memory.
    unsafe fn send_recv_group(
        &self,
        sends: &[(u32, u64)],
        recvs: &[(u32, u64)],
        count: usize,
        dt: sys::ncclDataType_t,
        s: sys::cudaStream_t,
    ) -> Result<()> {
        // SAFETY: no arguments; pairs with the ncclGroupEnd below.
        check(unsafe { sys::ncclGroupStart() }, "ncclGroupStart")?;
        let mut first_err = Ok(());
        for &(peer, buf) in sends {
            // SAFETY: forwarded contract; peer is a rank of this communicator.
            let r = unsafe {
                sys::ncclSend(buf as *const c_void, count, dt, peer as i32, self.comm, s)
            };
            if first_err.is_ok() {
                first_err = check(r, "ncclSend");
            }
        }
        for &(peer, buf) in recvs {
            // SAFETY: forwarded contract; peer is a rank of this communicator.
            let r =
                unsafe { sys::ncclRecv(buf as *mut c_void, count, dt, peer as i32, self.comm, s) };
            if first_err.is_ok() {
                first_err = check(r, "ncclRecv");
            }
        }
        // SAFETY: closes the group opened above.
        let end = check(unsafe { sys::ncclGroupEnd() }, "ncclGroupEnd");
        first_err.and(end)
    }
}

impl Drop for Nccl {
    fn drop(&mut self) {
        // SAFETY: created by ncclCommInitRank, destroyed once; callers synchronise first.
        let r = unsafe { sys::ncclCommDestroy(self.comm) };
        if r != sys::ncclResult_t::ncclSuccess {
            tracing::warn!("ncclCommDestroy: {r:?}");
        }
    }
}
