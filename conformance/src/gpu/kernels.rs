//! Device code of the GPU suite and the device work it queues, over `commhal-cuda-rt`:
//! the device-src conformance kernels, this folder's `script.cu` (a tiny op
//! interpreter), bounded stream waits, async memset, CUDA graph capture, peer copies.

use std::sync::Arc;
use std::time::Duration;

use commhal_cuda_rt::{Context, Kernel, KernelArg, LaunchConfig, Module, Stream, jit};
use commhal_device_src::{CONFORMANCE, KernelUnit, Source};
use commhal_hal::{HalError, Result};

const WHO: &str = "gpu-conformance";

/// `script.cu`: the op interpreter and the bandwidth kernel.
pub const SCRIPT: KernelUnit = KernelUnit {
    source: Source {
        name: "gpu_script.cu",
        contents: include_str!("script.cu"),
    },
    kernels: &[
        "commhal_gpu_memory_script",
        "commhal_gpu_port_script",
        "commhal_gpu_put_bw",
    ],
};

/// Operation kinds of [`GpuOp`] (same values as `script.cu`).
pub mod op {
    /// Memory: block put.
    pub const PUT: u32 = 1;
    /// Release signal (port: push SIGNAL).
    pub const SIGNAL: u32 = 2;
    /// Relaxed signal.
    pub const RELAXED_SIGNAL: u32 = 3;
    /// Wait (arg 1: must time out).
    pub const WAIT: u32 = 4;
    /// Relaxed wait.
    pub const RELAXED_WAIT: u32 = 5;
    /// Poll, arg = expected result.
    pub const POLL: u32 = 6;
    /// Memory: block get.
    pub const GET: u32 = 7;
    /// Fill local range with pattern(arg).
    pub const FILL: u32 = 8;
    /// Count local bytes differing from pattern(arg), scanning from the end.
    pub const CHECK: u32 = 9;
    /// Channel flush.
    pub const FLUSH: u32 = 10;
    /// Thread 0 sleeps `len` ns.
    pub const SLEEP: u32 = 11;
    /// Set the handle's spin limit to `len`.
    pub const SET_WAIT: u32 = 12;
    /// Spin until local byte `dst` == arg, then acquire fence.
    pub const WAIT_BYTE: u32 = 13;
    /// Port put_with_signal.
    pub const PUT_SIGNAL: u32 = 14;
    /// Port put_with_signal_and_flush.
    pub const PUT_SIGNAL_FLUSH: u32 = 15;
    /// Zero a local range.
    pub const ZERO: u32 = 16;
}

/// One interpreted operation (32 bytes; `GpuOp` in `script.cu`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GpuOp {
    /// [`op`] kind.
    pub kind: u32,
    /// Seed, expected value, or flag.
    pub arg: u32,
    /// Destination offset (or the local offset of fill/check).
    pub dst: u64,
    /// Source offset.
    pub src: u64,
    /// Bytes (or ns / spins).
    pub len: u64,
}

