//! Loaded modules, kernels and launches.

use std::ffi::{CString, c_void};
use std::sync::Arc;

use cudarc::driver::sys;

use crate::context::Context;
use crate::driver::check;
use crate::error::{CudaError, Result};
use crate::nvrtc::{CompiledImage, ImageKind};
use crate::stream::Stream;

/// A module loaded into a context (CUBIN or PTX). Unloaded on drop.
#[derive(Debug)]
pub struct Module {
    ctx: Arc<Context>,
    raw: sys::CUmodule,
}

// SAFETY: modules are process-wide driver objects usable from any thread.
unsafe impl Send for Module {}
// SAFETY: as above.
unsafe impl Sync for Module {}

impl Module {
    /// Load a compiled image (PTX is JIT-compiled by the driver for this device).
    pub fn load(ctx: &Arc<Context>, image: &CompiledImage) -> Result<Arc<Module>> {
        let mut data = image.bytes.clone();
        if image.kind == ImageKind::Ptx && data.last() != Some(&0) {
            data.push(0); // cuModuleLoadData needs NUL-terminated PTX text
        }
        if data.is_empty() {
            return Err(CudaError::invalid("empty module image"));
        }
        ctx.bind()?;
        let mut raw: sys::CUmodule = std::ptr::null_mut();
        // SAFETY: context bound; `data` is a complete CUBIN or NUL-terminated PTX that
        // outlives the call.
        let r = unsafe { sys::cuModuleLoadData(&mut raw, data.as_ptr() as *const c_void) };
        check(r, "cuModuleLoadData", || {
            format!(
                "loading `{}` ({:?}, compiled for {}) — built for another GPU architecture?",
                image.unit, image.kind, image.arch
            )
        })?;
        Ok(Arc::new(Module {
            ctx: ctx.clone(),
            raw,
        }))
    }

    /// Find an `extern "C"` kernel by name.
    pub fn kernel(self: &Arc<Self>, name: &str) -> Result<Kernel> {
        let cname = CString::new(name)
            .map_err(|_| CudaError::invalid(format!("kernel name {name:?} contains NUL")))?;
        self.ctx.bind()?;
        let mut f: sys::CUfunction = std::ptr::null_mut();
        // SAFETY: module alive; name NUL-terminated; out-pointer valid.
        let r = unsafe { sys::cuModuleGetFunction(&mut f, self.raw, cname.as_ptr()) };
        check(r, "cuModuleGetFunction", || {
            format!("looking up kernel `{name}` (is it extern \"C\" in the unit?)")
        })?;
        Ok(Kernel {
            module: self.clone(),
            raw: f,
            name: name.to_string(),
        })
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        if self.ctx.bind().is_ok() {
            // SAFETY: loaded in `load`, unloaded once; kernels hold an Arc so none
            // outlives it.
            let r = unsafe { sys::cuModuleUnload(self.raw) };
            if r != sys::CUresult::CUDA_SUCCESS {
                tracing::warn!("cuModuleUnload failed: {r:?}");
            }
        }
    }
}

/// Grid and block shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchConfig {
    /// Blocks per grid (x, y, z).
    pub grid: (u32, u32, u32),
    /// Threads per block (x, y, z).
    pub block: (u32, u32, u32),
    /// Dynamic shared memory bytes.
    pub shared_mem_bytes: u32,
}

impl LaunchConfig {
    /// `blocks` × `threads`, one-dimensional, no dynamic shared memory.
    pub fn linear(blocks: u32, threads: u32) -> Self {
        LaunchConfig {
            grid: (blocks, 1, 1),
            block: (threads, 1, 1),
            shared_mem_bytes: 0,
        }
    }
}

/// One kernel argument, passed by value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KernelArg {
    /// `unsigned int` / `u32`.
    U32(u32),
    /// `int`.
    I32(i32),
    /// `unsigned long long` / `u64`.
    U64(u64),
    /// `float`.
    F32(f32),
    /// Any pointer: a device address.
    Ptr(u64),
}

#[repr(C, align(8))]
struct ArgSlot([u8; 8]);

/// A kernel of a loaded module.
#[derive(Debug, Clone)]
pub struct Kernel {
    module: Arc<Module>,
    raw: sys::CUfunction,
    name: String,
}

// SAFETY: CUfunction handles are usable from any thread while their module lives
// (kept alive by the Arc).
unsafe impl Send for Kernel {}
// SAFETY: as above.
unsafe impl Sync for Kernel {}

