//! The tuner's runs (`commhal tune`): which kernels compete for each collective
//! (`candidates`), one timed sweep of each on the GPUs ([`tune()`]), and the
//! thresholds derived from the sweeps ([`derive()`], on [`crate::tune`]'s arithmetic).

use std::time::Duration;

use commhal_cuda_coll::comm::{Comm, Kernel, kernel_name};
use commhal_cuda_coll::error::{CollError, Result};
use commhal_cuda_coll::setup::local_device;
use commhal_cuda_coll::tuning::{self, Forced};
use commhal_hal::bootstrap::Bootstrap;
use serde::Serialize;

use crate::bench::{Bench, Impl, capacity_for};
use crate::cli::{self, Args, Collective};
use crate::tune::{self, Derived};

/// Largest all-reduce the tuner times with the LL kernel.
pub const TUNE_LL_MAX: u64 = 4 << 20;
/// Largest per-rank chunk the tuner times with the LL all-gather / reduce-scatter.
pub const TUNE_LL_CHUNK_MAX: u64 = 1 << 20;
/// Smallest all-reduce the tuner times with the push kernel.
pub const TUNE_PUSH_MIN: u64 = 1 << 20;
/// Smallest size the tuner times with the ring and chain kernels (below, their
/// per-round flags cost more than they can win).
pub const TUNE_RING_MIN: u64 = 1 << 20;
/// Largest all-gather (the output) the tuner times with the LL63 kernel: its packets
/// for n - 1 peers take a parity half of scratch each (25 MiB per half on 4 ranks).
pub const TUNE_AG_LL63_MAX: u64 = 32 << 20;
/// Largest reduce-scatter (the input) the tuner times with the LL63 kernel (the same
/// scratch as the all-gather's at its maximum).
pub const TUNE_RS_LL63_MAX: u64 = 32 << 20;

/// One kernel choice the tuner times.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    name: &'static str,
    /// The kernel it must plan (`None`: the selector's own choice — the copy engines
    /// for the candidate named "ce", a kernel for any other).
    kernel: Option<Kernel>,
    forced: Forced,
    /// Whether it runs at (total bytes, per-rank chunk bytes).
    applies: fn(u64, u64) -> bool,
}

/// The collectives `commhal tune` sweeps by default (the ones with a choice).
pub const TUNED: [Collective; 6] = [
    Collective::Allreduce,
    Collective::Allgather,
    Collective::Reducescatter,
    Collective::Broadcast,
    Collective::Reduce,
    Collective::Sendrecv,
];

