//! The bytes of a cuda-nvlink [`Export`](commhal_hal::Export): a fixed header, then
//! (legacy IPC only) the 64-byte `CUipcMemHandle`.
//!
//! Layout, little-endian:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `b"CHNV"` |
//! | 4 | 2 | version ([`ExportHeader::VERSION`]) |
//! | 6 | 2 | flags: bit 0 = legacy CUDA IPC (no fd; handle follows) |
//! | 8 | 8 | size in bytes (the exporter's mapped size; = `Export::len`) |
//! | 16 | 8 | the exporter's device address (used only inside one process) |
//! | 24 | 4 | the exporter's CUDA device ordinal (in its own process's numbering) |
//! | 28 | 4 | the exporter's process id |
//! | 32 | 8 | hash of the exporter's host id ([`commhal_hal::topology::host_id`]) |
//! | 40 | 64 | legacy only: `CUipcMemHandle` |
//!
//! Parsing is pure and rejects anything else with an error that says what is wrong
//! (tested without a GPU).

use commhal_hal::{HalError, Result};

use crate::BACKEND;

/// Bytes of a `CUipcMemHandle` (cuda-rt's constant).
pub use commhal_cuda_rt::ipc::IPC_HANDLE_LEN;

/// The decoded header of an export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExportHeader {
    /// True: legacy CUDA IPC (handle in [`ExportHeader::ipc_handle`], no fd).
    pub legacy_ipc: bool,
    /// Size in bytes (a granularity multiple for VMM exports).
    pub size: u64,
    /// The exporter's device address (meaningful only in the exporting process).
    pub addr: u64,
    /// The exporter's device ordinal.
    pub device: u32,
    /// The exporter's process id.
    pub pid: u32,
    /// [`host_hash`] of the exporter's host.
    pub host_hash: u64,
    /// The legacy IPC handle (all zero for VMM exports).
    pub ipc_handle: [u8; IPC_HANDLE_LEN],
}

impl ExportHeader {
    /// Magic at offset 0.
    pub const MAGIC: [u8; 4] = *b"CHNV";
    /// Current format version.
    pub const VERSION: u16 = 1;
    /// Length of the fixed part.
    pub const FIXED_LEN: usize = 40;
    const FLAG_LEGACY: u16 = 1;

    /// Total encoded length for this header.
    pub fn encoded_len(&self) -> usize {
        if self.legacy_ipc {
            Self::FIXED_LEN + IPC_HANDLE_LEN
        } else {
            Self::FIXED_LEN
        }
    }

    /// Encode (see the module docs for the layout).
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.encoded_len());
        v.extend_from_slice(&Self::MAGIC);
        v.extend_from_slice(&Self::VERSION.to_le_bytes());
        let flags = if self.legacy_ipc {
            Self::FLAG_LEGACY
        } else {
            0
        };
        v.extend_from_slice(&flags.to_le_bytes());
        v.extend_from_slice(&self.size.to_le_bytes());
        v.extend_from_slice(&self.addr.to_le_bytes());
        v.extend_from_slice(&self.device.to_le_bytes());
        v.extend_from_slice(&self.pid.to_le_bytes());
        v.extend_from_slice(&self.host_hash.to_le_bytes());
        if self.legacy_ipc {
            v.extend_from_slice(&self.ipc_handle);
        }
        v
    }

    /// Decode and validate `bytes`; `export_len` is [`commhal_hal::Export::len`] and
    /// `nfds` the number of descriptors that came with it.
    pub fn parse(bytes: &[u8], export_len: u64, nfds: usize) -> Result<ExportHeader> {
        let bad = |what: String| {
            HalError::invalid(format!(
                "not a valid {BACKEND} export: {what} (was it produced by {BACKEND}'s export of the same commhal version?)"
            ))
        };
        if bytes.len() < Self::FIXED_LEN {
            return Err(bad(format!(
                "{} bytes, the header needs {}",
                bytes.len(),
                Self::FIXED_LEN
            )));
        }
        if bytes[0..4] != Self::MAGIC {
            return Err(bad(format!(
                "magic {:02x?}, expected \"CHNV\"",
                &bytes[0..4]
            )));
        }
        let u16_at = |at: usize| u16::from_le_bytes([bytes[at], bytes[at + 1]]);
        let u32_at = |at: usize| {
            let mut b = [0u8; 4];
            b.copy_from_slice(&bytes[at..at + 4]);
            u32::from_le_bytes(b)
        };
        let u64_at = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[at..at + 8]);
            u64::from_le_bytes(b)
        };
        let version = u16_at(4);
        if version != Self::VERSION {
            return Err(bad(format!(
                "format version {version}, this build reads version {}: run the same commhal build on every rank",
                Self::VERSION
            )));
        }
        let flags = u16_at(6);
        if flags & !Self::FLAG_LEGACY != 0 {
            return Err(bad(format!("unknown flag bits {flags:#06x}")));
        }
        let legacy_ipc = flags & Self::FLAG_LEGACY != 0;
        let size = u64_at(8);
        if size == 0 {
            return Err(bad("size 0".into()));
        }
        if size != export_len {
            return Err(bad(format!(
                "header says {size} bytes but Export::len is {export_len}"
            )));
        }
        let mut h = ExportHeader {
            legacy_ipc,
            size,
            addr: u64_at(16),
            device: u32_at(24),
            pid: u32_at(28),
            host_hash: u64_at(32),
            ipc_handle: [0; IPC_HANDLE_LEN],
        };
        let want = h.encoded_len();
        if bytes.len() != want {
            return Err(bad(format!(
                "{} bytes, a {} export has exactly {want}",
                bytes.len(),
                if legacy_ipc { "legacy-IPC" } else { "VMM" }
            )));
        }
        if legacy_ipc {
            h.ipc_handle
                .copy_from_slice(&bytes[Self::FIXED_LEN..Self::FIXED_LEN + IPC_HANDLE_LEN]);
            if nfds != 0 {
                return Err(bad(format!(
                    "a legacy-IPC export carries no descriptors, got {nfds}"
                )));
            }
        } else if nfds != 1 {
            return Err(bad(format!(
                "a VMM export carries exactly one descriptor (the cuMem POSIX fd), got {nfds}: pass Export::fds with the bootstrap's send_fds"
            )));
        }
        Ok(h)
    }

    /// Was this export made by the calling process (same host and pid)?
    pub fn is_this_process(&self) -> bool {
        self.pid == std::process::id() && self.host_hash == this_host_hash()
    }
}

