//! Entry points for the fuzz targets (`fuzz/`, outside the workspace) and for the
//! corpus replay test of the ordinary test suite: each feeds arbitrary bytes to one
//! decoder of data that comes from another rank (through the bootstrap) or from device
//! code. A decoder may refuse the bytes; it must never panic. Not part of the API.

use std::cell::RefCell;

use commhal_backend_host_emu::HostEmu;
use commhal_channels::fifo::{MAX_MEMORIES, MAX_SEMAPHORES, VALID};
use commhal_channels::{ProxyContext, ProxySemaphore, Trigger};
use commhal_hal::bootstrap::InProcBootstrap;
use commhal_hal::transport::{PeerContext, PortMapped};
use commhal_hal::{Device, Endpoint};

use crate::comm::{Signature, decode_endpoints, ranks_per_node};

/// A call signature as the host communicator decodes every rank's (all-gathered).
pub fn comm_signature(data: &[u8]) {
    if let Some(s) = Signature::from_bytes(data) {
        let _ = s.describe();
    }
}

/// Byte that splits a `comm_endpoints` input into the ranks' blobs (never in JSON).
const BLOB_SEPARATOR: u8 = 0xff;

/// The communicator's endpoint exchange: `data` split at `0xff` into every rank's blob
/// (JSON), decoded as `Communicator::new` decodes them, then the node layout it derives.
pub fn comm_endpoints(data: &[u8]) {
    let blobs: Vec<Vec<u8>> = data
        .split(|&b| b == BLOB_SEPARATOR)
        .map(<[u8]>::to_vec)
        .collect();
    if let Ok(endpoints) = decode_endpoints(&blobs) {
        let _ = ranks_per_node(&endpoints, blobs.len() as u32);
    }
}

/// Bytes of the memories the `proxy_trigger` target's proxy holds.
const PROXY_MEMORY: u64 = 4096;

/// A proxy with one host-emu port, one local and one remote memory, and semaphores
/// that name a good counter, the last one, a missing port, a missing memory and an
/// unaligned offset.
fn proxy() -> ProxyContext<HostEmu> {
    let t = HostEmu::new();
    let boots = InProcBootstrap::create(2);
    let (e0, e1) = (
        Endpoint::this_process(0, Device::HOST),
        Endpoint::this_process(1, Device::HOST),
    );
    let ctx = PeerContext {
        bootstrap: &boots[0],
        local: &e0,
        remote: &e1,
        tag: 1,
    };
    let region = || commhal_backend_host_emu::ShmRegion::alloc(PROXY_MEMORY).expect("shm region");
    let peer = region();
    let sem = |port, remote, offset| ProxySemaphore {
        port,
        remote,
        offset,
    };
    ProxyContext {
        ports: vec![PortMapped::connect(&t, &ctx).expect("host-emu port")],
        locals: vec![PortMapped::register(&t, &region()).expect("register")],
        remotes: vec![
            PortMapped::import(&t, PortMapped::export(&t, &peer).expect("export")).expect("import"),
        ],
        semaphores: vec![
            sem(0, 0, 0),
            sem(0, 0, PROXY_MEMORY - 8),
            sem(1, 0, 0),
            sem(0, 1, 0),
            sem(0, 0, 4),
        ],
    }
}

thread_local! {
    static PROXY: RefCell<ProxyContext<HostEmu>> = RefCell::new(proxy());
}

/// FIFO triggers (16 bytes each: the two words device code writes, little-endian) as
/// the host proxy takes them: a slot with the valid bit is decoded, must encode back to
/// the same words when its flags are valid, and is performed by the standard handler
/// (ids looked up, offsets and sizes checked against the memories).
pub fn proxy_trigger(data: &[u8]) {
    PROXY.with_borrow_mut(|proxy| {
        for slot in data.chunks_exact(16) {
            let word = |at: usize| {
                let mut b = [0u8; 8];
                b.copy_from_slice(&slot[at..at + 8]);
                u64::from_le_bytes(b)
            };
            let w = [word(0), word(8)];
            if w[1] & VALID == 0 {
                continue;
            }
            let t = Trigger::decode(w);
            assert!(
                t.dst_memory < MAX_MEMORIES
                    && t.src_memory < MAX_MEMORIES
                    && t.semaphore < MAX_SEMAPHORES
            );
            if t.flags != 0 {
                assert_eq!(t.encode().ok(), Some(w), "{t:?} does not encode back");
            }
            let _ = proxy.perform(&t);
        }
    });
}

/// A fuzz target: its name and the function that decodes one input.
pub type Target = (&'static str, fn(&[u8]));

/// Every target of this crate, by name (the corpus folders under `fuzz/corpus/`).
pub const TARGETS: &[Target] = &[
    ("comm_signature", comm_signature),
    ("comm_endpoints", comm_endpoints),
    ("proxy_trigger", proxy_trigger),
];

/// Valid inputs of every target, made by the real encoders (`(target, name, bytes)`):
/// the seeds of the committed corpus, and what the replay test mutates.
pub fn seeds() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    let sig = Signature {
        collective: 0,
        count: 1 << 20,
        dtype: 1,
        op: 0,
        root: 0,
        in_place: 1,
        send: 3,
        recv: 3,
    };
    // four ranks on two nodes of one host
    let mut endpoints = Vec::new();
    for rank in 0..4u32 {
        let mut e = Endpoint::this_process(rank, Device::HOST);
        e.host = "host-a/boot".into();
        e.pid = 1000 + rank;
        e.node = rank / 2;
        if !endpoints.is_empty() {
            endpoints.push(BLOB_SEPARATOR);
        }
        endpoints.extend_from_slice(&serde_json::to_vec(&e).unwrap_or_default());
    }
    let mut triggers = Vec::new();
    for t in [
        Trigger::put(0, 0, 64, 0, 128, 256),
        Trigger::signal(1),
        Trigger::flush(0),
        Trigger {
            flags: 7,
            ..Trigger::put(0, 0, 0, 0, 0, 8)
        },
    ] {
        for w in t.encode().unwrap_or_default() {
            triggers.extend_from_slice(&w.to_le_bytes());
        }
    }
    vec![
        ("comm_signature", "allreduce", sig.to_bytes()),
        ("comm_endpoints", "two-nodes", endpoints),
        ("proxy_trigger", "every-kind", triggers),
    ]
}