/// The candidates of `coll` on `n` ranks, from the small-message kernel to the large
/// one (empty: nothing to choose).
fn candidates(coll: Collective, n: u32) -> Vec<Candidate> {
    // rings and chains off unless the candidate is one, so every candidate runs the
    // kernel it names whatever the file says
    let f = Forced {
        bcast_chain_min: Some(0),
        reduce_chain_min: Some(0),
        ar_ring_min: Some(0),
        ag_ring_min: Some(0),
        rs_ring_min: Some(0),
        rs_push_min: Some(0),
        reduce_all_max: Some(0),
        bcast_ll63_max: Some(0),
        reduce_ll63_max: Some(0),
        ag_ll63_max: Some(0),
        rs_ll63_max: Some(0),
        ar_ll63_max: Some(0),
        bcast_ce_min: Some(0),
        sendrecv_ce_min: Some(0),
        reduce_ce_min: Some(0),
        ar_ce_min: Some(0),
        ..Forced::default()
    };
    // the copy engines against whatever kernel the file picks (the last candidate)
    let ce_or_not = || {
        let ce = |min| Forced {
            bcast_ce_min: Some(min),
            sendrecv_ce_min: Some(min),
            ..Forced::default()
        };
        vec![
            Candidate {
                name: "kernels",
                kernel: None,
                forced: ce(0),
                applies: |_, _| true,
            },
            Candidate {
                name: "ce",
                kernel: None,
                forced: ce(1),
                applies: |_, _| true,
            },
        ]
    };
    // broadcast / reduce: the LL16 kernel first, up to the largest chunk the tuner times
    let ll16 = |kernel| Candidate {
        name: "ll16",
        kernel: Some(kernel),
        forced: Forced {
            ll_max: Some(TUNE_LL_CHUNK_MAX),
            ll_chunk_max: Some(TUNE_LL_CHUNK_MAX),
            rooted_ll_max: Some(TUNE_LL_CHUNK_MAX),
            ..f
        },
        applies: |b, _| b > 0 && b <= TUNE_LL_CHUNK_MAX && b.is_multiple_of(8),
    };
    let bcast_ll63 = Candidate {
        name: "ll63",
        kernel: Some(Kernel::BroadcastLl63),
        forced: Forced {
            bcast_ll63_max: Some(u64::MAX),
            ll_chunk_max: Some(0),
            ..f
        },
        applies: |b, _| b >= 16 && b.is_multiple_of(16),
    };
    // the 2-rank broadcast / reduce: the copy engines last, from the chains' sizes
    let ce_last = |forced| Candidate {
        name: "ce",
        kernel: None,
        forced,
        applies: |b, _| b >= TUNE_RING_MIN && b.is_multiple_of(16),
    };
    let direct = Candidate {
        name: "direct",
        kernel: Some(Kernel::Broadcast),
        // ll_chunk_max 0: small broadcasts would otherwise take the LL kernel.
        forced: Forced {
            bcast_sf_min: Some(u64::MAX),
            ll_chunk_max: Some(0),
            ..f
        },
        applies: |_, _| true,
    };
    match coll {
        // 2 ranks: one bulk kernel, LL63's window above LL16, the copy engines last
        Collective::Broadcast if n == 2 => vec![
            ll16(Kernel::BroadcastLl),
            direct,
            bcast_ll63,
            ce_last(Forced {
                bcast_ce_min: Some(1),
                ..f
            }),
        ],
        Collective::Sendrecv => ce_or_not(),
        Collective::Allreduce => {
            let ring = Candidate {
                name: "ring",
                kernel: Some(Kernel::AllreduceRing),
                forced: Forced {
                    ll_max: Some(0),
                    push_min: Some(0),
                    ar_ring_min: Some(1),
                    ..f
                },
                applies: |b, _| b >= TUNE_RING_MIN && b.is_multiple_of(16),
            };
            let mut cands = vec![
                Candidate {
                    name: "ll",
                    kernel: Some(Kernel::AllreduceLl),
                    forced: Forced {
                        ll_max: Some(TUNE_LL_MAX),
                        push_min: Some(0),
                        ..f
                    },
                    applies: |b, _| b <= TUNE_LL_MAX && b.is_multiple_of(8),
                },
                Candidate {
                    name: "two-shot",
                    kernel: Some(Kernel::Allreduce2Shot),
                    forced: Forced {
                        ll_max: Some(0),
                        push_min: Some(0),
                        ..f
                    },
                    applies: |_, _| true,
                },
                Candidate {
                    name: "push",
                    kernel: Some(Kernel::AllreducePush),
                    forced: Forced {
                        ll_max: Some(0),
                        push_min: Some(1),
                        ..f
                    },
                    applies: |b, _| b >= TUNE_PUSH_MIN,
                },
                ring,
            ];
            if n >= 3 {
                // last: the ring with the copy engines' all-gather tail
                cands.push(Candidate {
                    name: "ce",
                    kernel: Some(Kernel::AllreduceRingHead),
                    forced: Forced {
                        ar_ce_min: Some(1),
                        ..ring.forced
                    },
                    ..ring
                });
            }
            cands
        }
        Collective::Allgather | Collective::Reducescatter => {
            let gather = coll == Collective::Allgather;
            let (ll, direct, ring) = if gather {
                (
                    Kernel::AllgatherLl,
                    Kernel::Allgather,
                    Kernel::AllgatherRing,
                )
            } else {
                (
                    Kernel::ReducescatterLl,
                    Kernel::Reducescatter,
                    Kernel::ReducescatterRing,
                )
            };
            let mut cands = vec![
                Candidate {
                    name: "ll",
                    kernel: Some(ll),
                    forced: Forced {
                        ll_max: Some(TUNE_LL_CHUNK_MAX),
                        ll_chunk_max: Some(TUNE_LL_CHUNK_MAX),
                        ..f
                    },
                    applies: |_, c| c > 0 && c <= TUNE_LL_CHUNK_MAX && c.is_multiple_of(8),
                },
                Candidate {
                    name: "direct",
                    kernel: Some(direct),
                    forced: Forced {
                        ll_chunk_max: Some(0),
                        ..f
                    },
                    applies: |_, c| c > 0,
                },
                Candidate {
                    name: "ring",
                    kernel: Some(ring),
                    forced: Forced {
                        ll_chunk_max: Some(0),
                        ag_ring_min: if gather { Some(1) } else { Some(0) },
                        rs_ring_min: if gather { Some(0) } else { Some(1) },
                        ..f
                    },
                    applies: |b, c| b >= TUNE_RING_MIN && c.is_multiple_of(16),
                },
            ];
            if gather {
                // last: a window (asked before the LL16 kernel), derived apart
                cands.push(Candidate {
                    name: "ll63",
                    kernel: Some(Kernel::AllgatherLl63),
                    forced: Forced {
                        ag_ll63_min: Some(1),
                        ag_ll63_max: Some(TUNE_AG_LL63_MAX),
                        ..f
                    },
                    applies: |b, c| c > 0 && c.is_multiple_of(16) && b <= TUNE_AG_LL63_MAX,
                });
            } else {
                cands.push(Candidate {
                    name: "push",
                    kernel: Some(Kernel::ReducescatterPush),
                    forced: Forced {
                        ll_chunk_max: Some(0),
                        rs_push_min: Some(1),
                        rs_push_max: Some(u64::MAX),
                        ..f
                    },
                    applies: |b, c| b >= TUNE_PUSH_MIN && c.is_multiple_of(16),
                });
                // last, as the all-gather's: a window asked before the LL16 kernel
                cands.push(Candidate {
                    name: "ll63",
                    kernel: Some(Kernel::ReducescatterLl63),
                    forced: Forced {
                        rs_ll63_min: Some(1),
                        rs_ll63_max: Some(TUNE_RS_LL63_MAX),
                        ..f
                    },
                    applies: |b, c| c > 0 && c.is_multiple_of(16) && b <= TUNE_RS_LL63_MAX,
                });
            }
            cands
        }
        Collective::Broadcast if n >= 3 => vec![
            ll16(Kernel::BroadcastLl),
            direct,
            Candidate {
                name: "scatter-forward",
                kernel: Some(Kernel::BroadcastSf),
                forced: Forced {
                    bcast_sf_min: Some(0),
                    ll_chunk_max: Some(0),
                    ..f
                },
                applies: |b, _| b >= 16,
            },
            Candidate {
                name: "chain",
                kernel: Some(Kernel::BroadcastChain),
                forced: Forced {
                    bcast_chain_min: Some(1),
                    ll_chunk_max: Some(0),
                    ..f
                },
                applies: |b, _| b >= TUNE_RING_MIN && b.is_multiple_of(16),
            },
            // last: a window above the LL16 sizes, derived apart (tune::rooted_windows)
            bcast_ll63,
        ],
        Collective::Reduce => {
            let mut cands = vec![ll16(Kernel::ReduceLl)];
            if n >= 3 {
                cands.push(Candidate {
                    name: "all",
                    kernel: Some(Kernel::ReduceAll),
                    forced: Forced {
                        ll_chunk_max: Some(0),
                        reduce_all_max: Some(u64::MAX),
                        ..f
                    },
                    applies: |_, _| true,
                });
            }
            cands.push(Candidate {
                name: "worker",
                kernel: Some(Kernel::Reduce),
                // ll_chunk_max 0: small reduces would otherwise take the LL kernel.
                forced: Forced {
                    ll_chunk_max: Some(0),
                    ..f
                },
                applies: |_, _| true,
            });
            cands.push(Candidate {
                name: "chain",
                kernel: Some(Kernel::ReduceChain),
                forced: Forced {
                    reduce_chain_min: Some(1),
                    ll_chunk_max: Some(0),
                    ..f
                },
                applies: |b, _| b >= TUNE_RING_MIN && b.is_multiple_of(16),
            });
            cands.push(Candidate {
                name: "ll63",
                kernel: Some(Kernel::ReduceLl63),
                forced: Forced {
                    reduce_ll63_max: Some(u64::MAX),
                    ll_chunk_max: Some(0),
                    ..f
                },
                applies: |b, _| b >= 16 && b.is_multiple_of(16),
            });
            if n == 2 {
                // after the kernels (and LL63's window): the copy engine from some size
                cands.push(ce_last(Forced {
                    reduce_ce_min: Some(1),
                    ..f
                }));
            }
            cands
        }
        _ => Vec::new(),
    }
}

