//! Settings of the GPU components: the collectives of `cuda-coll` (the GPU tuning file's
//! thresholds and the switches of the GPU path), the CUDA backends (`cuda-rt`,
//! `cuda-nvlink`, `cuda-dma`) and the GPU benchmark (`commhal-gpu-bench`).
//!
//! Each threshold of the GPU tuning file is one setting: its variable and its key of the
//! file's `[ranks.N]` sections share the declaration, so the range a file's key must be
//! in and the range its variable must be in are the same. A variable beats the file. The
//! default of a threshold is the built-in value used where no file section gives one;
//! the embedded file usually does, per GPU and rank count.

use super::{FileKey, Kind, SetBy, Setting, Unit};

/// A byte threshold of the GPU tuning file, `0..=max` bytes.
const fn bytes(
    env: &'static str,
    key: &'static str,
    max: u64,
    default: &'static str,
    doc: &'static str,
) -> Setting {
    Setting {
        env,
        key: FileKey::Tuning(key),
        kind: Kind::Number {
            min: 0,
            max,
            unit: Unit::Bytes,
        },
        default,
        set_by: SetBy::User,
        read_by: "cuda-coll",
        doc,
    }
}

/// A count of the GPU tuning file, `min..=max`.
const fn count(
    env: &'static str,
    key: &'static str,
    min: u64,
    max: u64,
    default: &'static str,
    doc: &'static str,
) -> Setting {
    Setting {
        env,
        key: FileKey::Tuning(key),
        kind: Kind::Number {
            min,
            max,
            unit: Unit::Count,
        },
        default,
        set_by: SetBy::User,
        read_by: "cuda-coll",
        doc,
    }
}

/// `COMMHAL_GPU_TUNING`: a GPU tuning file instead of the embedded ones.
pub static GPU_TUNING: Setting = Setting {
    env: "COMMHAL_GPU_TUNING",
    key: FileKey::None,
    kind: Kind::Text(
        "the path of a GPU tuning TOML (the format of algorithms/tuning/gpu-cuda-h200.toml)",
    ),
    default: "",
    set_by: SetBy::User,
    read_by: "cuda-coll",
    doc: "a GPU tuning file used instead of the embedded ones (its `gpu` prefixes are not checked); unset: the embedded file for this GPU",
};

/// `COMMHAL_COLL_LL_MAX` / `allreduce_ll_max`.
pub static COLL_LL_MAX: Setting = bytes(
    "COMMHAL_COLL_LL_MAX",
    "allreduce_ll_max",
    u64::MAX,
    "131072",
    "largest all-reduce run with the one-shot LL kernel, also the size of the LL slots; 0: no LL kernels at all (the LL chunks neither)",
);

/// `COMMHAL_COLL_PUSH_MIN` / `allreduce_push_min`.
pub static COLL_PUSH_MIN: Setting = bytes(
    "COMMHAL_COLL_PUSH_MIN",
    "allreduce_push_min",
    u64::MAX,
    "33554432",
    "smallest all-reduce run with the push kernel (below it: two-shot); 0: never",
);

/// `COMMHAL_COLL_RS_PUSH_MIN` / `reducescatter_push_min`.
pub static COLL_RS_PUSH_MIN: Setting = bytes(
    "COMMHAL_COLL_RS_PUSH_MIN",
    "reducescatter_push_min",
    u64::MAX,
    "33554432",
    "smallest reduce-scatter (total input) run with the push kernel; 0: never; absent from the file: allreduce_push_min",
);

/// `COMMHAL_COLL_RS_PUSH_MAX` / `reducescatter_push_max`.
pub static COLL_RS_PUSH_MAX: Setting = bytes(
    "COMMHAL_COLL_RS_PUSH_MAX",
    "reducescatter_push_max",
    u64::MAX,
    "18446744073709551615",
    "largest reduce-scatter (total input) run with the push kernel; absent from the file: no limit",
);

