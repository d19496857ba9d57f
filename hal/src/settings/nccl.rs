//! Settings of nccl.

#[allow(unused_imports)]
use super::{FileKey, Kind, SetBy, Setting, Unit};

/// This component's settings, in the order the docs list them.
pub const ALL: &[&Setting] = &[];
