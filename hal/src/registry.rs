//! Backend discovery and selection.
//!
//! Built-in backends register a [`BackendDescriptor`] with `inventory::submit!`; the
//! `commhal-backends` crate names every enabled backend crate so the linker keeps the
//! registration. Out-of-tree backends come from [`crate::plugin`] and appear here as
//! descriptors too, so selection treats both alike.

use std::fmt;
use std::sync::Arc;

use serde::Serialize;

use crate::dynamic::{DynMemoryMapped, DynPortMapped, DynSwitchMapped};
use crate::error::Result;
use crate::guarantees::Guarantees;
use crate::transport::TransportKinds;

/// Whether a backend can run here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", content = "reason", rename_all = "kebab-case")]
pub enum Availability {
    /// Ready to use.
    Available,
    /// Not usable on this machine, and why (no driver, no device, disabled by policy).
    Unavailable(String),
}

impl Availability {
    /// True for [`Availability::Available`].
    pub fn is_available(&self) -> bool {
        matches!(self, Availability::Available)
    }
}

/// A constructed backend: the transports it provides, as object-safe handles.
#[derive(Clone, Default)]
pub struct Backend {
    /// Backend name.
    pub name: String,
    /// Its memory-mapped transport, if any.
    pub memory: Option<Arc<dyn DynMemoryMapped>>,
    /// Its port-mapped transport, if any.
    pub port: Option<Arc<dyn DynPortMapped>>,
    /// Its switch-mapped transport, if any.
    pub switch: Option<Arc<dyn DynSwitchMapped>>,
}

impl fmt::Debug for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Backend")
            .field("name", &self.name)
            .field("memory", &self.memory.is_some())
            .field("port", &self.port.is_some())
            .field("switch", &self.switch.is_some())
            .finish()
    }
}

/// Options handed to a backend's constructor (a `[backend.NAME]` table of the
/// `COMMHAL_CONFIG` TOML file, or empty).
pub type BackendOptions = toml::Table;

/// How a built-in backend introduces itself. Submit one with
/// `inventory::submit! { BackendDescriptor { .. } }`.
#[derive(Clone, Copy)]
pub struct BackendDescriptor {
    /// Unique name (`host-emu`, `cuda-nvlink`, ...).
    pub name: &'static str,
    /// One line for `commhal info`.
    pub description: &'static str,
    /// Which transport kinds it provides.
    pub kinds: TransportKinds,
    /// What it promises (static: the same on every machine where it is available).
    pub guarantees: fn() -> Guarantees,
    /// Cheap check whether it can run here; must not panic and must not touch devices
    /// in ways that have side effects.
    pub probe: fn() -> Availability,
    /// Build it. Called only after `probe` said available.
    pub create: fn(&BackendOptions) -> Result<Backend>,
}

impl fmt::Debug for BackendDescriptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BackendDescriptor")
            .field("name", &self.name)
            .field("kinds", &self.kinds)
            .finish()
    }
}

inventory::collect!(BackendDescriptor);

/// Every built-in backend linked into this binary, sorted by name.
pub fn builtin() -> Vec<&'static BackendDescriptor> {
    let mut v: Vec<_> = inventory::iter::<BackendDescriptor>.into_iter().collect();
    v.sort_by_key(|d| d.name);
    v
}