/// `COMMHAL_COLL_LL_CHUNK_MAX` / `allgather_reducescatter_ll_chunk_max`.
pub static COLL_LL_CHUNK_MAX: Setting = bytes(
    "COMMHAL_COLL_LL_CHUNK_MAX",
    "allgather_reducescatter_ll_chunk_max",
    4 << 20,
    "65536",
    "largest per-rank chunk of an all-gather, reduce-scatter, broadcast, reduce, send/recv or all-to-all run with the LL16 kernels; 0: never",
);

/// `COMMHAL_COLL_BCAST_REDUCE_LL_MAX` / `broadcast_reduce_ll_max`.
pub static COLL_BCAST_REDUCE_LL_MAX: Setting = bytes(
    "COMMHAL_COLL_BCAST_REDUCE_LL_MAX",
    "broadcast_reduce_ll_max",
    u64::MAX,
    "18446744073709551615",
    "largest broadcast / reduce run with the LL16 kernels, never above the LL chunk size (absent from the file: that size)",
);

/// `COMMHAL_COLL_BCAST_SF_MIN` / `broadcast_sf_min`.
pub static COLL_BCAST_SF_MIN: Setting = bytes(
    "COMMHAL_COLL_BCAST_SF_MIN",
    "broadcast_sf_min",
    u64::MAX,
    "1048576",
    "smallest broadcast on 3+ ranks run as scatter + forward (below it the root stores into every output); the file's 0: never, the variable's 0: always",
);

/// `COMMHAL_COLL_BCAST_CHAIN_MIN` / `broadcast_chain_min`.
pub static COLL_BCAST_CHAIN_MIN: Setting = bytes(
    "COMMHAL_COLL_BCAST_CHAIN_MIN",
    "broadcast_chain_min",
    u64::MAX,
    "0",
    "smallest broadcast on 3+ ranks run as a pipelined chain r -> r+1 (16-byte multiples only); 0: never",
);

/// `COMMHAL_COLL_REDUCE_CHAIN_MIN` / `reduce_chain_min`.
pub static COLL_REDUCE_CHAIN_MIN: Setting = bytes(
    "COMMHAL_COLL_REDUCE_CHAIN_MIN",
    "reduce_chain_min",
    u64::MAX,
    "0",
    "smallest reduce run as a pipelined chain (16-byte multiples only); 0: never",
);

/// `COMMHAL_COLL_AG_NARROW_MIN` / `allgather_narrow_min`.
pub static COLL_AG_NARROW_MIN: Setting = bytes(
    "COMMHAL_COLL_AG_NARROW_MIN",
    "allgather_narrow_min",
    u64::MAX,
    "0",
    "smallest all-gather (the whole output) of the direct kernel run on at most 64 blocks; 0: never",
);

/// `COMMHAL_COLL_REDUCE_ALL_MAX` / `reduce_all_max`.
pub static COLL_REDUCE_ALL_MAX: Setting = bytes(
    "COMMHAL_COLL_REDUCE_ALL_MAX",
    "reduce_all_max",
    u64::MAX,
    "0",
    "largest reduce on 3+ ranks split over every rank, the root too (above: over the non-roots only); 0: never",
);

/// `COMMHAL_COLL_BCAST_LL63_MAX` / `broadcast_ll63_max`.
pub static COLL_BCAST_LL63_MAX: Setting = bytes(
    "COMMHAL_COLL_BCAST_LL63_MAX",
    "broadcast_ll63_max",
    u64::MAX,
    "0",
    "largest broadcast run as an LL63 chain (above the LL chunk size; 16-byte multiples only; with reduce_ll63_max it sizes the LL63 scratch); 0: never",
);

/// `COMMHAL_COLL_REDUCE_LL63_MAX` / `reduce_ll63_max`.
pub static COLL_REDUCE_LL63_MAX: Setting = bytes(
    "COMMHAL_COLL_REDUCE_LL63_MAX",
    "reduce_ll63_max",
    u64::MAX,
    "0",
    "largest reduce run as an LL63 chain (above the LL chunk size; 16-byte multiples only); 0: never",
);

