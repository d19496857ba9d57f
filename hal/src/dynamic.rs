//! Object-safe mirrors of the transport traits, for backends chosen at run time.
//!
//! Every `T: MemoryMapped` is a [`DynMemoryMapped`] through a blanket impl; handles
//! become `Box<dyn Region>` and are downcast back on the way in (a handle from another
//! backend is an error, never undefined behaviour). The reverse impls make
//! `Arc<dyn DynMemoryMapped>` a `MemoryMapped`, `Arc<dyn DynPortMapped>` a
//! `PortMapped` and `Arc<dyn DynSwitchMapped>` a `SwitchMapped` again, so generic code
//! such as `MemoryChannel<M>`, `PortChannel<P>` or `SwitchChannel<S>` runs over a
//! run-time-selected backend unchanged.

use std::any::Any;
use std::fmt::Debug;
use std::sync::Arc;

use crate::bootstrap::Bootstrap;
use crate::error::{HalError, Result};
use crate::guarantees::Guarantees;
use crate::memory::{Export, MemoryKind, Region};
use crate::topology::{Device, Endpoint, Rank, Reach};
use crate::transport::{
    MemoryMapped, PeerContext, Port, PortMapped, SwitchGroup, SwitchMapped, Transport,
};

impl Region for Box<dyn Region> {
    fn addr(&self) -> u64 {
        (**self).addr()
    }
    fn len(&self) -> u64 {
        (**self).len()
    }
    fn device(&self) -> Device {
        (**self).device()
    }
    fn kind(&self) -> MemoryKind {
        (**self).kind()
    }
    fn as_any(&self) -> &dyn Any {
        (**self).as_any()
    }
    fn registrable(&self) -> Option<crate::memory::Registrable> {
        (**self).registrable()
    }
    fn staged(&self) -> Option<Arc<dyn crate::memory::StagedAccess>> {
        (**self).staged()
    }
}

fn downcast<'a, T: 'static>(backend: &str, what: &str, any: &'a dyn Any) -> Result<&'a T> {
    any.downcast_ref::<T>().ok_or_else(|| {
        HalError::invalid(format!(
            "{what} was not created by backend `{backend}`: use handles of the backend you call"
        ))
    })
}

/// Object-safe [`MemoryMapped`].
pub trait DynMemoryMapped: Send + Sync + Debug {
    /// [`Transport::name`].
    fn name(&self) -> &str;
    /// [`Transport::guarantees`].
    fn guarantees(&self) -> Guarantees;
    /// [`Transport::reach`].
    fn reach(&self, local: &Endpoint, remote: &Endpoint) -> Reach;
    /// [`MemoryMapped::alloc`].
    fn alloc(&self, device: Device, len: u64) -> Result<Box<dyn Region>>;
    /// [`MemoryMapped::export`]; `mem` must come from this backend's `alloc`.
    fn export(&self, mem: &dyn Region) -> Result<Export>;
    /// [`MemoryMapped::map`].
    fn map(&self, export: Export) -> Result<Box<dyn Region>>;
}

impl<M: MemoryMapped> DynMemoryMapped for M {
    fn name(&self) -> &str {
        Transport::name(self)
    }
    fn guarantees(&self) -> Guarantees {
        Transport::guarantees(self)
    }
    fn reach(&self, local: &Endpoint, remote: &Endpoint) -> Reach {
        Transport::reach(self, local, remote)
    }
    fn alloc(&self, device: Device, len: u64) -> Result<Box<dyn Region>> {
        Ok(Box::new(MemoryMapped::alloc(self, device, len)?))
    }
    fn export(&self, mem: &dyn Region) -> Result<Export> {
        let mem = downcast::<M::Memory>(Transport::name(self), "memory", mem.as_any())?;
        MemoryMapped::export(self, mem)
    }
    fn map(&self, export: Export) -> Result<Box<dyn Region>> {
        Ok(Box::new(MemoryMapped::map(self, export)?))
    }
}

impl Transport for Arc<dyn DynMemoryMapped> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn guarantees(&self) -> Guarantees {
        (**self).guarantees()
    }
    fn reach(&self, local: &Endpoint, remote: &Endpoint) -> Reach {
        (**self).reach(local, remote)
    }
}