/// FNV-1a of a host id string: identical in every process of one machine.
pub fn host_hash(host_id: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in host_id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// [`host_hash`] of this machine (cached).
pub fn this_host_hash() -> u64 {
    static H: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *H.get_or_init(|| host_hash(&commhal_hal::topology::host_id()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vmm() -> ExportHeader {
        ExportHeader {
            legacy_ipc: false,
            size: 2 << 20,
            addr: 0x7f00_0000_0000,
            device: 3,
            pid: 4242,
            host_hash: host_hash("box/boot"),
            ipc_handle: [0; 64],
        }
    }

    fn legacy() -> ExportHeader {
        let mut h = vmm();
        h.legacy_ipc = true;
        h.size = 12345;
        for (i, b) in h.ipc_handle.iter_mut().enumerate() {
            *b = i as u8 ^ 0x5a;
        }
        h
    }

    #[test]
    fn round_trips() {
        for h in [vmm(), legacy()] {
            let b = h.encode();
            assert_eq!(b.len(), h.encoded_len());
            let nfds = if h.legacy_ipc { 0 } else { 1 };
            assert_eq!(ExportHeader::parse(&b, h.size, nfds).unwrap(), h);
        }
    }

    fn err(bytes: &[u8], len: u64, nfds: usize) -> String {
        ExportHeader::parse(bytes, len, nfds)
            .expect_err("must be rejected")
            .to_string()
    }

    #[test]
    fn rejects_short_and_bad_magic_and_version() {
        let b = vmm().encode();
        assert!(err(&b[..39], 2 << 20, 1).contains("the header needs 40"));
        let mut m = b.clone();
        m[0] = b'X';
        assert!(err(&m, 2 << 20, 1).contains("magic"));
        let mut v = b.clone();
        v[4] = 9;
        assert!(err(&v, 2 << 20, 1).contains("version 9"));
        let mut f = b;
        f[6] = 0x82;
        assert!(err(&f, 2 << 20, 1).contains("unknown flag"));
    }

    #[test]
    fn rejects_size_mismatch_and_zero() {
        let b = vmm().encode();
        assert!(err(&b, 4 << 20, 1).contains("Export::len"));
        let mut z = vmm();
        z.size = 0;
        assert!(err(&z.encode(), 0, 1).contains("size 0"));
    }

    #[test]
    fn rejects_wrong_lengths_and_descriptor_counts() {
        let mut b = vmm().encode();
        b.push(0);
        assert!(err(&b, 2 << 20, 1).contains("exactly 40"));
        assert!(err(&vmm().encode(), 2 << 20, 0).contains("exactly one descriptor"));
        assert!(err(&vmm().encode(), 2 << 20, 2).contains("exactly one descriptor"));
        let l = legacy().encode();
        assert!(err(&l[..100], 12345, 0).contains("exactly 104"));
        assert!(err(&l, 12345, 1).contains("no descriptors"));
    }

    #[test]
    fn this_process_detection() {
        let mut h = vmm();
        assert!(!h.is_this_process() || h.pid == std::process::id());
        h.pid = std::process::id();
        h.host_hash = this_host_hash();
        assert!(h.is_this_process());
        h.host_hash ^= 1;
        assert!(!h.is_this_process(), "same pid on another host is not us");
    }

    #[test]
    fn host_hash_is_stable_and_discriminating() {
        assert_eq!(host_hash("a/b"), host_hash("a/b"));
        assert_ne!(host_hash("a/b"), host_hash("a/c"));
    }
}