/// `COMMHAL_COLL_AR_LL63_MIN` / `allreduce_ll63_min`.
pub static COLL_AR_LL63_MIN: Setting = bytes(
    "COMMHAL_COLL_AR_LL63_MIN",
    "allreduce_ll63_min",
    u64::MAX,
    "0",
    "smallest all-reduce of the LL63 window; 0: right above allreduce_ll_max",
);

/// `COMMHAL_COLL_AR_LL63_MAX` / `allreduce_ll63_max`.
pub static COLL_AR_LL63_MAX: Setting = bytes(
    "COMMHAL_COLL_AR_LL63_MAX",
    "allreduce_ll63_max",
    u64::MAX,
    "0",
    "largest all-reduce run over all pairs with LL63 packets, above allreduce_ll_max (16-byte multiples that fit the LL63 scratch); 0: never",
);

/// `COMMHAL_COLL_AR_LL63_ONESHOT_MAX` / `allreduce_ll63_oneshot_max`.
pub static COLL_AR_LL63_ONESHOT_MAX: Setting = bytes(
    "COMMHAL_COLL_AR_LL63_ONESHOT_MAX",
    "allreduce_ll63_oneshot_max",
    u64::MAX,
    "0",
    "largest all-reduce of the LL63 window run in one shot (every rank sends its whole input to every peer); 0: never",
);

/// `COMMHAL_COLL_AG_LL63_MIN` / `allgather_ll63_min`.
pub static COLL_AG_LL63_MIN: Setting = bytes(
    "COMMHAL_COLL_AG_LL63_MIN",
    "allgather_ll63_min",
    u64::MAX,
    "0",
    "smallest all-gather (the whole output) run with LL63 packets, before the LL16 kernel's sizes are asked; 0: right above the LL16 sizes",
);

/// `COMMHAL_COLL_AG_LL63_MAX` / `allgather_ll63_max`.
pub static COLL_AG_LL63_MAX: Setting = bytes(
    "COMMHAL_COLL_AG_LL63_MAX",
    "allgather_ll63_max",
    u64::MAX,
    "0",
    "largest all-gather (the whole output) run with LL63 packets, above the LL16 sizes (16-byte multiples per rank that fit the LL63 scratch); 0: never",
);

/// `COMMHAL_COLL_RS_LL63_MIN` / `reducescatter_ll63_min`.
pub static COLL_RS_LL63_MIN: Setting = bytes(
    "COMMHAL_COLL_RS_LL63_MIN",
    "reducescatter_ll63_min",
    u64::MAX,
    "0",
    "smallest reduce-scatter (the whole input: n x the per-rank chunk, nccl-tests' size) run with LL63 packets, before the LL16 kernel's sizes are asked; 0: right above the LL16 sizes",
);

/// `COMMHAL_COLL_RS_LL63_MAX` / `reducescatter_ll63_max`.
pub static COLL_RS_LL63_MAX: Setting = bytes(
    "COMMHAL_COLL_RS_LL63_MAX",
    "reducescatter_ll63_max",
    u64::MAX,
    "0",
    "largest reduce-scatter (the whole input: n x the per-rank chunk, nccl-tests' size) run with LL63 packets (16-byte multiples per rank that fit the LL63 scratch); 0: never",
);

/// `COMMHAL_COLL_BCAST_CE_MIN` / `broadcast_ce_min`.
pub static COLL_BCAST_CE_MIN: Setting = bytes(
    "COMMHAL_COLL_BCAST_CE_MIN",
    "broadcast_ce_min",
    u64::MAX,
    "0",
    "smallest broadcast on 2 ranks run on the copy engines (not inside a CUDA graph capture); 0: never",
);

