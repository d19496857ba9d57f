//! # commhal-backend-host-emu — the CPU backend
//!
//! Runs the whole commhal stack on a CPU-only machine: sealed memfds mapped
//! `MAP_SHARED` stand in for device memory ([`memory`]), host threads for thread blocks.
#![warn(missing_docs)]

pub mod faults;
pub mod memory;
pub mod port;
mod register;
pub mod switch;
mod sys;
#[cfg(test)]
mod test_bootstrap;
pub mod transport;

pub use faults::Faults;
pub use memory::{ShmBuf, ShmMapping, ShmRegion};
pub use port::HostPort;
pub use switch::HostSwitchGroup;
pub use transport::{FIFO_DEPTH, HostEmu};

/// The backend's name, as in [`commhal_hal::Export::backend`] and the registry.
pub const BACKEND: &str = "host-emu";

/// Called by `commhal-backends` so the linker keeps this crate (and its registration).
pub fn link() {}
