//! # commhal-gpu-bench — measuring and tuning the GPU communicator
//!
//! The tools around [`commhal_cuda_coll::Comm`], kept out of the library so that what
//! applications load holds only the communicator:
//!
//! | module | holds |
//! |---|---|
//! | [`cli`] | `commhal-gpu-bench` flags (nccl-tests' names), sizes, counts, busbw |
//! | [`check`] | exact inputs and the output checks |
//! | [`bench`](mod@bench) | the benchmark loop and tables, one rank's run ([`bench::run_rank`]) |
//! | [`fault`] | the fault checks: a rank dies, stops or aborts on purpose, the others report it in bound |
//! | [`sweep`] | the tuner's runs: the candidate kernels per collective, their sweeps, the derived thresholds |
//! | [`nccl`] | the comparison (`--compare nccl \| mscclpp`, `--compare-lib`): the library on the same buffers and stream |
//! | [`hang`] | `--stop-rank`: this process stopped on purpose (SIGSTOP), continued by a kernel timer |
//! | [`tune`] | the tuner's arithmetic: timings to one kernel per size, thresholds, the file it writes |
//!
//! `commhal bench --backend cuda-nvlink` and `commhal tune` (the `commhal` CLI) run the
//! same code as the `commhal-gpu-bench` binary.
#![warn(missing_docs)]

pub mod bench;
pub mod check;
pub mod cli;
pub mod fault;
pub mod hang;
pub mod nccl;
pub mod sweep;
pub mod tune;