/// `COMMHAL_COLL_SENDRECV_CE_MIN` / `sendrecv_ce_min`.
pub static COLL_SENDRECV_CE_MIN: Setting = bytes(
    "COMMHAL_COLL_SENDRECV_CE_MIN",
    "sendrecv_ce_min",
    u64::MAX,
    "0",
    "smallest send/recv run on the copy engines (not inside a CUDA graph capture); 0: never",
);

/// `COMMHAL_COLL_REDUCE_CE_MIN` / `reduce_ce_min`.
pub static COLL_REDUCE_CE_MIN: Setting = bytes(
    "COMMHAL_COLL_REDUCE_CE_MIN",
    "reduce_ce_min",
    u64::MAX,
    "0",
    "smallest reduce on 2 ranks run on the copy engine (16-byte multiples only; not inside a CUDA graph capture); 0: never",
);

/// `COMMHAL_COLL_AR_CE_MIN` / `allreduce_ce_min`.
pub static COLL_AR_CE_MIN: Setting = bytes(
    "COMMHAL_COLL_AR_CE_MIN",
    "allreduce_ce_min",
    u64::MAX,
    "0",
    "smallest all-reduce on 3+ ranks whose ring runs its first reduce-scatter and last all-gather steps on the copy engines (not inside a CUDA graph capture); 0: never",
);

/// `COMMHAL_COLL_AR_RING_MIN` / `allreduce_ring_min`.
pub static COLL_AR_RING_MIN: Setting = bytes(
    "COMMHAL_COLL_AR_RING_MIN",
    "allreduce_ring_min",
    u64::MAX,
    "0",
    "smallest all-reduce run with the ring kernel (16-byte multiples only); 0: never",
);

/// `COMMHAL_COLL_AG_RING_MIN` / `allgather_ring_min`.
pub static COLL_AG_RING_MIN: Setting = bytes(
    "COMMHAL_COLL_AG_RING_MIN",
    "allgather_ring_min",
    u64::MAX,
    "0",
    "smallest all-gather (output size) run with the ring kernel (16-byte multiples only); 0: never",
);

/// `COMMHAL_COLL_RS_RING_MIN` / `reducescatter_ring_min`.
pub static COLL_RS_RING_MIN: Setting = bytes(
    "COMMHAL_COLL_RS_RING_MIN",
    "reducescatter_ring_min",
    u64::MAX,
    "0",
    "smallest reduce-scatter (input size) run with the ring kernel (16-byte multiples only); 0: never",
);

/// `COMMHAL_COLL_CHAIN_UNROLL` / `chain_unroll`.
pub static COLL_CHAIN_UNROLL: Setting = count(
    "COMMHAL_COLL_CHAIN_UNROLL",
    "chain_unroll",
    1,
    32,
    "4",
    "16-byte vectors per thread in one chunk of the broadcast and reduce chains",
);

/// `COMMHAL_COLL_RING_UNROLL` / `ring_unroll`. The default, 16, was the fastest or tied of
/// the unrolls measured on 4 and 8 H200s (4 ranks, all-reduce 1 GiB: 4 / 8 / 16 = 4987 /
/// 4430 / 4408 µs, 32 a tie; 8 ranks, 1 GiB: all-gather 2815 / 2600 / 2576 / 2585 µs,
/// reduce-scatter 3160 / 2708 / 2654 / 2656). An 8-rank section without the key ran the
/// rings at 4 and lost to NCCL by 2-13 %.
pub static COLL_RING_UNROLL: Setting = count(
    "COMMHAL_COLL_RING_UNROLL",
    "ring_unroll",
    1,
    32,
    "16",
    "16-byte vectors per thread in one chunk of the ring kernels",
);

/// `COMMHAL_COLL_REDUCE_CHAIN_UNROLL` / `reduce_chain_unroll`.
pub static COLL_REDUCE_CHAIN_UNROLL: Setting = count(
    "COMMHAL_COLL_REDUCE_CHAIN_UNROLL",
    "reduce_chain_unroll",
    1,
    32,
    "4",
    "16-byte vectors per thread in one chunk of the reduce chain; absent from the file: chain_unroll",
);

