//! # commhal-algorithms — collectives as plans
//!
//! * [`dtype`]: element types, reduction ops, the byte-slice reduce kernel ([`reduce_into`]).
//! * [`fp8`]: FP8 E4M3FN / E5M2 conversions.
//! * [`plan`]: the plan IR — per rank, per block, a list of channel ops on chunks of the
//!   input, output and scratch buffers, parametric in message size. JSON with a schema version.
//! * [`validate`]: static checks plus a deadlock check by symbolic execution.
//! * [`sched`]: the symbolic scheduler shared by the validator and the simulator.
//! * [`sim`]: a single-process reference interpreter of plans on `Vec<u8>` buffers.
//! * [`builders`]: plan builders for every collective and algorithm.
//! * [`selector`]: picks an algorithm from thresholds kept as TOML data.
//! * [`codegen`]: plans → CUDA C++ (run by `commhal-cuda-coll` through NVRTC).
//! * [`exec`]: the host-emu executor — runs any valid plan on host threads over shared memory.
//! * [`comm`]: the user API, [`comm::Communicator`]: collectives, send/recv, registered buffers.
#![warn(missing_docs)]

pub mod builders;
pub mod codegen;
pub mod comm;
pub mod dtype;
pub mod error;
pub mod exec;
pub mod fp8;
#[doc(hidden)]
pub mod fuzzing;
pub mod plan;
pub mod sched;
pub mod selector;
pub mod sim;
pub mod validate;

/// The README's Rust example, compiled as a doctest of this crate so it keeps building.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeExample;

pub use dtype::{DataType, RedOp, finalize, finalize_avg, reduce_into, reference_reduce};
pub use error::{AlgoError, Location};
pub use plan::{
    Block, BufferKind, BufferSpec, ChannelKind, ChunkRef, Collective, Op, PacketFormat, Plan,
    RankPlan, SCHEMA_VERSION, ScratchWriter,
};
