//! Ranks, devices, endpoints and reach: where a participant lives and whether a
//! transport can join two of them.

use serde::{Deserialize, Serialize};

/// A participant's index in its communicator, `0..world_size`.
pub type Rank = u32;

/// The kind of memory/processor a rank drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeviceKind {
    /// CPU threads over host memory (host-emu).
    Host,
    /// An NVIDIA GPU driven through the CUDA driver API.
    Cuda,
    /// An AMD GPU driven through HIP.
    Hip,
}

/// A device: kind plus ordinal within the process's view of that kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Device {
    /// Kind of device.
    pub kind: DeviceKind,
    /// Ordinal (CUDA device index, HIP device index, or 0 for host).
    pub ordinal: u32,
}

impl Device {
    /// The host "device" used by host-emu.
    pub const HOST: Device = Device {
        kind: DeviceKind::Host,
        ordinal: 0,
    };
}

/// Where a rank lives. Exchanged through the bootstrap so every rank can ask each
/// transport whether it reaches every peer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    /// The rank.
    pub rank: Rank,
    /// Identifies the host (hostname plus boot id): equal strings ⇔ same machine.
    pub host: String,
    /// Identifies the OS process on that host.
    pub pid: u32,
    /// Device the rank drives.
    pub device: Device,
    /// Virtual node: ranks on one host may be split into several "nodes" that must talk
    /// as if they were on separate machines (for testing multi-node algorithms on one
    /// machine). Equal on real single-node runs.
    pub node: u32,
    /// Fabric identifiers the rank can reach (NVLink domain/cluster UUID, IB GID
    /// subnet prefix, ...); transports that need them look for their own prefix.
    pub fabrics: Vec<String>,
}

impl Endpoint {
    /// The endpoint of the calling process for `rank` on `device`.
    pub fn this_process(rank: Rank, device: Device) -> Endpoint {
        Endpoint {
            rank,
            host: host_id(),
            pid: std::process::id(),
            device,
            node: 0,
            fabrics: Vec::new(),
        }
    }

    /// Same machine and same virtual node: shared memory and peer mappings may join them.
    pub fn same_node(&self, other: &Endpoint) -> bool {
        self.host == other.host && self.node == other.node
    }

    /// Same OS process.
    pub fn same_process(&self, other: &Endpoint) -> bool {
        self.same_node(other) && self.pid == other.pid
    }
}

/// Whether a transport can join two endpoints, and at what cost.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reach {
    /// The transport can join them. Lower `cost` is preferred when ranking backends
    /// (rough guide: 10 same process, 20 same node over a fast link, 50 same node over
    /// copies/proxy, 100 across nodes).
    Yes {
        /// Relative cost; lower is better.
        cost: u32,
    },
    /// It cannot, and why.
    No(String),
}

impl Reach {
    /// True for [`Reach::Yes`].
    pub fn is_yes(&self) -> bool {
        matches!(self, Reach::Yes { .. })
    }

    /// What a port backend checks before it connects rank `me` to rank `peer`: that
    /// this reach is [`Reach::Yes`] and that the peer is another rank; the error names
    /// `backend` and says what to do.
    pub fn check_port(self, backend: &str, me: Rank, peer: Rank) -> crate::Result<()> {
        if let Reach::No(why) = self {
            return Err(crate::HalError::unsupported(
                backend,
                format!("a port to rank {peer}: {why}"),
            ));
        }
        if me == peer {
            return Err(crate::HalError::invalid(format!(
                "rank {me} asked {backend} for a port to itself: connect to another rank"
            )));
        }
        Ok(())
    }
}

/// A string identifying this machine: hostname plus the kernel's boot id, so two
/// containers with the same hostname but different kernels are not confused.
pub fn host_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown-host".into());
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    format!("{host}/{boot}")
}
