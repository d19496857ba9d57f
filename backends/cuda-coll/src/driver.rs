//! The raw driver calls this crate needs beyond `commhal-cuda-rt`: loading the
//! collectives module, launching with a by-value [`CollArgs`](crate::layout::CollArgs), async memsets/copies,
//! a bounded stream wait, and CUDA graph capture/replay. Every `CUresult` is checked.

use std::collections::HashMap;
use std::ffi::{CString, c_void};
use std::sync::Arc;
use std::time::Duration;

use commhal_cuda_rt::{CompiledImage, Context, ImageKind, Stream};
use cudarc::driver::sys;

use crate::error::{CollError, Result};

/// `Ok` on `CUDA_SUCCESS`, else the driver error naming the call (cuda-rt's check).
pub(crate) fn check(
    r: sys::CUresult,
    call: &'static str,
    what: impl FnOnce() -> String,
) -> Result<()> {
    Ok(commhal_cuda_rt::driver::check(r, call, what)?)
}

/// The loaded `coll_nvlink.cu` module and its kernels by name.
#[derive(Debug)]
pub struct CollModule {
    ctx: Arc<Context>,
    raw: sys::CUmodule,
    funcs: HashMap<String, sys::CUfunction>,
}

// SAFETY: modules and functions are process-wide driver objects usable from any thread.
unsafe impl Send for CollModule {}
// SAFETY: as above; the map is never mutated after `load`.
unsafe impl Sync for CollModule {}

impl CollModule {
    /// Load `image` into `ctx` and look up every kernel in `names`.
    pub fn load(ctx: &Arc<Context>, image: &CompiledImage, names: &[&str]) -> Result<CollModule> {
        let mut data = image.bytes.clone();
        if image.kind == ImageKind::Ptx && data.last() != Some(&0) {
            data.push(0);
        }
        if data.is_empty() {
            return Err(CollError::invalid("empty module image"));
        }
        ctx.bind()?;
        let mut raw: sys::CUmodule = std::ptr::null_mut();
        // SAFETY: context bound; `data` is a complete CUBIN or NUL-terminated PTX that
        // outlives the call; out-pointer valid.
        let r = unsafe { sys::cuModuleLoadData(&mut raw, data.as_ptr() as *const c_void) };
        check(r, "cuModuleLoadData", || {
            format!("loading {} for {}", image.unit, image.arch)
        })?;
        let mut m = CollModule {
            ctx: ctx.clone(),
            raw,
            funcs: HashMap::new(),
        };
        for name in names {
            let c = CString::new(*name).map_err(|_| CollError::invalid("kernel name with NUL"))?;
            let mut f: sys::CUfunction = std::ptr::null_mut();
            // SAFETY: module alive; NUL-terminated name; out-pointer valid.
            let r = unsafe { sys::cuModuleGetFunction(&mut f, m.raw, c.as_ptr()) };
            check(r, "cuModuleGetFunction", || format!("looking up `{name}`"))?;
            m.funcs.insert((*name).to_string(), f);
        }
        Ok(m)
    }