impl MemoryMapped for Arc<dyn DynMemoryMapped> {
    type Memory = Box<dyn Region>;
    type Mapping = Box<dyn Region>;
    fn alloc(&self, device: Device, len: u64) -> Result<Box<dyn Region>> {
        (**self).alloc(device, len)
    }
    fn export(&self, mem: &Box<dyn Region>) -> Result<Export> {
        (**self).export(mem.as_ref())
    }
    fn map(&self, export: Export) -> Result<Box<dyn Region>> {
        (**self).map(export)
    }
}

/// Object-safe [`Port`]: remote handles are `Box<dyn Any>`, local ones `Box<dyn Region>`.
pub trait DynPort: Send + Debug {
    /// [`Port::write`].
    fn write(
        &mut self,
        dst: &(dyn Any + Send + Sync),
        dst_off: u64,
        src: &dyn Region,
        src_off: u64,
        len: u64,
    ) -> Result<()>;
    /// [`Port::read`].
    fn read(
        &mut self,
        dst: &dyn Region,
        dst_off: u64,
        src: &(dyn Any + Send + Sync),
        src_off: u64,
        len: u64,
    ) -> Result<()>;
    /// [`Port::signal`].
    fn signal(&mut self, sem: &(dyn Any + Send + Sync), off: u64, add: u64) -> Result<()>;
    /// [`Port::write_signal`]; the default makes the two calls.
    fn write_signal(
        &mut self,
        dst: &(dyn Any + Send + Sync),
        dst_off: u64,
        src: &dyn Region,
        src_off: u64,
        len: u64,
        signal: (&(dyn Any + Send + Sync), u64, u64),
    ) -> Result<()> {
        self.write(dst, dst_off, src, src_off, len)?;
        let (sem, off, add) = signal;
        self.signal(sem, off, add)
    }
    /// [`Port::flush`].
    fn flush(&mut self) -> Result<()>;
}

#[derive(Debug)]
struct PortAdapter<P: PortMapped> {
    name: String,
    port: P::Port,
}

impl<P: PortMapped> DynPort for PortAdapter<P> {
    fn write(
        &mut self,
        dst: &(dyn Any + Send + Sync),
        dst_off: u64,
        src: &dyn Region,
        src_off: u64,
        len: u64,
    ) -> Result<()> {
        let dst = downcast::<P::Remote>(&self.name, "remote buffer", dst)?;
        let src = downcast::<P::Local>(&self.name, "local buffer", src.as_any())?;
        self.port.write(dst, dst_off, src, src_off, len)
    }
    fn read(
        &mut self,
        dst: &dyn Region,
        dst_off: u64,
        src: &(dyn Any + Send + Sync),
        src_off: u64,
        len: u64,
    ) -> Result<()> {
        let dst = downcast::<P::Local>(&self.name, "local buffer", dst.as_any())?;
        let src = downcast::<P::Remote>(&self.name, "remote buffer", src)?;
        self.port.read(dst, dst_off, src, src_off, len)
    }
    fn signal(&mut self, sem: &(dyn Any + Send + Sync), off: u64, add: u64) -> Result<()> {
        let sem = downcast::<P::Remote>(&self.name, "remote semaphore", sem)?;
        self.port.signal(sem, off, add)
    }
    fn write_signal(
        &mut self,
        dst: &(dyn Any + Send + Sync),
        dst_off: u64,
        src: &dyn Region,
        src_off: u64,
        len: u64,
        signal: (&(dyn Any + Send + Sync), u64, u64),
    ) -> Result<()> {
        let dst = downcast::<P::Remote>(&self.name, "remote buffer", dst)?;
        let src = downcast::<P::Local>(&self.name, "local buffer", src.as_any())?;
        let sem = downcast::<P::Remote>(&self.name, "remote semaphore", signal.0)?;
        self.port
            .write_signal(dst, dst_off, src, src_off, len, (sem, signal.1, signal.2))
    }
    fn flush(&mut self) -> Result<()> {
        self.port.flush()
    }
}

