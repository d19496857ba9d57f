//! # commhal-device-src — CUDA/HIP device code, embedded as text
//!
//! Device code is C++ compiled at run time by NVRTC (or hipRTC): no nvcc at build
//! time. This crate only *holds* the sources; `commhal-cuda-rt` compiles them.
//!
//! * [`HEADERS`]: every header, by the name kernels `#include` it with
//!   (`"commhal/memory_channel.h"`, ...). Hand them to NVRTC's header-name/contents
//!   arrays; no filesystem include path is needed.
//! * [`KERNEL_UNITS`]: the translation units (`.cu`) and the `extern "C"` kernels
//!   each defines.
//! * [`layout`]: the `#[repr(C)]` Rust mirrors of the device handles declared in
//!   `include/commhal/handles.h` (the layout spec), checked field by field against
//!   g++'s view of the header by `tests/layout.rs`.
#![warn(missing_docs)]

pub mod layout;

/// One embedded source file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Source {
    /// Include name (`commhal/handles.h`) or unit file name (`conformance.cu`).
    pub name: &'static str,
    /// The file's text.
    pub contents: &'static str,
}

/// A translation unit and the kernels it defines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelUnit {
    /// The source.
    pub source: Source,
    /// Names of its `extern "C" __global__` functions (what `cuModuleGetFunction` takes).
    pub kernels: &'static [&'static str],
}

macro_rules! header {
    ($name:literal) => {
        Source {
            name: concat!("commhal/", $name),
            contents: include_str!(concat!("../include/commhal/", $name)),
        }
    };
}

/// One algorithm family (or shared piece) of [`COLL_NVLINK`], by include name
/// (`coll/allreduce.cuh`).
macro_rules! coll {
    ($name:literal) => {
        Source {
            name: concat!("coll/", $name),
            contents: include_str!(concat!("../kernels/coll/", $name)),
        }
    };
}

/// Every header, by include name: the channel headers (`commhal/`) and the
/// collectives' families (`coll/`).
pub const HEADERS: &[Source] = &[
    header!("commhal_port.h"),
    header!("handles.h"),
    header!("launch.h"),
    header!("wait.h"),
    header!("semaphore.h"),
    header!("copy.h"),
    header!("memory_channel.h"),
    header!("packets.h"),
    header!("ll63.h"),
    header!("port_channel.h"),
    header!("switch_channel.h"),
    header!("elem.h"),
    header!("dataops.h"),
    header!("plan.h"),
    header!("plan_ll63.h"),
    coll!("protocol.cuh"),
    coll!("ops.cuh"),
    coll!("ll16.cuh"),
    coll!("ll63.cuh"),
    coll!("chain.cuh"),
    coll!("reduce_inputs.cuh"),
    coll!("prims.cuh"),
    coll!("prims_ll63.cuh"),
    coll!("copy_engine.cuh"),
    coll!("allreduce.cuh"),
    coll!("reducescatter.cuh"),
    coll!("allgather.cuh"),
    coll!("broadcast.cuh"),
    coll!("reduce.cuh"),
    coll!("ring.cuh"),
    coll!("alltoall.cuh"),
    coll!("sendrecv.cuh"),
];

/// The conformance kernels (memory channel, packets, port FIFO).
pub const CONFORMANCE: KernelUnit = KernelUnit {
    source: Source {
        name: "conformance.cu",
        contents: include_str!("../kernels/conformance.cu"),
    },
    kernels: &[
        "commhal_conf_fill",
        "commhal_conf_check",
        "commhal_conf_put_signal",
        "commhal_conf_wait",
        "commhal_conf_wait_get",
        "commhal_conf_ping_pong",
        "commhal_conf_ll8_put",
        "commhal_conf_ll8_read",
        "commhal_conf_ll16_put",
        "commhal_conf_ll16_read",
        "commhal_conf_fifo_push",
        "commhal_conf_port_wait",
    ],
};

/// The switch (NVLink multicast) kernels; need sm_90 or newer to do anything.
pub const SWITCH: KernelUnit = KernelUnit {
    source: Source {
        name: "switch.cu",
        contents: include_str!("../kernels/switch.cu"),
    },
    kernels: &["commhal_conf_switch_all_reduce_f32"],
};

