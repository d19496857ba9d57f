//! GPU tuning as data: which kernel a [`Comm`](crate::Comm) runs at which size.
//!
//! The thresholds live in `algorithms/tuning/gpu-cuda-*.toml` (the format is documented
//! in the file's header and in [`HEADER`]), embedded at build time ([`EMBEDDED`]).
//! [`resolve`] picks the file whose `gpu` prefixes match the device's name (else the
//! first embedded file, with the fact recorded in [`Provenance`]), the `[ranks.N]`
//! section nearest to the communicator's size (ties: the larger N), then applies the
//! overrides, strongest last:
//!
//! 1. `COMMHAL_GPU_TUNING=/path.toml` — a whole file in the same format, used instead
//!    of the embedded ones (its `gpu` prefixes are not checked);
//! 2. one variable per key (`COMMHAL_COLL_LL_MAX` for `allreduce_ll_max`, ...): each
//!    threshold is declared once, variable and key together, in
//!    [`commhal_hal::settings::gpu`] (the table in docs/tuning.md, `commhal info
//!    --settings`). A value outside the declared range is an error, in the file or the
//!    variable;
//! 3. the `ll_max` argument of [`Comm::new`](crate::Comm::new) (`--ll-max`);
//! 4. [`with_forced`]: the tuner's per-candidate choice (this thread only).
//!
//! The tuner (`commhal tune`, in the tools crate `commhal-gpu-bench`) times every
//! candidate kernel per size, turns the timings into thresholds and writes the file
//! back through [`TuningFile::render`], with the command, date and GPU in its header.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use commhal_hal::settings::gpu::{self as decl, GPU_TUNING};
use commhal_hal::settings::{Env, Setting};

use crate::comm::Tuning;
use crate::error::{CollError, Result};
use crate::layout;

/// The embedded tuning files, `(name, text)`; the first is the fallback for GPUs no
/// file names.
pub const EMBEDDED: &[(&str, &str)] = &[(
    "gpu-cuda-h200.toml",
    include_str!("../../../algorithms/tuning/gpu-cuda-h200.toml"),
)];

/// The comment block every rendered file starts with (the format's documentation).
pub const HEADER: &str = "\
# Kernel-choice thresholds of commhal-cuda-coll (the NVLink collectives of
# backends/cuda-coll, `Comm`).
# Not the algorithm selector's rule format (gpu-cuda.untuned.toml): this file only
# says which hand-written kernel of device-src/kernels/coll_nvlink.cu runs at which size.
#
# Format (all sizes in bytes):
#   gpu = [...]            GPU model name prefixes (as the driver reports them, compared
#                          case-insensitively) this file applies to
#   [ranks.N]              thresholds for N ranks (one process per GPU); a communicator
#                          of another size uses the nearest N (ties: the larger N)
#     tuned                true when the tuner wrote this section on the device
#     note, gpu_name, date, command   where the numbers come from (free text)
#     allreduce_ll_max     largest all-reduce done with the one-shot LL kernel (0: never);
#                          also sizes the LL slots
#     allreduce_push_min   smallest all-reduce done with the push kernel (0: never);
#                          in between: two-shot
#     allgather_reducescatter_ll_chunk_max
#                          largest per-rank chunk of an all-gather / reduce-scatter done
#                          with the LL kernels (also broadcast, reduce, send/recv
#                          and all-to-all chunks; the LL slots hold the larger of
#                          this and allreduce_ll_max)
#     reducescatter_push_min, reducescatter_push_max
#                          (optional) reduce-scatters of min..=max total input bytes are
#                          done with the push kernel (min 0: never; absent: min =
#                          allreduce_push_min, max = no limit); the tuner sets the
#                          window to the sizes where push was the fastest of all
#                          reduce-scatter kernels
#     broadcast_reduce_ll_max
#                          (optional; absent: no cap of its own) largest broadcast /
#                          reduce done with the LL16 kernels, never above
#                          allgather_reducescatter_ll_chunk_max (above it the LL63
#                          window starts). The tuner times LL16 as a first candidate
#                          and picks this cap and both LL63 windows together (least
#                          summed time / best time)
#     broadcast_sf_min     smallest broadcast done with scatter + forward (>= 3 ranks;
#                          0: never); below: the root stores into every output
#     broadcast_chain_min, reduce_chain_min
#                          (optional; absent or 0: never) broadcasts / reduces from this
#                          size on run as a pipelined chain r -> r+1 (16-byte multiples
#                          only; broadcast: >= 3 ranks)
#     allgather_narrow_min (optional; absent or 0: never) all-gathers (the whole
#                          output) from this size on that run the direct kernel use
#                          at most 64 blocks (fewer SMs storing into the peers move
#                          more per second once ~1.5 MiB go out of each GPU)
#     reduce_all_max       (optional; absent or 0: never) reduces up to this size on 3
#                          or more ranks are split over every rank, the root too
#                          (above: over the non-roots only, whose links the root's
#                          output then shares less)
#     broadcast_ll63_max, reduce_ll63_max
#                          (optional; absent or 0: never) broadcasts / reduces above the
#                          LL chunk size and up to this size run as an LL63 chain (packets
#                          of 63 data bits and a valid bit per 64-bit word, no barrier;
#                          16-byte multiples only); the larger of the two sizes the
#                          LL63 region (about that many bytes of scratch per rank,
#                          plus ~4 MiB: transfers up to 2 MiB use two parity halves of
#                          their own).
#                          The tuner times LL63 as a last
#                          candidate and ends the window where the summed time / best
#                          time is least
#     allreduce_ll63_min, allreduce_ll63_max
#                          (optional; max absent or 0: never) all-reduces above
#                          allreduce_ll_max, from min and up to max run over all pairs
#                          with LL63 packets (scatter, reduce, gather; no barrier;
#                          16-byte multiples only, and only while the 2 (n - 1) / n
#                          of the data a rank receives fits a parity half of the LL63
#                          small region: about 1 MiB on 4 ranks); below it the
#                          two-shot or push kernels
#     allreduce_ll63_oneshot_max
#                          (optional; absent or 0: never) the all-reduces of that
#                          window up to this size run in one shot instead: every rank
#                          sends its whole input to every peer as LL63 packets and
#                          reduces the n inputs (one hop; the parity halves then hold
#                          n - 1 copies of the input)
#     allgather_ll63_min, allgather_ll63_max
#                          (optional; max absent or 0: never) all-gathers (the output)
#                          from min up to max are done with LL63 packets: every rank
#                          sends its input to every peer, no barrier (16-byte multiples
#                          per rank, while the n - 1 inputs a rank receives fit a
#                          parity half of the LL63 small region); min is asked before
#                          the LL16 sizes (absent or 0: right above them)
#     reducescatter_ll63_min, reducescatter_ll63_max
#                          (optional; max absent or 0: never) reduce-scatters (the
#                          whole input, n x the per-rank chunk) from min up to max are
#                          done with LL63 packets: every rank sends chunk p of its input
#                          to rank p, which sums the n chunks in rank order, no barrier
#                          (16-byte multiples per rank, while the n - 1 chunks a rank
#                          receives fit a parity half of the LL63 small region); min is
#                          asked before the LL16 sizes (absent or 0: right above them).
#                          Not timed by the tuner: set from a measured A/B
#     broadcast_ce_min, sendrecv_ce_min
#                          (optional; absent or 0: never) from this size a broadcast on 2
#                          ranks / a send-recv runs on the copy engines: one
#                          cuMemcpyAsync into the peer, ordered by stream writes and a
#                          bounded wait kernel (the COMMHAL_GPU_PATH=dma mechanism;
#                          ~392 GB/s against ~365 for SM stores, plus ~20-30 µs per
#                          call). Not inside a CUDA graph capture (the kernels run
#                          there). The tuner times `ce` as a last
#                          candidate and sets the smallest size from which it is the
#                          fastest at every larger size
#     reduce_ce_min        (optional; absent or 0: never) from this size a reduce on 2
#                          ranks runs on the copy engine: the non-root copies its input
#                          into the root's staging in chunks of half of what is left
#                          (the last 2-4 MiB; H100 needs halves, H200 ran 3/8 ~9 µs
#                          faster at 1 GiB), a
#                          stream write after each, and the root reduces
#                          each chunk as it lands (16-byte multiples
#                          only; not inside a CUDA graph capture). Tuned as
#                          broadcast_ce_min, with `ce` after the reduce kernels
#     allreduce_ce_min     (optional; absent or 0: never) from this size an all-reduce
#                          on 3 or more ranks runs its ring's first reduce-scatter step
#                          and its last n-2 all-gather steps on the copy engines
#                          (plain copies: ~392 GB/s against ~366), the ring kernel the steps
#                          between: one cuMemcpyAsync of a whole segment to the next
#                          rank per step, a stream write, a bounded wait kernel (ring
#                          sizes only; not inside a CUDA graph capture). Tuned as
#                          sendrecv_ce_min, with `ce` after the all-reduce kernels
#     allreduce_ring_min, allgather_ring_min, reducescatter_ring_min
#                          (optional; absent or 0: never) from this size (all-reduce
#                          buffer, all-gather output, reduce-scatter input) the ring
#                          kernels run (16-byte multiples only). The tuner sweeps these
#                          and the two chain thresholds (from 1 MiB); where a value
#                          came from a hand A/B the section's note says so
#     chain_unroll, ring_unroll, reduce_chain_unroll
#                          (optional, 1..32, absent: chains 4, rings 16, the reduce
#                          chain as chain_unroll) vectors per thread in one chunk of
#                          the chains / the rings / the reduce chain (threads x unroll
#                          x 16 bytes); not swept: set from a measured A/B
#     threads              threads per block of the bulk kernels (32..512)
#     ll_threads           (optional, absent: 512) threads per block of the LL16
#                          kernels and packet plans (32..512, a thread per packet);
#                          not swept: set from a measured A/B
#     max_blocks           most blocks of the bulk kernels (0: the SM count)
#
# Overrides, strongest last: COMMHAL_GPU_TUNING=/path.toml (a file in this format used
# instead of the built-in one), then one variable per key (COMMHAL_COLL_LL_MAX for
# allreduce_ll_max, ...: the table of every setting in docs/tuning.md, or `commhal info
# --settings`), then --ll-max of the benchmark. A value outside its key's range is an
# error, here or in the variable.
#
# Regenerate on the GPUs (one run per rank count; each run rewrites its own [ranks.N]
# section and keeps the others):
#   commhal tune --backend cuda-nvlink --ranks N --out algorithms/tuning/<this file>
";

