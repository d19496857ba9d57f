//! placeholder
pub fn link() {}
