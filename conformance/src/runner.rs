//! Running the suite: ranks as threads ([`Mode::Threads`], `InProcBootstrap`) or as
//! processes ([`Mode::Processes`], `TcpBootstrap`), each rank running every case in
//! the same order with a bootstrap barrier before each.
//!
//! **Bounds.** Every channel wait has `wait_timeout`; every case runs on its own thread
//! and a rank gives up on it after `case_timeout` (reported as a hang; the rank then
//! stops running cases, since the hung case may still hold shared state); the parent
//! has an overall watchdog that kills child processes (or abandons rank threads).
//!
//! **Processes.** The runner re-executes `program` (default: the current executable)
//! with `child_args` and the environment: `COMMHAL_CONFORMANCE_CHILD` (where to write
//! the rank's JSON result), `COMMHAL_CONFORMANCE_PLAN` (the plan as JSON),
//! `COMMHAL_RANK`, `COMMHAL_WORLD_SIZE`, `COMMHAL_UNIQUE_ID` and
//! `COMMHAL_BOOTSTRAP_TIMEOUT_MS`. The program must call
//! [`child_main_if_requested`] first thing in `main` (or in a test named by
//! `child_args`) and exit with the code it returns.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use commhal_hal::bootstrap::{Bootstrap, InProcBootstrap, TcpBootstrap, UniqueId};
use commhal_hal::settings::launch::{BOOTSTRAP_TIMEOUT_MS, RANK, UNIQUE_ID, WORLD_SIZE};
use commhal_hal::settings::tests::{CONFORMANCE_CHILD, CONFORMANCE_PLAN};

use crate::case::{Case, Failure};
use crate::expect::{self, Expectations};
use crate::report::{RankOutcome, RankOutput, RankResult, Report};
use crate::world::{Ctx, Plan, TAGS_PER_CASE, World, guarantees_of};

/// How ranks run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One process per rank (re-exec), `TcpBootstrap`, descriptors passed with SCM_RIGHTS.
    Processes,
    /// One thread per rank in this process, `InProcBootstrap`.
    Threads,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Registry name of the backend.
    pub backend: String,
    /// Number of ranks (≥ 2).
    pub ranks: u32,
    /// Small counts (CI tier).
    pub quick: bool,
    /// Threads or processes.
    pub mode: Mode,
    /// `[backend.NAME]` options as TOML text (e.g. `faults = "early-flush"` for host-emu).
    pub backend_options: String,
    /// Run only cases whose id contains one of these (empty: all).
    pub filter: Vec<String>,
    /// Bound of every channel wait.
    pub wait_timeout: Duration,
    /// Bound of one case on one rank.
    pub case_timeout: Duration,
    /// Overall watchdog (default: derived from the case count).
    pub overall_timeout: Option<Duration>,
    /// Expectations file (default `conformance/expectations/<backend>.toml`).
    pub expectations: Option<PathBuf>,
    /// Program to re-execute for child ranks (default: the current executable).
    pub program: Option<PathBuf>,
    /// Arguments for the child program (tests: `["--exact", "child_entry"]`).
    pub child_args: Vec<String>,
}

impl RunOptions {
    /// Defaults: processes, full tier, 10 s waits, 120 s per case, no filter.
    pub fn new(backend: &str, ranks: u32) -> RunOptions {
        RunOptions {
            backend: backend.to_string(),
            ranks,
            quick: false,
            mode: Mode::Processes,
            backend_options: String::new(),
            filter: Vec::new(),
            wait_timeout: Duration::from_secs(10),
            case_timeout: Duration::from_secs(120),
            overall_timeout: None,
            expectations: None,
            program: None,
            child_args: Vec::new(),
        }
    }

    /// What this crate's integration tests run: the quick tier in `mode`, 20 s waits,
    /// 60 s per case, only the cases matching `filter` (none: every case); rank
    /// processes re-execute the test binary's `child_entry` test (which calls
    /// [`crate::child_main_if_requested`]).
    pub fn for_test(backend: &str, ranks: u32, mode: Mode, filter: &[&str]) -> RunOptions {
        let mut o = RunOptions::new(backend, ranks);
        o.quick = true;
        o.mode = mode;
        o.filter = filter.iter().map(|f| f.to_string()).collect();
        o.wait_timeout = Duration::from_secs(20);
        o.case_timeout = Duration::from_secs(60);
        o.child_args = vec![
            "--exact".into(),
            "child_entry".into(),
            "--test-threads=1".into(),
        ];
        o
    }

