//! Entry points for the fuzz targets (`fuzz/`, outside the workspace) and for the
//! corpus replay test that runs in the ordinary test suite: each feeds arbitrary
//! bytes to one decoder of data that comes from the network or from another process.
//! A decoder may refuse the bytes; it must never panic, hang or allocate without
//! bound. Not part of the API: names and signatures change with the decoders.

use crate::bootstrap::fdpass::{self, HEADER_LEN as FD_HEADER_LEN, HELLO_LEN as FD_HELLO_LEN};
use crate::bootstrap::wire::{self, Abort, Hello, Kind, PeerInfo};

/// Largest payload the frame target accepts (keeps fuzzing memory small; the real
/// limits are larger but checked the same way before allocating).
const MAX_FUZZ_PAYLOAD: u64 = 1 << 16;

/// Bootstrap frames (header + payload) read back to back from `data`, each payload
/// decoded as its kind's control message.
pub fn bootstrap_frames(data: &[u8]) {
    let mut r = data;
    while let Ok(Some(f)) = wire::read_frame(&mut r, MAX_FUZZ_PAYLOAD) {
        match f.kind {
            Kind::Hello => drop(wire::decode::<Hello>("hello", &f.payload)),
            Kind::Table => drop(wire::decode::<Vec<PeerInfo>>("table", &f.payload)),
            Kind::Abort => drop(wire::decode::<Abort>("abort", &f.payload)),
            Kind::Data | Kind::Leave => {}
        }
    }
}

/// A bootstrap hello payload (JSON), as the root and mesh listeners decode it from
/// unauthenticated connections.
pub fn bootstrap_hello(data: &[u8]) {
    if let Ok(h) = wire::decode::<Hello>("hello", data) {
        let _ = crate::bootstrap::unique_id::parse_secret_hex(&h.secret);
    }
}

/// The text form of a unique id (`COMMHAL_UNIQUE_ID`).
pub fn unique_id(data: &[u8]) {
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = s.parse::<crate::bootstrap::UniqueId>();
    }
}

/// A descriptor socket's hello (first bytes), then a message header (next bytes,
/// with the descriptor count taken from the last byte).
pub fn fd_messages(data: &[u8]) {
    if let Some(h) = data.get(..FD_HELLO_LEN) {
        let mut hello = [0u8; FD_HELLO_LEN];
        hello.copy_from_slice(h);
        let _ = fdpass::parse_hello(&hello, &[0; 16], 8);
        if let Some(&secret) = h.get(10..26).and_then(|s| <&[u8; 16]>::try_from(s).ok()) {
            let _ = fdpass::parse_hello(&hello, &secret, u32::MAX);
        }
    }
    let rest = data.get(FD_HELLO_LEN..).unwrap_or(&[]);
    if let Some(h) = rest.get(..FD_HEADER_LEN) {
        let mut header = [0u8; FD_HEADER_LEN];
        header.copy_from_slice(h);
        let nfds = rest.last().copied().unwrap_or(0) as usize;
        let _ = fdpass::parse_header(&header, nfds);
    }
}

/// An export message as [`crate::bootstrap::recv_export`] splits it.
pub fn export_message(data: &[u8]) {
    let _ = crate::bootstrap::parse_export_message(1, data);
}