/// The NVLink collectives (all-reduce LL/two-shot/push, all-gather, reduce-scatter,
/// broadcast, reduce, all-to-all, send/recv) that
/// `commhal-cuda-coll` launches; see the unit's header comment for the protocol.
pub const COLL_NVLINK: KernelUnit = KernelUnit {
    source: Source {
        name: "coll_nvlink.cu",
        contents: include_str!("../kernels/coll_nvlink.cu"),
    },
    kernels: &[
        "commhal_coll_dma_wait",
        "commhal_coll_peers_done",
        "commhal_coll_reduce_local_f16",
        "commhal_coll_reduce_local_bf16",
        "commhal_coll_reduce_local_f32",
        "commhal_coll_reduce_pair_ce_f16",
        "commhal_coll_reduce_pair_ce_bf16",
        "commhal_coll_reduce_pair_ce_f32",
        "commhal_coll_allreduce_ll_f16",
        "commhal_coll_allreduce_2shot_f16",
        "commhal_coll_reducescatter_f16",
        "commhal_coll_allreduce_ll_bf16",
        "commhal_coll_allreduce_2shot_bf16",
        "commhal_coll_reducescatter_bf16",
        "commhal_coll_allreduce_ll_f32",
        "commhal_coll_allreduce_2shot_f32",
        "commhal_coll_reducescatter_f32",
        "commhal_coll_allgather",
        "commhal_coll_reducescatter_ll_f16",
        "commhal_coll_reducescatter_ll_bf16",
        "commhal_coll_reducescatter_ll_f32",
        "commhal_coll_reducescatter_ll63_f16",
        "commhal_coll_reducescatter_ll63_bf16",
        "commhal_coll_reducescatter_ll63_f32",
        "commhal_coll_allgather_ll",
        "commhal_coll_allgather_ll63",
        "commhal_coll_reducescatter_push_f16",
        "commhal_coll_reducescatter_push_bf16",
        "commhal_coll_reducescatter_push_f32",
        "commhal_coll_allreduce_push_f16",
        "commhal_coll_allreduce_push_bf16",
        "commhal_coll_allreduce_push_f32",
        "commhal_coll_broadcast",
        "commhal_coll_broadcast_sf",
        "commhal_coll_broadcast_ll",
        "commhal_coll_reduce_ll_f16",
        "commhal_coll_reduce_ll_bf16",
        "commhal_coll_reduce_ll_f32",
        "commhal_coll_reduce_f16",
        "commhal_coll_reduce_bf16",
        "commhal_coll_reduce_f32",
        "commhal_coll_reduce_all_f16",
        "commhal_coll_reduce_all_bf16",
        "commhal_coll_reduce_all_f32",
        "commhal_coll_broadcast_chain",
        "commhal_coll_reduce_chain_f16",
        "commhal_coll_reduce_chain_bf16",
        "commhal_coll_reduce_chain_f32",
        "commhal_coll_broadcast_ll63",
        "commhal_coll_reduce_ll63_f16",
        "commhal_coll_reduce_ll63_bf16",
        "commhal_coll_reduce_ll63_f32",
        "commhal_coll_allreduce_ll63_f16",
        "commhal_coll_allreduce_ll63_bf16",
        "commhal_coll_allreduce_ll63_f32",
        "commhal_coll_allreduce_ring_f16",
        "commhal_coll_allreduce_ring_bf16",
        "commhal_coll_allreduce_ring_f32",
        "commhal_coll_allreduce_ring_head_f16",
        "commhal_coll_allreduce_ring_head_bf16",
        "commhal_coll_allreduce_ring_head_f32",
        "commhal_coll_reducescatter_ring_f16",
        "commhal_coll_reducescatter_ring_bf16",
        "commhal_coll_reducescatter_ring_f32",
        "commhal_coll_allgather_ring",
        "commhal_coll_alltoall_ll",
        "commhal_coll_sendrecv_ll",
        "commhal_coll_alltoall",
        "commhal_coll_sendrecv",
    ],
};

/// The reducing kernels of [`COLL_NVLINK`] that are also built for every other
/// (type, op): the same unit compiled with `-DCOLL_RED_T=Ty_<type>
/// -DCOLL_RED_OP=<op code>` defines exactly these entry points (no type suffix) and
/// nothing else. `commhal-cuda-coll`'s `kernels` module compiles one module per
/// (type, op) on first use.
pub const COLL_NVLINK_TYPED: &[&str] = &[
    "commhal_coll_reduce_local",
    "commhal_coll_reduce_pair_ce",
    "commhal_coll_allreduce_ll",
    "commhal_coll_allreduce_2shot",
    "commhal_coll_reducescatter",
    "commhal_coll_reducescatter_ll",
    "commhal_coll_reducescatter_push",
    "commhal_coll_allreduce_push",
    "commhal_coll_reduce_ll",
    "commhal_coll_reduce",
    "commhal_coll_reduce_all",
    "commhal_coll_reduce_chain",
    "commhal_coll_reduce_ll63",
    "commhal_coll_allreduce_ll63",
    "commhal_coll_allreduce_ring",
    "commhal_coll_allreduce_ring_head",
    "commhal_coll_reducescatter_ring",
    "commhal_coll_reducescatter_ll63",
];

