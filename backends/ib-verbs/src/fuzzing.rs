//! Entry points for the fuzz targets (`fuzz/`, outside the workspace) and for the
//! corpus replay test of the ordinary test suite: each feeds arbitrary bytes to one
//! decoder of data that comes from a peer over the network (through the bootstrap). A
//! decoder may refuse the bytes; it must never panic. Not part of the API.

use commhal_hal::Export;

use crate::BACKEND;
use crate::device::Link;
use crate::region::IbRemote;
use crate::transport::ConnectMsg;

/// A queue pair's connection message, as `connect` decodes the peer's.
pub fn ib_connect(data: &[u8]) {
    let _ = ConnectMsg::decode(data, 1);
}

/// A region export, as `import` checks it: the first 8 bytes are the export's `len`,
/// the rest its bytes.
pub fn ib_region_import(data: &[u8]) {
    let (len, bytes) = match data.split_first_chunk::<8>() {
        Some((l, rest)) => (u64::from_le_bytes(*l), rest),
        None => (0, data),
    };
    let _ = IbRemote::import(Export {
        backend: BACKEND.into(),
        len,
        bytes: bytes.to_vec(),
        fds: Vec::new(),
    });
}

/// A fuzz target: its name and the function that decodes one input.
pub type Target = (&'static str, fn(&[u8]));

/// Every target of this crate, by name (the corpus folders under `fuzz/corpus/`).
pub const TARGETS: &[Target] = &[
    ("ib_connect", ib_connect),
    ("ib_region_import", ib_region_import),
];

/// Valid inputs of every target, made by the real encoders (`(target, name, bytes)`):
/// the seeds of the committed corpus, and what the replay test mutates.
pub fn seeds() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    let roce = ConnectMsg {
        qpn: 0x1234,
        psn: 0x00ab_cdef,
        lid: 0,
        mtu: 5,
        link: Link::Roce,
        gid: [
            0xfe, 0x80, 0, 0, 0, 0, 0, 0, 2, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55,
        ],
    };
    let ib = ConnectMsg {
        lid: 17,
        link: Link::InfiniBand,
        gid: [0; 16],
        ..roce
    };
    let mut import = 4096u64.to_le_bytes().to_vec();
    import.extend_from_slice(b"IBV1");
    import.extend_from_slice(&0x7f00_0000_1000u64.to_le_bytes());
    import.extend_from_slice(&0x4242u32.to_le_bytes());
    vec![
        ("ib_connect", "roce", roce.encode()),
        ("ib_connect", "infiniband", ib.encode()),
        ("ib_region_import", "region", import),
    ]
}
