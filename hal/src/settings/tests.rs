//! Variables the test suite sets for itself and for the child processes it starts. They
//! are not settings a user should touch; they are declared so that every `COMMHAL_*`
//! name the code reads is in one table.

#[allow(unused_imports)]
use super::{FileKey, Kind, SetBy, Setting, Unit};

/// `COMMHAL_RERENDER`: tests that compare a committed file with its rendering write the
/// rendering over it instead of failing.
pub static RERENDER: Setting = Setting {
    env: "COMMHAL_RERENDER",
    key: FileKey::None,
    kind: Kind::Flag,
    default: "0",
    set_by: SetBy::Tests,
    read_by: "hal, cuda-coll (tests)",
    doc: "1: tests that compare a committed file (docs/tuning.md's table, the GPU tuning file) with its rendering overwrite it instead of failing; then check git diff",
};

/// This component's settings, in the order the docs list them.
pub const ALL: &[&Setting] = &[&RERENDER];
