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
    doc: "how long a host wait spins before yielding (unset: 100 µs when every local rank has a core, else 0: one check, then yield)",
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

/// `COMMHAL_HOST_TCP_SPIN_US`: how long host-tcp's receivers poll after traffic.
pub static HOST_TCP_SPIN_US: Setting = Setting {
    env: "COMMHAL_HOST_TCP_SPIN_US",
    key: FileKey::None,
    kind: Kind::Number {
        min: 0,
        max: 10_000_000,
        unit: Unit::Micros,
    },
    default: "2000",
    set_by: SetBy::User,
    read_by: "host-emu (host-tcp)",
    doc: "how long a host-tcp receiver thread keeps polling its socket (non-blocking, yielding its core between polls) after the last bytes arrived, before it blocks in a read the kernel must wake it from (0: always block)",
};

/// `COMMHAL_BACKENDS`: which backends, in which order.
pub static BACKENDS: Setting = Setting {
    env: "COMMHAL_BACKENDS",
    key: FileKey::Config("backends"),
    kind: Kind::Text("backend names separated by commas, most preferred first"),
    default: "",
    set_by: SetBy::User,
    read_by: "hal, conformance",
    doc: "the backends to use, in order of preference (a --backends flag wins; unset: COMMHAL_CONFIG's list, else every available backend ranked by reach)",
};

/// `COMMHAL_CONFIG`: the configuration file.
pub static CONFIG: Setting = Setting {
    env: "COMMHAL_CONFIG",
    key: FileKey::None,
    kind: Kind::Text("path of a TOML file"),
    default: "",
    set_by: SetBy::User,
    read_by: "hal",
    doc: "file with a `backends = [...]` list and `[backend.NAME]` option tables (unknown keys are errors)",
};

/// `COMMHAL_PLUGIN_PATH`: where backend plugins are found.
pub static PLUGIN_PATH: Setting = Setting {
    env: "COMMHAL_PLUGIN_PATH",
    key: FileKey::None,
    kind: Kind::Text("files and directories separated by `:`"),
    default: "",
    set_by: SetBy::User,
    read_by: "hal",
    doc: "backend plugins to load: a file entry is loaded whatever its name, a directory contributes its `libcommhal_*plugin*.so` files (unset: none)",
};

/// `COMMHAL_ALGO`: algorithm overrides of the host communicator.
pub static ALGO: Setting = Setting {
    env: "COMMHAL_ALGO",
    key: FileKey::None,
    kind: Kind::Text("collective:algorithm pairs separated by commas, e.g. allreduce:ring"),
    default: "",
    set_by: SetBy::User,
    read_by: "algorithms",
    doc: "the host communicator's algorithm per collective, instead of the tuning table's choice (CommOptions::algo wins)",
};

/// `COMMHAL_LOG`: what the `commhal` program logs.
pub static LOG: Setting = Setting {
    env: "COMMHAL_LOG",
    key: FileKey::None,
    kind: Kind::Text(
        "a tracing filter: error, warn, info, debug, trace, or target=level pairs separated by commas",
    ),
    default: "warn",
    set_by: SetBy::User,
    read_by: "cli",
    doc: "which log lines the commhal program writes to stderr",
};

/// `COMMHAL_HOST_EMU_FAULTS`: host-emu's test-only fault injection.
pub static HOST_EMU_FAULTS: Setting = Setting {
    env: "COMMHAL_HOST_EMU_FAULTS",
    key: FileKey::None,
    kind: Kind::Text(
        "faults separated by commas: signal-before-data, relaxed-signal, early-flush, drop-every-nth-trigger=N, detached-mapping, detached-tail-page, switch-drop-member",
    ),
    default: "",
    set_by: SetBy::Tests,
    read_by: "host-emu",
    doc: "test only: host-emu breaks the guarantees it claims, so the conformance suite can be seen to fail (the `faults` option of `[backend.host-emu]` wins)",
};

/// This component's settings, in the order the docs list them.
pub const ALL: &[&Setting] = &[
    &WAIT_TIMEOUT_MS,
    &WAIT_SPIN_US,
    &WAIT_YIELD_US,
    &HOST_TCP_SPIN_US,
    &BACKENDS,
    &CONFIG,
    &PLUGIN_PATH,
    &ALGO,
    &LOG,
    &HOST_EMU_FAULTS,
];