/// One `[ranks.N]` section. The file lists its keys in this order (the renderer
/// serialises the struct: a new key needs its field here, its line in [`HEADER`], its
/// declaration in [`commhal_hal::settings::gpu`], a value in `FALLBACK` and its use in
/// `resolve_with`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Section {
    /// Written by the tuner on the device (false: hand-picked).
    pub tuned: bool,
    /// Where the numbers come from.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
    /// GPU the tuner ran on.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub gpu_name: String,
    /// UTC date of the tuner run (YYYY-MM-DD).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub date: String,
    /// The exact command that produced this section.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub command: String,
    /// Largest all-reduce (bytes) done with one-shot LL (0: never).
    pub allreduce_ll_max: u64,
    /// Smallest all-reduce (bytes) done with push (0: never).
    pub allreduce_push_min: u64,
    /// Largest per-rank chunk (bytes) of an all-gather / reduce-scatter done with LL.
    pub allgather_reducescatter_ll_chunk_max: u64,
    /// Smallest broadcast (bytes) done with scatter + forward (0: never).
    pub broadcast_sf_min: u64,
    /// Threads per block of the bulk kernels (32..=512).
    pub threads: u32,
    /// Most blocks of the bulk kernels (0: the SM count).
    pub max_blocks: u32,
    /// Smallest reduce-scatter (total input bytes) done with the push kernel (0:
    /// never; absent: `allreduce_push_min`). Not swept by the tuner: set from a
    /// measured A/B (see the note).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reducescatter_push_min: Option<u64>,
    /// Largest reduce-scatter (total input bytes) done with the push kernel (absent:
    /// no limit). Above it the one-phase pull kernel wins again (the push kernel's
    /// local reduce runs after its remote phase).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reducescatter_push_max: Option<u64>,
    /// Largest broadcast / reduce (bytes) done with the LL16 kernels (absent: the
    /// all-gather / reduce-scatter chunk cap; never above it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broadcast_reduce_ll_max: Option<u64>,
    /// Smallest broadcast (bytes) done with the pipelined chain (absent or 0: never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broadcast_chain_min: Option<u64>,
    /// Smallest reduce (bytes) done with the pipelined chain (absent or 0: never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reduce_chain_min: Option<u64>,
    /// Smallest all-gather (the whole output, bytes) of the direct kernel run on at
    /// most [`layout::AG_NARROW_BLOCKS`] blocks (absent or 0: never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allgather_narrow_min: Option<u64>,
    /// Largest reduce (bytes) on 3 or more ranks where the root reduces a share too
    /// (absent or 0: never; above it, or absent, only the non-roots do).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reduce_all_max: Option<u64>,
    /// Largest broadcast (bytes) done with the LL63 chain (absent or 0: never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broadcast_ll63_max: Option<u64>,
    /// Largest reduce (bytes) done with the LL63 chain (absent or 0: never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reduce_ll63_max: Option<u64>,
    /// Largest all-reduce (bytes) done over all pairs with LL63 packets, above
    /// `allreduce_ll_max` (absent or 0: never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allreduce_ll63_max: Option<u64>,
    /// Smallest all-reduce (bytes) done over all pairs with LL63 packets (absent: right
    /// above `allreduce_ll_max`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allreduce_ll63_min: Option<u64>,
    /// Largest all-reduce (bytes) of the LL63 window done in one shot (every rank sends
    /// its whole input to every peer) instead of over all pairs (absent or 0: never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allreduce_ll63_oneshot_max: Option<u64>,
    /// Smallest all-gather (bytes, the output) done with LL63 packets, before the LL16
    /// sizes (absent or 0: right above them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allgather_ll63_min: Option<u64>,
    /// Largest all-gather (bytes, the output) done with LL63 packets (absent or 0:
    /// never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allgather_ll63_max: Option<u64>,
    /// Smallest reduce-scatter (bytes, the whole input: n x the per-rank chunk) done
    /// with LL63 packets, before the LL16 sizes (absent or 0: right above them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reducescatter_ll63_min: Option<u64>,
    /// Largest reduce-scatter (bytes, the whole input) done with LL63 packets (absent
    /// or 0: never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reducescatter_ll63_max: Option<u64>,
    /// Smallest broadcast (bytes) on 2 ranks done by the copy engines (absent or 0:
    /// never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broadcast_ce_min: Option<u64>,
    /// Smallest send-recv (bytes) done by the copy engines (absent or 0: never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sendrecv_ce_min: Option<u64>,
    /// Smallest reduce (bytes) on 2 ranks done by the copy engine (absent or 0: never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reduce_ce_min: Option<u64>,
    /// Smallest all-reduce (bytes) on 3 or more ranks whose ring hands its first
    /// reduce-scatter step and its last all-gather steps to the copy engines (absent or
    /// 0: never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allreduce_ce_min: Option<u64>,
    /// Smallest all-reduce (bytes) done with the ring kernel (absent or 0: never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allreduce_ring_min: Option<u64>,
    /// Smallest all-gather (output bytes) done with the ring kernel (absent or 0: never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allgather_ring_min: Option<u64>,
    /// Smallest reduce-scatter (input bytes) done with the ring kernel (absent or 0:
    /// never).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reducescatter_ring_min: Option<u64>,
    /// Vectors per thread in one chain chunk (1..=32; absent: `COMMHAL_COLL_CHAIN_UNROLL`'s
    /// declared default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain_unroll: Option<u64>,
    /// Vectors per thread in one ring chunk (1..=32; absent: `COMMHAL_COLL_RING_UNROLL`'s
    /// declared default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ring_unroll: Option<u64>,
    /// Vectors per thread in one chunk of the reduce chain (1..=32; absent:
    /// `chain_unroll`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reduce_chain_unroll: Option<u64>,
    /// Threads per block of the LL16 kernels and the LL16 packet plans (32..=512,
    /// whole warps; absent: `COMMHAL_COLL_LL_THREADS`' declared default). Not swept:
    /// set from a measured A/B (see the note).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ll_threads: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    gpu: Vec<String>,
    ranks: BTreeMap<String, Section>,
}

