//! Which module holds the kernel of a (collective kernel, type, op), and compiling the
//! per-(type, op) modules on first use.
//!
//! # Instantiation scheme
//! * The main module: `coll_nvlink.cu` as it is ([`COLL_NVLINK`]): every data-moving
//!   kernel, and the reducing kernels for **sum** on f16 / bf16 / f32 (the `_f16` /
//!   `_bf16` / `_f32` entry points, the hot path: native f16x2 / bf16x2 / f32 adds,
//!   no op switch). Compiled (or read from the disk cache) in [`Kernels::new`].
//! * Every other (type, op): the same source compiled with
//!   `-DCOLL_RED_T=Ty_<type> -DCOLL_RED_OP=<code>` ([`typed_options`]), which defines
//!   only the reducing kernels ([`COLL_NVLINK_TYPED`], no type suffix) for that one
//!   pair. Compiled on first use (or by [`Kernels::prepare`]) and kept for the
//!   communicator's lifetime; the disk cache ([`KernelCache`]) keys on the options, so
//!   each pair is compiled once per machine and NVRTC version.
//!
//! Why one module per (type, op) and not one per type with the op a template
//! parameter: NVRTC 13.0 times measured on this 2-core machine (no GPU): the main unit
//! ~4 s as PTX (the existing sm_90 CUBIN test of all units: ~25 s); one (type, op)
//! module as PTX 1.4 - 2.8 s, as an sm_90 CUBIN 6 - 14 s, fp8 12 - 30 s (its software
//! conversions are out of line: inlined into every lane, one fp8 module took 61 s even
//! as PTX). A module per type holds 6 x 16 kernels: about 6x those times on the first
//! use of any op of the type (minutes for fp8), while a first launch that compiles
//! stalls its peers' bounded waits. Per (type, op) costs at most 66 small modules over
//! all pairs, only those used are built, each cached on disk after its first build.
//! (tests/nvrtc_typed.rs builds 12 of them, every type and every op, two at a time:
//! 73 s here.)
//!
//! A launch compiling a module stalls that rank for the compile time while its peers
//! may already wait in the kernel (bounded by the device timeout): call
//! [`Kernels::prepare`] (through [`crate::Comm::kernels`]) on every rank before the
//! first launch of a new (type, op) to compile outside any collective.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use commhal_algorithms::dtype::{DataType, RedOp};
use commhal_cuda_rt::{Context, KernelCache, Stream, jit};
use commhal_device_src::{COLL_NVLINK, COLL_NVLINK_TYPED};

use crate::comm::{Kernel, kernel_name};
use crate::driver::CollModule;
use crate::error::{CollError, Result};
use crate::layout::CollArgs;
use crate::types::Dtype;

/// A reduction operator of the NVLink kernels: the host's [`RedOp`] plus NCCL's
/// pre-multiplied sum (every input element times `scalar`, rounded to the type, then
/// summed; the same scalar on every rank).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ReduceOp {
    /// Sum (integers wrap).
    Sum,
    /// Product (integers wrap).
    Prod,
    /// Minimum (a NaN operand loses).
    Min,
    /// Maximum (a NaN operand loses).
    Max,
    /// Sum divided by the rank count (integers: truncating division of the wrapped sum).
    Avg,
    /// Sum of `input x scalar` (the scalar rounded to the element type).
    PreMulSum(f64),
}

