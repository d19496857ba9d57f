//! Settings of the host communicator, its waits, plans and backend selection.

use super::{FileKey, Kind, SetBy, Setting, Unit};

/// `COMMHAL_WAIT_TIMEOUT_MS`: the bound of every host wait.
pub static WAIT_TIMEOUT_MS: Setting = Setting {
    env: "COMMHAL_WAIT_TIMEOUT_MS",
    key: FileKey::None,
    kind: Kind::Number {
        min: 1,
        max: 86_400_000,
        unit: Unit::Millis,
    },
    default: "30000",
    set_by: SetBy::User,
    read_by: "channels",
    doc: "how long a host wait (semaphore, FIFO, plan step) may last before the call fails with a timeout naming what it waited for",
};

/// `COMMHAL_WAIT_SPIN_US`: the spin phase of host waits.
pub static WAIT_SPIN_US: Setting = Setting {
    env: "COMMHAL_WAIT_SPIN_US",
    key: FileKey::None,
    kind: Kind::Number {
        min: 0,
        max: 10_000_000,
        unit: Unit::Micros,
    },
    default: "100",
    set_by: SetBy::User,
    read_by: "channels",
    doc: "how long a host wait spins before yielding (unset: 100 µs when every local rank has a core, else 2 µs)",
};

/// `COMMHAL_WAIT_YIELD_US`: the yield phase of host waits.
pub static WAIT_YIELD_US: Setting = Setting {
    env: "COMMHAL_WAIT_YIELD_US",
    key: FileKey::None,
    kind: Kind::Number {
        min: 0,
        max: 10_000_000,
        unit: Unit::Micros,
    },
    default: "0",
    set_by: SetBy::User,
    read_by: "channels",
    doc: "how long a host wait yields its core before blocking (unset: 0 when every local rank has a core, else 200 µs)",
};

/// This component's settings, in the order the docs list them.
pub const ALL: &[&Setting] = &[&WAIT_TIMEOUT_MS, &WAIT_SPIN_US, &WAIT_YIELD_US];
