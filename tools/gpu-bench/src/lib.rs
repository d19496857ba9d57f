//! # commhal-gpu-bench — measuring and tuning the GPU communicator
//!
//! The tools around [`commhal_cuda_coll::Comm`], kept out of the library so that what
//! applications load holds only the communicator:
//!
//! | module | holds |
//! |---|---|
//! | [`cli`] | `commhal-gpu-bench` flags (nccl-tests' names), sizes, counts, busbw |
//! | [`check`] | exact inputs and the output checks |
//! | [`bench`](mod@bench) | the benchmark loop and tables, the fault checks, the tuner's sweep |
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
pub mod hang;
pub mod nccl;
pub mod tune;
