//! The collectives and element types of the GPU communicator, as the kernels name them.
//!
//! With the `cli` feature (the benchmark and the command line turn it on) both are
//! `clap::ValueEnum`s, named and aliased as nccl-tests names them; the library itself
//! (what the NCCL drop-in loads) carries no command-line code.

use commhal_algorithms::dtype::DataType;

/// A collective the benchmark runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Collective {
    /// Sum all-reduce.
    Allreduce,
    /// All-gather (size = the whole output).
    Allgather,
    /// Sum reduce-scatter (size = the whole input).
    Reducescatter,
    /// Broadcast from `--root` (size = the buffer).
    Broadcast,
    /// Sum reduce to `--root` (size = the buffer).
    Reduce,
    /// All-to-all (size = the whole input = the whole output, n chunks).
    Alltoall,
    /// Send to rank (r+1) % n, receive from (r−1+n) % n (nccl-tests sendrecv_perf).
    Sendrecv,
}

impl Collective {
    /// Every collective, in declaration order.
    pub const ALL: [Collective; 7] = [
        Collective::Allreduce,
        Collective::Allgather,
        Collective::Reducescatter,
        Collective::Broadcast,
        Collective::Reduce,
        Collective::Alltoall,
        Collective::Sendrecv,
    ];

    /// Name as nccl-tests prints it.
    pub fn name(self) -> &'static str {
        match self {
            Collective::Allreduce => "allreduce",
            Collective::Allgather => "allgather",
            Collective::Reducescatter => "reducescatter",
            Collective::Broadcast => "broadcast",
            Collective::Reduce => "reduce",
            Collective::Alltoall => "alltoall",
            Collective::Sendrecv => "sendrecv",
        }
    }
    /// busbw = algbw × this (docs/performance.md): all-reduce 2(n−1)/n; all-gather,
    /// reduce-scatter, all-to-all (n−1)/n; broadcast, reduce, send/recv 1.
    pub fn busbw_factor(self, n: u32) -> f64 {
        let n = f64::from(n.max(1));
        match self {
            Collective::Allreduce => 2.0 * (n - 1.0) / n,
            Collective::Allgather | Collective::Reducescatter | Collective::Alltoall => {
                (n - 1.0) / n
            }
            Collective::Broadcast | Collective::Reduce | Collective::Sendrecv => 1.0,
        }
    }
    /// Whether the op column says `sum` (reductions) or `none`.
    pub fn redop(self) -> &'static str {
        match self {
            Collective::Allreduce | Collective::Reducescatter | Collective::Reduce => "sum",
            _ => "none",
        }
    }
    /// Whether it takes a root (the table's root column; `-1` otherwise).
    pub fn has_root(self) -> bool {
        matches!(self, Collective::Broadcast | Collective::Reduce)
    }
    /// Whether an in-place variant exists (all-to-all and send/recv: out of place
    /// only; the benchmark skips their in-place column).
    pub fn in_place_supported(self) -> bool {
        !matches!(self, Collective::Alltoall | Collective::Sendrecv)
    }
    /// Whether `count` handed to a launch is the per-rank chunk (all-gather,
    /// reduce-scatter, all-to-all) rather than the whole buffer.
    pub fn count_is_per_rank(self) -> bool {
        matches!(
            self,
            Collective::Allgather | Collective::Reducescatter | Collective::Alltoall
        )
    }
}

/// Element type (nccl-tests' `-d` names; the short names and nccl-tests' fp8 names
/// are aliases).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    /// Signed 8-bit integer.
    #[cfg_attr(feature = "cli", value(alias = "i8"))]
    Int8,
    /// Unsigned 8-bit integer.
    #[cfg_attr(feature = "cli", value(alias = "u8"))]
    Uint8,
    /// Signed 32-bit integer.
    #[cfg_attr(feature = "cli", value(alias = "i32", alias = "int"))]
    Int32,
    /// Unsigned 32-bit integer.
    #[cfg_attr(feature = "cli", value(alias = "u32"))]
    Uint32,
    /// Signed 64-bit integer.
    #[cfg_attr(feature = "cli", value(alias = "i64"))]
    Int64,
    /// Unsigned 64-bit integer.
    #[cfg_attr(feature = "cli", value(alias = "u64"))]
    Uint64,
    /// IEEE half.
    #[cfg_attr(feature = "cli", value(alias = "f16", alias = "fp16"))]
    Half,
    /// bfloat16.
    #[cfg_attr(feature = "cli", value(alias = "bf16"))]
    Bfloat16,
    /// IEEE single.
    #[cfg_attr(feature = "cli", value(alias = "f32", alias = "fp32"))]
    Float,
    /// IEEE double.
    #[cfg_attr(feature = "cli", value(alias = "f64", alias = "fp64"))]
    Double,
    /// OCP FP8 E4M3FN.
    #[cfg_attr(feature = "cli", value(name = "fp8_e4m3", alias = "f8e4m3"))]
    #[serde(rename = "fp8_e4m3")]
    Fp8E4m3,
    /// OCP FP8 E5M2.
    #[cfg_attr(feature = "cli", value(name = "fp8_e5m2", alias = "f8e5m2"))]
    #[serde(rename = "fp8_e5m2")]
    Fp8E5m2,
}