/// A fuzz target: its name and the function that decodes one input.
pub type Target = (&'static str, fn(&[u8]));

/// Every target of this crate, by name (the corpus folders under `fuzz/corpus/`).
pub const TARGETS: &[Target] = &[
    ("bootstrap_frames", bootstrap_frames),
    ("bootstrap_hello", bootstrap_hello),
    ("unique_id", unique_id),
    ("fd_messages", fd_messages),
    ("export_message", export_message),
];

/// Valid inputs of every target, made by the real encoders (`(target, name, bytes)`):
/// the seeds of the committed corpus, and what the replay test mutates.
pub fn seeds() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    let secret = [0x5a; 16];
    let hello = Hello {
        rank: 1,
        size: 4,
        secret: crate::bootstrap::unique_id::hex(&secret),
        port: 4100,
        host: "host-a".into(),
    };
    let table = vec![
        PeerInfo {
            addr: "127.0.0.1:4100".into(),
            host: "host-a".into(),
        },
        PeerInfo {
            addr: "[::1]:4101".into(),
            host: "host-b".into(),
        },
    ];
    let abort = Abort {
        what: "rank 2 is gone".into(),
        millis: Some(5),
        origin: Some(2),
    };
    let mut frames = Vec::new();
    let hello_json = wire::encode(&hello);
    for (kind, payload) in [
        (Kind::Hello, hello_json.clone()),
        (Kind::Table, wire::encode(&table)),
        (Kind::Abort, wire::encode(&abort)),
        (Kind::Data, b"payload".to_vec()),
    ] {
        let _ = wire::write_frame(&mut frames, kind, 7, &payload);
    }
    let id = crate::bootstrap::UniqueId::with_secret(
        "127.0.0.1:29500".parse().expect("address"),
        secret,
    );
    let mut fd = Vec::with_capacity(FD_HELLO_LEN + FD_HEADER_LEN + 1);
    fd.extend_from_slice(b"CMFD");
    fd.extend_from_slice(&1u16.to_le_bytes());
    fd.extend_from_slice(&3u32.to_le_bytes());
    fd.extend_from_slice(&secret);
    fd.extend_from_slice(b"CMFD");
    fd.extend_from_slice(&1u16.to_le_bytes());
    fd.extend_from_slice(&[0, 0]);
    fd.extend_from_slice(&9u64.to_le_bytes());
    fd.extend_from_slice(&1u32.to_le_bytes());
    fd.extend_from_slice(&[0, 0, 0, 1]);
    let mut export = Vec::new();
    export.extend_from_slice(&8u32.to_le_bytes());
    export.extend_from_slice(b"host-emu");
    export.extend_from_slice(&4096u64.to_le_bytes());
    export.extend_from_slice(&1u32.to_le_bytes());
    export.extend_from_slice(&[1, 2, 3, 4]);
    vec![
        ("bootstrap_frames", "every-kind", frames),
        ("bootstrap_hello", "hello", hello_json),
        ("unique_id", "loopback", id.to_string().into_bytes()),
        ("fd_messages", "hello-and-header", fd),
        ("export_message", "host-emu", export),
    ]
}

/// The stable-toolchain regression run of `targets` (see `fuzz/`): every decoder over
/// the committed corpus in `corpus` (`<target>/`, seeds and any inputs the fuzzer
/// found), over its `seeds` from the real encoders, and over deterministic mutations of
/// them (truncations, byte changes, random bytes). A panic is the failure.
/// `COMMHAL_FUZZ_WRITE_SEEDS=1` rewrites the seed files first. Test support: it panics
/// on a failure, as a test does.
pub fn replay_corpus(
    corpus: &std::path::Path,
    targets: &[Target],
    seeds: &[(&'static str, &'static str, Vec<u8>)],
) {
    let write_seeds = crate::settings::tests::FUZZ_WRITE_SEEDS
        .flag()
        .unwrap_or_else(|e| panic!("{e}"));
    if write_seeds {
        for (target, name, bytes) in seeds {
            let dir = corpus.join(target);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(format!("seed-{name}")), bytes).unwrap();
        }
    }
    for (target, run) in targets {
        let dir = corpus.join(target);
        let files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        assert!(!files.is_empty(), "no corpus for {target}");
        for f in files {
            run(&std::fs::read(&f).unwrap());
        }
        for (i, (_, _, seed)) in seeds.iter().filter(|(t, _, _)| t == target).enumerate() {
            for m in mutations(seed, 0x9e37_79b9_7f4a_7c15 ^ i as u64) {
                run(&m);
            }
        }
    }
}

/// Truncations, single-byte changes and pseudo-random inputs derived from `seed`.
fn mutations(seed: &[u8], mut state: u64) -> Vec<Vec<u8>> {
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut out: Vec<Vec<u8>> = (0..=seed.len()).map(|n| seed[..n].to_vec()).collect();
    for i in 0..seed.len() {
        for v in [0x00, 0xff, seed[i] ^ 0x01, seed[i].wrapping_add(0x80)] {
            let mut m = seed.to_vec();
            m[i] = v;
            out.push(m);
        }
    }
    for _ in 0..200 {
        let len = (next() % (seed.len() as u64 * 2 + 8)) as usize;
        out.push((0..len).map(|_| next() as u8).collect());
        let mut m = seed.to_vec();
        for _ in 0..4 {
            if !m.is_empty() {
                let at = (next() % m.len() as u64) as usize;
                m[at] = next() as u8;
            }
        }
        out.push(m);
    }
    out
}