/// One collective's tuner sweep (µs: mean over ranks of each rank's median,
/// out-of-place; `None`: the candidate does not run at that size, or its result was
/// wrong).
#[derive(Debug, Clone, Serialize)]
pub struct Sweep {
    /// The collective.
    pub collective: Collective,
    /// Candidate names, small-message kernel first.
    pub candidates: Vec<&'static str>,
    /// Total bytes per size.
    pub sizes: Vec<u64>,
    /// Per-rank chunk bytes per size (= `sizes` for whole-buffer collectives).
    pub chunks: Vec<u64>,
    /// `times[size][candidate]`.
    pub times: Vec<Vec<Option<f64>>>,
    /// The kernel chosen per size ([`tune::assign`]; all-gather and reduce-scatter
    /// alone — their shared threshold weighs both).
    pub choice: Vec<Option<usize>>,
    /// The LL16 chunk cap in effect (the file's): the rooted collectives' LL16 cap is
    /// never above it. Without an `ll16` column, their LL63 windows start above it.
    pub ll_chunk_max: u64,
}

/// What the tuner produced (the same on every rank).
#[derive(Debug)]
pub struct TuneOutcome {
    /// One sweep per collective that has a choice at this rank count.
    pub sweeps: Vec<Sweep>,
    /// Thresholds derived from them.
    pub derived: Derived,
    /// Whether any candidate's result was wrong (do not write the file then).
    pub wrong: bool,
    /// This rank.
    pub rank: u32,
    /// Ranks.
    pub nranks: u32,
    /// The driver's device name.
    pub device: String,
}

/// The tuner on this rank: for each of `colls` (every rank passes the same), one
/// [`Comm`] per candidate kernel (forced through [`tuning::with_forced`]), then per
/// size every candidate that applies, alternating, with the benchmark's checked run
/// and timing (`args`' sizes, iterations, `--batch`, `-G`, `-c`; out-of-place). Rank 0
/// prints a table per collective. Needs ≥ 2 ranks.
pub fn tune(args: &Args, colls: &[Collective], boot: &dyn Bootstrap) -> Result<TuneOutcome> {
    let n = boot.size();
    if n < 2 {
        return Err(CollError::invalid(
            "the tuner needs at least 2 ranks (one process per GPU): pass --ranks 2 or more, or run under `commhal launch -n N`",
        ));
    }
    let device = local_device(boot)?;
    // keeps the primary context alive between one collective's communicators and
    // the next's
    let context = commhal_cuda_rt::Context::new(device)?;
    let gpu = context.name().unwrap_or_default();
    let rank0 = boot.rank() == 0;
    let timeout = Duration::from_millis(args.wait_ms());
    let es = args.dtype.size();
    // the most the rooted LL16 cap may be (the file's chunk cap)
    let ll_chunk_max = commhal_cuda_coll::tuning::resolve(&gpu, n, 1, None, timeout)
        .map(|(t, _)| t.ll_chunk_max)
        .unwrap_or(0);
    let mut sweeps = Vec::new();
    let mut wrong = false;
    for &coll in colls {
        // the copy engines only run outside graph captures, on a driver with stream
        // writes: elsewhere their candidate would time the kernels under its name
        let ce_usable = !args.common.graphed() && commhal_cuda_coll::dma::available();
        let cands: Vec<Candidate> = candidates(coll, n)
            .into_iter()
            .filter(|c| ce_usable || c.name != "ce")
            .collect();
        if cands.len() < 2 {
            if rank0 {
                println!(
                    "# tune {}: one kernel at {n} ranks, nothing to choose",
                    coll.name()
                );
            }
            continue;
        }
        let mut a = Args {
            collective: coll,
            ..args.clone()
        };
        a.common.root = 0;
        let cap = capacity_for(&a, n);
        let mut comms = Vec::new();
        for c in &cands {
            comms.push(tuning::with_forced(c.forced, || {
                Comm::new(boot, device, cap, None, timeout)
            })?);
        }
        let mut benches = Vec::new();
        for comm in &comms {
            benches.push(Bench::new(&a, boot, comm, None)?);
        }
        if rank0 {
            println!("#");
            println!(
                "# tune {}: {} {n} ranks, {gpu}, graph={} batch={}: µs per launch (out-of-place, mean of the ranks' medians)",
                coll.name(),
                a.dtype.table_name(),
                a.common.graphed(),
                a.batch
            );
            let names: Vec<String> = cands.iter().map(|c| format!("{:>16}", c.name)).collect();
            println!("# {:>10} {:>10} {}", "size", "chunk", names.join(" "));
        }
        let mut sweep = Sweep {
            collective: coll,
            candidates: cands.iter().map(|c| c.name).collect(),
            sizes: Vec::new(),
            chunks: Vec::new(),
            times: Vec::new(),
            choice: Vec::new(),
            ll_chunk_max,
        };
        for bytes in cli::sizes(a.common.min_bytes, a.common.max_bytes, a.common.step_factor) {
            let (count, per) = cli::counts(coll, bytes, a.dtype, n);
            if count == 0 {
                continue;
            }
            let (size_bytes, chunk) = (count * es, per * es);
            let iters = cli::iters_for(size_bytes, a.common.iters, a.max_bytes_per_size);
            let launch_count = cli::launch_count(coll, count, per);
            let mut row = Vec::new();
            for (c, b) in cands.iter().zip(&benches) {
                if !(c.applies)(size_bytes, chunk) {
                    row.push(None);
                    continue;
                }
                let (k, _, _) = b.comm.plan(coll, a.dtype, launch_count);
                let want = match c.kernel {
                    Some(kernel) => k == kernel_name(kernel, a.dtype),
                    None => (k == commhal_cuda_coll::comm::CE_LABEL) == (c.name == "ce"),
                };
                if !want {
                    return Err(CollError::invalid(format!(
                        "tuner: candidate {} of {} planned {k} at {size_bytes} B (a tuner bug: the forced thresholds do not select it)",
                        c.name,
                        coll.name(),
                    )));
                }
                let cell = b.cell(Impl::Commhal, size_bytes, count, per, false, iters)?;
                if cell.wrong > 0 {
                    wrong = true;
                    if rank0 {
                        println!(
                            "# WRONG: {} {} at {size_bytes} B: {} wrong elements",
                            coll.name(),
                            c.name,
                            cell.wrong
                        );
                    }
                    row.push(None);
                } else {
                    row.push(Some(cell.time_us));
                }
            }
            if rank0 {
                let cells: Vec<String> = row
                    .iter()
                    .map(|t| match t {
                        Some(t) => format!("{t:>16.2}"),
                        None => format!("{:>16}", "-"),
                    })
                    .collect();
                println!("{size_bytes:12} {chunk:10} {}", cells.join(" "));
            }
            sweep.sizes.push(size_bytes);
            sweep.chunks.push(chunk);
            sweep.times.push(row);
        }
        for comm in &comms {
            comm.sync("the end of the tuner sweep")?;
        }
        sweep.choice = tune::assign(&sweep.times);
        if rank0 {
            println!("# {}: {}", coll.name(), describe_choice(&sweep));
        }
        sweeps.push(sweep);
        // every rank's kernels are done before any rank unmaps its buffers (peers
        // store into them)
        boot.barrier()?;
        drop(benches);
        drop(comms);
    }
    drop(context);
    let derived = derive(&sweeps);
    if rank0 {
        println!("#");
        println!("# derived (bytes; None: not measured, the old value stays): {derived:?}");
    }
    Ok(TuneOutcome {
        sweeps,
        derived,
        wrong,
        rank: boot.rank(),
        nranks: n,
        device: gpu,
    })
}

