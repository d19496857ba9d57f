//! # commhal-cuda-rt — shared CUDA plumbing for the cuda-* backends
//!
//! Built on cudarc's `sys` layer (loaded at run time, so this crate builds and runs
//! on machines without CUDA). Every driver/NVRTC call's result is checked and turned
//! into a [`CudaError`] naming the call and what we were doing; nothing panics when
//! the driver or NVRTC is missing.
//!
//! | module | holds |
//! |---|---|
//! | [`probe`](mod@probe) | [`probe()`]: driver present → cuInit → device count; [`nvrtc_available`] |
//! | [`driver`] | loading/initialising the driver, `CUresult` checks |
//! | [`context`] | [`Context`]: a device's primary context |
//! | [`stream`] | [`Stream`], [`Event`] (elapsed time) |
//! | [`memory`] | [`DeviceBuffer`] (`cuMemAlloc`), [`PinnedHostBuffer`] (device-mapped host memory) |
//! | [`copy`] | copies and fills on raw device addresses: queued on a stream or synchronous |
//! | [`memop`] | stream memory operations: a stream writes or waits for a 32/64-bit word |
//! | [`gate`] | [`Gate`]: a stream wait the host releases (timed loops) |
//! | [`peer`] | peer access between devices (`cuDeviceCanAccessPeer`, `cuCtxEnablePeerAccess`) |
//! | [`graph`] | [`Graph`]: stream capture and replay |
//! | [`ipc`] | [`ipc::pointer_info`] (which allocation holds a caller's pointer), legacy CUDA IPC |
//! | [`vmm`] | [`VmmAllocation`]: cuMem VMM memory exported/imported as POSIX fds |
//! | [`pieces`] | a caller's VMM memory (PyTorch's expandable segments) piece by piece: found, exported, mapped back to back in a peer |
//! | [`dmabuf`] | device memory exported as a dma-buf fd (page-aligned range and offset) for RDMA registration |
//! | [`nvrtc`] | NVRTC compilation with in-memory headers, the on-disk [`KernelCache`] |
//! | [`module`] | [`Module`], [`Kernel`], [`LaunchConfig`], [`KernelArg`]; launches with a `#[repr(C)]` argument block by value |
//! | [`jit`] | compile/load the units of `commhal-device-src` |
#![warn(missing_docs)]

pub mod context;
pub mod copy;
pub mod dmabuf;
pub mod driver;
pub mod error;
pub mod gate;
pub mod graph;
pub mod ipc;
pub mod jit;
pub mod memop;
pub mod memory;
pub mod module;
pub mod nvrtc;
pub mod peer;
pub mod pieces;
pub mod probe;
pub mod staging;
pub mod stream;
pub mod vmm;

pub use context::Context;
pub use error::{CudaError, Result};
pub use gate::Gate;
pub use graph::Graph;
pub use memory::{DeviceBuffer, PinnedHostBuffer, PinnedRegion};
pub use module::{Kernel, KernelArg, LaunchConfig, Module};
pub use nvrtc::cache::{CacheOutcome, KernelCache};
pub use nvrtc::{CompileRequest, CompiledImage, ImageKind};
pub use probe::{nvrtc_available, probe};
pub use stream::{Event, Stream};
pub use vmm::VmmAllocation;