    /// Queue kernel `name` with `args` by value (`CollArgs` for the hand-written
    /// kernels, `PlanArgs` for generated ones). `pdl`: launch with programmatic stream
    /// serialization allowed (programmatic dependent launch): the kernel may be
    /// scheduled before the previous kernel on the stream finished, so it must begin
    /// with `griddepcontrol.wait` (the hand-written kernels do, in `coll_begin`).
    ///
    /// # Safety
    /// Every address in `args` is device memory mapped for this context that stays
    /// alive and sized for what the kernel derives from `args` (count, ranks, slots)
    /// until the stream is synchronised; the kernel's only parameter is an `A` with
    /// the same layout (`#[repr(C)]` mirror).
    pub unsafe fn launch<A: Copy>(
        &self,
        name: &str,
        stream: &Stream,
        grid: u32,
        block: u32,
        args: &A,
        pdl: bool,
    ) -> Result<()> {
        let f = *self
            .funcs
            .get(name)
            .ok_or_else(|| CollError::invalid(format!("kernel `{name}` was not loaded")))?;
        if grid == 0 || block == 0 || grid > crate::layout::MAX_BLOCKS {
            return Err(CollError::invalid(format!(
                "launch of `{name}` with grid {grid} block {block} (grid must be 1..={})",
                crate::layout::MAX_BLOCKS
            )));
        }
        let mut copy = *args;
        let mut params = [&mut copy as *mut A as *mut c_void];
        if pdl {
            // SAFETY: an all-zero launch attribute is a valid (empty) value; the id and
            // the one union member the driver reads for it are set below.
            let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
            attr.id =
                sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
            attr.value.programmaticStreamSerializationAllowed = 1;
            let cfg = sys::CUlaunchConfig {
                gridDimX: grid,
                gridDimY: 1,
                gridDimZ: 1,
                blockDimX: block,
                blockDimY: 1,
                blockDimZ: 1,
                sharedMemBytes: 0,
                hStream: stream.raw(),
                attrs: &mut attr,
                numAttrs: 1,
            };
            // SAFETY: as for cuLaunchKernel below; `cfg` and `attr` outlive the call.
            let r = unsafe {
                sys::cuLaunchKernelEx(&cfg, f, params.as_mut_ptr(), std::ptr::null_mut())
            };
            return check(r, "cuLaunchKernelEx", || {
                format!(
                    "launching `{name}` ({grid}x{block}, programmatic dependent launch; COMMHAL_COLL_PDL=0 turns it off)"
                )
            });
        }
        // SAFETY: function and stream alive (same context, bound by the caller's
        // stream use below); one parameter of the kernel's exact type and size; the
        // driver copies it before returning. Pointer validity: see # Safety.
        let r = unsafe {
            sys::cuLaunchKernel(
                f,
                grid,
                1,
                1,
                block,
                1,
                1,
                0,
                stream.raw(),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        check(r, "cuLaunchKernel", || {
            format!("launching `{name}` ({grid}x{block})")
        })
    }
}

impl Drop for CollModule {
    fn drop(&mut self) {
        if self.ctx.bind().is_ok() {
            // SAFETY: loaded once in `load`, unloaded once; no launches are pending
            // (owners synchronise before dropping).
            let r = unsafe { sys::cuModuleUnload(self.raw) };
            if r != sys::CUresult::CUDA_SUCCESS {
                tracing::warn!("cuModuleUnload failed: {r:?}");
            }
        }
    }
}

/// Queue `memset(addr, value, len)` on `stream`.
///
/// # Safety
/// `[addr, addr+len)` is device memory alive until the stream is synchronised.
pub unsafe fn memset_async(stream: &Stream, addr: u64, value: u8, len: u64) -> Result<()> {
    stream.context().bind()?;
    // SAFETY: forwarded contract.
    let r = unsafe { sys::cuMemsetD8Async(addr, value, len as usize, stream.raw()) };
    check(r, "cuMemsetD8Async", || format!("filling {len} bytes"))
}

/// Queue a device-to-device copy on `stream`.
///
/// # Safety
/// Both ranges are device memory alive until the stream is synchronised.
pub unsafe fn copy_async(stream: &Stream, dst: u64, src: u64, len: u64) -> Result<()> {
    stream.context().bind()?;
    // SAFETY: forwarded contract.
    let r = unsafe { sys::cuMemcpyDtoDAsync_v2(dst, src, len as usize, stream.raw()) };
    check(r, "cuMemcpyDtoDAsync", || format!("copying {len} bytes"))
}

/// Synchronous device→host copy into `dst`.
///
/// # Safety
/// `[src, src + dst.len())` is live device memory of the current context's device
/// (or mapped for it).
pub unsafe fn read(ctx: &Context, src: u64, dst: &mut [u8]) -> Result<()> {
    ctx.bind()?;
    // SAFETY: `dst` is a writable host slice; source per the contract.
    let r = unsafe { sys::cuMemcpyDtoH_v2(dst.as_mut_ptr() as *mut c_void, src, dst.len()) };
    check(r, "cuMemcpyDtoH", || format!("reading {} bytes", dst.len()))
}

/// Wait (bounded) until `stream` drained; kernel faults come back as errors.
pub fn sync(stream: &Stream, timeout: Duration, what: &str) -> Result<()> {
    if stream.wait_idle(timeout, what)? {
        Ok(())
    } else {
        Err(CollError::Timeout {
            what: what.to_string(),
            millis: timeout.as_millis() as u64,
        })
    }
}

/// Number of SMs of `ctx`'s device.
pub fn sm_count(ctx: &Context) -> Result<u32> {
    Ok(ctx.attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32)
}

/// CUDA graphs live in cuda-rt; re-exported for the benchmark.
pub use commhal_cuda_rt::Graph;

/// A host-released gate: [`Gate::close`] queues a stream wait on a pinned host word,
/// [`Gate::open`] releases it. The timed loop queues every launch behind a closed
/// gate, so the GPU runs them back to back and the events measure device time, not
/// the host's submission rate. Keep the queued work short (well under the driver's
/// queue depth) or the host blocks in a launch before it can open the gate.
#[derive(Debug)]
pub struct Gate {
    word: commhal_cuda_rt::PinnedHostBuffer,
    value: u32,
    /// False when the driver lacks `cuStreamWaitValue32`: no gate, the launches are
    /// queued as the host submits them.
    usable: bool,
}

impl Gate {
    /// A gate on `ctx` (one pinned page).
    pub fn new(ctx: &Arc<Context>) -> Result<Gate> {
        Ok(Gate {
            word: commhal_cuda_rt::PinnedHostBuffer::new(ctx, 64)?,
            value: 0,
            usable: commhal_cuda_rt::driver::symbol_present("cuStreamWaitValue32_v2"),
        })
    }

    /// Queue "wait until the word reaches the next value" on `stream` (nothing when
    /// the driver has no stream waits).
    pub fn close(&mut self, stream: &Stream) -> Result<()> {
        if !self.usable {
            return Ok(());
        }
        self.value = self.value.wrapping_add(1).max(1);
        // SAFETY: the word is pinned, device-mapped host memory owned by `self`, which
        // outlives the wait (the owner opens the gate and synchronises before drop).
        unsafe { wait_value32(stream, self.word.device_addr(), self.value) }
    }

    /// Release everything queued behind the last [`Gate::close`].
    pub fn open(&self) {
        let p = self.word.host_ptr() as *mut u32;
        // SAFETY: the buffer is 64 bytes, 4-byte aligned (page-aligned allocation), and
        // only this gate writes it; a volatile store makes it visible to the GPU's poll.
        unsafe { std::ptr::write_volatile(p, self.value) };
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }
}

/// Queue "store `value` at `addr`" on `stream` (32-bit stream memory operation, with
/// the default memory barrier: the stream's earlier work, e.g. a copy, is visible
/// before the value). The copy-engine path's signal.
///
/// # Safety
/// `addr` is 4-byte aligned device memory (own or a mapped peer's) alive until the
/// stream executed the write.
pub unsafe fn write_value32(stream: &Stream, addr: u64, value: u32) -> Result<()> {
    stream.context().bind()?;
    // SAFETY: forwarded contract; stream alive and its context bound.
    let r = unsafe {
        sys::cuStreamWriteValue32_v2(
            stream.raw(),
            addr,
            value,
            sys::CUstreamWriteValue_flags::CU_STREAM_WRITE_VALUE_DEFAULT as u32,
        )
    };
    check(r, "cuStreamWriteValue32", || {
        format!("queueing the flag write {value} -> {addr:#x} (stream memory operations)")
    })
}

/// Queue "wait until the u32 at `addr` is >= `value`" on `stream` (the timing gate's
/// wait; the host does not block). The copy-engine path waits with a bounded kernel
/// instead.
///
/// # Safety
/// `addr` is 4-byte aligned device memory of this context (or pinned host memory
/// mapped for it) alive until the wait passed.
pub unsafe fn wait_value32(stream: &Stream, addr: u64, value: u32) -> Result<()> {
    stream.context().bind()?;
    // SAFETY: forwarded contract; stream alive and its context bound.
    let r = unsafe {
        sys::cuStreamWaitValue32_v2(
            stream.raw(),
            addr,
            value,
            sys::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32,
        )
    };
    check(r, "cuStreamWaitValue32", || {
        format!("queueing the wait for {value} at {addr:#x} (stream memory operations)")
    })
}
