//! Algorithm selection by collective, message size, rank count and topology.
//!
//! Thresholds are data: a TOML table of ordered rules (see `tuning/host-emu.toml`),
//! embedded at build time. The GPU tables are **untuned placeholders** (`tuned = false`).
//! An override string (`COMMHAL_ALGO=allreduce:ring,allgather:allpairs`) forces an
//! algorithm per collective; [`Selector::with_overrides`] parses one from a string so tests
//! need no environment, [`Selector::with_env_overrides`] reads the variable.

use crate::builders::{Algorithm, BuildParams};
use crate::error::AlgoError;
use crate::plan::Collective;
use commhal_hal::settings::host::ALGO;
use serde::Deserialize;
use std::collections::HashMap;

/// The host-emu table.
pub const HOST_EMU_TOML: &str = include_str!("../tuning/host-emu.toml");
/// Untuned placeholder for CUDA GPUs.
pub const GPU_CUDA_UNTUNED_TOML: &str = include_str!("../tuning/gpu-cuda.untuned.toml");
/// Untuned placeholder for HIP GPUs.
pub const GPU_HIP_UNTUNED_TOML: &str = include_str!("../tuning/gpu-hip.untuned.toml");

/// Where the ranks are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Topology {
    /// Total ranks.
    pub nranks: u32,
    /// Ranks per node (nodes = nranks / ranks_per_node, rounded up).
    pub ranks_per_node: u32,
}

impl Topology {
    /// Number of nodes.
    pub fn nodes(&self) -> u32 {
        self.nranks.div_ceil(self.ranks_per_node.max(1))
    }
}

/// One rule of a tuning table.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// Collective name.
    pub collective: String,
    /// Short algorithm name.
    pub algorithm: String,
    /// Smallest message in bytes (inclusive).
    pub min_bytes: Option<u64>,
    /// Largest message in bytes (inclusive).
    pub max_bytes: Option<u64>,
    /// Fewest ranks.
    pub min_ranks: Option<u32>,
    /// Most ranks.
    pub max_ranks: Option<u32>,
    /// Only when more than one node (true) or exactly one (false).
    pub multi_node: Option<bool>,
    /// Builder blocks.
    pub blocks: Option<u32>,
    /// Builder pipeline depth.
    pub pipeline: Option<u32>,
}

/// A parsed tuning table.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Table {
    /// Whether the thresholds were measured (false: placeholder).
    pub tuned: bool,
    /// Backend it was made for.
    pub backend: String,
    /// Ordered rules.
    #[serde(rename = "rule")]
    pub rules: Vec<Rule>,
}

/// What to build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// Parameters for [`crate::builders::build`] (in_place/root/pairs are the caller's).
    pub params: BuildParams,
}

/// Picks algorithms from a table plus overrides.
#[derive(Debug, Clone)]
pub struct Selector {
    table: Table,
    overrides: HashMap<Collective, Algorithm>,
}

impl Selector {
    /// From a TOML table; every rule's names are checked now.
    pub fn from_toml(text: &str) -> Result<Selector, AlgoError> {
        let table: Table =
            toml::from_str(text).map_err(|e| AlgoError::Selector(format!("tuning table: {e}")))?;
        for (i, r) in table.rules.iter().enumerate() {
            let c = Collective::from_name(&r.collective)
                .map_err(|e| AlgoError::Selector(format!("rule {i}: {e}")))?;
            Algorithm::find(c, &r.algorithm)
                .map_err(|e| AlgoError::Selector(format!("rule {i}: {e}")))?;
        }
        Ok(Selector {
            table,
            overrides: HashMap::new(),
        })
    }

    /// The embedded host-emu table.
    pub fn host_emu() -> Selector {
        Selector::from_toml(HOST_EMU_TOML).unwrap_or_else(|_| Selector::empty())
    }

