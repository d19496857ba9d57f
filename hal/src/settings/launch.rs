//! Settings of launch and bootstrap: where a rank learns its place and finds its peers.
//!
//! Only the `COMMHAL_*` names are declared here. A rank's identity may also come from
//! torchrun (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`), Open MPI (`OMPI_COMM_WORLD_*`) or Slurm
//! (`SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`), and the rendezvous from
//! `MASTER_ADDR` / `MASTER_PORT`; `hal/src/bootstrap/env.rs` says which wins.

use super::{FileKey, Kind, SetBy, Setting, Unit};

/// `COMMHAL_RANK`: this process's rank.
pub static RANK: Setting = Setting {
    env: "COMMHAL_RANK",
    key: FileKey::None,
    kind: Kind::Number {
        min: 0,
        max: u32::MAX as u64,
        unit: Unit::Count,
    },
    default: "",
    set_by: SetBy::Launcher,
    read_by: "hal, conformance",
    doc: "this process's rank, below COMMHAL_WORLD_SIZE; set both or neither (unset: torchrun's, Open MPI's or Slurm's variables)",
};

/// `COMMHAL_WORLD_SIZE`: the number of ranks.
pub static WORLD_SIZE: Setting = Setting {
    env: "COMMHAL_WORLD_SIZE",
    key: FileKey::None,
    kind: Kind::Number {
        min: 1,
        max: u32::MAX as u64,
        unit: Unit::Count,
    },
    default: "",
    set_by: SetBy::Launcher,
    read_by: "hal",
    doc: "number of ranks in the job; set with COMMHAL_RANK (unset: torchrun's, Open MPI's or Slurm's variables)",
};

/// `COMMHAL_LOCAL_RANK`: this process's rank among those of its host.
pub static LOCAL_RANK: Setting = Setting {
    env: "COMMHAL_LOCAL_RANK",
    key: FileKey::None,
    kind: Kind::Number {
        min: 0,
        max: u32::MAX as u64,
        unit: Unit::Count,
    },
    default: "",
    set_by: SetBy::Launcher,
    read_by: "hal, conformance, cuda-nvlink, cuda-coll",
    doc: "this process's rank among the ranks of its host; GPU programs drive device LOCAL_RANK modulo the device count (unset: the launcher's local rank, else the rank)",
};

/// `COMMHAL_NODE`: this rank's virtual node.
pub static NODE: Setting = Setting {
    env: "COMMHAL_NODE",
    key: FileKey::None,
    kind: Kind::Number {
        min: 0,
        max: u32::MAX as u64,
        unit: Unit::Count,
    },
    default: "0",
    set_by: SetBy::User,
    read_by: "algorithms, cuda-coll",
    doc: "virtual node of this rank: ranks on different nodes never map each other's memory and talk over port channels, to run multi-node algorithms on one host (CommOptions::node wins); on GPUs it splits the plan algorithms only (the hand kernels still map every GPU of the host)",
};

/// `COMMHAL_UNIQUE_ID`: the rendezvous of `commhal launch`.
pub static UNIQUE_ID: Setting = Setting {
    env: "COMMHAL_UNIQUE_ID",
    key: FileKey::None,
    kind: Kind::Text("commhal1-HEX@IP:PORT (HEX: 32 hex digits), the text of a UniqueId"),
    default: "",
    set_by: SetBy::Launcher,
    read_by: "hal",
    doc: "the root's address and the job's random secret: only holders of the id can join (preferred; unset: MASTER_ADDR and MASTER_PORT)",
};

/// `COMMHAL_MASTER_PORT`: the root's port for a `MASTER_ADDR` rendezvous.
pub static MASTER_PORT: Setting = Setting {
    env: "COMMHAL_MASTER_PORT",
    key: FileKey::None,
    kind: Kind::Number {
        min: 1,
        max: u16::MAX as u64,
        unit: Unit::Count,
    },
    default: "",
    set_by: SetBy::User,
    read_by: "hal",
    doc: "port rank 0 listens on when the ranks meet at MASTER_ADDR (unset: MASTER_PORT + 1, as torchrun's TCPStore holds MASTER_PORT)",
};

/// `COMMHAL_SECRET`: the job secret for a `MASTER_ADDR` rendezvous.
pub static SECRET: Setting = Setting {
    env: "COMMHAL_SECRET",
    key: FileKey::None,
    kind: Kind::Text("32 hex digits, e.g. from `openssl rand -hex 16`"),
    default: "",
    set_by: SetBy::User,
    read_by: "hal",
    doc: "the job secret every rank presents when the ranks meet at MASTER_ADDR, the same on every rank (unset: derived from the launcher's variables, which others on the cluster can read)",
};

/// `COMMHAL_BOOTSTRAP_TIMEOUT_MS`: the bound of every bootstrap step.
pub static BOOTSTRAP_TIMEOUT_MS: Setting = Setting {
    env: "COMMHAL_BOOTSTRAP_TIMEOUT_MS",
    key: FileKey::None,
    kind: Kind::Number {
        min: 1,
        max: 86_400_000,
        unit: Unit::Millis,
    },
    default: "60000",
    set_by: SetBy::User,
    read_by: "hal",
    doc: "how long a bootstrap step (joining the root, an exchange, a barrier) may last before it fails naming the rank that did not answer",
};

/// `COMMHAL_HOST_TCP_ADDR`: the address `host-tcp` offers peers on other hosts.
pub static HOST_TCP_ADDR: Setting = Setting {
    env: "COMMHAL_HOST_TCP_ADDR",
    key: FileKey::None,
    kind: Kind::Text("an IP address of this host"),
    default: "",
    set_by: SetBy::User,
    read_by: "host-emu (host-tcp)",
    doc: "address host-tcp listens on and offers to ranks on other hosts (unset: all IPv4 interfaces, offering the addresses the host name resolves to)",
};

/// `COMMHAL_LAUNCH_PREFIX`: this rank's stdout lines are prefixed.
pub static LAUNCH_PREFIX: Setting = Setting {
    env: "COMMHAL_LAUNCH_PREFIX",
    key: FileKey::None,
    kind: Kind::Flag,
    default: "0",
    set_by: SetBy::Launcher,
    read_by: "cli",
    doc: "1: commhal launch prefixes this rank's output lines with `[rank K]`, so the benchmark refuses --json and --csv on stdout",
};

/// This component's settings, in the order the docs list them.
pub const ALL: &[&Setting] = &[
    &RANK,
    &WORLD_SIZE,
    &LOCAL_RANK,
    &NODE,
    &UNIQUE_ID,
    &MASTER_PORT,
    &SECRET,
    &BOOTSTRAP_TIMEOUT_MS,
    &HOST_TCP_ADDR,
    &LAUNCH_PREFIX,
];