    fn plan(&self) -> Plan {
        Plan {
            backend: self.backend.clone(),
            ranks: self.ranks,
            quick: self.quick,
            backend_options: self.backend_options.clone(),
            filter: self.filter.clone(),
            wait_timeout_ms: self.wait_timeout.as_millis() as u64,
            case_timeout_ms: self.case_timeout.as_millis() as u64,
        }
    }
}

/// Run the suite and merge every rank's results. Never panics; problems outside cases
/// (a rank that did not start, the watchdog) are in [`Report::errors`] and count as
/// failures.
pub fn run(opts: &RunOptions) -> Report {
    let start = Instant::now();
    let plan = opts.plan();
    let mut errors = Vec::new();
    let exp_path = opts
        .expectations
        .clone()
        .unwrap_or_else(|| expect::default_dir().join(format!("{}.toml", opts.backend)));
    let expectations = Expectations::load(&exp_path).unwrap_or_else(|e| {
        errors.push(e);
        Expectations::default()
    });
    let watchdog = opts.overall_timeout.unwrap_or(
        plan.case_timeout() * 4 + Duration::from_secs(if opts.quick { 300 } else { 3600 }),
    );
    let outputs = if opts.ranks < 2 {
        errors.push(format!(
            "{} rank(s) asked for: the suite needs at least 2 (use --ranks 2 or more)",
            opts.ranks
        ));
        Vec::new()
    } else {
        match opts.mode {
            Mode::Threads => run_threads(&plan, watchdog, &mut errors),
            Mode::Processes => run_processes(opts, &plan, watchdog, &mut errors),
        }
    };
    let mode = match opts.mode {
        Mode::Threads => "threads",
        Mode::Processes => "processes",
    };
    Report::merge(
        (opts.backend.clone(), opts.ranks, opts.quick, mode.into()),
        &outputs,
        &expectations,
        errors,
        start.elapsed().as_secs_f64() * 1e3,
    )
}

