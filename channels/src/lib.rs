//! # commhal-channels — the primitive layer (MSCCL++ semantics)
//!
//! * [`MemoryChannel`] — device threads copy straight into a peer's mapped memory.
//! * [`PortChannel`] — device code pushes triggers into a [`fifo::Fifo`]; a
//!   [`ProxyService`] thread performs them on a port.
//! * [`SwitchChannel`] — reduce/broadcast through a multicast group.
//! * [`semaphore`] — monotonic 64-bit counters: signal (release), wait (acquire),
//!   bounded by a [`WaitPolicy`].
//! * [`wait`] — spin, yield, then block ([`futex`] on the counter, or sleep), then
//!   time out: the one counter wait of the stack ([`WaitPolicy::wait_on`]).
//! * [`packet`] — LL8/LL16 packets (data + flag in one store), flag epochs.
//! * [`handles`] — the `#[repr(C)]` device handles; [`device`] executes the device
//!   functions on host threads (host-emu), cooperatively (`tid`, `nthreads`).
//!
//! Every wait is bounded (timeout → [`HalError::Timeout`](commhal_hal::HalError)); every
//! offset is checked before use; raw pointers live only in `raw.rs` and `futex.rs`.
//!
//! ## loom models
//!
//! The FIFO and the semaphore signal/wait are model-checked with loom:
//!
//! ```text
//! RUSTFLAGS="--cfg loom" cargo test -p commhal-channels --release --lib loom
//! ```
#![warn(missing_docs)]

pub mod counter;
#[cfg(not(loom))]
pub mod futex;
pub(crate) mod sync;

#[cfg(not(loom))]
mod raw;

#[cfg(not(loom))]
pub mod device;
pub mod fifo;
pub mod handles;
#[cfg(not(loom))]
pub mod memory_channel;
pub mod packet;
#[cfg(not(loom))]
pub mod port_channel;
#[cfg(not(loom))]
pub mod proxy;
#[cfg(not(loom))]
pub mod semaphore;
#[cfg(not(loom))]
pub mod switch_channel;
pub mod wait;

#[cfg(all(test, loom))]
mod loom_models;

#[cfg(not(loom))]
pub use device::{MemoryDevice, PortDevice};
pub use fifo::{Fifo, Trigger};
pub use handles::{MemoryChannelHandle, PortChannelHandle, SwitchChannelHandle};
#[cfg(not(loom))]
pub use memory_channel::MemoryChannel;
pub use packet::{LlFormat, PacketEpoch};
#[cfg(not(loom))]
pub use port_channel::PortChannel;
#[cfg(not(loom))]
pub use proxy::{
    DefaultHandler, ProxyBuilder, ProxyContext, ProxySemaphore, ProxyService, ProxyShared,
    TriggerHandler,
};
#[cfg(not(loom))]
pub use semaphore::{MemorySemaphore, SemaphoreDevice, SemaphoreSlot};
#[cfg(not(loom))]
pub use switch_channel::{Element, ReduceOp, SwitchChannel, SwitchDevice};
pub use wait::WaitPolicy;
