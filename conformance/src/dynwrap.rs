//! Static-trait views of run-time-selected port and switch transports.
//!
//! `commhal-hal` makes `Arc<dyn DynMemoryMapped>` a [`MemoryMapped`] again, so
//! `MemoryChannel<Arc<dyn DynMemoryMapped>>` works; it has no such reverse impls for
//! ports and switches yet. These newtypes provide them, so the suite drives
//! `PortChannel<DynPortT>` / `SwitchChannel<DynSwitchT>` over whatever backend the
//! registry built. (They belong in `hal/src/dynamic.rs` eventually.)
//!
//! [`MemoryMapped`]: commhal_hal::MemoryMapped

use std::any::Any;
use std::sync::Arc;

use commhal_hal::bootstrap::Bootstrap;
use commhal_hal::dynamic::{DynPort, DynPortMapped, DynSwitchMapped};
use commhal_hal::transport::{PeerContext, Port, PortMapped, SwitchGroup, SwitchMapped, Transport};
use commhal_hal::{Endpoint, Export, Guarantees, Rank, Reach, Region, Result};

/// A run-time-selected port transport as a static [`PortMapped`].
#[derive(Debug, Clone)]
pub struct DynPortT(pub Arc<dyn DynPortMapped>);

/// A peer buffer imported by a [`DynPortT`].
#[derive(Debug)]
pub struct RemoteHandle(pub Box<dyn Any + Send + Sync>);

/// A connection of a [`DynPortT`].
#[derive(Debug)]
pub struct PortHandle(pub Box<dyn DynPort>);

impl Transport for DynPortT {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn guarantees(&self) -> Guarantees {
        self.0.guarantees()
    }
    fn reach(&self, local: &Endpoint, remote: &Endpoint) -> Reach {
        self.0.reach(local, remote)
    }
}

impl Port for PortHandle {
    type Local = Box<dyn Region>;
    type Remote = RemoteHandle;
    fn write(
        &mut self,
        dst: &RemoteHandle,
        dst_off: u64,
        src: &Box<dyn Region>,
        src_off: u64,
        len: u64,
    ) -> Result<()> {
        self.0.write(&*dst.0, dst_off, &**src, src_off, len)
    }
    fn signal(&mut self, sem: &RemoteHandle, off: u64, add: u64) -> Result<()> {
        self.0.signal(&*sem.0, off, add)
    }
    fn flush(&mut self) -> Result<()> {
        self.0.flush()
    }
}

impl PortMapped for DynPortT {
    type Local = Box<dyn Region>;
    type Remote = RemoteHandle;
    type Port = PortHandle;
    fn register(&self, region: &dyn Region) -> Result<Box<dyn Region>> {
        self.0.register(region)
    }
    fn export(&self, local: &Box<dyn Region>) -> Result<Export> {
        self.0.export(&**local)
    }
    fn import(&self, export: Export) -> Result<RemoteHandle> {
        Ok(RemoteHandle(self.0.import(export)?))
    }
    fn connect(&self, ctx: &PeerContext<'_>) -> Result<PortHandle> {
        Ok(PortHandle(self.0.connect(ctx)?))
    }
}

/// A run-time-selected switch transport as a static [`SwitchMapped`].
#[derive(Debug, Clone)]
pub struct DynSwitchT(pub Arc<dyn DynSwitchMapped>);

impl Transport for DynSwitchT {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn guarantees(&self) -> Guarantees {
        self.0.guarantees()
    }
    fn reach(&self, local: &Endpoint, remote: &Endpoint) -> Reach {
        self.0.reach(local, remote)
    }
}

impl SwitchMapped for DynSwitchT {
    type Group = Box<dyn SwitchGroup>;
    fn create_group(
        &self,
        bootstrap: &dyn Bootstrap,
        members: &[Rank],
        len: u64,
        tag: u64,
    ) -> Result<Box<dyn SwitchGroup>> {
        self.0.create_group(bootstrap, members, len, tag)
    }
}