impl ReduceOp {
    /// The `COLL_OP_*` code (`CollArgs::red_op`, `-DCOLL_RED_OP`).
    pub fn code(self) -> u32 {
        match self {
            ReduceOp::Sum => 0,
            ReduceOp::Prod => 1,
            ReduceOp::Min => 2,
            ReduceOp::Max => 3,
            ReduceOp::Avg => 4,
            ReduceOp::PreMulSum(_) => 5,
        }
    }
    /// The unit's name of [`ReduceOp::code`].
    pub fn define(self) -> &'static str {
        match self {
            ReduceOp::Sum => "COLL_OP_SUM",
            ReduceOp::Prod => "COLL_OP_PROD",
            ReduceOp::Min => "COLL_OP_MIN",
            ReduceOp::Max => "COLL_OP_MAX",
            ReduceOp::Avg => "COLL_OP_AVG",
            ReduceOp::PreMulSum(_) => "COLL_OP_PREMULSUM",
        }
    }
    /// Name (nccl-tests' `-o`).
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Min => "min",
            ReduceOp::Max => "max",
            ReduceOp::Avg => "avg",
            ReduceOp::PreMulSum(_) => "premulsum",
        }
    }
    /// The host reference's operator of the reduction steps (premulsum sums).
    pub fn red_op(self) -> RedOp {
        match self {
            ReduceOp::Sum | ReduceOp::PreMulSum(_) => RedOp::Sum,
            ReduceOp::Prod => RedOp::Prod,
            ReduceOp::Min => RedOp::Min,
            ReduceOp::Max => RedOp::Max,
            ReduceOp::Avg => RedOp::Avg,
        }
    }
    /// `CollArgs::scalar` for `dtype`: the premulsum scalar encoded as one element
    /// (rounded / saturated / wrapped as [`DataType::encode`]) in the low bytes; 0 for
    /// the other ops.
    pub fn scalar_bits(self, dtype: DataType) -> u64 {
        let ReduceOp::PreMulSum(s) = self else {
            return 0;
        };
        let mut b = Vec::with_capacity(8);
        dtype.encode(s, &mut b);
        b.resize(8, 0);
        u64::from_ne_bytes(b.try_into().unwrap_or_default())
    }
    /// Whether the main module has it (sum on f16 / bf16 / f32).
    pub fn is_builtin(self, dtype: DataType) -> bool {
        builtin_code(dtype, self.code())
    }
}

/// Whether op code `code` on `dtype` is one of the main module's sums.
fn builtin_code(dtype: DataType, code: u32) -> bool {
    code == ReduceOp::Sum.code() && matches!(dtype, DataType::F16 | DataType::Bf16 | DataType::F32)
}

/// Every operator, with premulsum's scalar `scalar` (for tests and tables).
pub fn all_ops(scalar: f64) -> [ReduceOp; 6] {
    [
        ReduceOp::Sum,
        ReduceOp::Prod,
        ReduceOp::Min,
        ReduceOp::Max,
        ReduceOp::Avg,
        ReduceOp::PreMulSum(scalar),
    ]
}

/// The NVRTC options (besides the defaults) of the (type, op) module.
pub fn typed_options(dtype: DataType, op: ReduceOp) -> Vec<String> {
    options_for(dtype, op.code())
}

/// Registers per thread the (type, op) modules may use: the bulk kernels launch with
/// 512 threads per block and an SM has 65536 registers, so more than 128 fails the
/// launch (`CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES`). Unbounded, the fp8 two-shot
/// all-reduce and reduce-scatter and the int8 LL63 reduce went over it on H100.
pub const TYPED_MAX_REGISTERS: u32 = 128;

fn options_for(dtype: DataType, code: u32) -> Vec<String> {
    vec![
        format!("-DCOLL_RED_T=Ty_{}", dtype.name()),
        format!("-DCOLL_RED_OP={code}"),
        format!("--maxrregcount={TYPED_MAX_REGISTERS}"),
    ]
}

/// The module a launch uses: the main one or a per-(type, op) one.
#[derive(Debug, Clone)]
pub enum ModuleRef<'a> {
    /// The main module.
    Main(&'a CollModule),
    /// A per-(type, op) module.
    Typed(Arc<CollModule>),
}

impl std::ops::Deref for ModuleRef<'_> {
    type Target = CollModule;
    fn deref(&self) -> &CollModule {
        match self {
            ModuleRef::Main(m) => m,
            ModuleRef::Typed(m) => m,
        }
    }
}

/// The main module and the per-(type, op) modules compiled so far (see the module
/// docs). Dereferences to the main module.
#[derive(Debug)]
pub struct Kernels {
    ctx: Arc<Context>,
    arch: String,
    main: CollModule,
    typed: Mutex<HashMap<(DataType, u32), Arc<CollModule>>>,
}

impl std::ops::Deref for Kernels {
    type Target = CollModule;
    fn deref(&self) -> &CollModule {
        &self.main
    }
}