/// `COMMHAL_COLL_THREADS` / `threads`.
pub static COLL_THREADS: Setting = count(
    "COMMHAL_COLL_THREADS",
    "threads",
    32,
    512,
    "512",
    "threads per block of the bulk kernels (a multiple of 32)",
);

/// `COMMHAL_COLL_LL_THREADS` / `ll_threads`.
pub static COLL_LL_THREADS: Setting = count(
    "COMMHAL_COLL_LL_THREADS",
    "ll_threads",
    32,
    512,
    "512",
    "threads per block of the LL16 kernels and packet plans (a multiple of 32): a thread per packet, so fewer threads spread the packets over more blocks; absent from the file: 512",
);

/// `COMMHAL_COLL_MAX_BLOCKS` / `max_blocks`.
pub static COLL_MAX_BLOCKS: Setting = count(
    "COMMHAL_COLL_MAX_BLOCKS",
    "max_blocks",
    0,
    1024,
    "0",
    "most blocks of the bulk kernels; 0: the GPU's multiprocessor count",
);

/// `COMMHAL_COLL_PDL`: programmatic dependent launch.
pub static COLL_PDL: Setting = Setting {
    env: "COMMHAL_COLL_PDL",
    key: FileKey::None,
    kind: Kind::Flag,
    default: "",
    set_by: SetBy::User,
    read_by: "cuda-coll",
    doc: "launch the kernels with programmatic dependent launch, which hides the launch latency between back-to-back collectives (unset: on from compute capability 9.0 with cuLaunchKernelEx; 1 elsewhere is an error)",
};

/// `COMMHAL_COLL_CHAIN_OVERLAP`: how back-to-back chains gate their stores.
pub static COLL_CHAIN_OVERLAP: Setting = Setting {
    env: "COMMHAL_COLL_CHAIN_OVERLAP",
    key: FileKey::None,
    kind: Kind::Choice(&["0", "1", "2"]),
    default: "2",
    set_by: SetBy::User,
    read_by: "cuda-coll",
    doc: "a chain right after a chain waits for 0: every rank (a full barrier), 1: the next rank's start, 2: the next rank's credits (streams on behind it); every rank must agree",
};

/// `COMMHAL_GPU_PATH`: kernels or copy engines.
pub static GPU_PATH: Setting = Setting {
    env: "COMMHAL_GPU_PATH",
    key: FileKey::None,
    kind: Kind::Choice(&["kernels", "dma"]),
    default: "",
    set_by: SetBy::User,
    read_by: "cuda-coll",
    doc: "kernels: the NVLink kernels (with the tuned copy-engine routes where cuda-dma is selected); dma: every collective on the copy engines (unset: from the backends selected)",
};

/// `COMMHAL_GPU_ALGO`: plan algorithms instead of hand-written kernels.
pub static GPU_ALGO: Setting = Setting {
    env: "COMMHAL_GPU_ALGO",
    key: FileKey::None,
    kind: Kind::Text("collective:algorithm[@blocks], comma-separated, e.g. allreduce:2pa-hb@4"),
    default: "",
    set_by: SetBy::User,
    read_by: "cuda-coll",
    doc: "run a plan compiled to CUDA instead of the hand-written kernel of that collective (one plan per communicator; the others keep the hand-written kernels)",
};

/// `COMMHAL_PLAN_LL63`: bytes of the plan area for LL63 packets.
pub static PLAN_LL63: Setting = Setting {
    env: "COMMHAL_PLAN_LL63",
    key: FileKey::None,
    kind: Kind::Number {
        min: 0,
        max: 8 << 30,
        unit: Unit::Bytes,
    },
    default: "50331648",
    set_by: SetBy::User,
    read_by: "cuda-coll",
    doc: "bytes per rank for the LL63 packets of the plan algorithms (`-ll63` plans: two copies by launch parity, beside the scratch); unset: 48 MiB, or the plan scratch where that is smaller",
};