/// Thresholds from the sweeps (all-gather and reduce-scatter share one).
pub fn derive(sweeps: &[Sweep]) -> Derived {
    let mut d = Derived::default();
    let find = |c: Collective| sweeps.iter().find(|s| s.collective == c);
    // the copy engines: a last column "ce" (2-rank broadcast and reduce, send-recv,
    // the all-reduce ring's tail on 3+ ranks)
    let ce_col = |s: &Sweep| s.candidates.iter().position(|c| *c == "ce");
    if let Some(s) = find(Collective::Allreduce) {
        match ce_col(s) {
            Some(k) => {
                d.allreduce(&s.sizes, &tune::first_columns(&s.times, k));
                d.allreduce_ce_min = tune::ce_suffix(&s.sizes, &s.times, k);
            }
            None => d.allreduce(&s.sizes, &s.times),
        }
    }
    for (c, gather) in [
        (Collective::Allgather, true),
        (Collective::Reducescatter, false),
    ] {
        if let Some(s) = find(c) {
            d.gather_scatter_ring(gather, &s.sizes, &s.times);
        }
        if let Some(s) = find(c)
            && let Some(k) = s.candidates.iter().position(|c| *c == "ll63")
        {
            d.gather_scatter_ll63(gather, &s.sizes, &s.times, k);
        }
    }
    let (ag, rs) = (find(Collective::Allgather), find(Collective::Reducescatter));
    match (ag, rs) {
        (Some(a), Some(r)) if a.chunks == r.chunks => {
            d.gather_scatter(&a.chunks, Some(&a.times), Some(&r.times))
        }
        // different sweeps (not with one tuner run): all-gather alone decides
        (Some(a), _) => d.gather_scatter(&a.chunks, Some(&a.times), None),
        (None, Some(r)) => d.gather_scatter(&r.chunks, None, Some(&r.times)),
        (None, None) => {}
    }
    let ll63_col = |s: &Sweep| {
        s.candidates
            .iter()
            .position(|c| *c == "ll63")
            .filter(|&c| s.times.iter().any(|r| r.len() > c))
    };
    if let Some(s) = find(Collective::Sendrecv)
        && let Some(k) = ce_col(s)
    {
        d.sendrecv_ce_min = tune::ce_suffix(&s.sizes, &s.times, k);
    }
    // broadcast / reduce: [ll16, the kernels..., ll63, ce] (ll16 / ll63 / ce where the
    // sweep has them): the copy engines' suffix, the kernels' own thresholds, then the
    // rooted LL16 cap and both LL63 windows (tune::rooted_windows), the cap chosen
    // for the two collectives together (either alone when only one was swept)
    let mut rooted = Vec::new();
    for c in [Collective::Broadcast, Collective::Reduce] {
        let Some(s) = find(c) else { continue };
        let col = |name: &str| s.candidates.iter().position(|c| *c == name);
        let ce = ce_col(s);
        let mut ce_min = 0;
        let times = match ce {
            Some(k) => {
                let min = tune::ce_suffix(&s.sizes, &s.times, k);
                ce_min = min.unwrap_or(0);
                match c {
                    Collective::Broadcast => d.broadcast_ce_min = min,
                    _ => d.reduce_ce_min = min,
                }
                tune::first_columns(&s.times, k)
            }
            None => s.times.clone(),
        };
        let width = ce.unwrap_or(s.candidates.len());
        let (ll16, ll63) = (col("ll16"), ll63_col(s));
        let kernels = ll16.map_or(0, |c| c + 1)..ll63.unwrap_or(width);
        // an LL16 column that never ran (a sweep from above its sizes) says nothing
        let ll16 = ll16.filter(|&c| times.iter().any(|r| r.get(c).copied().flatten().is_some()));
        let kernel_times = tune::columns(&times, kernels.clone());
        match c {
            Collective::Broadcast => d.broadcast(&s.sizes, &kernel_times),
            _ => d.reduce(&s.sizes, &kernel_times),
        }
        // the rooted cap never exceeds the chunk cap, this run's if it derived one
        let cap = s.ll_chunk_max.min(d.ll_chunk_max.unwrap_or(u64::MAX));
        let options = tune::rooted_windows(&s.sizes, &times, ll16, ll63, kernels, cap, ce_min);
        rooted.push((c, ll16.is_some(), options));
    }
    // the cap: least summed cost over the swept collectives with an LL16 column
    // (ties: the smaller cap); without one, the file's LL16 sizes stay as they are
    let mut caps: Vec<u64> = rooted
        .iter()
        .filter(|r| r.1)
        .flat_map(|r| r.2.iter().map(|o| o.0))
        .collect();
    caps.sort_unstable();
    caps.dedup();
    let cost = |a: u64| -> f64 {
        rooted
            .iter()
            .filter(|r| r.1)
            .map(|r| r.2.iter().find(|o| o.0 == a).map_or(f64::INFINITY, |o| o.1))
            .sum()
    };
    let (mut cap, mut least) = (None, f64::INFINITY);
    for a in caps {
        let c = cost(a);
        if c < least - 1e-9 {
            (cap, least) = (Some(a), c);
        }
    }
    if rooted.iter().any(|r| r.1) {
        d.broadcast_reduce_ll_max = cap;
    }
    for (c, has_ll16, options) in &rooted {
        let pick = if *has_ll16 {
            options.iter().find(|o| Some(o.0) == cap)
        } else {
            options.first()
        };
        let window = pick.and_then(|o| o.2);
        match c {
            Collective::Broadcast => d.broadcast_ll63_max = window,
            _ => d.reduce_ll63_max = window,
        }
    }
    d
}

