//! Settings of the ib-verbs backend and of its stub verbs provider. The options of the
//! `[backend.ib-verbs]` table of `COMMHAL_CONFIG` (`library`, `device`, `port`,
//! `gid_index`, `flush_timeout_ms`) win over these variables.

use super::{FileKey, Kind, SetBy, Setting, Unit};

/// `COMMHAL_IBVERBS_LIB`: the libibverbs to load.
pub static LIB: Setting = Setting {
    env: "COMMHAL_IBVERBS_LIB",
    key: FileKey::None,
    kind: Kind::Text("path of a libibverbs shared library"),
    default: "libibverbs.so.1",
    set_by: SetBy::User,
    read_by: "ib-verbs",
    doc: "the verbs library ib-verbs loads, a path or a name the loader searches for (the stub provider in tests; the `library` option wins)",
};

/// `COMMHAL_IBVERBS_DEVICE`: the RDMA device to use.
pub static DEVICE: Setting = Setting {
    env: "COMMHAL_IBVERBS_DEVICE",
    key: FileKey::None,
    kind: Kind::Text("an RDMA device name as ibv_devices lists it, e.g. mlx5_0"),
    default: "",
    set_by: SetBy::User,
    read_by: "ib-verbs",
    doc: "the device ib-verbs opens (unset: the first device with an active port; the `device` option wins)",
};

/// `COMMHAL_IBVERBS_PORT`: the device port to use.
pub static PORT: Setting = Setting {
    env: "COMMHAL_IBVERBS_PORT",
    key: FileKey::None,
    kind: Kind::Number {
        min: 0,
        max: 255,
        unit: Unit::Count,
    },
    default: "",
    set_by: SetBy::User,
    read_by: "ib-verbs",
    doc: "the port of the device ib-verbs uses (unset: the first active one; the `port` option wins)",
};

/// `COMMHAL_IBVERBS_GID_INDEX`: the source GID of RoCE ports.
pub static GID_INDEX: Setting = Setting {
    env: "COMMHAL_IBVERBS_GID_INDEX",
    key: FileKey::None,
    kind: Kind::Number {
        min: 0,
        max: 255,
        unit: Unit::Count,
    },
    default: "",
    set_by: SetBy::User,
    read_by: "ib-verbs",
    doc: "GID index ib-verbs addresses the port by, as show_gids lists them (unset: on RoCE the first RoCE v2 GID, else the first IPv4-mapped, else the first non-zero; the `gid_index` option wins)",
};

/// `COMMHAL_IBVERBS_FLUSH_TIMEOUT_MS`: the bound of a port flush.
pub static FLUSH_TIMEOUT_MS: Setting = Setting {
    env: "COMMHAL_IBVERBS_FLUSH_TIMEOUT_MS",
    key: FileKey::None,
    kind: Kind::Number {
        min: 1,
        max: 86_400_000,
        unit: Unit::Millis,
    },
    default: "30000",
    set_by: SetBy::User,
    read_by: "ib-verbs",
    doc: "how long an ib-verbs flush (or a post on a full send queue) waits for completions before it fails (the `flush_timeout_ms` option wins)",
};

/// `COMMHAL_IBVERBS_STUB_DIR`: where the stub provider keeps its shared files.
pub static STUB_DIR: Setting = Setting {
    env: "COMMHAL_IBVERBS_STUB_DIR",
    key: FileKey::None,
    kind: Kind::Text("a directory"),
    default: "",
    set_by: SetBy::Tests,
    read_by: "ibverbs-stub",
    doc: "directory of the stub verbs provider's shared files, one per emulated queue pair (unset: the temp dir)",
};

/// `COMMHAL_IBVERBS_STUB_DEVICES`: how many devices the stub lists.
pub static STUB_DEVICES: Setting = Setting {
    env: "COMMHAL_IBVERBS_STUB_DEVICES",
    key: FileKey::None,
    kind: Kind::Number {
        min: 0,
        max: 256,
        unit: Unit::Count,
    },
    default: "1",
    set_by: SetBy::Tests,
    read_by: "ibverbs-stub",
    doc: "number of devices the stub verbs provider lists (0: none, to test the no-device message)",
};

/// `COMMHAL_IBVERBS_STUB_LINK`: the link layer of the stub's port.
pub static STUB_LINK: Setting = Setting {
    env: "COMMHAL_IBVERBS_STUB_LINK",
    key: FileKey::None,
    kind: Kind::Choice(&["roce", "ib"]),
    default: "roce",
    set_by: SetBy::Tests,
    read_by: "ibverbs-stub",
    doc: "the stub verbs provider's link: roce (Ethernet, GIDs, LID 0) or ib (InfiniBand, LID 1)",
};

/// `COMMHAL_IBVERBS_STUB_FAULT`: a failure the stub injects.
pub static STUB_FAULT: Setting = Setting {
    env: "COMMHAL_IBVERBS_STUB_FAULT",
    key: FileKey::None,
    kind: Kind::Choice(&["wc-error", "dead-peer", "no-atomics", "dmabuf-refused"]),
    default: "",
    set_by: SetBy::Tests,
    read_by: "ibverbs-stub",
    doc: "a failure of the stub verbs provider: wc-error (every request fails at the responder), dead-peer (every peer looks gone), no-atomics (the device has none), dmabuf-refused (ibv_reg_dmabuf_mr fails)",
};

/// This component's settings, in the order the docs list them.
pub const ALL: &[&Setting] = &[
    &LIB,
    &DEVICE,
    &PORT,
    &GID_INDEX,
    &FLUSH_TIMEOUT_MS,
    &STUB_DIR,
    &STUB_DEVICES,
    &STUB_LINK,
    &STUB_FAULT,
];