/// A parsed tuning file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TuningFile {
    /// GPU model name prefixes this file applies to.
    pub gpu: Vec<String>,
    /// Sections by rank count.
    pub ranks: BTreeMap<u32, Section>,
}

impl TuningFile {
    /// Parse and check `text`; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<TuningFile> {
        let bad = |msg: String| {
            CollError::invalid(format!(
                "tuning file {origin}: {msg} (the format is described at the top of algorithms/tuning/gpu-cuda-h200.toml)"
            ))
        };
        let raw: RawFile = toml::from_str(text).map_err(|e| bad(e.to_string()))?;
        if raw.gpu.is_empty() || raw.gpu.iter().any(|g| g.trim().is_empty()) {
            return Err(bad(
                "`gpu` must list at least one non-empty GPU name prefix".into(),
            ));
        }
        let mut ranks = BTreeMap::new();
        for (key, s) in raw.ranks {
            let n: u32 = key
                .trim()
                .parse()
                .ok()
                .filter(|n| (1..=layout::MAX_RANKS as u32).contains(n))
                .ok_or_else(|| {
                    bad(format!(
                        "[ranks.{key}]: the key must be a rank count 1..={}",
                        layout::MAX_RANKS
                    ))
                })?;
            check_section(n, &s).map_err(bad)?;
            ranks.insert(n, s);
        }
        if ranks.is_empty() {
            return Err(bad("no [ranks.N] section".into()));
        }
        Ok(TuningFile {
            gpu: raw.gpu,
            ranks,
        })
    }

    /// Does this file name `gpu` (a driver device name)? Returns the longest matching
    /// prefix's length.
    pub fn matches(&self, gpu: &str) -> Option<usize> {
        let g = gpu.trim().to_ascii_lowercase();
        self.gpu
            .iter()
            .map(|p| p.trim().to_ascii_lowercase())
            .filter(|p| g.starts_with(p.as_str()))
            .map(|p| p.len())
            .max()
    }

    /// The section for `n` ranks: exact, else the nearest rank count (ties: the
    /// larger). Returns the section's rank count too.
    pub fn section(&self, n: u32) -> (u32, &Section) {
        let mut best: Option<(u32, &Section)> = None;
        for (&k, s) in &self.ranks {
            let better = match best {
                None => true,
                // ascending keys: `<=` lets the larger key win a tie
                Some((b, _)) => k.abs_diff(n) <= b.abs_diff(n),
            };
            if better {
                best = Some((k, s));
            }
        }
        // `parse` refuses files without sections; an empty hand-built file gets the
        // built-in defaults rather than a panic.
        best.unwrap_or((0, &FALLBACK))
    }

    /// The file as TOML: [`HEADER`], a status line per section (tuned: GPU, date,
    /// command), then the data (each section's keys in [`Section`]'s order, absent
    /// optional keys left out).
    pub fn render(&self) -> Result<String> {
        let q = |s: &str| toml::Value::String(s.to_string()).to_string();
        let mut out = String::from(HEADER);
        out += "#\n# Status:\n";
        for (n, s) in &self.ranks {
            if s.tuned {
                out += &format!(
                    "#   [ranks.{n}] tuned on {} ({} ranks), {}, by: {}\n",
                    or_dash(&s.gpu_name),
                    n,
                    or_dash(&s.date),
                    or_dash(&s.command)
                );
            } else {
                out += &format!("#   [ranks.{n}] not tuned: {}\n", or_dash(&s.note));
            }
        }
        out += "\n";
        out += &format!(
            "gpu = [{}]\n",
            self.gpu.iter().map(|g| q(g)).collect::<Vec<_>>().join(", ")
        );
        for (n, s) in &self.ranks {
            out += &format!("\n[ranks.{n}]\n");
            out += &toml::to_string(s).map_err(|e| {
                CollError::invalid(format!("[ranks.{n}]: cannot write it as TOML: {e}"))
            })?;
        }
        Ok(out)
    }
}

/// Every key of `s` in the range its declaration gives (the declaration of the key's
/// variable in [`commhal_hal::settings::gpu`]); the message says which is not.
fn check_section(n: u32, s: &Section) -> std::result::Result<(), String> {
    let table = toml::Value::try_from(s)
        .map_err(|e| format!("[ranks.{n}]: cannot read it back as TOML: {e}"))?;
    let Some(table) = table.as_table() else {
        return Err(format!("[ranks.{n}] is not a table"));
    };
    for (key, value) in table {
        let (Some(setting), Some(v)) = (decl::threshold(key), value.as_integer()) else {
            continue;
        };
        if setting.parse_number(&v.to_string()).is_err() {
            return Err(format!(
                "[ranks.{n}] {key} = {v}: expected {} (as {})",
                setting.expected(),
                setting.env
            ));
        }
    }
    Ok(())
}

fn or_dash(s: &str) -> &str {
    if s.is_empty() { "-" } else { s }
}

/// The built-in defaults (4-rank values) if a file has no usable section.
pub static FALLBACK: Section = Section {
    tuned: false,
    note: String::new(),
    gpu_name: String::new(),
    date: String::new(),
    command: String::new(),
    allreduce_ll_max: 128 << 10,
    allreduce_push_min: 32 << 20,
    allgather_reducescatter_ll_chunk_max: 64 << 10,
    broadcast_sf_min: 1 << 20,
    reducescatter_push_min: None,
    reducescatter_push_max: None,
    broadcast_reduce_ll_max: None,
    broadcast_chain_min: None,
    reduce_chain_min: None,
    allgather_narrow_min: None,
    reduce_all_max: None,
    broadcast_ll63_max: None,
    reduce_ll63_max: None,
    allreduce_ll63_max: None,
    allreduce_ll63_min: None,
    allreduce_ll63_oneshot_max: None,
    allgather_ll63_min: None,
    allgather_ll63_max: None,
    reducescatter_ll63_min: None,
    reducescatter_ll63_max: None,
    broadcast_ce_min: None,
    sendrecv_ce_min: None,
    reduce_ce_min: None,
    allreduce_ce_min: None,
    allreduce_ring_min: None,
    allgather_ring_min: None,
    reducescatter_ring_min: None,
    chain_unroll: None,
    ring_unroll: None,
    reduce_chain_unroll: None,
    ll_threads: None,
    threads: 512,
    max_blocks: 0,
};

/// Largest per-peer LL chunk any setting can ask for (bytes): the top of
/// `COMMHAL_COLL_LL_CHUNK_MAX`'s declared range.
pub const LL_CHUNK_CAP: u64 = 4 << 20;

/// Where the thresholds in effect come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provenance {
    /// Embedded file name or `COMMHAL_GPU_TUNING`'s path.
    pub file: String,
    /// The section used (`[ranks.N]`).
    pub ranks: u32,
    /// Whether that section was written by the tuner.
    pub tuned: bool,
    /// False when no embedded file names this GPU (the first one's values are used).
    pub gpu_matched: bool,
    /// Overrides applied (environment variable names, `ll_max argument`, `forced`).
    pub overrides: Vec<&'static str>,
}

impl fmt::Display for Provenance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} [ranks.{}] ({})",
            self.file,
            self.ranks,
            if self.tuned { "tuned" } else { "not tuned" }
        )?;
        if !self.gpu_matched {
            write!(f, ", no file names this GPU")?;
        }
        if !self.overrides.is_empty() {
            write!(f, ", overridden by {}", self.overrides.join(", "))?;
        }
        Ok(())
    }
}

