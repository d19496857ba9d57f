//! Settings of the NCCL drop-in (`libcommhal_nccl.so`, crate `commhal-nccl`). The GPU
//! communicator under it also reads the [`super::gpu`] settings.

use super::{FileKey, Kind, SetBy, Setting, Unit};

/// `COMMHAL_NCCL_FALLBACK`: the real NCCL, for what commhal does not run.
pub static NCCL_FALLBACK: Setting = Setting {
    env: "COMMHAL_NCCL_FALLBACK",
    key: FileKey::None,
    kind: Kind::Text("the path of NCCL 2.28's libnccl.so.2"),
    default: "",
    set_by: SetBy::User,
    read_by: "nccl",
    doc: "the real libnccl.so.2: every communicator then also makes an NCCL communicator, and the calls commhal does not run go there (unset: they fail with ncclInvalidUsage)",
};

/// `COMMHAL_DEBUG`: the drop-in's per-call log.
pub static DEBUG: Setting = Setting {
    env: "COMMHAL_DEBUG",
    key: FileKey::None,
    kind: Kind::Flag,
    default: "0",
    set_by: SetBy::User,
    read_by: "nccl",
    doc: "1: the NCCL drop-in logs every call to stderr with where it ran (commhal and its buffer path, or NCCL and why)",
};

/// `COMMHAL_NCCL_PROFILE`: the drop-in's per-function call census.
pub static NCCL_PROFILE: Setting = Setting {
    env: "COMMHAL_NCCL_PROFILE",
    key: FileKey::None,
    kind: Kind::Flag,
    default: "0",
    set_by: SetBy::User,
    read_by: "nccl",
    doc: "1: the NCCL drop-in counts the calls of each exported function and the host time spent inside them, and writes the table to stderr when a communicator is destroyed and at exit (where an application's per-call host time goes)",
};

/// `COMMHAL_NCCL_BUFFER_BYTES`: the drop-in's registered regions.
pub static NCCL_BUFFER_BYTES: Setting = Setting {
    env: "COMMHAL_NCCL_BUFFER_BYTES",
    key: FileKey::None,
    kind: Kind::Number {
        min: 1,
        max: u64::MAX,
        unit: Unit::Bytes,
    },
    default: "67108864",
    set_by: SetBy::User,
    read_by: "nccl",
    doc: "size of each communicator's registered input, output and staging regions: the largest call that can be staged (unaligned pointers, cuMem VMM memory) and the portion in which the ring all-reduce runs larger calls; every rank the same",
};

/// `COMMHAL_NCCL_WAIT_S`: the bound of the drop-in's waits.
pub static NCCL_WAIT_S: Setting = Setting {
    env: "COMMHAL_NCCL_WAIT_S",
    key: FileKey::None,
    kind: Kind::Number {
        min: 1,
        max: u64::MAX,
        unit: Unit::Seconds,
    },
    default: "600",
    set_by: SetBy::User,
    read_by: "nccl",
    doc: "how long a device wait or a bootstrap step of the NCCL drop-in may last before the call fails (a dead peer is seen at once: this bounds only a peer that is alive but never calls)",
};

/// `COMMHAL_NCCL_DISABLE`: everything on the fallback NCCL.
pub static NCCL_DISABLE: Setting = Setting {
    env: "COMMHAL_NCCL_DISABLE",
    key: FileKey::None,
    kind: Kind::Flag,
    default: "0",
    set_by: SetBy::User,
    read_by: "nccl",
    doc: "1: commhal runs nothing and every communicator is the fallback NCCL's (needs COMMHAL_NCCL_FALLBACK): an A/B switch without changing the preload; every rank the same",
};

/// `COMMHAL_BOOTSTRAP_IP`: the drop-in's bootstrap address.
pub static BOOTSTRAP_IP: Setting = Setting {
    env: "COMMHAL_BOOTSTRAP_IP",
    key: FileKey::None,
    kind: Kind::Text("an IP address"),
    default: "",
    set_by: SetBy::User,
    read_by: "nccl",
    doc: "the address rank 0's bootstrap listens on, fixed when ncclGetUniqueId runs (unset: the address of the default route, else loopback)",
};

/// `COMMHAL_DROPIN_LIB`: the library the drop-in's PyTorch test preloads.
pub static DROPIN_LIB: Setting = Setting {
    env: "COMMHAL_DROPIN_LIB",
    key: FileKey::None,
    kind: Kind::Text("the path of libcommhal_nccl.so"),
    default: ".gpu/libcommhal_nccl.so",
    set_by: SetBy::User,
    read_by: "nccl (tests/torch_dropin.py)",
    doc: "the drop-in library `nccl/tests/torch_dropin.py --mode ctypes` loads, where --lib does not say",
};

/// This component's settings, in the order the docs list them.
pub const ALL: &[&Setting] = &[
    &NCCL_FALLBACK,
    &DEBUG,
    &NCCL_PROFILE,
    &NCCL_BUFFER_BYTES,
    &NCCL_WAIT_S,
    &NCCL_DISABLE,
    &BOOTSTRAP_IP,
    &DROPIN_LIB,
];