impl Kernels {
    /// Compile (or read from the disk cache, [`KernelCache::from_env`]) and load the
    /// main module for `ctx`'s device.
    pub fn new(ctx: &Arc<Context>) -> Result<Kernels> {
        let arch = ctx.arch()?;
        let cache = KernelCache::from_env();
        let (image, _) = jit::compile_unit(&COLL_NVLINK, &arch, cache.as_ref())?;
        let main = CollModule::load(ctx, &image, COLL_NVLINK.kernels)?;
        Ok(Kernels {
            ctx: ctx.clone(),
            arch,
            main,
            typed: Mutex::new(HashMap::new()),
        })
    }

    /// The module holding the reducing kernels of (`dtype`, `op`), compiled and loaded
    /// now if this is its first use.
    pub fn module(&self, dtype: DataType, op: ReduceOp) -> Result<ModuleRef<'_>> {
        self.module_of(dtype, op.code())
    }

    /// [`Kernels::module`] by op code (`CollArgs::red_op`).
    fn module_of(&self, dtype: DataType, code: u32) -> Result<ModuleRef<'_>> {
        if builtin_code(dtype, code) {
            return Ok(ModuleRef::Main(&self.main));
        }
        if code > ReduceOp::PreMulSum(0.0).code() {
            return Err(CollError::invalid(format!(
                "op code {code} is not a COLL_OP_* code (0..=5): set CollArgs::red_op from ReduceOp::code"
            )));
        }
        let key = (dtype, code);
        let mut typed = self
            .typed
            .lock()
            .map_err(|_| CollError::invalid("kernel module table poisoned by a panic"))?;
        if let Some(m) = typed.get(&key) {
            return Ok(ModuleRef::Typed(m.clone()));
        }
        let cache = KernelCache::from_env();
        let t = std::time::Instant::now();
        let options = options_for(dtype, code);
        let (image, outcome) =
            jit::compile_unit_with(&COLL_NVLINK, &self.arch, &options, cache.as_ref())?;
        tracing::debug!(
            "coll_nvlink.cu for ({dtype}, op {code}) on {}: {outcome:?} in {:.1} s",
            self.arch,
            t.elapsed().as_secs_f64()
        );
        let m = Arc::new(CollModule::load(&self.ctx, &image, COLL_NVLINK_TYPED)?);
        typed.insert(key, m.clone());
        Ok(ModuleRef::Typed(m))
    }

    /// Compile and load (`dtype`, `op`)'s module now, outside any collective (see the
    /// module docs).
    pub fn prepare(&self, dtype: Dtype, op: ReduceOp) -> Result<()> {
        self.module(dtype.data_type(), op).map(|_| ())
    }

    /// The module and entry point of kernel `k` for (`dtype`, `op`). Kernels that do
    /// not reduce are in the main module whatever the op.
    pub fn function(
        &self,
        k: Kernel,
        dtype: Dtype,
        op: ReduceOp,
    ) -> Result<(ModuleRef<'_>, &'static str)> {
        let name = kernel_name(k, dtype);
        if self.main_has(name) && (op.is_builtin(dtype.data_type()) || !reduces(name)) {
            return Ok((ModuleRef::Main(&self.main), name));
        }
        Ok((self.module(dtype.data_type(), op)?, unsuffixed(name)))
    }

    fn main_has(&self, name: &str) -> bool {
        COLL_NVLINK.kernels.contains(&name)
    }

    /// Queue kernel `name` (from [`kernel_name`]) for (`dtype`, `op`): from the main
    /// module when it is there (every data-moving kernel; the reducing ones for sum on
    /// f16 / bf16 / f32), else from the (type, op) module. Sets `CollArgs::scalar` and
    /// `CollArgs::red_op` from `op`.
    ///
    /// # Safety
    /// As [`CollModule::launch`].
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn launch_op(
        &self,
        dtype: Dtype,
        op: ReduceOp,
        name: &str,
        stream: &Stream,
        grid: u32,
        block: u32,
        args: &CollArgs,
        pdl: bool,
    ) -> Result<()> {
        let mut a = *args;
        a.scalar = op.scalar_bits(dtype.data_type());
        a.red_op = op.code();
        // SAFETY: the caller's contract (# Safety).
        unsafe { self.launch_args(dtype, name, stream, grid, block, &a, pdl) }
    }

    /// [`Kernels::launch_op`] with the op already in `args` (`red_op`, `scalar`: what
    /// `Comm::launch_rooted` set), for routes that get only the arguments (the
    /// copy-engine path's local reductions, [`crate::dma`]).
    ///
    /// # Safety
    /// As [`CollModule::launch`].
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn launch_args(
        &self,
        dtype: Dtype,
        name: &str,
        stream: &Stream,
        grid: u32,
        block: u32,
        args: &CollArgs,
        pdl: bool,
    ) -> Result<()> {
        let a = *args;
        if a.launch_slots != 0 && grid > a.launch_slots {
            return Err(CollError::invalid(format!(
                "kernel `{name}` on {grid} blocks: more than max_blocks ({}), the block slots every launch numbers (COMMHAL_COLL_MAX_BLOCKS)",
                a.launch_slots
            )));
        }
        let code = a.red_op;
        if self.main_has(name) && (builtin_code(dtype.data_type(), code) || !reduces(name)) {
            // SAFETY: the caller's contract (# Safety).
            return unsafe { self.main.launch(name, stream, grid, block, &a, pdl) };
        }
        let name = unsuffixed(name);
        if !COLL_NVLINK_TYPED.contains(&name) {
            return Err(CollError::invalid(format!(
                "kernel `{name}` has no ({}, op {code}) instantiation: only the reducing kernels ({}) are built per (type, op)",
                dtype.name(),
                COLL_NVLINK_TYPED.join(", ")
            )));
        }
        let m = self.module_of(dtype.data_type(), code)?;
        // SAFETY: the caller's contract (# Safety).
        unsafe { m.launch(name, stream, grid, block, &a, pdl) }
    }
}