/// Thresholds the tuner forces for one candidate (internal meaning: `push_min` 0 =
/// never; `bcast_sf_min` 0 = always, `u64::MAX` = never).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Forced {
    /// All-reduce LL maximum (also sizes the LL slots).
    pub ll_max: Option<u64>,
    /// All-reduce push minimum.
    pub push_min: Option<u64>,
    /// All-gather / reduce-scatter LL chunk maximum.
    pub ll_chunk_max: Option<u64>,
    /// Broadcast scatter + forward minimum.
    pub bcast_sf_min: Option<u64>,
    /// Broadcast chain minimum (0: never).
    pub bcast_chain_min: Option<u64>,
    /// All-reduce ring minimum (0: never).
    pub ar_ring_min: Option<u64>,
    /// All-gather ring minimum (0: never).
    pub ag_ring_min: Option<u64>,
    /// Reduce-scatter ring minimum (0: never).
    pub rs_ring_min: Option<u64>,
    /// Reduce chain minimum (0: never).
    pub reduce_chain_min: Option<u64>,
    /// Smallest narrow-grid all-gather (0: never).
    pub ag_narrow_min: Option<u64>,
    /// Reduce-scatter push minimum (0: never).
    pub rs_push_min: Option<u64>,
    /// Reduce-scatter push maximum.
    pub rs_push_max: Option<u64>,
    /// Largest reduce where the root works too (0: never).
    pub reduce_all_max: Option<u64>,
    /// Largest LL63 broadcast (0: never).
    pub bcast_ll63_max: Option<u64>,
    /// Largest LL63 reduce (0: never).
    pub reduce_ll63_max: Option<u64>,
    /// Smallest LL63 all-gather (0: right above the LL16 sizes).
    pub ag_ll63_min: Option<u64>,
    /// Largest LL63 all-gather (0: never).
    pub ag_ll63_max: Option<u64>,
    /// Smallest LL63 reduce-scatter (0: right above the LL16 sizes).
    pub rs_ll63_min: Option<u64>,
    /// Largest LL63 reduce-scatter (0: never).
    pub rs_ll63_max: Option<u64>,
    /// Largest LL63 all-reduce (0: never).
    pub ar_ll63_max: Option<u64>,
    /// Smallest copy-engine broadcast, 2 ranks (0: never).
    pub bcast_ce_min: Option<u64>,
    /// Smallest copy-engine send-recv (0: never).
    pub sendrecv_ce_min: Option<u64>,
    /// Smallest copy-engine reduce, 2 ranks (0: never).
    pub reduce_ce_min: Option<u64>,
    /// Smallest all-reduce whose ring ends on the copy engines, 3+ ranks (0: never).
    pub ar_ce_min: Option<u64>,
    /// Largest LL16 broadcast / reduce (still never above the LL chunk cap).
    pub rooted_ll_max: Option<u64>,
}

thread_local! {
    static FORCED: Cell<Option<Forced>> = const { Cell::new(None) };
}

/// Run `body` (typically `Comm::new`) with `forced` overriding everything else on this
/// thread; the previous state is restored afterwards (also on unwinding).
pub fn with_forced<R>(forced: Forced, body: impl FnOnce() -> R) -> R {
    struct Restore(Option<Forced>);
    impl Drop for Restore {
        fn drop(&mut self) {
            FORCED.with(|f| f.set(self.0));
        }
    }
    let _restore = Restore(FORCED.with(|f| f.replace(Some(forced))));
    body()
}