impl GpuOp {
    const fn new(kind: u32, arg: u32, dst: u64, src: u64, len: u64) -> GpuOp {
        GpuOp {
            kind,
            arg,
            dst,
            src,
            len,
        }
    }
    /// Put `len` bytes local[src..] → remote[dst..].
    pub const fn put(dst: u64, src: u64, len: u64) -> GpuOp {
        GpuOp::new(op::PUT, 0, dst, src, len)
    }
    /// Port put_with_signal.
    pub const fn put_signal(dst: u64, src: u64, len: u64) -> GpuOp {
        GpuOp::new(op::PUT_SIGNAL, 0, dst, src, len)
    }
    /// Port put_with_signal_and_flush.
    pub const fn put_signal_flush(dst: u64, src: u64, len: u64) -> GpuOp {
        GpuOp::new(op::PUT_SIGNAL_FLUSH, 0, dst, src, len)
    }
    /// Get `len` bytes remote[src..] → local[dst..].
    pub const fn get(dst: u64, src: u64, len: u64) -> GpuOp {
        GpuOp::new(op::GET, 0, dst, src, len)
    }
    /// Release signal.
    pub const fn signal() -> GpuOp {
        GpuOp::new(op::SIGNAL, 0, 0, 0, 0)
    }
    /// Relaxed signal.
    pub const fn relaxed_signal() -> GpuOp {
        GpuOp::new(op::RELAXED_SIGNAL, 0, 0, 0, 0)
    }
    /// Wait that must succeed.
    pub const fn wait() -> GpuOp {
        GpuOp::new(op::WAIT, 0, 0, 0, 0)
    }
    /// Wait that must time out.
    pub const fn wait_times_out() -> GpuOp {
        GpuOp::new(op::WAIT, 1, 0, 0, 0)
    }
    /// Relaxed wait that must succeed.
    pub const fn relaxed_wait() -> GpuOp {
        GpuOp::new(op::RELAXED_WAIT, 0, 0, 0, 0)
    }
    /// Poll that must return `expect`.
    pub const fn poll(expect: bool) -> GpuOp {
        GpuOp::new(op::POLL, expect as u32, 0, 0, 0)
    }
    /// Fill local[off..off+len] with pattern(seed).
    pub const fn fill(off: u64, len: u64, seed: u32) -> GpuOp {
        GpuOp::new(op::FILL, seed, off, 0, len)
    }
    /// Check local[off..off+len] against pattern(seed).
    pub const fn check(off: u64, len: u64, seed: u32) -> GpuOp {
        GpuOp::new(op::CHECK, seed, off, 0, len)
    }
    /// Zero local[off..off+len].
    pub const fn zero(off: u64, len: u64) -> GpuOp {
        GpuOp::new(op::ZERO, 0, off, 0, len)
    }
    /// Channel flush.
    pub const fn flush() -> GpuOp {
        GpuOp::new(op::FLUSH, 0, 0, 0, 0)
    }
    /// Sleep `ns` on thread 0.
    pub const fn sleep(ns: u64) -> GpuOp {
        GpuOp::new(op::SLEEP, 0, 0, 0, ns)
    }
    /// Set the handle's wait bound (`wait_ns`).
    pub const fn set_wait(ns: u64) -> GpuOp {
        GpuOp::new(op::SET_WAIT, 0, 0, 0, ns)
    }
    /// Spin until `local[off] == value`, then acquire.
    pub const fn wait_byte(off: u64, value: u8) -> GpuOp {
        GpuOp::new(op::WAIT_BYTE, value as u32, off, 0, 0)
    }

    /// Local byte ranges this op touches: `(offset, len)`.
    pub fn local_range(&self) -> Option<(u64, u64)> {
        match self.kind {
            op::FILL | op::CHECK | op::ZERO | op::GET => Some((self.dst, self.len)),
            op::WAIT_BYTE => Some((self.dst, 1)),
            op::PUT | op::PUT_SIGNAL | op::PUT_SIGNAL_FLUSH => Some((self.src, self.len)),
            _ => None,
        }
    }
    /// Remote byte range this op touches.
    pub fn remote_range(&self) -> Option<(u64, u64)> {
        match self.kind {
            op::PUT | op::PUT_SIGNAL | op::PUT_SIGNAL_FLUSH => Some((self.dst, self.len)),
            op::GET => Some((self.src, self.len)),
            _ => None,
        }
    }
}

/// Check a script's ranges against the local and remote buffer lengths before it is
/// launched (the kernels do not check).
pub fn validate_ops(ops: &[GpuOp], local_len: u64, remote_len: u64) -> Result<()> {
    for (i, o) in ops.iter().enumerate() {
        if let Some((off, len)) = o.local_range() {
            commhal_hal::error::check_range(&format!("op {i} local range"), off, len, local_len)?;
        }
        if let Some((off, len)) = o.remote_range() {
            commhal_hal::error::check_range(&format!("op {i} remote range"), off, len, remote_len)?;
        }
    }
    Ok(())
}

/// Bytes of a plain-data value (handles and ops: `#[repr(C)]`, integer fields only,
/// no padding — checked by device-src's layout test and `GpuOp`'s static_assert).
pub fn pod_bytes<T: Copy>(v: &T) -> Vec<u8> {
    let n = std::mem::size_of::<T>();
    let mut out = vec![0u8; n];
    // SAFETY: reads n = size_of::<T>() bytes of a live, initialised T into a buffer of n
    // bytes; T has no padding (see above), so every byte is initialised.
    unsafe { std::ptr::copy_nonoverlapping(v as *const T as *const u8, out.as_mut_ptr(), n) };
    out
}

/// Bytes of a slice of ops.
pub fn ops_bytes(ops: &[GpuOp]) -> Vec<u8> {
    ops.iter().flat_map(pod_bytes).collect()
}

