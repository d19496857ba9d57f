//! # commhal-cuda-coll — GPU collectives over NVLink peer mappings
//!
//! One process per GPU; every rank maps every peer's input, output and scratch (regions
//! of the memory backend the HAL selects, cuda-nvlink by default: [`regions`]), and
//! hand-written kernels
//! (`device-src/kernels/coll_nvlink.cu`) move data with direct loads and stores:
//!
//! * all-reduce ≤ `ll_max`: one-shot LL16 (packets carry data and the launch epoch;
//!   no barrier, double-buffered slots);
//! * all-reduce above: two-shot (reduce own 1/n chunk reading every input, store it to
//!   every output) between two per-block flag barriers;
//! * all-reduce from `push_min`: push (stores into the owners' staging, local reduce,
//!   stores of the result);
//! * all-gather: LL or direct stores into every output; reduce-scatter: LL, direct
//!   loads, or push in a tuned size window; broadcast: LL, direct, or (≥ 3 ranks) pull
//!   and forward; reduce: LL or the non-roots pulling; all-to-all, send/recv: LL or
//!   direct stores.
//!
//! Kernels launch with programmatic dependent launch on sm_90+ (`COMMHAL_COLL_PDL`).
//! `COMMHAL_GPU_PATH=dma`, or `COMMHAL_BACKENDS=cuda-dma` alone, moves every collective
//! onto the copy engines instead ([`dma`], through cuda-dma's `StreamPort`);
//! `COMMHAL_BACKENDS=cuda-nvlink` alone keeps every collective on the kernels
//! ([`regions`] maps the selection to the routes).
//!
//! | module | holds |
//! |---|---|
//! | [`layout`] | scratch layout and the kernel argument block shared with the unit |
//! | [`comm`] | [`Comm`]: setup, buffer exchange, kernel choice, launch, bounded sync; the caller's buffers and stream ([`Comm::launch_on`]) |
//! | [`agree`] | the call table: per-call agreement on buffers and signatures in host shared memory |
//! | [`watchdog`] | the thread that stops device waits when the bootstrap sees a peer die |
//! | [`regions`] | the links from the HAL's selection (`COMMHAL_BACKENDS`, default cuda-nvlink + cuda-dma) and the routes they allow; the shared regions: a memory backend's alloc, export, map, or cuda-dma's register, export, import |
//! | [`peers`] | call-table entries, the process-wide cache of peers' opened allocations |
//! | [`piece_link`] | a socket per pair of ranks that carries the pieces (and fds) of cuMem VMM buffers |
//! | [`driver`] | [`driver::CollModule`]: a unit's kernels launched with by-value arguments; the bounded stream wait (every driver call is in `commhal-cuda-rt`) |
//! | [`dma`] | the copy-engine path: cuda-dma `StreamPort` puts and signals on per-peer streams, flag handshakes |
//! | [`plan_exec`] | plans on GPUs: generated kernels (NVRTC), plan area, launch |
//! | [`nccl_lib`] | NCCL's C API as a table of functions opened from a library (the comparison's and commhal-nccl's fallback's) |
//! | [`setup`] | a process's bootstrap from the launcher's environment, and its GPU |
//! | [`tuning`] | thresholds as data (`algorithms/tuning/gpu-cuda-*.toml`), overrides |
//! | [`types`] | [`types::Collective`] and [`types::Dtype`]: the collectives and element types as the kernels name them |
//!
//! The benchmark (`commhal-gpu-bench`, `commhal bench --backend cuda-nvlink`), its
//! checks, the comparison with NCCL or MSCCL++ and the tuner live in the tools crate
//! `commhal-gpu-bench` (`tools/gpu-bench`).
#![warn(missing_docs)]

pub mod agree;
pub mod comm;
pub mod dma;
pub mod driver;
pub mod error;
#[doc(hidden)]
pub mod fuzzing;
pub mod gpu_proxy;
pub mod kernels;
pub mod layout;
pub mod nccl_lib;
#[doc(hidden)]
pub mod nccl_stub;
pub mod peers;
pub mod piece_link;
pub mod plan_exec;
mod plan_grid;
pub mod plan_ports;
pub mod regions;
pub mod setup;
pub mod tuning;
pub mod types;
pub mod watchdog;

pub use comm::{BufferPath, CallBufs, Comm, P2pOp, Registration};

/// The example of `docs/gpu-communicator.md`, compiled as a doctest so it keeps building.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/gpu-communicator.md")]
struct GpuCommunicatorDoc;
pub use error::{CollError, Result};
