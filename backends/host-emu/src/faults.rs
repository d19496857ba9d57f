//! Test-only fault injection (filled in later).

/// Faults host-emu can inject so the conformance suite can be seen to fail.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Faults {}

impl Faults {
    /// True when any fault is set.
    pub fn any(&self) -> bool {
        false
    }
}
