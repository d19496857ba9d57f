//! # commhal-conformance — does a backend keep its promises?
//!
//! Each case of `docs/conformance.md` is written once ([`cases`]) and fanned out over the
//! backend's channel kinds (memory, port, switch) and memory kind. Ids are
//! `<backend>/<channel>/<case>[/<params>]`. A case that needs a guarantee the backend
//! does not claim is *not-supported* (counted, never passed); claimed ones are asserted.
//! Per-backend known failures live in `conformance/expectations/<backend>.toml`.
//!
//! | module | holds |
//! |---|---|
//! | [`case`] | [`Case`], outcomes, `ensure!`/`fail!` |
//! | [`cases`] | the case list and bodies (`setup` builds channels; `p2p` memory+port cases; `special`; `switch`; `collectives`: every collective × algorithm and a dead peer) |
//! | [`runner`] | [`run`]: ranks as threads or processes, bounded cases, watchdog; the child entry |
//! | [`report`] | merging ranks, expectations, the table/JSON and `N passed, N failed, N skipped` |
//! | [`expect`] | expectations files |
//! | [`world`] | the plan every rank shares, the per-case context |
//! | [`cli`] | [`ConformanceArgs`] and [`cli_main`] for `commhal conformance` |
//! | `hostmem` | the only `unsafe`: host access to host-addressable regions |
//!
//! **Entry points.** `run(&RunOptions) -> Report`; `cli_main(ConformanceArgs) -> i32`.
//! Any binary that runs the suite with ranks as processes must start `main` with
//! `if let Some(code) = commhal_conformance::child_main_if_requested() { std::process::exit(code) }`.
#![warn(missing_docs)]

pub mod case;
pub mod cases;
pub mod cli;
pub mod expect;
#[cfg(feature = "gpu")]
pub mod gpu;
mod hostmem;
pub mod report;
mod rng;
pub mod runner;
pub mod world;

pub use case::{Case, ChannelKind};
pub use cli::{ConformanceArgs, cli_main};
pub use report::{CaseReport, Report, Status};
pub use runner::{Mode, RunOptions, child_main_if_requested, run};
