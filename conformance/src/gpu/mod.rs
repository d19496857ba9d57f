//! # GPU conformance: the cases of `docs/conformance.md` with real device code
//!
//! Run in **every rank process** (one per GPU; rank `r` drives device
//! `COMMHAL_LOCAL_RANK` modulo the device count), started by
//! `commhal launch -n N -- commhal-gpu-conformance conformance --backend cuda-nvlink`.
//! Ranks join with [`TcpBootstrap::from_env`](commhal_hal::bootstrap::TcpBootstrap);
//! exports travel with their fds over the bootstrap. Ranks are paired
//! ([`world::partner`], a round-robin schedule; quick tier: the first round only) and
//! each pair runs the backend's cases with real kernels:
//!
//! * `cuda-nvlink` ([`memory`]): device-src's conformance kernels (fill, put+signal,
//!   wait, check, wait+get, ping-pong, LL8/LL16) and this folder's `script.cu`
//!   interpreter (strong signal, counting with wrap, relaxed, flush, graph capture).
//! * `cuda-dma` ([`port`]): device code pushes triggers into a pinned FIFO
//!   ([`commhal_cuda_coll::gpu_proxy::DeviceFifo`], device-src protocol) drained by a proxy thread that
//!   performs them with the cuda-dma port through `commhal_channels`'
//!   `ProxyContext::perform`.
//!
//! Output (rank 0): the conformance crate's table and `N passed, N failed, N skipped`
//! (or JSON); every rank exits with the same code. [`bench`](mod@bench) measures latency and
//! bandwidth.
//!
//! | module | holds |
//! |---|---|
//! | [`world`] | bootstrap/device/kernels, pairing, pair messages, scratch, recorder |
//! | [`kernels`] | kernel handles, `script.cu` ops, every `unsafe` driver call |
//! | [`memory`] | cuda-nvlink cases |
//! | [`port`] | cuda-dma cases |
//! | [`collectives`] | case 21 on GPUs: every collective through the GPU communicator's kernels and every plan algorithm |
//! | [`bench`](mod@bench) | ping-pong latency, put bandwidth, cuMemcpyPeer bandwidth |

pub mod bench;
pub mod collectives;
pub mod kernels;
pub mod launch;
pub mod memory;
pub mod port;
pub mod world;

use std::time::Instant;

use commhal_hal::bootstrap::Bootstrap;
use commhal_hal::{HalError, Result};

use crate::expect::Expectations;
use crate::report::{RankOutcome, RankOutput, RankResult, Report};
use world::{Peer, Recorder, World};

/// Backends this module tests.
pub const BACKENDS: [&str; 2] = ["cuda-nvlink", "cuda-dma"];

/// Known failures of the GPU backends (this folder's `expectations.toml`).
pub fn expectations() -> Expectations {
    Expectations::parse(include_str!("expectations.toml")).unwrap_or_default()
}

/// Run the GPU conformance cases of `backend` (`cuda-nvlink`, `cuda-dma` or `all`) on
/// this rank; rank 0 prints the report. `only`: run only the cases whose id contains
/// it. Returns the process exit code (0 = nothing failed), the same on every rank that
/// got as far as the final exchange.
pub fn run(backend: &str, quick: bool, json: bool, only: Option<String>) -> i32 {
    let backends: Vec<&str> = match backend {
        "all" => BACKENDS.to_vec(),
        b if BACKENDS.contains(&b) => vec![b],
        other => {
            eprintln!(
                "gpu conformance: unknown backend `{other}`: use one of {} or all",
                BACKENDS.join(", ")
            );
            return 2;
        }
    };
    let start = Instant::now();
    let w = match World::init(quick) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("gpu conformance: cannot start: {e}");
            return 1;
        }
    };
    let mut code = 0;
    for b in backends {
        let mut rec = Recorder {
            only: only.clone(),
            ..Recorder::default()
        };
        let error = run_backend(&w, b, &mut rec).err().map(|e| e.to_string());
        let out = RankOutput {
            rank: w.rank(),
            error,
            results: rec.results,
        };
        match gather_and_report(&w, b, quick, out, start, json) {
            Ok(c) => code = code.max(c),
            Err(e) => {
                eprintln!(
                    "gpu conformance: rank {}: collecting results failed: {e}",
                    w.rank()
                );
                code = 1;
            }
        }
    }
    code
}

