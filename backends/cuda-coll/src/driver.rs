//! The collectives' kernels in this crate's terms, over `commhal-cuda-rt` (which makes
//! every driver call): [`CollModule`] loads a unit and launches its kernels with a
//! by-value [`CollArgs`](crate::layout::CollArgs) or `PlanArgs`, and [`sync`] waits for a
//! stream with the crate's timeout error.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use commhal_cuda_rt::{CompiledImage, Context, Kernel, LaunchConfig, Module, Stream};

use crate::error::{CollError, Result};

/// A loaded unit (`coll_nvlink.cu`, a typed instantiation, a generated plan) and its
/// kernels by name.
#[derive(Debug)]
pub struct CollModule {
    funcs: HashMap<String, Kernel>,
}

impl CollModule {
    /// Load `image` into `ctx` and look up every kernel in `names`.
    pub fn load(ctx: &Arc<Context>, image: &CompiledImage, names: &[&str]) -> Result<CollModule> {
        let module = Module::load(ctx, image)?;
        let funcs = names
            .iter()
            .map(|name| Ok(((*name).to_string(), module.kernel(name)?)))
            .collect::<Result<HashMap<_, _>>>()?;
        Ok(CollModule { funcs })
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
        let k = self
            .funcs
            .get(name)
            .ok_or_else(|| CollError::invalid(format!("kernel `{name}` was not loaded")))?;
        if grid == 0 || block == 0 || grid > crate::layout::MAX_BLOCKS {
            return Err(CollError::invalid(format!(
                "launch of `{name}` with grid {grid} block {block} (grid must be 1..={})",
                crate::layout::MAX_BLOCKS
            )));
        }
        // SAFETY: forwarded contract (see # Safety).
        let r = unsafe { k.launch_block(stream, LaunchConfig::linear(grid, block), args, pdl) };
        r.map_err(|e| match e {
            commhal_cuda_rt::CudaError::Driver {
                call,
                code,
                name,
                what,
            } if pdl => commhal_cuda_rt::CudaError::Driver {
                call,
                code,
                name,
                what: format!("{what}; COMMHAL_COLL_PDL=0 turns programmatic dependent launch off"),
            }
            .into(),
            e => e.into(),
        })
    }
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