/// Object-safe [`PortMapped`].
pub trait DynPortMapped: Send + Sync + Debug {
    /// [`Transport::name`].
    fn name(&self) -> &str;
    /// [`Transport::guarantees`].
    fn guarantees(&self) -> Guarantees;
    /// [`Transport::reach`].
    fn reach(&self, local: &Endpoint, remote: &Endpoint) -> Reach;
    /// [`PortMapped::register`].
    fn register(&self, region: &dyn Region) -> Result<Box<dyn Region>>;
    /// [`PortMapped::export`].
    fn export(&self, local: &dyn Region) -> Result<Export>;
    /// [`PortMapped::import`].
    fn import(&self, export: Export) -> Result<Box<dyn Any + Send + Sync>>;
    /// [`PortMapped::connect`].
    fn connect(&self, ctx: &PeerContext<'_>) -> Result<Box<dyn DynPort>>;
    /// [`PortMapped::remote_region`]; `remote` must come from this backend's `import`
    /// (else an error).
    fn remote_region<'a>(
        &self,
        remote: &'a (dyn Any + Send + Sync),
    ) -> Result<Option<&'a dyn Region>>;
}

impl<P: PortMapped> DynPortMapped for P {
    fn name(&self) -> &str {
        Transport::name(self)
    }
    fn guarantees(&self) -> Guarantees {
        Transport::guarantees(self)
    }
    fn reach(&self, local: &Endpoint, remote: &Endpoint) -> Reach {
        Transport::reach(self, local, remote)
    }
    fn register(&self, region: &dyn Region) -> Result<Box<dyn Region>> {
        Ok(Box::new(PortMapped::register(self, region)?))
    }
    fn export(&self, local: &dyn Region) -> Result<Export> {
        let local = downcast::<P::Local>(Transport::name(self), "local buffer", local.as_any())?;
        PortMapped::export(self, local)
    }
    fn import(&self, export: Export) -> Result<Box<dyn Any + Send + Sync>> {
        Ok(Box::new(PortMapped::import(self, export)?))
    }
    fn connect(&self, ctx: &PeerContext<'_>) -> Result<Box<dyn DynPort>> {
        let port = PortMapped::connect(self, ctx)?;
        Ok(Box::new(PortAdapter::<P> {
            name: Transport::name(self).to_string(),
            port,
        }))
    }
    fn remote_region<'a>(
        &self,
        remote: &'a (dyn Any + Send + Sync),
    ) -> Result<Option<&'a dyn Region>> {
        let remote = downcast::<P::Remote>(Transport::name(self), "remote buffer", remote)?;
        Ok(PortMapped::remote_region(self, remote))
    }
}

impl Transport for Arc<dyn DynPortMapped> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn guarantees(&self) -> Guarantees {
        (**self).guarantees()
    }
    fn reach(&self, local: &Endpoint, remote: &Endpoint) -> Reach {
        (**self).reach(local, remote)
    }
}

/// A connection of an `Arc<dyn DynPortMapped>`: local buffers are `Box<dyn Region>`,
/// imported peer buffers `Box<dyn Any + Send + Sync>` (both downcast by the backend).
impl Port for Box<dyn DynPort> {
    type Local = Box<dyn Region>;
    type Remote = Box<dyn Any + Send + Sync>;
    fn write(
        &mut self,
        dst: &Box<dyn Any + Send + Sync>,
        dst_off: u64,
        src: &Box<dyn Region>,
        src_off: u64,
        len: u64,
    ) -> Result<()> {
        (**self).write(dst.as_ref(), dst_off, src.as_ref(), src_off, len)
    }
    fn read(
        &mut self,
        dst: &Box<dyn Region>,
        dst_off: u64,
        src: &Box<dyn Any + Send + Sync>,
        src_off: u64,
        len: u64,
    ) -> Result<()> {
        (**self).read(dst.as_ref(), dst_off, src.as_ref(), src_off, len)
    }
    fn signal(&mut self, sem: &Box<dyn Any + Send + Sync>, off: u64, add: u64) -> Result<()> {
        (**self).signal(sem.as_ref(), off, add)
    }
    fn write_signal(
        &mut self,
        dst: &Box<dyn Any + Send + Sync>,
        dst_off: u64,
        src: &Box<dyn Region>,
        src_off: u64,
        len: u64,
        signal: (&Box<dyn Any + Send + Sync>, u64, u64),
    ) -> Result<()> {
        (**self).write_signal(
            dst.as_ref(),
            dst_off,
            src.as_ref(),
            src_off,
            len,
            (signal.0.as_ref(), signal.1, signal.2),
        )
    }
    fn flush(&mut self) -> Result<()> {
        (**self).flush()
    }
}