/// `COMMHAL_PLAN_SCRATCH`: scratch bytes of the plan algorithms.
pub static PLAN_SCRATCH: Setting = Setting {
    env: "COMMHAL_PLAN_SCRATCH",
    key: FileKey::None,
    kind: Kind::Number {
        min: 0,
        max: u64::MAX,
        unit: Unit::Bytes,
    },
    default: "1048576",
    set_by: SetBy::User,
    read_by: "cuda-coll",
    doc: "scratch per rank for plan algorithms (at least 4 KiB is allocated); unset: 1 MiB in the NCCL drop-in, else 4 x the capacity, at least 8 x ranks x min(capacity, 4 MiB), plus 1 MiB",
};

/// `COMMHAL_PLAN_OUTBOX`: pinned host bytes per rank for the plans' puts across nodes.
pub static PLAN_OUTBOX: Setting = Setting {
    env: "COMMHAL_PLAN_OUTBOX",
    key: FileKey::None,
    kind: Kind::Number {
        min: 0,
        max: 1 << 32,
        unit: Unit::Bytes,
    },
    default: "8388608",
    set_by: SetBy::User,
    read_by: "cuda-coll",
    doc: "pinned host memory per rank that plan kernels copy a put across nodes into when the port backend sends from the host (host-tcp), so the proxy sends it without a driver copy; shared by the plan blocks, a put larger than a block's share goes from device memory; 0: off",
};

/// `COMMHAL_PLAN_INBOX`: pinned host bytes per rank that ports from other nodes write
/// the plans' far data and signals into.
pub static PLAN_INBOX: Setting = Setting {
    env: "COMMHAL_PLAN_INBOX",
    key: FileKey::None,
    kind: Kind::Number {
        min: 0,
        max: 1 << 32,
        unit: Unit::Bytes,
    },
    default: "524288",
    set_by: SetBy::User,
    read_by: "cuda-coll",
    doc: "pinned host memory per rank that the port backend writes a plan's data and signals from other nodes into when it writes from the host (host-tcp), read by the kernels over the bus: no driver call on the receiving side; 256 KiB of semaphores, then two copies of a launch's far scratch, so the default takes launches of up to 128 KiB of it (2 x H200 across two virtual nodes, calls through it against calls without it: 0.85-0.91 of the time at 64 KiB, 1.00-1.07 at 256 KiB, 1.02-1.12 at 1-4 MiB); 0: off",
};

/// `COMMHAL_PLAN_THREADS`: threads per block of the plan kernels.
pub static PLAN_THREADS: Setting = Setting {
    env: "COMMHAL_PLAN_THREADS",
    key: FileKey::None,
    kind: Kind::Number {
        min: 32,
        max: 1024,
        unit: Unit::Count,
    },
    default: "512",
    set_by: SetBy::User,
    read_by: "cuda-coll",
    doc: "threads per block of the plan kernels, rounded up to a multiple of 32",
};

/// `COMMHAL_PLAN_REPLICAS`: CTAs per plan block.
pub static PLAN_REPLICAS: Setting = Setting {
    env: "COMMHAL_PLAN_REPLICAS",
    key: FileKey::None,
    kind: Kind::Number {
        min: 1,
        max: 256,
        unit: Unit::Count,
    },
    default: "1",
    set_by: SetBy::User,
    read_by: "cuda-coll",
    doc: "CTAs per plan block, capped at the multiprocessors divided by the plan's blocks (unset: from the message size, one CTA per chunk of a plan's per-CTA size)",
};

