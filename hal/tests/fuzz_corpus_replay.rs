//! Stable-toolchain regression test for the fuzz targets of this crate (see `fuzz/`):
//! every decoder runs over the committed corpus (`fuzz/corpus/<target>/`, seeds and
//! any inputs the fuzzer found), over its seeds from the real encoders, and over
//! deterministic mutations of them (truncations, byte changes, random bytes). A panic
//! fails the test. `COMMHAL_FUZZ_WRITE_SEEDS=1` rewrites the seed files.

use std::path::PathBuf;

use commhal_hal::fuzzing::{TARGETS, seeds};

fn corpus() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus")
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

#[test]
fn every_decoder_survives_its_corpus_and_mutations() {
    let seeds = seeds();
    if std::env::var_os("COMMHAL_FUZZ_WRITE_SEEDS").is_some() {
        for (target, name, bytes) in &seeds {
            let dir = corpus().join(target);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(format!("seed-{name}")), bytes).unwrap();
        }
    }
    for (target, run) in TARGETS {
        let dir = corpus().join(target);
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