/// Every kernel the suite launches.
#[derive(Debug, Clone)]
pub struct Kernels {
    /// commhal_conf_fill(u8*, u64, u32)
    pub fill: Kernel,
    /// commhal_conf_check(const u8*, u64, u32, u64*)
    pub check: Kernel,
    /// commhal_conf_put_signal(MemoryChannelHandle*, u64 dst, u64 src, u64 bytes)
    pub put_signal: Kernel,
    /// commhal_conf_wait(MemoryChannelHandle*, u32* ok)
    pub wait: Kernel,
    /// commhal_conf_wait_get(MemoryChannelHandle*, u64 dst, u64 src, u64 bytes, u32* ok)
    pub wait_get: Kernel,
    /// commhal_conf_ping_pong(h, iters, initiator, bytes, relaxed, ok)
    pub ping_pong: Kernel,
    /// commhal_conf_ll8_put(h, dst, src, bytes, flag)
    pub ll8_put: Kernel,
    /// commhal_conf_ll8_read(h, pkt, dst, bytes, flag, ok)
    pub ll8_read: Kernel,
    /// commhal_conf_ll16_put
    pub ll16_put: Kernel,
    /// commhal_conf_ll16_read
    pub ll16_read: Kernel,
    /// commhal_conf_fifo_push(PortChannelHandle*, per_thread, len, ok)
    pub fifo_push: Kernel,
    /// commhal_gpu_memory_script(h, ops, nops, status, mismatches)
    pub memory_script: Kernel,
    /// commhal_gpu_port_script(h, local, ops, nops, status, mismatches)
    pub port_script: Kernel,
    /// commhal_gpu_put_bw(h, dst, src, bytes)
    pub put_bw: Kernel,
    _modules: (Arc<Module>, Arc<Module>),
}

impl Kernels {
    /// JIT-compile (cached) and load both units for `ctx`'s device.
    pub fn load(ctx: &Arc<Context>) -> Result<Kernels> {
        let conf = jit::load_unit(ctx, &CONFORMANCE)?;
        let script = jit::load_unit(ctx, &SCRIPT)?;
        Ok(Kernels {
            fill: conf.kernel("commhal_conf_fill")?,
            check: conf.kernel("commhal_conf_check")?,
            put_signal: conf.kernel("commhal_conf_put_signal")?,
            wait: conf.kernel("commhal_conf_wait")?,
            wait_get: conf.kernel("commhal_conf_wait_get")?,
            ping_pong: conf.kernel("commhal_conf_ping_pong")?,
            ll8_put: conf.kernel("commhal_conf_ll8_put")?,
            ll8_read: conf.kernel("commhal_conf_ll8_read")?,
            ll16_put: conf.kernel("commhal_conf_ll16_put")?,
            ll16_read: conf.kernel("commhal_conf_ll16_read")?,
            fifo_push: conf.kernel("commhal_conf_fifo_push")?,
            memory_script: script.kernel("commhal_gpu_memory_script")?,
            port_script: script.kernel("commhal_gpu_port_script")?,
            put_bw: script.kernel("commhal_gpu_put_bw")?,
            _modules: (conf, script),
        })
    }
}

/// Launch `k`.
///
/// # Safety
/// `args` match the kernel's parameters, and every pointer argument (and every range
/// the kernel derives from the arguments and handles it reads) is device memory usable
/// by the stream's device that stays alive until the stream is synchronised.
pub unsafe fn launch(
    k: &Kernel,
    stream: &Stream,
    cfg: LaunchConfig,
    args: &[KernelArg],
) -> Result<()> {
    // SAFETY: forwarded contract (see # Safety).
    unsafe { k.launch(stream, cfg, args) }.map_err(HalError::from)
}

/// Wait (bounded) until `stream` drained; a kernel fault is reported as an error.
pub fn sync(stream: &Stream, timeout: Duration, what: &str) -> Result<()> {
    let drained = stream
        .wait_idle(timeout, what)
        .map_err(|e| commhal_backend_cuda_nvlink::driver::to_hal(WHO, e))?;
    if drained {
        Ok(())
    } else {
        Err(HalError::Timeout {
            what: what.to_string(),
            millis: timeout.as_millis() as u64,
        })
    }
}