impl PortMapped for Arc<dyn DynPortMapped> {
    type Local = Box<dyn Region>;
    type Remote = Box<dyn Any + Send + Sync>;
    type Port = Box<dyn DynPort>;
    fn register(&self, region: &dyn Region) -> Result<Box<dyn Region>> {
        (**self).register(region)
    }
    fn export(&self, local: &Box<dyn Region>) -> Result<Export> {
        (**self).export(local.as_ref())
    }
    fn import(&self, export: Export) -> Result<Box<dyn Any + Send + Sync>> {
        (**self).import(export)
    }
    fn connect(&self, ctx: &PeerContext<'_>) -> Result<Box<dyn DynPort>> {
        (**self).connect(ctx)
    }
    /// A handle from another backend gives `None`.
    fn remote_region<'a>(&self, remote: &'a Box<dyn Any + Send + Sync>) -> Option<&'a dyn Region> {
        (**self).remote_region(remote.as_ref()).ok().flatten()
    }
}

/// Object-safe [`SwitchMapped`].
pub trait DynSwitchMapped: Send + Sync + Debug {
    /// [`Transport::name`].
    fn name(&self) -> &str;
    /// [`Transport::guarantees`].
    fn guarantees(&self) -> Guarantees;
    /// [`Transport::reach`].
    fn reach(&self, local: &Endpoint, remote: &Endpoint) -> Reach;
    /// [`SwitchMapped::create_group`].
    fn create_group(
        &self,
        bootstrap: &dyn Bootstrap,
        members: &[Rank],
        len: u64,
        tag: u64,
    ) -> Result<Box<dyn SwitchGroup>>;
}

impl<S: SwitchMapped> DynSwitchMapped for S
where
    S::Group: 'static,
{
    fn name(&self) -> &str {
        Transport::name(self)
    }
    fn guarantees(&self) -> Guarantees {
        Transport::guarantees(self)
    }
    fn reach(&self, local: &Endpoint, remote: &Endpoint) -> Reach {
        Transport::reach(self, local, remote)
    }
    fn create_group(
        &self,
        bootstrap: &dyn Bootstrap,
        members: &[Rank],
        len: u64,
        tag: u64,
    ) -> Result<Box<dyn SwitchGroup>> {
        Ok(Box::new(SwitchMapped::create_group(
            self, bootstrap, members, len, tag,
        )?))
    }
}

impl SwitchGroup for Box<dyn SwitchGroup> {
    fn unicast(&self) -> &dyn Region {
        (**self).unicast()
    }
    fn multicast_addr(&self) -> u64 {
        (**self).multicast_addr()
    }
    fn members(&self) -> &[Rank] {
        (**self).members()
    }
}

impl Transport for Arc<dyn DynSwitchMapped> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn guarantees(&self) -> Guarantees {
        (**self).guarantees()
    }
    fn reach(&self, local: &Endpoint, remote: &Endpoint) -> Reach {
        (**self).reach(local, remote)
    }
}

impl SwitchMapped for Arc<dyn DynSwitchMapped> {
    type Group = Box<dyn SwitchGroup>;
    fn create_group(
        &self,
        bootstrap: &dyn Bootstrap,
        members: &[Rank],
        len: u64,
        tag: u64,
    ) -> Result<Box<dyn SwitchGroup>> {
        (**self).create_group(bootstrap, members, len, tag)
    }
}
