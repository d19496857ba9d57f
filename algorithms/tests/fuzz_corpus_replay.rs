//! The fuzz targets of this crate replayed on the stable toolchain (see
//! [`commhal_hal::fuzzing::replay_corpus`]).

use std::path::PathBuf;

use commhal_algorithms::fuzzing::{TARGETS, seeds};
use commhal_hal::fuzzing::replay_corpus;

#[test]
fn every_decoder_survives_its_corpus_and_mutations() {
    let corpus = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus");
    replay_corpus(&corpus, TARGETS, &seeds());
}
