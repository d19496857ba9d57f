//! Entry points for the fuzz targets (`fuzz/`, outside the workspace) and for the
//! corpus replay test of the ordinary test suite: each feeds arbitrary bytes to one
//! decoder of data that another rank's process wrote into the call table (shared
//! memory). A decoder may refuse the bytes; it must never panic. Not part of the API.

use crate::comm::p2p::{parse_posting, posting};
use crate::peers::{BufDesc, Entry, SIGNATURE_BYTES, Signature, Where};

/// This process's nonce and rank 1's registered regions, as the targets pass them.
const OWN: u64 = 0x0123_4567_89ab_cdef;
const REGS: (u64, u64) = (0x7f00_0000_0000, 0x7f00_1000_0000);

/// A call-table entry as a rank decodes a peer's (`Entry::decode`), its signature
/// compared with a reference, its buffers checked as `Imports::resolve` checks them;
/// the first 24 bytes also as a signature of the signature log.
pub fn coll_entry(data: &[u8]) {
    if let Some(b) = data.first_chunk::<SIGNATURE_BYTES>() {
        let _ = Signature::from_bytes(b).mismatch(&reference(), 1, 0);
    }
    if let Ok(e) = Entry::decode(data, 1) {
        let _ = reference().mismatch(&e.sig, 1, 0);
        let _ = e.input.check(1, e.nonce, OWN, REGS);
        let _ = e.output.check(1, e.nonce, OWN, REGS);
    }
}

/// A point-to-point posting (`parse_posting`), its buffer checked as `Imports::resolve`
/// checks it.
pub fn coll_posting(data: &[u8]) {
    if let Ok((nonce, _, at)) = parse_posting(data, 1) {
        let _ = at.check(1, nonce, OWN, REGS);
    }
}

fn reference() -> Signature {
    Signature {
        coll: 0,
        dtype: 7,
        op: 0,
        scalar: 0,
        in_place: false,
        root: 0,
        count: 1 << 20,
    }
}

/// A fuzz target: its name and the function that decodes one input.
pub type Target = (&'static str, fn(&[u8]));

/// Every target of this crate, by name (the corpus folders under `fuzz/corpus/`).
pub const TARGETS: &[Target] = &[("coll_entry", coll_entry), ("coll_posting", coll_posting)];

/// Valid inputs of every target, made by the real encoders (`(target, name, bytes)`):
/// the seeds of the committed corpus, and what the replay test mutates.
pub fn seeds() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    let ipc = BufDesc {
        at: Where::Ipc {
            id: 7,
            base: 0x7f20_0000_0000,
            size: 1 << 20,
            handle: [0x5a; 64],
        },
        off: 4096,
    };
    let staged = Entry {
        sig: reference(),
        nonce: 42,
        input: BufDesc {
            at: Where::RegInput,
            off: 64,
        },
        output: BufDesc {
            at: Where::RegOutput,
            off: 128,
        },
    };
    let mapped = Entry {
        input: ipc,
        output: BufDesc { off: 0, ..ipc },
        ..staged
    };
    vec![
        ("coll_entry", "staged", staged.encode()),
        ("coll_entry", "mapped", mapped.encode()),
        ("coll_posting", "ipc", posting(42, 4096, &ipc)),
    ]
}