impl Kernel {
    /// Kernel name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Queue the kernel on `stream`. Returns when queued; faults surface at the next
    /// synchronisation.
    ///
    /// # Safety
    /// `args` must match the kernel's parameter list in number, order and size, and
    /// every pointer argument must be a device address the kernel may access for the
    /// whole run (the kernel can read/write anything it is given).
    pub unsafe fn launch(
        &self,
        stream: &Stream,
        cfg: LaunchConfig,
        args: &[KernelArg],
    ) -> Result<()> {
        self.check_dims(&cfg)?;
        let slots: Vec<ArgSlot> = args
            .iter()
            .map(|a| {
                let mut b = [0u8; 8];
                match *a {
                    KernelArg::U32(v) => b[..4].copy_from_slice(&v.to_ne_bytes()),
                    KernelArg::I32(v) => b[..4].copy_from_slice(&v.to_ne_bytes()),
                    KernelArg::F32(v) => b[..4].copy_from_slice(&v.to_ne_bytes()),
                    KernelArg::U64(v) | KernelArg::Ptr(v) => b.copy_from_slice(&v.to_ne_bytes()),
                }
                ArgSlot(b)
            })
            .collect();
        let mut params: Vec<*mut c_void> =
            slots.iter().map(|s| s.0.as_ptr() as *mut c_void).collect();
        self.module.ctx.bind()?;
        // SAFETY: `params` holds one pointer per argument to storage that outlives the
        // call (the driver copies the values); argument types and pointer validity are
        // the caller's contract (see # Safety).
        unsafe { self.raw_launch(stream, &cfg, &mut params) }
    }

    /// Queue the kernel on `stream` with `args` as its one by-value parameter (a
    /// `#[repr(C)]` argument block). `programmatic`: launch with programmatic stream
    /// serialization allowed (programmatic dependent launch, `cuLaunchKernelEx`;
    /// compute capability 9.0+): the kernel may be scheduled before the previous
    /// kernel on the stream finished, so it must begin with `griddepcontrol.wait`.
    ///
    /// The hot path of the collectives: the context is not bound here. Call from a
    /// thread where the module's context is current (any call of this crate on it
    /// binds it); otherwise the driver reports `CUDA_ERROR_INVALID_CONTEXT`.
    ///
    /// # Safety
    /// The kernel's only parameter has `A`'s exact layout; every address in `args` is
    /// device memory usable by the stream's device that stays alive, and sized for
    /// what the kernel derives from `args`, until the stream is synchronised.
    pub unsafe fn launch_block<A: Copy>(
        &self,
        stream: &Stream,
        cfg: LaunchConfig,
        args: &A,
        programmatic: bool,
    ) -> Result<()> {
        self.check_dims(&cfg)?;
        let (gx, gy, gz) = cfg.grid;
        let (bx, by, bz) = cfg.block;
        let mut copy = *args;
        let mut params = [&mut copy as *mut A as *mut c_void];
        if programmatic {
            // SAFETY: an all-zero launch attribute is a valid (empty) value; the id and
            // the one union member the driver reads for it are set below.
            let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
            attr.id =
                sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
            attr.value.programmaticStreamSerializationAllowed = 1;
            let lc = sys::CUlaunchConfig {
                gridDimX: gx,
                gridDimY: gy,
                gridDimZ: gz,
                blockDimX: bx,
                blockDimY: by,
                blockDimZ: bz,
                sharedMemBytes: cfg.shared_mem_bytes,
                hStream: stream.raw(),
                attrs: &mut attr,
                numAttrs: 1,
            };
            // SAFETY: function and stream alive; one parameter pointer to storage of
            // the kernel's parameter type that outlives the call (the driver copies
            // it); `lc` and `attr` outlive the call. Pointer validity: see # Safety.
            let r = unsafe {
                sys::cuLaunchKernelEx(&lc, self.raw, params.as_mut_ptr(), std::ptr::null_mut())
            };
            return check(r, "cuLaunchKernelEx", || {
                format!(
                    "launching `{}` ({:?}x{:?}, programmatic dependent launch)",
                    self.name, cfg.grid, cfg.block
                )
            });
        }
        // SAFETY: one parameter pointer to storage of the kernel's parameter type that
        // outlives the call (the driver copies it). Pointer validity: see # Safety.
        unsafe { self.raw_launch(stream, &cfg, &mut params) }
    }

    /// Refuse an empty grid or block (the driver's own error would not name the kernel).
    fn check_dims(&self, cfg: &LaunchConfig) -> Result<()> {
        let (gx, gy, gz) = cfg.grid;
        let (bx, by, bz) = cfg.block;
        if gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 {
            return Err(CudaError::invalid(format!(
                "launch of `{}` with an empty grid {:?} or block {:?}",
                self.name, cfg.grid, cfg.block
            )));
        }
        Ok(())
    }

    /// `cuLaunchKernel` of this function on `stream` with `params`, checked.
    ///
    /// # Safety
    /// `params` holds one pointer per kernel parameter, each to storage of that
    /// parameter's type that outlives the call; every address the parameters hold is
    /// valid for the kernel until the stream is synchronised.
    unsafe fn raw_launch(
        &self,
        stream: &Stream,
        cfg: &LaunchConfig,
        params: &mut [*mut c_void],
    ) -> Result<()> {
        let (gx, gy, gz) = cfg.grid;
        let (bx, by, bz) = cfg.block;
        // SAFETY: function and stream alive (borrowed); `params` as this function's
        // contract says.
        let r = unsafe {
            sys::cuLaunchKernel(
                self.raw,
                gx,
                gy,
                gz,
                bx,
                by,
                bz,
                cfg.shared_mem_bytes,
                stream.raw(),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        check(r, "cuLaunchKernel", || {
            format!("launching `{}` ({:?}x{:?})", self.name, cfg.grid, cfg.block)
        })
    }
}