/// The embedded file for `gpu`: the longest `gpu` prefix match, else the first file.
/// Returns `(name, file, matched)`.
pub fn embedded_for(gpu: &str) -> Result<(&'static str, TuningFile, bool)> {
    let mut best: Option<(usize, &'static str, TuningFile)> = None;
    let mut first = None;
    for &(name, text) in EMBEDDED {
        let f = TuningFile::parse(text, name)?;
        if let Some(len) = f.matches(gpu)
            && best.as_ref().is_none_or(|(b, _, _)| len > *b)
        {
            best = Some((len, name, f.clone()));
        }
        if first.is_none() {
            first = Some((name, f));
        }
    }
    match (best, first) {
        (Some((_, name, f)), _) => Ok((name, f, true)),
        (None, Some((name, f))) => Ok((name, f, false)),
        (None, None) => Err(CollError::invalid("no embedded GPU tuning file")),
    }
}

/// The tuning for a `ranks`-rank communicator on `gpu` (the driver's device name)
/// with `sms` multiprocessors, from the process environment (see the module docs).
pub fn resolve(
    gpu: &str,
    ranks: u32,
    sms: u32,
    ll_max: Option<u64>,
    device_timeout: Duration,
) -> Result<(Tuning, Provenance)> {
    resolve_with(
        gpu,
        ranks,
        sms,
        ll_max,
        device_timeout,
        &commhal_hal::settings::process_env,
    )
}

/// A setting's value from `env` (`None`: unset), or the error that names it.
fn env_number(setting: &Setting, env: Env<'_>) -> Result<Option<u64>> {
    setting
        .number_in(env)
        .map_err(|e| CollError::invalid(e.to_string()))
}

/// [`resolve`] with the environment given as a function (tests).
pub fn resolve_with(
    gpu: &str,
    ranks: u32,
    sms: u32,
    ll_max_arg: Option<u64>,
    device_timeout: Duration,
    env: Env<'_>,
) -> Result<(Tuning, Provenance)> {
    let var = GPU_TUNING.env;
    let (file_name, file, gpu_matched) = match GPU_TUNING.raw_in(env) {
        Some(path) => {
            let text = std::fs::read_to_string(&path).map_err(|e| {
                CollError::invalid(format!(
                    "{var}={path}: cannot read it ({e}); point it at a tuning TOML or unset it"
                ))
            })?;
            let origin = format!("{path} ({var})");
            let parsed = TuningFile::parse(&text, &origin)?;
            (path, parsed, true)
        }
        None => {
            let (name, f, matched) = embedded_for(gpu)?;
            (name.to_string(), f, matched)
        }
    };
    let (key, s) = file.section(ranks);
    let mut overrides = Vec::new();
    let forced = FORCED.with(Cell::get).unwrap_or_default();
    // Strongest first: the tuner's forced value, the argument, the variable, the file.
    // The variable is read (and refused when invalid) even where something stronger
    // wins, so a typo is refused wherever it is set.
    let mut pick = |forced: Option<u64>,
                    arg: Option<(Option<u64>, &'static str)>,
                    setting: &'static Setting,
                    file: u64|
     -> Result<u64> {
        let from_env = env_number(setting, env)?;
        if let Some(v) = forced {
            overrides.push("forced");
            return Ok(v);
        }
        if let Some((Some(v), what)) = arg {
            overrides.push(what);
            return Ok(v);
        }
        if let Some(v) = from_env {
            overrides.push(setting.env);
            return Ok(v);
        }
        Ok(file)
    };
    // an optional key the file leaves out: its declared default
    let absent =
        |file: Option<u64>, setting: &Setting| file.unwrap_or_else(|| setting.default_number());
    let ll_max = pick(
        forced.ll_max,
        Some((ll_max_arg, "ll_max argument")),
        &decl::COLL_LL_MAX,
        s.allreduce_ll_max,
    )?;
    let push_min = pick(
        forced.push_min,
        None,
        &decl::COLL_PUSH_MIN,
        s.allreduce_push_min,
    )?;
    let rs_push_min = pick(
        forced.rs_push_min,
        None,
        &decl::COLL_RS_PUSH_MIN,
        s.reducescatter_push_min.unwrap_or(s.allreduce_push_min),
    )?;
    let rs_push_max = pick(
        forced.rs_push_max,
        None,
        &decl::COLL_RS_PUSH_MAX,
        absent(s.reducescatter_push_max, &decl::COLL_RS_PUSH_MAX),
    )?;
    // optional minimums: 0 (or absent) = never, stored as u64::MAX so `bytes >= min` is
    // the whole test
    let mut min_or_never =
        |forced: Option<u64>, setting: &'static Setting, file: Option<u64>| -> Result<u64> {
            Ok(match pick(forced, None, setting, absent(file, setting))? {
                0 => u64::MAX,
                v => v,
            })
        };
    let bcast_chain_min = min_or_never(
        forced.bcast_chain_min,
        &decl::COLL_BCAST_CHAIN_MIN,
        s.broadcast_chain_min,
    )?;
    let reduce_chain_min = min_or_never(
        forced.reduce_chain_min,
        &decl::COLL_REDUCE_CHAIN_MIN,
        s.reduce_chain_min,
    )?;
    let ag_narrow_min = min_or_never(
        forced.ag_narrow_min,
        &decl::COLL_AG_NARROW_MIN,
        s.allgather_narrow_min,
    )?;
    let ar_ring_min = min_or_never(
        forced.ar_ring_min,
        &decl::COLL_AR_RING_MIN,
        s.allreduce_ring_min,
    )?;
    let ag_ring_min = min_or_never(
        forced.ag_ring_min,
        &decl::COLL_AG_RING_MIN,
        s.allgather_ring_min,
    )?;
    let rs_ring_min = min_or_never(
        forced.rs_ring_min,
        &decl::COLL_RS_RING_MIN,
        s.reducescatter_ring_min,
    )?;
    let bcast_ce_min = min_or_never(
        forced.bcast_ce_min,
        &decl::COLL_BCAST_CE_MIN,
        s.broadcast_ce_min,
    )?;
    let sendrecv_ce_min = min_or_never(
        forced.sendrecv_ce_min,
        &decl::COLL_SENDRECV_CE_MIN,
        s.sendrecv_ce_min,
    )?;
    let reduce_ce_min = min_or_never(
        forced.reduce_ce_min,
        &decl::COLL_REDUCE_CE_MIN,
        s.reduce_ce_min,
    )?;
    let ar_ce_min = min_or_never(forced.ar_ce_min, &decl::COLL_AR_CE_MIN, s.allreduce_ce_min)?;
    let reduce_all_max = pick(
        forced.reduce_all_max,
        None,
        &decl::COLL_REDUCE_ALL_MAX,
        absent(s.reduce_all_max, &decl::COLL_REDUCE_ALL_MAX),
    )?;
    let bcast_ll63_max = pick(
        forced.bcast_ll63_max,
        None,
        &decl::COLL_BCAST_LL63_MAX,
        absent(s.broadcast_ll63_max, &decl::COLL_BCAST_LL63_MAX),
    )?;
    let reduce_ll63_max = pick(
        forced.reduce_ll63_max,
        None,
        &decl::COLL_REDUCE_LL63_MAX,
        absent(s.reduce_ll63_max, &decl::COLL_REDUCE_LL63_MAX),
    )?;
    let ar_ll63_min = pick(
        None,
        None,
        &decl::COLL_AR_LL63_MIN,
        absent(s.allreduce_ll63_min, &decl::COLL_AR_LL63_MIN),
    )?;
    let ar_ll63_max = pick(
        forced.ar_ll63_max,
        None,
        &decl::COLL_AR_LL63_MAX,
        absent(s.allreduce_ll63_max, &decl::COLL_AR_LL63_MAX),
    )?;
    let ar_ll63_oneshot_max = pick(
        None,
        None,
        &decl::COLL_AR_LL63_ONESHOT_MAX,
        absent(
            s.allreduce_ll63_oneshot_max,
            &decl::COLL_AR_LL63_ONESHOT_MAX,
        ),
    )?;
    let ag_ll63_min = pick(
        forced.ag_ll63_min,
        None,
        &decl::COLL_AG_LL63_MIN,
        absent(s.allgather_ll63_min, &decl::COLL_AG_LL63_MIN),
    )?;
    let ag_ll63_max = pick(
        forced.ag_ll63_max,
        None,
        &decl::COLL_AG_LL63_MAX,
        absent(s.allgather_ll63_max, &decl::COLL_AG_LL63_MAX),
    )?;
    let rs_ll63_min = pick(
        forced.rs_ll63_min,
        None,
        &decl::COLL_RS_LL63_MIN,
        absent(s.reducescatter_ll63_min, &decl::COLL_RS_LL63_MIN),
    )?;
    let rs_ll63_max = pick(
        forced.rs_ll63_max,
        None,
        &decl::COLL_RS_LL63_MAX,
        absent(s.reducescatter_ll63_max, &decl::COLL_RS_LL63_MAX),
    )?;
    // optional keys set by the variable or the file only (absent: the declared
    // default): the unrolls (1..=32 in the file, TuningFile::parse, and the variable)
    // and the LL16 kernels' threads a block
    let (chain_unroll, ring_unroll, ll_threads) = {
        let mut optional = |setting: &'static Setting, file: Option<u64>| {
            pick(None, None, setting, absent(file, setting)).map(|v| v as u32)
        };
        (
            optional(&decl::COLL_CHAIN_UNROLL, s.chain_unroll)?,
            optional(&decl::COLL_RING_UNROLL, s.ring_unroll)?,
            optional(&decl::COLL_LL_THREADS, s.ll_threads)?,
        )
    };
    let reduce_chain_unroll = pick(
        None,
        None,
        &decl::COLL_REDUCE_CHAIN_UNROLL,
        s.reduce_chain_unroll.unwrap_or(u64::from(chain_unroll)),
    )? as u32;
    // the file's 0: never (u64::MAX); the variable's 0: always
    let bcast_sf_min = pick(
        forced.bcast_sf_min,
        None,
        &decl::COLL_BCAST_SF_MIN,
        if s.broadcast_sf_min == 0 {
            u64::MAX
        } else {
            s.broadcast_sf_min
        },
    )?;
    let ll_chunk_max = pick(
        forced.ll_chunk_max,
        None,
        &decl::COLL_LL_CHUNK_MAX, // 0: no LL16 chunks (every per-peer transfer on its bulk kernel)
        s.allgather_reducescatter_ll_chunk_max,
    )?
    // the LL slots are sized for max(ll_max, ll_chunk_max) (Comm::new); beyond 4 MiB
    // per peer LL never pays (twice the bytes on the wire) and the slots would be large
    // (the declared range ends there; the tuner's forced values are capped here)
    .min(if ll_max == 0 { 0 } else { LL_CHUNK_CAP }); // ll_max 0: no LL at all
    // the rooted collectives' own LL16 cap, never above the chunk cap (so forcing
    // ll_chunk_max to 0, as the tuner's candidates do, turns it off too)
    let rooted_ll_max = pick(
        forced.rooted_ll_max,
        None,
        &decl::COLL_BCAST_REDUCE_LL_MAX,
        absent(s.broadcast_reduce_ll_max, &decl::COLL_BCAST_REDUCE_LL_MAX),
    )?
    .min(ll_chunk_max);
    // 32..=512 in the file and the variable (1024 runs out of registers in the
    // two-shot kernels)
    let threads = pick(None, None, &decl::COLL_THREADS, u64::from(s.threads))? as u32;
    for (t, decl) in [
        (threads, &decl::COLL_THREADS),
        (ll_threads, &decl::COLL_LL_THREADS),
    ] {
        // whole warps: the kernels split blocks into warps and barrier the whole block
        if !t.is_multiple_of(32) {
            return Err(CollError::invalid(format!(
                "{} / `{}` = {t}: give a multiple of 32 (whole warps) in 32..=512",
                decl.env,
                match decl.key {
                    commhal_hal::settings::FileKey::Tuning(k) => k,
                    _ => "threads",
                }
            )));
        }
    }
    let max_blocks = match pick(None, None, &decl::COLL_MAX_BLOCKS, u64::from(s.max_blocks))? {
        0 => sms.clamp(1, layout::MAX_BLOCKS),
        b => b as u32, // 1..=MAX_BLOCKS in the file and the variable
    };
    overrides.dedup();
    Ok((
        Tuning {
            ll_max,
            ll_chunk_max,
            rooted_ll_max,
            push_min,
            rs_push_min,
            rs_push_max,
            bcast_sf_min,
            bcast_chain_min,
            reduce_chain_min,
            ag_narrow_min,
            reduce_all_max,
            bcast_ll63_max,
            reduce_ll63_max,
            ar_ll63_min,
            ar_ll63_max,
            ar_ll63_oneshot_max,
            ag_ll63_min,
            ag_ll63_max,
            rs_ll63_min,
            rs_ll63_max,
            ar_ring_min,
            ag_ring_min,
            rs_ring_min,
            bcast_ce_min,
            sendrecv_ce_min,
            reduce_ce_min,
            ar_ce_min,
            chain_unroll,
            ring_unroll,
            reduce_chain_unroll,
            threads,
            ll_threads,
            max_blocks,
            device_timeout,
        },
        Provenance {
            file: file_name,
            ranks: key,
            tuned: s.tuned,
            gpu_matched,
            overrides,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn resolve_env(
        gpu: &str,
        n: u32,
        arg: Option<u64>,
        vars: &[(&str, &str)],
    ) -> (Tuning, Provenance) {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let env = move |k: &str| vars.iter().find(|(a, _)| a == k).map(|(_, v)| v.clone());
        resolve_with(gpu, n, 132, arg, Duration::from_secs(1), &env).unwrap()
    }

    #[test]
    fn embedded_files_parse_and_round_trip() {
        for (name, text) in EMBEDDED {
            let f = TuningFile::parse(text, name).unwrap();
            assert!(
                f.ranks.contains_key(&2) && f.ranks.contains_key(&4) && f.ranks.contains_key(&8)
            );
            let again = TuningFile::parse(&f.render().unwrap(), name).unwrap();
            assert_eq!(f, again, "{name}");
            assert!(f.render().unwrap().starts_with(HEADER));
        }
    }

    /// A section with every optional key set comes back from render + parse unchanged
    /// (a key the renderer left out would fail here, not in a tuner run on the GPUs).
    #[test]
    fn every_key_survives_a_render() {
        let mut full = FALLBACK.clone();
        full.tuned = true;
        full.note = "n \"quoted\"".into();
        full.gpu_name = "G".into();
        full.date = "2026-11-21".into();
        full.command = "commhal tune".into();
        full.reducescatter_push_min = Some(1);
        full.reducescatter_push_max = Some(2);
        full.broadcast_chain_min = Some(3);
        full.reduce_chain_min = Some(4);
        full.allgather_narrow_min = Some(6);
        full.reduce_all_max = Some(5);
        full.broadcast_ll63_max = Some(11);
        full.reduce_ll63_max = Some(12);
        full.broadcast_ce_min = Some(13);
        full.sendrecv_ce_min = Some(14);
        full.reduce_ce_min = Some(15);
        full.allreduce_ce_min = Some(16);
        full.allreduce_ring_min = Some(6);
        full.allgather_ring_min = Some(7);
        full.reducescatter_ring_min = Some(8);
        full.chain_unroll = Some(9);
        full.ring_unroll = Some(10);
        full.reduce_chain_unroll = Some(17);
        full.reducescatter_ll63_min = Some(18);
        full.reducescatter_ll63_max = Some(19);
        let f = TuningFile {
            gpu: vec!["G".into()],
            ranks: [(4, full)].into(),
        };
        let text = f.render().unwrap();
        assert_eq!(TuningFile::parse(&text, "full").unwrap(), f, "{text}");
        // and the fallback (every optional key absent) too
        let g = TuningFile {
            gpu: vec!["G".into()],
            ranks: [(2, FALLBACK.clone())].into(),
        };
        assert_eq!(
            TuningFile::parse(&g.render().unwrap(), "fallback").unwrap(),
            g
        );
    }

    /// The committed file is exactly what the renderer writes, so a tuner run changes
    /// only what it measured.
    #[test]
    fn committed_file_is_canonical() {
        let (name, text) = EMBEDDED[0];
        let f = TuningFile::parse(text, name).unwrap();
        let rendered = f.render().unwrap();
        if rendered != text {
            // COMMHAL_RERENDER=1: write the rendering over the file (then check the diff)
            if commhal_hal::settings::tests::RERENDER
                .flag()
                .unwrap_or_else(|e| panic!("{e}"))
            {
                let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../algorithms/tuning/");
                std::fs::write(format!("{path}{name}"), &rendered).unwrap();
            }
            panic!(
                "{name} differs from its rendering: re-render it (COMMHAL_RERENDER=1 cargo test -p commhal-cuda-coll committed_file_is_canonical, then check git diff)"
            );
        }
    }

    /// The file reproduces the defaults `Comm::new` had hard-coded.
    #[test]
    fn defaults_match_the_former_hard_coded_values() {
        for (n, ll) in [
            (1, 256 << 10),
            (2, 256 << 10),
            (3, 128 << 10),
            (4, 128 << 10),
            (8, 128 << 10),
        ] {
            let (t, p) =
                resolve_with("NVIDIA H200", n, 132, None, Duration::from_secs(1), &no_env).unwrap();
            if p.tuned {
                // A section the tuner wrote: the file's numbers, not the old defaults.
                let f = TuningFile::parse(EMBEDDED[0].1, "e").unwrap();
                let sec = f.section(n).1;
                assert_eq!(t.ll_max, sec.allreduce_ll_max, "{n} ranks");
                assert_eq!(t.push_min, sec.allreduce_push_min, "{n} ranks");
                continue;
            }
            assert_eq!(t.ll_max, ll, "{n} ranks");
            assert_eq!(t.push_min, 32 << 20);
            assert_eq!(t.ll_chunk_max, 64 << 10);
            assert_eq!(t.bcast_sf_min, 1 << 20);
            assert_eq!(t.threads, 512);
            assert_eq!(t.max_blocks, 132, "0 in the file: the SM count");
            assert!(p.gpu_matched && !p.tuned && p.overrides.is_empty(), "{p}");
            assert_eq!(p.file, "gpu-cuda-h200.toml");
        }
    }

    #[test]
    fn gpu_name_matching_and_fallback() {
        let (_, p) = resolve_env("NVIDIA H100 80GB HBM3", 4, None, &[]);
        assert!(p.gpu_matched, "{p}");
        let (_, p) = resolve_env("nvidia h200", 4, None, &[]);
        assert!(p.gpu_matched, "case-insensitive: {p}");
        let (t, p) = resolve_env("NVIDIA A100-SXM4-80GB", 4, None, &[]);
        assert!(!p.gpu_matched, "{p}");
        assert_eq!(t.ll_max, 128 << 10, "fallback file's values");
        assert!(p.to_string().contains("no file names this GPU"), "{p}");
    }

    #[test]
    fn nearest_rank_count() {
        let text = "gpu = [\"X\"]\n[ranks.2]\ntuned = true\nallreduce_ll_max = 2\nallreduce_push_min = 0\nallgather_reducescatter_ll_chunk_max = 1\nbroadcast_sf_min = 0\nthreads = 64\nmax_blocks = 7\n[ranks.4]\ntuned = false\nallreduce_ll_max = 4\nallreduce_push_min = 0\nallgather_reducescatter_ll_chunk_max = 1\nbroadcast_sf_min = 0\nthreads = 64\nmax_blocks = 7\n[ranks.8]\ntuned = false\nallreduce_ll_max = 8\nallreduce_push_min = 0\nallgather_reducescatter_ll_chunk_max = 1\nbroadcast_sf_min = 0\nthreads = 64\nmax_blocks = 7\n";
        let f = TuningFile::parse(text, "t").unwrap();
        let key = |n| f.section(n).0;
        assert_eq!(
            (1..=8).map(key).collect::<Vec<_>>(),
            vec![2, 2, 4, 4, 4, 8, 8, 8],
            "nearest, ties to the larger"
        );
        let only4 = TuningFile {
            gpu: f.gpu.clone(),
            ranks: [(4, f.ranks[&4].clone())].into(),
        };
        assert_eq!(only4.section(1).0, 4);
        assert_eq!(only4.section(8).0, 4);
    }

    #[test]
    fn parse_errors_say_what_is_wrong() {
        let ok = "gpu = [\"X\"]\n[ranks.2]\ntuned = false\nallreduce_ll_max = 2\nallreduce_push_min = 0\nallgather_reducescatter_ll_chunk_max = 1\nbroadcast_sf_min = 0\nthreads = 64\nmax_blocks = 0\n";
        TuningFile::parse(ok, "t").unwrap();
        for (bad, want) in [
            (ok.replace("[ranks.2]", "[ranks.two]"), "rank count"),
            (ok.replace("[ranks.2]", "[ranks.9]"), "rank count"),
            (ok.replace("threads = 64", "threads = 1024"), "32..=512"),
            (
                ok.replace("max_blocks = 0", "max_blocks = 5000"),
                "max_blocks",
            ),
            (
                format!("{ok}ring_unroll = 99\n"),
                "ring_unroll = 99: expected a whole number in 1..=32 (as COMMHAL_COLL_RING_UNROLL)",
            ),
            (
                ok.replace(
                    "allgather_reducescatter_ll_chunk_max = 1",
                    "allgather_reducescatter_ll_chunk_max = 8388608",
                ),
                "0..=4194304",
            ),
            (ok.replace("gpu = [\"X\"]", "gpu = []"), "prefix"),
            (
                ok.replace("tuned = false", "tuned = false\nll_maxx = 3"),
                "unknown field",
            ),
            (ok.replace("allreduce_ll_max = 2\n", ""), "allreduce_ll_max"),
            ("gpu = [\"X\"]\n".to_string(), "ranks"),
            ("not toml [".to_string(), "tuning file t"),
        ] {
            let e = TuningFile::parse(&bad, "t").unwrap_err().to_string();
            assert!(e.contains(want), "{want:?} not in {e}");
            assert!(e.contains("tuning file t"), "{e}");
        }
    }

    #[test]
    fn environment_overrides_the_file() {
        let (t, p) = resolve_env(
            "NVIDIA H200",
            4,
            None,
            &[
                ("COMMHAL_COLL_LL_MAX", "65536"),
                ("COMMHAL_COLL_PUSH_MIN", "0"),
                ("COMMHAL_COLL_LL_CHUNK_MAX", "1048576"),
                ("COMMHAL_COLL_BCAST_SF_MIN", "0"),
                ("COMMHAL_COLL_THREADS", "256"),
                ("COMMHAL_COLL_MAX_BLOCKS", "64"),
            ],
        );
        assert_eq!(t.ll_max, 65536);
        assert_eq!(t.push_min, 0, "0: never push");
        assert_eq!(
            t.ll_chunk_max,
            1 << 20,
            "not capped: the slots are sized for both"
        );
        assert_eq!(t.bcast_sf_min, 0, "env 0: always scatter + forward");
        assert_eq!(t.threads, 256);
        assert_eq!(t.max_blocks, 64);
        assert_eq!(p.overrides.len(), 6, "{p}");
        // 0 chunks: no LL16 chunk kernels
        let (t, _) = resolve_env(
            "NVIDIA H200",
            4,
            None,
            &[("COMMHAL_COLL_LL_CHUNK_MAX", "0")],
        );
        assert_eq!(t.ll_chunk_max, 0);
        // LL_MAX 0, as the file's 0 and the argument's: no LL kernels at all;
        // MAX_BLOCKS 0, as the file's 0: the SM count
        let (t, p) = resolve_env(
            "NVIDIA H200",
            4,
            None,
            &[
                ("COMMHAL_COLL_LL_MAX", "0"),
                ("COMMHAL_COLL_MAX_BLOCKS", "0"),
            ],
        );
        assert_eq!((t.ll_max, t.ll_chunk_max, t.max_blocks), (0, 0, 132));
        assert!(p.overrides.contains(&"COMMHAL_COLL_LL_MAX"), "{p}");
        // byte thresholds take K / M / G
        let (t, _) = resolve_env("NVIDIA H200", 4, None, &[("COMMHAL_COLL_PUSH_MIN", "8M")]);
        assert_eq!(t.push_min, 8 << 20);
        // the argument beats the variable; forced beats both
        let (t, p) = resolve_env(
            "NVIDIA H200",
            4,
            Some(0),
            &[("COMMHAL_COLL_LL_MAX", "4096")],
        );
        assert_eq!((t.ll_max, t.ll_chunk_max), (0, 0));
        assert_eq!(p.overrides, vec!["ll_max argument"]);
        let forced = Forced {
            ll_max: Some(7),
            bcast_sf_min: Some(u64::MAX),
            ..Forced::default()
        };
        let (t, p) = with_forced(forced, || {
            resolve_env(
                "NVIDIA H200",
                4,
                Some(0),
                &[("COMMHAL_COLL_LL_MAX", "4096")],
            )
        });
        assert_eq!((t.ll_max, t.bcast_sf_min), (7, u64::MAX));
        assert!(p.overrides.contains(&"forced"));
        // restored afterwards
        let (t, _) = resolve_env("NVIDIA H200", 4, None, &[]);
        assert_eq!(t.ll_max, 128 << 10);
    }

    fn resolve_err(n: u32, arg: Option<u64>, vars: &[(&str, &str)]) -> String {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let env = move |k: &str| vars.iter().find(|(a, _)| a == k).map(|(_, v)| v.clone());
        resolve_with("NVIDIA H200", n, 132, arg, Duration::from_secs(1), &env)
            .unwrap_err()
            .to_string()
    }

    /// A variable outside its declared range is refused with a message that names it,
    /// the value and the range (it was once ignored with a warning, or clamped).
    #[test]
    fn invalid_variables_are_errors_that_name_them() {
        for (var, bad, range) in [
            ("COMMHAL_COLL_THREADS", "4096", "32..=512"),
            ("COMMHAL_COLL_THREADS", "lots", "32..=512"),
            ("COMMHAL_COLL_THREADS", "0", "32..=512"),
            ("COMMHAL_COLL_RING_UNROLL", "0", "1..=32"),
            ("COMMHAL_COLL_CHAIN_UNROLL", "33", "1..=32"),
            ("COMMHAL_COLL_REDUCE_CHAIN_UNROLL", "99", "1..=32"),
            ("COMMHAL_COLL_MAX_BLOCKS", "5000", "0..=1024"),
            ("COMMHAL_COLL_LL_CHUNK_MAX", "8M", "0..=4194304"),
            ("COMMHAL_COLL_LL_MAX", "-1", "0.."),
            ("COMMHAL_COLL_PUSH_MIN", "1.5", "0.."),
            ("COMMHAL_COLL_AR_RING_MIN", "never", "0.."),
            ("COMMHAL_COLL_BCAST_SF_MIN", "1 MiB", "0.."),
        ] {
            let e = resolve_err(4, None, &[(var, bad)]);
            assert!(
                e.contains(var) && e.contains(bad) && e.contains(range),
                "{var}={bad}: {e}"
            );
        }
        let e = resolve_err(4, None, &[("COMMHAL_COLL_THREADS", "48")]);
        assert!(
            e.contains("COMMHAL_COLL_THREADS") && e.contains("multiple of 32"),
            "{e}"
        );
        // refused even where the argument or the tuner's forced value wins
        let e = resolve_err(4, Some(4096), &[("COMMHAL_COLL_LL_MAX", "big")]);
        assert!(e.contains("COMMHAL_COLL_LL_MAX"), "{e}");
        let e = with_forced(
            Forced {
                push_min: Some(0),
                ..Forced::default()
            },
            || resolve_err(4, None, &[("COMMHAL_COLL_PUSH_MIN", "x")]),
        );
        assert!(e.contains("COMMHAL_COLL_PUSH_MIN"), "{e}");
    }

    /// The declared defaults are the built-in section's values (the table in the docs
    /// shows them), and the declared ranges the ones the kernels and the layout allow.
    #[test]
    fn declarations_match_the_built_in_values() {
        let table = toml::Value::try_from(&FALLBACK).unwrap();
        let mut keys = 0;
        for (key, value) in table.as_table().unwrap() {
            let Some(setting) = decl::threshold(key) else {
                continue;
            };
            keys += 1;
            assert_eq!(
                setting.default_number(),
                value.as_integer().unwrap() as u64,
                "{key}"
            );
        }
        assert_eq!(keys, 6, "the built-in section's required keys");
        assert_eq!(
            decl::COLL_RS_PUSH_MIN.default_number(),
            FALLBACK.allreduce_push_min,
            "absent: allreduce_push_min"
        );
        assert_eq!(
            decl::COLL_REDUCE_CHAIN_UNROLL.default_number(),
            decl::COLL_CHAIN_UNROLL.default_number(),
            "absent: chain_unroll"
        );
        let range = |s: &Setting| match s.kind {
            commhal_hal::settings::Kind::Number { min, max, .. } => (min, max),
            _ => panic!("{} is not a number", s.env),
        };
        assert_eq!(range(&decl::COLL_LL_CHUNK_MAX), (0, LL_CHUNK_CAP));
        assert_eq!(
            range(&decl::COLL_MAX_BLOCKS),
            (0, u64::from(layout::MAX_BLOCKS))
        );
        for s in [
            &decl::COLL_CHAIN_UNROLL,
            &decl::COLL_RING_UNROLL,
            &decl::COLL_REDUCE_CHAIN_UNROLL,
        ] {
            assert_eq!(
                range(s),
                (1, u64::from(layout::CHAIN_UNROLL_MAX)),
                "{}",
                s.env
            );
        }
        assert_eq!(
            range(&commhal_hal::settings::gpu::PLAN_REPLICAS).1,
            u64::from(crate::plan_exec::MAX_PARTS)
        );
    }

    #[test]
    fn rooted_ll_cap_never_exceeds_the_chunk_cap() {
        // the committed 2-rank section has its own cap (below the chunk cap)
        let (t, _) = resolve_env("NVIDIA H200", 2, None, &[]);
        assert_eq!((t.ll_chunk_max, t.rooted_ll_max), (1 << 20, 128 << 10));
        // 4 ranks: its own too (the tuner's rooted LL16 cap)
        let (t, _) = resolve_env("NVIDIA H200", 4, None, &[]);
        assert_eq!((t.ll_chunk_max, t.rooted_ll_max), (256 << 10, 32 << 10));
        // 8 ranks: its own too (the tuner's); absent: the chunk cap (checked in
        // tuning_file_variable_replaces_the_embedded_file)
        let (t, _) = resolve_env("NVIDIA H200", 8, None, &[]);
        assert_eq!((t.ll_chunk_max, t.rooted_ll_max), (64 << 10, 2 << 10));
        // the variable, but never above the chunk cap; a chunk cap of 0 turns it off
        let (t, p) = resolve_env(
            "NVIDIA H200",
            2,
            None,
            &[("COMMHAL_COLL_BCAST_REDUCE_LL_MAX", "65536")],
        );
        assert_eq!(t.rooted_ll_max, 65536);
        assert!(p.overrides.contains(&"COMMHAL_COLL_BCAST_REDUCE_LL_MAX"));
        let (t, _) = resolve_env(
            "NVIDIA H200",
            2,
            None,
            &[("COMMHAL_COLL_BCAST_REDUCE_LL_MAX", "8388608")],
        );
        assert_eq!(t.rooted_ll_max, 1 << 20);
        let (t, _) = resolve_env(
            "NVIDIA H200",
            2,
            None,
            &[("COMMHAL_COLL_LL_CHUNK_MAX", "0")],
        );
        assert_eq!(t.rooted_ll_max, 0);
    }

    /// The LL63 reduce-scatter window: absent from the file, off (max 0, min 0); the
    /// file's keys, else the variables, which beat the file.
    #[test]
    fn reduce_scatter_ll63_window_from_the_file_and_the_variables() {
        let dir = std::env::temp_dir().join(format!("commhal-rs-ll63-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.toml");
        let p = path.to_string_lossy().to_string();
        let text = "gpu = [\"Other\"]\n[ranks.4]\ntuned = false\nallreduce_ll_max = 4096\nallreduce_push_min = 0\nallgather_reducescatter_ll_chunk_max = 8192\nbroadcast_sf_min = 0\nthreads = 256\nmax_blocks = 16\n";
        std::fs::write(&path, text).unwrap();
        let (t, _) = resolve_env("NVIDIA H200", 4, None, &[(GPU_TUNING.env, &p)]);
        assert_eq!((t.rs_ll63_min, t.rs_ll63_max), (0, 0), "absent: off");
        let keys = "reducescatter_ll63_min = 1048576\nreducescatter_ll63_max = 4194304\n";
        std::fs::write(&path, format!("{text}{keys}")).unwrap();
        let (t, _) = resolve_env("NVIDIA H200", 4, None, &[(GPU_TUNING.env, &p)]);
        assert_eq!((t.rs_ll63_min, t.rs_ll63_max), (1 << 20, 4 << 20));
        assert_eq!(
            (t.ag_ll63_min, t.ag_ll63_max),
            (0, 0),
            "the all-gather's own keys"
        );
        let (t, p) = resolve_env(
            "NVIDIA H200",
            4,
            None,
            &[
                (GPU_TUNING.env, &p),
                ("COMMHAL_COLL_RS_LL63_MIN", "512K"),
                ("COMMHAL_COLL_RS_LL63_MAX", "0"),
            ],
        );
        assert_eq!((t.rs_ll63_min, t.rs_ll63_max), (512 << 10, 0));
        assert!(p.overrides.contains(&"COMMHAL_COLL_RS_LL63_MAX"), "{p}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn tuning_file_variable_replaces_the_embedded_file() {
        let dir = std::env::temp_dir().join(format!("commhal-tuning-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.toml");
        let text = "gpu = [\"Other\"]\n[ranks.4]\ntuned = true\nallreduce_ll_max = 4096\nallreduce_push_min = 0\nallgather_reducescatter_ll_chunk_max = 8192\nbroadcast_sf_min = 0\nthreads = 256\nmax_blocks = 16\n";
        std::fs::write(&path, text).unwrap();
        let p = path.to_string_lossy().to_string();
        let (t, prov) = resolve_env("NVIDIA H200", 2, None, &[(GPU_TUNING.env, &p)]);
        assert_eq!(t.ll_max, 4096);
        assert_eq!(t.ll_chunk_max, 8192, "not capped at ll_max");
        assert_eq!(t.push_min, 0);
        assert_eq!(t.rs_push_min, 0, "absent: the all-reduce push minimum");
        assert_eq!(t.bcast_sf_min, u64::MAX, "file 0: never");
        assert_eq!((t.threads, t.max_blocks), (256, 16));
        assert_eq!(t.rooted_ll_max, t.ll_chunk_max, "absent: the chunk cap");
        assert!(prov.tuned && prov.file == p && prov.ranks == 4, "{prov}");
        // the optional reduce-scatter key, and its variable
        std::fs::write(&path, format!("{text}reducescatter_push_min = 4096\n")).unwrap();
        let (t, _) = resolve_env("NVIDIA H200", 2, None, &[(GPU_TUNING.env, &p)]);
        assert_eq!((t.push_min, t.rs_push_min), (0, 4096));
        assert_eq!(t.rs_push_max, u64::MAX, "absent: no limit");
        std::fs::write(
            &path,
            format!("{text}reducescatter_push_min = 4096\nreducescatter_push_max = 8192\n"),
        )
        .unwrap();
        let (t, _) = resolve_env("NVIDIA H200", 2, None, &[(GPU_TUNING.env, &p)]);
        assert_eq!((t.rs_push_min, t.rs_push_max), (4096, 8192));
        // chains and rings: absent = never (u64::MAX), 0 = never, unroll default 4 / 16;
        // variables beat the file
        assert_eq!(
            (t.bcast_chain_min, t.reduce_chain_min),
            (u64::MAX, u64::MAX)
        );
        assert_eq!(
            (t.ar_ring_min, t.ag_ring_min, t.rs_ring_min),
            (u64::MAX, u64::MAX, u64::MAX)
        );
        assert_eq!((t.chain_unroll, t.ring_unroll), (4, 16));
        std::fs::write(
            &path,
            format!(
                "{text}broadcast_chain_min = 0\nreduce_chain_min = 64\nallreduce_ring_min = 128\nallgather_ring_min = 256\nreducescatter_ring_min = 512\nchain_unroll = 8\nring_unroll = 32\n"
            ),
        )
        .unwrap();
        let (t, _) = resolve_env("NVIDIA H200", 2, None, &[(GPU_TUNING.env, &p)]);
        assert_eq!((t.bcast_chain_min, t.reduce_chain_min), (u64::MAX, 64));
        assert_eq!(
            (t.ar_ring_min, t.ag_ring_min, t.rs_ring_min),
            (128, 256, 512)
        );
        assert_eq!((t.chain_unroll, t.ring_unroll), (8, 32));
        let (t, prov) = resolve_env(
            "NVIDIA H200",
            2,
            None,
            &[
                (GPU_TUNING.env, &p),
                ("COMMHAL_COLL_AR_RING_MIN", "0"),
                ("COMMHAL_COLL_RING_UNROLL", "2"),
            ],
        );
        assert_eq!((t.ar_ring_min, t.ring_unroll), (u64::MAX, 2));
        assert!(
            prov.overrides.contains(&"COMMHAL_COLL_AR_RING_MIN"),
            "{prov}"
        );
        let (t, _) = resolve_env(
            "NVIDIA H200",
            2,
            None,
            &[(GPU_TUNING.env, &p), ("COMMHAL_COLL_RS_PUSH_MIN", "0")],
        );
        assert_eq!(t.rs_push_min, 0);
        // a variable still beats the file
        let (t, _) = resolve_env(
            "NVIDIA H200",
            2,
            None,
            &[(GPU_TUNING.env, &p), ("COMMHAL_COLL_PUSH_MIN", "1024")],
        );
        assert_eq!(t.push_min, 1024);
        // unreadable and malformed files are errors that name the variable
        let missing = dir.join("missing.toml").to_string_lossy().to_string();
        let env = |k: &str| (k == GPU_TUNING.env).then(|| missing.clone());
        let e = resolve_with("X", 2, 1, None, Duration::from_secs(1), &env)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(GPU_TUNING.env) && e.contains("cannot read"),
            "{e}"
        );
        std::fs::write(&path, "gpu = 3").unwrap();
        let env = |k: &str| (k == GPU_TUNING.env).then(|| p.clone());
        let e = resolve_with("X", 2, 1, None, Duration::from_secs(1), &env)
            .unwrap_err()
            .to_string();
        assert!(e.contains(GPU_TUNING.env), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