fn run_threads(plan: &Plan, watchdog: Duration, errors: &mut Vec<String>) -> Vec<RankOutput> {
    let boots = InProcBootstrap::create_with_timeout(plan.ranks, plan.bootstrap_timeout());
    let (tx, rx) = mpsc::channel();
    for boot in boots {
        let (tx, plan) = (tx.clone(), plan.clone());
        let rank = boot.rank();
        let spawned = std::thread::Builder::new()
            .name(format!("conformance-rank{rank}"))
            .spawn(move || {
                let _ = tx.send(run_rank(&plan, Arc::new(boot)));
            });
        if let Err(e) = spawned {
            errors.push(format!("spawning rank {rank}'s thread: {e}"));
        }
    }
    drop(tx);
    let deadline = Instant::now() + watchdog;
    let mut outputs = Vec::new();
    while outputs.len() < plan.ranks as usize {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(o) => outputs.push(o),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                errors.push(format!(
                    "watchdog: ranks still running after {} s were abandoned",
                    watchdog.as_secs()
                ));
                break;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    outputs
}

fn run_processes(
    opts: &RunOptions,
    plan: &Plan,
    watchdog: Duration,
    errors: &mut Vec<String>,
) -> Vec<RankOutput> {
    let program = match opts
        .program
        .clone()
        .map(Ok)
        .unwrap_or_else(std::env::current_exe)
    {
        Ok(p) => p,
        Err(e) => {
            errors.push(format!(
                "finding the current executable to re-run as ranks: {e}"
            ));
            return Vec::new();
        }
    };
    let id = match UniqueId::new_local() {
        Ok(id) => id,
        Err(e) => {
            errors.push(format!("making a bootstrap id: {e}"));
            return Vec::new();
        }
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!(
        "commhal-conformance-{}-{nanos}",
        std::process::id()
    ));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        errors.push(format!("creating {}: {e}", dir.display()));
        return Vec::new();
    }
    let plan_json = serde_json::to_string(plan).unwrap_or_default();
    let mut children: Vec<(u32, Option<Child>)> = Vec::new();
    for r in 0..plan.ranks {
        let spawned = Command::new(&program)
            .args(&opts.child_args)
            .env(CONFORMANCE_CHILD.env, result_path(&dir, r))
            .env(CONFORMANCE_PLAN.env, &plan_json)
            .env(RANK.env, r.to_string())
            .env(WORLD_SIZE.env, plan.ranks.to_string())
            .env(UNIQUE_ID.env, id.to_string())
            .env(
                BOOTSTRAP_TIMEOUT_MS.env,
                plan.bootstrap_timeout().as_millis().to_string(),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn();
        match spawned {
            Ok(c) => children.push((r, Some(c))),
            Err(e) => {
                errors.push(format!("starting rank {r} ({}): {e}", program.display()));
                children.push((r, None));
            }
        }
    }
    let deadline = Instant::now() + watchdog;
    let mut statuses = vec![None; plan.ranks as usize];
    loop {
        let mut running = 0;
        for (r, c) in children.iter_mut() {
            if let Some(child) = c {
                match child.try_wait() {
                    Ok(Some(st)) => {
                        statuses[*r as usize] = Some(st.to_string());
                        *c = None;
                    }
                    Ok(None) => running += 1,
                    Err(_) => *c = None,
                }
            }
        }
        if running == 0 {
            break;
        }
        if Instant::now() >= deadline {
            for (r, c) in children.iter_mut() {
                if let Some(child) = c {
                    let _ = child.kill();
                    let _ = child.wait();
                    errors.push(format!(
                        "watchdog: rank {r} still running after {} s was killed",
                        watchdog.as_secs()
                    ));
                }
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut outputs = Vec::new();
    for r in 0..plan.ranks {
        let path = result_path(&dir, r);
        let out = std::fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice::<RankOutput>(&b).ok())
            .unwrap_or_else(|| RankOutput {
                rank: r,
                error: Some(format!(
                    "exited ({}) without writing its results",
                    statuses[r as usize]
                        .as_deref()
                        .unwrap_or("killed or never started")
                )),
                results: Vec::new(),
            });
        outputs.push(out);
    }
    let _ = std::fs::remove_dir_all(&dir);
    outputs
}

fn result_path(dir: &Path, rank: u32) -> PathBuf {
    dir.join(format!("rank-{rank}.json"))
}

/// In a child rank process (`COMMHAL_CONFORMANCE_CHILD` set): run this rank, write its
/// results, and return the exit code for the caller to exit with. `None` in any other
/// process.
///
/// Call it first thing in `main` of any binary that runs [`run`] in process mode:
/// `if let Some(code) = commhal_conformance::child_main_if_requested() { std::process::exit(code) }`
pub fn child_main_if_requested() -> Option<i32> {
    #[cfg(feature = "gpu")]
    if let Some(code) = crate::gpu::launch::child_main_if_requested() {
        return Some(code);
    }
    let out = CONFORMANCE_CHILD.text()?;
    Some(child_main(Path::new(&out)))
}

fn child_main(out: &Path) -> i32 {
    // only for naming the rank in its output: an invalid value fails the bootstrap below
    let rank = RANK.number().ok().flatten().unwrap_or(0) as u32;
    let plan_env = CONFORMANCE_PLAN.env;
    let output = match CONFORMANCE_PLAN
        .text()
        .ok_or_else(|| format!("{plan_env}: not set"))
        .and_then(|j| serde_json::from_str::<Plan>(&j).map_err(|e| format!("{plan_env}: {e}")))
    {
        Err(e) => RankOutput {
            rank,
            error: Some(e),
            results: Vec::new(),
        },
        Ok(plan) => match TcpBootstrap::from_env() {
            Ok(b) => run_rank(&plan, Arc::new(b)),
            Err(e) => RankOutput {
                rank,
                error: Some(format!("bootstrap: {e}")),
                results: Vec::new(),
            },
        },
    };
    let json = serde_json::to_vec(&output).unwrap_or_default();
    let tmp = out.with_extension("tmp");
    match std::fs::write(&tmp, json).and_then(|()| std::fs::rename(&tmp, out)) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("conformance rank {rank}: writing {}: {e}", out.display());
            1
        }
    }
}

/// Why `case` cannot run on this world, decided identically on every rank.
pub fn not_supported(case: &Case, world: &World) -> Option<String> {
    if world.size < case.min_ranks {
        return Some(format!(
            "needs at least {} ranks, this run has {} (use --ranks {})",
            case.min_ranks, world.size, case.min_ranks
        ));
    }
    let Some(g) = guarantees_of(&world.backend, case.channel) else {
        return Some(format!(
            "backend `{}` has no {} transport",
            world.backend.name,
            case.channel.as_str()
        ));
    };
    let claims = g.claims();
    for need in &case.needs {
        let claimed = claims.iter().any(|(n, c)| n == need && *c);
        if !claimed {
            return Some(if *need == "graph-capture" {
                format!(
                    "graph capture is GPU-only (CUDA/HIP graphs): backend `{}` does not claim graph-capture",
                    world.backend.name
                )
            } else {
                format!(
                    "backend `{}` does not claim `{need}` for its {} transport",
                    world.backend.name,
                    case.channel.as_str()
                )
            });
        }
    }
    None
}

/// Run every selected case on one rank.
pub fn run_rank(plan: &Plan, boot: Arc<dyn Bootstrap>) -> RankOutput {
    let rank = boot.rank();
    let world = match World::new(plan.clone(), boot) {
        Ok(w) => Arc::new(w),
        Err(e) => {
            return RankOutput {
                rank,
                error: Some(format!("setup: {e}")),
                results: Vec::new(),
            };
        }
    };
    let cases = crate::cases::all(&world);
    let mut out = RankOutput {
        rank,
        error: None,
        results: Vec::new(),
    };
    let mut stuck: Option<String> = None;
    for (i, case) in cases.iter().enumerate() {
        let id = case.id(&plan.backend);
        if !plan.selects(&id) {
            continue;
        }
        let started = Instant::now();
        let outcome = if let Some(why) = &stuck {
            RankOutcome::Fail {
                message: format!("not run: {why}"),
            }
        } else if let Some(reason) = not_supported(case, &world) {
            RankOutcome::NotSupported { reason }
        } else if let Err(e) = world.boot.barrier() {
            let why = format!("the bootstrap barrier before {id} failed: {e}");
            stuck = Some(why.clone());
            RankOutcome::Fail { message: why }
        } else {
            let ctx = Ctx {
                world: world.clone(),
                tag: (i as u64 + 1) * TAGS_PER_CASE,
            };
            match run_bounded(case, ctx, plan.case_timeout()) {
                Ok(o) => o,
                Err(hang) => {
                    stuck = Some(format!("case {id} hung"));
                    RankOutcome::Fail { message: hang }
                }
            }
        };
        out.results.push(RankResult {
            id,
            number: case.number,
            property: case.property.to_string(),
            outcome,
            millis: started.elapsed().as_secs_f64() * 1e3,
        });
    }
    if stuck.is_none() {
        // Keep the bootstrap alive until every rank is done with its last case.
        if let Err(e) = world.boot.barrier() {
            out.error = Some(format!("final barrier: {e}"));
        }
    }
    out
}

/// Run one case body on its own thread; `Err` when it outlives `limit` (a hang).
fn run_bounded(case: &Case, ctx: Ctx, limit: Duration) -> Result<RankOutcome, String> {
    let (tx, rx) = mpsc::channel();
    let body = case.run.clone();
    let spawned = std::thread::Builder::new()
        .name(format!("case-{}", case.name))
        .spawn(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(&ctx)));
            let _ = tx.send(r);
        });
    if let Err(e) = spawned {
        return Ok(RankOutcome::Fail {
            message: format!("spawning the case thread: {e}"),
        });
    }
    match rx.recv_timeout(limit) {
        Ok(Ok(Ok(note))) => Ok(RankOutcome::Pass { note }),
        Ok(Ok(Err(Failure::Fail(message)))) => Ok(RankOutcome::Fail { message }),
        Ok(Ok(Err(Failure::NotSupported(reason)))) => Ok(RankOutcome::NotSupported { reason }),
        Ok(Err(panic)) => {
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            Ok(RankOutcome::Fail {
                message: format!("the case panicked: {msg}"),
            })
        }
        Err(_) => Err(format!(
            "hang: the case did not finish within {} s (every wait is bounded, so something blocked without a bound)",
            limit.as_secs()
        )),
    }
}
