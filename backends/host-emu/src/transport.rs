//! [`HostEmu`]: the host-emulation transport and its [`MemoryMapped`] side.
//!
//! Promises ([`HostEmu::GUARANTEES`]): every copy is a CPU `memcpy` into shared pages
//! and every signal an atomic add with release, issued in program order by one thread,
//! so signals are strong, puts land in order, a returned `flush` means source reusable
//! *and* remote visible, and gets/LL8/LL16 work (8/16-byte stores are single-copy atomic
//! on the supported CPUs). A port `write` is that `memcpy`, done on the calling thread
//! before it returns, so it copies its source (`write_copies_source`). No graph capture.

use commhal_hal::{
    Device, DeviceKind, Endpoint, Export, FlushMeaning, Guarantees, HalError, MemoryMapped, Reach,
    Result, SignalStrength, Transport,
};

use crate::BACKEND;
use crate::faults::Faults;
use crate::memory::{ShmMapping, ShmRegion};

/// Depth of the proxy FIFO host-emu's port transport is used with.
pub const FIFO_DEPTH: u32 = 512;

/// The host-emulation transport. Cheap to create; holds only configuration.
#[derive(Debug, Clone, Default)]
pub struct HostEmu {
    pub(crate) faults: Faults,
}

impl HostEmu {
    /// What host-emu promises (the same with or without faults: faults exist to break
    /// these promises so the conformance suite can be seen to fail).
    pub const GUARANTEES: Guarantees = Guarantees {
        signal: SignalStrength::Strong,
        put_put_ordered: true,
        flush: FlushMeaning {
            source_reusable: true,
            remote_visible: true,
        },
        write_copies_source: true,
        get: true,
        ll8: true,
        ll16: true,
        graph_capture: false,
        max_transfer: u64::MAX,
        fifo_depth: FIFO_DEPTH,
    };

    /// A correct transport (no faults).
    pub fn new() -> HostEmu {
        HostEmu::default()
    }

    /// A transport with test-only faults injected (see [`Faults`]).
    pub fn with_faults(faults: Faults) -> HostEmu {
        if faults.any() {
            tracing::warn!("host-emu: fault injection active: {faults:?} (test-only)");
        }
        HostEmu { faults }
    }

    /// The faults this transport injects.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// `Ok` when `device` is the host; host-emu allocates nothing else.
    pub(crate) fn check_host(device: Device) -> Result<()> {
        if device.kind == DeviceKind::Host {
            Ok(())
        } else {
            Err(HalError::unsupported(
                BACKEND,
                format!(
                    "memory on {:?} device {} (host-emu only allocates Device::HOST; use a GPU backend for device memory)",
                    device.kind, device.ordinal
                ),
            ))
        }
    }
}

impl Transport for HostEmu {
    fn name(&self) -> &str {
        BACKEND
    }

    fn guarantees(&self) -> Guarantees {
        Self::GUARANTEES
    }

    /// Yes (cost 10) in one process, yes (cost 20) on one host and virtual node, no
    /// otherwise: shared memory needs the same kernel and host-emu serves host devices.
    fn reach(&self, local: &Endpoint, remote: &Endpoint) -> Reach {
        if local.device.kind != DeviceKind::Host || remote.device.kind != DeviceKind::Host {
            return Reach::No(format!(
                "host-emu joins host devices only (ranks drive {:?} and {:?})",
                local.device.kind, remote.device.kind
            ));
        }
        if local.host != remote.host {
            return Reach::No(format!(
                "ranks {} and {} are on different hosts ({} vs {}): shared memory needs one machine",
                local.rank, remote.rank, local.host, remote.host
            ));
        }
        if local.node != remote.node {
            return Reach::No(format!(
                "ranks {} and {} are on different virtual nodes ({} vs {}): use a cross-node transport",
                local.rank, remote.rank, local.node, remote.node
            ));
        }
        if local.same_process(remote) {
            Reach::Yes { cost: 10 }
        } else {
            Reach::Yes { cost: 20 }
        }
    }
}

impl MemoryMapped for HostEmu {
    type Memory = ShmRegion;
    type Mapping = ShmMapping;

    fn alloc(&self, device: Device, len: u64) -> Result<ShmRegion> {
        Self::check_host(device)?;
        ShmRegion::alloc(len)
    }

    fn export(&self, mem: &ShmRegion) -> Result<Export> {
        mem.export()
    }

    fn map(&self, export: Export) -> Result<ShmMapping> {
        if self.faults.detached_mapping {
            ShmMapping::map_detached(export)
        } else if self.faults.detached_tail_page {
            ShmMapping::map_detached_tail(export)
        } else {
            ShmMapping::map(export)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use commhal_hal::Region;
    use commhal_hal::dynamic::DynMemoryMapped;

    fn ep(rank: u32) -> Endpoint {
        Endpoint::this_process(rank, Device::HOST)
    }

    #[test]
    fn reach_rules() {
        let t = HostEmu::new();
        assert_eq!(
            Transport::reach(&t, &ep(0), &ep(1)),
            Reach::Yes { cost: 10 }
        );
        let mut other_proc = ep(1);
        other_proc.pid += 1;
        assert_eq!(
            Transport::reach(&t, &ep(0), &other_proc),
            Reach::Yes { cost: 20 }
        );
        let mut other_node = ep(1);
        other_node.node = 1;
        assert!(!Transport::reach(&t, &ep(0), &other_node).is_yes());
        let mut other_host = ep(1);
        other_host.host.push('x');
        assert!(!Transport::reach(&t, &ep(0), &other_host).is_yes());
        let mut gpu = ep(1);
        gpu.device = Device {
            kind: DeviceKind::Cuda,
            ordinal: 0,
        };
        assert!(!Transport::reach(&t, &ep(0), &gpu).is_yes());
    }

    #[test]
    fn alloc_export_map_through_the_trait_and_dyn_mirror() {
        let t = HostEmu::new();
        let cuda = Device {
            kind: DeviceKind::Cuda,
            ordinal: 0,
        };
        let err = MemoryMapped::alloc(&t, cuda, 64).unwrap_err();
        assert!(matches!(err, HalError::Unsupported { .. }), "{err}");

        let mem = MemoryMapped::alloc(&t, Device::HOST, 64).unwrap();
        assert_eq!(mem.device(), Device::HOST);
        assert_eq!(mem.kind(), commhal_hal::MemoryKind::HostShared);
        mem.write(0, &[9; 8]).unwrap();
        let m = MemoryMapped::map(&t, MemoryMapped::export(&t, &mem).unwrap()).unwrap();
        let mut out = [0; 8];
        m.read(0, &mut out).unwrap();
        assert_eq!(out, [9; 8]);

        let d: &dyn DynMemoryMapped = &t;
        let boxed = d.alloc(Device::HOST, 32).unwrap();
        let e = d.export(boxed.as_ref()).unwrap();
        assert_eq!(e.len, 32);
        assert_eq!(d.map(e).unwrap().len(), 32);
        // A mapping is not a local allocation: the dyn export refuses it.
        let mapping = d.map(d.export(boxed.as_ref()).unwrap()).unwrap();
        assert!(d.export(mapping.as_ref()).is_err());
    }
}
