//! [`PluginMemory`]: a [`MemoryMapped`] transport whose every call goes through a
//! plugin's C table, so plugins run through the same selection, channels and
//! conformance suite as built-in backends.
//!
//! Lifetimes mirror the ABI's ownership rule: every [`PluginRegion`] holds the
//! transport it came from (`Arc`), so `mem_release` of each region runs before the
//! transport's `destroy`, and each exactly once (in `Drop`).

use std::any::Any;
use std::ffi::{c_char, c_int, c_void};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use crate::error::{HalError, Result};
use crate::guarantees::Guarantees;
use crate::memory::{Export, MemoryKind, Region};
use crate::plugin::abi::{self, CRegion};
use crate::plugin::loader::{PluginBackend, check_rc};
use crate::topology::{Device, DeviceKind, Endpoint, Reach};
use crate::transport::{MemoryMapped, Transport};

/// One `create`d plugin transport; `destroy`ed when the last user drops it.
pub(crate) struct PluginTransport {
    plugin: Arc<PluginBackend>,
    handle: *mut c_void,
}

// SAFETY: the ABI requires every plugin function to be callable from any thread,
// concurrently, on the same transport; the handle is opaque and only passed back.
unsafe impl Send for PluginTransport {}
// SAFETY: as for Send; we never dereference the handle ourselves.
unsafe impl Sync for PluginTransport {}

impl PluginTransport {
    pub(crate) fn new(plugin: Arc<PluginBackend>, handle: *mut c_void) -> Self {
        PluginTransport { plugin, handle }
    }
}

impl Drop for PluginTransport {
    fn drop(&mut self) {
        if let Some(destroy) = self.plugin.table().destroy {
            // SAFETY: the handle came from this plugin's `create`, every region holding
            // it has been released (they keep this value alive), and it is destroyed once.
            unsafe { destroy(self.handle) };
        }
    }
}

/// A plugin's memory-mapped transport (what `Backend::memory` holds for a plugin).
pub struct PluginMemory {
    transport: Arc<PluginTransport>,
}

impl std::fmt::Debug for PluginMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginMemory")
            .field("name", &self.transport.plugin.name())
            .field("file", &self.transport.plugin.file())
            .finish()
    }
}

impl PluginMemory {
    pub(crate) fn new(transport: Arc<PluginTransport>) -> Self {
        PluginMemory { transport }
    }

    fn name(&self) -> &str {
        self.transport.plugin.name()
    }

    /// Wrap a region the plugin just returned, checking what it reported. On a bad
    /// report the region is released (through `Drop`) and an error returned.
    fn adopt(&self, what: &str, r: CRegion, min_len: u64) -> Result<PluginRegion> {
        if r.handle.is_null() {
            return Err(HalError::backend(
                self.name(),
                format!("{what} returned success but a NULL region handle: plugin bug"),
            ));
        }
        let device = device_from_c(r.device_kind, r.device_ordinal);
        let region = PluginRegion {
            transport: self.transport.clone(),
            handle: r.handle,
            addr: r.addr,
            len: r.len,
            device: device.unwrap_or(Device::HOST),
            kind: self.transport.plugin.memory_kind(),
        };
        if device.is_none() {
            return Err(HalError::backend(
                self.name(),
                format!("{what} reported device kind {}: plugin bug", r.device_kind),
            ));
        }
        if r.len < min_len || (r.len > 0 && r.addr == 0) {
            return Err(HalError::backend(
                self.name(),
                format!(
                    "{what} reported {} bytes at {:#x} for {min_len} asked: plugin bug",
                    r.len, r.addr
                ),
            ));
        }
        Ok(region)
    }
}

fn device_to_c(d: Device) -> (u32, u32) {
    let kind = match d.kind {
        DeviceKind::Host => abi::DEVICE_HOST,
        DeviceKind::Cuda => abi::DEVICE_CUDA,
        DeviceKind::Hip => abi::DEVICE_HIP,
    };
    (kind, d.ordinal)
}

fn device_from_c(kind: u32, ordinal: u32) -> Option<Device> {
    let kind = match kind {
        abi::DEVICE_HOST => DeviceKind::Host,
        abi::DEVICE_CUDA => DeviceKind::Cuda,
        abi::DEVICE_HIP => DeviceKind::Hip,
        _ => return None,
    };
    Some(Device { kind, ordinal })
}

impl Transport for PluginMemory {
    fn name(&self) -> &str {
        self.transport.plugin.name()
    }
    fn guarantees(&self) -> Guarantees {
        self.transport.plugin.guarantees()
    }
    fn reach(&self, local: &Endpoint, remote: &Endpoint) -> Reach {
        let (scope, cost) = self.transport.plugin.reach_rule();
        match scope {
            abi::REACH_SAME_PROCESS if !local.same_process(remote) => Reach::No(format!(
                "plugin `{}` joins only ranks of one process",
                self.name()
            )),
            abi::REACH_SAME_NODE if !local.same_node(remote) => Reach::No(format!(
                "plugin `{}` joins only ranks on the same host and node",
                self.name()
            )),
            _ => Reach::Yes { cost },
        }
    }
}

impl MemoryMapped for PluginMemory {
    type Memory = PluginRegion;
    type Mapping = PluginRegion;