/// Whether main-module kernel `name` reduces (has a type suffix).
fn reduces(name: &str) -> bool {
    unsuffixed(name).len() < name.len()
}

/// `name` without its `_f16` / `_bf16` / `_f32` suffix: the per-(type, op) entry point.
fn unsuffixed(name: &str) -> &str {
    ["_f16", "_bf16", "_f32"]
        .iter()
        .find_map(|s| name.strip_suffix(s))
        .unwrap_or(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reducing_kernel_has_a_typed_entry_point() {
        for k in COLL_NVLINK.kernels {
            if reduces(k) {
                assert!(COLL_NVLINK_TYPED.contains(&unsuffixed(k)), "{k}");
            }
        }
        assert_eq!(
            unsuffixed("commhal_coll_allgather_ring"),
            "commhal_coll_allgather_ring"
        );
    }

    #[test]
    fn builtin_pairs_are_the_main_modules_sums() {
        for d in Dtype::ALL {
            for op in all_ops(2.0) {
                let builtin = op.is_builtin(d.data_type());
                assert_eq!(
                    builtin,
                    op == ReduceOp::Sum && !d.suffix().is_empty(),
                    "{d:?} {op:?}"
                );
            }
        }
    }

    #[test]
    fn typed_options_name_the_units_types() {
        let src = commhal_device_src::coll_nvlink_text();
        for d in DataType::ALL {
            let o = typed_options(d, ReduceOp::Max);
            let ty = o[0].strip_prefix("-DCOLL_RED_T=").unwrap();
            assert!(
                src.contains(&format!(" {ty};")) || src.contains(&format!("struct {ty} {{")),
                "{ty} is not a type of coll_nvlink.cu"
            );
            assert_eq!(o[1], "-DCOLL_RED_OP=3");
        }
    }

    #[test]
    fn scalar_bits_encode_one_element() {
        assert_eq!(
            ReduceOp::PreMulSum(1.5).scalar_bits(DataType::F32),
            u64::from(1.5f32.to_bits())
        );
        assert_eq!(ReduceOp::PreMulSum(-1.0).scalar_bits(DataType::I8), 0xff);
        assert_eq!(ReduceOp::PreMulSum(2.0).scalar_bits(DataType::F16), 0x4000);
        assert_eq!(ReduceOp::Sum.scalar_bits(DataType::F64), 0);
    }
}