/// `COMMHAL_CUDA_DEVICE`: the device of the CUDA backends.
pub static CUDA_DEVICE: Setting = Setting {
    env: "COMMHAL_CUDA_DEVICE",
    key: FileKey::None,
    kind: Kind::Number {
        min: 0,
        max: u32::MAX as u64,
        unit: Unit::Count,
    },
    default: "0",
    set_by: SetBy::User,
    read_by: "cuda-nvlink, cuda-dma",
    doc: "the CUDA device cuda-nvlink maps for and cuda-dma runs on, where the config's [backend.*] device does not say (unset: the local rank modulo the device count, else 0)",
};

/// `COMMHAL_CUDA_LEGACY_IPC`: legacy CUDA IPC instead of cuMem VMM fds.
pub static CUDA_LEGACY_IPC: Setting = Setting {
    env: "COMMHAL_CUDA_LEGACY_IPC",
    key: FileKey::None,
    kind: Kind::Flag,
    default: "0",
    set_by: SetBy::User,
    read_by: "cuda-nvlink, cuda-dma",
    doc: "1: allocate shared GPU memory with cuMemAlloc and share it by legacy CUDA IPC even where cuMem VMM fds work (to test the fallback), where the config's [backend.*] legacy_ipc does not say",
};

/// `COMMHAL_CUDA_DMA_FLUSH_TIMEOUT_MS`: the bound of a cuda-dma port flush.
pub static CUDA_DMA_FLUSH_TIMEOUT_MS: Setting = Setting {
    env: "COMMHAL_CUDA_DMA_FLUSH_TIMEOUT_MS",
    key: FileKey::None,
    kind: Kind::Number {
        min: 1,
        max: u64::MAX,
        unit: Unit::Millis,
    },
    default: "30000",
    set_by: SetBy::User,
    read_by: "cuda-dma",
    doc: "how long a cuda-dma port flush may wait for its copies before it fails, where the config's [backend.cuda-dma] flush_timeout_ms does not say",
};

/// `COMMHAL_NVRTC_DIR`: where libnvrtc.so.13 is.
pub static NVRTC_DIR: Setting = Setting {
    env: "COMMHAL_NVRTC_DIR",
    key: FileKey::None,
    kind: Kind::Text("a directory holding libnvrtc.so.13"),
    default: "",
    set_by: SetBy::User,
    read_by: "cuda-rt",
    doc: "load NVRTC (the kernels' compiler) from this directory, e.g. the one scripts/install-nvrtc.sh prints (unset: by name from the library path)",
};

/// `COMMHAL_CACHE_DIR`: the compiled-kernel cache.
pub static CACHE_DIR: Setting = Setting {
    env: "COMMHAL_CACHE_DIR",
    key: FileKey::None,
    kind: Kind::Text("a directory"),
    default: "",
    set_by: SetBy::User,
    read_by: "cuda-rt",
    doc: "where compiled kernels are cached (unset: $XDG_CACHE_HOME/commhal, else ~/.cache/commhal)",
};

/// `COMMHAL_MSCCLPP_LIB`: MSCCL++'s NCCL-API library for `--compare mscclpp`.
pub static MSCCLPP_LIB: Setting = Setting {
    env: "COMMHAL_MSCCLPP_LIB",
    key: FileKey::None,
    kind: Kind::Text("the path of MSCCL++'s libmscclpp_nccl.so"),
    default: "",
    set_by: SetBy::User,
    read_by: "gpu-bench",
    doc: "the library `commhal bench --compare mscclpp` compares with (unset: libmscclpp_nccl.so from the library path)",
};

/// `COMMHAL_PRINT_REGISTERS`: print each kernel's register use.
pub static PRINT_REGISTERS: Setting = Setting {
    env: "COMMHAL_PRINT_REGISTERS",
    key: FileKey::None,
    kind: Kind::Flag,
    default: "0",
    set_by: SetBy::User,
    read_by: "cuda-rt (tests)",
    doc: "1: cuda-rt's kernel-compile test prints how many registers each kernel it compiles uses",
};