/// `ll up to 131072 B, two-shot up to 16777216 B, push from 33554432 B`.
pub fn describe_choice(s: &Sweep) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut runs: Vec<(usize, u64, u64)> = Vec::new();
    for (size, ch) in s.sizes.iter().zip(&s.choice) {
        let Some(c) = ch else { continue };
        match runs.last_mut() {
            Some((k, _, hi)) if k == c => *hi = *size,
            _ => runs.push((*c, *size, *size)),
        }
    }
    for (c, lo, hi) in runs {
        let name = s.candidates.get(c).copied().unwrap_or("?");
        parts.push(format!("{name} {lo}..{hi} B"));
    }
    if parts.is_empty() {
        "nothing measured".into()
    } else {
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_run_from_small_to_large_kernels() {
        let names = |c, n| candidates(c, n).iter().map(|c| c.name).collect::<Vec<_>>();
        assert_eq!(
            names(Collective::Allreduce, 2),
            ["ll", "two-shot", "push", "ring"]
        );
        // 3+ ranks: the ring with the copy-engine tail last, its threshold its own
        assert_eq!(
            names(Collective::Allreduce, 4),
            ["ll", "two-shot", "push", "ring", "ce"]
        );
        let ce = candidates(Collective::Allreduce, 3)[4];
        assert_eq!(ce.kernel, Some(Kernel::AllreduceRingHead));
        assert_eq!(
            (ce.forced.ar_ring_min, ce.forced.ar_ce_min),
            (Some(1), Some(1))
        );
        for cand in &candidates(Collective::Allreduce, 4)[..4] {
            assert_eq!(cand.forced.ar_ce_min, Some(0), "{}", cand.name);
        }
        assert_eq!(
            names(Collective::Allgather, 2),
            ["ll", "direct", "ring", "ll63"]
        );
        assert_eq!(
            names(Collective::Reducescatter, 8),
            ["ll", "direct", "ring", "push", "ll63"]
        );
        // rooted: LL16 first, LL63 last (a window above the LL16 sizes), derived apart
        assert_eq!(
            names(Collective::Broadcast, 3),
            ["ll16", "direct", "scatter-forward", "chain", "ll63"]
        );
        // 2 ranks: the copy engines after the kernels
        assert_eq!(
            names(Collective::Broadcast, 2),
            ["ll16", "direct", "ll63", "ce"]
        );
        assert_eq!(
            names(Collective::Reduce, 2),
            ["ll16", "worker", "chain", "ll63", "ce"]
        );
        assert_eq!(
            names(Collective::Reduce, 4),
            ["ll16", "all", "worker", "chain", "ll63"]
        );
        assert_eq!(names(Collective::Sendrecv, 4), ["kernels", "ce"]);
        assert!(names(Collective::Alltoall, 4).is_empty());
        // every candidate turns every ring, chain and LL63 window off but its own
        for c in TUNED {
            for cand in candidates(c, 4) {
                let f = cand.forced;
                let on = [
                    f.ar_ring_min,
                    f.ag_ring_min,
                    f.rs_ring_min,
                    f.bcast_chain_min,
                    f.reduce_chain_min,
                    f.bcast_ll63_max,
                    f.reduce_ll63_max,
                    f.ag_ll63_max,
                    f.rs_ll63_max,
                    f.ar_ll63_max,
                ]
                .iter()
                .filter(|v| **v != Some(0))
                .count();
                if cand.kernel.is_none() {
                    // the copy engines or not: only the CE thresholds are forced
                    let ce = (f.bcast_ce_min, f.sendrecv_ce_min);
                    let want = if cand.name == "ce" { 1 } else { 0 };
                    assert_eq!(ce, (Some(want), Some(want)), "{}", cand.name);
                    assert_eq!(on, 10, "the file's kernels: nothing else forced");
                    continue;
                }
                let own = matches!(
                    cand.kernel,
                    Some(
                        Kernel::AllreduceRing
                            | Kernel::AllreduceRingHead
                            | Kernel::AllgatherRing
                            | Kernel::ReducescatterRing
                            | Kernel::BroadcastChain
                            | Kernel::ReduceChain
                            | Kernel::BroadcastLl63
                            | Kernel::ReduceLl63
                            | Kernel::AllgatherLl63
                            | Kernel::ReducescatterLl63
                    )
                );
                assert_eq!(on, usize::from(own), "{} {}", c.name(), cand.name);
            }
        }
        // LL16 on up to the tuner's chunk cap, the rooted cap with it
        let ll16 = candidates(Collective::Reduce, 4)[0];
        assert_eq!(ll16.kernel, Some(Kernel::ReduceLl));
        assert_eq!(
            (ll16.forced.ll_chunk_max, ll16.forced.rooted_ll_max),
            (Some(TUNE_LL_CHUNK_MAX), Some(TUNE_LL_CHUNK_MAX))
        );
        assert!((ll16.applies)(TUNE_LL_CHUNK_MAX, 0) && !(ll16.applies)(2 * TUNE_LL_CHUNK_MAX, 0));
        // the other rooted candidates: LL16 off
        for c in [Collective::Broadcast, Collective::Reduce] {
            for cand in &candidates(c, 2)[1..] {
                let off = cand.forced.ll_chunk_max == Some(0) || cand.name == "ce";
                assert!(off && cand.forced.rooted_ll_max.is_none(), "{}", cand.name);
            }
        }
        // the 2-rank broadcast's copy engine: its own threshold on, LL63 off
        let ce = candidates(Collective::Broadcast, 2)[3];
        assert!(ce.kernel.is_none() && ce.name == "ce");
        assert_eq!(
            (ce.forced.bcast_ce_min, ce.forced.bcast_ll63_max),
            (Some(1), Some(0))
        );
        // the 2-rank reduce's copy engine: its own threshold on, every kernel window off
        let ce = candidates(Collective::Reduce, 2)[4];
        assert!(ce.kernel.is_none() && ce.name == "ce");
        assert_eq!(ce.forced.reduce_ce_min, Some(1));
        assert_eq!(
            (
                ce.forced.reduce_chain_min,
                ce.forced.reduce_ll63_max,
                ce.forced.bcast_ce_min
            ),
            (Some(0), Some(0), Some(0))
        );
        assert!(!(ce.applies)(TUNE_RING_MIN - 16, 0) && (ce.applies)(TUNE_RING_MIN, 0));
        let ring = &candidates(Collective::Reducescatter, 4)[2];
        assert!(!(ring.applies)(TUNE_RING_MIN / 2, TUNE_RING_MIN / 8));
        assert!((ring.applies)(TUNE_RING_MIN, TUNE_RING_MIN / 4));
        assert_eq!(
            (ring.forced.rs_ring_min, ring.forced.ag_ring_min),
            (Some(1), Some(0))
        );
        let ar = candidates(Collective::Allreduce, 4);
        assert!((ar[0].applies)(TUNE_LL_MAX, 0) && !(ar[0].applies)(TUNE_LL_MAX + 8, 0));
        assert!(!(ar[0].applies)(1028, 0), "LL needs 8-byte multiples");
        assert!(!(ar[2].applies)(TUNE_PUSH_MIN - 1, 0) && (ar[2].applies)(TUNE_PUSH_MIN, 0));
        assert_eq!(ar[1].forced.ll_max, Some(0), "two-shot: never LL");
        assert_eq!(ar[1].forced.push_min, Some(0), "two-shot: never push");
        let ag = candidates(Collective::Allgather, 4);
        assert!(
            (ag[0].applies)(0, TUNE_LL_CHUNK_MAX) && !(ag[0].applies)(0, 2 * TUNE_LL_CHUNK_MAX)
        );
        assert!(
            ag[0].forced.ll_max >= ag[0].forced.ll_chunk_max,
            "the LL chunk is capped at ll_max"
        );
    }

    fn sweep(c: Collective, sizes: &[u64], chunks: &[u64], times: &[&[f64]]) -> Sweep {
        let times: Vec<Vec<Option<f64>>> = times
            .iter()
            .map(|r| r.iter().map(|&t| (t > 0.0).then_some(t)).collect())
            .collect();
        // the tables here have no LL16 column (rooted_ll16_from_synthetic_sweeps has)
        Sweep {
            collective: c,
            candidates: candidates(c, 4)
                .iter()
                .map(|c| c.name)
                .filter(|n| *n != "ll16")
                .collect(),
            sizes: sizes.to_vec(),
            chunks: chunks.to_vec(),
            choice: tune::assign(&times),
            times,
            ll_chunk_max: 0,
        }
    }

    #[test]
    fn ring_and_chain_thresholds_from_synthetic_sweeps() {
        let m = 1u64 << 20;
        let sizes = [m, 16 * m, 256 * m];
        // all-reduce [ll, two-shot, push, ring]: ring wins from 256M
        let ar = sweep(
            Collective::Allreduce,
            &sizes,
            &sizes,
            &[
                &[30.0, 14.0, 15.0, 40.0],
                &[0.0, 90.0, 86.0, 91.0],
                &[0.0, 1200.0, 1170.0, 1110.0],
            ],
        );
        // all-gather [ll, direct, ring]: ring from 16M; reduce-scatter [ll, direct,
        // ring, push]: ring never, push at 16M only
        let chunks = [m / 4, 4 * m, 64 * m];
        let ag = sweep(
            Collective::Allgather,
            &sizes,
            &chunks,
            &[
                &[12.0, 11.0, 20.0],
                &[0.0, 45.0, 44.0],
                &[0.0, 600.0, 560.0],
            ],
        );
        let rs = sweep(
            Collective::Reducescatter,
            &sizes,
            &chunks,
            &[
                &[12.0, 11.0, 20.0, 13.0],
                &[0.0, 48.0, 52.0, 40.0],
                &[0.0, 620.0, 700.0, 640.0],
            ],
        );
        // broadcast [direct, scatter-forward, chain]: sf at 16M, chain at 256M
        let bc = sweep(
            Collective::Broadcast,
            &sizes,
            &sizes,
            &[
                &[12.0, 13.0, 30.0],
                &[80.0, 66.0, 84.0],
                &[900.0, 820.0, 785.0],
            ],
        );
        // reduce [worker, chain]: chain from 16M
        let rd = sweep(
            Collective::Reduce,
            &sizes,
            &sizes,
            &[&[14.0, 30.0], &[82.0, 76.0], &[960.0, 790.0]],
        );
        let d = derive(&[ar, ag, rs, bc, rd]);
        assert_eq!(d.allreduce_ring_min, Some(256 * m));
        assert_eq!(d.allreduce_push_min, Some(16 * m));
        assert_eq!(d.allgather_ring_min, Some(16 * m));
        assert_eq!(d.reducescatter_ring_min, Some(0), "never won: 0 = never");
        assert_eq!(
            (d.reducescatter_push_min, d.reducescatter_push_max),
            (Some(16 * m), Some(16 * m))
        );
        assert_eq!(
            d.ll_chunk_max,
            Some(0),
            "direct beat LL at the smallest chunk"
        );
        assert_eq!(
            (d.broadcast_sf_min, d.broadcast_chain_min),
            (Some(16 * m), Some(256 * m))
        );
        assert_eq!(d.reduce_chain_min, Some(16 * m));
        assert_eq!(
            d.reduce_all_max, None,
            "two columns: 2 ranks, nothing to derive"
        );
        // reduce on 4 ranks [all, worker, chain]: all to 1M, worker at 16M, chain at 256M
        let rd4 = sweep(
            Collective::Reduce,
            &sizes,
            &sizes,
            &[
                &[11.0, 14.0, 30.0],
                &[90.0, 82.0, 86.0],
                &[1100.0, 960.0, 790.0],
            ],
        );
        let d = derive(&[rd4]);
        assert_eq!(d.reduce_all_max, Some(m));
        assert_eq!(d.reduce_chain_min, Some(256 * m));
    }

    #[test]
    fn ce_thresholds_from_synthetic_sweeps() {
        let m = 1u64 << 20;
        let sizes = [m, 16 * m, 64 * m, 256 * m, 1024 * m];
        // [kernels, ce]: the copy engines lose small, win from 64M on
        let times: &[&[f64]] = &[
            &[10.0, 30.0],
            &[60.0, 70.0],
            &[200.0, 190.0],
            &[760.0, 716.0],
            &[2930.0, 2740.0],
        ];
        let sr = sweep(Collective::Sendrecv, &sizes, &sizes, times);
        let bc = Sweep {
            candidates: vec!["kernels", "ce"],
            ..sweep(Collective::Broadcast, &sizes, &sizes, times)
        };
        let d = derive(&[sr.clone(), bc]);
        assert_eq!(d.sendrecv_ce_min, Some(64 * m));
        assert_eq!(d.broadcast_ce_min, Some(64 * m));
        // a broadcast sweep with a "ce" column derives nothing else
        assert_eq!(d.broadcast_sf_min, None);
        assert_eq!(d.broadcast_chain_min, None);
        // a loss at the largest size: never
        let mut lose = times.iter().map(|r| r.to_vec()).collect::<Vec<_>>();
        lose[4][1] = 2950.0;
        let rows: Vec<&[f64]> = lose.iter().map(|r| r.as_slice()).collect();
        let sr = sweep(Collective::Sendrecv, &sizes, &sizes, &rows);
        assert_eq!(derive(&[sr]).sendrecv_ce_min, Some(0));
        // no sweep: not measured (the file's value stays)
        assert_eq!(derive(&[]).sendrecv_ce_min, None);
        // all-reduce on 3+ ranks [ll, two-shot, push, ring, ce]: the ring from 64M, its
        // copy-engine tail from 1G (a tie at 256M is not a win at every larger size:
        // it is, ties count); the kernels' thresholds from the first four columns
        let ar = sweep(
            Collective::Allreduce,
            &sizes,
            &sizes,
            &[
                &[9.0, 12.0, 0.0, 30.0, 45.0],
                &[70.0, 65.0, 64.0, 82.0, 110.0],
                &[300.0, 290.0, 286.0, 285.0, 314.0],
                &[1150.0, 1130.0, 1120.0, 1111.0, 1128.0],
                &[4800.0, 4500.0, 4450.0, 4400.0, 4353.0],
            ],
        );
        let d = derive(std::slice::from_ref(&ar));
        assert_eq!(d.allreduce_ring_min, Some(64 * m));
        assert_eq!(d.allreduce_push_min, Some(16 * m));
        assert_eq!(d.allreduce_ce_min, Some(1024 * m));
        // a sweep without the column (2 ranks): not measured
        let ar2 = Sweep {
            candidates: vec!["ll", "two-shot", "push", "ring"],
            times: tune::first_columns(&ar.times, 4),
            ..ar
        };
        assert_eq!(derive(&[ar2]).allreduce_ce_min, None);
        // 2-rank reduce [worker, chain, ll63, ce]: ce from 256M; the kernels' thresholds
        // and LL63's window from the first three columns
        let rd = Sweep {
            candidates: vec!["worker", "chain", "ll63", "ce"],
            ll_chunk_max: m,
            ..sweep(
                Collective::Reduce,
                &sizes,
                &sizes,
                &[
                    &[9.0, 30.0, 8.0, 40.0],
                    &[60.0, 58.0, 50.0, 70.0],
                    &[200.0, 192.0, 190.0, 195.0],
                    &[760.0, 745.0, 750.0, 727.0],
                    &[2930.0, 2940.0, 2950.0, 2767.0],
                ],
            )
        };
        let d = derive(&[rd]);
        assert_eq!(d.reduce_ce_min, Some(256 * m));
        assert_eq!(d.reduce_ll63_max, Some(64 * m));
        assert_eq!(d.reduce_chain_min, Some(16 * m));
        assert_eq!(
            d.broadcast_ce_min, None,
            "a reduce sweep sets the reduce's key only"
        );
    }

    #[test]
    fn rooted_ll16_from_synthetic_sweeps() {
        let k = 1u64 << 10;
        let m = 1u64 << 20;
        let sizes = [
            64 * k,
            128 * k,
            256 * k,
            512 * k,
            m,
            16 * m,
            256 * m,
            1024 * m,
        ];
        let rooted = |c, names: &[&'static str], times: &[&[f64]]| Sweep {
            candidates: names.to_vec(),
            ll_chunk_max: m,
            ..sweep(c, &sizes, &sizes, times)
        };
        // 2-rank reduce [ll16, worker, chain, ll63, ce]: LL16 to 128K, LL63 to 16M, the
        // copy engine from 256M
        let rd = rooted(
            Collective::Reduce,
            &["ll16", "worker", "chain", "ll63", "ce"],
            &[
                &[3.0, 6.0, 0.0, 3.5, 0.0],
                &[3.4, 6.5, 0.0, 3.6, 0.0],
                &[4.1, 7.0, 0.0, 3.8, 0.0],
                &[5.6, 8.0, 0.0, 4.6, 0.0],
                &[8.4, 10.0, 30.0, 6.0, 40.0],
                &[0.0, 60.0, 58.0, 50.0, 70.0],
                &[0.0, 760.0, 745.0, 750.0, 727.0],
                &[0.0, 2930.0, 2940.0, 2950.0, 2767.0],
            ],
        );
        // 2-rank broadcast [ll16, direct, ll63, ce]: alone, LL16 would go to 256K; LL63
        // beats the direct kernel up to 1G, but the copy engine takes 256M on
        let bc = rooted(
            Collective::Broadcast,
            &["ll16", "direct", "ll63", "ce"],
            &[
                &[3.2, 5.0, 3.6, 0.0],
                &[3.6, 5.5, 3.7, 0.0],
                &[4.0, 6.0, 4.1, 0.0],
                &[5.7, 7.0, 4.8, 0.0],
                &[8.5, 9.0, 6.2, 30.0],
                &[0.0, 55.0, 45.0, 60.0],
                &[0.0, 720.0, 710.0, 700.0],
                &[0.0, 2800.0, 2790.0, 2750.0],
            ],
        );
        let d = derive(&[bc.clone(), rd.clone()]);
        assert_eq!(d.broadcast_reduce_ll_max, Some(128 * k), "one cap for both");
        assert_eq!(d.reduce_ll63_max, Some(16 * m));
        assert_eq!(
            d.broadcast_ll63_max,
            Some(16 * m),
            "the window ends below the copy engine's sizes"
        );
        assert_eq!(
            (d.reduce_ce_min, d.broadcast_ce_min),
            (Some(256 * m), Some(256 * m))
        );
        assert_eq!(d.reduce_chain_min, Some(16 * m));
        assert_eq!((d.broadcast_sf_min, d.broadcast_chain_min), (None, None));
        // broadcast alone: its own best cap
        let d = derive(std::slice::from_ref(&bc));
        assert_eq!(d.broadcast_reduce_ll_max, Some(256 * k));
        // LL16 slower than LL63 everywhere: cap 0 (never LL16)
        let mut fast = rd.clone();
        for r in &mut fast.times[..5] {
            r[3] = r[0].map(|t| t * 0.9);
        }
        let d = derive(&[fast]);
        assert_eq!(
            (d.broadcast_reduce_ll_max, d.reduce_ll63_max),
            (Some(0), Some(16 * m))
        );
        // a sweep from above the LL16 sizes: the cap is not measured, LL63 starts above
        // the chunk cap
        let big = Sweep {
            sizes: sizes[4..].to_vec(),
            chunks: sizes[4..].to_vec(),
            times: rd.times[4..]
                .iter()
                .map(|r| [vec![None], r[1..].to_vec()].concat())
                .collect(),
            ..rd.clone()
        };
        let d = derive(&[big]);
        assert_eq!(
            (d.broadcast_reduce_ll_max, d.reduce_ll63_max),
            (None, Some(16 * m))
        );
    }

    #[test]
    fn ll63_window_from_synthetic_sweeps() {
        let k = 1u64 << 10;
        let m = 1u64 << 20;
        let sizes = [256 * k, m, 16 * m, 256 * m];
        // reduce on 4 ranks [all, worker, chain, ll63]: LL63 fastest at 1M and 16M, slower
        // at 256M; at 256K too, but that size is the LL16 kernel's (floor)
        let times: &[&[f64]] = &[
            &[7.0, 9.0, 30.0, 6.0],
            &[12.0, 13.0, 30.0, 11.0],
            &[90.0, 82.0, 86.0, 65.0],
            &[1100.0, 960.0, 790.0, 850.0],
        ];
        let rd = Sweep {
            ll_chunk_max: 256 * k,
            ..sweep(Collective::Reduce, &sizes, &sizes, times)
        };
        let d = derive(std::slice::from_ref(&rd));
        assert_eq!(d.reduce_ll63_max, Some(16 * m));
        // the other thresholds come from the first three columns only
        assert_eq!(d.reduce_all_max, Some(m));
        assert_eq!(d.reduce_chain_min, Some(256 * m));
        // every size at or under the floor: never
        let high = Sweep {
            ll_chunk_max: 256 * m,
            ..rd.clone()
        };
        assert_eq!(derive(&[high]).reduce_ll63_max, Some(0));
        // LL63 slower everywhere above the floor: never; and a lone win between two
        // losses does not open a window worth its neighbours' cost
        let slow: &[&[f64]] = &[
            &[7.0, 9.0, 30.0, 6.0],
            &[12.0, 13.0, 30.0, 14.0],
            &[90.0, 82.0, 86.0, 81.0],
            &[1100.0, 960.0, 790.0, 900.0],
        ];
        let rd = Sweep {
            ll_chunk_max: 256 * k,
            ..sweep(Collective::Reduce, &sizes, &sizes, slow)
        };
        assert_eq!(derive(&[rd]).reduce_ll63_max, Some(0));
        // broadcast [direct, scatter-forward, chain, ll63]
        let bc: &[&[f64]] = &[
            &[8.0, 9.0, 30.0, 7.0],
            &[13.0, 11.0, 30.0, 10.0],
            &[80.0, 66.0, 84.0, 70.0],
            &[900.0, 820.0, 785.0, 850.0],
        ];
        let bc = sweep(Collective::Broadcast, &sizes, &sizes, bc);
        let d = derive(&[bc]);
        assert_eq!(
            d.broadcast_ll63_max,
            Some(m),
            "floor 0: from the smallest size"
        );
        assert_eq!(d.broadcast_sf_min, Some(m));
    }

    #[test]
    fn thresholds_from_synthetic_sweeps() {
        let k = 1024u64;
        let ar = sweep(
            Collective::Allreduce,
            &[64 * k, 256 * k, 1024 * k, 32 * k * k],
            &[64 * k, 256 * k, 1024 * k, 32 * k * k],
            &[
                &[8.0, 10.0, 0.0],
                &[12.0, 12.5, 0.0],
                &[30.0, 16.0, 18.0],
                &[0.0, 100.0, 92.0],
            ],
        );
        assert_eq!(
            describe_choice(&ar),
            "ll 65536..262144 B, two-shot 1048576..1048576 B, push 33554432..33554432 B"
        );
        // chunks are a quarter of the size on 4 ranks
        let ag = sweep(
            Collective::Allgather,
            &[4 * k, 64 * k, 1024 * k],
            &[k, 16 * k, 256 * k],
            &[&[5.0, 8.0], &[6.0, 8.0], &[30.0, 14.0]],
        );
        let rs = sweep(
            Collective::Reducescatter,
            &[4 * k, 64 * k, 1024 * k],
            &[k, 16 * k, 256 * k],
            &[&[5.0, 8.0], &[9.0, 8.0], &[30.0, 14.0]],
        );
        let bc = sweep(
            Collective::Broadcast,
            &[64 * k, 1024 * k],
            &[64 * k, 1024 * k],
            &[&[10.0, 12.0], &[40.0, 30.0]],
        );
        let d = derive(&[ar.clone(), ag.clone(), rs.clone(), bc]);
        assert_eq!(d.allreduce_ll_max, Some(256 * k));
        assert_eq!(d.allreduce_push_min, Some(32 * k * k));
        // all-gather alone: LL to 16K; with reduce-scatter (loses at 16K by 12.5%,
        // all-gather wins by 25%): the sum still keeps LL to 16K
        assert_eq!(d.ll_chunk_max, Some(16 * k));
        assert_eq!(d.broadcast_sf_min, Some(1024 * k));
        // no ring / chain columns: those thresholds stay unmeasured (None) or, where the
        // column exists but never won, 0 = never
        assert_eq!(
            (
                d.allreduce_ring_min,
                d.allgather_ring_min,
                d.reduce_chain_min
            ),
            (None, None, None)
        );
        let d = derive(&[rs]);
        assert_eq!(d.ll_chunk_max, Some(k), "reduce-scatter alone: LL to 1K");
        let d = derive(&[ar]);
        assert_eq!((d.ll_chunk_max, d.broadcast_sf_min), (None, None));
        assert_eq!(derive(&[]), Derived::default());
    }
}