    fn alloc(&self, device: Device, len: u64) -> Result<PluginRegion> {
        let f = self
            .transport
            .plugin
            .table()
            .mem_alloc
            .ok_or_else(|| HalError::unsupported(self.name(), "mem_alloc"))?;
        let (dk, dord) = device_to_c(device);
        let mut out = CRegion::empty();
        let mut err = [0 as c_char; abi::MSG_BUF_LEN];
        // SAFETY: v1 `mem_alloc` with this plugin's live transport handle, a valid
        // out-struct and a MSG_BUF_LEN error buffer.
        let rc = unsafe {
            f(
                self.transport.handle,
                dk,
                dord,
                len,
                &mut out,
                err.as_mut_ptr(),
                err.len(),
            )
        };
        check_rc(self.name(), "mem_alloc", rc, &err)?;
        self.adopt("mem_alloc", out, len)
    }

    fn export(&self, mem: &PluginRegion) -> Result<Export> {
        if !Arc::ptr_eq(&mem.transport, &self.transport) {
            return Err(HalError::invalid(format!(
                "region at {:#x} was not allocated by this `{}` transport: export it with the transport that made it",
                mem.addr,
                self.name()
            )));
        }
        let f = self
            .transport
            .plugin
            .table()
            .mem_export
            .ok_or_else(|| HalError::unsupported(self.name(), "mem_export"))?;
        let mut bytes = [0u8; abi::EXPORT_BYTES_MAX];
        let mut bytes_len: usize = 0;
        let mut fd: c_int = -1;
        let mut err = [0 as c_char; abi::MSG_BUF_LEN];
        // SAFETY: v1 `mem_export` with our live transport and a region handle of it,
        // buffers of the advertised sizes and valid out-pointers.
        let rc = unsafe {
            f(
                self.transport.handle,
                mem.handle,
                bytes.as_mut_ptr(),
                bytes.len(),
                &mut bytes_len,
                &mut fd,
                err.as_mut_ptr(),
                err.len(),
            )
        };
        check_rc(self.name(), "mem_export", rc, &err)?;
        let mut fds = Vec::new();
        if fd >= 0 {
            // SAFETY: F_GETFD only queries the descriptor table; it has no effect.
            if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
                return Err(HalError::backend(
                    self.name(),
                    format!("mem_export returned fd {fd}, which is not open: plugin bug"),
                ));
            }
            // SAFETY: the ABI hands us a new descriptor we own; we checked it is open.
            fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        if bytes_len > bytes.len() {
            return Err(HalError::backend(
                self.name(),
                format!(
                    "mem_export reported {bytes_len} bytes, more than the {}-byte buffer: plugin bug",
                    bytes.len()
                ),
            ));
        }
        Ok(Export {
            backend: self.name().to_string(),
            len: mem.len,
            bytes: bytes[..bytes_len].to_vec(),
            fds,
        })
    }

    fn map(&self, export: Export) -> Result<PluginRegion> {
        export.check_backend(self.name())?;
        if export.fds.len() > 1 {
            return Err(HalError::invalid(format!(
                "export for `{}` carries {} descriptors; a plugin export has at most one",
                self.name(),
                export.fds.len()
            )));
        }
        let f = self
            .transport
            .plugin
            .table()
            .mem_map
            .ok_or_else(|| HalError::unsupported(self.name(), "mem_map"))?;
        let fd = export.fds.first().map_or(-1, |f| f.as_raw_fd());
        let mut out = CRegion::empty();
        let mut err = [0 as c_char; abi::MSG_BUF_LEN];
        // SAFETY: v1 `mem_map` with our live transport, the export bytes (alive for the
        // call), a borrowed fd (owned by `export`, alive for the call), a valid
        // out-struct and a MSG_BUF_LEN error buffer.
        let rc = unsafe {
            f(
                self.transport.handle,
                export.bytes.as_ptr(),
                export.bytes.len(),
                fd,
                export.len,
                &mut out,
                err.as_mut_ptr(),
                err.len(),
            )
        };
        check_rc(self.name(), "mem_map", rc, &err)?;
        self.adopt("mem_map", out, export.len)
    }
}

/// A plugin region (allocation or mapping); released through the plugin on drop.
pub struct PluginRegion {
    transport: Arc<PluginTransport>,
    handle: *mut c_void,
    addr: u64,
    len: u64,
    device: Device,
    kind: MemoryKind,
}

// SAFETY: the region's memory is plain shared memory/device memory addressed by value;
// the handle is opaque and only passed back to the thread-safe plugin (ABI rule).
unsafe impl Send for PluginRegion {}
// SAFETY: as for Send; `&PluginRegion` exposes only copies of plain fields.
unsafe impl Sync for PluginRegion {}

impl std::fmt::Debug for PluginRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginRegion")
            .field("backend", &self.transport.plugin.name())
            .field("addr", &format_args!("{:#x}", self.addr))
            .field("len", &self.len)
            .finish()
    }
}

impl Region for PluginRegion {
    fn addr(&self) -> u64 {
        self.addr
    }
    fn len(&self) -> u64 {
        self.len
    }
    fn device(&self) -> Device {
        self.device
    }
    fn kind(&self) -> MemoryKind {
        self.kind
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Drop for PluginRegion {
    fn drop(&mut self) {
        if let Some(release) = self.transport.plugin.table().mem_release {
            // SAFETY: the handle came from this transport's mem_alloc/mem_map, the
            // transport is alive (we hold it) and this is the only release.
            unsafe { release(self.transport.handle, self.handle) };
        }
    }
}
