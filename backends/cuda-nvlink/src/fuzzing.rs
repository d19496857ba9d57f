//! Entry points for the fuzz targets (`fuzz/`, outside the workspace) and for the
//! corpus replay test of the ordinary test suite: each feeds arbitrary bytes to one
//! decoder of data that comes from another process. A decoder may refuse the bytes; it
//! must never panic. Not part of the API.

use crate::header::{ExportHeader, IPC_HANDLE_LEN, host_hash};

/// An export header as a peer's `map` (cuda-nvlink, and cuda-dma's `import`) checks
/// it: `Export::len` is taken from the header's size field (and that plus one), the
/// descriptor count from the last byte (0, 1 or 2).
pub fn nvlink_export_header(data: &[u8]) {
    let len = data
        .get(8..16)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map_or(0, u64::from_le_bytes);
    let nfds = data.last().map_or(0, |&b| usize::from(b % 3));
    for l in [len, len.wrapping_add(1)] {
        if let Ok(h) = ExportHeader::parse(data, l, nfds) {
            let _ = h.is_this_process();
            let _ = h.encoded_len();
        }
    }
}

/// A fuzz target: its name and the function that decodes one input.
pub type Target = (&'static str, fn(&[u8]));

/// Every target of this crate, by name (the corpus folders under `fuzz/corpus/`).
pub const TARGETS: &[Target] = &[("nvlink_export_header", nvlink_export_header)];

/// Valid inputs of every target, made by the real encoder (`(target, name, bytes)`):
/// the seeds of the committed corpus, and what the replay test mutates.
pub fn seeds() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    let vmm = ExportHeader {
        legacy_ipc: false,
        size: 2 << 20,
        addr: 0x7f00_0000_0000,
        device: 1,
        pid: 4242,
        host_hash: host_hash("host-a/boot"),
        ipc_handle: [0; IPC_HANDLE_LEN],
    };
    let legacy = ExportHeader {
        legacy_ipc: true,
        size: 12345,
        ipc_handle: [0x5a; IPC_HANDLE_LEN],
        ..vmm
    };
    // the VMM export comes with one descriptor: its last byte (the host hash's top
    // byte) is what the target turns into the count
    let mut vmm_bytes = vmm.encode();
    if let Some(b) = vmm_bytes.last_mut() {
        *b = 1;
    }
    vec![
        ("nvlink_export_header", "vmm", vmm_bytes),
        ("nvlink_export_header", "legacy-ipc", legacy.encode()),
    ]
}