fn run_backend(w: &World, backend: &str, rec: &mut Recorder) -> Result<()> {
    let all = world::rounds(w.size());
    let rounds = if w.quick { all.min(1) } else { all };
    if rounds == 0 || w.size() % 2 == 1 {
        return Err(HalError::invalid(format!(
            "the GPU conformance suite needs an even number of ranks, at least 2 (got {}): run it under `commhal launch -n 2` (or 4, 8)",
            w.size()
        )));
    }
    for round in 0..rounds {
        let suffix = if rounds > 1 {
            format!("/round{round}")
        } else {
            String::new()
        };
        let peer = world::partner(w.rank(), w.size(), round).ok_or_else(|| {
            HalError::invalid("no partner in this round (odd world size?)".to_string())
        })?;
        let p = Peer::new(w, peer, round);
        match backend {
            "cuda-nvlink" => {
                let mut pair = memory::MemPair::connect(p, memory::AREA)?;
                memory::run_cases(&mut pair, rec, &suffix);
            }
            _ => {
                let mut pair = port::PortPair::connect(p, memory::AREA)?;
                port::run_cases(&mut pair, rec, &suffix);
                pair.finish()?;
            }
        }
    }
    // The collectives take every link the process selected (COMMHAL_BACKENDS), so they
    // run once, with the memory backend's cases.
    if backend == "cuda-nvlink" {
        collectives::run_cases(w, rec);
    }
    Ok(())
}

/// All-gather every rank's output; rank 0 merges (conformance crate's [`Report`]) and
/// prints; every rank returns the report's exit code.
fn gather_and_report(
    w: &World,
    backend: &str,
    quick: bool,
    out: RankOutput,
    start: Instant,
    json: bool,
) -> Result<i32> {
    let bytes = serde_json::to_vec(&out)
        .map_err(|e| HalError::invalid(format!("encoding results: {e}")))?;
    let all = w.boot.all_gather(&bytes)?;
    let outputs: Vec<RankOutput> = all
        .iter()
        .map(|b| {
            serde_json::from_slice(b)
                .map_err(|e| HalError::Bootstrap(format!("a rank sent bad results: {e}")))
        })
        .collect::<Result<_>>()?;
    let outputs = fill_missing(outputs);
    let report = Report::merge(
        (
            backend.to_string(),
            w.size(),
            quick,
            "processes (gpu)".into(),
        ),
        &outputs,
        &expectations(),
        Vec::new(),
        start.elapsed().as_secs_f64() * 1e3,
    );
    if w.rank() == 0 {
        if json {
            println!("{}", report.to_json());
        } else {
            print!("{}", report.table());
        }
    }
    Ok(report.exit_code())
}

/// A rank that stopped early (setup failed) has fewer results: give it a failure for
/// every case the others ran, naming its error, so the table says why.
fn fill_missing(mut outputs: Vec<RankOutput>) -> Vec<RankOutput> {
    let ids: Vec<RankResult> = outputs
        .iter()
        .max_by_key(|o| o.results.len())
        .map(|o| o.results.clone())
        .unwrap_or_default();
    for o in &mut outputs {
        let why = o.error.clone().unwrap_or_else(|| "no result".into());
        for r in &ids {
            if !o.results.iter().any(|x| x.id == r.id) {
                o.results.push(RankResult {
                    outcome: RankOutcome::Fail {
                        message: format!("did not run: {why}"),
                    },
                    millis: 0.0,
                    ..r.clone()
                });
            }
        }
    }
    outputs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expectations_parse_and_list_no_known_failure() {
        // The 2^64 wrap of device-side waits was fixed (signed difference in
        // semaphore.h); the near-2^64 signal-counting cases must now pass outright.
        let e = expectations();
        assert!(
            e.lookup("cuda-nvlink/memory/signal-counting/near-2^64")
                .is_none()
        );
        assert!(
            e.lookup("cuda-dma/port/signal-counting/near-2^64")
                .is_none()
        );
    }

    #[test]
    fn unknown_backend_is_rejected_before_any_device_work() {
        assert_eq!(run("nope", true, false, None), 2);
    }

    #[test]
    fn missing_ranks_get_failures_with_their_error() {
        let full = RankOutput {
            rank: 0,
            error: None,
            results: vec![RankResult {
                id: "x/memory/a".into(),
                number: 1,
                property: "p".into(),
                outcome: RankOutcome::Pass { note: None },
                millis: 1.0,
            }],
        };
        let broken = RankOutput {
            rank: 1,
            error: Some("no GPU".into()),
            results: vec![],
        };
        let out = fill_missing(vec![full, broken]);
        match &out[1].results[0].outcome {
            RankOutcome::Fail { message } => assert!(message.contains("no GPU")),
            other => panic!("{other:?}"),
        }
    }
}