/// Queue a memset of `len` bytes at `addr`.
///
/// # Safety
/// `[addr, addr+len)` is device memory usable by the stream's device, alive until the
/// stream is synchronised.
pub unsafe fn memset_async(stream: &Stream, addr: u64, value: u8, len: u64) -> Result<()> {
    // SAFETY: forwarded contract.
    unsafe { commhal_cuda_rt::copy::memset_async(stream, addr, value, len) }
        .map_err(|e| commhal_backend_cuda_nvlink::driver::to_hal(WHO, e))
}

/// Queue a peer copy `src` (in `src_ctx`) → `dst` (in `dst_ctx`) on `stream`.
///
/// # Safety
/// Both ranges are live device allocations of their contexts, alive until the stream
/// is synchronised.
pub unsafe fn memcpy_peer_async(
    stream: &Stream,
    dst: u64,
    dst_ctx: &Context,
    src: u64,
    src_ctx: &Context,
    len: u64,
) -> Result<()> {
    // SAFETY: forwarded contract.
    unsafe { commhal_cuda_rt::copy::copy_peer_async(stream, dst, dst_ctx, src, src_ctx, len) }
        .map_err(|e| commhal_backend_cuda_nvlink::driver::to_hal(WHO, e))
}

/// CUDA graphs (capture, replay) live in cuda-rt.
pub use commhal_cuda_rt::Graph;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_layout_matches_script_cu() {
        assert_eq!(std::mem::size_of::<GpuOp>(), 32);
        assert_eq!(std::mem::offset_of!(GpuOp, dst), 8);
        assert_eq!(std::mem::offset_of!(GpuOp, len), 24);
        let src = include_str!("script.cu");
        for (name, v) in [
            ("OP_PUT", op::PUT),
            ("OP_SIGNAL", op::SIGNAL),
            ("OP_RELAXED_SIGNAL", op::RELAXED_SIGNAL),
            ("OP_WAIT", op::WAIT),
            ("OP_RELAXED_WAIT", op::RELAXED_WAIT),
            ("OP_POLL", op::POLL),
            ("OP_GET", op::GET),
            ("OP_FILL", op::FILL),
            ("OP_CHECK", op::CHECK),
            ("OP_FLUSH", op::FLUSH),
            ("OP_SLEEP", op::SLEEP),
            ("OP_SET_WAIT", op::SET_WAIT),
            ("OP_WAIT_BYTE", op::WAIT_BYTE),
            ("OP_PUT_SIGNAL", op::PUT_SIGNAL),
            ("OP_PUT_SIGNAL_FLUSH", op::PUT_SIGNAL_FLUSH),
            ("OP_ZERO", op::ZERO),
        ] {
            let decl = format!("static const u32 {name} = {v};");
            assert!(src.contains(&decl), "script.cu lacks `{decl}`");
        }
    }

    #[test]
    fn ops_are_range_checked() {
        let ok = [
            GpuOp::fill(0, 100, 1),
            GpuOp::put(50, 0, 100),
            GpuOp::signal(),
        ];
        assert!(validate_ops(&ok, 100, 150).is_ok());
        assert!(validate_ops(&ok, 99, 150).is_err());
        assert!(validate_ops(&ok, 100, 149).is_err());
        assert!(validate_ops(&[GpuOp::get(0, u64::MAX, 2)], 10, 10).is_err());
        assert_eq!(ops_bytes(&ok).len(), 96);
    }

    /// NVRTC compiles script.cu for sm_90 with the device-src headers (no GPU needed);
    /// skipped with a visible message when NVRTC is not installed.
    #[test]
    fn script_unit_compiles_with_nvrtc() {
        let local = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../.cache/nvrtc/nvidia/cu13/lib");
        if !commhal_cuda_rt::nvrtc_available() && local.join("libnvrtc.so.13").exists() {
            commhal_cuda_rt::nvrtc::loader::preload_nvrtc_from(&local).expect("preload NVRTC");
        }
        if !commhal_cuda_rt::nvrtc_available() {
            let required = commhal_hal::settings::tests::REQUIRE_NVRTC
                .flag()
                .unwrap_or_else(|e| panic!("{e}"));
            if required {
                panic!("COMMHAL_REQUIRE_NVRTC=1 but NVRTC was not found");
            }
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr().lock(),
                "SKIPPED script_unit_compiles_with_nvrtc: NVRTC not found (run scripts/install-nvrtc.sh)"
            );
            return;
        }
        let (img, _) = jit::compile_unit(&SCRIPT, "sm_90", None).unwrap_or_else(|e| panic!("{e}"));
        assert!(!img.bytes.is_empty());
    }
}