    /// The embedded (untuned) CUDA table.
    pub fn gpu_cuda_untuned() -> Selector {
        Selector::from_toml(GPU_CUDA_UNTUNED_TOML).unwrap_or_else(|_| Selector::empty())
    }

    fn empty() -> Selector {
        Selector {
            table: Table {
                tuned: false,
                backend: String::new(),
                rules: vec![],
            },
            overrides: HashMap::new(),
        }
    }

    /// The table in use.
    pub fn table(&self) -> &Table {
        &self.table
    }

    /// Add overrides from `collective:algorithm[,collective:algorithm…]` (empty: none).
    pub fn with_overrides(mut self, spec: &str) -> Result<Selector, AlgoError> {
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (c, a) = item.split_once(':').ok_or_else(|| {
                AlgoError::Selector(format!(
                    "override `{item}` is not `collective:algorithm` (e.g. allreduce:ring)"
                ))
            })?;
            let c = Collective::from_name(c.trim())
                .map_err(|e| AlgoError::Selector(format!("override `{item}`: {e}")))?;
            let a = Algorithm::find(c, a.trim())
                .map_err(|e| AlgoError::Selector(format!("override `{item}`: {e}")))?;
            self.overrides.insert(c, a);
        }
        Ok(self)
    }

    /// Add overrides from the `COMMHAL_ALGO` environment variable, if set.
    pub fn with_env_overrides(self) -> Result<Selector, AlgoError> {
        match ALGO.text() {
            Some(v) => self.with_overrides(&v).map_err(|e| match e {
                AlgoError::Selector(m) => AlgoError::Selector(format!("{}: {m}", ALGO.env)),
                other => other,
            }),
            None => Ok(self),
        }
    }

    /// Choose an algorithm for `collective` on a message of `bytes` bytes.
    pub fn select(
        &self,
        collective: Collective,
        bytes: u64,
        topo: Topology,
    ) -> Result<Choice, AlgoError> {
        let mut params = BuildParams::new(topo.nranks);
        params.ranks_per_node = topo.ranks_per_node.max(1);
        if let Some(&a) = self.overrides.get(&collective) {
            if !a.supports(&params) {
                return Err(AlgoError::Selector(format!(
                    "override {} cannot run on {} ranks with {} per node",
                    a.full_name(),
                    topo.nranks,
                    topo.ranks_per_node
                )));
            }
            return Ok(Choice {
                algorithm: a,
                params,
            });
        }
        for r in &self.table.rules {
            if r.collective != collective.name()
                || r.min_bytes.is_some_and(|m| bytes < m)
                || r.max_bytes.is_some_and(|m| bytes > m)
                || r.min_ranks.is_some_and(|m| topo.nranks < m)
                || r.max_ranks.is_some_and(|m| topo.nranks > m)
                || r.multi_node.is_some_and(|m| m != (topo.nodes() > 1))
            {
                continue;
            }
            let a = Algorithm::find(collective, &r.algorithm)?;
            let mut p = params.clone();
            p.blocks = r.blocks.unwrap_or(1);
            p.pipeline = r.pipeline.unwrap_or(1);
            if a.supports(&p) {
                return Ok(Choice {
                    algorithm: a,
                    params: p,
                });
            }
        }
        Err(AlgoError::Selector(format!(
            "no rule of the `{}` table matches {} of {bytes} bytes on {} ranks; add a catch-all rule",
            self.table.backend,
            collective.name(),
            topo.nranks
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topo(n: u32, rpn: u32) -> Topology {
        Topology {
            nranks: n,
            ranks_per_node: rpn,
        }
    }

    #[test]
    fn host_emu_table_picks_by_size_and_topology() {
        let s = Selector::host_emu();
        assert_eq!(s.table().backend, "host-emu");
        let pick = |c, b, t| s.select(c, b, t).unwrap().algorithm;
        // The measured host-emu table: plain puts + signals up to 256 KiB at any rank
        // count (LL packets lose on a 2-core machine; see tuning/host-emu.toml).
        assert_eq!(
            pick(Collective::AllReduce, 1024, topo(8, 8)),
            Algorithm::AllReduceRd
        );
        assert_eq!(
            pick(Collective::AllReduce, 100_000, topo(8, 8)),
            Algorithm::AllReduce2paHb
        );
        assert_eq!(
            pick(Collective::AllReduce, 1 << 20, topo(8, 8)),
            Algorithm::AllReduce2paHb
        );
        assert_eq!(
            pick(Collective::AllReduce, 1 << 30, topo(8, 8)),
            Algorithm::AllReduceRing
        );
        assert_eq!(
            pick(Collective::AllReduce, 1024, topo(8, 4)),
            Algorithm::AllReduce2phLl
        );
        assert_eq!(
            pick(Collective::AllReduce, 1 << 30, topo(8, 4)),
            Algorithm::AllReduce2phHb
        );
        // 7 ranks in nodes of 4 are not whole nodes: 2PH is skipped, the ring follows.
        assert_eq!(
            pick(Collective::AllReduce, 1024, topo(7, 4)),
            Algorithm::AllReduceRing
        );
        // The other collectives across nodes: 2PH while small, then rings; the chain.
        assert_eq!(
            pick(Collective::AllGather, 1024, topo(8, 4)),
            Algorithm::AllGather2ph
        );
        assert_eq!(
            pick(Collective::AllGather, 1 << 20, topo(8, 4)),
            Algorithm::AllGatherRing
        );
        assert_eq!(
            pick(Collective::AllGather, 1024, topo(7, 4)),
            Algorithm::AllGatherRing
        );
        assert_eq!(
            pick(Collective::ReduceScatter, 1024, topo(8, 4)),
            Algorithm::ReduceScatter2ph
        );
        assert_eq!(
            pick(Collective::ReduceScatter, 1 << 20, topo(8, 4)),
            Algorithm::ReduceScatterRing
        );
        assert_eq!(
            pick(Collective::Broadcast, 1 << 20, topo(8, 4)),
            Algorithm::BroadcastChain
        );
        for c in Collective::ALL {
            s.select(c, 1, topo(3, 3)).unwrap();
        }
    }

    #[test]
    fn gpu_tables_are_marked_untuned() {
        assert!(!Selector::gpu_cuda_untuned().table().tuned);
        assert!(
            !Selector::from_toml(GPU_HIP_UNTUNED_TOML)
                .unwrap()
                .table()
                .tuned
        );
    }

    #[test]
    fn overrides_by_name() {
        let s = Selector::host_emu()
            .with_overrides("allreduce:ring, allgather:ring")
            .unwrap();
        assert_eq!(
            s.select(Collective::AllReduce, 8, topo(4, 4))
                .unwrap()
                .algorithm,
            Algorithm::AllReduceRing
        );
        assert_eq!(
            s.select(Collective::AllGather, 8, topo(4, 4))
                .unwrap()
                .algorithm,
            Algorithm::AllGatherRing
        );
        assert!(Selector::host_emu().with_overrides("allreduce").is_err());
        assert!(
            Selector::host_emu()
                .with_overrides("allreduce:nope")
                .is_err()
        );
        assert!(Selector::host_emu().with_overrides("nope:ring").is_err());
        let s = Selector::host_emu()
            .with_overrides("allreduce:2ph-hb")
            .unwrap();
        assert!(s.select(Collective::AllReduce, 8, topo(7, 4)).is_err());
    }

    #[test]
    fn bad_tables_are_rejected() {
        let bad = "tuned = true\nbackend = \"x\"\n[[rule]]\ncollective = \"allreduce\"\nalgorithm = \"warp\"\n";
        assert!(Selector::from_toml(bad).is_err());
        let none = "tuned = true\nbackend = \"x\"\nrule = []\n";
        assert!(
            Selector::from_toml(none)
                .unwrap()
                .select(Collective::AllReduce, 1, topo(2, 2))
                .is_err()
        );
    }
}