/// Every translation unit in this crate.
pub const KERNEL_UNITS: &[KernelUnit] = &[CONFORMANCE, SWITCH, COLL_NVLINK];

/// The text of [`COLL_NVLINK`] and of every header (the `coll/` families and the
/// channel headers they build on), for host code that checks the unit's `#define`s
/// against its own constants.
pub fn coll_nvlink_text() -> String {
    let mut text = String::from(COLL_NVLINK.source.contents);
    for h in HEADERS {
        text.push('\n');
        text.push_str(h.contents);
    }
    text
}

/// Look a header up by include name.
pub fn header(name: &str) -> Option<&'static Source> {
    HEADERS.iter().find(|h| h.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `#include "..."` in every source names an embedded header, so NVRTC
    /// never needs the filesystem.
    #[test]
    fn every_include_is_embedded() {
        let all = HEADERS
            .iter()
            .copied()
            .chain(KERNEL_UNITS.iter().map(|u| u.source));
        for src in all {
            for line in src.contents.lines() {
                let line = line.trim();
                if let Some(rest) = line.strip_prefix("#include \"") {
                    let name = rest.split('"').next().unwrap_or_default();
                    assert!(
                        header(name).is_some(),
                        "{} includes \"{name}\" which is not in HEADERS",
                        src.name
                    );
                }
            }
        }
    }

    /// The names in one entry-point table of coll_nvlink.cu (`X(name, call)` lines
    /// after `#define <table>(X)`).
    fn coll_table(table: &str) -> Vec<String> {
        let text = COLL_NVLINK.source.contents;
        let start = text
            .find(&format!("#define {table}(X)"))
            .unwrap_or_else(|| panic!("{table} not in coll_nvlink.cu"));
        text[start..]
            .lines()
            .skip(1)
            .map_while(|l| l.trim().strip_prefix("X("))
            .map(|rest| rest.split(',').next().unwrap_or_default().to_string())
            .collect()
    }

    /// The reducing kernels of coll_nvlink.cu, in order: its table without launch
    /// bounds, then the one with.
    fn reducing_kernels() -> Vec<String> {
        let mut names = coll_table("COLL_REDUCING_KERNELS");
        names.extend(coll_table("COLL_REDUCING_KERNELS_512"));
        names
    }

    /// Every listed kernel is defined `extern "C" __global__` in its unit (for
    /// coll_nvlink.cu: generated from its tables), and every such definition is
    /// listed.
    #[test]
    fn kernel_lists_match_sources() {
        for unit in KERNEL_UNITS {
            let mut defined = Vec::new();
            if unit.source.name == COLL_NVLINK.source.name {
                for name in reducing_kernels() {
                    for ty in ["f16", "bf16", "f32"] {
                        defined.push(format!("commhal_coll_{name}_{ty}"));
                    }
                }
                let moving = coll_table("COLL_MOVING_KERNELS");
                defined.extend(moving.iter().map(|n| format!("commhal_coll_{n}")));
            }
            let key = "extern \"C\" __global__ void ";
            // (a `#define` line is a macro, not a definition: see the tables)
            for line in unit
                .source
                .contents
                .lines()
                .filter(|l| !l.trim_start().starts_with("#define") && !l.contains("##"))
            {
                let mut rest = line;
                while let Some(i) = rest.find(key) {
                    rest = &rest[i + key.len()..];
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    defined.push(name);
                }
            }
            let mut listed: Vec<String> = unit.kernels.iter().map(|s| s.to_string()).collect();
            defined.sort();
            listed.sort();
            assert_eq!(defined, listed, "kernel list of {}", unit.source.name);
        }
    }

    /// The typed entry points (the `COLL_REDUCING_KERNELS` and
    /// `COLL_REDUCING_KERNELS_512` tables of coll_nvlink.cu) are exactly
    /// [`COLL_NVLINK_TYPED`], in order.
    #[test]
    fn typed_kernel_list_matches_the_source() {
        let defined: Vec<String> = reducing_kernels()
            .iter()
            .map(|n| format!("commhal_coll_{n}"))
            .collect();
        let listed: Vec<String> = COLL_NVLINK_TYPED.iter().map(|s| s.to_string()).collect();
        assert_eq!(defined, listed);
    }
}