/// The thresholds of the GPU tuning file, in the order the docs list them.
pub const THRESHOLDS: &[&Setting] = &[
    &COLL_LL_MAX,
    &COLL_PUSH_MIN,
    &COLL_RS_PUSH_MIN,
    &COLL_RS_PUSH_MAX,
    &COLL_LL_CHUNK_MAX,
    &COLL_BCAST_REDUCE_LL_MAX,
    &COLL_BCAST_SF_MIN,
    &COLL_BCAST_CHAIN_MIN,
    &COLL_REDUCE_CHAIN_MIN,
    &COLL_AG_NARROW_MIN,
    &COLL_REDUCE_ALL_MAX,
    &COLL_BCAST_LL63_MAX,
    &COLL_REDUCE_LL63_MAX,
    &COLL_AR_LL63_MIN,
    &COLL_AR_LL63_MAX,
    &COLL_AR_LL63_ONESHOT_MAX,
    &COLL_AG_LL63_MIN,
    &COLL_AG_LL63_MAX,
    &COLL_RS_LL63_MIN,
    &COLL_RS_LL63_MAX,
    &COLL_BCAST_CE_MIN,
    &COLL_SENDRECV_CE_MIN,
    &COLL_REDUCE_CE_MIN,
    &COLL_AR_CE_MIN,
    &COLL_AR_RING_MIN,
    &COLL_AG_RING_MIN,
    &COLL_RS_RING_MIN,
    &COLL_CHAIN_UNROLL,
    &COLL_RING_UNROLL,
    &COLL_REDUCE_CHAIN_UNROLL,
    &COLL_THREADS,
    &COLL_LL_THREADS,
    &COLL_MAX_BLOCKS,
];

/// The setting of the GPU tuning file's key `key`.
pub fn threshold(key: &str) -> Option<&'static Setting> {
    THRESHOLDS
        .iter()
        .copied()
        .find(|s| matches!(s.key, FileKey::Tuning(k) if k == key))
}

/// `COMMHAL_GPU_WAIT_NS`: the device wait bound of the GPU conformance suite.
pub static GPU_WAIT_NS: Setting = Setting {
    env: "COMMHAL_GPU_WAIT_NS",
    key: FileKey::None,
    kind: Kind::Number {
        min: 1,
        max: 86_400_000_000_000,
        unit: Unit::Nanos,
    },
    default: "10000000000",
    set_by: SetBy::User,
    read_by: "conformance",
    doc: "how long a device wait of the GPU conformance suite's kernels may spin before the case fails",
};

/// This component's settings but the thresholds ([`THRESHOLDS`]), in the order the docs
/// list them.
pub const ALL: &[&Setting] = &[
    &GPU_TUNING,
    &COLL_PDL,
    &COLL_CHAIN_OVERLAP,
    &GPU_PATH,
    &GPU_ALGO,
    &PLAN_SCRATCH,
    &PLAN_LL63,
    &PLAN_OUTBOX,
    &PLAN_INBOX,
    &PLAN_THREADS,
    &PLAN_REPLICAS,
    &CUDA_DEVICE,
    &CUDA_LEGACY_IPC,
    &CUDA_DMA_FLUSH_TIMEOUT_MS,
    &NVRTC_DIR,
    &CACHE_DIR,
    &MSCCLPP_LIB,
    &GPU_WAIT_NS,
    &PRINT_REGISTERS,
];

#[cfg(test)]
mod tests {
    use super::*;

    /// Every threshold has a tuning key of its own, and only thresholds have one.
    #[test]
    fn thresholds_are_listed_and_keyed_once() {
        for t in THRESHOLDS {
            let FileKey::Tuning(key) = t.key else {
                panic!("{} has no tuning key", t.env)
            };
            assert!(std::ptr::eq(threshold(key).unwrap(), *t), "{key}");
        }
        assert!(
            ALL.iter().all(|s| !matches!(s.key, FileKey::Tuning(_))),
            "a tuning-file key outside THRESHOLDS"
        );
    }
}
