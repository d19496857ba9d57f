//! # commhal-hal — the vocabulary every commhal crate speaks
//!
//! * [`transport`]: the trait family [`Transport`], [`MemoryMapped`], [`PortMapped`],
//!   [`SwitchMapped`] with associated types for hot paths, and [`dynamic`] holds their
//!   object-safe mirrors for run-time selection (as wgpu-hal's `DynDevice`).
//! * [`guarantees`]: what a backend promises; the conformance suite asserts each claim.
//! * [`memory`]: registered memory, its exportable form, and peer mappings.
//! * [`topology`]: ranks, devices, endpoints and reach.
//! * [`bootstrap`]: out-of-band exchange between ranks (TCP and in-process).
//! * [`registry`]: built-in backend discovery (inventory) and selection by config.
//! * [`settings`]: every environment variable and tuning key, declared once.
//! * [`plugin`]: out-of-tree backends loaded from a versioned C table (libloading).
//! * [`error`]: the error every API returns.
#![warn(missing_docs)]

pub mod abort;
pub mod bootstrap;
pub mod dynamic;
pub mod error;
#[doc(hidden)]
pub mod fuzzing;
pub mod guarantees;
pub mod memory;
pub mod plugin;
pub mod registry;
pub mod settings;
pub mod topology;
pub mod transport;

pub use abort::{AbortFlag, AbortReason};
pub use error::{HalError, Result};
pub use guarantees::{FlushMeaning, Guarantees, SignalStrength};
pub use memory::{
    DmaBufExport, DmaBufRange, Export, MemoryKind, MemoryOwner, Region, Registrable, StagedAccess,
};
pub use topology::{Device, DeviceKind, Endpoint, Rank, Reach};
pub use transport::{
    MemoryMapped, Port, PortMapped, SwitchGroup, SwitchMapped, Transport, TransportKinds,
};
