//! # commhal-backend-host-emu — the CPU backend
//!
//! Runs the whole commhal stack on a CPU-only machine: sealed memfds mapped
//! `MAP_SHARED` stand in for device memory, host threads for thread blocks.
//!
//! | module | holds |
//! |---|---|
//! | [`memory`] | [`ShmRegion`] (local allocation), [`ShmMapping`] (a peer's, mapped here), [`ShmBuf`] (bounds-checked bytes + semaphore atomics), the export format |
//! | [`transport`] | [`HostEmu`]: `Transport` (name, [`HostEmu::GUARANTEES`], reach) and `MemoryMapped` |
//! | [`port`] | `PortMapped for HostEmu` and [`HostPort`] (proxy-side memcpy + release add) |
//! | [`switch`] | `SwitchMapped for HostEmu` and [`HostSwitchGroup`] (emulated multicast) |
//! | [`faults`] | **test-only** [`Faults`] that break the guarantees on purpose |
//! | `sys` | every `unsafe` line: memfd, mmap/munmap, raw copies, atomics |
//! | `register` | the `inventory` registration (`host-emu`: memory + port + switch) |
//! | [`tcp`] | [`HostTcp`], the `host-tcp` backend: a TCP port transport across hosts and virtual nodes (registered separately, port only) |
//!
//! **Memory model.** Plain copies into shared memory are the emulated device's loads
//! and stores; ordering comes only from the 64-bit semaphore atomics (release on the
//! signalling side, acquire on the waiting side), as on a GPU. Who may touch which
//! bytes when is the caller's job.
//!
//! **Reach.** Host devices on the same host and virtual node: cost 10 in one process,
//! 20 across processes. Peers in other processes need the export's memfd passed with
//! `SCM_RIGHTS` (the bootstrap's job; see `tests/cross_process.rs` for the mechanism).
#![warn(missing_docs)]

pub mod faults;
#[doc(hidden)]
pub mod fuzzing;
pub mod memory;
pub mod port;
mod register;
pub mod switch;
mod sys;
pub mod tcp;
#[cfg(test)]
mod test_bootstrap;
pub mod transport;

pub use faults::Faults;
pub use memory::{ShmBuf, ShmMapping, ShmRegion};
pub use port::HostPort;
pub use switch::HostSwitchGroup;
pub use tcp::{HostRegion, HostTcp, TcpLocal, TcpPort, TcpRemote};
pub use transport::{FIFO_DEPTH, HostEmu};

/// The backend's name, as in [`commhal_hal::Export::backend`] and the registry.
pub const BACKEND: &str = "host-emu";

/// Called by `commhal-backends` so the linker keeps this crate (and its registration).
pub fn link() {}
