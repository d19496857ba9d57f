//! Entry points for the fuzz targets (`fuzz/`, outside the workspace) and for the
//! corpus replay test of the ordinary test suite: each feeds arbitrary bytes to one
//! decoder of data that comes from the network or from another process. A decoder
//! may refuse the bytes; it must never panic. Not part of the API.

use commhal_hal::Export;

use crate::tcp::handshake::{Hello, Invitation};
use crate::tcp::wire::{HEADER_LEN, Header};

/// A host-tcp invitation (sent through the bootstrap by the listening rank).
pub fn tcp_invitation(data: &[u8]) {
    let _ = Invitation::decode(0, data);
}

/// A host-tcp hello (the first bytes of an accepted, unauthenticated connection).
pub fn tcp_hello(data: &[u8]) {
    if let Ok(h) = <&[u8; Hello::LEN]>::try_from(data) {
        let _ = Hello::decode(h);
    }
}

/// host-tcp frame headers back to back, with an `ERROR` frame's text decoded.
pub fn tcp_frames(data: &[u8]) {
    let mut rest = data;
    while let Some((h, tail)) = rest.split_first_chunk::<HEADER_LEN>() {
        match Header::decode(h) {
            Ok(Header::Error { len }) => {
                let n = (len as usize).min(tail.len());
                let _ = String::from_utf8_lossy(&tail[..n]);
                rest = &tail[n..];
            }
            Ok(Header::Write { len, .. } | Header::ReadData { len, .. }) => {
                rest = tail.get(len as usize..).unwrap_or(&[])
            }
            Ok(_) => rest = tail,
            Err(_) => return,
        }
    }
}

/// A host-tcp region export, as `import` checks it: the first 8 bytes are the
/// export's `len`, the rest its bytes.
pub fn tcp_region_import(data: &[u8]) {
    let (len, bytes) = match data.split_first_chunk::<8>() {
        Some((l, rest)) => (u64::from_le_bytes(*l), rest),
        None => (0, data),
    };
    let _ = crate::tcp::regions::import(Export {
        backend: crate::tcp::BACKEND.into(),
        len,
        bytes: bytes.to_vec(),
        fds: Vec::new(),
    });
}

/// A host-emu shared-memory export header.
pub fn shm_export_header(data: &[u8]) {
    let len = data
        .get(8..16)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map_or(0, u64::from_le_bytes);
    let _ = crate::memory::parse_export_header(data, len);
    let _ = crate::memory::parse_export_header(data, len.wrapping_add(1));
}

/// A fuzz target: its name and the function that decodes one input.
pub type Target = (&'static str, fn(&[u8]));

/// Every target of this crate, by name (the corpus folders under `fuzz/corpus/`).
pub const TARGETS: &[Target] = &[
    ("tcp_invitation", tcp_invitation),
    ("tcp_hello", tcp_hello),
    ("tcp_frames", tcp_frames),
    ("tcp_region_import", tcp_region_import),
    ("shm_export_header", shm_export_header),
];

/// Valid inputs of every target, made by the real encoders (`(target, name, bytes)`):
/// the seeds of the committed corpus, and what the replay test mutates.
pub fn seeds() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    let inv = Invitation {
        token: [7; 16],
        listener: 0,
        connector: 1,
        tag: 42,
        instance: 3,
        addrs: vec![
            "127.0.0.1:4000".parse().expect("address"),
            "[::1]:4001".parse().expect("address"),
        ],
    };
    let hello = Hello {
        token: [7; 16],
        connector: 1,
        listener: 0,
        tag: 42,
        instance: 9,
    };
    let mut frames = Vec::new();
    for h in [
        Header::Write {
            region: 1,
            offset: 8,
            len: 4,
        },
        Header::Signal {
            region: 1,
            offset: 16,
            add: 1,
        },
        Header::Flush { seq: 5 },
        Header::Ack { seq: 5 },
        Header::Read {
            region: 1,
            offset: 8,
            len: 4,
        },
        Header::ReadData { seq: 1, len: 4 },
    ] {
        frames.extend_from_slice(&h.encode());
        if matches!(h, Header::Write { .. } | Header::ReadData { .. }) {
            frames.extend_from_slice(b"data");
        }
    }
    frames.extend_from_slice(&crate::tcp::wire::error_frame("refused: test"));
    let table = crate::tcp::regions::RegionTable::new(11);
    let local = table.register(crate::tcp::regions::Mem::Host(
        crate::tcp::hostmem::HostBytes::alloc(64),
    ));
    let export = crate::tcp::regions::export(&local);
    let mut import = export.len.to_le_bytes().to_vec();
    import.extend_from_slice(&export.bytes);
    let shm = crate::memory::ShmRegion::alloc(64)
        .and_then(|r| r.export())
        .map(|e| e.bytes)
        .unwrap_or_default();
    vec![
        ("tcp_invitation", "two-addrs", inv.encode()),
        ("tcp_hello", "hello", hello.encode().to_vec()),
        ("tcp_frames", "every-kind", frames),
        ("tcp_region_import", "region", import),
        ("shm_export_header", "header", shm),
    ]
}
