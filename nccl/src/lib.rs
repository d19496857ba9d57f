//! # commhal-nccl — NCCL's C API over commhal
//!
//! Builds `libcommhal_nccl.so`, which exports NCCL 2.28's functions with NCCL's
//! semantics and return codes (`include/commhal_nccl.h`), so anything that loads
//! `libnccl.so.2` can load commhal instead: PyTorch through `LD_PRELOAD`, vLLM's
//! pynccl through `dlopen`. Collectives and send/recv run on commhal's GPU
//! communicator ([`commhal_cuda_coll::Comm`]) on the caller's buffers and stream; what
//! it does not run goes to the real NCCL named by `COMMHAL_NCCL_FALLBACK` or fails with
//! `ncclInvalidUsage` and a message (see [`comm`] for the routing table).
//!
//! | module | holds |
//! |---|---|
//! | [`api`] | the exported C functions: pointer checks, handles, error codes |
//! | [`abi`] | NCCL's C types and constants; [`abi::NcclError`] |
//! | [`comm`] | [`comm::NcclComm`]: setup, split, routing of each call |
//! | [`group`] | `ncclGroupStart` / `ncclGroupEnd`: the per-thread queue |
//! | [`memory`] | `ncclMemAlloc`, registrations and windows |
//! | [`fallback`] | the real NCCL, opened at run time (the table of `commhal_cuda_coll::nccl_lib`) |
//! | [`nvrtc`] | finding NVRTC next to what the application loaded |
//! | [`profile`] | `COMMHAL_NCCL_PROFILE`: calls and host time per exported function |
//! | [`settings`] | the environment variables, read through their declarations in `commhal_hal::settings`; the debug log |
#![allow(non_snake_case)]

pub mod abi;
pub mod api;
pub mod comm;
pub mod fallback;
pub mod group;
pub mod memory;
pub mod nvrtc;
pub mod profile;
pub mod settings;