impl Dtype {
    /// Every type.
    pub const ALL: [Dtype; 12] = [
        Dtype::Int8,
        Dtype::Uint8,
        Dtype::Int32,
        Dtype::Uint32,
        Dtype::Int64,
        Dtype::Uint64,
        Dtype::Half,
        Dtype::Bfloat16,
        Dtype::Float,
        Dtype::Double,
        Dtype::Fp8E4m3,
        Dtype::Fp8E5m2,
    ];
    /// The host-side type (semantics: `commhal_algorithms::dtype`).
    pub fn data_type(self) -> DataType {
        match self {
            Dtype::Int8 => DataType::I8,
            Dtype::Uint8 => DataType::U8,
            Dtype::Int32 => DataType::I32,
            Dtype::Uint32 => DataType::U32,
            Dtype::Int64 => DataType::I64,
            Dtype::Uint64 => DataType::U64,
            Dtype::Half => DataType::F16,
            Dtype::Bfloat16 => DataType::Bf16,
            Dtype::Float => DataType::F32,
            Dtype::Double => DataType::F64,
            Dtype::Fp8E4m3 => DataType::F8E4M3,
            Dtype::Fp8E5m2 => DataType::F8E5M2,
        }
    }
    /// Bytes per element.
    pub fn size(self) -> u64 {
        self.data_type().size() as u64
    }
    /// Kernel-name suffix of the unit's own instantiations (the one `typed_kernel!`
    /// appends): `f16`, `bf16`, `f32`; `""` for the other types, whose kernels live in
    /// the per-(type, op) modules without a suffix ([`crate::kernels`]).
    pub fn suffix(self) -> &'static str {
        match self {
            Dtype::Half => "f16",
            Dtype::Bfloat16 => "bf16",
            Dtype::Float => "f32",
            _ => "",
        }
    }
    /// Name in the table (nccl-tests').
    pub fn name(self) -> &'static str {
        match self {
            Dtype::Int8 => "int8",
            Dtype::Uint8 => "uint8",
            Dtype::Int32 => "int32",
            Dtype::Uint32 => "uint32",
            Dtype::Int64 => "int64",
            Dtype::Uint64 => "uint64",
            Dtype::Half => "half",
            Dtype::Bfloat16 => "bfloat16",
            Dtype::Float => "float",
            Dtype::Double => "double",
            Dtype::Fp8E4m3 => "fp8_e4m3",
            Dtype::Fp8E5m2 => "fp8_e5m2",
        }
    }
    /// Name as nccl-tests prints it in its tables (`f8e4m3` / `f8e5m2` for the fp8
    /// types, otherwise [`Dtype::name`]).
    pub fn table_name(self) -> &'static str {
        match self {
            Dtype::Fp8E4m3 => "f8e4m3",
            Dtype::Fp8E5m2 => "f8e5m2",
            d => d.name(),
        }
    }
    /// Bit pattern of the integer `v` (-256 ≤ v ≤ 256: exact in half, bfloat16, float,
    /// double and the integer types; fp8 rounds, as [`DataType::encode`]).
    pub fn encode_int(self, v: i32) -> u64 {
        let mut b = Vec::with_capacity(8);
        self.data_type().encode(f64::from(v), &mut b);
        b.resize(8, 0);
        u64::from_le_bytes(b.try_into().unwrap_or_default())
    }
}

/// The entry point of `$base`'s instantiation for `$dtype`: `$base` + `_f16` / `_bf16` /
/// `_f32` ([`Dtype::suffix`]) for the unit's own kernels, `$base` alone for the other
/// types (the per-(type, op) modules, [`crate::kernels`]); a `&'static str` built at
/// compile time (launches are hot: no allocation). The one place a dtype picks a
/// kernel name.
macro_rules! typed_kernel {
    ($dtype:expr, $base:literal) => {
        match $dtype {
            $crate::types::Dtype::Half => concat!($base, "_f16"),
            $crate::types::Dtype::Bfloat16 => concat!($base, "_bf16"),
            $crate::types::Dtype::Float => concat!($base, "_f32"),
            _ => $base,
        }
    };
}
pub(crate) use typed_kernel;
